//! The forward proxy sandboxes reach the outside through
//! (`HTTP_PROXY`/`HTTPS_PROXY`).
//!
//! Per request or tunnel: grant from `Proxy-Authorization` (Bearer, or the
//! password of Basic credentials, so `http://grant:<token>@proxy` works in
//! curl, pip and npm) → open the grant → spend one request in the ledger →
//! the tenant's policy and the address guard ([`crate::decide_target`]) →
//! connect to a vetted address only → forward (HTTP, absolute-form, `http`
//! only) or tunnel (`CONNECT`, capped in bytes and time).
//!
//! Missing or bad credentials are `407`; every refusal is `403` with the safe
//! error body and the reason code in `x-gatehouse-reason`, and is recorded
//! with tenant, run, reason, host and rule. `Proxy-Authorization` and
//! hop-by-hop headers are never forwarded. Redirects are returned to the
//! client, whose next request is checked like any other.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use gatehouse_capability::{GrantClaims, GrantSealer};
use gatehouse_core::{Clock, ErrorCode, PublicError, Reason, Refusal, RefusalKind, new_id};
use gatehouse_ledger::{Ledger, Operation, refusal_kind, spend};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;

use crate::connect::connect_pinned;
use crate::decision::{Decision, Purpose, decide_target};
use crate::policy::{Policy, PolicyError};
use crate::special::AddressGuard;
use crate::target::{Host, Scheme, Target, parse_authority, parse_url};

/// Response body type of the proxy.
pub type ProxyBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Where the proxy records refusals (the server's refusal log).
pub trait RefusalSink: Send + Sync + 'static {
    /// Records one refusal.
    fn refused(&self, refusal: Refusal);
}

/// Per-tenant policies, as the proxy reads them.
pub trait PolicySource: Send + Sync + 'static {
    /// The tenant's policy: `Ok(Policy::open())` when it has none, `Err` when
    /// it cannot be read (which refuses every request).
    fn policy(&self, tenant_id: Option<&str>) -> Result<Policy, PolicyError>;
}

/// Policies held in memory, keyed by tenant. A stored policy that failed to
/// parse stays stored as unreadable, so it refuses instead of vanishing.
#[derive(Debug, Default)]
pub struct MemoryPolicies(RwLock<HashMap<String, Result<Policy, PolicyError>>>);

impl MemoryPolicies {
    /// Stores (or replaces) a tenant's policy.
    pub fn set(&self, tenant_id: &str, policy: Result<Policy, PolicyError>) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(tenant_id.to_owned(), policy);
    }
}

impl PolicySource for MemoryPolicies {
    fn policy(&self, tenant_id: Option<&str>) -> Result<Policy, PolicyError> {
        let map = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match tenant_id.and_then(|t| map.get(t)) {
            Some(stored) => stored.clone(),
            None => Ok(Policy::open()),
        }
    }
}

/// A resolver supplied by the embedder (tests: answers that change between
/// queries, to prove nothing resolves twice).
pub type ResolveFn = dyn Fn(&str) -> Result<Vec<IpAddr>, ()> + Send + Sync;

/// How names are resolved. Resolution happens once per request; the answer
/// is what gets checked and what gets dialled.
#[derive(Clone)]
pub enum Resolver {
    /// DNS (hickory).
    Dns(Arc<crate::resolve::DnsResolver>),
    /// Fixed answers; unknown names fail.
    Static(Arc<HashMap<String, Vec<IpAddr>>>),
    /// Any function.
    Custom(Arc<ResolveFn>),
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resolver::Dns(_) => "Resolver::Dns",
            Resolver::Static(_) => "Resolver::Static",
            Resolver::Custom(_) => "Resolver::Custom",
        })
    }
}

impl Resolver {
    /// Resolves `host`; an error or empty answer refuses (fail closed).
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ()> {
        match self {
            Resolver::Dns(dns) => dns.lookup(host).await,
            Resolver::Static(map) => map.get(host).cloned().ok_or(()),
            Resolver::Custom(f) => f(host),
        }
    }
}

/// Counters of what the proxy let through (refusals are counted where they
/// are recorded, by kind and reason).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Requests forwarded.
    pub forwarded: std::sync::atomic::AtomicU64,
    /// Tunnels opened.
    pub tunnels: std::sync::atomic::AtomicU64,
}

/// Limits applied to every request and tunnel.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Ports `CONNECT` may reach [80, 443].
    pub connect_ports: Vec<u16>,
    /// Bytes a tunnel may carry, both directions together.
    pub tunnel_bytes: u64,
    /// How long a tunnel may stay open.
    pub tunnel_duration: Duration,
    /// Response body cap for forwarded requests.
    pub response_bytes: usize,
    /// Request body cap for forwarded requests (uploads).
    pub request_bytes: usize,
    /// Time to the upstream's response headers.
    pub response_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_ports: vec![80, 443],
            tunnel_bytes: 1 << 30,
            tunnel_duration: Duration::from_secs(600),
            response_bytes: 64 << 20,
            request_bytes: 64 << 20,
            response_timeout: Duration::from_secs(30),
        }
    }
}

/// Everything the proxy needs.
pub struct Proxy {
    /// Opens grants.
    pub sealer: GrantSealer,
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
}

/// A refusal on its way to the client and the record.
struct Refused {
    status: StatusCode,
    reason: Reason,
    kind: RefusalKind,
    rule: Option<String>,
    host: Option<String>,
}

impl Refused {
    fn new(status: StatusCode, kind: RefusalKind, reason: Reason) -> Self {
        Self { status, reason, kind, rule: None, host: None }
    }

    fn from_decision(d: &Decision) -> Self {
        let reason = d.refusal().unwrap_or(Reason::UpstreamUnreachable);
        Self {
            status: StatusCode::FORBIDDEN,
            reason,
            kind: RefusalKind::EgressRefused,
            rule: d.rule.clone(),
            host: d.host.clone(),
        }
    }
}

/// Runs the proxy on `listener` until the task is dropped.
pub async fn serve(proxy: Arc<Proxy>, listener: TcpListener) {
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, std::convert::Infallible>(proxy.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .preserve_header_case(false)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

impl Proxy {
    /// Handles one proxied request or `CONNECT`.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let request_id = new_id("req");
        let mut context = (None::<String>, None::<String>);
        match self.handle_inner(req, &mut context).await {
            Ok(response) => response,
            Err(refused) => {
                self.sink.refused(Refusal {
                    kind: refused.kind,
                    reason: refused.reason,
                    tenant_id: context.0,
                    run_id: context.1,
                    request_id: Some(request_id.clone()),
                    host: refused.host.clone(),
                    rule: refused.rule.clone(),
                    at: self.clock.now(),
                });
                refusal_response(&refused, &request_id)
            }
        }
    }

    async fn handle_inner(
        &self,
        req: Request<Incoming>,
        context: &mut (Option<String>, Option<String>),
    ) -> Result<Response<ProxyBody>, Refused> {
        let claims = self.authenticate(req.headers())?;
        context.0.clone_from(&claims.tenant_id);
        context.1 = Some(claims.exec_id.clone());
        let now = self.clock.now();
        if let Err(reason) =
            spend(&self.ledger, &claims.grant_id, &Operation::Request, now, self.ledger_required).await
        {
            return Err(Refused::new(StatusCode::FORBIDDEN, refusal_kind(reason), reason));
        }
        let policy = self.policies.policy(claims.tenant_id.as_deref());
        if req.method() == Method::CONNECT {
            self.tunnel(req, policy).await
        } else {
            self.forward(req, policy).await
        }
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<GrantClaims, Refused> {
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
        self.sealer.open(&token, self.clock.now()).map_err(|reason| {
            Refused::new(StatusCode::PROXY_AUTHENTICATION_REQUIRED, RefusalKind::GrantRefused, reason)
        })
    }

    async fn decide(&self, target: Target, policy: Result<Policy, PolicyError>) -> Result<Decision, Refused> {
        let answer = match &target.host {
            Host::Name(name) => Some(self.resolver.resolve(name).await),
            Host::Ip(_) => None,
        };
        let decision = decide_target(target, policy.as_ref(), &self.guard, Purpose::Request, |_| {
            answer.unwrap_or(Err(()))
        });
        if decision.allowed() { Ok(decision) } else { Err(Refused::from_decision(&decision)) }
    }

    async fn tunnel(
        &self,
        mut req: Request<Incoming>,
        policy: Result<Policy, PolicyError>,
    ) -> Result<Response<ProxyBody>, Refused> {
        let authority = req.uri().authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
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
        let decision = self.decide(target, policy).await?;
        let upstream = connect_pinned(&decision, &self.guard).await.map_err(|reason| Refused {
            host: decision.host.clone(),
            ..Refused::new(StatusCode::BAD_GATEWAY, RefusalKind::EgressRefused, reason)
        })?;
        let limits = self.limits.clone();
        self.stats.tunnels.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            let Ok(upgraded) = hyper::upgrade::on(&mut req).await else { return };
            let mut client = TokioIo::new(upgraded);
            let mut upstream = upstream;
            let copy = copy_capped(&mut client, &mut upstream, limits.tunnel_bytes);
            let _ = tokio::time::timeout(limits.tunnel_duration, copy).await;
            let _ = upstream.shutdown().await;
        });
        Ok(Response::new(empty()))
    }

    async fn forward(
        &self,
        req: Request<Incoming>,
        policy: Result<Policy, PolicyError>,
    ) -> Result<Response<ProxyBody>, Refused> {
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
        let decision = self.decide(target, policy).await?;
        let host = decision.host.clone();
        let fail = |reason| Refused {
            host: host.clone(),
            ..Refused::new(StatusCode::BAD_GATEWAY, RefusalKind::EgressRefused, reason)
        };
        let target = decision.target.clone().ok_or_else(|| fail(Reason::UpstreamUnreachable))?;
        let upstream = connect_pinned(&decision, &self.guard).await.map_err(fail)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Limited<Incoming>>(TokioIo::new(upstream))
                .await
                .map_err(|_| fail(Reason::UpstreamUnreachable))?;
        tokio::spawn(connection);

        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
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
        // Bodies without a length are cut off at the cap while streaming.
        let upstream_req = Request::from_parts(parts, Limited::new(body, self.limits.request_bytes));
        let response = tokio::time::timeout(self.limits.response_timeout, sender.send_request(upstream_req))
            .await
            .map_err(|_| fail(Reason::UpstreamTimeout))?
            .map_err(|_| fail(Reason::UpstreamUnreachable))?;
        self.stats.forwarded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let body = Limited::new(body, self.limits.response_bytes).map_err(Into::into).boxed();
        Ok(Response::from_parts(parts, body))
    }
}

/// The grant in `Proxy-Authorization`: `Bearer <grant>`, or `Basic` whose
/// password is the grant (any user name).
pub fn grant_from_proxy_authorization(value: &str) -> Option<String> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return (!rest.is_empty()).then(|| rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (_, password) = text.split_once(':')?;
        return (!password.is_empty()).then(|| password.to_owned());
    }
    None
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), the ones `Connection` names,
/// and the proxy credentials.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// Copies both ways until either side closes or `cap` bytes have passed.
async fn copy_capped<A, B>(a: &mut A, b: &mut B, cap: u64) -> std::io::Result<()>
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut up = tokio::io::AsyncReadExt::take(&mut ar, cap);
    let mut down = tokio::io::AsyncReadExt::take(&mut br, cap);
    let forward = async {
        let n = tokio::io::copy(&mut up, &mut bw).await;
        let _ = bw.shutdown().await;
        n
    };
    let backward = async {
        let n = tokio::io::copy(&mut down, &mut aw).await;
        let _ = aw.shutdown().await;
        n
    };
    let _ = tokio::join!(forward, backward);
    Ok(())
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

fn refusal_response(refused: &Refused, request_id: &str) -> Response<ProxyBody> {
    let code = if refused.status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        ErrorCode::Unauthorized
    } else if refused.status == StatusCode::BAD_GATEWAY {
        ErrorCode::BadGateway
    } else if refused.status == StatusCode::PAYLOAD_TOO_LARGE {
        ErrorCode::PayloadTooLarge
    } else {
        ErrorCode::Refused
    };
    let body = PublicError::new(code, request_id).with_reason(refused.reason).to_json().to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *response.status_mut() = refused.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("x-gatehouse-reason", HeaderValue::from_static(refused.reason.as_str()));
    headers
        .insert("x-request-id", HeaderValue::from_str(request_id).unwrap_or(HeaderValue::from_static("req")));
    if refused.status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        headers.insert(header::PROXY_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"gatehouse\""));
    }
    response
}

/// Binds the proxy listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
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
