//! The egress ledger: server-side counters for every egress grant.
//!
//! A sealed grant says what a run may do; it cannot count. The ledger keeps
//! one record per grant so that budgets hold across requests, a grant can be
//! revoked mid-execution, and a captured grant is still bound by counters
//! already spent (seed: "The egress ledger").
//!
//! Two backends, one behaviour: [`MemoryLedger`] (the embedded default) and
//! [`RedisLedger`] (scale-out; every check-and-update is one Lua script, so
//! it is atomic on the server). `tests/conformance.rs` runs the same suite
//! against both.
//!
//! Architecture invariant: failure is refusal. A backend that cannot answer
//! returns `ledger_unavailable`; no error path ever allows an operation.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod epoch;
mod memory;
mod record;
mod redis_backend;

use gatehouse_core::{Reason, RefusalKind, UnixTime};

pub use memory::MemoryLedger;
pub use record::{GrantRecord, Operation, RETENTION_SECS, Registration, Remaining, Status};
pub use redis_backend::{RedisLedger, RedisLedgerConfig, eviction_is_safe};

/// Whether a registration created a record or found the identical one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new record.
    New,
    /// The same grant was already registered (idempotent retry).
    Existing,
}

/// Which grants a revocation targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeScope {
    /// One grant.
    Grant(String),
    /// Every grant of one run.
    Exec(String),
    /// Every grant of one tenant (the kill switch).
    Tenant(String),
    /// Every grant (emergency revoke).
    All,
}

/// The ledger operations. Every error is a stable reason code; a backend
/// that cannot answer says [`Reason::LedgerUnavailable`].
///
/// The futures are `Send`, so callers may spawn them on any runtime thread.
pub trait LedgerBackend {
    /// Records a grant. Registering the same grant again is a no-op; a
    /// different grant under the same id is `grant_conflict`.
    fn register(
        &self,
        registration: &Registration,
    ) -> impl Future<Output = Result<Registered, Reason>> + Send;

    /// Spends one operation atomically, or refuses without changing anything.
    fn consume(
        &self,
        grant_id: &str,
        op: &Operation,
        now: UnixTime,
    ) -> impl Future<Output = Result<Remaining, Reason>> + Send;

    /// Revokes active grants in `scope`; returns how many changed state.
    fn revoke(&self, scope: &RevokeScope) -> impl Future<Output = Result<u64, Reason>> + Send;

    /// Bumps the grant's lease generation (a lease of its run changed) and
    /// returns the new one: `grant_unknown` for no record. Revoked or
    /// expired records are bumped too; nothing spends on them anyway.
    fn bump_lease_generation(&self, grant_id: &str) -> impl Future<Output = Result<u64, Reason>> + Send;

    /// The record, for the admin view (`None` when unknown or purged).
    fn get(&self, grant_id: &str) -> impl Future<Output = Result<Option<GrantRecord>, Reason>> + Send;

    /// The grant's lease generation alone (0 for no record: nothing was
    /// registered to bump). The door reads it right before every injection,
    /// so it is one field, one round trip.
    fn lease_generation(&self, grant_id: &str) -> impl Future<Output = Result<u64, Reason>> + Send;

    /// Takes one use of `key`'s rate (`limit` uses a `window_secs`), or
    /// refuses without counting it. Every node of a fleet shares the count,
    /// so the rate is the tenant's, not each node's. See [`Rate`].
    fn take_rate(
        &self,
        key: &str,
        limit: u64,
        window_secs: i64,
        now: UnixTime,
    ) -> impl Future<Output = Result<Rate, Reason>> + Send;
}

/// A rate's answer. The window slides: the uses counted are this fixed
/// window's and the previous one's, weighted by how much of the previous
/// one the last `window_secs` still cover. So a burst at a window's edge
/// cannot have twice the limit, and no per-use timestamps are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Taken.
    Taken,
    /// The rate is spent; the next use may come in this many seconds
    /// (when the current window rolls over, at the latest).
    Spent {
        /// Seconds until trying again can succeed.
        retry_after_secs: i64,
    },
}

/// Whether one more use fits: `previous` uses in the window before this
/// one, of which the part `elapsed` seconds into this window still counts,
/// and `current` in this one. Integer arithmetic, mirrored by the Redis
/// script. A window is at least one second long.
pub fn rate_allows(previous: u64, current: u64, limit: u64, window_secs: i64, elapsed: i64) -> bool {
    let window = u128::from(window_secs.max(1).unsigned_abs());
    let remaining = window.saturating_sub(u128::from(elapsed.clamp(0, window_secs.max(1)).unsigned_abs()));
    u128::from(previous) * remaining + u128::from(current) * window < u128::from(limit) * window
}

/// The fixed window `now` falls in, and how far into it `now` is.
pub fn rate_window(window_secs: i64, now: UnixTime) -> (i64, i64) {
    let window = window_secs.max(1);
    (now.div_euclid(window), now.rem_euclid(window))
}

/// The configured backend.
#[derive(Debug, Clone)]
pub enum Ledger {
    /// In-process.
    Memory(MemoryLedger),
    /// Redis.
    Redis(RedisLedger),
}

impl LedgerBackend for Ledger {
    async fn register(&self, registration: &Registration) -> Result<Registered, Reason> {
        match self {
            Ledger::Memory(l) => l.register(registration).await,
            Ledger::Redis(l) => l.register(registration).await,
        }
    }

    async fn consume(&self, grant_id: &str, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        match self {
            Ledger::Memory(l) => l.consume(grant_id, op, now).await,
            Ledger::Redis(l) => l.consume(grant_id, op, now).await,
        }
    }

    async fn revoke(&self, scope: &RevokeScope) -> Result<u64, Reason> {
        match self {
            Ledger::Memory(l) => l.revoke(scope).await,
            Ledger::Redis(l) => l.revoke(scope).await,
        }
    }

    async fn bump_lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        match self {
            Ledger::Memory(l) => l.bump_lease_generation(grant_id).await,
            Ledger::Redis(l) => l.bump_lease_generation(grant_id).await,
        }
    }

    async fn get(&self, grant_id: &str) -> Result<Option<GrantRecord>, Reason> {
        match self {
            Ledger::Memory(l) => l.get(grant_id).await,
            Ledger::Redis(l) => l.get(grant_id).await,
        }
    }

    async fn lease_generation(&self, grant_id: &str) -> Result<u64, Reason> {
        match self {
            Ledger::Memory(l) => l.lease_generation(grant_id).await,
            Ledger::Redis(l) => l.lease_generation(grant_id).await,
        }
    }

    async fn take_rate(
        &self,
        key: &str,
        limit: u64,
        window_secs: i64,
        now: UnixTime,
    ) -> Result<Rate, Reason> {
        match self {
            Ledger::Memory(l) => l.take_rate(key, limit, window_secs, now).await,
            Ledger::Redis(l) => l.take_rate(key, limit, window_secs, now).await,
        }
    }
}

impl Ledger {
    /// Whether the backend can keep what it is told: the in-process one
    /// always; Redis only under `maxmemory-policy noeviction`
    /// (`ledger_eviction_unsafe`; `ledger_unavailable` if it cannot say).
    pub async fn check_retention(&self) -> Result<(), Reason> {
        match self {
            Ledger::Memory(_) => Ok(()),
            Ledger::Redis(l) => l.check_eviction().await,
        }
    }
}

/// Spends `op` under `CODEAPI_EGRESS_LEDGER_REQUIRED`: with the ledger
/// required (the default) every ledger refusal stands; without it, a grant
/// the ledger has no record of, or a ledger that cannot answer, passes
/// uncounted (`Ok(None)`). Every caller that spends goes through here, so the
/// rule lives in one place.
pub async fn spend(
    ledger: &impl LedgerBackend,
    grant_id: &str,
    op: &Operation,
    now: UnixTime,
    required: bool,
) -> Result<Option<Remaining>, Reason> {
    match ledger.consume(grant_id, op, now).await {
        Ok(remaining) => Ok(Some(remaining)),
        Err(Reason::GrantUnknown | Reason::LedgerUnavailable) if !required => {
            tracing::warn!("operation allowed without a ledger record (ledger not required)");
            Ok(None)
        }
        Err(reason) => Err(reason),
    }
}

/// The kind a ledger refusal is recorded under: spent budgets are
/// `budget_exhausted`, everything else `grant_refused`.
pub fn refusal_kind(reason: Reason) -> RefusalKind {
    match reason {
        Reason::BudgetRequestsExhausted
        | Reason::BudgetUploadBytesExhausted
        | Reason::BudgetOutputFilesExhausted
        | Reason::BudgetEgressBytesExhausted
        | Reason::BudgetToolCallsExhausted => RefusalKind::BudgetExhausted,
        _ => RefusalKind::GrantRefused,
    }
}
