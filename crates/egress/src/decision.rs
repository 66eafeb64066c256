//! The decision every outbound request goes through, in order: URL → tenant
//! policy → metadata names → DNS → every resolved address → deny rules on
//! addresses. Pure: the resolver is a parameter, so the whole pipeline is
//! tested without sockets, and `gatehouse egress check` runs exactly this.

use std::net::IpAddr;

use gatehouse_core::Reason;
use serde::Serialize;

use crate::policy::{Policy, PolicyError, PolicyRefusal};
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
}

/// Decides whether `raw_url` may be fetched. `resolve` answers for host
/// names (an error or an empty answer refuses: fail closed).
pub fn decide(
    raw_url: &str,
    policy: Result<&Policy, &PolicyError>,
    guard: &AddressGuard,
    purpose: Purpose,
    resolve: impl FnOnce(&str) -> Result<Vec<IpAddr>, ()>,
) -> Decision {
    let target = match parse_url(raw_url) {
        Ok(t) => t,
        Err(reason) => return Decision::refuse(reason, None, None, Vec::new()),
    };
    decide_target(target, policy, guard, purpose, resolve)
}

/// [`decide`] for an already-parsed target (CONNECT authorities, redirects).
pub fn decide_target(
    target: Target,
    policy: Result<&Policy, &PolicyError>,
    guard: &AddressGuard,
    purpose: Purpose,
    resolve: impl FnOnce(&str) -> Result<Vec<IpAddr>, ()>,
) -> Decision {
    let policy = match policy {
        Ok(policy) => policy,
        Err(e) => return Decision::refuse(e.reason, None, Some(&target), Vec::new()),
    };
    let mut dry_run = None;
    // Policy refusals are dry-runnable; the address checks below never are.
    let mut policy_step = |result: Result<(), PolicyRefusal>| -> Result<(), (Reason, Option<String>)> {
        match result {
            Ok(()) => Ok(()),
            Err(r) if policy.dry_run() => {
                dry_run.get_or_insert(DryRunRefusal { reason: r.reason, rule: r.rule });
                Ok(())
            }
            Err(r) => Err((r.reason, r.rule)),
        }
    };
    if let Err((reason, rule)) = policy_step(policy.check_host(&target)) {
        return Decision::refuse(reason, rule, Some(&target), Vec::new());
    }
    let addresses = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) if is_metadata_host_name(name) => {
            return Decision::refuse(Reason::HostMetadataName, Some(name.clone()), Some(&target), Vec::new());
        }
        Host::Name(name) if let Some(rule) = special_use_name(name) => {
            return Decision::refuse(
                Reason::HostSpecialUseName,
                Some(rule.to_owned()),
                Some(&target),
                Vec::new(),
            );
        }
        Host::Name(name) => match resolve(name) {
            Ok(addresses) if !addresses.is_empty() => addresses,
            _ => return Decision::refuse(Reason::DnsFailed, None, Some(&target), Vec::new()),
        },
    };
    // Any forbidden address refuses the request: a mixed answer is an attack.
    for ip in &addresses {
        if let Err(r) = guard.check(*ip) {
            return Decision::refuse(r.reason, Some(r.rule.to_owned()), Some(&target), addresses.clone());
        }
    }
    if let Err((reason, rule)) = policy_step(policy.check_addresses(&addresses, target.port)) {
        return Decision::refuse(reason, rule, Some(&target), addresses);
    }
    Decision {
        decision: "allow",
        reason: "allowed".to_owned(),
        rule: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn check(url: &str, policy: &Policy, answer: &[&str]) -> Decision {
        let answer = ips(answer);
        decide(url, Ok(policy), &AddressGuard::default(), Purpose::Request, |_| Ok(answer))
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
            |_| Ok(vec![]),
        );
        assert_eq!(d.refusal(), Some(Reason::PolicyUnreadable));
        let failing =
            decide("https://x.com/", Ok(&open), &AddressGuard::default(), Purpose::Request, |_| Err(()));
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
            |_| Ok(answer),
        );
        assert_eq!(d.max_redirects, 0);
    }
}
