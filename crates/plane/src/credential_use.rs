//! A person's own request with a stored credential: the platform relays
//! who acted (testing a runtime from a settings screen, a chat calling a
//! provider), and gatehouse makes the request with the credential it keeps
//! sealed, so the platform never holds a second copy of the secret.
//!
//! No run, no grant, no budget. Instead: the caller may act on the tenant,
//! the actor is a person (`person:NAME`), the tenant's kill switch is off,
//! the credential is the tenant's and not a signing secret, the tenant's
//! rate of such requests (counted across the fleet in the ledger) is not
//! spent; then the door applies every rule of a run's fetch (the
//! credential's host only, the tenant's policy, the address guard,
//! same-origin redirects, timeouts and caps, the answer scrubbed). Each
//! refusal is recorded as the tenant's, naming the person; each call that
//! reaches the door is audited (`credential.use`: the person, the method,
//! the host and path, the status), and an answer whose call could not be
//! audited is not given.

use gatehouse_core::{Reason, Refusal, RefusalKind};
use gatehouse_egress::fetch::{FetchRequest, FetchResponse};
use gatehouse_egress::run_fetch::{CredentialUse, DoorError};
use gatehouse_ledger::{LedgerBackend as _, Rate};
use gatehouse_store::{AuditRecord, Credential};
use serde_json::json;

use crate::credential_kinds::Stored;
use crate::{Caller, Plane, PlaneError, Result};

/// The window a tenant's rate of credential use is counted over.
const RATE_WINDOW_SECS: i64 = 60;
/// The longest path an audit entry keeps (the rest is cut, marked `…`).
const AUDITED_PATH_CHARS: usize = 512;

/// A person's request, as the face read it.
#[derive(Debug)]
pub struct PersonRequest<'a> {
    /// The tenant the route names.
    pub tenant_id: &'a str,
    /// The credential the route names.
    pub credential_id: &'a str,
    /// Who acted, as the platform relayed it: `person:NAME`.
    pub actor: &'a str,
    /// The request to make (its credential not in yet).
    pub fetch: FetchRequest,
}

/// The person an actor names, if it is `person:NAME` with a name the audit
/// log can carry.
pub fn person_of(actor: &str) -> Option<&str> {
    actor.strip_prefix("person:").filter(|name| crate::is_person_name(name))
}

impl Plane {
    /// Whether this node makes people's requests with stored credentials:
    /// it opens them (the gateway's keys) and has a door.
    pub fn uses_credentials(&self) -> bool {
        self.fetch_door.is_some()
            && self.door_leases.is_some()
            && self.store.is_some()
            && self.ledger.is_some()
    }

    /// Makes `req` with its stored credential on a person's behalf (see the
    /// module docs). Served where credentials open and runs' traffic goes
    /// out (the gateway and `all` roles).
    pub async fn use_credential(
        &self,
        request_id: &str,
        caller: &Caller,
        req: PersonRequest<'_>,
    ) -> Result<FetchResponse> {
        let (Some(door), Some(leases), Some(store), Some(ledger)) =
            (self.fetch_door.as_ref(), self.door_leases.as_ref(), self.store.as_ref(), self.ledger.as_ref())
        else {
            return Err(PlaneError::NotServed);
        };
        self.require(request_id, caller, Some(req.tenant_id))?;
        let Some(person) = person_of(req.actor) else {
            self.refuse_use(request_id, req.tenant_id, None, Reason::ActorInvalid);
            return Err(PlaneError::Invalid {
                message: "actor is person:NAME, NAME 1-64 characters of letters, digits, . _ - @",
                reason: Some(Reason::ActorInvalid),
            });
        };
        let actor = format!("person:{person}");
        let refuse = |reason| {
            self.refuse_use(request_id, req.tenant_id, Some(&actor), reason);
            PlaneError::refusal(reason)
        };
        if store.tenant(req.tenant_id).await?.is_some_and(|t| t.kill_switch) {
            return Err(refuse(Reason::TenantKillSwitch));
        }
        let Some(credential) = store.credential(req.tenant_id, req.credential_id).await? else {
            self.refuse_use(request_id, req.tenant_id, Some(&actor), Reason::CredentialUnknown);
            return Err(PlaneError::NotFound(Some(Reason::CredentialUnknown)));
        };
        // A webhook signing secret signs deliveries; it is never sent.
        let Some(stored) =
            Stored::read(&credential.inject).filter(|_| credential.purpose != "webhook_signing")
        else {
            return Err(refuse(Reason::LeasePurposeMismatch));
        };
        let key = format!("credential_use:{}", req.tenant_id);
        let limit = self.settings.credential_use_per_minute;
        match ledger.take_rate(&key, limit, RATE_WINDOW_SECS, self.clock.now()).await {
            Ok(Rate::Taken) => {}
            Ok(Rate::Spent { retry_after_secs }) => {
                self.refuse_use(request_id, req.tenant_id, Some(&actor), Reason::CredentialUseRateLimited);
                return Err(PlaneError::RateLimited {
                    reason: Reason::CredentialUseRateLimited,
                    retry_after_secs: u32::try_from(retry_after_secs).unwrap_or(u32::MAX),
                });
            }
            Err(reason) => return Err(refuse(reason)),
        }
        let hosts: Vec<String> = credential.hosts().map(str::to_owned).collect();
        // The delivery of the host asked for; a host not the credential's
        // is refused by the door.
        let url_host = gatehouse_egress::parse_url(&req.fetch.url).ok().map(|t| t.host.to_string());
        let host =
            url_host.filter(|h| hosts.contains(h)).or_else(|| hosts.first().cloned()).unwrap_or_default();
        let Some(delivery) = stored.delivery_for(&host) else {
            return Err(refuse(Reason::CredentialUnreadable));
        };
        let secret = leases.secret_of(&credential, &stored).await.map_err(refuse)?;
        let method = req.fetch.method.to_string();
        let path = audited_path(&req.fetch.url);
        let who = CredentialUse {
            request_id,
            tenant_id: req.tenant_id,
            actor: &actor,
            hosts: &hosts,
            delivery,
            allow_plain_http: stored.allow_plain_http,
        };
        let fetched = door.fetch_with_credential(&who, &secret, req.fetch).await;
        drop(secret);
        let outcome = match &fetched {
            Ok(answer) => json!({"status": answer.status.as_u16()}),
            Err(DoorError::Refused(reason)) => json!({"status": null, "refused": reason}),
            Err(_) => json!({"status": null}),
        };
        self.audit_use(request_id, &actor, &credential, &method, path, outcome).await?;
        fetched.map_err(PlaneError::from)
    }

    /// Records a refusal of a person's request with a credential of
    /// `tenant_id` (before the door; the door records its own).
    fn refuse_use(&self, request_id: &str, tenant_id: &str, actor: Option<&str>, reason: Reason) {
        self.refusals.record_refusal(Refusal {
            kind: RefusalKind::SecretRefused,
            reason,
            tenant_id: Some(tenant_id.to_owned()),
            run_id: None,
            request_id: Some(request_id.to_owned()),
            host: None,
            rule: None,
            lease_id: None,
            actor: actor.map(str::to_owned),
            file_name: None,
            dry_run: false,
            at: 0,
        });
    }

    /// The `credential.use` audit entry of one call that reached the door:
    /// who, the method, the host and path, the outcome — never the secret,
    /// a header or a body. A call that cannot be audited is answered as
    /// the store's outage, without its answer.
    async fn audit_use(
        &self,
        request_id: &str,
        actor: &str,
        credential: &Credential,
        method: &str,
        path: Option<String>,
        outcome: serde_json::Value,
    ) -> Result<()> {
        let mut detail = json!({
            "credential_id": credential.credential_id,
            "name": credential.name,
            "method": method,
            "host": credential.host,
            "path": path,
            "request_id": request_id,
        });
        if let (Some(detail), serde_json::Value::Object(outcome)) = (detail.as_object_mut(), outcome) {
            detail.extend(outcome);
        }
        let record = AuditRecord {
            at: self.clock.now(),
            actor: actor.to_owned(),
            action: "credential.use".into(),
            tenant_id: Some(credential.tenant_id.clone()),
            subject: credential.credential_id.clone(),
            detail,
        };
        self.store()?.audit(&[record]).await.map_err(|e| {
            tracing::error!(
                request_id,
                code = e.code(),
                "a person's use of a credential could not be audited: its answer is withheld"
            );
            PlaneError::from(e)
        })
    }
}

/// The URL's path as an audit entry keeps it: no query (it may hold what
/// the person typed as a token) and no fragment, at most
/// [`AUDITED_PATH_CHARS`] characters.
fn audited_path(url: &str) -> Option<String> {
    let target = gatehouse_egress::parse_url(url).ok()?;
    let path = target.path_and_query.split(['?', '#']).next().unwrap_or("/");
    Some(match path.char_indices().nth(AUDITED_PATH_CHARS) {
        Some((cut, _)) => format!("{}…", &path[..cut]),
        None => path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_tokens() {
        for good in ["ada", "ada.lovelace@example.com", "a_b-c", &"x".repeat(64)] {
            assert!(crate::is_person_name(good), "{good}");
        }
        for bad in ["", "ada lovelace", "<script>", "a\u{0}b", "ädä", &"x".repeat(65), "a:b"] {
            assert!(!crate::is_person_name(bad), "{bad}");
        }
    }

    #[test]
    fn an_actor_is_a_person_with_a_plain_name() {
        assert_eq!(person_of("person:ada@example.com"), Some("ada@example.com"));
        for bad in ["ada", "person:", "agent:ada", "person:ada lovelace", "person:<b>", "Person:ada"] {
            assert_eq!(person_of(bad), None, "{bad}");
        }
        assert_eq!(person_of(&format!("person:{}", "a".repeat(65))), None);
    }

    #[test]
    fn an_audited_path_has_no_query_and_a_bound() {
        assert_eq!(audited_path("https://api.example.com/v1/me?token=abc").as_deref(), Some("/v1/me"));
        assert_eq!(audited_path("https://api.example.com").as_deref(), Some("/"));
        let long = format!("https://api.example.com/{}", "é".repeat(600));
        let path = audited_path(&long).unwrap();
        assert_eq!(path.chars().count(), AUDITED_PATH_CHARS + 1);
        assert!(path.ends_with('…'));
        assert_eq!(audited_path("not a url"), None);
    }
}
