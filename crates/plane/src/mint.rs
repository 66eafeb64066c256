//! Tokens minted at the door from a stored credential: a GitHub App's
//! installation tokens (`github_app`) and OAuth access tokens from a
//! refresh token (`oauth2_refresh`, RFC 6749 §6).
//!
//! A run's request never waits on a mint it does not need: the token in
//! hand is reused until it is near its end (five minutes before it, or half
//! its life for a short-lived one), with no round trip. Past that point one
//! node at a time mints, and the fleet shares what it minted:
//!
//! 1. the token in this node's hand, if fresh;
//! 2. the fleet's token (`credential_tokens`), if fresh, sealed to the
//!    gateway's key and bound to the credential and the refresh's rotation;
//! 3. otherwise this node claims the refresh in the store, which only one
//!    node holds at a time (the others wait for its token, up to
//!    [`WAIT_FOR_OTHER_NODE`]); the claim outlives the mint's timeout, so
//!    no two nodes ever present one refresh token. The token (and the
//!    refresh token the provider rotated in) is written in the step that
//!    ends the claim.
//!
//! Mints go through the door: the tenant's policy and the address guard
//! decide the token endpoint like any other host. A mint that fails — the
//! endpoint unreachable or slow, its answer refused, garbage, without an
//! expiry, or already expired — is `lease_unavailable` (503, retryable):
//! never a stale token. Its cause is counted and logged, never a token.
//!
//! A GitHub installation token no live lease uses any more is revoked
//! (`DELETE /installation/token`) by the node that holds it, within
//! [`SWEEP_EVERY`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use gatehouse_capability::credential::{CredentialContext, SealedSecret, seal};
use gatehouse_capability::github_app::AppKey;
use gatehouse_capability::{CredentialSecret, LocalSeal, LocallySealed, SealingKeys};
use gatehouse_core::{Clock, Reason, UnixTime};
use gatehouse_egress::fetch::{FetchRequest, Fetcher};
use gatehouse_egress::leases::{LeaseFuture, TokenSource};
use gatehouse_egress::proxy::PolicySource;
use gatehouse_store::{Credential, LeaseFilter, LeaseStatus, MintedTokens, PageRequest, Store};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::credential_kinds::{GithubApp, Kind, OAuth2Refresh, OAuthSecrets, Stored};

/// The longest a mint may take: well inside a claim.
const MINT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a claim to refresh holds: longer than a mint can take, so a
/// claim never lapses while its refresh token is on the wire.
const CLAIM_SECS: i64 = 60;
/// How long a node waits for another node's refresh before refusing.
pub const WAIT_FOR_OTHER_NODE: Duration = Duration::from_secs(20);
/// How often the fleet's row is looked at while another node refreshes.
const POLL: Duration = Duration::from_millis(200);
/// How near its end a token is minted anew.
const REFRESH_BEFORE_SECS: i64 = 300;
/// How often tokens no live lease uses are revoked and forgotten.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// A token without a stated lifetime (OAuth's `expires_in` is only
/// RECOMMENDED) is used this long at most.
const UNSTATED_LIFETIME_SECS: i64 = 600;
/// GitHub's REST API version the mint speaks.
const GITHUB_API_VERSION: &str = "2022-11-28";

/// Why a mint failed: each cause counted and logged apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MintFailure {
    /// The endpoint could not be reached, or refused by the door.
    Unreachable,
    /// The endpoint did not answer within [`MINT_TIMEOUT`].
    Timeout,
    /// The endpoint answered with a refusal (a bad key, a JWT outside its
    /// window, a refresh token reused or revoked).
    Refused,
    /// The answer is not the documented shape (or lacks the expiry).
    Invalid,
    /// The token answered is already expired.
    Expired,
    /// The credential's stored material does not open or read.
    Unreadable,
    /// The store could not be read or written.
    Store,
    /// Another node held the refresh past the wait.
    Busy,
}

impl MintFailure {
    /// The stable code of the cause (the metric's label, the log's field).
    pub const fn code(self) -> &'static str {
        match self {
            Self::Unreachable => "mint_unreachable",
            Self::Timeout => "mint_timeout",
            Self::Refused => "mint_refused",
            Self::Invalid => "mint_answer_invalid",
            Self::Expired => "mint_token_expired",
            Self::Unreadable => "credential_unreadable",
            Self::Store => "store_unavailable",
            Self::Busy => "mint_busy",
        }
    }
}

/// A minted token and when it expires.
struct Minted {
    token: CredentialSecret,
    expires_at: UnixTime,
    minted_at: UnixTime,
}

/// When a token minted at `minted_at` and expiring at `expires_at` is
/// minted anew: five minutes before its end, or half-way for a token that
/// lives less than ten minutes.
pub fn refresh_at(minted_at: UnixTime, expires_at: UnixTime) -> UnixTime {
    let life = expires_at.saturating_sub(minted_at).max(0);
    expires_at - REFRESH_BEFORE_SECS.min(life / 2)
}

/// What the minter shares with each credential's token source.
struct Parts {
    store: Store,
    keys: Arc<SealingKeys>,
    seal: Arc<LocalSeal>,
    fetcher: Fetcher,
    policies: Arc<dyn PolicySource>,
    clock: Arc<dyn Clock>,
    /// This node's name in claims.
    holder: String,
    /// Mints by kind and outcome.
    counts: Mutex<HashMap<(&'static str, &'static str), u64>>,
    /// Round trips to a token endpoint.
    mints: AtomicU64,
}

/// The node's minter: one token source per credential (and version).
pub struct Minter {
    parts: Arc<Parts>,
    sources: Mutex<HashMap<(String, i64), Arc<CredentialTokens>>>,
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minter").field("holder", &self.parts.holder).finish_non_exhaustive()
    }
}

impl Minter {
    /// A minter minting through `fetcher` under the tenants' `policies`.
    pub fn new(
        store: Store,
        keys: Arc<SealingKeys>,
        seal: Arc<LocalSeal>,
        fetcher: Fetcher,
        policies: Arc<dyn PolicySource>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let holder = gatehouse_core::new_id("node");
        let parts = Parts {
            store,
            keys,
            seal,
            fetcher,
            policies,
            clock,
            holder,
            counts: Mutex::default(),
            mints: AtomicU64::new(0),
        };
        Self { parts: Arc::new(parts), sources: Mutex::default() }
    }

    /// The token source of `credential` (a minted kind).
    pub fn source(&self, credential: &Credential, stored: &Stored) -> Arc<CredentialTokens> {
        let key = (credential.credential_id.clone(), credential.version);
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources
            .entry(key)
            .or_insert_with(|| {
                Arc::new(CredentialTokens {
                    parts: self.parts.clone(),
                    credential: credential.clone(),
                    stored: stored.clone(),
                    held: Mutex::new(None),
                    minting: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// How many round trips to token endpoints this node made.
    pub fn mint_count(&self) -> u64 {
        self.parts.mints.load(Ordering::Relaxed)
    }

    /// Mints by kind and outcome (`ok` or a [`MintFailure::code`]).
    pub fn counts(&self) -> Vec<((&'static str, &'static str), u64)> {
        let counts = self.parts.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<_> = counts.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable();
        all
    }

    /// Forgets the tokens of credentials no live lease uses, revoking the
    /// GitHub installation tokens this node holds (see the module docs).
    pub async fn sweep(&self) {
        let sources: Vec<Arc<CredentialTokens>> =
            self.sources.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        for source in sources {
            let filter = LeaseFilter {
                credential_id: Some(source.credential.credential_id.clone()),
                status: Some(LeaseStatus::Live),
                ..LeaseFilter::default()
            };
            let now = self.parts.clock.now();
            match self.parts.store.leases(&filter, &PageRequest { limit: 1, cursor: None }, now).await {
                Ok(page) if page.items.is_empty() => {
                    source.retire().await;
                    // Forgotten: a lease granted later gets a source anew.
                    let key = (source.credential.credential_id.clone(), source.credential.version);
                    self.sources.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(code = e.code(), "minted tokens could not be swept"),
            }
        }
    }

    /// Sweeps every [`SWEEP_EVERY`], for as long as the process runs.
    pub async fn sweep_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            self.sweep().await;
        }
    }

    /// When the fleet's current token of `credential` expires, if one is
    /// stored (never the token).
    pub async fn expires_at(store: &Store, credential_id: &str) -> Option<UnixTime> {
        store
            .minted_tokens(credential_id)
            .await
            .ok()
            .flatten()
            .filter(|t| t.sealed_access.is_some())?
            .access_expires_at
    }
}

/// One credential's minted tokens on this node.
pub struct CredentialTokens {
    parts: Arc<Parts>,
    credential: Credential,
    stored: Stored,
    /// The token in hand, sealed under the process's key.
    held: Mutex<Option<Held>>,
    /// One mint at a time on this node.
    minting: tokio::sync::Mutex<()>,
}

struct Held {
    token: LocallySealed,
    refresh_at: UnixTime,
}

/// Which of a credential's minted secrets a seal is for.
#[derive(Clone, Copy)]
enum Sealed {
    Access,
    Refresh,
}

impl CredentialTokens {
    fn in_hand(&self, now: UnixTime) -> Option<CredentialSecret> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let held = held.as_ref().filter(|h| now < h.refresh_at)?;
        self.parts.seal.open(&held.token).ok()
    }

    fn hold(&self, minted: &Minted) {
        let token = self.parts.seal.seal(&minted.token);
        let refresh_at = refresh_at(minted.minted_at, minted.expires_at);
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(Held { token, refresh_at });
    }

    /// The context a minted secret is sealed under: the credential's row,
    /// the rotation, and which secret.
    fn context(&self, rotation: i64, which: Sealed) -> CredentialContext<'_> {
        let delivery = match which {
            Sealed::Access => "minted:access_token",
            Sealed::Refresh => "minted:refresh_token",
        };
        CredentialContext { version: rotation, delivery, ..self.credential.sealing_context() }
    }

    fn seal_minted(
        &self,
        secret: &CredentialSecret,
        rotation: i64,
        which: Sealed,
    ) -> Result<String, MintFailure> {
        let public = self.parts.keys.current_public();
        seal(public, secret, &self.context(rotation, which))
            .map(|s| s.as_str().to_owned())
            .map_err(|_| MintFailure::Unreadable)
    }

    fn open_minted(
        &self,
        sealed: &str,
        rotation: i64,
        which: Sealed,
    ) -> Result<CredentialSecret, MintFailure> {
        let sealed = SealedSecret::parse(sealed).map_err(|_| MintFailure::Unreadable)?;
        self.parts.keys.open(&sealed, &self.context(rotation, which)).map_err(|_| MintFailure::Unreadable)
    }

    /// The fleet's token in `row`, held in this node's hand, if it is fresh at `now`.
    fn adopt(&self, row: &MintedTokens, now: UnixTime) -> Option<CredentialSecret> {
        let minted = self.fleet_token(row, now)?;
        self.hold(&minted);
        Some(minted.token)
    }

    /// The fleet's access token in `row`, if it is fresh at `now`.
    fn fleet_token(&self, row: &MintedTokens, now: UnixTime) -> Option<Minted> {
        let (sealed, expires_at) = (row.sealed_access.as_deref()?, row.access_expires_at?);
        (now < refresh_at(row.updated_at, expires_at)).then_some(())?;
        let token = self.open_minted(sealed, row.rotation, Sealed::Access).ok()?;
        Some(Minted { token, expires_at, minted_at: row.updated_at })
    }

    fn count(&self, outcome: &'static str) {
        let mut counts = self.parts.counts.lock().unwrap_or_else(PoisonError::into_inner);
        *counts.entry((self.stored.kind.name(), outcome)).or_default() += 1;
    }

    /// A fresh token, from this node's hand, the fleet's row, or a mint.
    async fn fresh(&self) -> Result<CredentialSecret, MintFailure> {
        if let Some(token) = self.in_hand(self.parts.clock.now()) {
            return Ok(token);
        }
        let _one_at_a_time = self.minting.lock().await;
        let now = self.parts.clock.now();
        if let Some(token) = self.in_hand(now) {
            return Ok(token);
        }
        let store = &self.parts.store;
        let id = &self.credential.credential_id;
        let row = store.minted_tokens(id).await.map_err(|_| MintFailure::Store)?;
        if let Some(token) = row.as_ref().and_then(|row| self.adopt(row, now)) {
            return Ok(token);
        }
        let waited_until = tokio::time::Instant::now() + WAIT_FOR_OTHER_NODE;
        let claimed = loop {
            let now = self.parts.clock.now();
            match store.claim_token_refresh(id, &self.parts.holder, now, now + CLAIM_SECS).await {
                Ok(Some(row)) => break row,
                Ok(None) => {}
                Err(_) => return Err(MintFailure::Store),
            }
            // Another node is refreshing: its token, once written.
            tokio::time::sleep(POLL).await;
            let row = store.minted_tokens(id).await.map_err(|_| MintFailure::Store)?;
            if let Some(token) = row.as_ref().and_then(|row| self.adopt(row, self.parts.clock.now())) {
                return Ok(token);
            }
            if tokio::time::Instant::now() >= waited_until {
                return Err(MintFailure::Busy);
            }
        };
        let now = self.parts.clock.now();
        // Written by another node between the read and the claim.
        if let Some(token) = self.adopt(&claimed, now) {
            let _ = store.release_token_refresh(id, &self.parts.holder).await;
            return Ok(token);
        }
        let minted = match &self.stored.kind {
            Kind::GithubApp(app) => self.mint_installation_token(app, now).await.map(|m| (m, None)),
            Kind::OAuth2Refresh(oauth) => self.refresh(oauth, &claimed, now).await.map(|(m, r)| (m, Some(r))),
            _ => Err(MintFailure::Unreadable),
        };
        let (minted, refresh_token) = match minted {
            Ok(minted) => minted,
            Err(failure) => {
                let _ = store.release_token_refresh(id, &self.parts.holder).await;
                return Err(failure);
            }
        };
        let next_rotation = claimed.rotation + 1;
        let sealed = (|| {
            let sealed_refresh = match &refresh_token {
                Some(refresh_token) => {
                    Some(self.seal_minted(refresh_token, next_rotation, Sealed::Refresh)?)
                }
                None => None,
            };
            Ok::<_, MintFailure>((
                sealed_refresh,
                self.seal_minted(&minted.token, next_rotation, Sealed::Access)?,
            ))
        })();
        let (sealed_refresh, sealed_access) = match sealed {
            Ok(sealed) => sealed,
            Err(failure) => {
                let _ = store.release_token_refresh(id, &self.parts.holder).await;
                return Err(failure);
            }
        };
        let written = MintedTokens {
            credential_id: id.clone(),
            rotation: claimed.rotation,
            sealed_refresh,
            sealed_access: Some(sealed_access),
            access_expires_at: Some(minted.expires_at),
            updated_at: minted.minted_at,
        };
        match store.finish_token_refresh(&self.parts.holder, &written, minted.minted_at).await {
            Ok(true) => {}
            // The token is good; the fleet did not get it (and, for OAuth,
            // its rotated refresh token is lost with this process).
            Ok(false) | Err(_) => tracing::error!(
                credential_id = %id,
                "a minted token could not be shared: this node's claim on the refresh had lapsed"
            ),
        }
        self.hold(&minted);
        Ok(minted.token)
    }

    /// A request to a token endpoint through the door, under the tenant's
    /// policy and within [`MINT_TIMEOUT`]: the answer's status and body.
    async fn exchange(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<(StatusCode, bytes::Bytes), MintFailure> {
        let request = FetchRequest {
            method,
            url: url.to_owned(),
            headers,
            body: body.into(),
            purpose: gatehouse_egress::Purpose::Request,
            scrub: gatehouse_egress::scrub::Scrub::default(),
            last_check: None,
        };
        let policy = self.parts.policies.policy(Some(&self.credential.tenant_id));
        let fetched =
            tokio::time::timeout(MINT_TIMEOUT, self.parts.fetcher.fetch(policy.as_deref(), request));
        match fetched.await {
            Ok(Ok(answer)) => Ok((answer.status, answer.body)),
            Ok(Err(refusal)) if refusal.reason == Reason::UpstreamTimeout => Err(MintFailure::Timeout),
            Ok(Err(_)) => Err(MintFailure::Unreachable),
            Err(_) => Err(MintFailure::Timeout),
        }
    }

    /// A mint: POSTed through the door, and counted.
    async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<(StatusCode, bytes::Bytes), MintFailure> {
        self.parts.mints.fetch_add(1, Ordering::Relaxed);
        self.exchange(Method::POST, url, headers, body).await
    }

    /// `POST {api}/app/installations/{id}/access_tokens` with the app JWT.
    async fn mint_installation_token(&self, app: &GithubApp, now: UnixTime) -> Result<Minted, MintFailure> {
        let key =
            self.material().and_then(|m| AppKey::from_material(&m).map_err(|_| MintFailure::Unreadable))?;
        let jwt = key.jwt(app.app_id, now).map_err(|_| MintFailure::Unreadable)?;
        let mut headers = github_headers();
        headers.insert(header::AUTHORIZATION, sensitive(&format!("Bearer {}", jwt.as_str()))?);
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = app.mint_body().to_string().into_bytes();
        let (status, body) = self.post(&app.mint_url(), headers, body).await?;
        if status != StatusCode::CREATED {
            return Err(MintFailure::Refused);
        }
        #[derive(Deserialize)]
        struct Answer {
            token: Zeroizing<String>,
            expires_at: String,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| MintFailure::Invalid)?;
        let expires_at = humantime::parse_rfc3339(&answer.expires_at)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok())
            .ok_or(MintFailure::Invalid)?;
        minted(&answer.token, expires_at, now)
    }

    /// The refresh grant (RFC 6749 §6) with the refresh token in force:
    /// the access token, and the refresh token to present next (rotated,
    /// or the same when the provider did not rotate it).
    async fn refresh(
        &self,
        oauth: &OAuth2Refresh,
        row: &MintedTokens,
        now: UnixTime,
    ) -> Result<(Minted, CredentialSecret), MintFailure> {
        let material = self.material()?;
        let secrets = OAuthSecrets::from_material(&material).ok_or(MintFailure::Unreadable)?;
        let refresh_token = match &row.sealed_refresh {
            Some(sealed) => self.open_minted(sealed, row.rotation, Sealed::Refresh)?,
            None => CredentialSecret::new(&secrets.refresh_token).map_err(|_| MintFailure::Unreadable)?,
        };
        let refresh_text =
            std::str::from_utf8(refresh_token.expose()).map_err(|_| MintFailure::Unreadable)?;
        let mut fields = vec![("grant_type", "refresh_token"), ("refresh_token", refresh_text)];
        if let Some(scope) = &oauth.scope {
            fields.push(("scope", scope));
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        match &secrets.client_secret {
            // RFC 6749 §2.3.1: each form-encoded, then HTTP Basic.
            Some(client_secret) => {
                let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                let pair = Zeroizing::new(format!("{}:{}", encode(&oauth.client_id), encode(client_secret)));
                let basic = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(pair.as_bytes()));
                headers.insert(header::AUTHORIZATION, sensitive(&format!("Basic {}", basic.as_str()))?);
            }
            None => fields.push(("client_id", &oauth.client_id)),
        }
        let body =
            Zeroizing::new(form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish());
        let (status, body) = self.post(&oauth.token_url, headers, body.as_bytes().to_vec()).await?;
        if !status.is_success() {
            return Err(MintFailure::Refused);
        }
        #[derive(Deserialize)]
        struct Answer {
            access_token: Zeroizing<String>,
            #[serde(default)]
            expires_in: Option<serde_json::Value>,
            #[serde(default)]
            refresh_token: Option<Zeroizing<String>>,
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| MintFailure::Invalid)?;
        // RFC 6749 §5.1 gives seconds as a number; some providers send a string.
        let lifetime = match &answer.expires_in {
            None => UNSTATED_LIFETIME_SECS,
            Some(serde_json::Value::Number(n)) => n.as_i64().ok_or(MintFailure::Invalid)?,
            Some(serde_json::Value::String(s)) => s.parse::<i64>().map_err(|_| MintFailure::Invalid)?,
            Some(_) => return Err(MintFailure::Invalid),
        };
        let access = minted(&answer.access_token, now.saturating_add(lifetime), now)?;
        let next_refresh = match &answer.refresh_token {
            Some(rotated) => CredentialSecret::new(rotated).map_err(|_| MintFailure::Invalid)?,
            None => refresh_token,
        };
        Ok((access, next_refresh))
    }

    /// The credential's sealed material, opened.
    fn material(&self) -> Result<CredentialSecret, MintFailure> {
        let sealed = SealedSecret::parse(&self.credential.sealed).map_err(|_| MintFailure::Unreadable)?;
        self.parts.keys.open(&sealed, &self.credential.sealing_context()).map_err(|_| MintFailure::Unreadable)
    }

    /// No live lease uses this credential: its token is forgotten here,
    /// and a GitHub installation token this node minted is revoked.
    async fn retire(&self) {
        let _one_at_a_time = self.minting.lock().await;
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Kind::GithubApp(app) = &self.stored.kind else { return };
        if held.is_none() {
            return;
        }
        let store = &self.parts.store;
        let id = &self.credential.credential_id;
        let now = self.parts.clock.now();
        let Ok(Some(row)) = store.claim_token_refresh(id, &self.parts.holder, now, now + CLAIM_SECS).await
        else {
            return;
        };
        let Some(token) = row
            .sealed_access
            .as_deref()
            .and_then(|sealed| self.open_minted(sealed, row.rotation, Sealed::Access).ok())
        else {
            let _ = store.release_token_refresh(id, &self.parts.holder).await;
            return;
        };
        let mut headers = github_headers();
        let revoked = match std::str::from_utf8(token.expose())
            .ok()
            .map(|t| sensitive(&format!("Bearer {t}")))
        {
            Some(Ok(value)) => {
                headers.insert(header::AUTHORIZATION, value);
                let answer = self.exchange(Method::DELETE, &app.revoke_url(), headers, Vec::new()).await;
                // 204: revoked; 401: it was no longer valid anyway.
                matches!(answer, Ok((status, _)) if status == StatusCode::NO_CONTENT || status == StatusCode::UNAUTHORIZED)
            }
            _ => false,
        };
        let cleared = MintedTokens {
            credential_id: id.clone(),
            rotation: row.rotation,
            sealed_refresh: None,
            sealed_access: None,
            access_expires_at: None,
            updated_at: now,
        };
        if revoked {
            self.count("revoked");
            let _ = store.finish_token_refresh(&self.parts.holder, &cleared, now).await;
        } else {
            tracing::warn!(credential_id = %id, "an unused installation token could not be revoked; it expires on its own");
            let _ = store.release_token_refresh(id, &self.parts.holder).await;
        }
    }
}

impl TokenSource for CredentialTokens {
    fn token(&self) -> LeaseFuture<'_, Result<CredentialSecret, Reason>> {
        Box::pin(async move {
            let fresh = self.fresh().await;
            match &fresh {
                Ok(_) => self.count("ok"),
                Err(failure) => {
                    self.count(failure.code());
                    tracing::warn!(
                        credential_id = %self.credential.credential_id,
                        kind = self.stored.kind.name(),
                        cause = failure.code(),
                        "a token could not be minted: the request is refused, never sent with a stale one"
                    );
                }
            }
            fresh.map_err(|_| Reason::LeaseUnavailable)
        })
    }

    fn current(&self) -> Option<CredentialSecret> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        self.parts.seal.open(&held.as_ref()?.token).ok()
    }
}

/// A token answered by an endpoint, checked: it goes into a header, so
/// RFC 6749's characters only, and it must outlive the present moment.
fn minted(token: &str, expires_at: UnixTime, now: UnixTime) -> Result<Minted, MintFailure> {
    if !crate::credential_kinds::oauth_text(token, 4096) || token.contains(' ') {
        return Err(MintFailure::Invalid);
    }
    if expires_at <= now {
        return Err(MintFailure::Expired);
    }
    let token = CredentialSecret::new(token).map_err(|_| MintFailure::Invalid)?;
    Ok(Minted { token, expires_at, minted_at: now })
}

fn github_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/vnd.github+json"));
    headers.insert("x-github-api-version", HeaderValue::from_static(GITHUB_API_VERSION));
    headers.insert(header::USER_AGENT, HeaderValue::from_static("gatehouse"));
    headers
}

fn sensitive(text: &str) -> Result<HeaderValue, MintFailure> {
    let mut value = HeaderValue::from_str(text).map_err(|_| MintFailure::Unreadable)?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_minted_anew_five_minutes_before_their_end_or_half_way() {
        assert_eq!(refresh_at(0, 3600), 3300, "GitHub's hour: five minutes before");
        assert_eq!(refresh_at(0, 120), 60, "two minutes: half-way");
        assert_eq!(refresh_at(100, 100), 100);
        assert_eq!(refresh_at(100, 50), 50, "a token expired when minted is never fresh");
    }

    #[test]
    fn an_answered_token_must_be_a_header_value_that_outlives_now() {
        assert!(minted("gho_abc", 200, 100).is_ok());
        assert_eq!(minted("gho_abc", 100, 100).err(), Some(MintFailure::Expired));
        assert_eq!(minted("", 200, 100).err(), Some(MintFailure::Invalid));
        assert_eq!(minted("a\r\nb", 200, 100).err(), Some(MintFailure::Invalid));
        assert_eq!(minted("two words", 200, 100).err(), Some(MintFailure::Invalid));
    }
}
