//! Accepting HTTP/1 connections so that nobody can hold them for free.
//!
//! Both of gatehouse's listeners (the API and the egress proxy) accept
//! through here. Without it a client that opens connections and sends
//! nothing, or sends its headers one byte a minute, or leaves keep-alive
//! connections idle, holds a task and a file descriptor each for as long as
//! it likes, without credentials (slowloris). So every connection:
//!
//! - takes a slot of the listener ([`Limits::max_connections`]) and of its
//!   client address ([`Limits::max_connections_per_client`]); a connection
//!   over either cap is closed at once, before anything is read from it. The
//!   slot is part of the stream: a `CONNECT` tunnel that takes the socket
//!   over keeps holding it;
//! - must deliver a request's whole header within
//!   [`Limits::header_read_timeout`], counted from the moment the connection
//!   is accepted, and for later requests from their first byte;
//! - is closed when idle for [`Limits::idle_timeout`]: nothing read or
//!   written, and no request being handled (a handler waiting on a slow
//!   upstream is not idle; its own deadlines bound it).
//!
//! Clients behind one address (a NAT, or one sandbox host for many runs)
//! share that address's cap; size it for the busiest such host.

#![forbid(unsafe_code)]
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// What one listener allows each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From accepting a connection (or the start of a request) to the end
    /// of the request's header.
    pub header_read_timeout: Duration,
    /// Nothing read or written and no request in hand for this long: closed.
    pub idle_timeout: Duration,
    /// Connections open at once on this listener.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_connections_per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_client: 512,
        }
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections closed at once: the listener was full.
    pub refused_listener_full: AtomicU64,
    /// Connections closed at once: their client address was at its cap.
    pub refused_client_full: AtomicU64,
    /// Connections closed for idling.
    pub closed_idle: AtomicU64,
    /// Connections closed because a request header took too long.
    pub closed_header_timeout: AtomicU64,
    /// Connections open now (tunnels included).
    pub open: AtomicUsize,
}

/// Who holds how many connections.
#[derive(Debug)]
struct Slots {
    limits: Limits,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    stats: Arc<ConnectionStats>,
}

impl Slots {
    fn take(self: &Arc<Self>, client: IpAddr) -> Option<Slot> {
        let mut per_client = self.per_client.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stats.open.load(Ordering::Relaxed) >= self.limits.max_connections {
            self.stats.refused_listener_full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let held = per_client.entry(client).or_insert(0);
        if *held >= self.limits.max_connections_per_client {
            self.stats.refused_client_full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *held += 1;
        // Changed under the same lock as the per-client counts, so the two
        // caps cannot be overrun by connections accepted side by side.
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        Some(Slot { slots: self.clone(), client })
    }
}

/// One connection's place in its listener's caps, given back on drop.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    client: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_client = self.slots.per_client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = per_client.get_mut(&self.client) {
            *held -= 1;
            if *held == 0 {
                per_client.remove(&self.client);
            }
        }
        self.slots.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// "No header being read" in [`Activity::header_from_ms`].
const NOT_READING: u64 = u64::MAX;

/// What a connection is doing, for its watchdog: when it last moved a byte,
/// since when it has been sending a request header, and how many of its
/// requests are in hand. Milliseconds since `since`, so that the stream's
/// reads and writes only store an integer. Nothing here wakes the watchdog:
/// a wake-up would make hyper poll the socket again, a wasted system call
/// per request; the watchdog looks on its own, a few times per timeout.
#[derive(Debug)]
struct Activity {
    since: Instant,
    last_ms: AtomicU64,
    header_from_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last_ms: AtomicU64::new(0),
            // The first header is awaited from the moment of accepting: a
            // client that connects and sends nothing is on the header clock.
            header_from_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.since + Duration::from_millis(ms)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Bytes arrived. With no request in hand they start a header.
    fn read_some(&self) {
        self.touch();
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.header_from_ms.load(Ordering::Relaxed) == NOT_READING
        {
            self.header_from_ms.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// A whole header arrived: hyper hands the request to the handler.
    fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.header_from_ms.store(NOT_READING, Ordering::Relaxed);
    }

    fn request_done(&self) {
        self.touch();
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection's watchdog ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    HeaderTimeout,
    Idle,
}

/// Resolves when the connection has taken too long over a header, or has
/// been idle (nothing moving, no request in hand) for too long. It looks
/// at least four times per header timeout, so a header that starts on a
/// quiet connection is cut at most a quarter of the timeout late.
async fn watchdog(activity: &Activity, limits: &Limits) -> Expired {
    let look_every = (limits.header_read_timeout / 4).max(Duration::from_millis(10));
    loop {
        let now = Instant::now();
        let deadline = if activity.in_flight.load(Ordering::Relaxed) > 0 {
            // A handler at work is bounded by its own deadlines.
            None
        } else {
            match activity.header_from_ms.load(Ordering::Relaxed) {
                NOT_READING => Some((
                    activity.at(activity.last_ms.load(Ordering::Relaxed)) + limits.idle_timeout,
                    Expired::Idle,
                )),
                from => Some((activity.at(from) + limits.header_read_timeout, Expired::HeaderTimeout)),
            }
        };
        let wake = match deadline {
            Some((at, why)) if at <= now => return why,
            Some((at, _)) => at.min(now + look_every),
            None => now + look_every,
        };
        tokio::time::sleep_until(wake).await;
    }
}

/// An accepted client connection: the socket, its slot, its activity.
#[derive(Debug)]
pub struct ClientStream {
    stream: TcpStream,
    slot: Slot,
    activity: Arc<Activity>,
}

impl ClientStream {
    /// The socket and the slot it holds, for a tunnel that takes the
    /// connection over: keep the slot as long as the socket.
    pub fn into_parts(self) -> (TcpStream, Slot) {
        (self.stream, self.slot)
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() != before {
            this.activity.read_some();
        }
        poll
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The handler of each request, counting it as in hand from its arrival
/// until its response head is ready; the body's bytes then count as
/// activity on their own.
#[derive(Clone)]
struct Tracked<F> {
    handler: F,
    activity: Arc<Activity>,
    peer: Option<PeerAddr>,
}

/// The address a request's connection came from, in the request's
/// extensions (the settings page throttles failed sign-ins by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// A request in hand; its end is counted when this is dropped.
struct InHand(Arc<Activity>);

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

impl<F, Fut, B, E> Service<Request<Incoming>> for Tracked<F>
where
    F: Fn(Request<Incoming>) -> Fut,
    Fut: Future<Output = Result<Response<B>, E>>,
{
    type Response = Response<B>;
    type Error = E;
    type Future = InHandFuture<Fut>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        self.activity.request_started();
        if let Some(peer) = self.peer {
            req.extensions_mut().insert(peer);
        }
        // Not boxed: a handler's future can be kilobytes, and a box would
        // copy it once more for every request.
        InHandFuture { inner: (self.handler)(req), in_hand: Some(InHand(self.activity.clone())) }
    }
}

pin_project_lite::pin_project! {
    /// A handler's future, with the request counted as in hand until it ends.
    struct InHandFuture<Fut> {
        #[pin]
        inner: Fut,
        in_hand: Option<InHand>,
    }
}

impl<Fut: Future> Future for InHandFuture<Fut> {
    type Output = Fut::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = std::task::ready!(this.inner.poll(cx));
        this.in_hand.take();
        Poll::Ready(output)
    }
}

/// A bound listener with its caps.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    slots: Arc<Slots>,
    peer_addresses: bool,
}

impl Listener {
    /// Wraps a bound TCP listener.
    pub fn new(tcp: TcpListener, limits: Limits) -> Self {
        let slots = Slots { limits, per_client: Mutex::default(), stats: Arc::default() };
        Self { tcp, slots: Arc::new(slots), peer_addresses: false }
    }

    /// Puts each request's client address in its extensions ([`PeerAddr`]).
    /// Off by default (an extension costs an allocation per request); both
    /// of gatehouse's listeners turn it on, since refusals of clients that
    /// proved nothing are counted by address.
    #[must_use]
    pub fn with_peer_addresses(mut self) -> Self {
        self.peer_addresses = true;
        self
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Its counters.
    pub fn stats(&self) -> Arc<ConnectionStats> {
        self.slots.stats.clone()
    }

    /// Serves HTTP/1 (with upgrades, for `CONNECT`) until `shutdown`
    /// resolves; then stops accepting, lets every connection finish the
    /// request in hand, and returns when they have (tunnels, which hold
    /// their sockets themselves, are not waited for).
    pub async fn serve_http1<F, Fut, B, E>(self, handler: F, shutdown: impl Future<Output = ()>)
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<Response<B>, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let limits = self.slots.limits;
        let (stop, stopping) = watch::channel(false);
        let mut shutdown = pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = self.tcp.accept() => accepted,
                () = &mut shutdown => break,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off
                    // instead of spinning.
                    tracing::warn!(error = %e.kind(), "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Over a cap: dropped here, closed before a byte is read.
            let Some(slot) = self.slots.take(peer.ip()) else { continue };
            self.slots.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let activity = Arc::new(Activity::new());
            let io = ClientStream { stream, slot, activity: activity.clone() };
            let service = Tracked {
                handler: handler.clone(),
                activity: activity.clone(),
                peer: self.peer_addresses.then_some(PeerAddr(peer)),
            };
            let stats = self.slots.stats.clone();
            let mut stopping = stopping.clone();
            tokio::spawn(async move {
                // hyper's own header timer is left off: it would also cut
                // idle keep-alive connections at the header timeout.
                let builder = hyper::server::conn::http1::Builder::new();
                let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service).with_upgrades());
                let mut stopping_now = false;
                loop {
                    tokio::select! {
                        _ = conn.as_mut() => break,
                        // Dropped, not shut down gracefully: hyper would wait
                        // for a half-sent header to finish.
                        expired = watchdog(&activity, &limits) => {
                            let counter = match expired {
                                Expired::Idle => &stats.closed_idle,
                                Expired::HeaderTimeout => &stats.closed_header_timeout,
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        _ = stopping.wait_for(|stop| *stop), if !stopping_now => {
                            stopping_now = true;
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            });
        }
        // New connections are refused from now on, so a balancer sends
        // them elsewhere instead of to a backlog nobody will accept.
        drop(self.tcp);
        let _ = stop.send(true);
        drop(stopping);
        // Every connection task holds a receiver; they are done when none is left.
        stop.closed().await;
    }
}
