// Tenants and their versioned settings (egress policy versions, the
// dependency gate mode, the kill switch), written once and compiled per
// backend beside `ops.rs` (same module, same helpers). Every change bumps the
// settings version under the control lock and is audited in its transaction.

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
    mcp_servers_version: i64,
    mcp_document: Option<String>,
    mcp_actor: Option<String>,
    mcp_created_at: Option<i64>,
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
        let mcp_servers = match (self.mcp_document, self.mcp_actor, self.mcp_created_at) {
            (Some(document), Some(actor), Some(created_at)) => Some(PolicyVersion {
                tenant_id: self.tenant_id.clone(),
                version: self.mcp_servers_version,
                document,
                actor,
                created_at,
            }),
            _ => None,
        };
        let mcp_servers_missing = mcp_servers.is_none() && self.mcp_servers_version != 0;
        TenantSettings {
            tenant_id: self.tenant_id,
            settings_version: self.settings_version,
            policy_missing,
            policy,
            gate_mode: self.gate_mode,
            kill_switch: self.kill_switch != 0,
            kill_switch_reason: self.kill_switch_reason,
            mcp_servers,
            mcp_servers_missing,
        }
    }
}

const TENANT_SELECT: &str = "SELECT t.tenant_id, t.settings_version, t.policy_version, t.gate_mode, t.kill_switch, \
     t.kill_switch_reason, p.document, p.actor, p.created_at, \
     (SELECT MAX(v.version) FROM policy_versions v WHERE v.tenant_id = t.tenant_id) AS newest_policy, \
     t.mcp_servers_version, m.document AS mcp_document, m.actor AS mcp_actor, m.created_at AS mcp_created_at \
     FROM tenants t LEFT JOIN policy_versions p ON p.tenant_id = t.tenant_id AND p.version = t.policy_version \
     LEFT JOIN mcp_server_versions m ON m.tenant_id = t.tenant_id AND m.version = t.mcp_servers_version";

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
            mcp_servers: None,
            mcp_servers_missing: false,
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
    set_versioned(pool, Versioned::Policy, tenant_id, document, actor, now, expected_version).await
}

pub(crate) async fn set_mcp_servers(
    pool: &Pool<Db>,
    tenant_id: &str,
    document: &str,
    actor: &str,
    now: UnixTime,
) -> Result<PolicyVersion, StoreError> {
    set_versioned(pool, Versioned::McpServers, tenant_id, document, actor, now, None).await
}

/// A new version of one of a tenant's versioned documents, stored and
/// audited in one transaction, current from then on.
async fn set_versioned(
    pool: &Pool<Db>,
    kind: Versioned,
    tenant_id: &str,
    document: &str,
    actor: &str,
    now: UnixTime,
    expected_version: Option<i64>,
) -> Result<PolicyVersion, StoreError> {
    let (table, column) = (kind.table(), kind.column());
    let mut tx = begin_write(pool).await?;
    if let Some(expected) = expected_version {
        // Read under the control lock: no other change can land between
        // this check and the write.
        let current: Option<i64> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {column} FROM tenants WHERE tenant_id = $1")))
                .bind(tenant_id)
                .fetch_optional(tx.conn())
                .await?;
        if current.unwrap_or(0) != expected {
            return Err(StoreError::Conflict);
        }
    }
    let settings = tx.bump_settings().await?;
    touch_tenant(&mut tx, tenant_id, settings, now).await?;
    let version: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "UPDATE tenants SET {column} = {column} + 1 WHERE tenant_id = $1 RETURNING {column}"
    )))
    .bind(tenant_id)
    .fetch_one(tx.conn())
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (tenant_id, version, document, actor, created_at) VALUES ($1, $2, $3, $4, $5)"
    )))
    .bind(tenant_id)
    .bind(version)
    .bind(document)
    .bind(actor)
    .bind(now)
    .execute(tx.conn())
    .await?;
    let mut detail = serde_json::json!({"version": version, "settings_version": settings});
    detail[kind.audited_as()] = serde_json::from_str::<serde_json::Value>(document).unwrap_or_default();
    tx.append_audit(&[audit_record(now, actor, kind.action(), Some(tenant_id), tenant_id, detail)]).await?;
    tx.commit().await?;
    Ok(PolicyVersion {
        tenant_id: tenant_id.to_owned(),
        version,
        document: document.to_owned(),
        actor: actor.to_owned(),
        created_at: now,
    })
}

/// A tenant's versioned documents: each version a row of its own table,
/// the tenant's row naming the current one. The names are fixed here, never
/// a caller's.
#[derive(Clone, Copy)]
enum Versioned {
    Policy,
    McpServers,
}

impl Versioned {
    fn table(self) -> &'static str {
        match self {
            Self::Policy => "policy_versions",
            Self::McpServers => "mcp_server_versions",
        }
    }

    fn column(self) -> &'static str {
        match self {
            Self::Policy => "policy_version",
            Self::McpServers => "mcp_servers_version",
        }
    }

    fn action(self) -> &'static str {
        match self {
            Self::Policy => "policy.set",
            Self::McpServers => "mcp_servers.set",
        }
    }

    /// The audit detail's field holding the document.
    fn audited_as(self) -> &'static str {
        match self {
            Self::Policy => "policy",
            Self::McpServers => "servers",
        }
    }
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
