//! A request sent on to its upstream and its answer brought back: plain
//! HTTP from the proxy's clients, and every request inside an intercepted
//! tunnel, through the one exchange so both are decided, injected, paid and
//! scrubbed alike.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, Refusal, RefusalKind, new_id};
use gatehouse_ledger::refusal_kind;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Either, Full, Limited};
use hyper::body::{Body as _, Incoming};

use super::mcp::McpOutcome;
use super::refusal::{Refused, refusal_status};
use super::{Proxy, ProxyBody};
use crate::connect::connect_pinned;
use crate::decision::Decision;
use crate::http1::{framing_is_sound, strip_hop_by_hop};
use crate::inject::Delivery;
use crate::leases::{Injected, OfRun, Outbound, WatchedBody, at_the_door, refused_in_body};
use crate::policy::{Policy, PolicyError};
use crate::pool::{PoolKey, PooledBody, Upstream, UpstreamIo};
use crate::target::{Host, Scheme, Target, parse_url};

/// The largest request body to a host the run's AWS lease signs for that is
/// read whole before it goes on (the fetch API's bodies are always in
/// hand): enough for an AWS API call's JSON or XML, which its signature
/// must cover. A longer one streams, `UNSIGNED-PAYLOAD`.
const BODY_IN_HAND_MAX: u64 = 256 * 1024;

impl Proxy {
    /// Whether the run holds a live lease signing requests to `host` (an
    /// `aws_sigv4` credential's), as its leases read at `generation`.
    async fn signs_for(&self, grant: &GrantClaims, generation: Option<u64>, host: Option<&str>) -> bool {
        let (Some(leases), Some(generation), Some(host)) = (&self.leases, generation, host) else {
            return false;
        };
        if generation == 0 {
            return false;
        }
        let now = self.clock.now();
        leases.leases(&grant.exec_id, generation).await.is_ok_and(|read| {
            read.entries.iter().any(|e| {
                e.host == host
                    && matches!(e.delivery, Delivery::SigV4(_))
                    && crate::inject::usable(e, now).is_ok()
            })
        })
    }

    pub(super) async fn forward(
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
    pub(super) async fn exchange(
        &self,
        req: Request<Incoming>,
        target: Target,
        policy: Result<Arc<Policy>, PolicyError>,
        grant: &GrantClaims,
        lease_generation: Option<u64>,
        started: tokio::time::Instant,
    ) -> Result<Response<ProxyBody>, Refused> {
        // A request to one of the tenant's declared MCP servers is read as
        // MCP (`super::mcp`) before it goes on.
        let mcp_server = match &policy {
            Ok(policy) => policy
                .mcp_server(&target)
                .map_err(|reason| Refused {
                    host: Some(target.host.to_string()),
                    ..Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, reason)
                })?
                .cloned(),
            Err(_) => None,
        };
        let decision = self.decide(target, Some(req.method()), policy, grant).await?;
        let host = decision.host.clone();
        let fail = |reason| Refused {
            host: host.clone(),
            ..Refused::new(StatusCode::BAD_GATEWAY, RefusalKind::EgressRefused, reason)
        };
        let target = decision.target.clone().ok_or_else(|| fail(Reason::UpstreamUnreachable))?;
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let authority = target.authority();
        // Generation 0: the run never held a lease, the common case.
        let holds_leases = self.leases.is_some() && lease_generation != Some(0);
        // A small body to a host the run's AWS lease signs for is read whole
        // before the leases apply, so the signature covers it; every other
        // body streams (watched for placeholders).
        let small = mcp_server.is_none()
            && body.size_hint().exact().is_some_and(|n| n <= BODY_IN_HAND_MAX)
            && self.signs_for(grant, lease_generation, host.as_deref()).await;
        let (mut streamed, in_hand) = match small {
            true => {
                let read = tokio::time::timeout(
                    self.limits.response_timeout,
                    Limited::new(body, BODY_IN_HAND_MAX as usize).collect(),
                );
                match read.await {
                    Ok(Ok(collected)) => (None, Some(collected.to_bytes())),
                    _ => return Err(fail(Reason::UpstreamUnreachable)),
                }
            }
            false => (Some(body), None),
        };
        let mut injected = match (&self.leases, &host) {
            (Some(leases), Some(name)) if holds_leases => at_the_door(
                leases.as_ref(),
                OfRun { grant_id: &grant.grant_id, run_id: &grant.exec_id, generation: lease_generation },
                Outbound {
                    method: parts.method.as_str(),
                    authority: &authority,
                    headers: &mut parts.headers,
                    path_and_query: &target.path_and_query,
                    host: name,
                    over_tls: target.scheme == Scheme::Https,
                    body: in_hand.as_deref(),
                },
                self.clock.now(),
            )
            .await
            .map_err(|refusal| Refused::lease(refusal, host.clone()))?,
            _ => Injected::default(),
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
        let mut mcp_errors = None;
        let body: crate::pool::SandboxBody = match (&mcp_server, streamed.take()) {
            (_, None) => Either::Right(Full::new(in_hand.unwrap_or_default())),
            (Some(server), Some(body)) => {
                let read = self
                    .mcp_request(
                        server,
                        &parts.method,
                        &parts.headers,
                        body,
                        grant,
                        host.clone(),
                        &injected.watch,
                    )
                    .await?;
                match read {
                    McpOutcome::Answer(response) => return Ok(response),
                    McpOutcome::Forward { body, errors } => {
                        mcp_errors = Some(errors);
                        if !body.is_empty() || parts.headers.contains_key(header::CONTENT_LENGTH) {
                            parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                        }
                        Either::Right(Full::new(body))
                    }
                }
            }
            (None, Some(body)) => Either::Left(match injected.watch.is_empty() {
                true => Either::Left(body),
                false => Either::Right(WatchedBody::new(body, std::mem::take(&mut injected.watch))),
            }),
        };
        // A declared body is paid in one piece before anything moves; one
        // without a length is paid frame by frame, and cut off at the cap.
        let meter = self.meter(grant);
        let declared = body.size_hint().exact();
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
        match (mcp_server, mcp_errors) {
            (Some(server), Some(errors)) => {
                self.mcp_answer(parts, body, &server, errors, (grant, host)).await
            }
            _ => Ok(Response::from_parts(parts, body)),
        }
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

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;

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
