// Credentials and leases, written once and compiled per backend beside
// `ops.rs` (same module, same helpers).
//
// The lease rules (`crate::lease`) are decided here under the control lock,
// in the transaction that writes their outcome: a run's liveness, its
// "a lease was revoked" mark and the credential are read and the lease
// inserted with no other writer in between.

#[derive(sqlx::FromRow)]
struct CredentialRow {
    credential_id: String,
    tenant_id: String,
    name: String,
    purpose: String,
    host: String,
    inject: String,
    sealed: String,
    key_id: String,
    version: i64,
    fingerprint: String,
    created_at: i64,
    updated_at: i64,
}

const CREDENTIAL_COLUMNS: &str = "credential_id, tenant_id, name, purpose, host, inject, sealed, key_id, version, \
     fingerprint, created_at, updated_at";

impl From<CredentialRow> for Credential {
    fn from(r: CredentialRow) -> Self {
        Credential {
            credential_id: r.credential_id,
            tenant_id: r.tenant_id,
            name: r.name,
            purpose: r.purpose,
            host: r.host,
            inject: r.inject,
            sealed: r.sealed,
            key_id: r.key_id,
            version: r.version,
            fingerprint: r.fingerprint,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct LeaseRow {
    lease_id: String,
    tenant_id: String,
    run_id: String,
    credential_id: String,
    purpose: String,
    host: String,
    status: String,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
    revoke_reason: Option<String>,
    revoked_by: Option<String>,
}

const LEASE_COLUMNS: &str = "lease_id, tenant_id, run_id, credential_id, purpose, host, status, created_at, \
     expires_at, revoked_at, revoke_reason, revoked_by";

impl LeaseRow {
    /// The lease as of `now`: a live row past its expiry reads `expired`.
    fn into_lease(self, now: UnixTime) -> Result<Lease, StoreError> {
        let status = match self.status.as_str() {
            "live" if self.expires_at <= now => LeaseStatus::Expired,
            "live" => LeaseStatus::Live,
            "revoked" => LeaseStatus::Revoked,
            _ => return Err(StoreError::Corrupt),
        };
        Ok(Lease {
            lease_id: self.lease_id,
            tenant_id: self.tenant_id,
            run_id: self.run_id,
            credential_id: self.credential_id,
            purpose: self.purpose,
            host: self.host,
            status,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            revoke_reason: self.revoke_reason,
            revoked_by: self.revoked_by,
        })
    }
}

fn leases_from(rows: Vec<LeaseRow>, now: UnixTime) -> Result<Vec<Lease>, StoreError> {
    rows.into_iter().map(|r| r.into_lease(now)).collect()
}

fn lease_audit(now: UnixTime, actor: &str, action: &str, lease: &Lease) -> AuditRecord {
    let detail = serde_json::json!({"run_id": lease.run_id, "credential_id": lease.credential_id,
        "purpose": lease.purpose, "host": lease.host, "reason": lease.revoke_reason});
    audit_record(now, actor, action, Some(&lease.tenant_id), &lease.lease_id, detail)
}

pub(crate) async fn create_credential(
    pool: &Pool<Db>,
    credential: &Credential,
    actor: &str,
) -> Result<Credential, StoreError> {
    let mut tx = begin_write(pool).await?;
    let taken: Option<i64> =
        sqlx::query_scalar("SELECT CAST(1 AS BIGINT) FROM credentials WHERE credential_id = $1 OR (tenant_id = $2 AND name = $3)")
            .bind(&credential.credential_id)
            .bind(&credential.tenant_id)
            .bind(&credential.name)
            .fetch_optional(tx.conn())
            .await?;
    if taken.is_some() {
        return Err(StoreError::Conflict);
    }
    let row: CredentialRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO credentials ({CREDENTIAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         RETURNING {CREDENTIAL_COLUMNS}"
    )))
    .bind(&credential.credential_id)
    .bind(&credential.tenant_id)
    .bind(&credential.name)
    .bind(&credential.purpose)
    .bind(&credential.host)
    .bind(&credential.inject)
    .bind(&credential.sealed)
    .bind(&credential.key_id)
    .bind(credential.version)
    .bind(&credential.fingerprint)
    .bind(credential.created_at)
    .bind(credential.updated_at)
    .fetch_one(tx.conn())
    .await?;
    let detail = serde_json::json!({"name": row.name, "purpose": row.purpose, "host": row.host,
        "fingerprint": row.fingerprint, "key_id": row.key_id, "version": row.version});
    tx.append_audit(&[audit_record(
        row.created_at,
        actor,
        "credential.create",
        Some(&row.tenant_id),
        &row.credential_id,
        detail,
    )])
    .await?;
    tx.commit().await?;
    Ok(row.into())
}

pub(crate) async fn credential(
    pool: &Pool<Db>,
    tenant_id: &str,
    credential_id: &str,
) -> Result<Option<Credential>, StoreError> {
    let row: Option<CredentialRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_id = $1 AND tenant_id = $2"
    )))
    .bind(credential_id)
    .bind(tenant_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Credential::from))
}

pub(crate) async fn credentials(
    pool: &Pool<Db>,
    tenant_id: Option<&str>,
    page: &PageRequest,
) -> Result<Page<Credential>, StoreError> {
    // Credential ids are made here (`cred_` + UUIDv7): their order is creation order.
    let before = page.cursor.clone().unwrap_or_else(|| "~".to_owned());
    let rows: Vec<CredentialRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE ($1 IS NULL OR tenant_id = $1) AND credential_id < $2 \
         ORDER BY credential_id DESC LIMIT $3"
    )))
    .bind(tenant_id)
    .bind(before)
    .bind(i64::from(page.limit) + 1)
    .fetch_all(pool)
    .await?;
    Ok(paged(rows.into_iter().map(Credential::from).collect(), page.limit, |c: &Credential| {
        c.credential_id.clone()
    }))
}

/// Applies new seals: a rotation (one version up) or a rewrap (the same
/// version, only if the row still holds the seal that was opened). Returns
/// the rows changed; a row changed meanwhile is left alone (a rotation
/// reports `conflict`, a rewrap just counts it out).
pub(crate) async fn reseal_credentials(
    pool: &Pool<Db>,
    tenant_id: Option<&str>,
    resealed: &[Resealed],
    actor: &str,
    now: UnixTime,
) -> Result<Vec<Credential>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let mut changed = Vec::with_capacity(resealed.len());
    for r in resealed {
        let row: Option<CredentialRow> = match &r.previous_sealed {
            None => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE credentials SET sealed = $1, key_id = $2, fingerprint = $3, version = version + 1, \
                 updated_at = $4 WHERE credential_id = $5 AND version = $6 AND ($7 IS NULL OR tenant_id = $7) \
                 RETURNING {CREDENTIAL_COLUMNS}"
            ))),
            Some(_) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE credentials SET sealed = $1, key_id = $2, fingerprint = $3, updated_at = $4 \
                 WHERE credential_id = $5 AND version = $6 AND ($7 IS NULL OR tenant_id = $7) AND sealed = $8 \
                 RETURNING {CREDENTIAL_COLUMNS}"
            ))),
        }
        .bind(&r.sealed)
        .bind(&r.key_id)
        .bind(&r.fingerprint)
        .bind(now)
        .bind(&r.credential_id)
        .bind(r.version)
        .bind(tenant_id)
        .bind(r.previous_sealed.as_deref())
        .fetch_optional(tx.conn())
        .await?;
        match row {
            Some(row) => changed.push((Credential::from(row), r.previous_sealed.is_some())),
            None if r.previous_sealed.is_none() => {
                let exists: Option<i64> = sqlx::query_scalar(
                    "SELECT CAST(1 AS BIGINT) FROM credentials WHERE credential_id = $1 AND ($2 IS NULL OR tenant_id = $2)",
                )
                .bind(&r.credential_id)
                .bind(tenant_id)
                .fetch_optional(tx.conn())
                .await?;
                return Err(if exists.is_some() { StoreError::Conflict } else { StoreError::NotFound });
            }
            None => {}
        }
    }
    let records: Vec<AuditRecord> = changed
        .iter()
        .map(|(c, rewrap)| {
            let action = if *rewrap { "credential.rewrap" } else { "credential.rotate" };
            let detail =
                serde_json::json!({"fingerprint": c.fingerprint, "key_id": c.key_id, "version": c.version});
            audit_record(now, actor, action, Some(&c.tenant_id), &c.credential_id, detail)
        })
        .collect();
    tx.append_audit(&records).await?;
    tx.commit().await?;
    Ok(changed.into_iter().map(|(c, _)| c).collect())
}

/// Revokes the live leases `condition` selects (it may use `$4`), marking
/// their runs so they never get another, with an audit entry each.
async fn revoke_leases_where(
    tx: &mut WriteTx,
    condition: &str,
    arg: &str,
    reason: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Vec<Lease>, StoreError> {
    let rows: Vec<LeaseRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE leases SET status = 'revoked', revoked_at = $1, revoke_reason = $2, revoked_by = $3 \
         WHERE status = 'live' AND {condition} RETURNING {LEASE_COLUMNS}"
    )))
    .bind(now)
    .bind(reason)
    .bind(actor)
    .bind(arg)
    .fetch_all(tx.conn())
    .await?;
    let mut leases = leases_from(rows, now)?;
    leases.sort_by(|a, b| a.lease_id.cmp(&b.lease_id));
    let mut runs: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
    runs.dedup();
    for run_id in runs {
        sqlx::query("UPDATE runs SET lease_revoked = 1 WHERE run_id = $1")
            .bind(run_id)
            .execute(tx.conn())
            .await?;
    }
    let records: Vec<AuditRecord> =
        leases.iter().map(|l| lease_audit(now, actor, "lease.revoke", l)).collect();
    tx.append_audit(&records).await?;
    Ok(leases)
}

/// Deletes a credential and revokes its live leases; returns them.
pub(crate) async fn delete_credential(
    pool: &Pool<Db>,
    tenant_id: &str,
    credential_id: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Vec<Lease>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let deleted: Option<String> = sqlx::query_scalar(
        "DELETE FROM credentials WHERE credential_id = $1 AND tenant_id = $2 RETURNING name",
    )
    .bind(credential_id)
    .bind(tenant_id)
    .fetch_optional(tx.conn())
    .await?;
    let Some(name) = deleted else {
        return Err(StoreError::NotFound);
    };
    let leases =
        revoke_leases_where(&mut tx, "credential_id = $4", credential_id, "credential_deleted", actor, now)
            .await?;
    let detail = serde_json::json!({"name": name, "leases_revoked": leases.len()});
    tx.append_audit(&[audit_record(now, actor, "credential.delete", Some(tenant_id), credential_id, detail)])
        .await?;
    tx.commit().await?;
    Ok(leases)
}

/// Grants a lease under the rules of `lease::may_grant`.
pub(crate) async fn grant_lease(
    pool: &Pool<Db>,
    new: &NewLease,
    actor: &str,
    now: UnixTime,
    heartbeat_timeout_secs: i64,
) -> Result<(Lease, Run), StoreError> {
    let mut tx = begin_write(pool).await?;
    let row: Option<RunRow> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1")))
            .bind(&new.run_id)
            .fetch_optional(tx.conn())
            .await?;
    let Some(run) = row else {
        return Err(StoreError::NotFound);
    };
    let lease_revoked: i64 = sqlx::query_scalar("SELECT lease_revoked FROM runs WHERE run_id = $1")
        .bind(&new.run_id)
        .fetch_one(tx.conn())
        .await?;
    let run = run.into_run()?;
    let credential: Option<CredentialRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_id = $1 AND tenant_id = $2"
    )))
    .bind(&new.credential_id)
    .bind(&run.tenant_id)
    .fetch_optional(tx.conn())
    .await?;
    let facts = lease::GrantFacts {
        run_live: run.status == RunStatus::Live
            && run.expires_at > now
            && run.heartbeat_at.saturating_add(heartbeat_timeout_secs) > now,
        run_had_lease_revoked: lease_revoked != 0,
        credential: credential.as_ref().map(|c| (c.purpose.as_str(), c.host.as_str())),
    };
    lease::may_grant(&facts, &new.purpose, &new.host).map_err(StoreError::Refused)?;
    let expires_at =
        lease::expiry(now, run.expires_at, run.heartbeat_at.saturating_add(heartbeat_timeout_secs));
    let row: LeaseRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO leases (lease_id, tenant_id, run_id, credential_id, purpose, host, status, created_at, \
         expires_at) VALUES ($1, $2, $3, $4, $5, $6, 'live', $7, $8) RETURNING {LEASE_COLUMNS}"
    )))
    .bind(&new.lease_id)
    .bind(&run.tenant_id)
    .bind(&run.run_id)
    .bind(&new.credential_id)
    .bind(&new.purpose)
    .bind(&new.host)
    .bind(now)
    .bind(expires_at)
    .fetch_one(tx.conn())
    .await?;
    let lease = row.into_lease(now)?;
    tx.append_audit(&[lease_audit(now, actor, "lease.grant", &lease)]).await?;
    tx.commit().await?;
    Ok((lease, run))
}

/// Revokes one live lease; `None` when it was not live (revoking twice is
/// not an error), `not_found` when there is no such lease.
pub(crate) async fn revoke_lease(
    pool: &Pool<Db>,
    lease_id: &str,
    reason: &str,
    actor: &str,
    now: UnixTime,
) -> Result<Option<Lease>, StoreError> {
    let mut tx = begin_write(pool).await?;
    let mut revoked = revoke_leases_where(&mut tx, "lease_id = $4", lease_id, reason, actor, now).await?;
    tx.commit().await?;
    match revoked.pop() {
        Some(lease) => Ok(Some(lease)),
        None if lease(pool, lease_id, now).await?.is_some() => Ok(None),
        None => Err(StoreError::NotFound),
    }
}

pub(crate) async fn lease(
    pool: &Pool<Db>,
    lease_id: &str,
    now: UnixTime,
) -> Result<Option<Lease>, StoreError> {
    let row: Option<LeaseRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {LEASE_COLUMNS} FROM leases WHERE lease_id = $1"
    )))
    .bind(lease_id)
    .fetch_optional(pool)
    .await?;
    row.map(|r| r.into_lease(now)).transpose()
}

pub(crate) async fn leases(
    pool: &Pool<Db>,
    filter: &LeaseFilter,
    page: &PageRequest,
    now: UnixTime,
) -> Result<Page<Lease>, StoreError> {
    let before = page.cursor.clone().unwrap_or_else(|| "~".to_owned());
    let (status, live_after, expired_by) = match filter.status {
        None => (None, None, None),
        Some(LeaseStatus::Live) => (Some("live"), Some(now), None),
        Some(LeaseStatus::Expired) => (Some("live"), None, Some(now)),
        Some(LeaseStatus::Revoked) => (Some("revoked"), None, None),
    };
    let rows: Vec<LeaseRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {LEASE_COLUMNS} FROM leases WHERE ($1 IS NULL OR tenant_id = $1) AND ($2 IS NULL OR run_id = $2) \
         AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR expires_at > $4) AND ($5 IS NULL OR expires_at <= $5) \
         AND ($8 IS NULL OR credential_id = $8) AND lease_id < $6 ORDER BY lease_id DESC LIMIT $7"
    )))
    .bind(filter.tenant_id.as_deref())
    .bind(filter.run_id.as_deref())
    .bind(status)
    .bind(live_after)
    .bind(expired_by)
    .bind(before)
    .bind(i64::from(page.limit) + 1)
    .bind(filter.credential_id.as_deref())
    .fetch_all(pool)
    .await?;
    Ok(paged(leases_from(rows, now)?, page.limit, |l: &Lease| l.lease_id.clone()))
}

/// Every lease of a run, oldest first, with its credential while it exists:
/// what the door decides a request of the run by.
pub(crate) async fn door_leases(
    pool: &Pool<Db>,
    run_id: &str,
    now: UnixTime,
) -> Result<Vec<DoorLease>, StoreError> {
    let rows: Vec<LeaseRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {LEASE_COLUMNS} FROM leases WHERE run_id = $1 ORDER BY lease_id"
    )))
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    let leases = leases_from(rows, now)?;
    let mut ids: Vec<&str> = leases.iter().map(|l| l.credential_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut credentials = Vec::with_capacity(ids.len());
    for id in ids {
        let row: Option<CredentialRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_id = $1"
        )))
        .bind(id)
        .fetch_optional(pool)
        .await?;
        credentials.extend(row.map(Credential::from));
    }
    Ok(leases
        .into_iter()
        .map(|lease| {
            // Only a credential of the lease's own tenant is ever its credential.
            let credential = credentials
                .iter()
                .find(|c| c.credential_id == lease.credential_id && c.tenant_id == lease.tenant_id)
                .cloned();
            DoorLease { lease, credential }
        })
        .collect())
}
