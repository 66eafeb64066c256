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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine as _;
use bytes::Bytes;
use gatehouse_capability::{GrantClaims, OpenedGrants};
use gatehouse_core::{Clock, ErrorCode, PublicError, Reason, Refusal, RefusalKind, new_id};
use gatehouse_ledger::{Ledger, LedgerBackend as _, Operation, Status, refusal_kind, spend};
use gatehouse_listener::ClientStream;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Either, Full, Limited, combinators::UnsyncBoxBody};
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::Notify;

use crate::connect::connect_pinned;
use crate::decision::{Decision, Purpose, decide_target_resolving};
pub use crate::http1::Limits;
use crate::http1::{framing_is_sound, strip_hop_by_hop};
use crate::leases::{
    Injected, LeaseSource, OfRun, Outbound, WatchedBody, at_the_door, mentions_placeholder,
    refused_before_the_leases, refused_in_body,
};
use crate::meter::EgressMeter;
use crate::policy::{Policy, PolicyError};
use crate::pool::{PoolKey, PooledBody, Upstream, UpstreamIo, UpstreamPool};
pub use crate::resolve::{ResolveFn, Resolver};
use crate::sni;
use crate::special::AddressGuard;
use crate::target::{Host, Scheme, Target, parse_authority, parse_url};

mod intercepted;

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
            dry_run: false,
            at: 0,
        });
    }
}

/// Per-tenant policies, as the proxy reads them.
pub trait PolicySource: Send + Sync + 'static {
    /// The tenant's policy: `Ok(Policy::open())` when it has none, `Err` when
    /// it cannot be read (which refuses every request).
    fn policy(&self, tenant_id: Option<&str>) -> Result<Arc<Policy>, PolicyError>;
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

/// A refusal on its way to the client and the record.
struct Refused {
    status: StatusCode,
    reason: Reason,
    kind: RefusalKind,
    rule: Option<String>,
    host: Option<String>,
    lease_id: Option<String>,
}

impl Refused {
    fn new(status: StatusCode, kind: RefusalKind, reason: Reason) -> Self {
        Self { status, reason, kind, rule: None, host: None, lease_id: None }
    }

    /// A lease refusal: a security refusal of the run's request.
    fn lease(refusal: crate::inject::LeaseRefusal, host: Option<String>) -> Self {
        let status = refusal_status(refusal.reason);
        Self {
            host,
            lease_id: refusal.lease_id,
            ..Self::new(status, RefusalKind::SecretRefused, refusal.reason)
        }
    }

    fn from_decision(d: &Decision) -> Self {
        let reason = d.refusal().unwrap_or(Reason::UpstreamUnreachable);
        Self {
            // A policy that could not be read is an outage, not an answer.
            status: refusal_status(reason),
            reason,
            kind: RefusalKind::EgressRefused,
            rule: d.rule.clone(),
            host: d.host.clone(),
            lease_id: None,
        }
    }
}

/// Runs the proxy on `listener` until the task is dropped.
pub async fn serve(proxy: Arc<Proxy>, listener: gatehouse_listener::Listener) {
    let handler = move |req| {
        let proxy = proxy.clone();
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(req).await) }
    };
    listener.serve_http1(handler, std::future::pending()).await;
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
        let policy = self.policies.policy(claims.tenant_id.as_deref());
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

    async fn decide(
        &self,
        target: Target,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &GrantClaims,
    ) -> Result<Decision, Refused> {
        let resolver = &self.resolver;
        let decision = decide_target_resolving(
            target,
            policy.as_deref(),
            &self.guard,
            Purpose::Request,
            async |name: &str| resolver.resolve(name).await,
        )
        .await;
        if !decision.allowed() {
            return Err(Refused::from_decision(&decision));
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
            dry_run: false,
            at: self.clock.now(),
        }
    }

    async fn tunnel(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &Arc<GrantClaims>,
        lease_generation: Option<u64>,
    ) -> Result<Response<ProxyBody>, Refused> {
        // Only the authority form `host:port` is a CONNECT target (RFC 9112
        // §3.2.3): not `CONNECT http://host:port/path`, not `ftp://...`.
        let uri = req.uri();
        let authority = match (uri.scheme(), uri.authority(), uri.path_and_query()) {
            (None, Some(authority), None) => authority.as_str().to_owned(),
            _ => {
                return Err(Refused::new(
                    StatusCode::BAD_REQUEST,
                    RefusalKind::EgressRefused,
                    Reason::ConnectTargetInvalid,
                ));
            }
        };
        let (host, port) = parse_authority(&authority)
            .map_err(|reason| Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, reason))?;
        let port = port.ok_or_else(|| {
            Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, Reason::PortInvalid)
        })?;
        if !self.limits.connect_ports.contains(&port) {
            let mut r =
                Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, Reason::PortNotAllowed);
            r.host = Some(host.to_string());
            return Err(r);
        }
        let scheme = if port == 80 { Scheme::Http } else { Scheme::Https };
        let target = Target { scheme, host, port, path_and_query: "/".into() };
        let decision = self.decide(target, policy, grant).await?;
        if let Some(tls) = self.interception(grant, lease_generation, &decision).await? {
            return Ok(self.intercept(req, grant.clone(), decision, tls));
        }
        let upstream =
            connect_pinned(&decision, &self.guard, self.limits.connect_timeout).await.map_err(|reason| {
                Refused {
                    host: decision.host.clone(),
                    ..Refused::new(StatusCode::BAD_GATEWAY, RefusalKind::EgressRefused, reason)
                }
            })?;
        let limits = self.limits.clone();
        self.stats.tunnels.fetch_add(1, Ordering::Relaxed);
        let grant_id = grant.grant_id.clone();
        let revoked = self.tunnels.opened(&grant_id);
        let tunnels = self.tunnels.clone();
        let host = decision.target.as_ref().map(|t| t.host.clone());
        let (sink, refusal) = (
            self.sink.clone(),
            self.record(
                Some(grant),
                RefusalKind::EgressRefused,
                Reason::TunnelNotTls,
                decision.host.clone(),
                None,
            ),
        );
        let meter = self.meter(grant);
        tokio::spawn(async move {
            let closed = revoked.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let relay = async {
                let Ok(upgraded) = hyper::upgrade::on(&mut req).await else { return };
                // `serve` hands hyper the listener's client streams, so the
                // client's socket comes back whole and the tunnel copies
                // between two sockets without hyper's wrapper in the way. The
                // socket keeps its place in the listener's caps meanwhile.
                let Ok(client) = upgraded.downcast::<TokioIo<ClientStream>>() else { return };
                let (mut socket, _slot) = client.io.into_inner().into_parts();
                let Some(host) = host else { return };
                let tunnel = async {
                    let opening = tokio::time::timeout(
                        limits.hello_timeout,
                        read_opening(&mut socket, &upstream, &host, client.read_buf.into()),
                    );
                    let reason = match opening.await.unwrap_or(Err(Reason::TunnelNotTls)) {
                        Ok(early) => {
                            match tunnel_capped(socket, early, upstream, limits.tunnel_bytes, &meter).await {
                                // A spent budget is a refusal; a revoked grant's
                                // tunnel just closes, as `close_revoked` does.
                                Err(Reason::BudgetEgressBytesExhausted) => Reason::BudgetEgressBytesExhausted,
                                _ => return,
                            }
                        }
                        Err(reason) => {
                            if reason != Reason::TunnelNotTls {
                                // unrecognized_name (RFC 6066 §3): the client's
                                // TLS stack says what happened, not "EOF".
                                let _ = socket.write_all(&UNRECOGNIZED_NAME_ALERT).await;
                            }
                            reason
                        }
                    };
                    let kind = crate::meter::door_refusal_kind(reason);
                    sink.refused(Refusal { reason, kind, request_id: Some(new_id("req")), ..refusal });
                };
                // The time cap counts from the tunnel's opening.
                let _ = tokio::time::timeout(limits.tunnel_duration, tunnel).await;
            };
            // Dropping the relay closes both sockets.
            tokio::select! {
                () = relay => {}
                () = &mut closed => {}
            }
            tunnels.ended(&grant_id);
        });
        Ok(Response::new(empty()))
    }

    async fn forward(
        &self,
        req: Request<Incoming>,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &GrantClaims,
        lease_generation: Option<u64>,
    ) -> Result<Response<ProxyBody>, Refused> {
        let started = tokio::time::Instant::now();
        let target = parse_url(&req.uri().to_string())
            .map_err(|reason| Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, reason))?;
        if target.scheme == Scheme::Https {
            // https goes through CONNECT; a proxy that terminated TLS for the
            // client would see (and could leak) the plaintext.
            let mut r =
                Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, Reason::SchemeNotAllowed);
            r.host = Some(target.host.to_string());
            return Err(r);
        }
        self.exchange(req, target, policy, grant, lease_generation, started).await
    }

    /// One request to `target`, plain HTTP or (inside an intercepted
    /// tunnel) HTTPS: decided, its run's leases applied, sent over a pooled
    /// or freshly dialled connection to a vetted address, and its answer
    /// metered, capped and scrubbed on the way back.
    async fn exchange(
        &self,
        req: Request<Incoming>,
        target: Target,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &GrantClaims,
        lease_generation: Option<u64>,
        started: tokio::time::Instant,
    ) -> Result<Response<ProxyBody>, Refused> {
        let decision = self.decide(target, policy, grant).await?;
        let host = decision.host.clone();
        let fail = |reason| Refused {
            host: host.clone(),
            ..Refused::new(StatusCode::BAD_GATEWAY, RefusalKind::EgressRefused, reason)
        };
        let target = decision.target.clone().ok_or_else(|| fail(Reason::UpstreamUnreachable))?;
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let mut injected = match (&self.leases, &host) {
            // Generation 0: the run never held a lease, the common case.
            (Some(leases), Some(name)) if lease_generation != Some(0) => at_the_door(
                leases.as_ref(),
                OfRun { grant_id: &grant.grant_id, run_id: &grant.exec_id, generation: lease_generation },
                Outbound {
                    headers: &mut parts.headers,
                    path_and_query: &target.path_and_query,
                    host: name,
                    over_tls: target.scheme == Scheme::Https,
                    body: None,
                },
                self.clock.now(),
            )
            .await
            .map_err(|refusal| Refused::lease(refusal, host.clone()))?,
            _ => Injected::default(),
        };
        let authority = if target.port == target.scheme.default_port() {
            target.host.to_string()
        } else {
            format!("{}:{}", target.host, target.port)
        };
        if let Ok(v) = HeaderValue::from_str(&authority) {
            parts.headers.insert(header::HOST, v);
        }
        parts.uri = target.path_and_query.parse().map_err(|_| fail(Reason::UrlMalformed))?;
        if parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > self.limits.request_bytes as u64)
        {
            return Err(Refused {
                host: host.clone(),
                ..Refused::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    RefusalKind::EgressRefused,
                    Reason::RequestTooLarge,
                )
            });
        }
        // A declared body is paid in one piece before anything moves; one
        // without a length is paid frame by frame, and cut off at the cap.
        let meter = self.meter(grant);
        let declared = body.size_hint().exact();
        let body = match injected.watch.is_empty() {
            true => Either::Left(body),
            false => Either::Right(WatchedBody::new(body, std::mem::take(&mut injected.watch))),
        };
        let body = Limited::new(body, self.limits.request_bytes);
        let body = match declared {
            Some(n) => {
                meter.pay(n).await.map_err(|reason| self.egress_refused(reason, host.clone()))?;
                Either::Left(body)
            }
            None => Either::Right(meter.clone().metered(body, self.refused_midway(grant, host.clone()))),
        };
        let mut upstream_req = Request::from_parts(parts, body);
        // TLS and plain connections to one authority never stand in for each other.
        let key = match target.scheme {
            Scheme::Https => PoolKey::new(&grant.grant_id, &format!("https://{authority}")),
            Scheme::Http => PoolKey::new(&grant.grant_id, &authority),
        };
        let (response, upstream) = loop {
            let pooled = self.pool.take(&key, &decision.addresses, target.port);
            let reused = pooled.is_some();
            let mut upstream = match pooled {
                Some(upstream) => upstream,
                None => self.dial(&decision).await.map_err(fail)?,
            };
            match tokio::time::timeout(self.limits.response_timeout, upstream.send(upstream_req)).await {
                Ok(Ok(response)) => break (response, upstream),
                Ok(Err(mut e)) => match e.take_message() {
                    // An idle connection the upstream closed just now: the
                    // request was not written, so it goes out on a fresh one.
                    Some(unsent) if reused => upstream_req = unsent,
                    // An answer hyper could not parse (conflicting lengths,
                    // a broken head) is the upstream's fault, said so.
                    _ if e.error().is_parse() => return Err(fail(Reason::UpstreamBadResponse)),
                    // The run's body carried a placeholder: cut off before it moved.
                    _ if refused_in_body(e.error()) == Some(Reason::LeasePlaceholderMisplaced) => {
                        let refusal = crate::inject::LeaseRefusal {
                            reason: Reason::LeasePlaceholderMisplaced,
                            lease_id: None,
                            revoke: false,
                        };
                        return Err(Refused::lease(refusal, host.clone()));
                    }
                    _ => return Err(fail(Reason::UpstreamUnreachable)),
                },
                Err(_) => return Err(fail(Reason::UpstreamTimeout)),
            }
        };
        framing_is_sound(response.headers()).map_err(fail)?;
        if response.body().size_hint().lower() > self.limits.response_bytes as u64 {
            // Declared too long: refused before any of it moves, and the
            // connection, with the body still unread, is closed.
            return Err(fail(Reason::ResponseTooLarge));
        }
        let declared = response.body().size_hint().exact();
        if let Some(n) = declared {
            // The connection, with the body unread, is closed if unpaid.
            meter.pay(n).await.map_err(|reason| self.egress_refused(reason, host.clone()))?;
        }
        let (mut parts, body) = response.into_parts();
        // Before the hop-by-hop headers go: the transfer codings are read too.
        let scrub = injected.scrub;
        scrub.answer(&mut parts).map_err(fail)?;
        strip_hop_by_hop(&mut parts.headers);
        self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
        let deadline = started + self.limits.request_duration;
        let body = PooledBody::new(body, upstream, (self.pool.clone(), key), deadline);
        let body = Limited::new(body, self.limits.response_bytes);
        let body = match declared {
            Some(_) => body.map_err(Into::into).boxed_unsync(),
            None => meter.metered(body, self.refused_midway(grant, host.clone())).boxed_unsync(),
        };
        let body =
            if scrub.is_empty() { body } else { crate::inject::ScrubBody::new(body, &scrub).boxed_unsync() };
        Ok(Response::from_parts(parts, body))
    }

    /// The refusal of bytes the ledger would not pay for.
    fn egress_refused(&self, reason: Reason, host: Option<String>) -> Refused {
        let status = refusal_status(reason);
        Refused { host, ..Refused::new(status, refusal_kind(reason), reason) }
    }

    /// Records a body cut off midway because its next bytes went unpaid
    /// (its headers were sent, so only the record can say why).
    fn refused_midway(
        &self,
        grant: &GrantClaims,
        host: Option<String>,
    ) -> impl FnOnce(Reason) + Send + 'static {
        let sink = self.sink.clone();
        let refusal = self.record(
            Some(grant),
            RefusalKind::BudgetExhausted,
            Reason::BudgetEgressBytesExhausted,
            host,
            None,
        );
        move |reason| {
            sink.refused(Refusal {
                reason,
                kind: refusal_kind(reason),
                request_id: Some(new_id("req")),
                ..refusal
            })
        }
    }

    /// Pays `grant`'s egress bytes.
    fn meter(&self, grant: &GrantClaims) -> EgressMeter {
        EgressMeter::new(self.ledger.clone(), &grant.grant_id, self.clock.clone(), self.ledger_required)
    }

    /// A new upstream connection to one of the decision's addresses: TLS,
    /// verified against the real roots for the decided host, when the
    /// request is HTTPS (from inside an intercepted tunnel).
    async fn dial(&self, decision: &Decision) -> Result<Upstream, Reason> {
        let stream = connect_pinned(decision, &self.guard, self.limits.connect_timeout).await?;
        let Some(target) = decision.target.as_ref().filter(|t| t.scheme == Scheme::Https) else {
            return Upstream::handshake(UpstreamIo::Plain(stream)).await;
        };
        let tls = self.upstream_tls.as_ref().ok_or(Reason::TlsFailed)?;
        let name = match &target.host {
            Host::Name(n) => {
                rustls::pki_types::ServerName::try_from(n.clone()).map_err(|_| Reason::TlsFailed)?
            }
            Host::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
        };
        let handshake = tokio::time::timeout(self.limits.connect_timeout, tls.connect(name, stream));
        let stream = handshake.await.map_err(|_| Reason::UpstreamTimeout)?.map_err(|_| Reason::TlsFailed)?;
        Upstream::handshake(UpstreamIo::Tls(Box::new(stream))).await
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

/// A fatal TLS alert record, `unrecognized_name` (RFC 8446 §6, RFC 6066 §3).
const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// Reads the client's opening bytes until [`sni::judge`] can rule on them,
/// and returns them for the upstream. A tunnel to an address whose upstream
/// speaks first (a server-first protocol) is not held up.
async fn read_opening(
    client: &mut TcpStream,
    upstream: &TcpStream,
    host: &Host,
    mut buf: Vec<u8>,
) -> Result<Bytes, Reason> {
    if buf.is_empty() && matches!(host, Host::Ip(_)) {
        tokio::select! {
            biased;
            ready = client.readable() => ready.map_err(|_| Reason::TunnelNotTls)?,
            _ = upstream.readable() => return Ok(Bytes::new()),
        }
    }
    loop {
        let first = sni::read_first_bytes(&buf);
        if first != sni::FirstBytes::Incomplete {
            sni::judge(host, &first)?;
            return Ok(buf.into());
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            // The client stopped before the opening could be judged.
            _ => {
                sni::judge(host, &first)?;
                return Ok(buf.into());
            }
        }
    }
}

/// How much a tunnel moves per system call: large enough that bulk
/// transfers are not bound by system calls.
const TUNNEL_CHUNK: usize = 256 << 10;

/// Moves bytes both ways until both sides have closed, or until `cap` bytes
/// (both directions together) have passed, which closes both at once, or
/// until `meter` refuses to pay for a chunk (the grant's egress budget is
/// spent, or it was revoked), which closes both and says why.
/// `client_early` holds bytes the client sent behind its `CONNECT` head.
async fn tunnel_capped(
    mut client: TcpStream,
    client_early: Bytes,
    mut upstream: TcpStream,
    cap: u64,
    meter: &EgressMeter,
) -> Result<(), Reason> {
    let budget = AtomicU64::new(cap);
    if !client_early.is_empty() {
        if !claim(&budget, client_early.len()) {
            return Ok(());
        }
        meter.pay(client_early.len() as u64).await?;
        if upstream.write_all(&client_early).await.is_err() {
            return Ok(());
        }
    }
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    let out = relay(client_read, upstream_write, &budget, meter);
    let back = relay(upstream_read, client_write, &budget, meter);
    tokio::pin!(out, back);
    // A side that finished normally (a half-close) lets the other finish;
    // a spent budget ends the tunnel.
    let rest = tokio::select! {
        done = &mut out => match done { Relayed::Closed => back, other => return other.into() },
        done = &mut back => match done { Relayed::Closed => out, other => return other.into() },
    };
    rest.await.into()
}

#[derive(Debug, PartialEq, Eq)]
enum Relayed {
    /// The reading side closed (or failed); the writing side was shut down.
    Closed,
    /// The tunnel's byte cap is spent.
    Capped,
    /// The ledger would not pay for the next chunk.
    Refused(Reason),
}

impl From<Relayed> for Result<(), Reason> {
    fn from(r: Relayed) -> Self {
        match r {
            Relayed::Refused(reason) => Err(reason),
            Relayed::Closed | Relayed::Capped => Ok(()),
        }
    }
}

/// Takes `n` bytes from the tunnel's budget; false when it holds fewer.
fn claim(budget: &AtomicU64, n: usize) -> bool {
    budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n as u64)).is_ok()
}

/// One direction of a tunnel. Every chunk is paid for, from the tunnel's cap
/// and from the grant's egress budget, before it is passed on, so no byte
/// beyond either ever leaves.
async fn relay(
    from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    budget: &AtomicU64,
    meter: &EgressMeter,
) -> Relayed {
    let mut mover = Mover::new();
    loop {
        let n = match mover.fill(&from).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !claim(budget, n) {
            return Relayed::Capped;
        }
        if let Err(reason) = meter.pay(n as u64).await {
            return Relayed::Refused(reason);
        }
        if mover.drain(&to, n).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
    Relayed::Closed
}

/// Where a chunk waits between the two sockets: on Linux a pipe, so that
/// `splice(2)` moves pages instead of copying bytes through the proxy;
/// elsewhere (or when no pipe can be had) a buffer.
enum Mover {
    #[cfg(target_os = "linux")]
    Pipe {
        read: std::os::fd::OwnedFd,
        write: std::os::fd::OwnedFd,
    },
    Buffer(Vec<u8>),
}

impl Mover {
    fn new() -> Self {
        #[cfg(target_os = "linux")]
        {
            use rustix::pipe::{PipeFlags, fcntl_setpipe_size, pipe_with};
            if let Ok((read, write)) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC) {
                // Best effort: an unprivileged process may be held to less.
                let _ = fcntl_setpipe_size(&write, TUNNEL_CHUNK);
                return Mover::Pipe { read, write };
            }
        }
        Mover::Buffer(vec![0; TUNNEL_CHUNK])
    }

    /// Takes up to one chunk from `from`; `Ok(0)` at the end of its stream.
    /// The mover is empty when this is called.
    async fn fill(&mut self, from: &ReadHalf<'_>) -> std::io::Result<usize> {
        loop {
            from.readable().await?;
            let moved = match self {
                #[cfg(target_os = "linux")]
                Mover::Pipe { write, .. } => from.as_ref().try_io(Interest::READABLE, || {
                    Ok(rustix::pipe::splice(
                        from.as_ref(),
                        None,
                        &*write,
                        None,
                        TUNNEL_CHUNK,
                        splice_flags(),
                    )?)
                }),
                Mover::Buffer(buf) => from.try_read(buf),
            };
            match moved {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Passes the `n` bytes taken by `fill` on to `to`.
    async fn drain(&mut self, to: &WriteHalf<'_>, mut n: usize) -> std::io::Result<()> {
        let mut at = 0;
        while n > 0 {
            to.writable().await?;
            let moved = match self {
                #[cfg(target_os = "linux")]
                Mover::Pipe { read, .. } => to.as_ref().try_io(Interest::WRITABLE, || {
                    Ok(rustix::pipe::splice(&*read, None, to.as_ref(), None, n, splice_flags())?)
                }),
                Mover::Buffer(buf) => to.try_write(&buf[at..at + n]),
            };
            match moved {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(m) => {
                    at += m;
                    n -= m;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn splice_flags() -> rustix::pipe::SpliceFlags {
    rustix::pipe::SpliceFlags::MOVE | rustix::pipe::SpliceFlags::NONBLOCK
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed_unsync()
}

/// The status of a refusal with this reason: its public error's
/// ([`Reason::refusal_code`]), 503 for an outage and 403 for an answer.
fn refusal_status(reason: Reason) -> StatusCode {
    StatusCode::from_u16(reason.refusal_code().http_status()).unwrap_or(StatusCode::FORBIDDEN)
}

fn refusal_response(refused: &Refused, request_id: &str) -> Response<ProxyBody> {
    let code = match refused.status {
        StatusCode::PROXY_AUTHENTICATION_REQUIRED => ErrorCode::Unauthorized,
        StatusCode::BAD_GATEWAY => ErrorCode::BadGateway,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        // An outage: the same code the API answers one with.
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        _ => ErrorCode::Refused,
    };
    let retryable = code.retryable();
    let mut body = PublicError::new(code, request_id).with_reason(refused.reason).to_json();
    if let Some(error) = body.get_mut("error").and_then(serde_json::Value::as_object_mut) {
        error.insert("retryable".into(), retryable.into());
    }
    let body = body.to_string();
    let mut response =
        Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = refused.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("x-gatehouse-reason", HeaderValue::from_static(refused.reason.as_str()));
    // An agent reads this to stop retrying: only an outage may pass.
    headers
        .insert("x-gatehouse-retryable", HeaderValue::from_static(if retryable { "true" } else { "false" }));
    headers
        .insert("x-request-id", HeaderValue::from_str(request_id).unwrap_or(HeaderValue::from_static("req")));
    if refused.status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        headers.insert(header::PROXY_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"gatehouse\""));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a refusal's body says: its code and whether to retry.
    async fn answered(refused: &Refused) -> (StatusCode, serde_json::Value, String) {
        let response = refusal_response(refused, "req_1");
        let status = response.status();
        let retryable = response.headers()["x-gatehouse-retryable"].to_str().unwrap_or_default().to_owned();
        let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or_default(), retryable)
    }

    #[tokio::test]
    async fn a_refusal_reads_as_the_api_answers_it() {
        for (reason, status, code, retryable) in [
            (Reason::LedgerUnavailable, StatusCode::SERVICE_UNAVAILABLE, "unavailable", "true"),
            (Reason::LeaseUnavailable, StatusCode::SERVICE_UNAVAILABLE, "unavailable", "true"),
            (Reason::PolicyNotAllowed, StatusCode::FORBIDDEN, "refused", "false"),
            (Reason::BudgetRequestsExhausted, StatusCode::FORBIDDEN, "refused", "false"),
        ] {
            let (got, body, again) =
                answered(&Refused::new(refusal_status(reason), refusal_kind(reason), reason)).await;
            assert_eq!((got, again.as_str()), (status, retryable), "{reason:?}");
            assert_eq!(body["error"]["code"], code, "{reason:?}: {body}");
            assert_eq!(body["error"]["code"], reason.refusal_code().as_str(), "the API's code for it");
            assert_eq!(body["error"]["reason"], reason.as_str());
        }
    }

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

    #[test]
    fn hop_by_hop_headers_and_credentials_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret-hop"));
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert(header::PROXY_AUTHORIZATION, HeaderValue::from_static("Bearer ceg1.x"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::ACCEPT));
    }
}
