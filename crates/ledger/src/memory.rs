//! The in-process backend: the embedded default.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use gatehouse_core::{Reason, UnixTime};

use crate::epoch::Epochs;
use crate::record::{GrantRecord, Operation, RETENTION_SECS, Registration, Remaining, Status};
use crate::{LedgerBackend, Rate, Registered, RevokeScope, rate_allows, rate_window};

const SHARDS: usize = 16;
/// Rate keys kept at once; past it, those idle for two windows go.
const MAX_RATE_KEYS: usize = 10_000;

/// One rate key's counts: the fixed window they are of, its uses, and the
/// previous window's.
#[derive(Debug, Clone, Copy, Default)]
struct RateCounts {
    window: i64,
    current: u64,
    previous: u64,
}

/// Records in sharded maps: a consume locks one shard for the length of one
/// check-and-apply, so tasks spending different grants rarely contend and
/// tasks spending the same grant are serialized — never over-spending.
/// Tenant-wide and global revocation set a marker ([`Epochs`]) instead of
/// visiting records. Locks are always taken shard first, then the markers.
#[derive(Debug, Clone)]
pub struct MemoryLedger {
    shards: Arc<[Mutex<HashMap<String, GrantRecord>>; SHARDS]>,
    epochs: Arc<RwLock<Epochs>>,
    hasher: RandomState,
    rates: Arc<Mutex<HashMap<String, RateCounts>>>,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self {
            shards: Arc::new(std::array::from_fn(|_| Mutex::new(HashMap::new()))),
            epochs: Arc::default(),
            hasher: RandomState::new(),
            rates: Arc::default(),
        }
    }

    fn epochs(&self) -> std::sync::RwLockReadGuard<'_, Epochs> {
        self.epochs.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn epochs_mut(&self) -> std::sync::RwLockWriteGuard<'_, Epochs> {
        self.epochs.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn shard(&self, grant_id: &str) -> &Mutex<HashMap<String, GrantRecord>> {
        let i = usize::try_from(self.hasher.hash_one(grant_id) % SHARDS as u64).unwrap_or(0);
        &self.shards[i]
    }

    /// Drops records whose grant expired more than [`RETENTION_SECS`] ago.
    /// Returns how many were dropped.
    pub fn purge_expired(&self, now: UnixTime) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let before = map.len();
            map.retain(|_, r| r.registration.exp.saturating_add(RETENTION_SECS) > now);
            dropped += before - map.len();
        }
        dropped
    }

    /// Revokes the active records of `shard` that `matches`; counts those no
    /// marker had revoked already.
    fn revoke_where(
        &self,
        shard: &Mutex<HashMap<String, GrantRecord>>,
        matches: impl Fn(&GrantRecord) -> bool,
    ) -> u64 {
        let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
        map.values_mut().filter(|r| matches(r)).map(|record| self.revoke_record(record)).sum()
    }

    /// Revokes one record (its shard locked); 1 if no marker had already.
    fn revoke_record(&self, record: &mut GrantRecord) -> u64 {
        if record.status != Status::Active {
            return 0;
        }
        record.status = Status::Revoked;
        let mut epochs = self.epochs_mut();
        let tenant = record.registration.tenant_id.as_deref();
        if epochs.covers(record.seq, tenant) {
            return 0;
        }
        epochs.revoked_one(tenant);
        1
    }

    /// Consume without the async wrapper (benchmarks, the sync core).
    pub fn consume_sync(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        let mut map = self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        let record = map.get_mut(grant_id).ok_or(Reason::GrantUnknown)?;
        if record.registration.exp.saturating_add(RETENTION_SECS) <= now {
            return Err(Reason::GrantUnknown);
        }
        if self.epochs().covers(record.seq, record.registration.tenant_id.as_deref()) {
            return Err(Reason::GrantRevoked);
        }
        record.consume(op, now)
    }
}

impl LedgerBackend for MemoryLedger {
    async fn take_rate(
        &self,
        key: &str,
        limit: u64,
        window_secs: i64,
        now: UnixTime,
    ) -> Result<Rate, Reason> {
        let (window, elapsed) = rate_window(window_secs, now);
        let mut rates = self.rates.lock().unwrap_or_else(PoisonError::into_inner);
        if rates.len() >= MAX_RATE_KEYS && !rates.contains_key(key) {
            rates.retain(|_, counts| counts.window >= window - 1);
        }
        let counts = rates.entry(key.to_owned()).or_default();
        if counts.window != window {
            let previous = if counts.window == window - 1 { counts.current } else { 0 };
            *counts = RateCounts { window, current: 0, previous };
        }
        if !rate_allows(counts.previous, counts.current, limit, window_secs, elapsed) {
            return Ok(Rate::Spent { retry_after_secs: (window_secs.max(1) - elapsed).max(1) });
        }
        counts.current += 1;
        Ok(Rate::Taken)
    }

    async fn register(&self, registration: &Registration) -> Result<Registered, Reason> {
        let mut map = self.shard(&registration.grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(&registration.grant_id) {
            Some(existing) if existing.registration == *registration => Ok(Registered::Existing),
            Some(_) => Err(Reason::GrantConflict),
            None => {
                let seq = self.epochs_mut().register(registration.tenant_id.as_deref());
                map.insert(registration.grant_id.clone(), GrantRecord::new(registration.clone(), seq));
                Ok(Registered::New)
            }
        }
    }

    async fn consume(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        self.consume_sync(grant_id, op, now)
    }

    async fn bump_lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        let mut map = self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        let record = map.get_mut(grant_id).ok_or(Reason::GrantUnknown)?;
        record.lease_generation += 1;
        Ok(record.lease_generation)
    }

    async fn lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        let map = self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(grant_id).map_or(0, |record| record.lease_generation))
    }

    async fn revoke(&self, scope: &RevokeScope) -> Result<u64, Reason> {
        Ok(match scope {
            RevokeScope::Tenant(t) => self.epochs_mut().revoke_tenant(t),
            RevokeScope::All => self.epochs_mut().revoke_all(),
            RevokeScope::Grant(id) => {
                let mut map = self.shard(id).lock().unwrap_or_else(PoisonError::into_inner);
                map.get_mut(id).map_or(0, |record| self.revoke_record(record))
            }
            RevokeScope::Exec(exec) => {
                self.shards.iter().map(|s| self.revoke_where(s, |r| r.registration.exec_id == *exec)).sum()
            }
        })
    }

    async fn get(&self, grant_id: &str) -> Result<Option<GrantRecord>, Reason> {
        let map = self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        Ok(map.get(grant_id).map(|record| {
            let mut record = record.clone();
            if self.epochs().covers(record.seq, record.registration.tenant_id.as_deref()) {
                record.status = Status::Revoked;
            }
            record
        }))
    }
}
