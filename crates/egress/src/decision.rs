//! The decision every outbound request goes through, in order: URL → tenant
//! policy → metadata names → DNS → every resolved address → deny rules on
//! addresses. Pure: the resolver is a parameter, so the whole pipeline is
//! tested without sockets, and `gatehouse egress check` runs exactly this.

use std::net::IpAddr;

use gatehouse_core::{Reason, UnixTime};
use http::Method;
use serde::Serialize;

use crate::policy::{HostVerdict, Policy, PolicyError, PolicyRefusal};
use crate::special::{AddressGuard, is_metadata_host_name, special_use_name};
use crate::target::{Host, Target, parse_url};

/// Redirects followed for ordinary requests (same origin only).
pub const MAX_REDIRECTS: u8 = 3;

/// What kind of request this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purpose {
    /// An ordinary request: up to [`MAX_REDIRECTS`] same-origin redirects.
    #[default]
    Request,
    /// A webhook delivery: redirects are never followed.
    Webhook,
}

/// The outcome, with everything a refusal record needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// `allow` or `refuse`.
    pub decision: &'static str,
    /// `allowed`, or the refusal's reason code.
    pub reason: String,
    /// The policy entry or registry row that fired, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// A deny rule's reason for the agent, when one fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_reason: Option<String>,
    /// The host's rules look at methods or paths: only requests can be
    /// judged ([`check_request`]), so a tunnel to it must be terminated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_request: bool,
    /// The host (never the full URL, which may carry secrets in its query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The addresses checked — the only ones a connection may use.
    pub addresses: Vec<IpAddr>,
    /// Redirects that may be followed.
    pub max_redirects: u8,
    /// In a dry-run policy: what the policy would have refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run_would_refuse: Option<DryRunRefusal>,
    /// The parsed target, for the code that connects.
    #[serde(skip)]
    pub target: Option<Target>,
}

/// A refusal a dry-run policy recorded instead of enforcing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunRefusal {
    /// The reason code.
    pub reason: Reason,
    /// The entry that fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl From<PolicyRefusal> for DryRunRefusal {
    fn from(r: PolicyRefusal) -> Self {
        Self { reason: r.reason, rule: r.rule }
    }
}

impl Decision {
    /// Whether the request may go ahead.
    pub fn allowed(&self) -> bool {
        self.decision == "allow"
    }

    fn refuse(reason: Reason, rule: Option<String>, target: Option<&Target>, addresses: Vec<IpAddr>) -> Self {
        Self {
            decision: "refuse",
            reason: reason.as_str().to_owned(),
            rule,
            rule_reason: None,
            per_request: false,
            host: target.map(|t| t.host.to_string()),
            port: target.map(|t| t.port),
            addresses,
            max_redirects: 0,
            dry_run_would_refuse: None,
            target: target.cloned(),
        }
    }

    /// The refusal reason, when refused.
    pub fn refusal(&self) -> Option<Reason> {
        Reason::parse(&self.reason).filter(|_| !self.allowed())
    }

    /// A policy's refusal, with the deny rule's reason for the agent.
    fn refused_by(refusal: PolicyRefusal, target: Option<&Target>, addresses: Vec<IpAddr>) -> Self {
        Self {
            rule_reason: refusal.rule_reason,
            ..Self::refuse(refusal.reason, refusal.rule, target, addresses)
        }
    }

    /// Applies the request stage to an allowed decision: `method` and the
    /// target's path under the policy's rules ([`check_request`]).
    pub fn with_request(
        mut self,
        policy: Result<&Policy, &PolicyError>,
        method: &Method,
        now: UnixTime,
    ) -> Self {
        // Borrowed, not cloned: this runs for every request the door sees.
        let Some(target) = self.target.as_ref().filter(|_| self.allowed()) else { return self };
        match check_request(policy, target, method, now) {
            Ok(None) => self,
            Ok(Some(dry)) => {
                self.dry_run_would_refuse.get_or_insert(dry);
                self
            }
            Err(refusal) => {
                let addresses = std::mem::take(&mut self.addresses);
                Self::refused_by(refusal, self.target.as_ref(), addresses)
            }
        }
    }
}

/// The request stage: whether `method` to `target` (its path) is allowed
/// by the policy's rules, after the host stage allowed the host. `Ok(Some)`:
/// a dry-run policy would refuse it (recorded, let through).
pub fn check_request(
    policy: Result<&Policy, &PolicyError>,
    target: &Target,
    method: &Method,
    now: UnixTime,
) -> Result<Option<DryRunRefusal>, PolicyRefusal> {
    let policy = policy.map_err(|e| PolicyRefusal { reason: e.reason, rule: None, rule_reason: None })?;
    match policy.check_request(target, method, now) {
        Ok(()) => Ok(None),
        Err(refusal) if policy.dry_run() => Ok(Some(refusal.into())),
        Err(refusal) => Err(refusal),
    }
}

/// Decides whether `raw_url` may be fetched. `resolve` answers for host
/// names (an error or an empty answer refuses: fail closed).
pub fn decide(
    raw_url: &str,
    policy: Result<&Policy, &PolicyError>,
    guard: &AddressGuard,
    purpose: Purpose,
    now: UnixTime,
    resolve: impl FnOnce(&str) -> Result<Vec<IpAddr>, ()>,
) -> Decision {
    let target = match parse_url(raw_url) {
        Ok(t) => t,
        Err(reason) => return Decision::refuse(reason, None, None, Vec::new()),
    };
    decide_target(target, policy, guard, purpose, now, resolve)
}

/// [`decide`] for an already-parsed target (CONNECT authorities, redirects).
pub fn decide_target(
    target: Target,
    policy: Result<&Policy, &PolicyError>,
    guard: &AddressGuard,
    purpose: Purpose,
    now: UnixTime,
    resolve: impl FnOnce(&str) -> Result<Vec<IpAddr>, ()>,
) -> Decision {
    match before_lookup(target, policy, now) {
        Err(refused) => refused,
        Ok(checked) => {
            let answer = checked.lookup_name().map(resolve);
            checked.after_lookup(answer, policy, guard, purpose, now)
        }
    }
}

/// [`decide_target`] with an asynchronous lookup (the door's resolver).
/// The name is looked up only when everything before the lookup allows the
/// request: a name the policy refuses, a metadata name or a special-use one
/// never reaches DNS, so a sandbox cannot carry data out in the names it is
/// refused.
pub async fn decide_target_resolving(
    target: Target,
    policy: Result<&Policy, &PolicyError>,
    guard: &AddressGuard,
    purpose: Purpose,
    now: UnixTime,
    resolve: impl AsyncFnOnce(&str) -> Result<Vec<IpAddr>, ()>,
) -> Decision {
    match before_lookup(target, policy, now) {
        Err(refused) => refused,
        Ok(checked) => {
            let answer = match checked.lookup_name() {
                Some(name) => Some(resolve(name).await),
                None => None,
            };
            checked.after_lookup(answer, policy, guard, purpose, now)
        }
    }
}

/// A target the checks before the lookup let through.
struct BeforeLookup {
    target: Target,
    dry_run: Option<DryRunRefusal>,
    per_request: bool,
}

/// The steps before any lookup: the policy's host rules (dry-runnable),
/// then metadata and special-use names, refused by name.
#[expect(clippy::result_large_err, reason = "a refusal is the decision itself, returned once per request")]
fn before_lookup(
    target: Target,
    policy: Result<&Policy, &PolicyError>,
    now: UnixTime,
) -> Result<BeforeLookup, Decision> {
    let policy = match policy {
        Ok(policy) => policy,
        Err(e) => return Err(Decision::refuse(e.reason, None, Some(&target), Vec::new())),
    };
    let mut dry_run = None;
    let mut per_request = false;
    match policy.check_host(&target, now) {
        Ok(verdict) => per_request = verdict == HostVerdict::PerRequest,
        Err(r) if !policy.dry_run() => return Err(Decision::refused_by(r, Some(&target), Vec::new())),
        Err(r) => dry_run = Some(r.into()),
    }
    if let Host::Name(name) = &target.host {
        if is_metadata_host_name(name) {
            let rule = Some(name.clone());
            return Err(Decision::refuse(Reason::HostMetadataName, rule, Some(&target), Vec::new()));
        }
        if let Some(rule) = special_use_name(name) {
            let rule = Some(rule.to_owned());
            return Err(Decision::refuse(Reason::HostSpecialUseName, rule, Some(&target), Vec::new()));
        }
    }
    Ok(BeforeLookup { target, dry_run, per_request })
}

impl BeforeLookup {
    /// The name to look up (none for an address).
    fn lookup_name(&self) -> Option<&str> {
        match &self.target.host {
            Host::Name(name) => Some(name),
            Host::Ip(_) => None,
        }
    }

    /// The steps after the lookup: every address through the guard (a
    /// failed or empty answer refuses: fail closed), then the policy's
    /// address rules (dry-runnable; the guard's never are).
    fn after_lookup(
        self,
        answer: Option<Result<Vec<IpAddr>, ()>>,
        policy: Result<&Policy, &PolicyError>,
        guard: &AddressGuard,
        purpose: Purpose,
        now: UnixTime,
    ) -> Decision {
        let Self { target, mut dry_run, per_request } = self;
        let addresses = match (&target.host, answer) {
            (Host::Ip(ip), _) => vec![*ip],
            (Host::Name(_), Some(Ok(addresses))) if !addresses.is_empty() => addresses,
            (Host::Name(_), _) => {
                return Decision::refuse(Reason::DnsFailed, None, Some(&target), Vec::new());
            }
        };
        // Any forbidden address refuses the request: a mixed answer is an attack.
        for ip in &addresses {
            if let Err(r) = guard.check(*ip) {
                return Decision::refuse(r.reason, Some(r.rule.to_owned()), Some(&target), addresses.clone());
            }
        }
        if let Ok(policy) = policy
            && let Err(r) = policy.check_addresses(&addresses, target.port, now)
        {
            if !policy.dry_run() {
                return Decision::refused_by(r, Some(&target), addresses);
            }
            dry_run.get_or_insert(r.into());
        }
        Decision {
            decision: "allow",
            reason: "allowed".to_owned(),
            rule: None,
            rule_reason: None,
            per_request,
            host: Some(target.host.to_string()),
            port: Some(target.port),
            addresses,
            max_redirects: match purpose {
                Purpose::Request => MAX_REDIRECTS,
                Purpose::Webhook => 0,
            },
            dry_run_would_refuse: dry_run,
            target: Some(target),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup is a message to whoever runs the name's DNS: a name the
    /// request is refused for is never looked up, with any resolver.
    #[tokio::test]
    async fn a_refused_name_is_never_looked_up() {
        let allowlist = Policy::from_json(br#"{"mode":"allowlist","allow":["ok.example"]}"#).unwrap();
        let dry =
            Policy::from_json(br#"{"mode":"allowlist","allow":["ok.example"],"dry_run":true}"#).unwrap();
        let asked = std::sync::Mutex::new(Vec::new());
        let ask = async |name: &str| {
            asked.lock().unwrap().push(name.to_owned());
            Ok(vec![IpAddr::from([93, 184, 216, 34])])
        };
        let guard = AddressGuard::default();
        for (url, policy, reason) in [
            ("https://secret-abc123.evil.example/", &allowlist, Reason::PolicyNotAllowed),
            ("http://metadata.google.internal/", &Policy::open(), Reason::HostMetadataName),
            ("http://x.internal/", &Policy::open(), Reason::HostSpecialUseName),
        ] {
            let target = parse_url(url).unwrap();
            let d = decide_target_resolving(target, Ok(policy), &guard, Purpose::Request, 1_800_000_000, ask)
                .await;
            assert_eq!(d.refusal(), Some(reason), "{url}");
        }
        assert!(asked.lock().unwrap().is_empty(), "{:?}", asked.lock().unwrap());
        // Allowed (or only dry-run refused) names are looked up once.
        for policy in [&allowlist, &dry] {
            let target = parse_url("https://ok.example/").unwrap();
            let d = decide_target_resolving(target, Ok(policy), &guard, Purpose::Request, 1_800_000_000, ask)
                .await;
            assert!(d.allowed());
        }
        let target = parse_url("https://other.example/").unwrap();
        let d = decide_target_resolving(target, Ok(&dry), &guard, Purpose::Request, 1_800_000_000, ask).await;
        assert!(d.allowed() && d.dry_run_would_refuse.is_some());
        assert_eq!(*asked.lock().unwrap(), ["ok.example", "ok.example", "other.example"]);
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn check(url: &str, policy: &Policy, answer: &[&str]) -> Decision {
        let answer = ips(answer);
        decide(url, Ok(policy), &AddressGuard::default(), Purpose::Request, 1_800_000_000, |_| Ok(answer))
    }

    #[test]
    fn a_public_host_is_allowed_with_its_addresses() {
        let d = check("https://example.com/x?token=s3cret", &Policy::open(), &["93.184.216.34"]);
        assert!(d.allowed());
        assert_eq!(d.addresses, ips(&["93.184.216.34"]));
        assert_eq!((d.host.as_deref(), d.port, d.max_redirects), (Some("example.com"), Some(443), 3));
        let json = serde_json::to_string(&d).unwrap();
        assert!(!json.contains("s3cret"), "the query never appears in a decision");
    }

    #[test]
    fn each_step_refuses_with_its_own_reason() {
        let open = Policy::open();
        assert_eq!(check("ftp://x.com/", &open, &[]).refusal(), Some(Reason::SchemeNotAllowed));
        assert_eq!(check("https://x.com/", &open, &[]).refusal(), Some(Reason::DnsFailed));
        assert_eq!(
            check("https://x.com/", &open, &["10.0.0.1"]).refusal(),
            Some(Reason::AddressSpecialPurpose)
        );
        assert_eq!(
            check("https://x.com/", &open, &["93.184.216.34", "127.0.0.1"]).refusal(),
            Some(Reason::AddressSpecialPurpose),
            "one bad address in a mixed answer refuses"
        );
        assert_eq!(
            check("http://metadata.google.internal/", &open, &["8.8.8.8"]).refusal(),
            Some(Reason::HostMetadataName)
        );
        assert_eq!(
            check("http://169.254.169.254/latest/", &open, &[]).refusal(),
            Some(Reason::AddressMetadata)
        );
        // A resolver that answers a public address for a local-only name
        // is never asked: the name itself is refused.
        for url in [
            "http://localhost/",
            "http://api.localhost:8080/",
            "https://printer.local/",
            "http://db.internal/",
            "http://nas.home.arpa/",
            "http://x.invalid/",
        ] {
            let d = check(url, &open, &["93.184.216.34"]);
            assert_eq!(d.refusal(), Some(Reason::HostSpecialUseName), "{url}");
            assert!(d.addresses.is_empty(), "{url}: resolved anyway");
        }
        let d = decide(
            "https://x.com/",
            Err(&PolicyError::unreadable("bad")),
            &AddressGuard::default(),
            Purpose::Request,
            1_800_000_000,
            |_| Ok(vec![]),
        );
        assert_eq!(d.refusal(), Some(Reason::PolicyUnreadable));
        let failing = decide(
            "https://x.com/",
            Ok(&open),
            &AddressGuard::default(),
            Purpose::Request,
            1_800_000_000,
            |_| Err(()),
        );
        assert_eq!(failing.refusal(), Some(Reason::DnsFailed));
    }

    #[test]
    fn deny_cidr_rules_apply_to_resolved_addresses() {
        let p = Policy::from_json(br#"{"mode":"open","deny":["93.184.216.0/24"]}"#).unwrap();
        let d = check("https://example.com/", &p, &["93.184.216.34"]);
        assert_eq!((d.refusal(), d.rule.as_deref()), (Some(Reason::PolicyDenied), Some("93.184.216.0/24")));
    }

    #[test]
    fn dry_run_records_policy_refusals_but_never_address_refusals() {
        let p = Policy::from_json(br#"{"mode":"allowlist","allow":["ok.example"],"dry_run":true}"#).unwrap();
        let d = check("https://other.example/", &p, &["93.184.216.34"]);
        assert!(d.allowed());
        assert_eq!(d.dry_run_would_refuse.unwrap().reason, Reason::PolicyNotAllowed);
        assert_eq!(
            check("https://other.example/", &p, &["127.0.0.1"]).refusal(),
            Some(Reason::AddressSpecialPurpose)
        );
    }

    #[test]
    fn webhooks_follow_no_redirects() {
        let answer = ips(&["93.184.216.34"]);
        let d = decide(
            "https://hooks.example/",
            Ok(&Policy::open()),
            &AddressGuard::default(),
            Purpose::Webhook,
            1_800_000_000,
            |_| Ok(answer),
        );
        assert_eq!(d.max_redirects, 0);
    }
}
