// The audit log's rows: appending on its own, reading entries as stored and
// the chain's head, written once and compiled per backend beside `ops.rs`
// (same module, same helpers). The chain rules are `crate::audit`'s; the
// appending inside a change is `WriteTx::append_audit`'s.

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
