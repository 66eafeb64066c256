// The settings page's sessions, written once and compiled per backend beside
// `ops.rs` (same module, same helpers). Rows hold a token's SHA-256, never
// the token, and the session's binding to the password hash it began under
// (a keyed digest the caller computes; see `SessionToken::password_binding`).
// Signing in and out are audited in the transaction that writes them, so the
// audit log says who was signed in when.

/// Records a new session and audits the sign-in; sessions that have ended
/// are deleted on the way, so the table holds only live ones and a few
/// idle ones not yet seen to be idle.
pub(crate) async fn create_admin_session(
    pool: &Pool<Db>,
    token_sha256: &str,
    password_binding: &str,
    person: &str,
    now: UnixTime,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    let mut tx = begin_write(pool).await?;
    sqlx::query("DELETE FROM admin_sessions WHERE expires_at <= $1").bind(now).execute(tx.conn()).await?;
    sqlx::query(
        "INSERT INTO admin_sessions (token_sha256, person, created_at, last_seen, expires_at, password_binding) \
         VALUES ($1, $2, $3, $3, $4, $5)",
    )
    .bind(token_sha256)
    .bind(person)
    .bind(now)
    .bind(expires_at)
    .bind(password_binding)
    .execute(tx.conn())
    .await?;
    let detail = serde_json::json!({"expires_at": expires_at});
    tx.append_audit(&[audit_record(now, person, "admin.sign_in", None, person, detail)]).await?;
    tx.commit().await
}

#[derive(sqlx::FromRow)]
struct AdminSessionRow {
    person: String,
    created_at: i64,
    last_seen: i64,
    expires_at: i64,
    password_binding: String,
}

/// The session whose token hashes to `token_sha256`, if it is live at `now`
/// (before its absolute end, seen within `idle_secs`, and begun under the
/// password hash `password_binding` binds to). A session begun under
/// another hash has ended: it is deleted (and its end audited), so it
/// stays ended whatever hash is in force later. A live session's
/// `last_seen` moves to `now` when it is a minute or more behind, so an
/// active person stays signed in without a write per request.
pub(crate) async fn admin_session(
    pool: &Pool<Db>,
    token_sha256: &str,
    password_binding: &str,
    now: UnixTime,
    idle_secs: i64,
) -> Result<Option<AdminSession>, StoreError> {
    let row: Option<AdminSessionRow> = sqlx::query_as(
        "SELECT person, created_at, last_seen, expires_at, password_binding FROM admin_sessions \
         WHERE token_sha256 = $1 AND expires_at > $2 AND last_seen > $3",
    )
    .bind(token_sha256)
    .bind(now)
    .bind(now.saturating_sub(idle_secs))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.password_binding.is_empty() || row.password_binding != password_binding {
        let mut tx = begin_write(pool).await?;
        let person: Option<String> =
            sqlx::query_scalar("DELETE FROM admin_sessions WHERE token_sha256 = $1 RETURNING person")
                .bind(token_sha256)
                .fetch_optional(tx.conn())
                .await?;
        if let Some(person) = &person {
            let detail = serde_json::json!({"reason": "password_changed"});
            tx.append_audit(&[audit_record(now, person, "admin.session_ended", None, person, detail)]).await?;
        }
        tx.commit().await?;
        return Ok(None);
    }
    let mut last_seen = row.last_seen;
    if now.saturating_sub(last_seen) >= 60 {
        let mut tx = begin_write(pool).await?;
        sqlx::query("UPDATE admin_sessions SET last_seen = $2 WHERE token_sha256 = $1")
            .bind(token_sha256)
            .bind(now)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        last_seen = now;
    }
    Ok(Some(AdminSession { person: row.person, created_at: row.created_at, last_seen, expires_at: row.expires_at }))
}

/// Ends a session (sign-out) and audits it; `false` if there was none.
pub(crate) async fn end_admin_session(
    pool: &Pool<Db>,
    token_sha256: &str,
    now: UnixTime,
) -> Result<bool, StoreError> {
    let mut tx = begin_write(pool).await?;
    let person: Option<String> =
        sqlx::query_scalar("DELETE FROM admin_sessions WHERE token_sha256 = $1 RETURNING person")
            .bind(token_sha256)
            .fetch_optional(tx.conn())
            .await?;
    if let Some(person) = &person {
        let detail = serde_json::json!({});
        tx.append_audit(&[audit_record(now, person, "admin.sign_out", None, person, detail)]).await?;
    }
    tx.commit().await?;
    Ok(person.is_some())
}

/// Ends every session (sign out everywhere) and audits it under `actor`
/// with the number of live ones ended (live as `admin_session` counts it,
/// with `idle_secs`); returns that number.
pub(crate) async fn end_all_admin_sessions(
    pool: &Pool<Db>,
    actor: &str,
    now: UnixTime,
    idle_secs: i64,
) -> Result<u64, StoreError> {
    let mut tx = begin_write(pool).await?;
    let live: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM admin_sessions WHERE expires_at > $1 AND last_seen > $2")
            .bind(now)
            .bind(now.saturating_sub(idle_secs))
            .fetch_one(tx.conn())
            .await?;
    sqlx::query("DELETE FROM admin_sessions").execute(tx.conn()).await?;
    let ended = u64::try_from(live).unwrap_or(0);
    let detail = serde_json::json!({"sessions": ended});
    tx.append_audit(&[audit_record(now, actor, "admin.sign_out_everywhere", None, actor, detail)]).await?;
    tx.commit().await?;
    Ok(ended)
}
