//! Credential leases at the door: which of a run's leases a request gets,
//! and what the request may not carry.
//!
//! The door learns a run's leases from a [`LeaseSource`] (the server's
//! store-backed cache) at the lease generation the run's spend answered
//! with, so a lease changed on any node is seen at the run's next request.
//! The rules themselves are [`crate::inject`]'s; this module applies them
//! to a request in one order, the same for the proxy and the fetch API:
//!
//! 1. the generation is unknown (the ledger is not required and did not
//!    answer): a request carrying a placeholder is `lease_unavailable`, any
//!    other goes on without a credential;
//! 2. generation 0: the run never had a lease, nothing to do;
//! 3. the leases cannot be read: `lease_unavailable`, whatever the request;
//! 4. [`crate::inject::examine`]: placeholders toward other hosts (the lease
//!    is revoked at once), in the URL, of expired or revoked leases;
//! 5. a lease's raw secret toward any host but its own: a leak attempt too;
//! 6. the credential goes in ([`crate::inject::apply`]; a minted token is
//!    minted first if the one in hand is not fresh) or the request is
//!    signed with it ([`crate::sigv4`]), and the response will be scrubbed
//!    of it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use gatehouse_capability::{CredentialSecret, LocalSeal, LocallySealed};
use gatehouse_core::{Reason, UnixTime};
use http::HeaderMap;

use gatehouse_capability::sigv4::Signer;

use crate::inject::{self, Delivery, LeaseEntry, LeaseRefusal, Scrub};
use crate::meter::EgressRefused;
use crate::sigv4::{Payload, ToSign};

/// What every placeholder begins with ([`inject::placeholder_for`]).
pub const PLACEHOLDER_PREFIX: &str = "gatehouse_lease_";

/// A future the lease source answers with.
pub type LeaseFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the door reads a run's leases.
pub trait LeaseSource: Send + Sync + 'static {
    /// The run's leases as of `generation` or later.
    fn leases<'a>(
        &'a self,
        run_id: &'a str,
        generation: u64,
    ) -> LeaseFuture<'a, Result<Arc<RunLeases>, Reason>>;

    /// A lease's placeholder or secret was sent toward another host:
    /// revoke it everywhere before the request is answered.
    fn leaked<'a>(&'a self, lease_id: &'a str, grant_id: &'a str) -> LeaseFuture<'a, ()>;

    /// The grant's lease generation now, read from the ledger (not a
    /// cache): what the door checks right before a secret goes in.
    fn current_generation<'a>(&'a self, grant_id: &'a str) -> LeaseFuture<'a, Result<u64, Reason>>;
}

/// A check made right before a hop is sent; an error refuses it.
#[derive(Clone)]
pub struct LastCheck(Arc<dyn Fn() -> LastCheckFuture + Send + Sync>);

/// What a [`LastCheck`] answers with.
pub type LastCheckFuture = Pin<Box<dyn Future<Output = Result<(), Reason>> + Send>>;

impl LastCheck {
    /// A check made by calling `check`.
    pub fn new(check: impl Fn() -> LastCheckFuture + Send + Sync + 'static) -> Self {
        Self(Arc::new(check))
    }

    /// Makes the check.
    pub async fn check(&self) -> Result<(), Reason> {
        (self.0)().await
    }
}

impl std::fmt::Debug for LastCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastCheck")
    }
}

/// A credential whose secret is a token minted from what is stored (a
/// GitHub App's installation token, an OAuth access token): minted when a
/// request needs it and reused while it is fresh.
pub trait TokenSource: Send + Sync + 'static {
    /// A fresh token, minted if the one in hand is not (a failing mint is
    /// `lease_unavailable`, never a stale token).
    fn token(&self) -> LeaseFuture<'_, Result<CredentialSecret, Reason>>;

    /// The token in hand, if any, without minting: what a request toward
    /// another host must not carry.
    fn current(&self) -> Option<CredentialSecret>;
}

/// Where a lease's secret comes from.
pub enum LeaseSecret {
    /// Opened from the store once and kept under the process's own seal.
    Sealed(LocallySealed),
    /// Minted when needed.
    Minted(Arc<dyn TokenSource>),
    /// AWS keys signing requests, with the key derived for the day.
    Signer(Arc<Signer>),
}

/// A run's leases, with their credentials' secrets sealed under this
/// process's own key: a secret is in the clear only while one request
/// that needs it is being sent.
pub struct RunLeases {
    /// The lease generation these were read at.
    pub generation: u64,
    /// The leases (webhook signing leases are not injected and not here).
    pub entries: Vec<LeaseEntry>,
    /// Each entry's secret, or why it cannot be used: its credential is gone
    /// or does not open (`credential_unreadable`), or the lease does not
    /// match its credential's sealed facts (`lease_unavailable`).
    pub secrets: Vec<Result<LeaseSecret, Reason>>,
    /// The key `secrets` are sealed under.
    pub seal: Arc<LocalSeal>,
}

impl std::fmt::Debug for RunLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLeases")
            .field("generation", &self.generation)
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl RunLeases {
    /// The secret of entry `i` as it stands, for one request: a stored one
    /// opened, a minted one only if a token is in hand (nothing is minted).
    pub fn secret(&self, i: usize) -> Result<CredentialSecret, Reason> {
        match self.secrets.get(i).ok_or(Reason::CredentialUnreadable)?.as_ref().map_err(|r| *r)? {
            LeaseSecret::Sealed(sealed) => self.seal.open(sealed).map_err(|_| Reason::CredentialUnreadable),
            LeaseSecret::Minted(source) => source.current().ok_or(Reason::CredentialUnreadable),
            LeaseSecret::Signer(signer) => CredentialSecret::new(signer.keys().secret_access_key())
                .map_err(|_| Reason::CredentialUnreadable),
        }
    }

    /// The signer of entry `i`, an `aws_sigv4` lease.
    pub fn signer(&self, i: usize) -> Result<Arc<Signer>, Reason> {
        match self.secrets.get(i).ok_or(Reason::CredentialUnreadable)?.as_ref().map_err(|r| *r)? {
            LeaseSecret::Signer(signer) => Ok(signer.clone()),
            _ => Err(Reason::CredentialUnreadable),
        }
    }

    /// The secret of entry `i` to send: a stored one opened, a minted one
    /// minted if the token in hand is not fresh.
    pub async fn open(&self, i: usize) -> Result<CredentialSecret, Reason> {
        match self.secrets.get(i).ok_or(Reason::CredentialUnreadable)?.as_ref().map_err(|r| *r)? {
            LeaseSecret::Sealed(sealed) => self.seal.open(sealed).map_err(|_| Reason::CredentialUnreadable),
            LeaseSecret::Minted(source) => source.token().await,
            // A signing lease's keys are never a token.
            LeaseSecret::Signer(_) => Err(Reason::CredentialUnreadable),
        }
    }
}

/// Whether anything in the request looks like a placeholder (headers,
/// Basic credentials, the URL): what decides when the leases are unknown.
pub fn mentions_placeholder(headers: &HeaderMap, path_and_query: &str) -> bool {
    inject::carries_secret(headers, path_and_query, PLACEHOLDER_PREFIX.as_bytes())
}

/// What a request carrying a placeholder is told when its grant's spend
/// failed, before its leases could be read: what became of its credential
/// (the run is over; the lease state is out of reach), the same at the
/// proxy and through the fetch API. Any other reason stands as it is.
pub fn refused_before_the_leases(reason: Reason) -> Reason {
    match reason {
        Reason::GrantRevoked | Reason::GrantExpired => Reason::RunNotLive,
        Reason::LedgerUnavailable => Reason::LeaseUnavailable,
        other => other,
    }
}

/// What the door did to a request.
#[derive(Default)]
pub struct Injected {
    /// The lease whose credential went in.
    pub lease_id: Option<String>,
    /// What its response must be scrubbed of.
    pub scrub: Scrub,
    /// The lease generation the injection was decided at.
    pub generation: u64,
    /// The run's placeholders, which a streamed request body must not
    /// carry ([`WatchedBody`]); empty when the run holds no lease.
    pub watch: Vec<String>,
}

/// A request body that ends in an error — `lease_placeholder_misplaced`, as
/// an [`EgressRefused`] — at the first chunk in which one of the run's
/// placeholders appears (across chunk boundaries too), before that chunk
/// moves. A placeholder is never replaced in a body, so the upstream would
/// get nothing of the secret anyway; the request is refused all the same,
/// as in headers, and the upstream never receives it whole.
pub struct WatchedBody<B> {
    inner: B,
    placeholders: Vec<String>,
    /// The end of what passed: where a placeholder cut by a chunk boundary begins.
    tail: Vec<u8>,
}

impl<B> WatchedBody<B> {
    /// `body`, watched for `placeholders`.
    pub fn new(body: B, placeholders: Vec<String>) -> Self {
        Self { inner: body, placeholders, tail: Vec::new() }
    }
}

impl<B> hyper::body::Body for WatchedBody<B>
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = &mut *self;
        let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return std::task::Poll::Ready(Some(Err(e.into()))),
            None => return std::task::Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            let longest = this.placeholders.iter().map(String::len).max().unwrap_or(0);
            let mut seen = std::mem::take(&mut this.tail);
            seen.extend_from_slice(data);
            if this.placeholders.iter().any(|p| inject::contains(&seen, p.as_bytes())) {
                let refused = EgressRefused(Reason::LeasePlaceholderMisplaced);
                return std::task::Poll::Ready(Some(Err(Box::new(refused))));
            }
            let keep = longest.saturating_sub(1).min(seen.len());
            this.tail = seen.split_off(seen.len() - keep);
        }
        std::task::Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The reason a request body that ended in an error gives, if it is one of
/// the door's own ([`EgressRefused`]) anywhere in `error`'s sources.
pub fn refused_in_body(error: &(dyn std::error::Error + 'static)) -> Option<Reason> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(EgressRefused(reason)) = e.downcast_ref::<EgressRefused>() {
            return Some(*reason);
        }
        next = e.source();
    }
    None
}

/// Whose request it is: the run, its grant, and the lease generation its
/// spend answered with (`None`: the ledger did not answer).
#[derive(Debug, Clone, Copy)]
pub struct OfRun<'a> {
    /// The grant spent.
    pub grant_id: &'a str,
    /// Its run.
    pub run_id: &'a str,
    /// The run's lease generation.
    pub generation: Option<u64>,
}

/// The request the lease rules are applied to.
#[derive(Debug)]
pub struct Outbound<'a> {
    /// Its method.
    pub method: &'a str,
    /// The `Host` it is sent with (`host[:port]`), which a signature covers.
    pub authority: &'a str,
    /// Its headers, where the credential goes in.
    pub headers: &'a mut HeaderMap,
    /// Its path and query.
    pub path_and_query: &'a str,
    /// The host it goes to, normalized as [`crate::target`] normalizes.
    pub host: &'a str,
    /// It goes over TLS (`https://`, or inside an intercepted tunnel).
    pub over_tls: bool,
    /// Its body, when it is in hand (the fetch API's); a streamed body is
    /// not looked at.
    pub body: Option<&'a [u8]>,
}

/// Applies the lease rules (see the module docs) to a request of `run`.
pub async fn at_the_door(
    source: &dyn LeaseSource,
    run: OfRun<'_>,
    request: Outbound<'_>,
    now: UnixTime,
) -> Result<Injected, LeaseRefusal> {
    let refuse = |reason| LeaseRefusal { reason, lease_id: None, revoke: false };
    let OfRun { grant_id, run_id, generation } = run;
    let Outbound { method, authority, headers, path_and_query, host, over_tls, body } = request;
    let generation = match generation {
        None if mentions_placeholder(headers, path_and_query)
            || body.is_some_and(|b| inject::contains(b, PLACEHOLDER_PREFIX.as_bytes())) =>
        {
            return Err(refuse(Reason::LeaseUnavailable));
        }
        None | Some(0) => return Ok(Injected::default()),
        Some(g) => g,
    };
    let leases = source.leases(run_id, generation).await.map_err(|_| refuse(Reason::LeaseUnavailable))?;
    let watch: Vec<String> = leases.entries.iter().map(|e| e.placeholder.clone()).collect();
    let verdict =
        inject::examine(headers, path_and_query, host, over_tls, &leases.entries, now).and_then(|examined| {
            // A raw secret of another host's lease: sent here, it leaks.
            for (i, entry) in leases.entries.iter().enumerate().filter(|(_, e)| e.host != host) {
                let Ok(secret) = leases.secret(i) else { continue };
                let in_body = body.is_some_and(|b| inject::contains(b, secret.expose()));
                if in_body || inject::carries_secret(headers, path_and_query, secret.expose()) {
                    return Err(LeaseRefusal {
                        reason: Reason::LeaseHostMismatch,
                        lease_id: Some(entry.lease_id.clone()),
                        revoke: true,
                    });
                }
            }
            // A placeholder in the body is never replaced, and never where a
            // rule puts a credential.
            if let Some(entry) = leases
                .entries
                .iter()
                .find(|e| body.is_some_and(|b| inject::contains(b, e.placeholder.as_bytes())))
            {
                return Err(LeaseRefusal {
                    reason: Reason::LeasePlaceholderMisplaced,
                    lease_id: Some(entry.lease_id.clone()),
                    revoke: false,
                });
            }
            Ok(examined)
        });
    let examined = match verdict {
        Ok(examined) => examined,
        Err(refusal) => {
            if let (true, Some(lease_id)) = (refusal.revoke, refusal.lease_id.as_deref()) {
                source.leaked(lease_id, grant_id).await;
            }
            return Err(refusal);
        }
    };
    let Some(i) = examined.inject else {
        return Ok(Injected { watch, ..Injected::default() });
    };
    let entry = leases.entries.get(i).ok_or_else(|| refuse(Reason::CredentialUnreadable))?;
    let lease_refusal =
        |reason| LeaseRefusal { reason, lease_id: Some(entry.lease_id.clone()), revoke: false };
    still_usable(source, run.grant_id, run_id, &entry.lease_id, generation, now)
        .await
        .map_err(lease_refusal)?;
    let scrub = match &entry.delivery {
        Delivery::Inject(_) => {
            let secret = leases.open(i).await.map_err(lease_refusal)?;
            inject::apply(headers, entry, secret.expose()).map_err(lease_refusal)?
        }
        Delivery::SigV4(_) => {
            let signer = leases.signer(i).map_err(lease_refusal)?;
            let payload = body.map_or(Payload::Streamed, Payload::InHand);
            let request = ToSign { method, authority, path_and_query, payload };
            crate::sigv4::sign(headers, &request, &signer, &entry.placeholder, now).map_err(lease_refusal)?
        }
    };
    // The answer must come back as sent to be scrubbed of the secret.
    headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
    Ok(Injected { lease_id: Some(entry.lease_id.clone()), scrub, generation, watch })
}

/// Whether `entry`, chosen from the leases read at `generation` (which may
/// be the spend's, taken before the name was resolved, or a read up to two
/// seconds old), is still usable right before its secret goes in: the
/// ledger's current generation is read, and if anything changed the leases
/// are read again at it. So a revocation that has returned is never
/// followed by an injection, however long resolving took.
///
/// The fetch API resolves after the credential is in, so it calls this
/// again from the fetcher's last check ([`LastCheck`]).
pub async fn still_usable(
    source: &dyn LeaseSource,
    grant_id: &str,
    run_id: &str,
    lease_id: &str,
    generation: u64,
    now: UnixTime,
) -> Result<(), Reason> {
    let current = source.current_generation(grant_id).await.map_err(|_| Reason::LeaseUnavailable)?;
    if current <= generation {
        return Ok(());
    }
    let fresh = source.leases(run_id, current).await.map_err(|_| Reason::LeaseUnavailable)?;
    let lease = fresh.entries.iter().find(|e| e.lease_id == lease_id).ok_or(Reason::LeaseRevoked)?;
    inject::usable(lease, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrub::testing::frames;
    use http_body_util::BodyExt as _;

    /// What a watched body of `pieces` yields: its bytes, or the reason it ended.
    fn watched(pieces: &[&[u8]]) -> Result<Vec<u8>, Reason> {
        let placeholder = "gatehouse_lease_0123456789abcdef0123456789abcdef".to_owned();
        let body = WatchedBody::new(frames(pieces, false), vec![placeholder]);
        let collected = block_on(body.collect());
        collected
            .map(|c| c.to_bytes().to_vec())
            .map_err(|e| refused_in_body(e.as_ref()).unwrap_or(Reason::UpstreamUnreachable))
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    #[test]
    fn a_watched_body_ends_at_a_placeholder_even_cut_across_frames() {
        assert_eq!(watched(&[b"plain ", b"bytes"]), Ok(b"plain bytes".to_vec()));
        let misplaced = Err(Reason::LeasePlaceholderMisplaced);
        assert_eq!(watched(&[b"x gatehouse_lease_0123456789abcdef0123456789abcdef y"]), misplaced);
        assert_eq!(watched(&[b"x gatehouse_lea", b"se_0123456789abcdef", b"0123456789abcdef y"]), misplaced);
        let one_byte_frames: Vec<&[u8]> =
            b"..gatehouse_lease_0123456789abcdef0123456789abcdef..".chunks(1).collect();
        assert_eq!(watched(&one_byte_frames), misplaced);
        // Another lease's id, or a prefix alone, is not this run's placeholder.
        assert!(watched(&[b"gatehouse_lease_ffff", b"gatehouse_lease_"]).is_ok());
    }
}
