//! Per-tenant egress policy.
//!
//! Document form (files, API, store):
//! `{"mode": "allowlist", "allow": ["api.github.com", "*.githubusercontent.com"],
//!   "deny": ["evil.example", "203.0.113.0/24"], "dry_run": false}`
//!
//! - `open`: any public host; `allowlist`: only what `allow` names. A tenant
//!   with no policy is `open`. Deny wins in both modes; `open` ignores `allow`.
//! - Entries: `host`, `*.domain` (subdomains only, never the apex), an IP
//!   address, or a CIDR range; a host or IP entry may carry `:port`. An entry
//!   without a port matches every port and both schemes. Host entries are
//!   case-insensitive, trailing-dot-insensitive and IDNA-normalized.
//! - `allow` IP/CIDR entries match only URLs whose host is an IP literal (a
//!   host name must be allowed by name); `deny` IP/CIDR entries match literals
//!   and resolved addresses alike.
//! - Anything else (a bare `*`, a wildcard mid-label, a URL, an unknown
//!   field) makes the whole policy unreadable, and an unreadable policy
//!   refuses every request: a typo must never widen access.
//! - No entry ever opens a special-purpose address: the address guard runs
//!   after the policy, whatever the policy says.

use std::fmt;
use std::net::IpAddr;

use gatehouse_core::Reason;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::target::{Host, Target, parse_host};

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

/// The policy document exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// `open` or `allowlist`.
    pub mode: Mode,
    /// Allowed destinations (allowlist mode).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Denied destinations (both modes).
    #[serde(default)]
    pub deny: Vec<String>,
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

/// One parsed entry, keeping its original text to name the rule that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pattern: Pattern,
    port: Option<u16>,
    text: String,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    fn parse(entry: &str) -> Result<Self, PolicyError> {
        let bad = |why: &str| PolicyError::unreadable(format!("entry {entry:?}: {why}"));
        let e = entry.trim();
        if e.is_empty() {
            return Err(bad("empty"));
        }
        if e.contains("://") || e.contains(['?', '#', '@']) {
            return Err(bad("give a host, *.domain, IP address or CIDR range, not a URL"));
        }
        if let Some((addr, len)) = e.split_once('/') {
            let net: IpNet = format!("{addr}/{len}").parse().map_err(|_| bad("not a CIDR range"))?;
            if net != net.trunc() {
                return Err(bad("CIDR range has host bits set"));
            }
            return Ok(Self { pattern: Pattern::Net(net), port: None, text: e.to_owned() });
        }
        if let Ok(ip) = e.parse::<IpAddr>() {
            return Ok(Self { pattern: Pattern::Ip(ip), port: None, text: e.to_owned() });
        }
        // `[v6]:port`, `host:port`, or a bare host.
        let (host, port) = if let Some(inner) = e.strip_prefix('[') {
            let (ip, rest) = inner.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            let ip: IpAddr = ip.parse().map_err(|_| bad("not an IPv6 address"))?;
            let port = rest.strip_prefix(':').map(parse_port).transpose().map_err(|()| bad("bad port"))?;
            if port.is_none() && !rest.is_empty() {
                return Err(bad("unexpected text after ]"));
            }
            return Ok(Self { pattern: Pattern::Ip(ip), port, text: e.to_owned() });
        } else {
            match e.rsplit_once(':') {
                Some((h, p)) => (h, Some(parse_port(p).map_err(|()| bad("bad port"))?)),
                None => (e, None),
            }
        };
        let pattern = if let Some(domain) = host.strip_prefix("*.") {
            match parse_host(domain) {
                Ok(Host::Name(name)) if !domain.contains('*') => Pattern::Subdomains(name),
                _ => return Err(bad("*. must be followed by a domain name")),
            }
        } else if host.contains('*') {
            return Err(bad("a wildcard is allowed only as the whole first label (*.domain)"));
        } else {
            match parse_host(host) {
                Ok(Host::Name(name)) => Pattern::Exact(name),
                Ok(Host::Ip(ip)) => Pattern::Ip(ip),
                Err(_) => return Err(bad("not a valid host name")),
            }
        };
        Ok(Self { pattern, port, text: e.to_owned() })
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

/// A checked, parsed policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    mode: Mode,
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    dry_run: bool,
}

/// A policy refusal and the rule that fired (`None` for an allowlist miss).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRefusal {
    /// `policy_denied` or `policy_not_allowed`.
    pub reason: Reason,
    /// The entry that fired, as written.
    pub rule: Option<String>,
}

impl Policy {
    /// The policy of a tenant that has none: open.
    pub fn open() -> Self {
        Self::open_const()
    }

    /// [`Policy::open`], usable in constants.
    pub const fn open_const() -> Self {
        Self { mode: Mode::Open, allow: Vec::new(), deny: Vec::new(), dry_run: false }
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
        let parse =
            |entries: &[String]| entries.iter().map(|e| Rule::parse(e)).collect::<Result<Vec<_>, _>>();
        Ok(Self { mode: doc.mode, allow: parse(&doc.allow)?, deny: parse(&doc.deny)?, dry_run: doc.dry_run })
    }

    /// Whether refusals are only recorded.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The host check: deny rules, then (allowlist mode) allow rules.
    pub fn check_host(&self, target: &Target) -> Result<(), PolicyRefusal> {
        if let Some(rule) = self.deny.iter().find(|r| r.matches_host(&target.host, target.port)) {
            return Err(PolicyRefusal { reason: Reason::PolicyDenied, rule: Some(rule.to_string()) });
        }
        if self.mode == Mode::Allowlist
            && !self.allow.iter().any(|r| r.matches_host(&target.host, target.port))
        {
            return Err(PolicyRefusal { reason: Reason::PolicyNotAllowed, rule: None });
        }
        Ok(())
    }

    /// The address check: deny IP/CIDR rules against every resolved address.
    pub fn check_addresses(&self, addresses: &[IpAddr], port: u16) -> Result<(), PolicyRefusal> {
        for ip in addresses {
            if let Some(rule) = self.deny.iter().find(|r| r.matches_address(*ip, port)) {
                return Err(PolicyRefusal { reason: Reason::PolicyDenied, rule: Some(rule.to_string()) });
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

    fn host_check(p: &Policy, url: &str) -> Result<(), PolicyRefusal> {
        p.check_host(&parse_url(url).unwrap())
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
        let r = deny.check_addresses(&["198.51.100.20".parse().unwrap()], 443).unwrap_err();
        assert_eq!(r.rule.as_deref(), Some("198.51.100.0/24"));
        assert!(deny.check_addresses(&["::ffff:198.51.100.20".parse().unwrap()], 443).is_err());
        assert!(deny.check_addresses(&["8.8.8.8".parse().unwrap()], 443).is_ok());
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
