//! Grants minted outside a run's creation, opened and spent: the checks a
//! sandbox's file, tool and outbound access goes through.
//!
//! A grant is sealed first (what could never be opened is refused before
//! anything is registered) and handed out only once registered: with the
//! ledger required, a grant that could not be registered is never handed
//! out. Every refusal is recorded.

use gatehouse_capability::GrantClaims;
use gatehouse_capability::grant::{GrantLifetime, GrantRequest};
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{Reason, RefusalKind, is_valid_id};
use gatehouse_ledger::{
    GrantRecord, LedgerBackend as _, Operation, Registration, Remaining, Status, refusal_kind, spend,
};

use crate::runs::mint_refused;
use crate::{Caller, Plane, PlaneError, Result};

/// A grant just minted.
#[derive(Debug)]
pub struct Minted {
    /// The sealed grant.
    pub token: String,
    /// What it grants.
    pub claims: GrantClaims,
}

/// What opening a grant found.
#[derive(Debug)]
pub enum Opened {
    /// Valid: its claims and its ledger record, where there is one.
    Valid(Box<GrantClaims>, Option<Box<GrantRecord>>),
    /// Refused (recorded), for this reason.
    Refused(Reason),
}

impl Plane {
    /// Records a refusal of what a grant's run asked.
    fn grant_refused(&self, request_id: &str, claims: &GrantClaims, kind: RefusalKind, reason: Reason) {
        self.refusals.record(
            kind,
            reason,
            claims.tenant_id.as_deref(),
            Some(&claims.exec_id),
            Some(request_id),
        );
    }

    /// Opens a grant token, recording a refusal when it does not open. The
    /// outer error is for nodes that hold no grant secret.
    pub fn open_token(&self, request_id: &str, token: Option<&str>) -> Result<Result<GrantClaims, Reason>> {
        let sealer = self.sealer.as_ref().ok_or(PlaneError::NotServed)?;
        Ok(sealer.open(token.unwrap_or_default().trim(), self.clock.now()).inspect_err(|reason| {
            self.refusals.record(RefusalKind::GrantRefused, *reason, None, None, Some(request_id));
        }))
    }

    /// Mints a grant for a tenant the caller may act on (an exec id that is
    /// a run names that run's tenant); a kill-switched tenant gets none.
    pub async fn mint_grant(&self, request_id: &str, caller: &Caller, req: GrantRequest) -> Result<Minted> {
        let (Some(sealer), Some(sessions)) = (self.sealer.as_ref(), self.sessions.as_ref()) else {
            return Err(PlaneError::NotServed);
        };
        self.require(request_id, caller, req.tenant_id.as_deref())?;
        if is_valid_id(&req.exec_id) && caller.tenants.is_some() {
            self.reach_run(request_id, caller, &req.exec_id).await?;
        }
        // A tenant whose kill switch is engaged gets no grant, as it gets no run.
        self.refuse_kill_switched(request_id, req.tenant_id.as_deref(), Some(&req.exec_id)).await?;
        let principal = Principal { tenant_id: req.tenant_id.clone(), user_id: req.user_id.clone() };
        let session_key = sessions.derive(&principal, &Namespace::Output).map_err(|reason| {
            self.refusals.record(
                RefusalKind::GrantRefused,
                reason,
                None,
                Some(&req.exec_id),
                Some(request_id),
            );
            PlaneError::refusal(reason)
        })?;
        let lifetime = GrantLifetime {
            default_secs: self.settings.grant_ttl_secs,
            max_secs: self.settings.grant_max_lifetime_secs,
        };
        let claims = req.into_claims(session_key, self.clock.now(), lifetime).map_err(|e| {
            tracing::info!(request_id, error = %e, "grant request rejected");
            mint_refused(request_id, e)
        })?;
        let token = sealer.mint(&claims).map_err(|e| mint_refused(request_id, e))?;
        if let Some(ledger) = self.ledger.as_ref() {
            match ledger.register(&Registration::from(&claims)).await {
                Ok(_) => {}
                Err(Reason::LedgerUnavailable) if !self.settings.ledger_required => {
                    tracing::warn!(request_id, "grant minted without a ledger record (ledger not required)");
                }
                Err(Reason::LedgerUnavailable) => {
                    return Err(PlaneError::unavailable(Reason::LedgerUnavailable));
                }
                Err(reason) => {
                    self.grant_refused(request_id, &claims, RefusalKind::GrantRefused, reason);
                    return Err(PlaneError::refusal(reason));
                }
            }
        }
        // Checked again once registered: a switch engaged since the first
        // check is seen here, or its second revocation marker (written
        // after the switch is stored) comes after this registration and
        // revokes it.
        self.minted(request_id, caller, &claims).await?;
        Ok(Minted { token, claims })
    }

    /// Opens a grant for a caller that may act on its tenant: valid with
    /// its ledger record, or refused (revoked; with the ledger required,
    /// unknown to it or unreadable).
    pub async fn open_grant(&self, request_id: &str, caller: &Caller, token: Option<&str>) -> Result<Opened> {
        let claims = match self.open_token(request_id, token)? {
            Ok(claims) => claims,
            Err(reason) => return Ok(Opened::Refused(reason)),
        };
        self.require(request_id, caller, claims.tenant_id.as_deref())?;
        let record = match self.ledger.as_ref() {
            Some(ledger) => ledger.get(&claims.grant_id).await,
            None => Ok(None),
        };
        let required = self.settings.ledger_required;
        let refusal = match &record {
            Ok(Some(r)) if r.status == Status::Revoked => Some(Reason::GrantRevoked),
            Ok(None) if required => Some(Reason::GrantUnknown),
            Err(reason) if required => Some(*reason),
            _ => None,
        };
        if let Some(reason) = refusal {
            self.grant_refused(request_id, &claims, RefusalKind::GrantRefused, reason);
            return Ok(Opened::Refused(reason));
        }
        Ok(Opened::Valid(Box::new(claims), record.ok().flatten().map(Box::new)))
    }

    /// Spends one operation of a grant: the check every outbound request
    /// and file or tool access makes. Opens the grant, then consumes
    /// atomically; the grant's id and what remains, or the refusal
    /// (recorded).
    pub async fn consume_grant(
        &self,
        request_id: &str,
        caller: &Caller,
        token: Option<&str>,
        operation: &Operation,
    ) -> Result<Result<(String, Option<Remaining>), Reason>> {
        let ledger = self.ledger()?;
        let claims = match self.open_token(request_id, token)? {
            Ok(claims) => claims,
            Err(reason) => return Ok(Err(reason)),
        };
        self.require(request_id, caller, claims.tenant_id.as_deref())?;
        let now = self.clock.now();
        match spend(ledger, &claims.grant_id, operation, now, self.settings.ledger_required).await {
            Ok(remaining) => Ok(Ok((claims.grant_id, remaining))),
            Err(reason) => {
                self.grant_refused(request_id, &claims, refusal_kind(reason), reason);
                Ok(Err(reason))
            }
        }
    }
}
