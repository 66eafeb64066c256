// Egress proposals, written once and compiled per backend beside `ops.rs`
// (same module, same helpers). Deciding one is audited in its transaction;
// approving one for its run bumps the tenant's settings version, so every
// node's policy replica takes the run's new rule in.

const PROPOSAL_COLUMNS: &str = "proposal_id, tenant_id, run_id, host, rule, why, status, scope, decided_by, \
     decided_at, created_at, expires_at";

/// Records `new` unless it is recorded already (the same ask of the same
/// run): the proposal, and whether it is new. A new one is refused
/// (`proposal_limit`) when its run or tenant has as many live pending
/// proposals as `limits` allow.
pub(crate) async fn propose(
    pool: &Pool<Db>,
    new: &proposals::NewProposal,
    limits: proposals::ProposalLimits,
) -> Result<(proposals::Proposal, bool), StoreError> {
    let mut tx = begin_write(pool).await?;
    let existing: Option<proposals::Proposal> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROPOSAL_COLUMNS} FROM egress_proposals WHERE proposal_id = $1"
    )))
    .bind(&new.proposal_id)
    .fetch_optional(tx.conn())
    .await?;
    if let Some(existing) = existing {
        return Ok((existing, false));
    }
    let (per_run, per_tenant): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(SUM(CASE WHEN run_id = $2 THEN 1 ELSE 0 END), 0), COUNT(*) FROM egress_proposals \
         WHERE tenant_id = $1 AND status = 'pending' AND expires_at > $3",
    )
    .bind(&new.tenant_id)
    .bind(&new.run_id)
    .bind(new.created_at)
    .fetch_one(tx.conn())
    .await?;
    if per_run >= limits.per_run || per_tenant >= limits.per_tenant {
        return Err(StoreError::Refused(gatehouse_core::Reason::ProposalLimit));
    }
    sqlx::query(
        "INSERT INTO egress_proposals (proposal_id, tenant_id, run_id, host, rule, why, status, created_at, \
         expires_at) VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8)",
    )
    .bind(&new.proposal_id)
    .bind(&new.tenant_id)
    .bind(&new.run_id)
    .bind(&new.host)
    .bind(&new.rule)
    .bind(&new.why)
    .bind(new.created_at)
    .bind(new.expires_at)
    .execute(tx.conn())
    .await?;
    tx.commit().await?;
    let proposal = proposals::Proposal {
        proposal_id: new.proposal_id.clone(),
        tenant_id: new.tenant_id.clone(),
        run_id: new.run_id.clone(),
        host: new.host.clone(),
        rule: new.rule.clone(),
        why: new.why.clone(),
        status: "pending".into(),
        scope: None,
        decided_by: None,
        decided_at: None,
        created_at: new.created_at,
        expires_at: new.expires_at,
    };
    Ok((proposal, true))
}

pub(crate) async fn proposal(pool: &Pool<Db>, proposal_id: &str) -> Result<Option<proposals::Proposal>, StoreError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROPOSAL_COLUMNS} FROM egress_proposals WHERE proposal_id = $1"
    )))
    .bind(proposal_id)
    .fetch_optional(pool)
    .await?)
}

/// A tenant's proposals, newest first; `pending` lists the live pending
/// ones at `now`, `expired` the pending ones past their expiry.
pub(crate) async fn proposals(
    pool: &Pool<Db>,
    tenant_id: &str,
    status: Option<&str>,
    now: UnixTime,
    page: &PageRequest,
) -> Result<Page<proposals::Proposal>, StoreError> {
    let (before_at, before_id) = match page.cursor.as_deref().and_then(|c| c.split_once(':')) {
        Some((at, id)) => (at.parse::<i64>().map_err(|_| StoreError::Corrupt)?, id.to_owned()),
        None => (i64::MAX, String::new()),
    };
    let (stored, live) = match status {
        Some("pending") => (Some("pending"), Some(true)),
        Some("expired") => (Some("pending"), Some(false)),
        Some(other) => (Some(other), None),
        None => (None, None),
    };
    let rows: Vec<proposals::Proposal> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROPOSAL_COLUMNS} FROM egress_proposals WHERE tenant_id = $1 \
         AND ($2 IS NULL OR status = $2) \
         AND ($3 IS NULL OR ($3 = 1 AND expires_at > $4) OR ($3 = 0 AND expires_at <= $4)) \
         AND (created_at < $5 OR (created_at = $5 AND ($6 = '' OR proposal_id < $6))) \
         ORDER BY created_at DESC, proposal_id DESC LIMIT $7"
    )))
    .bind(tenant_id)
    .bind(stored)
    .bind(live.map(i64::from))
    .bind(now)
    .bind(before_at)
    .bind(&before_id)
    .bind(i64::from(page.limit) + 1)
    .fetch_all(pool)
    .await?;
    Ok(paged(rows, page.limit, |p: &proposals::Proposal| format!("{}:{}", p.created_at, p.proposal_id)))
}

/// Decides a pending, live proposal and audits it (`proposal.approve`,
/// `proposal.deny`); one decided already or expired is `conflict`.
/// Approving for the run bumps the tenant's settings version.
pub(crate) async fn decide_proposal(
    pool: &Pool<Db>,
    proposal_id: &str,
    approve: bool,
    scope: Option<&str>,
    actor: &str,
    now: UnixTime,
) -> Result<proposals::Proposal, StoreError> {
    let mut tx = begin_write(pool).await?;
    let found: Option<proposals::Proposal> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {PROPOSAL_COLUMNS} FROM egress_proposals WHERE proposal_id = $1"
    )))
    .bind(proposal_id)
    .fetch_optional(tx.conn())
    .await?;
    let mut proposal = found.ok_or(StoreError::NotFound)?;
    if proposal.status_at(now) != "pending" {
        return Err(StoreError::Conflict);
    }
    let status = if approve { "approved" } else { "denied" };
    let scope = scope.filter(|_| approve);
    sqlx::query(
        "UPDATE egress_proposals SET status = $2, scope = $3, decided_by = $4, decided_at = $5 \
         WHERE proposal_id = $1",
    )
    .bind(proposal_id)
    .bind(status)
    .bind(scope)
    .bind(actor)
    .bind(now)
    .execute(tx.conn())
    .await?;
    if scope == Some("run") {
        let settings = tx.bump_settings().await?;
        touch_tenant(&mut tx, &proposal.tenant_id, settings, now).await?;
    }
    let action = if approve { "proposal.approve" } else { "proposal.deny" };
    let detail = serde_json::json!({"proposal_id": proposal_id, "run_id": proposal.run_id,
        "rule": serde_json::from_str::<serde_json::Value>(&proposal.rule).unwrap_or_default(),
        "scope": scope, "why": proposal.why});
    tx.append_audit(&[audit_record(now, actor, action, Some(&proposal.tenant_id), proposal_id, detail)])
        .await?;
    tx.commit().await?;
    proposal.status = status.to_owned();
    proposal.scope = scope.map(str::to_owned);
    proposal.decided_by = Some(actor.to_owned());
    proposal.decided_at = Some(now);
    Ok(proposal)
}

/// The rules approved for their run alone, of every live run: (tenant,
/// run, rule as a policy entry's JSON), oldest first. One query however
/// many tenants changed: the set is bounded by the live runs.
pub(crate) async fn run_rules(pool: &Pool<Db>) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT p.tenant_id, p.run_id, p.rule FROM egress_proposals p JOIN runs r ON r.run_id = p.run_id \
         WHERE p.status = 'approved' AND p.scope = 'run' AND r.status = 'live' \
         ORDER BY p.decided_at, p.proposal_id",
    )
    .fetch_all(pool)
    .await?)
}
