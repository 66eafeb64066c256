//! What a run may ask a person to allow: one exact rule. A proposal never
//! asks for a wildcard, a range or a host the policy denies, and never for
//! a host no policy may open (a special-purpose address, a metadata or
//! special-use name): a person must never be asked to open what the door
//! would refuse anyway, nor be able to click a range open.

use gatehouse_core::{Reason, UnixTime};
use http::Method;
use serde_json::{Map, Value, json};

use super::{Entry, Policy};
use crate::special::{AddressGuard, is_metadata_host_name, special_use_name};
use crate::target::{Host, Target};

/// Where a run's request refused by its policy asks a person: the plane's
/// proposals. The answer is the proposal's id (`None`: no proposal was
/// made, and the refusal says nothing of one).
pub trait ProposalSink: Send + Sync + 'static {
    /// Records (or finds) `run_id`'s ask for `rule`, refused with `reason`.
    fn propose<'a>(
        &'a self,
        tenant_id: &'a str,
        run_id: &'a str,
        rule: ProposedRule,
        reason: Reason,
    ) -> crate::leases::LeaseFuture<'a, Option<String>>;
}

/// The rule a proposal asks for: an exact host (and port, when not the
/// scheme's default), optionally narrowed to methods and paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposedRule {
    /// The exact host, normalized.
    pub host: Host,
    /// The port, when the request's was not its scheme's default.
    pub port: Option<u16>,
    /// The methods asked for (none: every method).
    pub methods: Option<Vec<Method>>,
    /// The paths asked for, normalized (none: every path).
    pub paths: Option<Vec<String>>,
}

impl ProposedRule {
    /// The rule a request refused by the policy asks for: its exact host,
    /// its method, and, refused by its path, that path. Only a refusal a
    /// person could lift gets one (`policy_not_allowed`,
    /// `policy_method_not_allowed`, `policy_path_not_allowed`); a deny
    /// rule's refusal does not: the tenant decided that one already.
    pub fn for_refused(target: &Target, method: &Method, reason: Reason) -> Option<Self> {
        let paths = match reason {
            Reason::PolicyNotAllowed | Reason::PolicyMethodNotAllowed => None,
            Reason::PolicyPathNotAllowed => Some(vec![super::path::normalize(&target.path_and_query).ok()?]),
            _ => return None,
        };
        let port = (target.port != target.scheme.default_port()).then_some(target.port);
        Some(Self { host: target.host.clone(), port, methods: Some(vec![method.clone()]), paths })
    }

    /// The rule a refused `CONNECT` asks for: the host (and port) alone,
    /// since nothing inside the tunnel was seen.
    pub fn for_refused_tunnel(target: &Target, reason: Reason) -> Option<Self> {
        (reason == Reason::PolicyNotAllowed).then(|| Self {
            host: target.host.clone(),
            port: (target.port != target.scheme.default_port()).then_some(target.port),
            methods: None,
            paths: None,
        })
    }

    /// Whether a person may be asked for this rule under `policy` at `now`:
    /// not a special-purpose address (`address_special_purpose`,
    /// `address_metadata`), not a metadata or special-use name
    /// (`host_metadata_name`, `host_special_use_name`), not a host the
    /// policy denies outright (`policy_denied`).
    pub fn askable(&self, policy: &Policy, guard: &AddressGuard, now: UnixTime) -> Result<(), Reason> {
        match &self.host {
            Host::Ip(ip) => guard.check(*ip).map_err(|refusal| refusal.reason)?,
            Host::Name(name) => {
                if is_metadata_host_name(name) {
                    return Err(Reason::HostMetadataName);
                }
                if special_use_name(name).is_some() {
                    return Err(Reason::HostSpecialUseName);
                }
            }
        }
        let target = Target {
            scheme: crate::target::Scheme::Https,
            host: self.host.clone(),
            port: self.port.unwrap_or(443),
            path_and_query: "/".into(),
        };
        match policy.check_host(&target, now) {
            Err(refusal) if refusal.reason == Reason::PolicyDenied => Err(Reason::PolicyDenied),
            _ => Ok(()),
        }
    }

    /// The policy entry approving it adds: exactly this rule.
    pub fn entry(&self) -> Entry {
        let host = match (&self.host, self.port) {
            (Host::Ip(std::net::IpAddr::V6(ip)), Some(port)) => format!("[{ip}]:{port}"),
            (host, Some(port)) => format!("{host}:{port}"),
            (host, None) => host.to_string(),
        };
        let mut object = Map::new();
        object.insert("host".into(), Value::String(host));
        if let Some(methods) = &self.methods {
            object.insert("methods".into(), json!(methods.iter().map(Method::as_str).collect::<Vec<_>>()));
        }
        if let Some(paths) = &self.paths {
            object.insert("paths".into(), json!(paths));
        }
        Entry::Object(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse_url;

    const NOW: UnixTime = 1_800_000_000;

    #[test]
    fn a_refused_request_asks_for_its_exact_host_method_and_path() {
        let target = parse_url("https://API.Example.com:8443/v1/../v2/items?x=1").unwrap();
        let asked = ProposedRule::for_refused(&target, &Method::POST, Reason::PolicyPathNotAllowed).unwrap();
        assert_eq!(
            asked.entry().to_string(),
            r#"{"host":"api.example.com:8443","methods":["POST"],"paths":["/v2/items"]}"#
        );
        let plain = parse_url("https://api.example.com/x").unwrap();
        let asked = ProposedRule::for_refused(&plain, &Method::GET, Reason::PolicyNotAllowed).unwrap();
        assert_eq!(asked.entry().to_string(), r#"{"host":"api.example.com","methods":["GET"]}"#);
        // The entry reads back as a policy rule allowing exactly that.
        let doc = json!({"mode": "allowlist", "allow": [asked.entry()]});
        let policy = Policy::from_json(doc.to_string().as_bytes()).unwrap();
        assert!(policy.check_request(&plain, &Method::GET, NOW).is_ok());
        assert!(policy.check_request(&plain, &Method::POST, NOW).is_err());
        for reason in [Reason::PolicyDenied, Reason::AddressSpecialPurpose, Reason::UrlAmbiguousPath] {
            assert_eq!(ProposedRule::for_refused(&plain, &Method::GET, reason), None, "{reason:?}");
        }
    }

    #[test]
    fn no_one_is_asked_to_open_what_no_policy_may_open() {
        let policy = Policy::from_json(br#"{"mode":"allowlist","deny":["evil.example"]}"#).unwrap();
        let guard = AddressGuard::default();
        let ask = |url: &str| {
            let target = parse_url(url).unwrap();
            ProposedRule::for_refused(&target, &Method::GET, Reason::PolicyNotAllowed)
                .unwrap()
                .askable(&policy, &guard, NOW)
        };
        assert_eq!(ask("https://api.example.com/"), Ok(()));
        assert_eq!(ask("https://evil.example/"), Err(Reason::PolicyDenied));
        assert_eq!(ask("http://169.254.169.254/latest/"), Err(Reason::AddressMetadata));
        assert_eq!(ask("http://10.0.0.1/"), Err(Reason::AddressSpecialPurpose));
        assert_eq!(ask("http://metadata.google.internal/"), Err(Reason::HostMetadataName));
        assert_eq!(ask("http://printer.local/"), Err(Reason::HostSpecialUseName));
    }
}
