//! gatehouse's durable state behind one interface, on SQLite (the embedded
//! default: one file in the data directory, WAL mode) or PostgreSQL
//! (`GATEHOUSE_DATABASE_URL=postgres://...`, for several nodes).
//!
//! What lives here: tenants and their versioned settings (egress policy
//! versions, the dependency gate mode, the kill switch), runs and their
//! lifecycle, run events and refusals, and the hash-chained audit log.
//!
//! Both backends run the very same operations: `ops.rs` (the helpers they
//! share) and the `*_ops.rs` files beside it (the operations, by concern)
//! are written once against a `Db` type alias and compiled twice, once per
//! backend, with the few dialect differences behind [`Dialect`]. One
//! conformance suite (`tests/it`) runs against both.
//!
//! Architecture invariants:
//! - failure is an error with a stable code, never a default: a store that
//!   cannot answer is [`StoreError::Unavailable`], and callers refuse;
//! - every change to a tenant's settings bumps one settings version under a
//!   row lock, so versions commit in order and a cache that has seen version
//!   `v` has seen every change up to `v`;
//! - audit entries are appended in the transaction of the change they
//!   describe, under the same lock as the chain's head, so several nodes on
//!   one PostgreSQL keep one unbroken chain;
//! - nothing here stores a secret in the clear: rows hold ids, codes,
//!   hashes and policy documents (which are not secret), and credentials
//!   only as sealed to the gateway's key, which the store never holds.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod audit;
mod error;
pub mod files;
pub mod lease;
mod model;
pub mod proposals;

use std::str::FromStr as _;
use std::time::Duration;

use gatehouse_core::UnixTime;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::{mpsc, oneshot};

pub use audit::{AuditEntry, AuditRecord, Broken, Checkpoint, GENESIS_HASH};
pub use error::StoreError;
pub use model::*;

/// The most event rows one page of refusals walks: past it a page ends
/// early, with a cursor where the walk stopped (see [`Store::refusals`]).
pub const REFUSAL_SCAN_ROWS: i64 = 10_000;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// Which SQL the backend speaks, where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3 (bundled).
    Sqlite,
    /// PostgreSQL 12 or newer.
    Postgres,
}

/// Connection settings.
#[derive(Clone)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://...`. May carry a password: never logged.
    pub url: String,
    /// Upper bound on one store operation, waiting for a connection included.
    pub op_timeout: Duration,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig").field("op_timeout", &self.op_timeout).finish_non_exhaustive()
    }
}

impl StoreConfig {
    /// `url` with a 5 s bound per operation.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), op_timeout: Duration::from_secs(5) }
    }

    /// The SQLite file at `path` (created if missing), any file: tests,
    /// benches and tools name their own.
    ///
    /// Not the embedded default: which file in the data directory that is
    /// belongs to the data directory's layout, which configuration owns, and
    /// `gatehouse_config::default_store_url` is the one builder of its URL,
    /// handed to [`StoreConfig::new`]. The store does not depend on
    /// configuration (nor it on the store), so it does not name that file.
    pub fn sqlite_file(path: &std::path::Path) -> Self {
        Self::new(format!("sqlite://{}", path.display()))
    }
}

#[derive(Clone)]
enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The durable store. Cheap to clone (a connection pool and a channel).
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    op_timeout: Duration,
    new_runs: mpsc::Sender<PendingRun>,
}

/// A run waiting for the next batch (see [`Store::create_run`]).
struct PendingRun {
    run: NewRun,
    actor: String,
    reply: oneshot::Sender<Result<Run, StoreError>>,
}

/// The most runs one creation transaction records.
const MAX_RUN_BATCH: usize = 64;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dialect", &self.dialect()).finish_non_exhaustive()
    }
}

/// Where the database's schema stands against this binary's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration this binary knows is applied, and no other.
    Current,
    /// These versions are still to apply.
    Behind(Vec<i64>),
    /// The database has migrations this binary does not know: it was
    /// migrated by a newer gatehouse. Refuse to run against it.
    Newer(Vec<i64>),
}

mod sqlite {
    //! The operations, compiled for SQLite.
    #![allow(clippy::too_many_arguments)]
    use super::*;
    type Db = sqlx::Sqlite;
    const DIALECT: Dialect = Dialect::Sqlite;
    include!("ops.rs");
    include!("tenant_ops.rs");
    include!("run_ops.rs");
    include!("event_ops.rs");
    include!("audit_ops.rs");
    include!("scan_ops.rs");
    include!("lease_ops.rs");
    include!("admin_ops.rs");
    include!("file_ops.rs");
    include!("proposal_ops.rs");
    include!("token_ops.rs");
}

mod postgres {
    //! The operations, compiled for PostgreSQL.
    #![allow(clippy::too_many_arguments)]
    use super::*;
    type Db = sqlx::Postgres;
    const DIALECT: Dialect = Dialect::Postgres;
    include!("ops.rs");
    include!("tenant_ops.rs");
    include!("run_ops.rs");
    include!("event_ops.rs");
    include!("audit_ops.rs");
    include!("scan_ops.rs");
    include!("lease_ops.rs");
    include!("admin_ops.rs");
    include!("file_ops.rs");
    include!("proposal_ops.rs");
    include!("token_ops.rs");
}

/// Runs `$op(pool, args...)` on whichever backend the store has, under the
/// operation timeout.
macro_rules! dispatch {
    ($self:ident . $op:ident ( $($arg:expr),* )) => {
        $self.bounded(async {
            match &$self.backend {
                Backend::Sqlite(pool) => sqlite::$op(pool, $($arg),*).await,
                Backend::Postgres(pool) => postgres::$op(pool, $($arg),*).await,
            }
        })
        .await
    };
}

impl Store {
    /// Connects (lazily for PostgreSQL: a server that is down makes
    /// operations fail with `store_unavailable`, not this call). A SQLite
    /// file is created if missing, in WAL mode.
    pub async fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let url = config.url.trim();
        let backend = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(|_| StoreError::InvalidUrl)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(config.op_timeout)
                .foreign_keys(true);
            let pool = SqlitePoolOptions::new()
                .max_connections(8)
                .acquire_timeout(config.op_timeout)
                .connect_with(options)
                .await
                .map_err(StoreError::from_sqlx)?;
            Backend::Sqlite(pool)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url).map_err(|_| StoreError::InvalidUrl)?;
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(config.op_timeout)
                .connect_lazy_with(options);
            Backend::Postgres(pool)
        } else {
            return Err(StoreError::InvalidUrl);
        };
        let (new_runs, pending) = mpsc::channel(MAX_RUN_BATCH * 16);
        tokio::spawn(record_runs_in_batches(backend.clone(), config.op_timeout, pending));
        Ok(Self { backend, op_timeout: config.op_timeout, new_runs })
    }

    /// The backend's dialect.
    pub fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    fn migrator(&self) -> &'static Migrator {
        match self.backend {
            Backend::Sqlite(_) => &SQLITE_MIGRATIONS,
            Backend::Postgres(_) => &POSTGRES_MIGRATIONS,
        }
    }

    async fn bounded<T>(&self, fut: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!("store unavailable: an operation timed out");
                Err(StoreError::Unavailable)
            }
        }
    }

    /// Where the schema stands. An empty database is `Behind` every migration.
    pub async fn schema_state(&self) -> Result<SchemaState, StoreError> {
        let known: Vec<i64> = self.migrator().iter().map(|m| m.version).collect();
        let applied = dispatch!(self.applied_migrations())?;
        let newer: Vec<i64> = applied.iter().copied().filter(|v| !known.contains(v)).collect();
        if !newer.is_empty() {
            return Ok(SchemaState::Newer(newer));
        }
        let behind: Vec<i64> = known.into_iter().filter(|v| !applied.contains(v)).collect();
        Ok(if behind.is_empty() { SchemaState::Current } else { SchemaState::Behind(behind) })
    }

    /// Applies every pending migration, each in its own transaction (an
    /// interrupted migration leaves the schema as it was before it). Refuses
    /// a database whose schema is newer than this binary. Returns the
    /// versions applied.
    pub async fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        let pending = match self.schema_state().await? {
            SchemaState::Newer(v) => return Err(StoreError::SchemaNewer(v)),
            SchemaState::Current => return Ok(Vec::new()),
            SchemaState::Behind(v) => v,
        };
        let run = async {
            match &self.backend {
                Backend::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await,
                Backend::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await,
            }
        };
        // Migrations may take longer than one operation; bound them generously.
        match tokio::time::timeout(self.op_timeout * 12, run).await {
            Ok(Ok(())) => Ok(pending),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "migration failed");
                Err(StoreError::MigrationFailed)
            }
            Err(_) => Err(StoreError::Unavailable),
        }
    }

    /// Fails unless the schema is exactly this binary's.
    pub async fn require_current_schema(&self) -> Result<(), StoreError> {
        match self.schema_state().await? {
            SchemaState::Current => Ok(()),
            SchemaState::Newer(v) => Err(StoreError::SchemaNewer(v)),
            SchemaState::Behind(_) => Err(StoreError::SchemaBehind),
        }
    }

    /// Answers when the database does (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self.ping())
    }

    // ---- tenants and their settings ----

    /// The settings version: it grows with every change to any tenant's settings.
    pub async fn settings_version(&self) -> Result<i64, StoreError> {
        dispatch!(self.settings_version())
    }

    /// Every tenant whose settings changed after `version`, with its current
    /// settings, and the version they are current at.
    pub async fn settings_since(&self, version: i64) -> Result<(i64, Vec<TenantSettings>), StoreError> {
        dispatch!(self.settings_since(version))
    }

    /// One tenant's settings (`None`: never configured, so the defaults hold).
    pub async fn tenant(&self, tenant_id: &str) -> Result<Option<TenantSettings>, StoreError> {
        dispatch!(self.tenant(tenant_id))
    }

    /// Stores a new version of a tenant's egress policy (the document as
    /// given, already validated by the caller) and audits it.
    pub async fn set_policy(
        &self,
        tenant_id: &str,
        document: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<PolicyVersion, StoreError> {
        dispatch!(self.set_policy(tenant_id, document, actor, now, None))
    }

    /// [`Store::set_policy`], only if the tenant's current policy is still
    /// `expected_version` (0: it never had one); otherwise `conflict`, and
    /// nothing is stored. A person editing a policy someone else changed
    /// since they loaded it is told so, never silently overwrites it.
    pub async fn set_policy_if_version(
        &self,
        tenant_id: &str,
        document: &str,
        actor: &str,
        now: UnixTime,
        expected_version: i64,
    ) -> Result<PolicyVersion, StoreError> {
        dispatch!(self.set_policy(tenant_id, document, actor, now, Some(expected_version)))
    }

    /// The tenant's current policy, if it ever had one (`None`: never, so
    /// the default, `open`, holds). A tenant with policy versions whose
    /// current one does not read (see [`TenantSettings::policy_missing`])
    /// is `policy_unreadable`.
    pub async fn current_policy(&self, tenant_id: &str) -> Result<Option<PolicyVersion>, StoreError> {
        dispatch!(self.current_policy(tenant_id))
    }

    /// Stores a new declaration of a tenant's MCP servers (the document as
    /// given, already validated by the caller) and audits it
    /// (`mcp_servers.set`).
    pub async fn set_mcp_servers(
        &self,
        tenant_id: &str,
        document: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<PolicyVersion, StoreError> {
        dispatch!(self.set_mcp_servers(tenant_id, document, actor, now))
    }

    /// Every version of a tenant's policy, newest first.
    pub async fn policy_history(
        &self,
        tenant_id: &str,
        page: &PageRequest,
    ) -> Result<Page<PolicyVersion>, StoreError> {
        dispatch!(self.policy_history(tenant_id, page))
    }

    /// Sets the dependency gate mode (`off`, `high`, `critical`) and audits it.
    pub async fn set_gate_mode(
        &self,
        tenant_id: &str,
        mode: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<(), StoreError> {
        dispatch!(self.set_gate_mode(tenant_id, mode, actor, now))
    }

    /// Engages or releases a tenant's kill switch. Engaging kills every live
    /// run of the tenant in the same transaction and returns them; while it
    /// is engaged, [`Store::create_run`] refuses.
    pub async fn set_kill_switch(
        &self,
        tenant_id: &str,
        engaged: bool,
        reason: Option<&str>,
        actor: &str,
        now: UnixTime,
    ) -> Result<Ended, StoreError> {
        dispatch!(self.set_kill_switch(tenant_id, engaged, reason, actor, now))
    }

    // ---- the settings page's sessions ----

    /// Records a person's new session (by its token's SHA-256, bound to the
    /// password hash in force by `password_binding`) and audits the
    /// sign-in; ended sessions are swept on the way.
    pub async fn create_admin_session(
        &self,
        token_sha256: &str,
        password_binding: &str,
        person: &str,
        now: UnixTime,
        expires_at: UnixTime,
    ) -> Result<(), StoreError> {
        dispatch!(self.create_admin_session(token_sha256, password_binding, person, now, expires_at))
    }

    /// The live session with this token hash: before its absolute end, seen
    /// within `idle_secs`, and bound to the password hash `password_binding`
    /// binds to (one bound to another has ended: it is deleted, its end
    /// audited as `admin.session_ended`). Keeps an active session's idle
    /// clock fresh.
    pub async fn admin_session(
        &self,
        token_sha256: &str,
        password_binding: &str,
        now: UnixTime,
        idle_secs: i64,
    ) -> Result<Option<AdminSession>, StoreError> {
        dispatch!(self.admin_session(token_sha256, password_binding, now, idle_secs))
    }

    /// Ends every session of the settings page (sign out everywhere) and
    /// audits it under `actor` as `admin.sign_out_everywhere`, with how many
    /// live sessions (idle limit `idle_secs`) it ended; returns that number.
    pub async fn end_all_admin_sessions(
        &self,
        actor: &str,
        now: UnixTime,
        idle_secs: i64,
    ) -> Result<u64, StoreError> {
        dispatch!(self.end_all_admin_sessions(actor, now, idle_secs))
    }

    /// Ends a session and audits the sign-out; `false` if there was none.
    pub async fn end_admin_session(&self, token_sha256: &str, now: UnixTime) -> Result<bool, StoreError> {
        dispatch!(self.end_admin_session(token_sha256, now))
    }

    // ---- runs ----

    /// Records a new live run, unless its tenant's kill switch is engaged
    /// (`tenant_kill_switch`) or the id is taken (`conflict`).
    ///
    /// Every creation extends the one audit chain under the control lock,
    /// so creations cannot run side by side; instead, the runs that arrive
    /// while one transaction commits are recorded together in the next
    /// (group commit), by one task per store. A caller that gave up
    /// waiting is dropped from the batch, so a timed-out creation is
    /// never recorded later behind its caller's back.
    pub async fn create_run(&self, run: &NewRun, actor: &str) -> Result<Run, StoreError> {
        self.bounded(async {
            let (reply, answer) = oneshot::channel();
            let pending = PendingRun { run: run.clone(), actor: actor.to_owned(), reply };
            self.new_runs.send(pending).await.map_err(|_| StoreError::Unavailable)?;
            answer.await.map_err(|_| StoreError::Unavailable)?
        })
        .await
    }

    /// One run.
    pub async fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        dispatch!(self.run(run_id))
    }

    /// Runs, newest first, narrowed by tenant and status.
    pub async fn runs(
        &self,
        tenant_id: Option<&str>,
        status: Option<RunStatus>,
        page: &PageRequest,
    ) -> Result<Page<Run>, StoreError> {
        dispatch!(self.runs(tenant_id, status, page))
    }

    /// Records a heartbeat of a live run that has neither missed its
    /// heartbeat deadline nor outlived its lifetime, and renews its live
    /// leases (returns how many). Anything else is `run_not_live` (or
    /// `not_found`).
    pub async fn heartbeat(
        &self,
        run_id: &str,
        now: UnixTime,
        heartbeat_timeout_secs: i64,
    ) -> Result<(Run, u64), StoreError> {
        dispatch!(self.heartbeat(run_id, now, heartbeat_timeout_secs))
    }

    /// Moves a live run to `status` (ended, cancelled, killed) and revokes
    /// its leases. Returns the run and, if this call changed it, how many
    /// leases it revoked: a run that was no longer live is returned
    /// unchanged with `None` (ending twice is not an error).
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<(Run, Option<u64>), StoreError> {
        dispatch!(self.finish_run(run_id, status, reason, actor, now))
    }

    /// Expires every live run that missed its heartbeat deadline or outlived
    /// its lifetime, and returns them. Each run expires once, on whichever
    /// node gets there first.
    pub async fn expire_runs(&self, now: UnixTime, heartbeat_timeout_secs: i64) -> Result<Ended, StoreError> {
        dispatch!(self.expire_runs(now, heartbeat_timeout_secs, None))
    }

    /// Live runs past their heartbeat deadline or lifetime (at most
    /// `limit`, oldest first), still live: the sweep revokes their grants
    /// in the ledger, then [`expire_revoked_runs`](Self::expire_revoked_runs).
    pub async fn runs_to_expire(
        &self,
        now: UnixTime,
        heartbeat_timeout_secs: i64,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        dispatch!(self.runs_to_expire(now, heartbeat_timeout_secs, limit))
    }

    /// Expires those of `run_ids` that are still live and past their
    /// deadline (their grants revoked in the ledger first, so a run is
    /// never recorded expired while its grant lives), and returns them.
    /// Each run expires once, on whichever node gets there first.
    pub async fn expire_revoked_runs(
        &self,
        now: UnixTime,
        heartbeat_timeout_secs: i64,
        run_ids: &[String],
    ) -> Result<Ended, StoreError> {
        dispatch!(self.expire_runs(now, heartbeat_timeout_secs, Some(run_ids)))
    }

    /// Kills every live run of every tenant (emergency revoke) and returns them.
    pub async fn kill_all_runs(&self, reason: &str, actor: &str, now: UnixTime) -> Result<Ended, StoreError> {
        dispatch!(self.kill_all_runs(reason, actor, now))
    }

    // ---- credentials and leases ----

    /// Records a credential (sealed), with its audit entry; `conflict` when
    /// the id or the tenant's name is taken.
    pub async fn create_credential(
        &self,
        credential: &Credential,
        actor: &str,
    ) -> Result<Credential, StoreError> {
        dispatch!(self.create_credential(credential, actor))
    }

    /// One credential of a tenant (an id of another tenant is not found).
    pub async fn credential(
        &self,
        tenant_id: &str,
        credential_id: &str,
    ) -> Result<Option<Credential>, StoreError> {
        dispatch!(self.credential(tenant_id, credential_id))
    }

    /// Credentials, newest first, of one tenant or all.
    pub async fn credentials(
        &self,
        tenant_id: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<Credential>, StoreError> {
        dispatch!(self.credentials(tenant_id, page))
    }

    /// Applies new seals (rotations and rewraps) in one transaction, each
    /// audited; returns the credentials changed. A rotation of a row
    /// rotated meanwhile is `conflict`; a rewrap of one is skipped.
    pub async fn reseal_credentials(
        &self,
        tenant_id: Option<&str>,
        resealed: &[Resealed],
        actor: &str,
        now: UnixTime,
    ) -> Result<Vec<Credential>, StoreError> {
        dispatch!(self.reseal_credentials(tenant_id, resealed, actor, now))
    }

    /// Deletes a credential and revokes its live leases (returned).
    pub async fn delete_credential(
        &self,
        tenant_id: &str,
        credential_id: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<Vec<Lease>, StoreError> {
        dispatch!(self.delete_credential(tenant_id, credential_id, actor, now))
    }

    /// Grants a lease by the rules of [`lease::may_grant`] (refusals are
    /// [`StoreError::Refused`]); returns it with its run.
    pub async fn grant_lease(
        &self,
        lease: &NewLease,
        actor: &str,
        now: UnixTime,
        heartbeat_timeout_secs: i64,
    ) -> Result<(Lease, Run), StoreError> {
        dispatch!(self.grant_lease(lease, actor, now, heartbeat_timeout_secs))
    }

    /// Revokes one lease and marks its run, which never gets another;
    /// `None` when it was not live.
    pub async fn revoke_lease(
        &self,
        lease_id: &str,
        reason: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<Option<Lease>, StoreError> {
        dispatch!(self.revoke_lease(lease_id, reason, actor, now))
    }

    /// One lease, its status as of `now`.
    pub async fn lease(&self, lease_id: &str, now: UnixTime) -> Result<Option<Lease>, StoreError> {
        dispatch!(self.lease(lease_id, now))
    }

    /// Leases, newest first.
    pub async fn leases(
        &self,
        filter: &LeaseFilter,
        page: &PageRequest,
        now: UnixTime,
    ) -> Result<Page<Lease>, StoreError> {
        dispatch!(self.leases(filter, page, now))
    }

    /// Every lease of a run with its credential, oldest first.
    pub async fn door_leases(&self, run_id: &str, now: UnixTime) -> Result<Vec<DoorLease>, StoreError> {
        dispatch!(self.door_leases(run_id, now))
    }

    // ---- events and refusals ----

    /// Appends events in one transaction, in order. Refusals among them are
    /// audited too. Returns their sequence numbers.
    pub async fn append_events(&self, events: &[NewEvent]) -> Result<Vec<i64>, StoreError> {
        self.record_events(events, &[]).await
    }

    /// Appends events and adds refusal counts (see [`RefusalCount`]) in
    /// one transaction. Refusals among the events are audited; counts are
    /// not. Returns the events' sequence numbers.
    pub async fn record_events(
        &self,
        events: &[NewEvent],
        counts: &[RefusalCount],
    ) -> Result<Vec<i64>, StoreError> {
        if events.is_empty() && counts.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self.append_events(events, counts))
    }

    /// Refusals, newest first.
    pub async fn refusals(
        &self,
        filter: &RefusalFilter,
        page: &PageRequest,
    ) -> Result<Page<Event>, StoreError> {
        dispatch!(self.refusals(filter, page))
    }

    /// One run's events after `after`, oldest first.
    pub async fn run_events(&self, run_id: &str, after: i64, limit: u32) -> Result<Vec<Event>, StoreError> {
        dispatch!(self.run_events(run_id, after, limit))
    }

    /// Deletes events older than `before`. The audit log is never pruned.
    pub async fn prune_events(&self, before: UnixTime) -> Result<u64, StoreError> {
        dispatch!(self.prune_events(before))
    }

    // ---- dependency scans ----

    /// Records a submission as `pending` with its audit entry
    /// (`dependency_scan.create`), taking its submission number in the same
    /// transaction: the order in which a pull request's scans count. The
    /// number is returned; it is taken before the scan is checked, so of two
    /// submissions the later one counts whichever finishes first.
    pub async fn submit_scan(&self, scan: &NewScan, actor: &str) -> Result<i64, StoreError> {
        dispatch!(self.submit_scan(scan, actor))
    }

    /// Records a pending scan's outcome with its audit entry
    /// (`dependency_scan.finish`). `false` (and nothing written) when the
    /// scan is not pending: unknown, already finished, or marked errored by
    /// [`Store::fail_stale_scans`] meanwhile.
    pub async fn finish_scan(
        &self,
        scan_id: &str,
        outcome: &ScanOutcome,
        at: UnixTime,
        actor: &str,
    ) -> Result<bool, StoreError> {
        dispatch!(self.finish_scan(scan_id, outcome, at, actor))
    }

    /// Marks every scan still pending that was submitted before `before` as
    /// errored (`status: "error"`, an empty report), each with its audit
    /// entry (`dependency_scan.finish`, `"interrupted": true`): its node
    /// stopped before finishing it. Returns how many.
    pub async fn fail_stale_scans(
        &self,
        before: UnixTime,
        at: UnixTime,
        actor: &str,
    ) -> Result<u64, StoreError> {
        dispatch!(self.fail_stale_scans(before, at, actor))
    }

    /// One of a tenant's scans, by id.
    pub async fn scan(&self, tenant_id: &str, scan_id: &str) -> Result<Option<DependencyScan>, StoreError> {
        dispatch!(self.scan(tenant_id, scan_id))
    }

    /// The newest submission (pending, or finished) for a pull request's head commit.
    pub async fn newest_scan_of_head(
        &self,
        tenant_id: &str,
        repository: &str,
        pull_request: i64,
        head_sha: &str,
    ) -> Result<Option<DependencyScan>, StoreError> {
        dispatch!(self.newest_scan_of_head(tenant_id, repository, pull_request, head_sha))
    }

    /// A tenant's scans (of one repository, one pull request, when given), last submitted first.
    pub async fn scans(
        &self,
        tenant_id: &str,
        repository: Option<&str>,
        pull_request: Option<i64>,
        page: &PageRequest,
    ) -> Result<Page<DependencyScan>, StoreError> {
        dispatch!(self.scans(tenant_id, repository, pull_request, page))
    }

    // ---- files ----

    /// Records a file whose object is complete, and audits it, in place of
    /// its upload's row ([`Store::begin_upload`]; gone, the sweeper took
    /// the upload: `upload_expired`, nothing recorded). A session's
    /// file replaces the file of the same name in that session: the replaced
    /// record is returned, and its object is the caller's to delete.
    pub async fn record_file(
        &self,
        file: &files::StoredFile,
        actor: &str,
    ) -> Result<Option<files::StoredFile>, StoreError> {
        dispatch!(self.record_file(file, actor))
    }

    /// The file `file_id` of `tenant` (none: a deployment without tenants).
    /// Another tenant's file is `None`, like a file that does not exist.
    pub async fn file(
        &self,
        tenant: Option<&str>,
        file_id: &str,
    ) -> Result<Option<files::StoredFile>, StoreError> {
        dispatch!(self.file(tenant.unwrap_or(""), file_id))
    }

    /// The files of one user's session in `namespace` (the session key of
    /// the runs that write and read it: a conversation's runs have their
    /// own), by name; reading them touches the session.
    pub async fn session_files(
        &self,
        tenant: Option<&str>,
        user_id: &str,
        namespace: &str,
        session_id: &str,
        now: UnixTime,
    ) -> Result<Vec<files::StoredFile>, StoreError> {
        dispatch!(self.session_files(tenant.unwrap_or(""), user_id, namespace, session_id, now))
    }

    /// Records a run's ask for a rule, unless the same ask is recorded (see
    /// `proposals`): the proposal and whether it is new.
    pub async fn propose(
        &self,
        new: &proposals::NewProposal,
        limits: proposals::ProposalLimits,
    ) -> Result<(proposals::Proposal, bool), StoreError> {
        dispatch!(self.propose(new, limits))
    }

    /// One proposal.
    pub async fn proposal(&self, proposal_id: &str) -> Result<Option<proposals::Proposal>, StoreError> {
        dispatch!(self.proposal(proposal_id))
    }

    /// A tenant's proposals, newest first, by status at `now` (`pending`,
    /// `expired`, `approved`, `denied`; none: all).
    pub async fn proposals(
        &self,
        tenant_id: &str,
        status: Option<&str>,
        now: UnixTime,
        page: &PageRequest,
    ) -> Result<Page<proposals::Proposal>, StoreError> {
        dispatch!(self.proposals(tenant_id, status, now, page))
    }

    /// Decides a pending proposal, audited; approved for its run, the
    /// tenant's settings version moves (the replicas take the rule in).
    pub async fn decide_proposal(
        &self,
        proposal_id: &str,
        approve: bool,
        scope: Option<&str>,
        actor: &str,
        now: UnixTime,
    ) -> Result<proposals::Proposal, StoreError> {
        dispatch!(self.decide_proposal(proposal_id, approve, scope, actor, now))
    }

    /// The rules approved for their run alone, of every live run: (tenant,
    /// run, rule as a policy entry's JSON).
    pub async fn run_rules(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        dispatch!(self.run_rules())
    }

    /// What run `run_id` left: the files it wrote and its uploads refused
    /// as content, `limit` of each at most.
    pub async fn run_artifacts(&self, run_id: &str, limit: i64) -> Result<files::RunArtifacts, StoreError> {
        dispatch!(self.run_artifacts(run_id, limit))
    }

    /// Deletes a file's record and audits it; returns it, its object being
    /// the caller's to delete.
    pub async fn delete_file(
        &self,
        tenant: Option<&str>,
        file_id: &str,
        actor: &str,
        now: UnixTime,
    ) -> Result<Option<files::StoredFile>, StoreError> {
        dispatch!(self.delete_file(tenant.unwrap_or(""), file_id, actor, now))
    }

    /// Takes (or keeps) the maintenance task `name` for `holder` until
    /// `expires_at`: `true` when this holder now has it, `false` while
    /// another holder's claim is in force. One node of a cluster at a time
    /// does the task; a holder that stops renewing is replaced once its
    /// claim expires.
    pub async fn claim_maintenance(
        &self,
        name: &str,
        holder: &str,
        now: UnixTime,
        expires_at: UnixTime,
    ) -> Result<bool, StoreError> {
        dispatch!(self.claim_maintenance(name, holder, now, expires_at))
    }

    /// The tokens minted from `credential_id` that every node shares, if
    /// any were ever claimed.
    pub async fn minted_tokens(&self, credential_id: &str) -> Result<Option<MintedTokens>, StoreError> {
        dispatch!(self.minted_tokens(credential_id))
    }

    /// Claims the refresh of `credential_id`'s tokens for `holder` until
    /// `until`: the row as it stands, or `None` while another holder's
    /// claim is in force at `now`. One node at a time refreshes, so no two
    /// ever present one refresh token.
    pub async fn claim_token_refresh(
        &self,
        credential_id: &str,
        holder: &str,
        now: UnixTime,
        until: UnixTime,
    ) -> Result<Option<MintedTokens>, StoreError> {
        dispatch!(self.claim_token_refresh(credential_id, holder, now, until))
    }

    /// Writes a refresh's tokens (`tokens.rotation` is the rotation they
    /// replace) and ends `holder`'s claim: `false`, and nothing written,
    /// when the claim is no longer `holder`'s or the row moved on.
    pub async fn finish_token_refresh(
        &self,
        holder: &str,
        tokens: &MintedTokens,
        now: UnixTime,
    ) -> Result<bool, StoreError> {
        dispatch!(self.finish_token_refresh(holder, tokens, now))
    }

    /// Ends `holder`'s claim on `credential_id` without new tokens.
    pub async fn release_token_refresh(&self, credential_id: &str, holder: &str) -> Result<(), StoreError> {
        dispatch!(self.release_token_refresh(credential_id, holder))
    }

    /// Up to `limit` file sessions untouched since before `cutoff` whose
    /// user has no live run, oldest first.
    pub async fn stale_file_sessions(
        &self,
        cutoff: UnixTime,
        limit: i64,
    ) -> Result<Vec<files::FileSession>, StoreError> {
        dispatch!(self.stale_file_sessions(cutoff, limit))
    }

    /// Deletes a stale session's records if it is still stale and unheld,
    /// and audits it (`file_session.swept`); returns the files whose
    /// objects the caller deletes next.
    pub async fn sweep_file_session(
        &self,
        session: &files::FileSession,
        cutoff: UnixTime,
        actor: &str,
        now: UnixTime,
    ) -> Result<Vec<files::StoredFile>, StoreError> {
        dispatch!(self.sweep_file_session(session, cutoff, actor, now))
    }

    /// Records an upload before its object is begun. Its commit
    /// ([`Store::record_file`]) replaces this row with the file's record;
    /// until then the sweeper keeps the upload's object and leftovers while
    /// the row is younger than its bound.
    pub async fn begin_upload(&self, upload: &files::FileUpload) -> Result<(), StoreError> {
        dispatch!(self.begin_upload(upload))
    }

    /// After a commit that failed or may have failed (the store errored or
    /// timed out: it may have committed all the same): makes sure no
    /// commit can follow, then answers whether the record is there. Only
    /// [`files::UploadFate::Abandoned`] lets the caller delete the object;
    /// an error leaves it to the sweeper, which judges by the record.
    pub async fn abandon_upload(&self, file_id: &str) -> Result<files::UploadFate, StoreError> {
        dispatch!(self.abandon_upload(file_id))
    }

    /// Up to `limit` uploads begun before `before` that never committed,
    /// oldest first.
    pub async fn stale_uploads(
        &self,
        before: UnixTime,
        limit: i64,
    ) -> Result<Vec<files::FileUpload>, StoreError> {
        dispatch!(self.stale_uploads(before, limit))
    }

    /// Deletes an upload's row if it still began before `before`: `true`
    /// when this call did, and the upload's object and leftovers are the
    /// caller's to remove (a commit after it is refused, `upload_expired`).
    pub async fn expire_upload(&self, file_id: &str, before: UnixTime) -> Result<bool, StoreError> {
        dispatch!(self.expire_upload(file_id, before))
    }

    /// What the store says of each of `file_ids` it knows: a record, an
    /// upload begun at or after `live_since`, or an older one. Ids absent
    /// from the answer have neither. Read at one instant per batch, so an
    /// upload committing meanwhile is never seen as neither.
    pub async fn file_states(
        &self,
        file_ids: &[String],
        live_since: UnixTime,
    ) -> Result<Vec<(String, files::FileState)>, StoreError> {
        dispatch!(self.file_states(file_ids, live_since))
    }

    // ---- the audit log ----

    /// Appends audit entries for changes that have no other row here (ledger
    /// revocations, for instance).
    pub async fn audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        dispatch!(self.audit(records))
    }

    /// Entries after `after`, in order.
    pub async fn audit_entries(&self, after: i64, limit: u32) -> Result<Vec<AuditEntry>, StoreError> {
        dispatch!(self.audit_entries(after, limit))
    }

    /// The recorded head of the chain `(seq, hash)`.
    pub async fn audit_head(&self) -> Result<(i64, String), StoreError> {
        dispatch!(self.audit_head())
    }

    /// Walks the whole chain and checks it against the recorded head and
    /// against every checkpoint given: the number of entries, or the first
    /// break. See [`verify_audit_head`](Self::verify_audit_head).
    pub async fn verify_audit(
        &self,
        checkpoints: Vec<(i64, String)>,
    ) -> Result<Result<i64, Broken>, StoreError> {
        Ok(self.verify_audit_head(checkpoints).await?.map(|(seq, _)| seq))
    }

    /// Walks the chain up to the head recorded when the walk begins (an
    /// entry appended meanwhile is the next walk's, so a busy store
    /// verifies) and checks it against that head and every checkpoint
    /// given; each entry's detail must be stored in exactly the canonical
    /// form its hash covers. Answers the head it vouches for `(seq, hash)`,
    /// which is what a checkpoint signs.
    pub async fn verify_audit_head(
        &self,
        checkpoints: Vec<(i64, String)>,
    ) -> Result<Result<(i64, String), Broken>, StoreError> {
        let (head_seq, head_hash) = self.audit_head().await?;
        let mut verifier = audit::Verifier::new(checkpoints);
        let mut after = 0;
        while after < head_seq {
            let batch = dispatch!(self.audit_entries_stored(after, head_seq, 1000))?;
            let Some((last, _)) = batch.last() else { break };
            after = last.seq;
            batch.iter().for_each(|(e, stored)| verifier.push_stored(e, stored));
        }
        if let Err(broken) = verifier.finish(Some((head_seq, &head_hash))) {
            return Ok(Err(broken));
        }
        // Entries past the head are fine if appended since it was read, but
        // not past the head as it is now: an entry and the head it makes
        // commit together, so an entry counted here has its head already.
        let last_seq = dispatch!(self.audit_last_seq())?;
        let (now_seq, _) = self.audit_head().await?;
        if last_seq > now_seq {
            return Ok(Err(Broken { first_bad_seq: now_seq + 1, why: "head_mismatch" }));
        }
        Ok(Ok((head_seq, head_hash)))
    }
}

/// The task behind [`Store::create_run`]: takes whatever runs are waiting,
/// up to a batch, records them in one transaction, answers each.
async fn record_runs_in_batches(
    backend: Backend,
    op_timeout: Duration,
    mut pending: mpsc::Receiver<PendingRun>,
) {
    let mut batch = Vec::with_capacity(MAX_RUN_BATCH);
    while pending.recv_many(&mut batch, MAX_RUN_BATCH).await > 0 {
        batch.retain(|p: &PendingRun| !p.reply.is_closed());
        let runs: Vec<(&NewRun, &str)> = batch.iter().map(|p| (&p.run, p.actor.as_str())).collect();
        let results = match create_runs(&backend, op_timeout, &runs).await {
            Ok(results) => results,
            // One bad run must not fail its neighbours: retry them alone.
            Err(e) if runs.len() > 1 && e != StoreError::Unavailable => {
                let mut results = Vec::with_capacity(runs.len());
                for run in &runs {
                    let one = create_runs(&backend, op_timeout, std::slice::from_ref(run)).await;
                    results.push(one.and_then(|mut r| r.pop().unwrap_or(Err(StoreError::Corrupt))));
                }
                results
            }
            Err(e) => vec![Err(e); runs.len()],
        };
        drop(runs);
        for (p, result) in batch.drain(..).zip(results) {
            // The caller may have given up meanwhile; its run then stays
            // recorded and expires like any run without heartbeats.
            let _ = p.reply.send(result);
        }
    }
}

async fn create_runs(
    backend: &Backend,
    op_timeout: Duration,
    runs: &[(&NewRun, &str)],
) -> Result<Vec<Result<Run, StoreError>>, StoreError> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let create = async {
        match backend {
            Backend::Sqlite(pool) => sqlite::create_runs(pool, runs).await,
            Backend::Postgres(pool) => postgres::create_runs(pool, runs).await,
        }
    };
    tokio::time::timeout(op_timeout, create).await.unwrap_or(Err(StoreError::Unavailable))
}
