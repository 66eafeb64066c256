//! The in-process backend: the embedded default.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use gatehouse_core::{Reason, UnixTime};

use crate::record::{GrantRecord, Operation, RETENTION_SECS, Registration, Remaining, Status};
use crate::{LedgerBackend, Registered, RevokeScope};

const SHARDS: usize = 16;

/// Records in sharded maps: a consume locks one shard for the length of one
/// check-and-apply, so tasks spending different grants rarely contend and
/// tasks spending the same grant are serialized — never over-spending.
#[derive(Debug, Clone)]
pub struct MemoryLedger {
    shards: Arc<[Mutex<HashMap<String, GrantRecord>>; SHARDS]>,
    hasher: RandomState,
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
            hasher: RandomState::new(),
        }
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

    /// Consume without the async wrapper (benchmarks, the sync core).
    pub fn consume_sync(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        let mut map = self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        let record = map.get_mut(grant_id).ok_or(Reason::GrantUnknown)?;
        if record.registration.exp.saturating_add(RETENTION_SECS) <= now {
            return Err(Reason::GrantUnknown);
        }
        record.consume(op, now)
    }
}

impl LedgerBackend for MemoryLedger {
    async fn register(&self, registration: &Registration) -> Result<Registered, Reason> {
        let mut map = self.shard(&registration.grant_id).lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(&registration.grant_id) {
            Some(existing) if existing.registration == *registration => Ok(Registered::Existing),
            Some(_) => Err(Reason::GrantConflict),
            None => {
                map.insert(registration.grant_id.clone(), GrantRecord::new(registration.clone()));
                Ok(Registered::New)
            }
        }
    }

    async fn consume(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        self.consume_sync(grant_id, op, now)
    }

    async fn revoke(&self, scope: &RevokeScope) -> Result<u64, Reason> {
        let matches = |r: &GrantRecord| match scope {
            RevokeScope::Grant(id) => r.registration.grant_id == *id,
            RevokeScope::Exec(exec) => r.registration.exec_id == *exec,
            RevokeScope::Tenant(t) => r.registration.tenant_id.as_deref() == Some(t.as_str()),
            RevokeScope::All => true,
        };
        let mut revoked = 0;
        for shard in self.shards.iter() {
            let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for record in map.values_mut().filter(|r| r.status == Status::Active && matches(r)) {
                record.status = Status::Revoked;
                revoked += 1;
            }
        }
        Ok(revoked)
    }

    async fn get(&self, grant_id: &str) -> Result<Option<GrantRecord>, Reason> {
        Ok(self.shard(grant_id).lock().unwrap_or_else(PoisonError::into_inner).get(grant_id).cloned())
    }
}
