//! Per-tenant egress policy.
//!
//! Document form (files, API, store):
//! `{"mode": "allowlist", "default_methods": ["GET", "HEAD", "OPTIONS"],
//!   "allow": ["api.github.com", {"host": "registry.example", "methods": ["GET"]},
//!             {"host": "api.example.com", "paths": ["/v1/public/"], "expires_at": "2026-12-31T00:00:00Z"},
//!             {"preset": "package-registries"}],
//!   "deny": ["evil.example", {"host": "api.github.com", "methods": ["DELETE"], "reason": "agents never delete"}],
//!   "dry_run": false}`
//!
//! - `open`: any public host; `allowlist`: only what `allow` names. A tenant
//!   with no policy is `open`. Deny wins in both modes.
//! - A host entry is `host`, `*.domain` (subdomains only, never the apex), an
//!   IP address, or a CIDR range; a host or IP entry may carry `:port`. An
//!   entry without a port matches every port and both schemes. Host entries
//!   are case-insensitive, trailing-dot-insensitive and IDNA-normalized.
//! - A rule object narrows a host entry: `methods` (from the IANA HTTP
//!   method registry, as registered: upper case), `paths` (prefixes of the
//!   normalized path, see [`path`]), `expires_at` (RFC 3339 UTC; past it the
//!   rule is ignored), and on a deny rule a `reason` for the agent (at most
//!   200 printable characters). `{"preset": NAME}` (optionally with
//!   `methods` and `expires_at`) stands for the preset's host entries
//!   ([`presets`]).
//! - `default_methods` is what an allow rule without `methods` allows, and,
//!   in `open` mode, what any host is allowed. A deny rule without `methods`
//!   denies every method (a deny never narrows to the defaults: that would
//!   let more through).
//! - `allow` IP/CIDR entries match only URLs whose host is an IP literal (a
//!   host name must be allowed by name); `deny` IP/CIDR entries match literals
//!   and resolved addresses alike.
//! - Anything else (a bare `*`, a wildcard mid-label, a URL, an unknown
//!   field or method, an empty list, a path that reads two ways, an absurd
//!   expiry, an unknown preset) makes the whole policy unreadable, and an
//!   unreadable policy refuses every request: a typo must never widen
//!   access.
//! - No entry ever opens a special-purpose address: the address guard runs
//!   after the policy, whatever the policy says.
//! - Two stages: the host ([`Policy::check_host`], all a `CONNECT` shows),
//!   and the request ([`Policy::check_request`], its method and path). A host
//!   whose rules look at methods or paths can be judged only request by
//!   request: its tunnel must be terminated, never opened blind.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use gatehouse_core::{Reason, UnixTime};
use http::Method;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::target::{Host, Target, parse_host};

pub mod mcp;
pub mod path;
pub mod presets;
pub mod proposal;

/// `open` or `allowlist`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Any public host (deny rules still apply).
    #[default]
    Open,
    /// Only listed hosts.
    Allowlist,
}

/// One entry as written: a host string, or an object (a rule or a preset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Entry {
    /// `host`, `*.domain`, an IP address or a CIDR range, with an optional port.
    Host(String),
    /// `{"host", "methods"?, "paths"?, "expires_at"?, "reason"?}` or
    /// `{"preset", "methods"?, "expires_at"?}`, checked when the policy is read.
    Object(Map<String, Value>),
}

impl Entry {
    /// A host entry.
    pub fn host(host: impl Into<String>) -> Self {
        Self::Host(host.into())
    }

    /// The host of a plain host entry.
    pub fn as_host(&self) -> Option<&str> {
        match self {
            Self::Host(host) => Some(host),
            Self::Object(_) => None,
        }
    }
}

/// A host entry as written; an object as its compact JSON.
impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Host(host) => f.write_str(host),
            Self::Object(object) => f.write_str(&Value::Object(object.clone()).to_string()),
        }
    }
}

impl From<&str> for Entry {
    fn from(host: &str) -> Self {
        Self::host(host)
    }
}

/// The policy document exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// `open` or `allowlist`.
    pub mode: Mode,
    /// What an allow rule without `methods` allows (and, `open`, any host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_methods: Option<Vec<String>>,
    /// Allowed destinations.
    #[serde(default)]
    pub allow: Vec<Entry>,
    /// Denied destinations (both modes).
    #[serde(default)]
    pub deny: Vec<Entry>,
    /// Record what would be refused, without refusing (address checks excluded).
    #[serde(default)]
    pub dry_run: bool,
}

/// Why a tenant's policy cannot be applied: it is unreadable (the text names
/// the entry; policies are operator data, not secrets), or nothing can vouch
/// for what the current one is (`store_unavailable`). Either refuses every
/// request of the tenant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct PolicyError {
    /// `policy_unreadable` or `store_unavailable`.
    pub reason: Reason,
    /// What is wrong.
    pub detail: String,
}

impl PolicyError {
    /// The document does not parse or holds a bad entry.
    pub fn unreadable(detail: impl Into<String>) -> Self {
        Self { reason: Reason::PolicyUnreadable, detail: detail.into() }
    }

    /// The store cannot say which policy is current.
    pub fn unavailable() -> Self {
        Self {
            reason: Reason::StoreUnavailable,
            detail: "the policy store cannot vouch for the current policy".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// An exact host name.
    Exact(String),
    /// `*.domain`: strict subdomains of `domain`.
    Subdomains(String),
    /// An IP address.
    Ip(IpAddr),
    /// A CIDR range (never with a port).
    Net(IpNet),
}

/// Where a rule applies: a parsed host entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRule {
    pattern: Pattern,
    port: Option<u16>,
}

impl HostRule {
    fn parse(entry: &str) -> Result<Self, String> {
        let e = entry.trim();
        if e.is_empty() {
            return Err("empty".into());
        }
        if e.contains("://") || e.contains(['?', '#', '@']) {
            return Err("give a host, *.domain, IP address or CIDR range, not a URL".into());
        }
        if let Some((addr, len)) = e.split_once('/') {
            let net: IpNet = format!("{addr}/{len}").parse().map_err(|_| "not a CIDR range".to_owned())?;
            if net != net.trunc() {
                return Err("CIDR range has host bits set".into());
            }
            return Ok(Self { pattern: Pattern::Net(net), port: None });
        }
        if let Ok(ip) = e.parse::<IpAddr>() {
            return Ok(Self { pattern: Pattern::Ip(ip), port: None });
        }
        // `[v6]:port`, `host:port`, or a bare host.
        let (host, port) = if let Some(inner) = e.strip_prefix('[') {
            let (ip, rest) = inner.split_once(']').ok_or("unclosed [")?;
            let ip: IpAddr = ip.parse().map_err(|_| "not an IPv6 address".to_owned())?;
            let port =
                rest.strip_prefix(':').map(parse_port).transpose().map_err(|()| "bad port".to_owned())?;
            if port.is_none() && !rest.is_empty() {
                return Err("unexpected text after ]".into());
            }
            return Ok(Self { pattern: Pattern::Ip(ip), port });
        } else {
            match e.rsplit_once(':') {
                Some((h, p)) => (h, Some(parse_port(p).map_err(|()| "bad port".to_owned())?)),
                None => (e, None),
            }
        };
        let pattern = if let Some(domain) = host.strip_prefix("*.") {
            match parse_host(domain) {
                Ok(Host::Name(name)) if !domain.contains('*') => Pattern::Subdomains(name),
                _ => return Err("*. must be followed by a domain name".into()),
            }
        } else if host.contains('*') {
            return Err("a wildcard is allowed only as the whole first label (*.domain)".into());
        } else {
            match parse_host(host) {
                Ok(Host::Name(name)) => Pattern::Exact(name),
                Ok(Host::Ip(ip)) => Pattern::Ip(ip),
                Err(_) => return Err("not a valid host name".into()),
            }
        };
        Ok(Self { pattern, port })
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Matches the request's host (and port). IP and CIDR entries match IP
    /// literal hosts only.
    fn matches_host(&self, host: &Host, port: u16) -> bool {
        self.port_matches(port)
            && match (&self.pattern, host) {
                (Pattern::Exact(e), Host::Name(n)) => e == n,
                (Pattern::Subdomains(d), Host::Name(n)) => {
                    n.len() > d.len() + 1
                        && n.ends_with(d.as_str())
                        && n.as_bytes()[n.len() - d.len() - 1] == b'.'
                }
                (Pattern::Ip(a), Host::Ip(b)) => a == b,
                (Pattern::Net(net), Host::Ip(ip)) => net.contains(ip),
                _ => false,
            }
    }

    /// Matches a resolved address (deny rules only).
    fn matches_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port_matches(port)
            && match &self.pattern {
                Pattern::Ip(a) => *a == ip || ipv4_mapped(ip).is_some_and(|v4| *a == v4),
                Pattern::Net(net) => net.contains(&ip) || ipv4_mapped(ip).is_some_and(|v4| net.contains(&v4)),
                _ => false,
            }
    }
}

fn ipv4_mapped(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
        IpAddr::V4(_) => None,
    }
}

fn parse_port(p: &str) -> Result<u16, ()> {
    if p.is_empty() || p.starts_with('0') || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    p.parse().map_err(|_| ())
}

/// The methods of the IANA HTTP Method Registry a rule may name (`PRI`,
/// HTTP/2's connection preface, and the reserved `*` are no request's).
const KNOWN_METHODS: &[&str] = &[
    "ACL",
    "BASELINE-CONTROL",
    "BIND",
    "CHECKIN",
    "CHECKOUT",
    "CONNECT",
    "COPY",
    "DELETE",
    "GET",
    "HEAD",
    "LABEL",
    "LINK",
    "LOCK",
    "MERGE",
    "MKACTIVITY",
    "MKCALENDAR",
    "MKCOL",
    "MKREDIRECTREF",
    "MKWORKSPACE",
    "MOVE",
    "OPTIONS",
    "ORDERPATCH",
    "PATCH",
    "POST",
    "PROPFIND",
    "PROPPATCH",
    "PUT",
    "QUERY",
    "REBIND",
    "REPORT",
    "SEARCH",
    "TRACE",
    "UNBIND",
    "UNCHECKOUT",
    "UNLINK",
    "UNLOCK",
    "UPDATE",
    "UPDATEREDIRECTREF",
    "VERSION-CONTROL",
];
/// The longest reason a deny rule gives the agent.
pub const MAX_RULE_REASON: usize = 200;
/// Paths one rule may name.
const MAX_RULE_PATHS: usize = 64;
/// Expiry bounds (2000-01-01 and 2100-01-01, UTC): anything outside is a typo.
const EXPIRY_BOUNDS: (UnixTime, UnixTime) = (946_684_800, 4_102_444_800);

/// One rule: where, and optionally which methods and paths, until when,
/// and (deny) why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    host: HostRule,
    methods: Option<Vec<Method>>,
    paths: Option<Vec<String>>,
    expires_at: Option<UnixTime>,
    reason: Option<String>,
    /// The entry as written, to name the rule that fired.
    text: String,
}

impl Rule {
    /// Whether the rule looks at more than the host.
    fn narrowed(&self) -> bool {
        self.methods.is_some() || self.paths.is_some()
    }

    fn live(&self, now: UnixTime) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }

    fn applies(&self, target: &Target, now: UnixTime) -> bool {
        self.live(now) && self.host.matches_host(&target.host, target.port)
    }
}

/// One side's rules, indexed by the host they name: a request looks at the
/// rules of its exact name, of each domain above it (`*.domain`) and of
/// addresses, not at every rule, so a policy of thousands of rules decides
/// in the time of a few. Rules keep their order (the first deny fires).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct RuleSet {
    rules: Vec<Rule>,
    /// An exact name → the rules naming it.
    exact: BTreeMap<String, Vec<usize>>,
    /// A domain → the rules naming its subdomains (`*.domain`).
    subdomains: BTreeMap<String, Vec<usize>>,
    /// The rules on IP addresses and ranges.
    addresses: Vec<usize>,
}

impl RuleSet {
    fn new(rules: Vec<Rule>) -> Self {
        let mut set = Self::default();
        for (i, rule) in rules.iter().enumerate() {
            match &rule.host.pattern {
                Pattern::Exact(name) => set.exact.entry(name.clone()).or_default().push(i),
                Pattern::Subdomains(domain) => set.subdomains.entry(domain.clone()).or_default().push(i),
                Pattern::Ip(_) | Pattern::Net(_) => set.addresses.push(i),
            }
        }
        set.rules = rules;
        set
    }

    fn iter(&self) -> std::slice::Iter<'_, Rule> {
        self.rules.iter()
    }

    /// The live rules naming `target`'s host (and port), in their order.
    fn applying<'a>(&'a self, target: &'a Target, now: UnixTime) -> impl Iterator<Item = &'a Rule> + 'a {
        let mut found: Vec<usize> = Vec::new();
        match &target.host {
            Host::Name(name) => {
                found.extend(self.exact.get(name).into_iter().flatten());
                let mut rest = name.as_str();
                while let Some((_, parent)) = rest.split_once('.') {
                    found.extend(self.subdomains.get(parent).into_iter().flatten());
                    rest = parent;
                }
            }
            Host::Ip(_) => found.extend(&self.addresses),
        }
        found.sort_unstable();
        found.into_iter().filter_map(|i| self.rules.get(i)).filter(move |r| r.applies(target, now))
    }
}

/// Which side of the policy an entry is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Allow,
    Deny,
}

fn parse_methods(value: &Value) -> Result<Vec<Method>, String> {
    let list = value.as_array().ok_or("methods is a list of method names")?;
    if list.is_empty() {
        return Err("methods is not empty".into());
    }
    let mut methods: Vec<Method> = Vec::with_capacity(list.len());
    for name in list {
        let name = name.as_str().ok_or("a method is a string")?;
        if !KNOWN_METHODS.contains(&name) {
            return Err(format!("{name:?} is not a method of the IANA HTTP method registry (upper case)"));
        }
        let method = Method::from_bytes(name.as_bytes()).map_err(|_| format!("{name:?} is not a method"))?;
        if !methods.contains(&method) {
            methods.push(method);
        }
    }
    Ok(methods)
}

fn parse_paths(value: &Value) -> Result<Vec<String>, String> {
    let list = value.as_array().ok_or("paths is a list of paths")?;
    if list.is_empty() || list.len() > MAX_RULE_PATHS {
        return Err("paths holds 1 to 64 paths".into());
    }
    list.iter()
        .map(|p| {
            let p = p.as_str().ok_or("a path is a string")?;
            path::rule_path(p).map_err(|why| format!("path {p:?}: {why}"))
        })
        .collect()
}

fn parse_expiry(value: &Value) -> Result<UnixTime, String> {
    const SHAPE: &str = "expires_at is an RFC 3339 UTC time, such as 2026-12-31T00:00:00Z";
    let text = value.as_str().ok_or(SHAPE)?;
    let at = humantime::parse_rfc3339(text).map_err(|_| SHAPE.to_owned())?;
    let secs = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| SHAPE.to_owned())?.as_secs();
    let secs = UnixTime::try_from(secs).map_err(|_| SHAPE.to_owned())?;
    if !(EXPIRY_BOUNDS.0..EXPIRY_BOUNDS.1).contains(&secs) {
        return Err("expires_at is between the years 2000 and 2100".into());
    }
    Ok(secs)
}

fn parse_reason(value: &Value) -> Result<String, String> {
    const SHAPE: &str = "reason is 1 to 200 printable characters";
    let text = value.as_str().ok_or(SHAPE)?;
    let printable =
        |c: char| !c.is_control() && !matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
    if text.trim().is_empty() || text.chars().count() > MAX_RULE_REASON || !text.chars().all(printable) {
        return Err(SHAPE.into());
    }
    Ok(text.to_owned())
}

/// An entry's rules (a preset stands for several).
fn parse_entry(entry: &Entry, side: Side) -> Result<Vec<Rule>, PolicyError> {
    let bad = |why: String| PolicyError::unreadable(format!("entry {entry}: {why}"));
    let object = match entry {
        Entry::Host(host) => {
            let rule = HostRule::parse(host).map_err(bad)?;
            let text = host.trim().to_owned();
            return Ok(vec![Rule {
                host: rule,
                methods: None,
                paths: None,
                expires_at: None,
                reason: None,
                text,
            }]);
        }
        Entry::Object(object) => object,
    };
    let text = entry.to_string();
    let field = |name: &str| object.get(name);
    let methods = field("methods").map(parse_methods).transpose().map_err(bad)?;
    let expires_at = field("expires_at").map(parse_expiry).transpose().map_err(bad)?;
    if let Some(name) = field("preset") {
        if let Some(unknown) =
            object.keys().find(|k| !matches!(k.as_str(), "preset" | "methods" | "expires_at"))
        {
            return Err(bad(format!("a preset takes methods and expires_at only, not {unknown:?}")));
        }
        let name = name.as_str().ok_or_else(|| bad("preset is a preset's name".into()))?;
        let preset = presets::find(name).ok_or_else(|| bad(format!("there is no preset {name:?}")))?;
        return preset
            .entries
            .iter()
            .map(|host| {
                let rule =
                    HostRule::parse(host).map_err(|why| bad(format!("the preset's {host:?}: {why}")))?;
                Ok(Rule {
                    host: rule,
                    methods: methods.clone(),
                    paths: None,
                    expires_at,
                    reason: None,
                    text: format!("{text} ({host})"),
                })
            })
            .collect();
    }
    let allowed = ["host", "methods", "paths", "expires_at", "reason"];
    if let Some(unknown) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!("unknown field {unknown:?}")));
    }
    let host = field("host").and_then(Value::as_str).ok_or_else(|| bad("host is required".into()))?;
    let host = HostRule::parse(host).map_err(bad)?;
    let paths = field("paths").map(parse_paths).transpose().map_err(bad)?;
    let reason = match (field("reason"), side) {
        (None, _) => None,
        (Some(reason), Side::Deny) => Some(parse_reason(reason).map_err(bad)?),
        (Some(_), Side::Allow) => {
            return Err(bad("reason is for deny rules (it tells the agent why)".into()));
        }
    };
    Ok(vec![Rule { host, methods, paths, expires_at, reason, text }])
}

/// A checked, parsed policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    mode: Mode,
    default_methods: Option<Vec<Method>>,
    allow: RuleSet,
    deny: RuleSet,
    dry_run: bool,
    /// The tenant's declared MCP servers: requests to them are read as MCP.
    mcp: Vec<mcp::McpDeclared>,
}

/// A policy refusal and the rule that fired (`None` for an allowlist miss).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRefusal {
    /// `policy_denied`, `policy_not_allowed`, `policy_method_not_allowed`,
    /// `policy_path_not_allowed` or `url_ambiguous_path`.
    pub reason: Reason,
    /// The entry that fired, as written.
    pub rule: Option<String>,
    /// A deny rule's reason for the agent.
    pub rule_reason: Option<String>,
}

impl PolicyRefusal {
    fn new(reason: Reason, rule: Option<&Rule>) -> Self {
        Self { reason, rule: rule.map(|r| r.text.clone()), rule_reason: None }
    }

    fn denied(rule: &Rule) -> Self {
        Self { reason: Reason::PolicyDenied, rule: Some(rule.text.clone()), rule_reason: rule.reason.clone() }
    }
}

/// What the host alone says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostVerdict {
    /// Any request to the host is allowed: an opaque tunnel may carry it.
    Open,
    /// The host's rules look at methods or paths: only requests can be
    /// judged, so a tunnel must be terminated to carry any.
    PerRequest,
}

impl Policy {
    /// The policy of a tenant that has none: open.
    pub fn open() -> Self {
        Self::open_const()
    }

    /// [`Policy::open`], usable in constants.
    pub const fn open_const() -> Self {
        Self {
            mode: Mode::Open,
            default_methods: None,
            allow: RuleSet {
                rules: Vec::new(),
                exact: BTreeMap::new(),
                subdomains: BTreeMap::new(),
                addresses: Vec::new(),
            },
            deny: RuleSet {
                rules: Vec::new(),
                exact: BTreeMap::new(),
                subdomains: BTreeMap::new(),
                addresses: Vec::new(),
            },
            dry_run: false,
            mcp: Vec::new(),
        }
    }

    /// Parses a policy document (JSON). Every entry must parse; otherwise the
    /// policy is unreadable.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PolicyError> {
        // Strict JSON first: a policy with duplicate keys is ambiguous.
        let value = gatehouse_capability::canonical::parse_strict(bytes)
            .map_err(|e| PolicyError::unreadable(format!("not valid JSON ({e})")))?;
        let doc: PolicyDocument = serde_json::from_value(value)
            .map_err(|e| PolicyError::unreadable(format!("not a policy document ({e})")))?;
        Self::from_document(&doc)
    }

    /// Parses the entries of a document.
    pub fn from_document(doc: &PolicyDocument) -> Result<Self, PolicyError> {
        let parse = |entries: &[Entry], side| -> Result<Vec<Rule>, PolicyError> {
            let mut rules = Vec::with_capacity(entries.len());
            for entry in entries {
                rules.extend(parse_entry(entry, side)?);
            }
            Ok(rules)
        };
        let default_methods = match &doc.default_methods {
            None => None,
            Some(names) => {
                let value = Value::Array(names.iter().cloned().map(Value::String).collect());
                let methods = parse_methods(&value)
                    .map_err(|why| PolicyError::unreadable(format!("default_methods: {why}")))?;
                Some(methods)
            }
        };
        Ok(Self {
            mode: doc.mode,
            default_methods,
            allow: RuleSet::new(parse(&doc.allow, Side::Allow)?),
            deny: RuleSet::new(parse(&doc.deny, Side::Deny)?),
            dry_run: doc.dry_run,
            mcp: Vec::new(),
        })
    }

    /// This policy with `extra` allow entries after its own (a run's
    /// approved rules): `policy_unreadable` naming an entry that does not read.
    pub fn with_allowed(&self, extra: &[Entry]) -> Result<Self, PolicyError> {
        let mut rules = self.allow.rules.clone();
        for entry in extra {
            rules.extend(parse_entry(entry, Side::Allow)?);
        }
        Ok(Self { allow: RuleSet::new(rules), ..self.clone() })
    }

    /// Whether refusals are only recorded.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The entries of rules past their expiry at `now`, as written.
    pub fn expired(&self, now: UnixTime) -> Vec<String> {
        let mut expired: Vec<String> = self
            .allow
            .iter()
            .chain(self.deny.iter())
            .filter(|r| !r.live(now))
            .map(|r| r.text.clone())
            .collect();
        expired.dedup();
        expired
    }

    /// The host stage: a deny rule on the host alone refuses
    /// (`policy_denied`); in `allowlist` mode a host no live allow rule
    /// names is `policy_not_allowed`. Otherwise whether any request to the
    /// host goes ([`HostVerdict::Open`]) or only requests the rules allow
    /// ([`HostVerdict::PerRequest`]).
    pub fn check_host(&self, target: &Target, now: UnixTime) -> Result<HostVerdict, PolicyRefusal> {
        // A declared MCP server's host is read request by request (its
        // tunnels terminated), so no message to it goes unread.
        let mut per_request = self.default_methods.is_some() || self.serves_mcp(target);
        for rule in self.deny.applying(target, now) {
            if !rule.narrowed() {
                return Err(PolicyRefusal::denied(rule));
            }
            per_request = true;
        }
        if self.mode == Mode::Allowlist {
            let mut allowing = self.allow.applying(target, now).peekable();
            if allowing.peek().is_none() {
                return Err(PolicyRefusal::new(Reason::PolicyNotAllowed, None));
            }
            if !allowing.any(|r| !r.narrowed()) {
                per_request = true;
            }
        }
        Ok(if per_request { HostVerdict::PerRequest } else { HostVerdict::Open })
    }

    /// The request stage: deny rules (host, then method and path), then
    /// the allow rules of the host (in `open` mode, any host with
    /// `default_methods`): the request needs one that allows its method and
    /// path. A refusal names the rule that came closest. The path is read
    /// only where a rule of the host names paths; a path that reads two
    /// ways is then `url_ambiguous_path`.
    pub fn check_request(
        &self,
        target: &Target,
        method: &Method,
        now: UnixTime,
    ) -> Result<(), PolicyRefusal> {
        let normalized = std::cell::OnceCell::new();
        let path_of = |rule: &Rule| -> Result<&String, PolicyRefusal> {
            normalized
                .get_or_init(|| path::normalize(&target.path_and_query))
                .as_ref()
                .map_err(|path::Ambiguous| PolicyRefusal::new(Reason::UrlAmbiguousPath, Some(rule)))
        };
        for rule in self.deny.applying(target, now) {
            if rule.methods.as_ref().is_some_and(|m| !m.contains(method)) {
                continue;
            }
            if let Some(paths) = &rule.paths {
                let path = path_of(rule)?;
                if !paths.iter().any(|p| path::deny_matches(p, path)) {
                    continue;
                }
            }
            return Err(PolicyRefusal::denied(rule));
        }
        let defaults = self.default_methods.as_deref();
        let method_fits = |methods: Option<&[Method]>| methods.is_none_or(|m| m.contains(method));
        if self.mode == Mode::Open && method_fits(defaults) {
            return Ok(());
        }
        let mut closest: Option<PolicyRefusal> = None;
        for rule in self.allow.applying(target, now) {
            if !method_fits(rule.methods.as_deref().or(defaults)) {
                closest.get_or_insert_with(|| PolicyRefusal::new(Reason::PolicyMethodNotAllowed, Some(rule)));
                continue;
            }
            if let Some(paths) = &rule.paths {
                let path = path_of(rule)?;
                if !paths.iter().any(|p| path::allow_matches(p, path)) {
                    if closest.as_ref().is_none_or(|c| c.reason != Reason::PolicyPathNotAllowed) {
                        closest = Some(PolicyRefusal::new(Reason::PolicyPathNotAllowed, Some(rule)));
                    }
                    continue;
                }
            }
            return Ok(());
        }
        Err(closest.unwrap_or_else(|| match self.mode {
            // Open, with a method outside the defaults and no rule allowing it.
            Mode::Open => PolicyRefusal::new(Reason::PolicyMethodNotAllowed, None),
            Mode::Allowlist => PolicyRefusal::new(Reason::PolicyNotAllowed, None),
        }))
    }

    /// The address check: deny IP/CIDR rules on the host alone against
    /// every resolved address.
    pub fn check_addresses(
        &self,
        addresses: &[IpAddr],
        port: u16,
        now: UnixTime,
    ) -> Result<(), PolicyRefusal> {
        for ip in addresses {
            let fired = self
                .deny
                .addresses
                .iter()
                .filter_map(|i| self.deny.rules.get(*i))
                .find(|r| r.live(now) && !r.narrowed() && r.host.matches_address(*ip, port));
            if let Some(rule) = fired {
                return Err(PolicyRefusal::denied(rule));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse_url;

    fn policy(json: &str) -> Policy {
        Policy::from_json(json.as_bytes()).unwrap()
    }

    const NOW: UnixTime = 1_800_000_000;

    fn host_check(p: &Policy, url: &str) -> Result<HostVerdict, PolicyRefusal> {
        p.check_host(&parse_url(url).unwrap(), NOW)
    }

    #[test]
    fn allowlist_matches_exact_and_subdomain_entries() {
        let p = policy(
            r#"{"mode":"allowlist","allow":["api.github.com","*.githubusercontent.com","Bücher.Example."]}"#,
        );
        assert!(host_check(&p, "https://api.github.com/x").is_ok());
        assert!(host_check(&p, "https://API.GITHUB.COM./x").is_ok());
        assert!(
            host_check(&p, "http://api.github.com:8080/").is_ok(),
            "no port: every port and both schemes"
        );
        assert!(host_check(&p, "https://raw.githubusercontent.com/").is_ok());
        assert!(host_check(&p, "https://a.b.githubusercontent.com/").is_ok());
        assert!(host_check(&p, "https://xn--bcher-kva.example/").is_ok());
        for url in [
            "https://githubusercontent.com/",
            "https://evilgithubusercontent.com/",
            "https://github.com/",
            "https://api.github.com.evil.com/",
        ] {
            assert_eq!(host_check(&p, url).unwrap_err().reason, Reason::PolicyNotAllowed, "{url}");
        }
    }

    /// An entry whose label claims to be Punycode (`xn--`) but does not
    /// decode names no host: the document is unreadable, in any case.
    #[test]
    fn an_entry_with_a_broken_a_label_is_unreadable() {
        for entry in ["xn--0.aa", "XN--0.AA", "*.xn--0.example"] {
            let err = Policy::from_json(format!(r#"{{"mode":"allowlist","allow":["{entry}"]}}"#).as_bytes())
                .unwrap_err();
            assert_eq!(err.reason, Reason::PolicyUnreadable, "{entry}");
        }
    }

    #[test]
    fn deny_wins_in_both_modes_and_names_the_rule() {
        for mode in ["open", "allowlist"] {
            let p = policy(&format!(
                r#"{{"mode":"{mode}","allow":["*.example.com"],"deny":["bad.example.com:443"]}}"#
            ));
            let r = host_check(&p, "https://bad.example.com/").unwrap_err();
            assert_eq!((r.reason, r.rule.as_deref()), (Reason::PolicyDenied, Some("bad.example.com:443")));
            assert!(host_check(&p, "http://bad.example.com/").is_ok(), "the deny rule names port 443 only");
        }
        let open = policy(r#"{"mode":"open","allow":["only.example"]}"#);
        assert!(host_check(&open, "https://anything.example/").is_ok(), "open ignores allow entries");
    }

    #[test]
    fn ip_entries() {
        let p = policy(
            r#"{"mode":"allowlist","allow":["203.0.113.0/24","[2001:db8::1]:443"],"deny":["198.51.100.7"]}"#,
        );
        assert!(host_check(&p, "http://203.0.113.9/").is_ok());
        assert!(host_check(&p, "https://[2001:db8::1]/").is_ok());
        assert!(host_check(&p, "http://[2001:db8::1]/").is_err());
        // An allowed range never lets a host name in by its addresses.
        assert!(host_check(&p, "http://example.com/").is_err());
        let deny = policy(r#"{"mode":"open","deny":["198.51.100.0/24"]}"#);
        let r = deny.check_addresses(&["198.51.100.20".parse().unwrap()], 443, NOW).unwrap_err();
        assert_eq!(r.rule.as_deref(), Some("198.51.100.0/24"));
        assert!(deny.check_addresses(&["::ffff:198.51.100.20".parse().unwrap()], 443, NOW).is_err());
        assert!(deny.check_addresses(&["8.8.8.8".parse().unwrap()], 443, NOW).is_ok());
    }

    #[test]
    fn malformed_entries_make_the_policy_unreadable() {
        for bad in [
            r#"{"mode":"allowlist","allow":["*"]}"#,
            r#"{"mode":"allowlist","allow":["api.*.com"]}"#,
            r#"{"mode":"allowlist","allow":["*.*.com"]}"#,
            r#"{"mode":"allowlist","allow":["https://api.github.com"]}"#,
            r#"{"mode":"allowlist","allow":["api.github.com/path"]}"#,
            r#"{"mode":"allowlist","allow":["user@host.com"]}"#,
            r#"{"mode":"allowlist","allow":["host.com:99999"]}"#,
            r#"{"mode":"allowlist","allow":["10.0.0.1/33"]}"#,
            r#"{"mode":"allowlist","allow":["10.0.0.1/8"]}"#,
            r#"{"mode":"allowlist","allow":[""]}"#,
            r#"{"mode":"allowlist","allow":["0x7f.1"]}"#,
            r#"{"mode":"allow-list"}"#,
            r#"{"mode":"open","extra":1}"#,
            r#"{"mode":"open","mode":"allowlist"}"#,
            r#"{"mode":"open""#,
            r#"[]"#,
        ] {
            assert!(Policy::from_json(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    fn request(p: &Policy, method: &str, url: &str) -> Result<(), PolicyRefusal> {
        p.check_request(&parse_url(url).unwrap(), &Method::from_bytes(method.as_bytes()).unwrap(), NOW)
    }

    fn reason_of(r: Result<(), PolicyRefusal>) -> Option<Reason> {
        r.err().map(|r| r.reason)
    }

    #[test]
    fn rule_objects_narrow_methods_and_paths_and_say_which_came_closest() {
        let p = policy(
            r#"{"mode":"allowlist","allow":[
                "plain.example",
                {"host":"registry.example","methods":["GET","HEAD"]},
                {"host":"api.example.com","paths":["/v1/public/","/health"]},
                {"host":"both.example","methods":["POST"],"paths":["/hooks"]}]}"#,
        );
        assert_eq!(request(&p, "DELETE", "https://plain.example/anything"), Ok(()));
        assert_eq!(request(&p, "HEAD", "https://registry.example/pkg"), Ok(()));
        assert_eq!(
            reason_of(request(&p, "PUT", "https://registry.example/pkg")),
            Some(Reason::PolicyMethodNotAllowed)
        );
        assert_eq!(request(&p, "POST", "https://api.example.com/v1/public/x?y=1"), Ok(()));
        assert_eq!(request(&p, "GET", "https://api.example.com/health"), Ok(()));
        assert_eq!(request(&p, "GET", "https://api.example.com/health/deep"), Ok(()));
        assert_eq!(
            reason_of(request(&p, "GET", "https://api.example.com/healthz")),
            Some(Reason::PolicyPathNotAllowed)
        );
        assert_eq!(
            reason_of(request(&p, "GET", "https://api.example.com/v1/private")),
            Some(Reason::PolicyPathNotAllowed)
        );
        // Dot segments and encoded unreserved characters cannot walk out.
        assert_eq!(
            reason_of(request(&p, "GET", "https://api.example.com/v1/public/../private")),
            Some(Reason::PolicyPathNotAllowed)
        );
        assert_eq!(request(&p, "GET", "https://api.example.com/v1/%70ublic/x"), Ok(()));
        // What reads two ways is refused where a path rule decides.
        for ambiguous in ["/v1/public%2F..%2Fprivate", "/v1/public/x;y", "/v1/public\\x"] {
            let url = format!("https://api.example.com{ambiguous}");
            if let Ok(target) = parse_url(&url) {
                let r = p.check_request(&target, &Method::GET, NOW);
                assert_eq!(reason_of(r), Some(Reason::UrlAmbiguousPath), "{url}");
            }
        }
        // ... and nowhere else: a host without path rules takes any path.
        assert_eq!(request(&p, "GET", "https://plain.example/a%2Fb;c"), Ok(()));
        let r = request(&p, "GET", "https://both.example/hooks").unwrap_err();
        assert_eq!(
            (r.reason, r.rule.as_deref()),
            (
                Reason::PolicyMethodNotAllowed,
                Some(r#"{"host":"both.example","methods":["POST"],"paths":["/hooks"]}"#)
            )
        );
        assert_eq!(
            reason_of(request(&p, "POST", "https://both.example/other")),
            Some(Reason::PolicyPathNotAllowed)
        );
        assert_eq!(reason_of(request(&p, "GET", "https://nowhere.example/")), Some(Reason::PolicyNotAllowed));
    }

    #[test]
    fn deny_rules_narrow_too_carry_their_reason_and_win() {
        let p = policy(
            r#"{"mode":"open","deny":[
                {"host":"api.github.com","methods":["DELETE"],"reason":"agents never delete on GitHub"},
                {"host":"api.example.com","paths":["/admin"]}]}"#,
        );
        let r = request(&p, "DELETE", "https://api.github.com/repos/o/r").unwrap_err();
        assert_eq!(
            (r.reason, r.rule_reason.as_deref()),
            (Reason::PolicyDenied, Some("agents never delete on GitHub"))
        );
        assert_eq!(request(&p, "GET", "https://api.github.com/repos/o/r"), Ok(()));
        for path in ["/admin", "/ADMIN/x", "/administrator", "/x/../admin"] {
            let url = format!("https://api.example.com{path}");
            assert_eq!(reason_of(request(&p, "GET", &url)), Some(Reason::PolicyDenied), "{path}");
        }
        assert_eq!(
            reason_of(request(&p, "GET", "https://api.example.com/adm%69n")),
            Some(Reason::PolicyDenied)
        );
        assert_eq!(
            reason_of(request(&p, "GET", "https://api.example.com/a;b")),
            Some(Reason::UrlAmbiguousPath)
        );
        assert_eq!(request(&p, "GET", "https://api.example.com/public"), Ok(()));
        // A narrowed deny does not refuse the host: its tunnel is judged per request.
        assert_eq!(host_check(&p, "https://api.github.com/"), Ok(HostVerdict::PerRequest));
        assert_eq!(host_check(&p, "https://other.example/"), Ok(HostVerdict::Open));
    }

    #[test]
    fn default_methods_apply_to_rules_without_their_own_in_both_modes() {
        let allowlist = policy(
            r#"{"mode":"allowlist","default_methods":["GET","HEAD","OPTIONS"],
                "allow":["docs.example",{"host":"api.example","methods":["POST"]}],"deny":["evil.example"]}"#,
        );
        assert_eq!(request(&allowlist, "GET", "https://docs.example/"), Ok(()));
        assert_eq!(
            reason_of(request(&allowlist, "POST", "https://docs.example/")),
            Some(Reason::PolicyMethodNotAllowed)
        );
        assert_eq!(request(&allowlist, "POST", "https://api.example/"), Ok(()));
        assert_eq!(
            reason_of(request(&allowlist, "GET", "https://api.example/")),
            Some(Reason::PolicyMethodNotAllowed)
        );
        assert_eq!(host_check(&allowlist, "https://docs.example/"), Ok(HostVerdict::PerRequest));
        let open = policy(
            r#"{"mode":"open","default_methods":["GET"],"allow":[{"host":"upload.example","methods":["PUT"]}],
                "deny":["evil.example"]}"#,
        );
        assert_eq!(request(&open, "GET", "https://any.example/"), Ok(()));
        assert_eq!(
            reason_of(request(&open, "POST", "https://any.example/")),
            Some(Reason::PolicyMethodNotAllowed)
        );
        assert_eq!(request(&open, "PUT", "https://upload.example/"), Ok(()));
        // A deny rule never narrows to the defaults.
        assert_eq!(reason_of(request(&open, "DELETE", "https://evil.example/")), Some(Reason::PolicyDenied));
        assert_eq!(
            reason_of(host_check(&open, "https://evil.example/").map(|_| ())),
            Some(Reason::PolicyDenied)
        );
    }

    #[test]
    fn only_a_host_only_allow_opens_a_tunnel() {
        let p = policy(
            r#"{"mode":"allowlist","allow":["plain.example",{"host":"narrow.example","methods":["GET"]},
                "both.example",{"host":"both.example","paths":["/x"]}]}"#,
        );
        assert_eq!(host_check(&p, "https://plain.example/"), Ok(HostVerdict::Open));
        assert_eq!(host_check(&p, "https://narrow.example/"), Ok(HostVerdict::PerRequest));
        assert_eq!(
            host_check(&p, "https://both.example/"),
            Ok(HostVerdict::Open),
            "its host-only rule opens it"
        );
        assert_eq!(
            reason_of(host_check(&p, "https://other.example/").map(|_| ())),
            Some(Reason::PolicyNotAllowed)
        );
    }

    #[test]
    fn expired_rules_are_ignored_and_listed() {
        let p = policy(
            r#"{"mode":"allowlist","allow":[{"host":"temp.example","expires_at":"2027-01-15T08:00:00Z"}],
                "deny":[{"host":"blocked.example","expires_at":"2027-01-15T08:00:00Z"}]}"#,
        );
        let expiry = 1_800_000_000 + 1; // 2027-01-15T08:00:00Z is 1_800_000_000.
        let target = parse_url("https://temp.example/").unwrap();
        assert!(p.check_host(&target, expiry - 2).is_ok());
        assert_eq!(
            p.check_host(&target, expiry - 1).unwrap_err().reason,
            Reason::PolicyNotAllowed,
            "at its expiry it is gone"
        );
        assert!(p.expired(expiry - 2).is_empty());
        assert_eq!(p.expired(expiry).len(), 2);
        let open = policy(
            r#"{"mode":"open","deny":[{"host":"blocked.example","expires_at":"2027-01-15T08:00:00Z"}]}"#,
        );
        let blocked = parse_url("https://blocked.example/").unwrap();
        assert!(open.check_host(&blocked, expiry - 2).is_err());
        assert!(open.check_host(&blocked, expiry).is_ok());
    }

    #[test]
    fn presets_expand_to_their_hosts_and_take_method_limits() {
        let p = policy(
            r#"{"mode":"allowlist","allow":[{"preset":"package-registries","methods":["GET","HEAD"]},{"preset":"github"}]}"#,
        );
        assert_eq!(request(&p, "GET", "https://files.pythonhosted.org/packages/x.whl"), Ok(()));
        assert_eq!(request(&p, "GET", "https://index.crates.io/se/rd/serde"), Ok(()));
        let r = request(&p, "PUT", "https://registry.npmjs.org/pkg").unwrap_err();
        assert_eq!(r.reason, Reason::PolicyMethodNotAllowed);
        assert_eq!(
            r.rule.as_deref(),
            Some(r#"{"methods":["GET","HEAD"],"preset":"package-registries"} (registry.npmjs.org)"#)
        );
        assert_eq!(request(&p, "POST", "https://api.github.com/graphql"), Ok(()));
        assert_eq!(reason_of(request(&p, "GET", "https://evil.example/")), Some(Reason::PolicyNotAllowed));
    }

    #[test]
    fn bad_rule_objects_make_the_policy_unreadable_naming_the_entry() {
        for (bad, says) in [
            (r#"{"host":"a.example","methods":[]}"#, "methods is not empty"),
            (r#"{"host":"a.example","methods":["get"]}"#, "IANA"),
            (r#"{"host":"a.example","methods":["FETCH"]}"#, "IANA"),
            (r#"{"host":"a.example","paths":[]}"#, "paths holds"),
            (r#"{"host":"a.example","paths":["v1/"]}"#, "starts with /"),
            (r#"{"host":"a.example","paths":["/a%2Fb"]}"#, "%2F"),
            (r#"{"host":"a.example","expires_at":"tomorrow"}"#, "RFC 3339"),
            (r#"{"host":"a.example","expires_at":"3026-01-01T00:00:00Z"}"#, "2100"),
            (r#"{"host":"a.example","reason":"why"}"#, "deny rules"),
            (r#"{"host":"a.example","extra":1}"#, "unknown field"),
            (r#"{"methods":["GET"]}"#, "host is required"),
            (r#"{"host":"*","methods":["GET"]}"#, "wildcard"),
            (r#"{"preset":"nope"}"#, "no preset"),
            (r#"{"preset":"github","paths":["/x"]}"#, "preset takes"),
        ] {
            let err = Policy::from_json(format!(r#"{{"mode":"allowlist","allow":[{bad}]}}"#).as_bytes())
                .unwrap_err();
            assert_eq!(err.reason, Reason::PolicyUnreadable, "{bad}");
            assert!(err.detail.contains(says) && err.detail.contains("entry {"), "{bad}: {}", err.detail);
        }
        for reason in ["", "tab\\there", &"x".repeat(201), "rtl \\u202e"] {
            let doc = format!(r#"{{"mode":"open","deny":[{{"host":"a.example","reason":"{reason}"}}]}}"#);
            assert!(Policy::from_json(doc.as_bytes()).is_err(), "{reason:?}");
        }
        assert!(Policy::from_json(br#"{"mode":"open","default_methods":[]}"#).is_err());
        assert!(Policy::from_json(br#"{"mode":"open","default_methods":["GET","nope"]}"#).is_err());
    }

    #[test]
    fn a_document_round_trips_with_its_entries_as_written() {
        let text = r#"{"mode":"allowlist","default_methods":["GET"],"allow":["a.example",{"host":"b.example","methods":["POST"]},{"preset":"debian"}],"deny":[],"dry_run":false}"#;
        let doc: PolicyDocument = serde_json::from_str(text).unwrap();
        assert_eq!(doc.allow[0], Entry::host("a.example"));
        assert_eq!(doc.allow[1].to_string(), r#"{"host":"b.example","methods":["POST"]}"#);
        let again: PolicyDocument = serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
        assert_eq!(again, doc);
        assert!(Policy::from_document(&doc).is_ok());
    }

    #[test]
    fn the_host_index_finds_exactly_the_rules_a_scan_would_in_their_order() {
        let p = policy(
            r#"{"mode":"allowlist","allow":["a.b.example","*.b.example","*.example","x.example:8443",
                "10.0.0.0/8","10.1.2.3",{"host":"a.b.example","methods":["GET"]},"*.a.b.example","[2001:db8::1]:443",
                {"host":"a.b.example","expires_at":"2001-01-01T00:00:00Z"}]}"#,
        );
        for url in [
            "https://a.b.example/",
            "https://c.a.b.example/",
            "https://b.example/",
            "https://z.example/",
            "https://x.example:8443/",
            "https://x.example/",
            "http://10.1.2.3/",
            "http://10.9.9.9/",
            "https://[2001:db8::1]/",
            "https://other.test/",
        ] {
            let target = parse_url(url).unwrap();
            let indexed: Vec<&str> = p.allow.applying(&target, NOW).map(|r| r.text.as_str()).collect();
            let scanned: Vec<&str> =
                p.allow.iter().filter(|r| r.applies(&target, NOW)).map(|r| r.text.as_str()).collect();
            assert_eq!(indexed, scanned, "{url}");
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// A DNS label: letters, digits and inner hyphens, never starting
        /// with `xn--`: such an A-label must be valid Punycode (RFC 5890
        /// §2.3.2.1), so a generated `xn--0` is rightly refused, not a name.
        fn label() -> impl Strategy<Value = String> {
            "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?".prop_filter("an A-label", |l| !l.starts_with("xn--"))
        }

        /// A name of `labels` labels under a top-level label of letters (a
        /// numeric last label would make the name an IPv4 spelling, refused).
        fn name(labels: std::ops::Range<usize>) -> impl Strategy<Value = String> {
            (prop::collection::vec(label(), labels), "[a-z]{2,6}")
                .prop_map(|(labels, tld)| format!("{}.{tld}", labels.join(".")))
        }

        fn flip_case(s: &str, mask: u64) -> String {
            s.chars()
                .enumerate()
                .map(|(i, c)| if mask >> (i % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                .collect()
        }

        proptest! {
            /// `*.domain` matches every name below the domain, in any case
            /// and with or without the trailing dot, and never the apex, a
            /// name that merely ends in the same letters, or one that has
            /// the domain in the middle.
            #[test]
            fn wildcards_match_subdomains_only(
                domain in name(1..3),
                sub in prop::collection::vec(label(), 1..3),
                mask in any::<u64>(),
                trailing_dot in any::<bool>(),
            ) {
                let p = policy(&format!(r#"{{"mode":"allowlist","allow":["*.{domain}"]}}"#));
                let dot = if trailing_dot { "." } else { "" };
                let below = flip_case(&format!("{}.{domain}", sub.join(".")), mask);
                prop_assert!(host_check(&p, &format!("https://{below}{dot}/")).is_ok(), "{below}");
                let apex = flip_case(&domain, mask);
                prop_assert!(host_check(&p, &format!("https://{apex}{dot}/")).is_err(), "{apex}");
                let glued = format!("{}{domain}", sub.join("."));
                prop_assert!(host_check(&p, &format!("https://{glued}/")).is_err(), "{glued}");
                let inside = format!("{below}.evil.test");
                prop_assert!(host_check(&p, &format!("https://{inside}/")).is_err(), "{inside}");
            }

            /// An exact entry matches its name in any case, with or without
            /// the trailing dot, and nothing below it.
            #[test]
            fn exact_entries_match_their_name_only(
                name in name(1..3),
                sub in label(),
                mask in any::<u64>(),
            ) {
                let p = policy(&format!(r#"{{"mode":"allowlist","allow":["{}"]}}"#, flip_case(&name, !mask)));
                let shown = flip_case(&name, mask);
                let (plain, dotted, below) =
                    (format!("http://{shown}/"), format!("http://{shown}./"), format!("http://{sub}.{name}/"));
                prop_assert!(host_check(&p, &plain).is_ok(), "{plain}");
                prop_assert!(host_check(&p, &dotted).is_ok(), "{dotted}");
                prop_assert!(host_check(&p, &below).is_err(), "{below}");
            }
        }
    }
}
