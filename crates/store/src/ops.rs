// The store's operations, written once and compiled per backend (see
// lib.rs): `Db` is `sqlx::Sqlite` or `sqlx::Postgres`, `DIALECT` says which.
//
// This file holds what every operation shares: the imports, the schema's
// migrations and the liveness probe, the writing transaction (`WriteTx`),
// batches in fixed sizes, a tenant's row, audit records and pages. The
// operations themselves are by concern beside it, in the same module:
// `tenant_ops.rs` (tenants' settings), `run_ops.rs` (runs),
// `event_ops.rs` (events and refusals), `audit_ops.rs` (the audit log),
// `scan_ops.rs` (dependency scans), `lease_ops.rs` (credentials and
// leases), `admin_ops.rs` (the settings page's sessions) and `file_ops.rs`
// (files).
//
// Every writing transaction begins with `begin_write`, which takes the
// control row's lock first: on PostgreSQL a row lock, on SQLite the database's
// write lock (SQLite takes it at a transaction's first write; one that reads
// first and writes later can fail to upgrade under concurrency). Audited
// changes must be serialized anyway, since they extend one chain; taking the
// same lock first everywhere also means two transactions can never wait on
// each other in opposite orders.

use sqlx::{Pool, Transaction};

use crate::audit::{AuditEntry, AuditRecord};
use crate::model::{
    AdminSession, Credential, DependencyScan, DoorLease, Ended, Event, Lease, LeaseFilter, LeaseStatus, NewEvent, NewLease,
    NewRun, NewScan, Page, PageRequest, PolicyVersion, RefusalCount, RefusalFilter, Resealed, Run, RunStatus, ScanOutcome,
    TenantSettings,
};

type Tx = Transaction<'static, Db>;

pub(crate) async fn applied_migrations(pool: &Pool<Db>) -> Result<Vec<i64>, StoreError> {
    let exists: Option<i64> = sqlx::query_scalar(match DIALECT {
        Dialect::Sqlite => "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        Dialect::Postgres => "SELECT 1::BIGINT FROM pg_tables WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations'",
    })
    .fetch_optional(pool)
    .await?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(pool)
        .await?)
}

pub(crate) async fn ping(pool: &Pool<Db>) -> Result<(), StoreError> {
    let _: i64 =
        sqlx::query_scalar("SELECT settings_version FROM control WHERE id = 1").fetch_one(pool).await?;
    Ok(())
}

/// Splits `items` into runs of a few fixed sizes (at most 256 rows, far
/// below either backend's bound-parameter limit), so every multi-row
/// statement has one of a few shapes, which each connection keeps prepared;
/// a statement per batch size would be prepared anew for almost every batch.
fn in_fixed_chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    const SIZES: [usize; 5] = [256, 64, 16, 4, 1];
    let mut rest = items;
    std::iter::from_fn(move || {
        let size = SIZES.into_iter().find(|s| *s <= rest.len())?;
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        Some(chunk)
    })
}

/// A writing transaction that holds the control row's lock. The lock
/// statement also reads the audit chain's head, entries are chained in
/// memory as they are appended, and the head is written back once, at
/// commit: an audited change costs two statements, not one per entry.
struct WriteTx {
    tx: Tx,
    audit_seq: i64,
    audit_hash: String,
    head_moved: bool,
}

/// Begins a writing transaction holding the control row's lock.
async fn begin_write(pool: &Pool<Db>) -> Result<WriteTx, StoreError> {
    let mut tx = pool.begin().await?;
    let (audit_seq, audit_hash): (i64, String) =
        sqlx::query_as("UPDATE control SET id = id WHERE id = 1 RETURNING audit_seq, audit_hash")
            .fetch_one(&mut *tx)
            .await?;
    Ok(WriteTx { tx, audit_seq, audit_hash, head_moved: false })
}

impl WriteTx {
    fn conn(&mut self) -> &mut <Db as sqlx::Database>::Connection {
        &mut self.tx
    }

    /// Bumps the settings version; returns the new one.
    async fn bump_settings(&mut self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "UPDATE control SET settings_version = settings_version + 1 WHERE id = 1 RETURNING settings_version",
        )
        .fetch_one(self.conn())
        .await?)
    }

    /// Chains `records` after the head.
    async fn append_audit(&mut self, records: &[AuditRecord]) -> Result<(), StoreError> {
        for chunk in in_fixed_chunks(records) {
            // Chained from a borrow: a batch of refusals is one record whose
            // detail lists every refusal, and copying it only to chain it
            // cost a dozen allocations per refusal.
            let mut entries = Vec::with_capacity(chunk.len());
            for record in chunk {
                let (hash, detail) = record.hash_after(self.audit_seq, &self.audit_hash);
                self.audit_seq += 1;
                let prev_hash = std::mem::replace(&mut self.audit_hash, hash.clone());
                entries.push((record, self.audit_seq, detail, prev_hash, hash));
            }
            let mut insert = sqlx::QueryBuilder::<Db>::new(
                "INSERT INTO audit_log (seq, at, actor, action, tenant_id, subject, detail, prev_hash, hash) ",
            );
            insert.push_values(&entries, |mut row, (record, seq, detail, prev_hash, hash)| {
                row.push_bind(*seq)
                    .push_bind(record.at)
                    .push_bind(record.actor.as_str())
                    .push_bind(record.action.as_str())
                    .push_bind(record.tenant_id.as_deref())
                    .push_bind(record.subject.as_str())
                    .push_bind(detail.as_str())
                    .push_bind(prev_hash.as_str())
                    .push_bind(hash.as_str());
            });
            insert.build().execute(self.conn()).await?;
            self.head_moved = true;
        }
        Ok(())
    }

    /// Writes the chain's new head, if it moved, and commits.
    async fn commit(mut self) -> Result<(), StoreError> {
        if self.head_moved {
            sqlx::query("UPDATE control SET audit_seq = $1, audit_hash = $2 WHERE id = 1")
                .bind(self.audit_seq)
                .bind(&self.audit_hash)
                .execute(self.conn())
                .await?;
        }
        self.tx.commit().await?;
        Ok(())
    }
}

/// Makes sure the tenant has a row, marking it changed at `version` (0: a
/// row created by a run, which changes no setting).
async fn touch_tenant(
    tx: &mut WriteTx,
    tenant_id: &str,
    version: i64,
    now: UnixTime,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO tenants (tenant_id, settings_version, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT (tenant_id) DO UPDATE SET settings_version = \
         CASE WHEN $2 > 0 THEN $2 ELSE tenants.settings_version END, updated_at = $3",
    )
    .bind(tenant_id)
    .bind(version)
    .bind(now)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// An audit record of `action` on `subject`, its texts owned.
fn audit_record(
    at: UnixTime,
    actor: &str,
    action: &str,
    tenant_id: Option<&str>,
    subject: &str,
    detail: serde_json::Value,
) -> AuditRecord {
    AuditRecord {
        at,
        actor: actor.to_owned(),
        action: action.to_owned(),
        tenant_id: tenant_id.map(str::to_owned),
        subject: subject.to_owned(),
        detail,
    }
}

/// A numeric cursor (a sequence number or version); none means "from the top".
fn cursor_number(page: &PageRequest) -> Result<i64, StoreError> {
    match &page.cursor {
        None => Ok(i64::MAX),
        Some(c) => c.parse().map_err(|_| StoreError::NotFound),
    }
}

/// Cuts `limit + 1` fetched items to a page; the extra one says there is more.
fn paged<T>(mut items: Vec<T>, limit: u32, key: impl Fn(&T) -> String) -> Page<T> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more { items.last().map(key) } else { None };
    Page { items, next_cursor }
}
