// The store's operations, written once and compiled per backend (see
// lib.rs): `Db` is `sqlx::Sqlite` or `sqlx::Postgres`, `DIALECT` says which.
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

pub(crate) async fn settings_version(pool: &Pool<Db>) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar("SELECT settings_version FROM control WHERE id = 1").fetch_one(pool).await?)
}

#[derive(sqlx::FromRow)]
struct TenantRow {
    tenant_id: String,
    settings_version: i64,
    policy_version: i64,
    gate_mode: String,
    kill_switch: i64,
    kill_switch_reason: Option<String>,
    document: Option<String>,
    actor: Option<String>,
    created_at: Option<i64>,
    newest_policy: Option<i64>,
}

impl TenantRow {
    fn into_settings(self) -> TenantSettings {
        // The current policy is the row the tenant names, which must be its
        // newest: versions only grow, and each change makes its own current.
        let consistent = self.policy_version > 0 && self.newest_policy == Some(self.policy_version);
        let policy = match (self.document, self.actor, self.created_at) {
            (Some(document), Some(actor), Some(created_at)) if consistent => {
                Some(PolicyVersion {
                    tenant_id: self.tenant_id.clone(),
                    version: self.policy_version,
                    document,
                    actor,
                    created_at,
                })
            }
            _ => None,
        };
        let policy_missing = policy.is_none() && (self.policy_version != 0 || self.newest_policy.is_some());
        TenantSettings {
            tenant_id: self.tenant_id,
            settings_version: self.settings_version,
            policy_missing,
            policy,
            gate_mode: self.gate_mode,
            kill_switch: self.kill_switch != 0,
            kill_switch_reason: self.kill_switch_reason,
        }
    }
}

const TENANT_SELECT: &str = "SELECT t.tenant_id, t.settings_version, t.policy_version, t.gate_mode, t.kill_switch, \
     t.kill_switch_reason, p.document, p.actor, p.created_at, \
     (SELECT MAX(v.version) FROM policy_versions v WHERE v.tenant_id = t.tenant_id) AS newest_policy \
     FROM tenants t LEFT JOIN policy_versions p ON p.tenant_id = t.tenant_id AND p.version = t.policy_version";

/// Tenants with policy versions but no tenant row (deleted by hand): each
/// is listed with the defaults and its policy missing, so it refuses.
async fn tenants_without_a_row(pool: &Pool<Db>, tenant_id: Option<&str>) -> Result<Vec<TenantSettings>, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT v.tenant_id FROM policy_versions v \
         WHERE ($1 IS NULL OR v.tenant_id = $1) \
         AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.tenant_id = v.tenant_id) ORDER BY v.tenant_id",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    Ok(ids
        .into_iter()
        .map(|tenant_id| TenantSettings {
            tenant_id,
            settings_version: 0,
            policy: None,
            policy_missing: true,
            gate_mode: "high".to_owned(),
            kill_switch: false,
            kill_switch_reason: None,
        })
        .collect())
}

pub(crate) async fn settings_since(
    pool: &Pool<Db>,
    version: i64,
) -> Result<(i64, Vec<TenantSettings>), StoreError> {
    // The version first: every change at or below it has committed, so the
    // rows read next include all of them (and perhaps newer ones, harmlessly).
    let current = settings_version(pool).await?;
    let rows: Vec<TenantRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{TENANT_SELECT} WHERE t.settings_version > $1")))
            .bind(version)
            .fetch_all(pool)
            .await?;
    let mut tenants: Vec<TenantSettings> = rows.into_iter().map(TenantRow::into_settings).collect();
    if version == 0 {
        // A whole load (a node starting) also lists tenants whose row is gone.
        tenants.extend(tenants_without_a_row(pool, None).await?);
    }
    Ok((current, tenants))
}

pub(crate) async fn tenant(pool: &Pool<Db>, tenant_id: &str) -> Result<Option<TenantSettings>, StoreError> {
    let row: Option<TenantRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("{TENANT_SELECT} WHERE t.tenant_id = $1")))
            .bind(tenant_id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(TenantRow::into_settings))
}

pub(crate) async fn set_policy(
    pool: &Pool<Db>,
    tenant_id: &str,
    document: &str,
    actor: &str,
    now: UnixTime,
    expected_version: Option<i64>,
) -> Result<PolicyVersion, StoreError> {
    let mut tx = begin_write(pool).await?;
    if let Some(expected) = expected_version {
        // Read under the control lock: no other change can land between
        // this check and the write.
        let current: Option<i64> =
            sqlx::query_scalar("SELECT policy_version FROM tenants WHERE tenant_id = $1")
                .bind(tenant_id)
                .fetch_optional(tx.conn())
                .await?;
        if current.unwrap_or(0) != expected {
            return Err(StoreError::Conflict);
        }
    }
    let settings = tx.bump_settings().await?;
    touch_tenant(&mut tx, tenant_id, settings, now).await?;
    let version: i64 = sqlx::query_scalar(
        "UPDATE tenants SET policy_version = policy_version + 1 WHERE tenant_id = $1 RETURNING policy_version",
    )
    .bind(tenant_id)
    .fetch_one(tx.conn())
    .await?;
    sqlx::query(
        "INSERT INTO policy_versions (tenant_id, version, document, actor, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(tenant_id)
    .bind(version)
    .bind(document)
    .bind(actor)
    .bind(now)
    .execute(tx.conn())
    .await?;
    let detail = serde_json::json!({"version": version, "settings_version": settings,
        "policy": serde_json::from_str::<serde_json::Value>(document).unwrap_or_default()});
    tx.append_audit(&[audit_record(now, actor, "policy.set", Some(tenant_id), tenant_id, detail)]).await?;
    tx.commit().await?;
    Ok(PolicyVersion {
        tenant_id: tenant_id.to_owned(),
        version,
        document: document.to_owned(),
        actor: actor.to_owned(),
        created_at: now,
    })
}

pub(crate) async fn current_policy(
    pool: &Pool<Db>,
    tenant_id: &str,
) -> Result<Option<PolicyVersion>, StoreError> {
    let settings = match tenant(pool, tenant_id).await? {
        Some(settings) => Some(settings),
        None => tenants_without_a_row(pool, Some(tenant_id)).await?.pop(),
    };
    match settings {
        Some(t) if t.policy_missing => Err(StoreError::Refused(gatehouse_core::Reason::PolicyUnreadable)),
        Some(t) => Ok(t.policy),
        None => Ok(None),
    }
}

pub(crate) async fn policy_history(
    pool: &Pool<Db>,
    tenant_id: &str,
    page: &PageRequest,
) -> Result<Page<PolicyVersion>, StoreError> {
    let before = cursor_number(page)?;
    let rows: Vec<(String, i64, String, String, i64)> = sqlx::query_as(
        "SELECT tenant_id, version, document, actor, created_at FROM policy_versions \
         WHERE tenant_id = $1 AND version < $2 ORDER BY version DESC LIMIT $3",
    )
    .bind(tenant_id)
    .bind(before)
    .bind(i64::from(page.limit) + 1)
    .fetch_all(pool)
    .await?;
    let items = rows
        .into_iter()
        .map(|(tenant_id, version, document, actor, created_at)| PolicyVersion {
            tenant_id,
            version,
            document,
            actor,
            created_at,
        })
        .collect();
    Ok(paged(items, page.limit, |p: &PolicyVersion| p.version.to_string()))
}

pub(crate) async fn set_gate_mode(
    pool: &Pool<Db>,
    tenant_id: &str,
    mode: &str,
    actor: &str,
    now: UnixTime,
) -> Result<(), StoreError> {
    let mut tx = begin_write(pool).await?;
    let settings = tx.bump_settings().await?;
    touch_tenant(&mut tx, tenant_id, settings, now).await?;
    sqlx::query("UPDATE tenants SET gate_mode = $2 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(mode)
        .execute(tx.conn())
        .await?;
    let detail = serde_json::json!({"mode": mode, "settings_version": settings});
    tx.append_audit(&[audit_record(now, actor, "gate.set", Some(tenant_id), tenant_id, detail)]).await?;
    tx.commit().await?;
    Ok(())
}

pub(crate) async fn set_kill_switch(
    pool: &Pool<Db>,
    tenant_id: &str,
    engaged: bool,
    reason: Option<&str>,
    actor: &str,
    now: UnixTime,
) -> Result<Ended, StoreError> {
    let mut tx = begin_write(pool).await?;
    let settings = tx.bump_settings().await?;
    touch_tenant(&mut tx, tenant_id, settings, now).await?;
    // A run being created for the tenant held the control lock and has
    // committed by now: it is among the live runs killed below.
    sqlx::query("UPDATE tenants SET kill_switch = $2, kill_switch_reason = $3 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(i64::from(engaged))
        .bind(reason)
        .execute(tx.conn())
        .await?;
    let killed = if engaged {
        finish_where(&mut tx, "tenant_id = $5", Some(tenant_id), RunStatus::Killed, "kill_switch", actor, now)
            .await?
    } else {
        Ended::default()
    };
    let action = if engaged { "kill_switch.engage" } else { "kill_switch.release" };
    let detail = serde_json::json!({"reason": reason, "runs_killed": killed.runs.len(),
        "leases_revoked": killed.leases, "settings_version": settings});
    tx.append_audit(&[audit_record(now, actor, action, Some(tenant_id), tenant_id, detail)]).await?;
    tx.commit().await?;
    Ok(killed)
}

#[derive(sqlx::FromRow)]
struct RunRow {
    run_id: String,
    tenant_id: String,
    user_id: String,
    status: String,
    grant_id: String,
    execute_body_sha256: String,
    created_at: i64,
    heartbeat_at: i64,
    expires_at: i64,
    ended_at: Option<i64>,
    end_reason: Option<String>,
    ended_by: Option<String>,
}

const RUN_COLUMNS: &str = "run_id, tenant_id, user_id, status, grant_id, execute_body_sha256, created_at, \
     heartbeat_at, expires_at, ended_at, end_reason, ended_by";

impl RunRow {
    fn into_run(self) -> Result<Run, StoreError> {
        Ok(Run {
            status: RunStatus::parse(&self.status).ok_or(StoreError::Corrupt)?,
            run_id: self.run_id,
            tenant_id: self.tenant_id,
            user_id: self.user_id,
            grant_id: self.grant_id,
            execute_body_sha256: self.execute_body_sha256,
            created_at: self.created_at,
            heartbeat_at: self.heartbeat_at,
            expires_at: self.expires_at,
            ended_at: self.ended_at,
            end_reason: self.end_reason,
            ended_by: self.ended_by,
        })
    }
}

fn runs_from(rows: Vec<RunRow>) -> Result<Vec<Run>, StoreError> {
    rows.into_iter().map(RunRow::into_run).collect()
}

/// Records a batch of new runs in one transaction (see `Store::create_run`
/// for why they come in batches): the tenants' rows (made if missing) and
/// kill switches in one statement, the runs in one, their audit entries in
/// one. The control lock is held throughout, so no switch can be engaged
/// between its check here and the commit: engaging waits, then kills these
/// runs. A run of an engaged tenant is refused alone; any other failure
/// fails the batch, and the caller retries its runs one by one.
pub(crate) async fn create_runs(
    pool: &Pool<Db>,
    batch: &[(&NewRun, &str)],
) -> Result<Vec<Result<Run, StoreError>>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let mut tenants: Vec<(&str, UnixTime)> =
        batch.iter().map(|(r, _)| (r.tenant_id.as_str(), r.created_at)).collect();
    tenants.sort_unstable();
    tenants.dedup_by(|a, b| a.0 == b.0);
    let mut switches: Vec<(String, i64)> = Vec::with_capacity(tenants.len());
    for chunk in in_fixed_chunks(&tenants) {
        let mut upsert =
            sqlx::QueryBuilder::<Db>::new("INSERT INTO tenants (tenant_id, settings_version, updated_at) ");
        upsert.push_values(chunk, |mut row, (tenant_id, at)| {
            row.push_bind(*tenant_id).push_bind(0_i64).push_bind(*at);
        });
        upsert.push(
            " ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = excluded.tenant_id RETURNING tenant_id, kill_switch",
        );
        switches.extend(upsert.build_query_as::<(String, i64)>().fetch_all(tx.conn()).await?);
    }
    let engaged = |tenant_id: &str| switches.iter().any(|(t, on)| t == tenant_id && *on != 0);

    let admitted: Vec<&(&NewRun, &str)> = batch.iter().filter(|(r, _)| !engaged(&r.tenant_id)).collect();
    let mut recorded: Vec<RunRow> = Vec::with_capacity(admitted.len());
    for chunk in in_fixed_chunks(&admitted) {
        let mut insert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO runs (run_id, tenant_id, user_id, status, grant_id, execute_body_sha256, created_at, \
             heartbeat_at, expires_at) ",
        );
        insert.push_values(chunk, |mut row, (run, _)| {
            row.push_bind(run.run_id.as_str())
                .push_bind(run.tenant_id.as_str())
                .push_bind(run.user_id.as_str())
                .push_bind("live")
                .push_bind(run.grant_id.as_str())
                .push_bind(run.execute_body_sha256.as_str())
                .push_bind(run.created_at)
                .push_bind(run.created_at)
                .push_bind(run.expires_at);
        });
        insert.push(format_args!(" RETURNING {RUN_COLUMNS}"));
        recorded.extend(insert.build_query_as::<RunRow>().fetch_all(tx.conn()).await?);
    }
    let records: Vec<AuditRecord> = admitted
        .iter()
        .map(|(run, actor)| {
            let detail = serde_json::json!({"grant_id": run.grant_id, "user_id": run.user_id,
                "execute_body_sha256": run.execute_body_sha256, "expires_at": run.expires_at});
            audit_record(run.created_at, actor, "run.create", Some(&run.tenant_id), &run.run_id, detail)
        })
        .collect();
    tx.append_audit(&records).await?;
    tx.commit().await?;

    // RETURNING's row order is unspecified; match rows to runs by id.
    let mut recorded: std::collections::HashMap<String, RunRow> =
        recorded.into_iter().map(|row| (row.run_id.clone(), row)).collect();
    Ok(batch
        .iter()
        .map(|(run, _)| match recorded.remove(&run.run_id) {
            Some(row) => row.into_run(),
            None if engaged(&run.tenant_id) => Err(StoreError::KillSwitch),
            None => Err(StoreError::Corrupt),
        })
        .collect())
}

pub(crate) async fn run(pool: &Pool<Db>, run_id: &str) -> Result<Option<Run>, StoreError> {
    let row: Option<RunRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1")))
            .bind(run_id)
            .fetch_optional(pool)
            .await?;
    row.map(RunRow::into_run).transpose()
}

pub(crate) async fn runs(
    pool: &Pool<Db>,
    tenant_id: Option<&str>,
    status: Option<RunStatus>,
    page: &PageRequest,
) -> Result<Page<Run>, StoreError> {
    // Run ids are made here (`run_` + UUIDv7), so their order is creation order.
    let before = page.cursor.clone().unwrap_or_else(|| "~".to_owned());
    let rows: Vec<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE ($1 IS NULL OR tenant_id = $1) AND ($2 IS NULL OR status = $2) \
         AND run_id < $3 ORDER BY run_id DESC LIMIT $4"
    )))
    .bind(tenant_id)
    .bind(status.map(RunStatus::as_str))
    .bind(before)
    .bind(i64::from(page.limit) + 1)
    .fetch_all(pool)
    .await?;
    Ok(paged(runs_from(rows)?, page.limit, |r: &Run| r.run_id.clone()))
}

pub(crate) async fn heartbeat(
    pool: &Pool<Db>,
    run_id: &str,
    now: UnixTime,
    heartbeat_timeout_secs: i64,
) -> Result<(Run, u64), StoreError> {
    let row: Option<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE runs SET heartbeat_at = $2 WHERE run_id = $1 AND status = 'live' \
         AND heartbeat_at + $3 > $2 AND expires_at > $2 RETURNING {RUN_COLUMNS}"
    )))
    .bind(run_id)
    .bind(now)
    .bind(heartbeat_timeout_secs)
    .fetch_optional(pool)
    .await?;
    let run = match row {
        Some(row) => row.into_run()?,
        None if run(pool, run_id).await?.is_some() => return Err(StoreError::RunNotLive),
        None => return Err(StoreError::NotFound),
    };
    // Live, unexpired leases only: a revoked or lapsed lease is never revived.
    let renewed = sqlx::query(
        "UPDATE leases SET expires_at = $3 WHERE run_id = $1 AND status = 'live' AND expires_at > $2",
    )
    .bind(run_id)
    .bind(now)
    .bind(lease::expiry(now, run.expires_at, now.saturating_add(heartbeat_timeout_secs)))
    .execute(pool)
    .await?
    .rows_affected();
    Ok((run, renewed))
}

/// Moves every live run matching `condition` (which may use `$5` for
/// `arg`) to `status`, with audit entries, and revokes their live leases
/// in the same transaction.
async fn finish_where(
    tx: &mut WriteTx,
    condition: &str,
    arg: Option<&str>,
    status: RunStatus,
    reason: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Ended, StoreError> {
    let rows: Vec<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE runs SET status = $1, ended_at = $2, end_reason = $3, ended_by = $4 \
         WHERE status = 'live' AND {condition} RETURNING {RUN_COLUMNS}"
    )))
    .bind(status.as_str())
    .bind(now)
    .bind(reason)
    .bind(actor)
    .bind(arg)
    .fetch_all(tx.conn())
    .await?;
    let mut runs = runs_from(rows)?;
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let action = format!("run.{}", status.as_str());
    let records: Vec<AuditRecord> = runs
        .iter()
        .map(|r| {
            let detail = serde_json::json!({"reason": reason, "grant_id": r.grant_id});
            audit_record(now, actor, &action, Some(&r.tenant_id), &r.run_id, detail)
        })
        .collect();
    tx.append_audit(&records).await?;
    let leases = revoke_leases_of(tx, &runs, actor, now).await?;
    Ok(Ended { runs, leases })
}

/// Revokes the live leases of runs that just stopped being live: one
/// statement over the (few) live leases, however many runs ended.
async fn revoke_leases_of(
    tx: &mut WriteTx,
    runs: &[Run],
    actor: &str,
    now: UnixTime,
) -> Result<u64, StoreError> {
    if runs.is_empty() {
        return Ok(0);
    }
    let condition = "EXISTS (SELECT 1 FROM runs WHERE runs.run_id = leases.run_id AND runs.status <> $4)";
    Ok(revoke_leases_where(tx, condition, "live", "run_ended", actor, now).await?.len() as u64)
}

pub(crate) async fn finish_run(
    pool: &Pool<Db>,
    run_id: &str,
    status: RunStatus,
    reason: &str,
    actor: &str,
    now: UnixTime,
) -> Result<(Run, Option<u64>), StoreError> {
    let mut tx = begin_write(pool).await?;
    let mut ended = finish_where(&mut tx, "run_id = $5", Some(run_id), status, reason, actor, now).await?;
    tx.commit().await?;
    match ended.runs.pop() {
        Some(run) => Ok((run, Some(ended.leases))),
        None => match run(pool, run_id).await? {
            Some(run) => Ok((run, None)),
            None => Err(StoreError::NotFound),
        },
    }
}

/// Live runs past their heartbeat deadline or lifetime, oldest first (at
/// most `limit`): what the sweep revokes in the ledger, then expires.
pub(crate) async fn runs_to_expire(
    pool: &Pool<Db>,
    now: UnixTime,
    heartbeat_timeout_secs: i64,
    limit: u32,
) -> Result<Vec<Run>, StoreError> {
    let rows: Vec<RunRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE status = 'live' AND (expires_at <= $1 OR heartbeat_at + $2 <= $1) \
         ORDER BY run_id LIMIT $3"
    )))
    .bind(now)
    .bind(heartbeat_timeout_secs)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    runs_from(rows)
}

/// Expires the live runs past their deadline (only those of `only`, when
/// given: the runs whose grants the ledger has revoked).
pub(crate) async fn expire_runs(
    pool: &Pool<Db>,
    now: UnixTime,
    heartbeat_timeout_secs: i64,
    only: Option<&[String]>,
) -> Result<Ended, StoreError> {
    if only.is_some_and(<[String]>::is_empty) {
        return Ok(Ended::default());
    }
    let mut tx = begin_write(pool).await?;
    let mut update = sqlx::QueryBuilder::<Db>::new(
        "UPDATE runs SET status = 'expired', ended_at = ",
    );
    update
        .push_bind(now)
        .push(", ended_by = 'gatehouse', end_reason = CASE WHEN expires_at <= ")
        .push_bind(now)
        .push(" THEN 'lifetime_over' ELSE 'heartbeat_lost' END WHERE status = 'live' AND (expires_at <= ")
        .push_bind(now)
        .push(" OR heartbeat_at + ")
        .push_bind(heartbeat_timeout_secs)
        .push(" <= ")
        .push_bind(now)
        .push(")");
    if let Some(ids) = only {
        update.push(" AND run_id IN (");
        let mut list = update.separated(", ");
        for id in ids {
            list.push_bind(id.as_str());
        }
        update.push(")");
    }
    update.push(format_args!(" RETURNING {RUN_COLUMNS}"));
    let rows: Vec<RunRow> = update.build_query_as().fetch_all(tx.conn()).await?;
    let mut runs = runs_from(rows)?;
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let records: Vec<AuditRecord> = runs
        .iter()
        .map(|r| {
            let detail = serde_json::json!({"reason": r.end_reason, "grant_id": r.grant_id});
            audit_record(now, "gatehouse", "run.expired", Some(&r.tenant_id), &r.run_id, detail)
        })
        .collect();
    tx.append_audit(&records).await?;
    let leases = revoke_leases_of(&mut tx, &runs, "gatehouse", now).await?;
    tx.commit().await?;
    Ok(Ended { runs, leases })
}

pub(crate) async fn kill_all_runs(
    pool: &Pool<Db>,
    reason: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Ended, StoreError> {
    let mut tx = begin_write(pool).await?;
    let detail = serde_json::json!({"reason": reason});
    tx.append_audit(&[audit_record(now, actor, "emergency_revoke", None, "all", detail)]).await?;
    let killed =
        finish_where(&mut tx, "($5 IS NULL)", None, RunStatus::Killed, "emergency_revoke", actor, now)
            .await?;
    tx.commit().await?;
    Ok(killed)
}

pub(crate) async fn append_events(
    pool: &Pool<Db>,
    events: &[NewEvent],
    counts: &[RefusalCount],
) -> Result<Vec<i64>, StoreError> {
    let mut tx = begin_write(pool).await?;
    // Numbers are taken under the control lock, so batches from several
    // nodes never interleave and each batch goes in as one statement. A
    // count that adds to an existing row leaves its number unused.
    let first: i64 = sqlx::query_scalar(
        "UPDATE control SET event_seq = event_seq + $1 WHERE id = 1 RETURNING event_seq - $1 + 1",
    )
    .bind(i64::try_from(events.len() + counts.len()).map_err(|_| StoreError::Corrupt)?)
    .fetch_one(tx.conn())
    .await?;
    let seqs: Vec<i64> = (first..).take(events.len()).collect();
    add_refusal_counts(&mut tx, counts, first + seqs.len() as i64).await?;
    let numbered: Vec<(&NewEvent, i64)> = events.iter().zip(seqs.iter().copied()).collect();
    let mut shared = Shared::default();
    for chunk in in_fixed_chunks(&numbered) {
        let mut insert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO events (seq, at, tenant_id, run_id, kind, reason, host, rule, request_id, lease_id, \
             dry_run, refusal) ",
        );
        insert.push_values(chunk, |mut row, (e, seq)| {
            let e: &NewEvent = e;
            row.push_bind(*seq)
                .push_bind(e.at)
                .push_bind(shared.of(e.tenant_id.as_deref()))
                .push_bind(shared.of(e.run_id.as_deref()))
                .push_bind(shared.of(Some(e.kind.as_str())))
                .push_bind(shared.of(e.reason.as_deref()))
                .push_bind(shared.of(e.host.as_deref()))
                .push_bind(e.rule.as_deref())
                .push_bind(e.request_id.as_deref())
                .push_bind(e.lease_id.as_deref())
                .push_bind(i64::from(e.dry_run))
                .push_bind(i64::from(e.refusal));
        });
        insert.build().execute(tx.conn()).await?;
    }
    tx.append_audit(&refusal_records(events, &seqs)).await?;
    tx.commit().await?;
    Ok(seqs)
}

/// Adds refusal counts to their rows (one per minute, listener, client,
/// kind and reason, whichever node made it), numbering new rows from
/// `first`. Never audited: these callers proved nothing.
async fn add_refusal_counts(tx: &mut WriteTx, counts: &[RefusalCount], first: i64) -> Result<(), StoreError> {
    let numbered: Vec<(&RefusalCount, i64, String)> =
        counts.iter().zip(first..).map(|(c, seq)| (c, seq, c.key())).collect();
    for chunk in in_fixed_chunks(&numbered) {
        let mut upsert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO events (seq, at, kind, reason, dry_run, refusal, count, listener, client, noise_key) ",
        );
        upsert.push_values(chunk, |mut row, (c, seq, key)| {
            row.push_bind(*seq)
                .push_bind(c.minute)
                .push_bind(c.kind.as_str())
                .push_bind(c.reason.as_str())
                .push_bind(0_i64)
                .push_bind(1_i64)
                .push_bind(c.count)
                .push_bind(c.listener.as_str())
                .push_bind(c.client.as_deref())
                .push_bind(key.as_str());
        });
        upsert.push(
            " ON CONFLICT (noise_key) WHERE noise_key IS NOT NULL DO UPDATE SET count = events.count + excluded.count",
        );
        upsert.build().execute(tx.conn()).await?;
    }
    Ok(())
}

/// One shared copy of each value that events of a batch repeat (their
/// tenant, run, kind, reason and host), bound as it is. SQLite's driver
/// copies a borrowed string it binds twice (into a `String`, then an `Arc`),
/// which cost two allocations per field of every refused request.
#[derive(Default)]
struct Shared<'a>(std::collections::HashMap<&'a str, std::sync::Arc<str>>);

impl<'a> Shared<'a> {
    fn of(&mut self, value: Option<&'a str>) -> Option<std::sync::Arc<str>> {
        value.map(|v| self.0.entry(v).or_insert_with(|| std::sync::Arc::from(v)).clone())
    }
}

/// The audit entries for a batch of events: one per tenant and run that
/// was refused in the batch, listing each of its refusals (event number,
/// kind, reason, host, rule, request id, dry run) in order. Every refusal
/// is in the chain, kept after its event row is pruned, while a flood of
/// refusals costs the chain a few entries a batch rather than one each.
fn refusal_records(events: &[NewEvent], seqs: &[i64]) -> Vec<AuditRecord> {
    let mut groups: Vec<(&NewEvent, Vec<serde_json::Value>)> = Vec::new();
    for (e, seq) in events.iter().zip(seqs).filter(|(e, _)| e.refusal) {
        let mut item = serde_json::json!({"event_seq": seq, "at": e.at, "kind": e.kind, "reason": e.reason,
            "host": e.host, "rule": e.rule, "request_id": e.request_id, "dry_run": e.dry_run});
        if let (Some(lease_id), Some(fields)) = (&e.lease_id, item.as_object_mut()) {
            fields.insert("lease_id".into(), lease_id.as_str().into());
        }
        match groups.iter_mut().find(|(first, _)| first.tenant_id == e.tenant_id && first.run_id == e.run_id)
        {
            Some((_, items)) => items.push(item),
            None => groups.push((e, vec![item])),
        }
    }
    groups
        .into_iter()
        .map(|(first, items)| {
            let subject = first.run_id.as_deref().unwrap_or("-");
            let detail = serde_json::json!({"run_id": first.run_id, "count": items.len(), "refusals": items});
            audit_record(first.at, "gatehouse", "refusals", first.tenant_id.as_deref(), subject, detail)
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    at: i64,
    tenant_id: Option<String>,
    run_id: Option<String>,
    kind: String,
    reason: Option<String>,
    host: Option<String>,
    rule: Option<String>,
    request_id: Option<String>,
    lease_id: Option<String>,
    dry_run: i64,
    refusal: i64,
    count: i64,
    listener: Option<String>,
    client: Option<String>,
}

const EVENT_COLUMNS: &str = "seq, at, tenant_id, run_id, kind, reason, host, rule, request_id, lease_id, dry_run, \
     refusal, count, listener, client";

impl EventRow {
    fn into_event(self) -> Event {
        Event {
            seq: self.seq,
            event: NewEvent {
                at: self.at,
                kind: self.kind,
                reason: self.reason,
                tenant_id: self.tenant_id,
                run_id: self.run_id,
                host: self.host,
                rule: self.rule,
                request_id: self.request_id,
                lease_id: self.lease_id,
                dry_run: self.dry_run != 0,
                refusal: self.refusal != 0,
            },
            count: self.count,
            listener: self.listener,
            client: self.client,
        }
    }
}

// One page of refusals walks at most `REFUSAL_SCAN_ROWS` event rows: a
// filter that matches rarely could otherwise walk the whole table for one
// page. Past the bound the page ends early, with a cursor where the walk
// stopped, and the next page walks on from there: keyset paging either way,
// each page an index range, never an offset.
pub(crate) async fn refusals(
    pool: &Pool<Db>,
    filter: &RefusalFilter,
    page: &PageRequest,
) -> Result<Page<Event>, StoreError> {
    let before = cursor_number(page)?;
    // With filters no one index holds (a run and a tenant: the planner
    // drives one index and filters by the other), the walk is bounded: the
    // seq `REFUSAL_SCAN_ROWS` rows down the range is its floor (none: fewer
    // rows are left, and the walk reaches the oldest).
    let narrowed = filter.kind.is_some()
        || filter.reason.is_some()
        || filter.since.is_some()
        || filter.host.is_some()
        || (filter.run_id.is_some() && filter.tenant_id.is_some());
    let floor: Option<i64> = if narrowed {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT seq FROM events WHERE ");
        // One index only (a run's, else a tenant's), so this walk is an
        // index range whatever the planner would make of two equalities.
        let driving = RefusalFilter {
            run_id: filter.run_id.clone(),
            tenant_id: if filter.run_id.is_some() { None } else { filter.tenant_id.clone() },
            ..RefusalFilter::default()
        };
        push_refusal_range(&mut q, before, None, &driving);
        q.push(" ORDER BY seq DESC LIMIT 1 OFFSET ").push_bind(REFUSAL_SCAN_ROWS - 1);
        q.build_query_scalar().fetch_optional(pool).await?
    } else {
        None
    };
    let mut query = sqlx::QueryBuilder::<Db>::new(format!("SELECT {EVENT_COLUMNS} FROM events WHERE "));
    push_refusal_range(&mut query, before, floor, filter);
    if let Some(kind) = &filter.kind {
        query.push(" AND kind = ").push_bind(kind);
    }
    if let Some(reason) = &filter.reason {
        query.push(" AND reason = ").push_bind(reason);
    }
    if let Some(since) = filter.since {
        query.push(" AND at >= ").push_bind(since);
    }
    if let Some(host) = &filter.host {
        query.push(" AND host = ").push_bind(host);
    }
    query.push(" ORDER BY seq DESC LIMIT ").push_bind(i64::from(page.limit) + 1);
    let rows: Vec<EventRow> = query.build_query_as().fetch_all(pool).await?;
    let items: Vec<Event> = rows.into_iter().map(EventRow::into_event).collect();
    let mut found = paged(items, page.limit, |e: &Event| e.seq.to_string());
    if found.next_cursor.is_none() {
        // A short page that stopped at the floor: more may match below it.
        found.next_cursor = floor.map(|seq| seq.to_string());
    }
    Ok(found)
}

/// The stretch of refusals a page reads: below the cursor (and at or above
/// the floor), along the narrowest index the filter allows (a run's
/// events, a tenant's refusals, or the table). Only the filters given are in
/// the SQL, so the planner sees plain equalities to drive an index with, and
/// the rows come in index order: no sort, whatever the table holds.
fn push_refusal_range(
    query: &mut sqlx::QueryBuilder<Db>,
    before: i64,
    floor: Option<i64>,
    filter: &RefusalFilter,
) {
    query.push("seq < ").push_bind(before);
    if let Some(floor) = floor {
        query.push(" AND seq >= ").push_bind(floor);
    }
    if let Some(run_id) = &filter.run_id {
        query.push(" AND run_id = ").push_bind(run_id);
    }
    if let Some(tenant_id) = &filter.tenant_id {
        query.push(" AND tenant_id = ").push_bind(tenant_id);
    }
    query.push(" AND refusal = 1");
}

pub(crate) async fn run_events(
    pool: &Pool<Db>,
    run_id: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    )))
    .bind(run_id)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(EventRow::into_event).collect())
}

/// Deletes the events numbered below the first one at or after `before`.
/// Numbers follow writing order, and times nearly do: an event a batch
/// wrote late is kept until the next pass rather than a newer one deleted.
/// The bound is found walking the table by number from the oldest row, so
/// no index on time is written with every event.
pub(crate) async fn prune_events(pool: &Pool<Db>, before: UnixTime) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM events WHERE seq < COALESCE((SELECT seq FROM events WHERE at >= $1 ORDER BY seq LIMIT 1), $2)",
    )
    .bind(before)
    .bind(i64::MAX)
    .execute(pool)
    .await?
    .rows_affected())
}

pub(crate) async fn audit(pool: &Pool<Db>, records: &[AuditRecord]) -> Result<(), StoreError> {
    let mut tx = begin_write(pool).await?;
    tx.append_audit(records).await?;
    tx.commit().await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct AuditRow {
    seq: i64,
    at: i64,
    actor: String,
    action: String,
    tenant_id: Option<String>,
    subject: String,
    detail: String,
    prev_hash: String,
    hash: String,
}

pub(crate) async fn audit_entries(
    pool: &Pool<Db>,
    after: i64,
    limit: u32,
) -> Result<Vec<AuditEntry>, StoreError> {
    Ok(audit_entries_stored(pool, after, i64::MAX, limit).await?.into_iter().map(|(e, _)| e).collect())
}

/// Entries after `after` and at most `through`, in order, each with its
/// detail's text exactly as stored (which the verifier hashes and holds to
/// the canonical form).
pub(crate) async fn audit_entries_stored(
    pool: &Pool<Db>,
    after: i64,
    through: i64,
    limit: u32,
) -> Result<Vec<(AuditEntry, String)>, StoreError> {
    let rows: Vec<AuditRow> = sqlx::query_as(
        "SELECT seq, at, actor, action, tenant_id, subject, detail, prev_hash, hash FROM audit_log \
         WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3",
    )
    .bind(after)
    .bind(through)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            // Read strictly (a duplicate key is no detail at all); a detail
            // that does not read is kept as its text, so the verifier
            // reports the entry instead of the reader failing.
            let detail = gatehouse_capability::canonical::parse_strict(r.detail.as_bytes())
                .unwrap_or_else(|_| serde_json::Value::String(r.detail.clone()));
            let entry = AuditEntry {
                seq: r.seq,
                record: AuditRecord {
                    at: r.at,
                    actor: r.actor,
                    action: r.action,
                    tenant_id: r.tenant_id,
                    subject: r.subject,
                    detail,
                },
                prev_hash: r.prev_hash,
                hash: r.hash,
            };
            (entry, r.detail)
        })
        .collect())
}

/// The highest sequence number stored (0 for none).
pub(crate) async fn audit_last_seq(pool: &Pool<Db>) -> Result<i64, StoreError> {
    let last: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM audit_log").fetch_one(pool).await?;
    Ok(last.unwrap_or(0))
}

pub(crate) async fn audit_head(pool: &Pool<Db>) -> Result<(i64, String), StoreError> {
    Ok(sqlx::query_as("SELECT audit_seq, audit_hash FROM control WHERE id = 1").fetch_one(pool).await?)
}

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

/// Takes the next submission number and records the submission as pending,
/// with its audit entry, in one transaction under the control row's lock.
pub(crate) async fn submit_scan(pool: &Pool<Db>, scan: &NewScan, actor: &str) -> Result<i64, StoreError> {
    let mut tx = begin_write(pool).await?;
    let submitted: i64 =
        sqlx::query_scalar("UPDATE control SET scan_seq = scan_seq + 1 WHERE id = 1 RETURNING scan_seq")
            .fetch_one(tx.conn())
            .await?;
    sqlx::query(
        "INSERT INTO dependency_scans (scan_id, submitted, tenant_id, repository, pull_request, head_sha, \
         created_at, status, levels, report) VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', '', '')",
    )
    .bind(&scan.scan_id)
    .bind(submitted)
    .bind(&scan.tenant_id)
    .bind(&scan.repository)
    .bind(scan.pull_request)
    .bind(&scan.head_sha)
    .bind(scan.created_at)
    .execute(tx.conn())
    .await?;
    let detail = serde_json::json!({"scan_id": scan.scan_id, "repository": scan.repository,
        "pull_request": scan.pull_request, "head_sha": scan.head_sha, "status": "pending",
        "submitted": submitted});
    let record =
        audit_record(scan.created_at, actor, "dependency_scan.create", Some(&scan.tenant_id), &scan.scan_id, detail);
    tx.append_audit(&[record]).await?;
    tx.commit().await?;
    Ok(submitted)
}

/// Records a pending scan's outcome with its audit entry; `false` when it is not pending.
pub(crate) async fn finish_scan(
    pool: &Pool<Db>,
    scan_id: &str,
    outcome: &ScanOutcome,
    at: UnixTime,
    actor: &str,
) -> Result<bool, StoreError> {
    let mut tx = begin_write(pool).await?;
    let finished: Option<(String, String, i64, String)> = sqlx::query_as(
        "UPDATE dependency_scans SET status = $2, levels = $3, report = $4, finished_at = $5 \
         WHERE scan_id = $1 AND status = 'pending' RETURNING tenant_id, repository, pull_request, head_sha",
    )
    .bind(scan_id)
    .bind(&outcome.status)
    .bind(outcome.levels.join(","))
    .bind(&outcome.report)
    .bind(at)
    .fetch_optional(tx.conn())
    .await?;
    let Some((tenant_id, repository, pull_request, head_sha)) = finished else {
        return Ok(false);
    };
    let detail = serde_json::json!({"scan_id": scan_id, "repository": repository,
        "pull_request": pull_request, "head_sha": head_sha, "status": outcome.status,
        "findings": outcome.levels.len()});
    let record = audit_record(at, actor, "dependency_scan.finish", Some(&tenant_id), scan_id, detail);
    tx.append_audit(&[record]).await?;
    tx.commit().await?;
    Ok(true)
}

/// Marks scans pending since before `before` as errored, each audited.
pub(crate) async fn fail_stale_scans(
    pool: &Pool<Db>,
    before: UnixTime,
    at: UnixTime,
    actor: &str,
) -> Result<u64, StoreError> {
    let mut tx = begin_write(pool).await?;
    let failed: Vec<(String, String, String, i64, String)> = sqlx::query_as(
        "UPDATE dependency_scans SET status = 'error', finished_at = $2 \
         WHERE status = 'pending' AND created_at < $1 \
         RETURNING scan_id, tenant_id, repository, pull_request, head_sha",
    )
    .bind(before)
    .bind(at)
    .fetch_all(tx.conn())
    .await?;
    let records: Vec<AuditRecord> = failed
        .iter()
        .map(|(scan_id, tenant_id, repository, pull_request, head_sha)| {
            let detail = serde_json::json!({"scan_id": scan_id, "repository": repository,
                "pull_request": pull_request, "head_sha": head_sha, "status": "error", "findings": 0,
                "interrupted": true});
            audit_record(at, actor, "dependency_scan.finish", Some(tenant_id), scan_id, detail)
        })
        .collect();
    tx.append_audit(&records).await?;
    tx.commit().await?;
    Ok(failed.len() as u64)
}

#[derive(sqlx::FromRow)]
struct ScanRow {
    scan_id: String,
    submitted: i64,
    tenant_id: String,
    repository: String,
    pull_request: i64,
    head_sha: String,
    created_at: i64,
    status: String,
    finished_at: Option<i64>,
    levels: String,
    report: String,
}

impl From<ScanRow> for DependencyScan {
    fn from(r: ScanRow) -> Self {
        let levels =
            if r.levels.is_empty() { Vec::new() } else { r.levels.split(',').map(str::to_owned).collect() };
        Self {
            scan_id: r.scan_id,
            submitted: r.submitted,
            tenant_id: r.tenant_id,
            repository: r.repository,
            pull_request: r.pull_request,
            head_sha: r.head_sha,
            created_at: r.created_at,
            status: r.status,
            finished_at: r.finished_at,
            levels,
            report: r.report,
        }
    }
}

/// A pull request's scans, newest (last submitted) first.
pub(crate) async fn scans(
    pool: &Pool<Db>,
    tenant_id: &str,
    repository: Option<&str>,
    pull_request: Option<i64>,
    page: &PageRequest,
) -> Result<Page<DependencyScan>, StoreError> {
    let before = cursor_number(page)?;
    let rows: Vec<ScanRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SCAN_COLUMNS} FROM dependency_scans WHERE tenant_id = $1 AND ($2 IS NULL OR repository = $2) \
         AND ($3 IS NULL OR pull_request = $3) AND submitted < $4 ORDER BY submitted DESC LIMIT $5"
    )))
    .bind(tenant_id)
    .bind(repository)
    .bind(pull_request)
    .bind(before)
    .bind(i64::from(page.limit) + 1)
    .fetch_all(pool)
    .await?;
    let scans = rows.into_iter().map(DependencyScan::from).collect();
    Ok(paged(scans, page.limit, |s: &DependencyScan| s.submitted.to_string()))
}

const SCAN_COLUMNS: &str = "scan_id, submitted, tenant_id, repository, pull_request, head_sha, created_at, \
    status, finished_at, levels, report";

/// One of a tenant's scans.
pub(crate) async fn scan(
    pool: &Pool<Db>,
    tenant_id: &str,
    scan_id: &str,
) -> Result<Option<DependencyScan>, StoreError> {
    let row: Option<ScanRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SCAN_COLUMNS} FROM dependency_scans WHERE scan_id = $1 AND tenant_id = $2"
    )))
    .bind(scan_id)
    .bind(tenant_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(DependencyScan::from))
}

/// A head's newest submission.
pub(crate) async fn newest_scan_of_head(
    pool: &Pool<Db>,
    tenant_id: &str,
    repository: &str,
    pull_request: i64,
    head_sha: &str,
) -> Result<Option<DependencyScan>, StoreError> {
    let row: Option<ScanRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SCAN_COLUMNS} FROM dependency_scans WHERE tenant_id = $1 AND repository = $2 \
         AND pull_request = $3 AND head_sha = $4 ORDER BY submitted DESC LIMIT 1"
    )))
    .bind(tenant_id)
    .bind(repository)
    .bind(pull_request)
    .bind(head_sha)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(DependencyScan::from))
}
