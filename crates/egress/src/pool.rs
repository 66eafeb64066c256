//! Idle upstream HTTP/1.1 connections the proxy may use again.
//!
//! Dialling, and the handshake that follows, cost more than everything else
//! the proxy does for a small request, so a connection whose response has
//! been read completely goes back here instead of being closed.
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
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use http_body_util::Limited;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

/// The request body the proxy forwards (the client's, capped).
pub type UpstreamBody = Limited<Incoming>;

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
        Self { idle_per_key: 32, idle_total: 1024, idle_timeout: Duration::from_secs(15) }
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

struct Idle {
    addr: SocketAddr,
    sender: SendRequest<UpstreamBody>,
    since: Instant,
}

impl Idle {
    fn usable(&self, now: Instant, timeout: Duration) -> bool {
        !self.sender.is_closed() && now.duration_since(self.since) < timeout
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

    /// Takes the most recently used live connection for `key` whose address
    /// is one of `vetted` on `port`.
    pub fn take(
        &self,
        key: &PoolKey,
        vetted: &[IpAddr],
        port: u16,
    ) -> Option<(SocketAddr, SendRequest<UpstreamBody>)> {
        let now = Instant::now();
        let timeout = self.shared.limits.idle_timeout;
        let mut state = self.shared.lock();
        let list = state.idle.get_mut(key)?;
        let before = list.len();
        list.retain(|idle| idle.usable(now, timeout));
        let taken = list
            .iter()
            .rposition(|idle| idle.addr.port() == port && vetted.contains(&idle.addr.ip()))
            .map(|i| list.remove(i));
        let after = list.len();
        if after == 0 {
            state.idle.remove(key);
        }
        state.total -= before - after;
        taken.map(|idle| (idle.addr, idle.sender))
    }

    /// Returns a connection once its response has been read completely; a
    /// connection that closes first is dropped. Spawns the wait.
    pub fn give_back(&self, key: PoolKey, addr: SocketAddr, mut sender: SendRequest<UpstreamBody>) {
        let pool = self.clone();
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                pool.put(key, addr, sender);
            }
        });
    }

    fn put(&self, key: PoolKey, addr: SocketAddr, sender: SendRequest<UpstreamBody>) {
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
        list.push(Idle { addr, sender, since: Instant::now() });
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
