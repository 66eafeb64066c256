//! The door's view of runs' leases (gateway and `all` roles): read from
//! the store at the lease generation a run's spend answered with, opened
//! with the gateway's sealing key, and kept sealed again under this
//! process's own key until one request needs a secret.
//!
//! An entry is reused while its generation is current and it is under two
//! seconds old; the age bound is a second line behind the generation, so
//! even a bump that never reached the ledger is in force within seconds.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gatehouse_capability::credential::{CredentialError, SealedSecret};
use gatehouse_capability::sigv4::{AwsKeys, Signer};
use gatehouse_capability::{LocalSeal, SealingKeys};
use gatehouse_core::{Clock, Reason};
use gatehouse_egress::inject::{Delivery, InjectRule, LeaseEntry, LeaseState, placeholder_for};
use gatehouse_egress::leases::{LeaseFuture, LeaseSecret, LeaseSource, RunLeases};
use gatehouse_ledger::{Ledger, LedgerBackend as _, RevokeScope};
use gatehouse_store::{Credential, DoorLease, LeaseStatus, NewEvent, Store};

use crate::credential_kinds::{Kind, Stored};
use crate::mint::Minter;
use crate::record::RefusalLog;

/// How long a read of a run's leases is trusted without a generation change.
const MAX_AGE: Duration = Duration::from_secs(2);
/// Runs whose leases are kept at once; beyond it the oldest reads go.
const MAX_RUNS: usize = 10_000;

/// The store-backed [`LeaseSource`].
pub struct DoorLeases {
    store: Store,
    keys: Arc<SealingKeys>,
    seal: Arc<LocalSeal>,
    ledger: Ledger,
    events: Arc<RefusalLog>,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<String, (Instant, Arc<RunLeases>)>>,
    tampered: AtomicU64,
    /// Leaked leases whose revocation the store has not recorded yet:
    /// revoked here all the same, and retried until recorded.
    unrecorded: Arc<Mutex<HashSet<String>>>,
    /// A task is retrying `unrecorded`.
    retrying: Arc<std::sync::atomic::AtomicBool>,
    /// Mints the tokens of `github_app` and `oauth2_refresh` credentials
    /// (none: their leases are unavailable).
    minter: Option<Arc<Minter>>,
}

impl DoorLeases {
    /// A source over `store`, opening credentials with `keys`.
    pub fn new(
        store: Store,
        keys: Arc<SealingKeys>,
        ledger: Ledger,
        events: Arc<RefusalLog>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let seal = LocalSeal::new().map_err(|_| "the OS random generator failed".to_owned())?;
        Ok(Self {
            store,
            keys,
            seal: Arc::new(seal),
            ledger,
            events,
            clock,
            cache: Mutex::default(),
            tampered: AtomicU64::new(0),
            unrecorded: Arc::default(),
            retrying: Arc::default(),
            minter: None,
        })
    }

    /// The same source minting tokens through `fetcher`, under the
    /// tenants' `policies`.
    #[must_use]
    pub fn with_minter(
        mut self,
        fetcher: gatehouse_egress::fetch::Fetcher,
        policies: Arc<dyn gatehouse_egress::proxy::PolicySource>,
    ) -> Self {
        let minter = Minter::new(
            self.store.clone(),
            self.keys.clone(),
            self.seal.clone(),
            fetcher,
            policies,
            self.clock.clone(),
        );
        self.minter = Some(Arc::new(minter));
        self
    }

    /// The minter, if this source mints.
    pub fn minter(&self) -> Option<&Arc<Minter>> {
        self.minter.as_ref()
    }

    fn cached(&self, run_id: &str, generation: u64) -> Option<Arc<RunLeases>> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let (read_at, leases) = cache.get(run_id)?;
        (leases.generation >= generation && read_at.elapsed() < MAX_AGE).then(|| leases.clone())
    }

    fn keep(&self, run_id: &str, leases: Arc<RunLeases>) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_RUNS {
            cache.retain(|_, (read_at, _)| read_at.elapsed() < MAX_AGE);
            if cache.len() >= MAX_RUNS {
                cache.clear();
            }
        }
        cache.insert(run_id.to_owned(), (Instant::now(), leases));
    }

    fn forget(&self, run_id: &str) {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).remove(run_id);
    }

    /// One lease as the door sees it, with its secret sealed locally.
    /// Webhook signing leases sign deliveries and are never injected.
    fn entry(&self, door: &DoorLease) -> Option<(LeaseEntry, Result<LeaseSecret, Reason>)> {
        let lease = &door.lease;
        if lease.purpose == "webhook_signing" {
            return None;
        }
        let unrecorded =
            self.unrecorded.lock().unwrap_or_else(PoisonError::into_inner).contains(&lease.lease_id);
        let state = match lease.status {
            // A leak's revocation the store has not recorded yet.
            _ if unrecorded => LeaseState::Revoked { run_ended: false },
            // `examine` itself holds a lapsed lease to its expiry.
            LeaseStatus::Live | LeaseStatus::Expired => LeaseState::Live { expires_at: lease.expires_at },
            LeaseStatus::Revoked => {
                LeaseState::Revoked { run_ended: lease.revoke_reason.as_deref() == Some("run_ended") }
            }
        };
        let stored = door.credential.as_ref().and_then(|c| Stored::read(&c.inject));
        let delivery = stored.as_ref().and_then(|s| s.delivery_for(&lease.host));
        let secret = match (&state, door.credential.as_ref(), &stored, &delivery) {
            (LeaseState::Live { .. }, Some(credential), Some(stored), Some(_)) => {
                // The credential's hosts and purpose are sealed facts; the
                // lease row is not, so it must agree with them.
                if !credential.hosts().any(|h| h == lease.host) || lease.purpose != credential.purpose {
                    self.tampering(
                        &credential.credential_id,
                        "a lease's host or purpose is not its credential's",
                    );
                    Err(Reason::LeaseUnavailable)
                } else {
                    self.lease_secret(credential, stored)
                }
            }
            _ => Err(Reason::CredentialUnreadable),
        };
        // A column that does not read leaves the lease unusable (its secret
        // is absent, so using it is `credential_unreadable`); the rule below
        // only gives it a shape.
        let allow_plain_http = stored.as_ref().is_some_and(|s| s.allow_plain_http);
        let delivery = delivery.or_else(|| Some(Delivery::Inject(InjectRule::basic("gatehouse").ok()?)))?;
        let entry = LeaseEntry {
            lease_id: lease.lease_id.clone(),
            placeholder: placeholder_for(&lease.lease_id)?,
            host: lease.host.clone(),
            granted_at: lease.created_at,
            state,
            delivery,
            allow_plain_http,
        };
        Some((entry, secret))
    }

    /// Where a live lease's secret comes from: the stored secret (or AWS
    /// keys) opened and sealed under this process's key, or, for a minted
    /// kind, the credential's token source.
    fn lease_secret(&self, credential: &Credential, stored: &Stored) -> Result<LeaseSecret, Reason> {
        if stored.kind.is_minted() {
            let minter = self.minter.as_ref().ok_or(Reason::LeaseUnavailable)?;
            // The key or refresh token must open here, or nothing can be minted.
            self.open(credential)?;
            return Ok(LeaseSecret::Minted(minter.source(credential, stored)));
        }
        let secret = self.open(credential)?;
        if let Kind::AwsSigV4(scope) = &stored.kind {
            let keys = AwsKeys::from_material(&secret).map_err(|_| Reason::CredentialUnreadable)?;
            return Ok(LeaseSecret::Signer(Arc::new(Signer::new(keys, scope.clone()))));
        }
        Ok(LeaseSecret::Sealed(self.seal.seal(&secret)))
    }

    /// The secret a person's request with `credential` is made with: the
    /// stored one opened, or a minted kind's fresh token.
    pub(crate) async fn secret_of(
        &self,
        credential: &Credential,
        stored: &Stored,
    ) -> Result<gatehouse_capability::CredentialSecret, Reason> {
        match self.lease_secret(credential, stored)? {
            LeaseSecret::Sealed(sealed) => self.seal.open(&sealed).map_err(|_| Reason::CredentialUnreadable),
            LeaseSecret::Minted(source) => source.token().await,
            // The keys themselves, which the door signs with.
            LeaseSecret::Signer(_) => self.open(credential),
        }
    }

    /// A stored credential's secret, opened with this gateway's keys for
    /// its row's facts as they stand: a row edited to send the secret
    /// elsewhere or otherwise does not open (`credential_tampered`), and
    /// that is counted and logged as tampering.
    pub(crate) fn open(
        &self,
        credential: &Credential,
    ) -> Result<gatehouse_capability::CredentialSecret, Reason> {
        let opened = SealedSecret::parse(&credential.sealed)
            .and_then(|s| self.keys.open(&s, &credential.sealing_context()));
        opened.map_err(|e| {
            if e == CredentialError::Tampered {
                self.tampering(&credential.credential_id, "its sealed secret does not open for its row");
                return Reason::LeaseUnavailable;
            }
            tracing::error!(credential_id = %credential.credential_id, code = e.code(),
                "a stored credential does not open with this gateway's keys");
            Reason::CredentialUnreadable
        })
    }

    /// A row that does not match what was sealed: someone wrote the store
    /// behind the API's back. Counted, logged; the lease is unavailable.
    fn tampering(&self, credential_id: &str, what: &'static str) {
        self.tampered.fetch_add(1, Ordering::Relaxed);
        tracing::error!(credential_id, what, "credential store tampering: a lease is refused");
    }

    /// How many times a lease or credential row was found not to match its
    /// credential's sealed facts.
    pub fn tampered(&self) -> u64 {
        self.tampered.load(Ordering::Relaxed)
    }
}

/// Records a leaked lease's revocation in the store, with its run event:
/// the run's id when the lease changed, `None` when it was revoked already,
/// the store's error code when nothing was recorded.
async fn record_leak(
    store: &Store,
    events: &RefusalLog,
    lease_id: &str,
    now: gatehouse_core::UnixTime,
) -> Result<Option<String>, &'static str> {
    match store.revoke_lease(lease_id, "leaked", "gatehouse", now).await {
        Ok(Some(lease)) => {
            events.record_event(NewEvent::lease_event(&lease, "lease_revoked", Some("leaked"), now));
            Ok(Some(lease.run_id))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(e.code()),
    }
}

impl DoorLeases {
    /// Retries the unrecorded leak revocations every second until the store
    /// has them all; one task at a time.
    fn retry_unrecorded(&self) {
        if self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let (store, events, clock) = (self.store.clone(), self.events.clone(), self.clock.clone());
        let (unrecorded, retrying) = (self.unrecorded.clone(), self.retrying.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let pending: Vec<String> =
                    unrecorded.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
                for lease_id in pending {
                    if record_leak(&store, &events, &lease_id, clock.now()).await.is_ok() {
                        tracing::info!(lease_id, "a leaked lease's revocation is recorded");
                        unrecorded.lock().unwrap_or_else(PoisonError::into_inner).remove(&lease_id);
                    }
                }
                let left = unrecorded.lock().unwrap_or_else(PoisonError::into_inner);
                if left.is_empty() {
                    retrying.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }

    /// The secret of a webhook signing lease of `run_id` for a delivery to
    /// `host`, read fresh from the store: the lease must be the run's, live,
    /// for webhook signing, and for this host.
    pub async fn signing_secret(
        &self,
        run_id: &str,
        tenant_id: Option<&str>,
        lease_id: &str,
        host: &str,
    ) -> Result<gatehouse_capability::CredentialSecret, Reason> {
        let now = self.clock.now();
        let leases = self.store.door_leases(run_id, now).await.map_err(|_| Reason::LeaseUnavailable)?;
        let door = leases.iter().find(|d| d.lease.lease_id == lease_id).ok_or(Reason::LeaseRevoked)?;
        // The grant names the run and tenant; the lease row must be theirs.
        if door.lease.run_id != run_id || tenant_id.is_some_and(|t| t != door.lease.tenant_id) {
            return Err(Reason::LeaseRevoked);
        }
        match door.lease.status {
            LeaseStatus::Live => {}
            LeaseStatus::Expired => return Err(Reason::LeaseExpired),
            LeaseStatus::Revoked if door.lease.revoke_reason.as_deref() == Some("run_ended") => {
                return Err(Reason::RunNotLive);
            }
            LeaseStatus::Revoked => return Err(Reason::LeaseRevoked),
        }
        if door.lease.purpose != "webhook_signing" {
            return Err(Reason::LeasePurposeMismatch);
        }
        if door.lease.host != host {
            return Err(Reason::LeaseHostMismatch);
        }
        let credential = door.credential.as_ref().ok_or(Reason::CredentialUnknown)?;
        if !credential.hosts().any(|h| h == door.lease.host)
            || door.lease.purpose != credential.purpose
            || door.lease.tenant_id != credential.tenant_id
        {
            self.tampering(&credential.credential_id, "a signing lease is not its credential's");
            return Err(Reason::LeaseUnavailable);
        }
        self.open(credential)
    }
}

impl LeaseSource for DoorLeases {
    fn leases<'a>(
        &'a self,
        run_id: &'a str,
        generation: u64,
    ) -> LeaseFuture<'a, Result<Arc<RunLeases>, Reason>> {
        Box::pin(async move {
            if let Some(leases) = self.cached(run_id, generation) {
                return Ok(leases);
            }
            let stored = self.store.door_leases(run_id, self.clock.now()).await.map_err(|e| {
                tracing::warn!(run_id, code = e.code(), "a run's leases could not be read");
                Reason::LeaseUnavailable
            })?;
            let (entries, secrets) = stored.iter().filter_map(|d| self.entry(d)).unzip();
            let leases = Arc::new(RunLeases { generation, entries, secrets, seal: self.seal.clone() });
            self.keep(run_id, leases.clone());
            Ok(leases)
        })
    }

    fn current_generation<'a>(&'a self, grant_id: &'a str) -> LeaseFuture<'a, Result<u64, Reason>> {
        Box::pin(async move { self.ledger.lease_generation(grant_id).await })
    }

    fn leaked<'a>(&'a self, lease_id: &'a str, grant_id: &'a str) -> LeaseFuture<'a, ()> {
        Box::pin(async move {
            let now = self.clock.now();
            match record_leak(&self.store, &self.events, lease_id, now).await {
                Ok(Some(run_id)) => self.forget(&run_id),
                Ok(None) => {}
                Err(code) => {
                    // Refused until recorded: this node holds the lease
                    // revoked and retries; every node refuses the run's
                    // grant, which the ledger keeps across restarts.
                    tracing::error!(
                        lease_id,
                        code,
                        "a leaked lease's revocation was not recorded: its grant is revoked and the store retried"
                    );
                    self.unrecorded
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(lease_id.to_owned());
                    self.cache.lock().unwrap_or_else(PoisonError::into_inner).clear();
                    if self.ledger.revoke(&RevokeScope::Grant(grant_id.to_owned())).await.is_err() {
                        tracing::error!(lease_id, "a leaking run's grant could not be revoked in the ledger");
                    }
                    self.retry_unrecorded();
                }
            }
            if self.ledger.bump_lease_generation(grant_id).await.is_err() {
                tracing::error!(lease_id, "the other nodes could not be told of a leaked lease's revocation");
            }
        })
    }
}

impl gatehouse_egress::run_fetch::SigningSecrets for DoorLeases {
    fn signing_secret<'a>(
        &'a self,
        run_id: &'a str,
        tenant_id: Option<&'a str>,
        lease_id: &'a str,
        host: &'a str,
    ) -> LeaseFuture<'a, Result<gatehouse_capability::CredentialSecret, Reason>> {
        Box::pin(DoorLeases::signing_secret(self, run_id, tenant_id, lease_id, host))
    }
}
