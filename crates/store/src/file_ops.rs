// Files' metadata, written once and compiled per backend beside `ops.rs`
// (same module, same helpers). A row is written after its object is
// complete; keeping and deleting files are audited in the transaction that
// writes them.

const FILE_COLUMNS: &str =
    "file_id, tenant_id, user_id, namespace, session_id, resource, name, bytes, sha256, verdict, created_at, run_id";

/// Records `file` (its object complete) and audits it. A session's file
/// replaces the session's file of the same name, whose record is returned
/// so its object can be deleted; the session counts as touched.
pub(crate) async fn record_file(
    pool: &Pool<Db>,
    file: &files::StoredFile,
    actor: &str,
) -> Result<Option<files::StoredFile>, StoreError> {
    let mut tx = begin_write(pool).await?;
    // The upload's row goes in the same transaction as the record comes: a
    // commit and the sweeper's (or an abandoning caller's) deletion of the
    // row are ordered, and only one of them finds it.
    let began: Option<String> =
        sqlx::query_scalar("DELETE FROM file_uploads WHERE file_id = $1 RETURNING file_id")
            .bind(&file.file_id)
            .fetch_optional(tx.conn())
            .await?;
    if began.is_none() {
        return Err(StoreError::Refused(gatehouse_core::Reason::UploadExpired));
    }
    let mut replaced = None;
    if let Some(session_id) = &file.session_id {
        replaced = sqlx::query_as::<_, files::StoredFile>(sqlx::AssertSqlSafe(format!(
            "DELETE FROM files WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3 AND session_id = $4 \
             AND name = $5 RETURNING {FILE_COLUMNS}"
        )))
        .bind(&file.tenant_id)
        .bind(&file.user_id)
        .bind(&file.namespace)
        .bind(session_id)
        .bind(&file.name)
        .fetch_optional(tx.conn())
        .await?;
        touch(&mut tx, &file.tenant_id, &file.user_id, session_id, &file.namespace, file.created_at).await?;
    }
    sqlx::query(
        "INSERT INTO files (file_id, tenant_id, user_id, namespace, session_id, resource, name, bytes, sha256, \
         verdict, created_at, run_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&file.file_id)
    .bind(&file.tenant_id)
    .bind(&file.user_id)
    .bind(&file.namespace)
    .bind(&file.session_id)
    .bind(&file.resource)
    .bind(&file.name)
    .bind(file.bytes)
    .bind(&file.sha256)
    .bind(&file.verdict)
    .bind(file.created_at)
    .bind(&file.run_id)
    .execute(tx.conn())
    .await?;
    let detail = serde_json::json!({"user_id": file.user_id, "session_id": file.session_id, "run_id": file.run_id,
        "resource": file.resource, "name": file.name, "bytes": file.bytes, "sha256": file.sha256,
        "verdict": file.verdict, "replaced": replaced.as_ref().map(|r: &files::StoredFile| &r.file_id)});
    let action = if file.session_id.is_some() { "file.upload" } else { "file.store" };
    tx.append_audit(&[audit_record(file.created_at, actor, action, file.tenant(), &file.file_id, detail)])
        .await?;
    tx.commit().await?;
    Ok(replaced)
}

async fn touch(
    tx: &mut WriteTx,
    tenant_id: &str,
    user_id: &str,
    session_id: &str,
    namespace: &str,
    now: UnixTime,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO file_sessions (tenant_id, user_id, session_id, namespace, touched_at) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (tenant_id, user_id, namespace, session_id) DO UPDATE SET touched_at = excluded.touched_at",
    )
    .bind(tenant_id)
    .bind(user_id)
    .bind(session_id)
    .bind(namespace)
    .bind(now)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The file `file_id` of `tenant_id` (`""`: none), if there is one.
pub(crate) async fn file(
    pool: &Pool<Db>,
    tenant_id: &str,
    file_id: &str,
) -> Result<Option<files::StoredFile>, StoreError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT {FILE_COLUMNS} FROM files WHERE file_id = $1 AND tenant_id = $2")))
        .bind(file_id)
        .bind(tenant_id)
        .fetch_optional(pool)
        .await?)
}

/// The files of one user's session in `namespace`, by name; the session
/// counts as touched when it has any.
pub(crate) async fn session_files(
    pool: &Pool<Db>,
    tenant_id: &str,
    user_id: &str,
    namespace: &str,
    session_id: &str,
    now: UnixTime,
) -> Result<Vec<files::StoredFile>, StoreError> {
    let files: Vec<files::StoredFile> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {FILE_COLUMNS} FROM files WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3 \
         AND session_id = $4 ORDER BY name"
    )))
    .bind(tenant_id)
    .bind(user_id)
    .bind(namespace)
    .bind(session_id)
    .fetch_all(pool)
    .await?;
    if !files.is_empty() {
        // Not audited and not under the control lock: a timestamp only ever
        // moving forward, which no other change depends on.
        sqlx::query(
            "UPDATE file_sessions SET touched_at = $5 \
             WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3 AND session_id = $4 AND touched_at < $5",
        )
        .bind(tenant_id)
        .bind(user_id)
        .bind(namespace)
        .bind(session_id)
        .bind(now)
        .execute(pool)
        .await?;
    }
    Ok(files)
}

/// What a run left: the files it wrote (oldest first) and the uploads
/// refused as content (in the order refused), `limit` of each at most.
pub(crate) async fn run_artifacts(
    pool: &Pool<Db>,
    run_id: &str,
    limit: i64,
) -> Result<files::RunArtifacts, StoreError> {
    let written: Vec<files::StoredFile> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {FILE_COLUMNS} FROM files WHERE run_id = $1 ORDER BY created_at, file_id LIMIT $2"
    )))
    .bind(run_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let refused: Vec<files::RefusedUpload> = sqlx::query_as(
        "SELECT file_name, reason, at FROM events WHERE run_id = $1 AND kind = 'content_refused' \
         AND refusal = 1 AND dry_run = 0 ORDER BY seq LIMIT $2",
    )
    .bind(run_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(files::RunArtifacts { written, refused })
}

/// Deletes the record of `file_id` of `tenant_id` and audits it; returns it
/// (its object is the caller's to delete), or `None` if there was none.
pub(crate) async fn delete_file(
    pool: &Pool<Db>,
    tenant_id: &str,
    file_id: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Option<files::StoredFile>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let deleted: Option<files::StoredFile> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "DELETE FROM files WHERE file_id = $1 AND tenant_id = $2 RETURNING {FILE_COLUMNS}"
    )))
    .bind(file_id)
    .bind(tenant_id)
    .fetch_optional(tx.conn())
    .await?;
    if let Some(file) = &deleted {
        let detail = serde_json::json!({"user_id": file.user_id, "name": file.name, "session_id": file.session_id});
        tx.append_audit(&[audit_record(now, actor, "file.delete", file.tenant(), file_id, detail)]).await?;
    }
    tx.commit().await?;
    Ok(deleted)
}

/// Takes (or keeps) the maintenance task `name` for `holder` until
/// `expires_at`, if no other holder's claim is still in force at `now`.
pub(crate) async fn claim_maintenance(
    pool: &Pool<Db>,
    name: &str,
    holder: &str,
    now: UnixTime,
    expires_at: UnixTime,
) -> Result<bool, StoreError> {
    let claimed: Option<String> = sqlx::query_scalar(
        "INSERT INTO maintenance_leases (name, holder, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
         WHERE maintenance_leases.expires_at <= $4 OR maintenance_leases.holder = excluded.holder \
         RETURNING holder",
    )
    .bind(name)
    .bind(holder)
    .bind(expires_at)
    .bind(now)
    .fetch_optional(pool)
    .await?;
    Ok(claimed.is_some())
}

/// Sessions untouched since before `cutoff` whose user has no live run (a
/// live run may hold any of its user's sessions: never swept from under
/// it), oldest first.
pub(crate) async fn stale_file_sessions(
    pool: &Pool<Db>,
    cutoff: UnixTime,
    limit: i64,
) -> Result<Vec<files::FileSession>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT s.tenant_id, s.user_id, s.session_id, s.namespace, s.touched_at FROM file_sessions s \
         WHERE s.touched_at < $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.status = 'live' \
         AND r.tenant_id = s.tenant_id AND r.user_id = s.user_id) \
         ORDER BY s.touched_at LIMIT $2",
    )
    .bind(cutoff)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Deletes a stale session's records, if it is still stale and unheld
/// under the control lock, and audits it; returns the files whose objects
/// are now the caller's to delete (empty: the session was touched or held
/// meanwhile, and stays).
pub(crate) async fn sweep_file_session(
    pool: &Pool<Db>,
    session: &files::FileSession,
    cutoff: UnixTime,
    actor: &str,
    now: UnixTime,
) -> Result<Vec<files::StoredFile>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let still: Option<i64> = sqlx::query_scalar(
        "DELETE FROM file_sessions WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3 AND session_id = $4 \
         AND touched_at < $5 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.status = 'live' \
         AND r.tenant_id = $1 AND r.user_id = $2) RETURNING touched_at",
    )
    .bind(&session.tenant_id)
    .bind(&session.user_id)
    .bind(&session.namespace)
    .bind(&session.session_id)
    .bind(cutoff)
    .fetch_optional(tx.conn())
    .await?;
    if still.is_none() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let swept: Vec<files::StoredFile> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "DELETE FROM files WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3 AND session_id = $4 \
         RETURNING {FILE_COLUMNS}"
    )))
    .bind(&session.tenant_id)
    .bind(&session.user_id)
    .bind(&session.namespace)
    .bind(&session.session_id)
    .fetch_all(tx.conn())
    .await?;
    let bytes: i64 = swept.iter().map(|f| f.bytes).sum();
    let detail = serde_json::json!({"user_id": session.user_id, "touched_at": session.touched_at,
        "files": swept.iter().map(|f| &f.file_id).collect::<Vec<_>>(), "bytes": bytes});
    let tenant = (!session.tenant_id.is_empty()).then_some(session.tenant_id.as_str());
    tx.append_audit(&[audit_record(now, actor, "file_session.swept", tenant, &session.session_id, detail)])
        .await?;
    tx.commit().await?;
    Ok(swept)
}

/// Records an upload about to begin.
pub(crate) async fn begin_upload(pool: &Pool<Db>, upload: &files::FileUpload) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO file_uploads (file_id, namespace, node, started_at) VALUES ($1, $2, $3, $4)")
        .bind(&upload.file_id)
        .bind(&upload.namespace)
        .bind(&upload.node)
        .bind(upload.started_at)
        .execute(pool)
        .await?;
    Ok(())
}

/// After a failed or uncertain commit: deletes the upload's row (so no
/// commit can come after), then reads whether the record is there. On
/// PostgreSQL a commit still in flight holds the row, so the deletion waits
/// for it and the read that follows sees its outcome.
pub(crate) async fn abandon_upload(pool: &Pool<Db>, file_id: &str) -> Result<files::UploadFate, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM file_uploads WHERE file_id = $1").bind(file_id).execute(&mut *tx).await?;
    let recorded: Option<String> = sqlx::query_scalar("SELECT file_id FROM files WHERE file_id = $1")
        .bind(file_id)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(if recorded.is_some() { files::UploadFate::Committed } else { files::UploadFate::Abandoned })
}

/// Uploads begun before `before` that never committed, oldest first.
pub(crate) async fn stale_uploads(
    pool: &Pool<Db>,
    before: UnixTime,
    limit: i64,
) -> Result<Vec<files::FileUpload>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT file_id, namespace, node, started_at FROM file_uploads WHERE started_at < $1 \
         ORDER BY started_at LIMIT $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Deletes the upload's row if it is still there and began before
/// `before`: `true` when this call deleted it (no commit can follow, and
/// the upload's leftovers are the caller's to remove).
pub(crate) async fn expire_upload(pool: &Pool<Db>, file_id: &str, before: UnixTime) -> Result<bool, StoreError> {
    let deleted: Option<String> =
        sqlx::query_scalar("DELETE FROM file_uploads WHERE file_id = $1 AND started_at < $2 RETURNING file_id")
            .bind(file_id)
            .bind(before)
            .fetch_optional(pool)
            .await?;
    Ok(deleted.is_some())
}

/// What the store says of each of `file_ids` that it knows (an id it does
/// not know has neither a record nor an upload), by id. One statement per chunk,
/// so a record and the upload row it replaced are read at one instant: an
/// upload committing meanwhile is seen as one or the other, never neither.
pub(crate) async fn file_states(
    pool: &Pool<Db>,
    file_ids: &[String],
    live_since: UnixTime,
) -> Result<Vec<(String, files::FileState)>, StoreError> {
    let mut states: Vec<(String, files::FileState)> = Vec::new();
    for chunk in in_fixed_chunks(file_ids) {
        let mut query = sqlx::QueryBuilder::<Db>::new("SELECT file_id, 0 FROM files WHERE file_id IN (");
        let mut ids = query.separated(", ");
        for id in chunk {
            ids.push_bind(id);
        }
        query.push(") UNION ALL SELECT file_id, CASE WHEN started_at >= ");
        query.push_bind(live_since);
        query.push(" THEN 1 ELSE 2 END FROM file_uploads WHERE file_id IN (");
        let mut ids = query.separated(", ");
        for id in chunk {
            ids.push_bind(id);
        }
        query.push(")");
        let rows: Vec<(String, i32)> = query.build_query_as().fetch_all(pool).await?;
        for (id, state) in rows {
            let state = match state {
                0 => files::FileState::Recorded,
                1 => files::FileState::Uploading,
                _ => files::FileState::Stale,
            };
            // A record wins over an upload row of the same id (a commit
            // removes the row; both at once is not expected).
            match states.iter_mut().find(|entry| entry.0 == id) {
                Some(entry) if state == files::FileState::Recorded => entry.1 = state,
                Some(_) => {}
                None => states.push((id, state)),
            }
        }
    }
    states.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(states)
}
