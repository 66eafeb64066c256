//! Idle upstream HTTP/1.1 connections the proxy may use again.
//!
//! Dialling, and the handshake that follows, cost more than everything else
//! the proxy does for a small request, so a connection whose response has
//! been read completely goes back here instead of being closed. A response
//! left unread closes its connection: the rest of it is still on the wire.
//!
//! Pooling must not loosen pinning. An idle connection remembers the socket
//! address it was dialled to, and a request may take it only when that
//! address is among the addresses the request's *own* decision has just
//! vetted: a name that now resolves elsewhere, or a deny rule added since,
//! leaves the old connection unused. Connections are also keyed by grant and
//! by the `Host` they served, so nothing bound to a connection (NTLM-style
//! authentication, an upstream's per-connection state) passes from one run to
//! another or from one virtual host to another.
//!
//! Bounds: a few idle connections per key, a cap on all of them, and an idle
//! lifetime shorter than common server keep-alive timeouts, enforced by a
//! reaper task that closes what has expired.

use std::collections::HashMap;
use std::future::Future as _;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gatehouse_core::Reason;

use crate::meter::Metered;
use http_body_util::{Either, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The request body the proxy forwards (the client's, capped).
pub type UpstreamBody = Either<Limited<SandboxBody>, Metered<Limited<SandboxBody>>>;

/// A sandbox's request body: as it came, or watched for the run's
/// placeholders when the run holds leases, or (a message to a declared MCP
/// server) read whole and judged.
pub type SandboxBody = Either<Either<Incoming, crate::leases::WatchedBody<Incoming>>, Full<Bytes>>;

/// How many idle connections are kept, and for how long.
#[derive(Debug, Clone)]
pub struct PoolLimits {
    /// Idle connections kept per (grant, host, port).
    pub idle_per_key: usize,
    /// Idle connections kept in all.
    pub idle_total: usize,
    /// How long a connection may stay idle before it is closed.
    pub idle_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self { idle_per_key: 64, idle_total: 1024, idle_timeout: Duration::from_secs(15) }
    }
}

/// Who may use a pooled connection: the grant and the authority (`Host`)
/// it was opened for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    grant_id: String,
    authority: String,
}

impl PoolKey {
    /// The key for `grant_id` reaching `authority`.
    pub fn new(grant_id: &str, authority: &str) -> Self {
        Self { grant_id: grant_id.to_owned(), authority: authority.to_owned() }
    }
}

/// One HTTP/1.1 connection to an upstream, driven by whichever request is
/// using it rather than by a task of its own.
///
/// A connection task would cost a task wake-up and a channel hop in each
/// direction of every exchange, often across threads; here the client's
/// connection task polls the upstream connection itself while it waits for
/// the response and while it streams the body back. An idle connection is
/// polled by no one, so the next user first polls it once without waiting
/// ([`Upstream::ready_now`]) to learn whether the upstream has closed it.
pub struct Upstream {
    addr: SocketAddr,
    sender: SendRequest<UpstreamBody>,
    /// `None` once the connection has finished (closed or failed).
    connection: Option<Connection<TokioIo<UpstreamIo>, UpstreamBody>>,
}

/// An upstream socket: plain, or TLS to the host a request inside an
/// intercepted tunnel is for (verified against the real roots).
pub enum UpstreamIo {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<TlsStream<TcpStream>>),
}

impl UpstreamIo {
    fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Self::Plain(s) => s.peer_addr(),
            Self::Tls(s) => s.get_ref().0.peer_addr(),
        }
    }
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Upstream {
    /// Performs the HTTP/1.1 handshake on a socket already connected to a
    /// vetted address.
    pub async fn handshake(stream: UpstreamIo) -> Result<Self, Reason> {
        let addr = stream.peer_addr().map_err(|_| Reason::UpstreamUnreachable)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| Reason::UpstreamUnreachable)?;
        Ok(Self { addr, sender, connection: Some(connection) })
    }

    /// Lets the connection read and write what it can; false once it has finished.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(connection) = &mut self.connection
            && Pin::new(connection).poll(cx).is_ready()
        {
            self.connection = None;
        }
        self.connection.is_some()
    }

    /// Whether the connection can take a request right now, without waiting.
    fn ready_now(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.drive(&mut cx) && matches!(self.sender.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }

    /// Sends `request` and waits for the response head, driving the
    /// connection meanwhile. A request hyper hands back unsent comes back in
    /// the error, so the caller may send it elsewhere.
    pub async fn send(
        &mut self,
        request: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, TrySendError<Request<UpstreamBody>>> {
        let mut response = std::pin::pin!(self.sender.try_send_request(request));
        std::future::poll_fn(|cx| {
            self.drive(cx);
            response.as_mut().poll(cx)
        })
        .await
    }
}

/// A response body that keeps driving its connection and, once read to its
/// end, puts the connection back in the pool. A body dropped before its end
/// (client gone, size cap hit) takes the connection with it: the rest of the
/// response would still be on the wire. A body still unfinished at its
/// deadline ends in an error, and takes the connection too.
pub struct PooledBody {
    body: Incoming,
    /// The connection, and where it goes back to; `None` once released or given up.
    upstream: Option<(Upstream, UpstreamPool, PoolKey)>,
    deadline: tokio::time::Instant,
    /// Armed only when the body first has to wait: most small responses
    /// arrive whole and never need a timer.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The error a [`PooledBody`] ends with.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl PooledBody {
    /// `body`, read from `upstream`, which goes back to the pool under its
    /// key once read, unless `deadline` comes first.
    pub fn new(
        body: Incoming,
        upstream: Upstream,
        release: (UpstreamPool, PoolKey),
        deadline: tokio::time::Instant,
    ) -> Self {
        let (pool, key) = release;
        Self { body, upstream: Some((upstream, pool, key)), deadline, timer: None }
    }

    /// Ends the body at its deadline; the connection, mid-response, closes.
    fn expire(&mut self) -> BodyError {
        self.upstream = None;
        "the upstream response outlasted its deadline".into()
    }

    fn release(&mut self) {
        if let Some((mut upstream, pool, key)) = self.upstream.take()
            && upstream.ready_now()
        {
            pool.put(key, upstream);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Some((upstream, ..)) = &mut this.upstream {
            upstream.drive(cx);
        }
        let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) else {
            let deadline = this.deadline;
            let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(this.expire())));
            }
            return Poll::Pending;
        };
        match &frame {
            None => this.release(),
            Some(Ok(_)) if this.body.is_end_stream() => this.release(),
            Some(Err(_)) => this.upstream = None,
            // A body that never has to wait is held to the deadline too.
            Some(Ok(_)) if tokio::time::Instant::now() >= this.deadline => {
                return Poll::Ready(Some(Err(this.expire())));
            }
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // Bodies known to be empty (HEAD, 204, 304) or fully read may never
        // be polled to their end by the server: this is their release.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}

struct Idle {
    upstream: Upstream,
    since: Instant,
}

impl Idle {
    fn usable(&self, now: Instant, timeout: Duration) -> bool {
        !self.upstream.sender.is_closed() && now.duration_since(self.since) < timeout
    }
}

#[derive(Default)]
struct State {
    idle: HashMap<PoolKey, Vec<Idle>>,
    total: usize,
    reaper_started: bool,
}

impl State {
    fn sweep(&mut self, now: Instant, timeout: Duration) {
        let mut total = 0;
        self.idle.retain(|_, list| {
            list.retain(|idle| idle.usable(now, timeout));
            total += list.len();
            !list.is_empty()
        });
        self.total = total;
    }
}

/// The pool. Cloning shares it.
#[derive(Clone, Default)]
pub struct UpstreamPool {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    limits: PoolLimits,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for UpstreamPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamPool").field("idle", &self.idle_count()).finish()
    }
}

impl UpstreamPool {
    /// A pool with these limits.
    pub fn new(limits: PoolLimits) -> Self {
        Self { shared: Arc::new(Shared { limits, state: Mutex::default() }) }
    }

    /// Idle connections held now.
    pub fn idle_count(&self) -> usize {
        self.shared.lock().total
    }

    /// Grants with an idle connection here.
    pub fn grants(&self) -> Vec<String> {
        let state = self.shared.lock();
        let mut grants: Vec<String> = state.idle.keys().map(|k| k.grant_id.clone()).collect();
        grants.dedup();
        grants
    }

    /// Closes every idle connection of `grant_id`; returns how many.
    pub fn close_grant(&self, grant_id: &str) -> usize {
        let mut state = self.shared.lock();
        let before = state.total;
        state.idle.retain(|key, _| key.grant_id != grant_id);
        state.total = state.idle.values().map(Vec::len).sum();
        before - state.total
    }

    /// Takes the most recently used live connection for `key` whose address
    /// is one of `vetted` on `port`. Connections the upstream has closed
    /// meanwhile are dropped on the way.
    pub fn take(&self, key: &PoolKey, vetted: &[IpAddr], port: u16) -> Option<Upstream> {
        let now = Instant::now();
        let timeout = self.shared.limits.idle_timeout;
        let mut state = self.shared.lock();
        let list = state.idle.get_mut(key)?;
        let before = list.len();
        list.retain(|idle| idle.usable(now, timeout));
        let mut taken = None;
        while let Some(i) = list
            .iter()
            .rposition(|idle| idle.upstream.addr.port() == port && vetted.contains(&idle.upstream.addr.ip()))
        {
            let mut idle = list.remove(i);
            if idle.upstream.ready_now() {
                taken = Some(idle.upstream);
                break;
            }
        }
        let after = list.len();
        if after == 0 {
            state.idle.remove(key);
        }
        state.total -= before - after;
        taken
    }

    /// Keeps `upstream`, whose last response has been read completely, for
    /// the next request under `key`, unless the pool is full.
    fn put(&self, key: PoolKey, upstream: Upstream) {
        let limits = &self.shared.limits;
        let mut state = self.shared.lock();
        if state.total >= limits.idle_total {
            state.sweep(Instant::now(), limits.idle_timeout);
            if state.total >= limits.idle_total {
                return;
            }
        }
        let list = state.idle.entry(key).or_default();
        if list.len() >= limits.idle_per_key {
            return;
        }
        list.push(Idle { upstream, since: Instant::now() });
        state.total += 1;
        if !state.reaper_started {
            state.reaper_started = true;
            tokio::spawn(reap(Arc::downgrade(&self.shared)));
        }
    }
}

/// Closes expired idle connections until the pool itself is gone.
async fn reap(shared: Weak<Shared>) {
    let period = match shared.upgrade() {
        Some(s) => (s.limits.idle_timeout / 2).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(shared) = shared.upgrade() else { return };
        let timeout = shared.limits.idle_timeout;
        shared.lock().sweep(Instant::now(), timeout);
    }
}
