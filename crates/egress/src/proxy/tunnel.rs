//! Opaque `CONNECT` tunnels: the target checked like any request, the
//! client's first bytes held to the checked host, then bytes relayed both
//! ways under the tunnel's caps, each chunk paid before it moves, until
//! either side closes or the grant is revoked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, Refusal, RefusalKind, new_id};
use gatehouse_listener::ClientStream;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::refusal::Refused;
use super::{Proxy, ProxyBody, empty};
use crate::connect::connect_pinned;
use crate::meter::EgressMeter;
use crate::policy::{Policy, PolicyError};
use crate::sni;
use crate::target::{Host, Scheme, Target, parse_authority};

impl Proxy {
    pub(super) async fn tunnel(
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
        let decision = self.decide(target, None, policy, grant).await?;
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
