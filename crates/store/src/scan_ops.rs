// Pull requests' dependency scans (numbered on submission, recorded pending,
// finished once), written once and compiled per backend beside `ops.rs` (same
// module, same helpers).

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
