// Runs and their lifecycle (created in batches, heartbeats, ended once:
// finished, expired or killed, each end revoking the run's leases), written
// once and compiled per backend beside `ops.rs` (same module, same helpers).

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
