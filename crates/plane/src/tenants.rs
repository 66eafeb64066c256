//! Tenants' durable settings (egress policy, dependency gate, kill
//! switch), emergency revoke, and the checks and audit entries grants
//! minted outside a run go through.

use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, RefusalKind};
use gatehouse_egress::{Policy, PolicyDocument};
use gatehouse_ledger::{LedgerBackend as _, RevokeScope};
use gatehouse_store::{AuditRecord, Ended, PolicyVersion, RunStatus, StoreError};
use serde_json::json;

use crate::{Caller, Plane, PlaneError, Result};

/// The gate modes a tenant may set.
pub const GATE_MODES: [&str; 3] = ["off", "high", "critical"];

/// The gate mode of a tenant that never set one.
pub const DEFAULT_GATE_MODE: &str = "high";

/// What one revocation step revoked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revoked {
    /// Runs killed.
    pub runs: usize,
    /// Grants revoked in the ledger.
    pub grants: u64,
    /// Leases revoked.
    pub leases: u64,
    /// The second revocation marker (after the store's change) is not
    /// written yet: the ledger stopped answering between the two. The
    /// runs are killed and recorded; the marker is retried in the
    /// background, and calling again writes it too.
    pub second_marker_pending: bool,
}

/// What a caller is told when the ledger stopped answering between the two markers.
pub const SECOND_MARKER_PENDING: &str = "the runs were killed and recorded and every grant registered before the \
     first revocation marker is revoked, but the second marker (which revokes grants registered meanwhile) \
     could not be written: it is retried; call again to be sure";

/// What a caller is told when the store could not record the change after the first marker.
const STORE_AFTER_FIRST_MARKER: &str = "every grant registered so far is revoked in the ledger, but the store \
     could not record the change (no run is recorded killed, no switch engaged): call again";

/// What an unreadable policy document is refused with.
const POLICY_UNREADABLE: &str =
    "the policy is unreadable: entries are host, *.domain, IP or CIDR, optionally :port";

impl Plane {
    /// A tenant's current egress policy (`None`: it never set one, and is open).
    pub async fn policy(&self, tenant_id: &str) -> Result<Option<PolicyVersion>> {
        Ok(self.store()?.current_policy(tenant_id).await?)
    }

    /// Stores a new version of a tenant's egress policy. An unreadable
    /// document is refused here (`policy_unreadable`, nothing stored), so a
    /// typo never reaches the door. With `expected_version`, only if the
    /// current one is still that version (else `policy_stale`). This node's
    /// replica is refreshed before the answer, the others' within a poll.
    pub async fn set_policy(
        &self,
        request_id: &str,
        tenant_id: &str,
        doc: &PolicyDocument,
        actor: &str,
        expected_version: Option<i64>,
    ) -> Result<PolicyVersion> {
        Policy::from_document(doc).map_err(|e| {
            tracing::info!(request_id, error = %e, "egress policy rejected");
            PlaneError::Invalid { message: POLICY_UNREADABLE, reason: Some(Reason::PolicyUnreadable) }
        })?;
        let store = self.store()?;
        let document =
            serde_json::to_string(doc).map_err(|_| PlaneError::Internal("policy_unserializable"))?;
        let now = self.clock.now();
        let stored = match expected_version {
            Some(expected) => store.set_policy_if_version(tenant_id, &document, actor, now, expected).await,
            None => store.set_policy(tenant_id, &document, actor, now).await,
        }
        .map_err(|e| match e {
            StoreError::Conflict => PlaneError::Conflict(Some(Reason::PolicyStale)),
            e => e.into(),
        })?;
        if let Err(e) = self.policies.refresh(store).await {
            tracing::warn!(code = e.code(), "policy replica not refreshed; the poll will catch up");
        }
        tracing::info!(request_id, tenant_id, version = stored.version, mode = ?doc.mode,
            dry_run = doc.dry_run, "egress policy set");
        Ok(stored)
    }

    /// A tenant's dependency gate mode.
    pub async fn gate_mode(&self, tenant_id: &str) -> Result<String> {
        let tenant = self.store()?.tenant(tenant_id).await?;
        Ok(tenant.map_or_else(|| DEFAULT_GATE_MODE.to_owned(), |t| t.gate_mode))
    }

    /// Sets a tenant's dependency gate mode (`off`, `high`, `critical`), audited.
    pub async fn set_gate_mode(&self, tenant_id: &str, mode: &str, actor: &str) -> Result<()> {
        if !GATE_MODES.contains(&mode) {
            return Err(PlaneError::invalid("mode is off, high or critical"));
        }
        Ok(self.store()?.set_gate_mode(tenant_id, mode, actor, self.clock.now()).await?)
    }

    /// Revokes a scope in the ledger; an outage is the caller's error.
    async fn revoke_scope(&self, scope: &RevokeScope) -> Result<u64> {
        self.ledger()?.revoke(scope).await.map_err(PlaneError::unavailable)
    }

    /// Engages or releases a tenant's kill switch. Engaging revokes every
    /// grant of the tenant (one marker), kills its live runs and refuses
    /// new ones until released; a second marker after the store's change
    /// covers a run registered while the switch was being thrown.
    pub async fn throw_kill_switch(
        &self,
        request_id: &str,
        tenant_id: &str,
        engaged: bool,
        reason: Option<&str>,
        actor: &str,
    ) -> Result<Revoked> {
        crate::check_text(reason)?;
        let store = self.store()?;
        let now = self.clock.now();
        if !engaged {
            store.set_kill_switch(tenant_id, false, reason, actor, now).await?;
            return Ok(Revoked::default());
        }
        let scope = RevokeScope::Tenant(tenant_id.to_owned());
        let before = self.revoke_scope(&scope).await?;
        let killed =
            store.set_kill_switch(tenant_id, true, reason, actor, now).await.map_err(after_first_marker)?;
        tracing::warn!(request_id, tenant_id, runs = killed.runs.len(), "kill switch engaged");
        Ok(self.second_marker(request_id, scope, before, &killed).await)
    }

    /// Every grant revoked (one marker) and every live run of every tenant
    /// killed, in one step.
    pub async fn revoke_everything(
        &self,
        request_id: &str,
        reason: Option<&str>,
        actor: &str,
    ) -> Result<Revoked> {
        crate::check_text(reason)?;
        let store = self.store()?;
        let before = self.revoke_scope(&RevokeScope::All).await?;
        let reason = reason.unwrap_or("emergency_revoke");
        let killed =
            store.kill_all_runs(reason, actor, self.clock.now()).await.map_err(after_first_marker)?;
        tracing::warn!(request_id, runs = killed.runs.len(), "emergency revoke");
        Ok(self.second_marker(request_id, RevokeScope::All, before, &killed).await)
    }

    /// After the store killed `killed`: their `run_ended` events, then the
    /// second marker, which revokes what was registered between the two. A
    /// ledger that stopped answering meanwhile does not undo what was done:
    /// it is reported (`second_marker_pending`), and the marker is retried
    /// in the background until it is written (or every grant that could
    /// have been registered meanwhile is past its lifetime).
    async fn second_marker(
        &self,
        request_id: &str,
        scope: RevokeScope,
        before: u64,
        killed: &Ended,
    ) -> Revoked {
        self.after_runs_ended(&killed.runs);
        let mut revoked = Revoked {
            runs: killed.runs.len(),
            grants: before,
            leases: killed.leases,
            second_marker_pending: false,
        };
        match self.revoke_scope(&scope).await {
            Ok(after) => revoked.grants += after,
            Err(_) => {
                tracing::error!(
                    request_id,
                    ?scope,
                    "the second revocation marker could not be written; retrying it in the background"
                );
                revoked.second_marker_pending = true;
                let (plane, request_id) = (self.clone(), request_id.to_owned());
                tokio::spawn(async move {
                    let give_up = plane.clock.now() + plane.settings.grant_max_lifetime_secs;
                    while plane.clock.now() < give_up {
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        if plane.revoke_scope(&scope).await.is_ok() {
                            tracing::info!(request_id, ?scope, "the second revocation marker is written");
                            plane.close_revoked_connections();
                            return;
                        }
                    }
                });
            }
        }
        revoked
    }

    /// Revokes grants in the ledger alone (`POST /v1/grants/.../revoke`),
    /// closes their connections here, and audits it as part of the call:
    /// one that cannot be audited fails (`store_unavailable`: the
    /// revocation stands, and calling again, which revokes nothing more,
    /// audits it). How many grants it revoked.
    ///
    /// A bound caller revokes a run's grants only for a run of its own
    /// tenants (an exec id that is no run may be any tenant's), a tenant's
    /// only for its own, and every grant never. (A single grant's tenant is
    /// the ledger's record of it, which the API's edge checks.)
    pub async fn revoke_grants(&self, request_id: &str, caller: &Caller, scope: &RevokeScope) -> Result<u64> {
        match scope {
            RevokeScope::Exec(exec) if caller.tenants.is_some() => {
                if self.reach_run(request_id, caller, exec).await?.is_none() {
                    return Err(self.not_allowed(request_id, caller, None));
                }
            }
            RevokeScope::Tenant(tenant) => self.require(request_id, caller, Some(tenant))?,
            RevokeScope::All => self.require_global(request_id, caller)?,
            RevokeScope::Exec(_) | RevokeScope::Grant(_) => {}
        }
        let revoked = self.revoke_scope(scope).await?;
        tracing::info!(request_id, ?scope, revoked, "grants revoked");
        self.close_revoked_connections();
        if let Some(store) = self.store.as_ref() {
            let record = revocation_record(&caller.name, self.clock.now(), scope, revoked);
            store.audit(&[record]).await.map_err(|e| {
                tracing::error!(request_id, code = e.code(),
                    "grants were revoked, but the revocation could not be audited: the call fails, and a retry audits it");
                PlaneError::from(e)
            })?;
        }
        Ok(revoked)
    }

    /// `tenant_kill_switch` (recorded) when `tenant`'s kill switch is
    /// engaged. A store that cannot say is `store_unavailable`: no grant is
    /// minted on a guess.
    pub async fn refuse_kill_switched(
        &self,
        request_id: &str,
        tenant: Option<&str>,
        exec_id: Option<&str>,
    ) -> Result<()> {
        let (Some(tenant), Some(store)) = (tenant, self.store.as_ref()) else { return Ok(()) };
        let settings = store.tenant(tenant).await?;
        if settings.is_some_and(|t| t.kill_switch) {
            self.refusals.record(
                RefusalKind::GrantRefused,
                Reason::TenantKillSwitch,
                Some(tenant),
                exec_id,
                Some(request_id),
            );
            return Err(PlaneError::Refused(Reason::TenantKillSwitch));
        }
        Ok(())
    }

    /// After a grant minted outside a run's creation is registered: its
    /// tenant's kill switch checked again (engaged meanwhile: the grant is
    /// revoked and refused), then the mint audited (`grant.mint`: ids and a
    /// summary of its scope, never the token). A mint that cannot be
    /// audited is revoked and refused: no grant is handed out unrecorded.
    pub async fn minted(&self, request_id: &str, caller: &Caller, claims: &GrantClaims) -> Result<()> {
        let Some(store) = self.store.as_ref() else { return Ok(()) };
        let tenant = claims.tenant_id.as_deref();
        let revoke_it = || async {
            if let Some(ledger) = self.ledger.as_ref()
                && ledger.revoke(&RevokeScope::Grant(claims.grant_id.clone())).await.is_err()
            {
                tracing::error!(request_id, grant_id = %claims.grant_id,
                    "a refused grant could not be revoked; it expires at its exp");
            }
        };
        if let Err(refused) = self.refuse_kill_switched(request_id, tenant, Some(&claims.exec_id)).await {
            revoke_it().await;
            return Err(refused);
        }
        let record = AuditRecord {
            at: self.clock.now(),
            actor: caller.name.clone(),
            action: "grant.mint".into(),
            tenant_id: claims.tenant_id.clone(),
            subject: claims.grant_id.clone(),
            detail: json!({
                "grant_id": claims.grant_id,
                "tenant_id": claims.tenant_id,
                "exec_id": claims.exec_id,
                "user_id": claims.user_id,
                "exp": claims.exp,
                "scope": {
                    "input_files": claims.input_files.len(),
                    "read_sessions": claims.read_sessions.len(),
                    "output_session_id": claims.output_session_id,
                    "max_requests": claims.max_requests,
                    "max_upload_bytes": claims.max_upload_bytes,
                    "max_output_files": claims.max_output_files,
                    "max_egress_bytes": claims.max_egress_bytes,
                    "max_tool_calls": claims.max_tool_calls,
                },
            }),
        };
        if let Err(e) = store.audit(&[record]).await {
            tracing::error!(request_id, code = e.code(), "a grant mint could not be audited; revoked");
            revoke_it().await;
            return Err(e.into());
        }
        Ok(())
    }

    /// The tenant and run a content scan's refusal is recorded under. A
    /// tenant named must be one the caller may act on; a run named must be
    /// of such a tenant (and of the tenant named, if both are), and the
    /// refusal becomes one of its events only while it is live: otherwise
    /// it is kept for the tenant alone.
    pub async fn scan_attachment(
        &self,
        request_id: &str,
        caller: &Caller,
        tenant_id: Option<String>,
        run_id: Option<String>,
    ) -> Result<(Option<String>, Option<String>)> {
        let Some(run_id) = run_id else {
            if let Some(tenant) = &tenant_id {
                self.require(request_id, caller, Some(tenant))?;
            }
            return Ok((tenant_id, None));
        };
        let run = match self.store.as_ref() {
            Some(_) => self.reach_run(request_id, caller, &run_id).await?,
            None => None,
        };
        match run {
            Some(run) if tenant_id.as_ref().is_some_and(|t| *t != run.tenant_id) => {
                Err(PlaneError::invalid("run_id is not a run of tenant_id"))
            }
            Some(run) if run.status == RunStatus::Live => Ok((Some(run.tenant_id), Some(run.run_id))),
            Some(run) => Ok((Some(run.tenant_id), None)),
            None => {
                if let Some(tenant) = &tenant_id {
                    self.require(request_id, caller, Some(tenant))?;
                } else if caller.tenants.is_some() {
                    // An unknown run names no tenant of the caller's.
                    return Err(self.not_allowed(request_id, caller, None));
                }
                Ok((tenant_id, None))
            }
        }
    }
}

/// A store failure after the first marker, told as what it is: every grant
/// registered so far is revoked, nothing is recorded.
fn after_first_marker(e: StoreError) -> PlaneError {
    match e {
        StoreError::Unavailable | StoreError::Full => {
            PlaneError::Unavailable { reason: e.reason(), message: Some(STORE_AFTER_FIRST_MARKER) }
        }
        e => e.into(),
    }
}

/// The audit entry of a ledger-only revocation (`POST /v1/grants/.../revoke`,
/// `gatehouse grant revoke`): `grants.revoke` with the scope and how many
/// grants it revoked.
pub fn revocation_record(actor: &str, at: i64, scope: &RevokeScope, revoked: u64) -> AuditRecord {
    let (tenant_id, subject) = match scope {
        RevokeScope::Grant(id) | RevokeScope::Exec(id) => (None, id.clone()),
        RevokeScope::Tenant(t) => (Some(t.clone()), t.clone()),
        RevokeScope::All => (None, "all".to_owned()),
    };
    let scope_name = match scope {
        RevokeScope::Grant(_) => "grant",
        RevokeScope::Exec(_) => "exec",
        RevokeScope::Tenant(_) => "tenant",
        RevokeScope::All => "all",
    };
    AuditRecord {
        at,
        actor: actor.to_owned(),
        action: "grants.revoke".into(),
        tenant_id,
        subject,
        detail: json!({"scope": scope_name, "revoked": revoked}),
    }
}
