//! The fetch API's door: a request the platform makes on a run's behalf
//! goes through the same rules as the run's own through the proxy. The
//! run's grant is opened and one request spent (refused requests spend
//! too), the run's leases are applied at the door (`leases`), a webhook
//! delivery may be signed with the run's signing lease, the tenant's policy
//! and the address guard decide every hop (`fetch`), bytes are paid as they
//! flow (`meter`), and every refusal is recorded as the run's.
//!
//! The face that carries the request (the server's `/v1/egress/fetch`)
//! only reads the wire into a [`FetchRequest`] and writes the answer back.

use std::sync::Arc;

use gatehouse_capability::{CredentialSecret, GrantClaims, GrantSealer};
use gatehouse_core::{Clock, ErrorCode, Reason, Refusal, RefusalKind, UnixTime, new_id};
use gatehouse_ledger::{Ledger, Operation, refusal_kind, spend};

use crate::fetch::{FetchRefusal, FetchRequest, Fetcher};
use gatehouse_capability::sigv4::{AwsKeys, Signer};

use crate::inject::{Delivery, LeaseEntry, LeaseState};
use crate::leases::{LastCheck, LeaseFuture, LeaseSource, OfRun, Outbound, mentions_placeholder};
use crate::mcp_door::McpRequest;
use crate::meter::{EgressMeter, door_refusal_kind};
use crate::policy::mcp::McpDeclared;
use crate::proxy::{PolicySource, RefusalSink};
use crate::sigv4::{Payload, ToSign};

/// Where a webhook signing lease's secret comes from: the lease must be the
/// run's, live, for webhook signing, and for the delivery's host.
pub trait SigningSecrets: Send + Sync + 'static {
    /// The secret of `lease_id` of `run_id` (of `tenant_id`) for `host`.
    fn signing_secret<'a>(
        &'a self,
        run_id: &'a str,
        tenant_id: Option<&'a str>,
        lease_id: &'a str,
        host: &'a str,
    ) -> LeaseFuture<'a, Result<CredentialSecret, Reason>>;
}

/// What the fetch API's door is made of: the parts the proxy has too.
pub struct FetchDoor {
    /// The fetch client (pinned connections, per-hop decisions).
    pub fetcher: Fetcher,
    /// Opens runs' grants.
    pub grants: GrantSealer,
    /// Where requests and bytes are spent.
    pub ledger: Ledger,
    /// A grant without a live record is refused.
    pub ledger_required: bool,
    /// Tenants' policies.
    pub policies: Arc<dyn PolicySource>,
    /// Runs' leases (gateways holding credential keys).
    pub leases: Option<Arc<dyn LeaseSource>>,
    /// Webhook signing leases' secrets (the same nodes).
    pub signing: Option<Arc<dyn SigningSecrets>>,
    /// The refusal record.
    pub sink: Arc<dyn RefusalSink>,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Where a run's request refused by its policy asks a person.
    pub proposals: Option<Arc<dyn crate::policy::proposal::ProposalSink>>,
}

/// Why the door did not fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorError {
    /// Refused for this reason (recorded as the run's, or as a grant that
    /// did not open).
    Refused(Reason),
    /// Refused by the tenant's policy, with what the agent is told beside
    /// the reason: a deny rule's reason, the proposal the refusal made.
    Policy {
        /// The reason code.
        reason: Reason,
        /// A deny rule's reason for the agent.
        rule_reason: Option<String>,
        /// The proposal made for a person to decide.
        proposal_id: Option<String>,
    },
    /// This node holds no credentials to sign with.
    NotServed,
    /// A fault of gatehouse's own.
    Internal,
}

impl DoorError {
    /// A fetch's refusal as the door's: with its deny rule's reason when
    /// it has one.
    fn of(refusal: &FetchRefusal, proposal_id: Option<String>) -> Self {
        match (&refusal.rule_reason, proposal_id) {
            (None, None) => Self::Refused(refusal.reason),
            (rule_reason, proposal_id) => {
                Self::Policy { reason: refusal.reason, rule_reason: rule_reason.clone(), proposal_id }
            }
        }
    }

    /// The public error code of a refusal: a failure of the upstream is the
    /// gateway's (`bad_gateway`), a header the caller may not send its own
    /// (`bad_request`), the rest a refusal (or an outage).
    pub fn code(self) -> ErrorCode {
        match self {
            Self::Refused(
                Reason::UpstreamUnreachable
                | Reason::UpstreamTimeout
                | Reason::TlsFailed
                | Reason::UpstreamBadResponse
                | Reason::ContentEncodingInvalid
                | Reason::ResponseTooLarge,
            ) => ErrorCode::BadGateway,
            Self::Refused(Reason::HeaderNotAllowed) => ErrorCode::BadRequest,
            Self::Refused(reason) | Self::Policy { reason, .. } => reason.refusal_code(),
            Self::NotServed => ErrorCode::Forbidden,
            Self::Internal => ErrorCode::Internal,
        }
    }
}

/// Who makes a request with a stored credential outside any run, and the
/// credential's facts (sealed with its secret, so they are the credential's
/// own, not a row's).
#[derive(Debug, Clone)]
pub struct CredentialUse<'a> {
    /// The request, to join with logs.
    pub request_id: &'a str,
    /// The credential's tenant, whose policy decides.
    pub tenant_id: &'a str,
    /// Who acted (`person:NAME`).
    pub actor: &'a str,
    /// The credential's hosts.
    pub hosts: &'a [String],
    /// How it goes in.
    pub delivery: Delivery,
    /// It may be sent over plain `http://`.
    pub allow_plain_http: bool,
}

/// What an answer to a person's request shows where the credential's
/// secret was echoed.
pub const REDACTED_CREDENTIAL: &str = "gatehouse_credential_redacted";

impl FetchDoor {
    /// A person's own request with a stored credential: no run, grant or
    /// budget, but every other rule of a run's fetch. The URL must be on the
    /// credential's host (over TLS unless the credential allows plain
    /// HTTP), the credential goes in by its rule, the tenant's policy and
    /// the address guard decide every hop, redirects stay on the origin (so
    /// the secret never follows one elsewhere), and the answer is scrubbed
    /// of every form of the secret that was sent. Refusals are recorded as
    /// the tenant's, naming who acted; nothing is sent after one.
    pub async fn fetch_with_credential(
        &self,
        who: &CredentialUse<'_>,
        secret: &CredentialSecret,
        mut fetch: FetchRequest,
    ) -> Result<crate::fetch::FetchResponse, DoorError> {
        let note = |kind, reason, host: Option<String>, rule, dry_run| {
            self.sink.refused(Refusal {
                kind,
                reason,
                tenant_id: Some(who.tenant_id.to_owned()),
                run_id: None,
                request_id: Some(who.request_id.to_owned()),
                host,
                rule,
                lease_id: None,
                actor: Some(who.actor.to_owned()),
                file_name: None,
                dry_run,
                at: 0,
            });
            DoorError::Refused(reason)
        };
        let target = crate::parse_url(&fetch.url)
            .map_err(|reason| note(RefusalKind::EgressRefused, reason, None, None, false))?;
        let host = target.host.to_string();
        if !who.hosts.contains(&host) {
            return Err(note(RefusalKind::SecretRefused, Reason::LeaseHostMismatch, Some(host), None, false));
        }
        if target.scheme != crate::Scheme::Https && !who.allow_plain_http {
            return Err(note(RefusalKind::SecretRefused, Reason::LeasePlainHttp, Some(host), None, false));
        }
        let entry = LeaseEntry {
            lease_id: String::new(),
            placeholder: REDACTED_CREDENTIAL.to_owned(),
            host: host.clone(),
            granted_at: 0,
            state: LeaseState::Live { expires_at: UnixTime::MAX },
            delivery: who.delivery.clone(),
            allow_plain_http: who.allow_plain_http,
        };
        let put_in = match &who.delivery {
            Delivery::Inject(_) => crate::inject::apply(&mut fetch.headers, &entry, secret.expose()),
            Delivery::SigV4(scope) => {
                AwsKeys::from_material(secret).map_err(|_| Reason::CredentialUnreadable).and_then(|keys| {
                    let signer = Signer::new(keys, scope.clone());
                    let request = ToSign {
                        method: fetch.method.as_str(),
                        authority: &target.authority(),
                        path_and_query: &target.path_and_query,
                        payload: Payload::InHand(&fetch.body),
                    };
                    crate::sigv4::sign(
                        &mut fetch.headers,
                        &request,
                        &signer,
                        REDACTED_CREDENTIAL,
                        self.clock.now(),
                    )
                })
            }
        };
        fetch.scrub = put_in
            .map_err(|reason| note(RefusalKind::SecretRefused, reason, Some(host.clone()), None, false))?;
        // The answer must come back as sent to be scrubbed of the secret.
        fetch.headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        let policy = self.policies.policy(Some(who.tenant_id));
        let mut would_refuse = Vec::new();
        let fetched = self.fetcher.fetch_for_run(policy.as_deref(), fetch, None, &mut would_refuse).await;
        for dry in would_refuse {
            note(RefusalKind::EgressRefused, dry.reason, dry.host, dry.rule, true);
        }
        fetched.map_err(|r| {
            let error = DoorError::of(&r, None);
            note(door_refusal_kind(r.reason), r.reason, r.host, r.rule, false);
            error
        })
    }
}

/// A fetch on a run's behalf: its grant opened and a request spent.
pub struct RunFetch<'a> {
    door: &'a FetchDoor,
    request_id: &'a str,
    claims: GrantClaims,
    meter: EgressMeter,
    /// The run's lease generation, as its spend answered (`None`: unknown).
    lease_generation: Option<u64>,
}

impl FetchDoor {
    /// Opens `grant` and spends one request from it for `fetch`.
    pub async fn start<'a>(
        &'a self,
        request_id: &'a str,
        grant: Option<&str>,
        fetch: &FetchRequest,
    ) -> Result<RunFetch<'a>, DoorError> {
        let now = self.clock.now();
        let claims = self.grants.open(grant.unwrap_or_default().trim(), now).map_err(|reason| {
            self.sink.refused(Refusal {
                kind: RefusalKind::GrantRefused,
                reason,
                tenant_id: None,
                run_id: None,
                request_id: Some(request_id.to_owned()),
                host: None,
                rule: None,
                lease_id: None,
                actor: None,
                file_name: None,
                dry_run: false,
                at: 0,
            });
            DoorError::Refused(reason)
        })?;
        let meter =
            EgressMeter::new(self.ledger.clone(), &claims.grant_id, self.clock.clone(), self.ledger_required);
        let mut run = RunFetch { door: self, request_id, claims, meter, lease_generation: None };
        match spend(&self.ledger, &run.claims.grant_id, &Operation::Request, now, self.ledger_required).await
        {
            Ok(spent) => run.lease_generation = spent.map(|s| s.lease_generation),
            // A request carrying a placeholder is told what became of its
            // credential, as at the proxy.
            Err(reason) if self.leases.is_some() && mentions_placeholder(&fetch.headers, &fetch.url) => {
                let reason = crate::leases::refused_before_the_leases(reason);
                run.note(RefusalKind::SecretRefused, reason, None, None, None, false);
                return Err(DoorError::Refused(reason));
            }
            Err(reason) => {
                run.note(refusal_kind(reason), reason, None, None, None, false);
                return Err(DoorError::Refused(reason));
            }
        }
        Ok(run)
    }
}

impl RunFetch<'_> {
    /// The run (its exec id).
    pub fn run_id(&self) -> &str {
        &self.claims.exec_id
    }

    /// The run's leases applied to the request (see `leases`): its
    /// credential put in (and the answer to be scrubbed of it), or the
    /// request refused. Redirects stay on the origin, so the credential
    /// never follows one elsewhere. `body_in_hand`: the request's body is
    /// `fetch.body` (not streamed), and is looked at too.
    ///
    /// Returns the run's placeholders, which a streamed body is watched
    /// for (`leases::WatchedBody`).
    pub async fn inject(
        &self,
        fetch: &mut FetchRequest,
        body_in_hand: bool,
    ) -> Result<Vec<String>, DoorError> {
        let Some(source) = self.door.leases.as_ref() else {
            return Ok(Vec::new());
        };
        // A URL that does not parse is refused by the fetch itself.
        let Ok(target) = crate::parse_url(&fetch.url) else {
            return Ok(Vec::new());
        };
        let host = target.host.to_string();
        let run = OfRun {
            grant_id: &self.claims.grant_id,
            run_id: &self.claims.exec_id,
            generation: self.lease_generation,
        };
        let authority = target.authority();
        let outbound = Outbound {
            method: fetch.method.as_str(),
            authority: &authority,
            headers: &mut fetch.headers,
            path_and_query: &target.path_and_query,
            host: &host,
            over_tls: target.scheme == crate::Scheme::Https,
            body: body_in_hand.then_some(&fetch.body[..]),
        };
        match crate::leases::at_the_door(source.as_ref(), run, outbound, self.door.clock.now()).await {
            Ok(injected) => {
                if let Some(lease_id) = injected.lease_id {
                    fetch.last_check = Some(self.lease_still_usable(source, lease_id, injected.generation));
                }
                fetch.scrub = injected.scrub;
                Ok(injected.watch)
            }
            Err(refusal) => {
                self.note(
                    RefusalKind::SecretRefused,
                    refusal.reason,
                    Some(host),
                    None,
                    refusal.lease_id,
                    false,
                );
                Err(DoorError::Refused(refusal.reason))
            }
        }
    }

    /// The fetcher's last check for a request carrying `lease_id`'s
    /// secret: the fetch resolves its name after the credential went in, so
    /// the lease is checked again right before each hop goes out.
    fn lease_still_usable(
        &self,
        source: &Arc<dyn LeaseSource>,
        lease_id: String,
        generation: u64,
    ) -> LastCheck {
        let (source, clock) = (source.clone(), self.door.clock.clone());
        let (grant_id, run_id) = (self.claims.grant_id.clone(), self.claims.exec_id.clone());
        LastCheck::new(move || {
            let (source, clock) = (source.clone(), clock.clone());
            let (grant_id, run_id, lease_id) = (grant_id.clone(), run_id.clone(), lease_id.clone());
            Box::pin(async move {
                crate::leases::still_usable(
                    source.as_ref(),
                    &grant_id,
                    &run_id,
                    &lease_id,
                    generation,
                    clock.now(),
                )
                .await
            })
        })
    }

    /// Signs a webhook delivery with the run's signing lease `lease_id`
    /// (Standard Webhooks headers; the secret never leaves gatehouse).
    pub async fn sign(&self, fetch: &mut FetchRequest, lease_id: &str) -> Result<(), DoorError> {
        let source = self.door.signing.as_ref().ok_or(DoorError::NotServed)?;
        let host = crate::parse_url(&fetch.url).map(|t| t.host.to_string()).unwrap_or_default();
        let secret = source
            .signing_secret(&self.claims.exec_id, self.claims.tenant_id.as_deref(), lease_id, &host)
            .await
            .map_err(|reason| {
                self.note(
                    RefusalKind::SecretRefused,
                    reason,
                    Some(host.clone()),
                    None,
                    Some(lease_id.to_owned()),
                    false,
                );
                DoorError::Refused(reason)
            })?;
        let id = new_id("msg");
        let timestamp = self.door.clock.now();
        let signature = gatehouse_capability::webhook_signature(&secret, &id, timestamp, &fetch.body);
        let headers = [
            ("webhook-id", id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        for (name, value) in headers {
            let value = http::HeaderValue::try_from(value).map_err(|_| DoorError::Internal)?;
            fetch.headers.insert(name, value);
        }
        Ok(())
    }

    /// Whether a request to `url` is to one of the tenant's declared MCP
    /// servers: its body must then be read whole ([`RunFetch::fetch`]),
    /// never streamed past the tool rules.
    pub fn reads_as_mcp(&self, url: &str) -> bool {
        let policy = self.door.policies.policy_of_run(self.claims.tenant_id.as_deref(), &self.claims.exec_id);
        match (policy, crate::parse_url(url)) {
            (Ok(policy), Ok(target)) => !matches!(policy.mcp_server(&target), Ok(None)),
            _ => false,
        }
    }

    /// The whole fetch, the answer held (capped). A request to one of the
    /// tenant's declared MCP servers is read as MCP (`mcp_door`).
    pub async fn fetch(&self, mut fetch: FetchRequest) -> Result<crate::fetch::FetchResponse, DoorError> {
        let policy = self.door.policies.policy_of_run(self.claims.tenant_id.as_deref(), &self.claims.exec_id);
        let declared = match (&policy, crate::parse_url(&fetch.url)) {
            (Ok(policy), Ok(target)) => match policy.mcp_server(&target) {
                Ok(declared) => declared.cloned().map(|d| (d, target.host.to_string())),
                Err(reason) => {
                    self.note(
                        RefusalKind::EgressRefused,
                        reason,
                        Some(target.host.to_string()),
                        None,
                        None,
                        false,
                    );
                    return Err(DoorError::Refused(reason));
                }
            },
            _ => None,
        };
        let mut errors = Vec::new();
        if let Some((declared, host)) = &declared {
            match self.mcp_request(&mut fetch, declared, host).await? {
                McpRequest::Answer { errors, batch } => return Ok(mcp_answer(&errors, batch)),
                McpRequest::Forward { errors: refused, .. } => errors = refused,
            }
        }
        let mut would_refuse = Vec::new();
        let fetched = self
            .door
            .fetcher
            .fetch_for_run(policy.as_deref(), fetch, Some(&self.meter), &mut would_refuse)
            .await;
        let mut answer = self.finish(would_refuse, fetched).await?;
        if let Some((declared, host)) = declared {
            match crate::mcp_door::filter_whole_answer(
                &answer.headers,
                &answer.body,
                &declared.tools,
                &errors,
            ) {
                Ok(Some(body)) => {
                    answer.headers.remove(http::header::CONTENT_LENGTH);
                    answer.body = body;
                }
                // The server answered neither JSON nor SSE (a bare 202):
                // the refused calls' errors are the answer.
                Ok(None) => return Ok(mcp_answer(&errors, true)),
                Err(reason) => {
                    self.note(
                        RefusalKind::EgressRefused,
                        reason,
                        Some(host),
                        Some(declared.name),
                        None,
                        false,
                    );
                    return Err(DoorError::Refused(reason));
                }
            }
        }
        Ok(answer)
    }

    /// A run's request to a declared MCP server read, its calls judged and
    /// paid, the refused ones recorded; the body replaced by what goes on.
    async fn mcp_request(
        &self,
        fetch: &mut FetchRequest,
        declared: &McpDeclared,
        host: &str,
    ) -> Result<McpRequest, DoorError> {
        let read = crate::mcp_door::read_request(
            &fetch.method,
            &fetch.headers,
            &fetch.body,
            declared,
            &self.door.ledger,
            &self.claims.grant_id,
            self.door.ledger_required,
            self.door.clock.now(),
        )
        .await;
        let read = read.map_err(|reason| {
            let server = Some(declared.name.clone());
            self.note(RefusalKind::EgressRefused, reason, Some(host.to_owned()), server, None, false);
            DoorError::Refused(reason)
        })?;
        let outcome = read.record(self.door.sink.as_ref(), &declared.name, |kind, reason, rule| {
            self.refusal(kind, reason, Some(host.to_owned()), Some(rule))
        });
        if let McpRequest::Forward { body: Some(body), .. } = &outcome {
            fetch.body = body.clone();
            fetch.headers.remove(http::header::CONTENT_LENGTH);
        }
        Ok(outcome)
    }

    /// The fetch with the bodies streamed both ways.
    pub async fn fetch_streamed(
        &self,
        fetch: FetchRequest,
        body: crate::fetch::StreamBody,
    ) -> Result<crate::fetch::StreamedResponse, DoorError> {
        let policy = self.door.policies.policy_of_run(self.claims.tenant_id.as_deref(), &self.claims.exec_id);
        // Streamed bodies are not read as MCP: a declared server's messages
        // go through the whole-body fetch (the raw route asks
        // `reads_as_mcp` first), never past it unread.
        if let (Ok(policy), Ok(target)) = (&policy, crate::parse_url(&fetch.url))
            && !matches!(policy.mcp_server(&target), Ok(None))
        {
            let reason = Reason::McpMessageInvalid;
            self.note(RefusalKind::EgressRefused, reason, Some(target.host.to_string()), None, None, false);
            return Err(DoorError::Refused(reason));
        }
        let mut would_refuse = Vec::new();
        let fetched = self
            .door
            .fetcher
            .fetch_streamed(policy.as_deref(), fetch, body, &self.meter, &mut would_refuse)
            .await;
        self.finish(would_refuse, fetched).await
    }

    /// Records what a dry-run policy would have refused, and a refusal
    /// (asking a person, by a proposal, where one could lift it).
    async fn finish<T>(
        &self,
        would_refuse: Vec<FetchRefusal>,
        fetched: Result<T, FetchRefusal>,
    ) -> Result<T, DoorError> {
        for dry in would_refuse {
            self.note(RefusalKind::EgressRefused, dry.reason, dry.host, dry.rule, None, true);
        }
        let refusal = match fetched {
            Ok(answer) => return Ok(answer),
            Err(refusal) => refusal,
        };
        let proposal_id = match (&self.door.proposals, self.claims.tenant_id.as_deref(), &refusal.asked) {
            (Some(sink), Some(tenant), Some(rule)) => {
                sink.propose(tenant, &self.claims.exec_id, rule.clone(), refusal.reason).await
            }
            _ => None,
        };
        let error = DoorError::of(&refusal, proposal_id);
        self.note(door_refusal_kind(refusal.reason), refusal.reason, refusal.host, refusal.rule, None, false);
        Err(error)
    }

    /// A refusal of the run's request, to be recorded.
    fn refusal(
        &self,
        kind: RefusalKind,
        reason: Reason,
        host: Option<String>,
        rule: Option<String>,
    ) -> Refusal {
        Refusal {
            kind,
            reason,
            tenant_id: self.claims.tenant_id.clone(),
            run_id: Some(self.claims.exec_id.clone()),
            request_id: Some(self.request_id.to_owned()),
            host,
            rule,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: 0,
        }
    }

    /// Records a refusal of the run's request (or, `dry_run`, what a
    /// dry-run policy would have refused).
    fn note(
        &self,
        kind: RefusalKind,
        reason: Reason,
        host: Option<String>,
        rule: Option<String>,
        lease_id: Option<String>,
        dry_run: bool,
    ) {
        self.door.sink.refused(Refusal { lease_id, dry_run, ..self.refusal(kind, reason, host, rule) });
    }
}

/// Gatehouse's own answer for a body it sent nothing of.
fn mcp_answer(errors: &[serde_json::Value], batch: bool) -> crate::fetch::FetchResponse {
    let (status, headers, body) = crate::mcp_door::own_answer(errors, batch);
    crate::fetch::FetchResponse { status, headers, body, redirects: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstreams_failure_is_the_gateways_and_the_rest_a_refusal_or_an_outage() {
        for reason in [Reason::UpstreamUnreachable, Reason::TlsFailed, Reason::ResponseTooLarge] {
            assert_eq!(DoorError::Refused(reason).code(), ErrorCode::BadGateway);
        }
        assert_eq!(DoorError::Refused(Reason::HeaderNotAllowed).code(), ErrorCode::BadRequest);
        assert_eq!(DoorError::Refused(Reason::PolicyDenied).code(), ErrorCode::Refused);
        assert_eq!(DoorError::Refused(Reason::LedgerUnavailable).code(), ErrorCode::Unavailable);
        assert_eq!(DoorError::NotServed.code(), ErrorCode::Forbidden);
    }
}
