//! `CONNECT` tunnels the proxy terminates: only to a host the run holds a
//! live credential lease for, under gatehouse's own interception CA (the
//! sandbox trusts it through the certificate returned with its run).
//!
//! Inside, every request is a request: spent in the ledger, decided by the
//! tenant's policy and the address guard, given the run's credential by its
//! lease, sent over TLS verified against the real roots to an address the
//! decision vetted (pooled per grant and authority like plain HTTP), and its
//! answer scrubbed of the secret. Every other tunnel stays opaque.

use std::sync::Arc;

use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, Refusal, RefusalKind, new_id};
use gatehouse_ledger::{Operation, spend};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::refusal::Refused;
use super::{Proxy, ProxyBody};
use crate::decision::Decision;
use crate::inject::LeaseState;
use crate::target::{Host, Scheme, Target};

/// What an intercepted tunnel presents to the client.
pub(super) struct Interception {
    config: Arc<rustls::ServerConfig>,
}

impl Proxy {
    /// Whether the tunnel `decision` allowed is to be intercepted: the run
    /// holds a live lease for its host. A run with leases whose leases
    /// cannot be read gets no tunnel at all (`lease_unavailable`).
    pub(super) async fn interception(
        &self,
        grant: &GrantClaims,
        lease_generation: Option<u64>,
        decision: &Decision,
    ) -> Result<Option<Interception>, Refused> {
        let Some(host) = decision.target.as_ref().map(|t| t.host.to_string()) else {
            return Ok(None);
        };
        let unavailable = |reason| Refused {
            host: Some(host.clone()),
            ..Refused::new(StatusCode::SERVICE_UNAVAILABLE, RefusalKind::SecretRefused, reason)
        };
        // A host the tenant's rules judge request by request is terminated
        // whatever its leases, or not opened at all.
        if decision.per_request {
            let Some(leaves) = &self.leaves else {
                return Err(Refused {
                    host: Some(host.clone()),
                    ..Refused::new(
                        StatusCode::FORBIDDEN,
                        RefusalKind::EgressRefused,
                        Reason::TunnelNotTerminable,
                    )
                });
            };
            let (config, _minted) = leaves.server_config(&host).map_err(|_| Refused {
                host: Some(host.clone()),
                ..Refused::new(StatusCode::SERVICE_UNAVAILABLE, RefusalKind::EgressRefused, Reason::TlsFailed)
            })?;
            return Ok(Some(Interception { config }));
        }
        let (Some(source), Some(leaves)) = (&self.leases, &self.leaves) else {
            return Ok(None);
        };
        let Some(generation) = lease_generation.filter(|g| *g > 0) else {
            return Ok(None);
        };
        let leases = source
            .leases(&grant.exec_id, generation)
            .await
            .map_err(|_| unavailable(Reason::LeaseUnavailable))?;
        let now = self.clock.now();
        let leased = leases.entries.iter().any(|e| {
            e.host == host && matches!(e.state, LeaseState::Live { expires_at } if now < expires_at)
        });
        if !leased {
            return Ok(None);
        }
        let (config, _minted) = leaves.server_config(&host).map_err(|_| unavailable(Reason::TlsFailed))?;
        Ok(Some(Interception { config }))
    }

    /// Answers the `CONNECT` and serves the tunnel's requests itself, for
    /// as long as the tunnel may live and its grant is not revoked.
    pub(super) fn intercept(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
        grant: Arc<GrantClaims>,
        decision: Decision,
        interception: Interception,
    ) -> Response<ProxyBody> {
        let proxy = self.clone();
        let revoked = self.tunnels.opened(&grant.grant_id);
        self.stats.tunnels.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            let closed = revoked.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let limits = proxy.limits.clone();
            let serve = async {
                let Some(target) = decision.target.clone() else { return };
                // The upgraded connection keeps the client's place in the
                // listener's caps, and any bytes read past the CONNECT head.
                let Ok(upgraded) = hyper::upgrade::on(&mut req).await else { return };
                let accept =
                    tokio_rustls::TlsAcceptor::from(interception.config).accept(TokioIo::new(upgraded));
                let refused = |reason| {
                    let refused = Refused {
                        host: Some(target.host.to_string()),
                        ..Refused::new(StatusCode::FORBIDDEN, RefusalKind::EgressRefused, reason)
                    };
                    proxy.sink.refused(Refusal {
                        request_id: Some(new_id("req")),
                        ..proxy.record(Some(&grant), refused.kind, refused.reason, refused.host, None)
                    });
                };
                // A client that does not trust the interception CA (or
                // speaks no TLS) ends here: a clean handshake failure.
                let Ok(Ok(tls)) = tokio::time::timeout(limits.hello_timeout, accept).await else {
                    return refused(Reason::TlsFailed);
                };
                let named = match &target.host {
                    Host::Name(name) => tls.get_ref().1.server_name() == Some(name.as_str()),
                    Host::Ip(_) => true,
                };
                if !named {
                    return refused(Reason::TunnelSniMismatch);
                }
                let service = hyper::service::service_fn(|inner| {
                    let (proxy, grant, target) = (proxy.clone(), grant.clone(), target.clone());
                    async move { Ok::<_, std::convert::Infallible>(proxy.inside(inner, &grant, &target).await) }
                });
                let connection =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service);
                // The time cap counts from the tunnel's opening, as for opaque ones.
                let _ = tokio::time::timeout(limits.tunnel_duration, connection).await;
            };
            tokio::select! {
                () = serve => {}
                () = &mut closed => {}
            }
            proxy.tunnels.ended(&grant.grant_id);
        });
        Response::new(super::empty())
    }

    /// One request inside an intercepted tunnel to `tunnel`'s host and port.
    async fn inside(
        &self,
        req: Request<Incoming>,
        grant: &GrantClaims,
        tunnel: &Target,
    ) -> Response<ProxyBody> {
        let started = tokio::time::Instant::now();
        let answer = async {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
            let spent = spend(
                &self.ledger,
                &grant.grant_id,
                &Operation::Request,
                self.clock.now(),
                self.ledger_required,
            )
            .await
            // The tunnel's vetted host is this request's: the refusal names it.
            .map_err(|reason| Refused {
                host: Some(tunnel.host.to_string()),
                ..self.spend_refused(req.headers(), &path, reason)
            })?;
            // Origin-form only: what the tunnel was opened and checked for is
            // the host every request inside it goes to.
            if req.uri().scheme().is_some() || req.uri().authority().is_some() || !path.starts_with('/') {
                return Err(Refused::new(
                    StatusCode::BAD_REQUEST,
                    RefusalKind::EgressRefused,
                    Reason::UrlMalformed,
                ));
            }
            let target = Target {
                scheme: Scheme::Https,
                host: tunnel.host.clone(),
                port: tunnel.port,
                path_and_query: path,
            };
            let policy = self.policies.policy_of_run(grant.tenant_id.as_deref(), &grant.exec_id);
            self.exchange(req, target, policy, grant, spent.map(|s| s.lease_generation), started).await
        };
        answer.await.unwrap_or_else(|refused| self.refuse(Some(grant), &refused))
    }
}
