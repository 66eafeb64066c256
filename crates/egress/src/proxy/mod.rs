//! The forward proxy sandboxes reach the outside through
//! (`HTTP_PROXY`/`HTTPS_PROXY`).
//!
//! Per request or tunnel: grant from `Proxy-Authorization` (Bearer, or the
//! password of Basic credentials, so `http://grant:<token>@proxy` works in
//! curl, pip and npm) → open the grant → spend one request in the ledger →
//! the tenant's policy and the address guard ([`crate::decide_target_resolving`]) →
//! connect to a vetted address only, or reuse an idle connection to one
//! ([`crate::pool`]) → forward (HTTP, absolute-form, `http` only) or tunnel
//! (`CONNECT`, capped in bytes and time).
//!
//! Missing or bad credentials are `407`; every refusal is `403` with the safe
//! error body and the reason code in `x-gatehouse-reason`, and is recorded
//! with tenant, run, reason, host and rule. `Proxy-Authorization` and
//! hop-by-hop headers are never forwarded. Redirects are returned to the
//! client, whose next request is checked like any other.
//!
//! A revoked grant (its run ended, its tenant killed, an emergency revoke,
//! on any node) stops more than new requests: [`Proxy::close_revoked`],
//! called every second and right after a local revocation, asks the ledger
//! about every grant with an open tunnel or an idle pooled connection here
//! and closes those of revoked grants, instead of leaving them to run out
//! their byte and time caps.
//!
//! This module takes a request as far as its grant, its spend and its
//! decision; what happens next has a room of its own, so each can be read
//! without the others: `forward` (a request sent to its upstream and its
//! answer brought back, plain HTTP or inside an intercepted tunnel),
//! `tunnel` (opaque `CONNECT` tunnels and the bytes they relay),
//! `intercepted` (tunnels terminated for lease hosts) and `refusal` (what a
//! refused client is told).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine as _;
use bytes::Bytes;
use gatehouse_capability::{GrantClaims, OpenedGrants};
use gatehouse_core::{Clock, Reason, Refusal, RefusalKind, new_id};
use gatehouse_ledger::{Ledger, LedgerBackend as _, Operation, Status, refusal_kind, spend};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use tokio::sync::Notify;

use self::refusal::{Refused, refusal_response, refusal_status};
use crate::decision::{Decision, Purpose, decide_target_resolving};
pub use crate::http1::Limits;
use crate::leases::{LeaseSource, mentions_placeholder, refused_before_the_leases};
use crate::meter::EgressMeter;
use crate::policy::{Policy, PolicyError};
use crate::pool::UpstreamPool;
pub use crate::resolve::{ResolveFn, Resolver};
use crate::special::AddressGuard;
use crate::target::Target;

mod forward;
mod intercepted;
mod mcp;
mod refusal;
mod tunnel;

/// Response body type of the proxy.
pub type ProxyBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Where the proxy records refusals (the server's refusal log).
pub trait RefusalSink: Send + Sync + 'static {
    /// Records one refusal.
    fn refused(&self, refusal: Refusal);

    /// Records a refusal of a client that proved nothing (no grant, or one
    /// that does not open: a `407`), from `client` when its address is
    /// known. The server counts these rather than itemizing them; by
    /// default it is an ordinary refusal.
    fn unauthenticated(&self, client: Option<IpAddr>, kind: RefusalKind, reason: Reason) {
        let _ = client;
        self.refused(Refusal {
            kind,
            reason,
            tenant_id: None,
            run_id: None,
            request_id: None,
            host: None,
            rule: None,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: 0,
        });
    }

    /// An MCP tool call at the door: let through (`refusal` `None`) or
    /// refused (recorded as any refusal, and by the server as the run's
    /// `tool_call_refused` event naming `tool`). The server counts both.
    fn tool_call(&self, tool: &str, refusal: Option<Refusal>) {
        let _ = tool;
        if let Some(refusal) = refusal {
            self.refused(refusal);
        }
    }
}

/// Per-tenant policies, as the proxy reads them.
pub trait PolicySource: Send + Sync + 'static {
    /// The tenant's policy: `Ok(Policy::open())` when it has none, `Err` when
    /// it cannot be read (which refuses every request).
    fn policy(&self, tenant_id: Option<&str>) -> Result<Arc<Policy>, PolicyError>;

    /// The policy a run's requests are decided by: its tenant's, with the
    /// rules a person approved for that run alone.
    fn policy_of_run(&self, tenant_id: Option<&str>, _run_id: &str) -> Result<Arc<Policy>, PolicyError> {
        self.policy(tenant_id)
    }
}

/// Policies held in memory, keyed by tenant. A stored policy that failed to
/// parse stays stored as unreadable, so it refuses instead of vanishing.
#[derive(Debug, Default)]
pub struct MemoryPolicies(RwLock<HashMap<String, Result<Arc<Policy>, PolicyError>>>);

impl MemoryPolicies {
    /// Stores (or replaces) a tenant's policy.
    pub fn set(&self, tenant_id: &str, policy: Result<Policy, PolicyError>) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(tenant_id.to_owned(), policy.map(Arc::new));
    }
}

impl PolicySource for MemoryPolicies {
    fn policy(&self, tenant_id: Option<&str>) -> Result<Arc<Policy>, PolicyError> {
        let map = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match tenant_id.and_then(|t| map.get(t)) {
            Some(stored) => stored.clone(),
            None => Ok(Arc::new(Policy::open())),
        }
    }
}

/// Counters of what the proxy let through (refusals are counted where they
/// are recorded, by kind and reason).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Requests forwarded.
    pub forwarded: AtomicU64,
    /// Tunnels opened.
    pub tunnels: AtomicU64,
}

/// Everything the proxy needs.
pub struct Proxy {
    /// Opens grants (and remembers the ones it opened).
    pub grants: OpenedGrants,
    /// Spends them.
    pub ledger: Ledger,
    /// `CODEAPI_EGRESS_LEDGER_REQUIRED`.
    pub ledger_required: bool,
    /// Tenant policies.
    pub policies: Arc<dyn PolicySource>,
    /// The address guard (with operator-opened ranges).
    pub guard: AddressGuard,
    /// Name resolution.
    pub resolver: Resolver,
    /// Refusal records.
    pub sink: Arc<dyn RefusalSink>,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Limits.
    pub limits: Limits,
    /// What was let through.
    pub stats: ProxyStats,
    /// Idle upstream connections.
    pub pool: UpstreamPool,
    /// Open tunnels, by grant.
    pub tunnels: Arc<OpenTunnels>,
    /// Runs' credential leases (none: nothing is ever injected).
    pub leases: Option<Arc<dyn LeaseSource>>,
    /// Leaf certificates under the interception CA, for tunnels to hosts a
    /// run holds a live lease for (none: every tunnel stays opaque).
    pub leaves: Option<Arc<crate::intercept::Leaves>>,
    /// TLS to upstreams for requests inside intercepted tunnels: the real
    /// roots (and the operator's extra ones).
    pub upstream_tls: Option<tokio_rustls::TlsConnector>,
    /// Where a request refused by its policy asks a person (a proposal).
    pub proposals: Option<Arc<dyn crate::policy::proposal::ProposalSink>>,
}

/// Open `CONNECT` tunnels by grant, so a revoked grant's tunnels can be closed.
#[derive(Debug, Default)]
pub struct OpenTunnels(Mutex<HashMap<String, (Arc<Notify>, usize)>>);

impl OpenTunnels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<Notify>, usize)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A tunnel of `grant_id` opens; the signal closes it.
    fn opened(&self, grant_id: &str) -> Arc<Notify> {
        let mut map = self.lock();
        let entry = map.entry(grant_id.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        entry.0.clone()
    }

    /// A tunnel of `grant_id` ended.
    fn ended(&self, grant_id: &str) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(grant_id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(grant_id);
            }
        }
    }

    /// Closes every open tunnel of `grant_id`; returns how many there were.
    pub fn close(&self, grant_id: &str) -> usize {
        match self.lock().get(grant_id) {
            Some((signal, open)) => {
                signal.notify_waiters();
                *open
            }
            None => 0,
        }
    }

    /// Grants with a tunnel open now.
    pub fn grants(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

impl Proxy {
    /// Closes the open tunnels and idle pooled connections of every grant
    /// here that is revoked, expired or unknown to the ledger; returns how
    /// many grants were closed. A ledger that cannot answer closes nothing
    /// (new requests are refused meanwhile; the next round asks again).
    pub async fn close_revoked(&self) -> usize {
        let mut grants = self.tunnels.grants();
        grants.extend(self.pool.grants());
        grants.sort_unstable();
        grants.dedup();
        let now = self.clock.now();
        let mut closed = 0;
        for grant_id in grants {
            match self.ledger.get(&grant_id).await {
                Ok(Some(r)) if r.status == Status::Active && now < r.registration.exp => {}
                Ok(_) => {
                    self.tunnels.close(&grant_id);
                    self.pool.close_grant(&grant_id);
                    closed += 1;
                }
                Err(_) => {}
            }
        }
        closed
    }
}

/// Runs the proxy on `listener` until the task is dropped.
pub async fn serve(proxy: Arc<Proxy>, listener: gatehouse_listener::Listener) {
    serve_until(proxy, listener, std::future::pending()).await;
}

/// Serves until `shutdown` resolves, then stops accepting and returns once
/// every request in hand is answered, so the refusals they record are
/// queued before the node drains its record and exits.
pub async fn serve_until(
    proxy: Arc<Proxy>,
    listener: gatehouse_listener::Listener,
    shutdown: impl Future<Output = ()>,
) {
    let handler = move |req| {
        let proxy = proxy.clone();
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(req).await) }
    };
    listener.serve_http1(handler, shutdown).await;
}

impl Proxy {
    /// Handles one proxied request or `CONNECT`.
    pub async fn handle(self: &Arc<Self>, req: Request<Incoming>) -> Response<ProxyBody> {
        let mut grant = None;
        let client = req.extensions().get::<gatehouse_listener::PeerAddr>().map(|p| p.0.ip());
        match self.handle_inner(req, &mut grant).await {
            Ok(response) => response,
            Err(refused)
                if grant.is_none() && refused.status == StatusCode::PROXY_AUTHENTICATION_REQUIRED =>
            {
                // No grant opened: the client proved nothing, and is
                // counted rather than itemized.
                self.sink.unauthenticated(client, refused.kind, refused.reason);
                refusal_response(&refused, &new_id("req"))
            }
            Err(refused) => self.refuse(grant.as_deref(), &refused),
        }
    }

    /// A request its grant could not pay for. One that carries a
    /// placeholder expects a credential: it is told why there is none.
    fn spend_refused(&self, headers: &HeaderMap, path: &str, reason: Reason) -> Refused {
        if self.leases.is_some() && mentions_placeholder(headers, path) {
            let reason = refused_before_the_leases(reason);
            return Refused::lease(
                crate::inject::LeaseRefusal { reason, lease_id: None, revoke: false },
                None,
            );
        }
        // An outage is worth retrying; a spent or revoked grant is not.
        let status = refusal_status(reason);
        Refused::new(status, refusal_kind(reason), reason)
    }

    /// Records a refusal and answers it.
    fn refuse(&self, grant: Option<&GrantClaims>, refused: &Refused) -> Response<ProxyBody> {
        let request_id = new_id("req");
        let (host, rule) = (refused.host.clone(), refused.rule.clone());
        self.sink.refused(Refusal {
            request_id: Some(request_id.clone()),
            lease_id: refused.lease_id.clone(),
            ..self.record(grant, refused.kind, refused.reason, host, rule)
        });
        refusal_response(refused, &request_id)
    }

    async fn handle_inner(
        self: &Arc<Self>,
        req: Request<Incoming>,
        grant: &mut Option<Arc<GrantClaims>>,
    ) -> Result<Response<ProxyBody>, Refused> {
        let claims = self.authenticate(req.headers())?;
        *grant = Some(claims.clone());
        let now = self.clock.now();
        let spent = spend(&self.ledger, &claims.grant_id, &Operation::Request, now, self.ledger_required)
            .await
            .map_err(|reason| {
                self.spend_refused(
                    req.headers(),
                    req.uri().path_and_query().map_or("", |p| p.as_str()),
                    reason,
                )
            })?;
        let policy = self.policies.policy_of_run(claims.tenant_id.as_deref(), &claims.exec_id);
        let generation = spent.map(|s| s.lease_generation);
        if req.method() == Method::CONNECT {
            self.tunnel(req, policy, &claims, generation).await
        } else {
            self.forward(req, policy, &claims, generation).await
        }
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<GrantClaims>, Refused> {
        if headers.get_all(header::PROXY_AUTHORIZATION).iter().nth(1).is_some() {
            // Which one would a component behind us read? Refuse instead.
            return Err(Refused::new(
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                RefusalKind::GrantRefused,
                Reason::CredentialsAmbiguous,
            ));
        }
        let token = headers
            .get(header::PROXY_AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(grant_from_proxy_authorization)
            .ok_or_else(|| {
                Refused::new(
                    StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                    RefusalKind::GrantRefused,
                    Reason::ProxyAuthMissing,
                )
            })?;
        self.grants.open(&token, self.clock.now()).map_err(|reason| {
            Refused::new(StatusCode::PROXY_AUTHENTICATION_REQUIRED, RefusalKind::GrantRefused, reason)
        })
    }

    /// The decision on `target`: the host's (a tunnel's), or with `method`
    /// the request's too (its method and path under the tenant's rules).
    async fn decide(
        &self,
        target: Target,
        method: Option<&Method>,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &GrantClaims,
    ) -> Result<Decision, Refused> {
        let resolver = &self.resolver;
        let now = self.clock.now();
        let mut decision = decide_target_resolving(
            target,
            policy.as_deref(),
            &self.guard,
            Purpose::Request,
            now,
            async |name: &str| resolver.resolve(name).await,
        )
        .await;
        if let Some(method) = method {
            decision = decision.with_request(policy.as_deref(), method, now);
        }
        if !decision.allowed() {
            let mut refused = Refused::from_decision(&decision);
            refused.proposal_id = self.ask(grant, &decision, method).await.map(Box::from);
            return Err(refused);
        }
        if let Some(dry) = &decision.dry_run_would_refuse {
            let (host, rule) = (decision.host.clone(), dry.rule.clone());
            self.sink.refused(Refusal {
                dry_run: true,
                ..self.record(Some(grant), RefusalKind::EgressRefused, dry.reason, host, rule)
            });
        }
        Ok(decision)
    }

    /// The proposal a request refused by its policy makes, if a person could
    /// lift the refusal (the run's exact ask; a tunnel's, its host alone).
    async fn ask(&self, grant: &GrantClaims, decision: &Decision, method: Option<&Method>) -> Option<String> {
        use crate::policy::proposal::ProposedRule;
        let (sink, tenant, target, reason) = (
            self.proposals.as_ref()?,
            grant.tenant_id.as_deref()?,
            decision.target.as_ref()?,
            decision.refusal()?,
        );
        let rule = match method {
            Some(method) => ProposedRule::for_refused(target, method, reason)?,
            None => ProposedRule::for_refused_tunnel(target, reason)?,
        };
        sink.propose(tenant, &grant.exec_id, rule, reason).await
    }

    /// A refusal record, inside `grant`'s run when there is one.
    fn record(
        &self,
        grant: Option<&GrantClaims>,
        kind: RefusalKind,
        reason: Reason,
        host: Option<String>,
        rule: Option<String>,
    ) -> Refusal {
        Refusal {
            kind,
            reason,
            tenant_id: grant.and_then(|g| g.tenant_id.clone()),
            run_id: grant.map(|g| g.exec_id.clone()),
            request_id: None,
            host,
            rule,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: self.clock.now(),
        }
    }

    /// Pays `grant`'s egress bytes.
    fn meter(&self, grant: &GrantClaims) -> EgressMeter {
        EgressMeter::new(self.ledger.clone(), &grant.grant_id, self.clock.clone(), self.ledger_required)
    }
}

/// The grant in `Proxy-Authorization`: `Bearer <grant>`, or `Basic` whose
/// password is the grant (any user name).
pub fn grant_from_proxy_authorization(value: &str) -> Option<String> {
    if let Some(token) = gatehouse_core::credentials::bearer_token(value) {
        return Some(token.to_owned());
    }
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (_, password) = text.split_once(':')?;
        return (!password.is_empty()).then(|| password.to_owned());
    }
    None
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_come_from_bearer_or_basic_password() {
        assert_eq!(grant_from_proxy_authorization("Bearer ceg1.abc").as_deref(), Some("ceg1.abc"));
        let basic = base64::engine::general_purpose::STANDARD.encode("grant:ceg1.xyz");
        assert_eq!(grant_from_proxy_authorization(&format!("Basic {basic}")).as_deref(), Some("ceg1.xyz"));
        let no_password = base64::engine::general_purpose::STANDARD.encode("grant:");
        assert_eq!(grant_from_proxy_authorization(&format!("Basic {no_password}")), None);
        assert_eq!(grant_from_proxy_authorization("Digest x"), None);
        assert_eq!(grant_from_proxy_authorization("Bearer "), None);
    }
}
