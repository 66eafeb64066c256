//! Egress proposals: a run asks for one exact rule its tenant's policy
//! refuses, and a person approves it once (an allow rule for that run
//! alone, gone when the run ends), always (a new policy version with
//! exactly that rule), or denies it.
//!
//! The rules (every one stated here, once):
//! - A proposal is one exact rule (`gatehouse_egress::policy::proposal`):
//!   an exact host (never a wildcard or a range), optionally methods and
//!   paths. Nobody is asked to open what no policy may open: a
//!   special-purpose address, a metadata or special-use name, a host the
//!   tenant denies.
//! - The same ask of one run is one proposal: its id is derived from the
//!   run and the rule. Pending proposals expire after
//!   [`PROPOSAL_LIFETIME_SECS`] (or with their run) and are capped per run
//!   and per tenant ([`LIMITS`]).
//! - Only a live run's pending proposal is decided; each decision is an
//!   audit entry naming the person (`proposal.approve`, `proposal.deny`)
//!   and an event of the run. Approved for the run, the rule is in force
//!   on this node before the call returns and on every node within a poll
//!   of the policy replica (the tenant's settings version moves); approved
//!   for the tenant, it is a new policy version, written like any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use gatehouse_core::{Clock, Reason, UnixTime};
use gatehouse_egress::policy::proposal::{ProposalSink, ProposedRule};
use gatehouse_egress::policy::{Entry, PolicyDocument};
use gatehouse_egress::proxy::PolicySource as _;
use gatehouse_egress::target::parse_authority;
use gatehouse_egress::{AddressGuard, Policy};
use gatehouse_store::proposals::{NewProposal, Proposal, ProposalLimits};
use gatehouse_store::{NewEvent, Page, PageRequest, RunStatus, Store, StoreError};
use sha2::{Digest as _, Sha256};

use crate::{Caller, Plane, PlaneError, Result};

/// How long a pending proposal waits for a person.
pub const PROPOSAL_LIFETIME_SECS: i64 = 3600;
/// Pending proposals a run, and a tenant, may have at once.
pub const LIMITS: ProposalLimits = ProposalLimits { per_run: 20, per_tenant: 200 };
/// The longest `why` a proposal keeps.
const MAX_WHY: usize = 500;

/// A run's ask, as the face read it.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The exact host (`host` or `host:port`).
    pub host: String,
    /// The methods asked for.
    pub methods: Option<Vec<String>>,
    /// The paths asked for.
    pub paths: Option<Vec<String>>,
    /// Why, for the person.
    pub why: String,
}

/// How a person decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// For the run alone, until it ends.
    ApproveOnce,
    /// A new policy version with exactly the rule.
    ApproveAlways,
    /// No.
    Deny,
}

/// A proposal not found, as every route says it.
const fn proposal_unknown() -> PlaneError {
    PlaneError::NotFound(Some(Reason::ProposalUnknown))
}

/// The id of `run_id`'s ask for `rule`: the same ask is one proposal.
fn proposal_id(run_id: &str, rule: &str) -> String {
    let digest = Sha256::digest(format!("{run_id}\n{rule}").as_bytes());
    format!("prop_{}", &hex::encode(digest)[..32])
}

impl Plane {
    /// The rule `ask` is for, checked as a policy entry: an exact host,
    /// methods and paths as a rule may name them.
    fn asked_rule(ask: &Ask) -> Result<ProposedRule> {
        let invalid = |message| PlaneError::Invalid { message, reason: Some(Reason::PolicyUnreadable) };
        let (host, port) = parse_authority(ask.host.trim())
            .map_err(|_| invalid("host is one exact host name or address, optionally with :port"))?;
        let mut entry = serde_json::json!({"host": ask.host.trim()});
        if let Some(methods) = &ask.methods {
            entry["methods"] = serde_json::json!(methods);
        }
        if let Some(paths) = &ask.paths {
            entry["paths"] = serde_json::json!(paths);
        }
        let doc = serde_json::json!({"mode": "allowlist", "allow": [entry]});
        Policy::from_json(doc.to_string().as_bytes()).map_err(|_| {
            invalid("methods (upper case, registered) and paths (absolute, unambiguous) read as a rule's")
        })?;
        let methods = ask.methods.as_ref().map(|m| {
            m.iter().filter_map(|name| http::Method::from_bytes(name.as_bytes()).ok()).collect::<Vec<_>>()
        });
        let paths = match &ask.paths {
            None => None,
            Some(paths) => Some(
                paths
                    .iter()
                    .map(|p| gatehouse_egress::policy::path::rule_path(p))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(invalid)?,
            ),
        };
        Ok(ProposedRule { host, port, methods, paths })
    }

    /// The proposal a run makes (`POST /v1/runs/{run_id}/egress-proposals`):
    /// its run live and the caller's tenant's, the rule one a person may
    /// be asked for under the tenant's policy and `guard`. Whether it is
    /// new: the same ask again is the same proposal.
    pub async fn propose(
        &self,
        request_id: &str,
        caller: &Caller,
        run_id: &str,
        ask: &Ask,
        guard: &AddressGuard,
    ) -> Result<(Proposal, bool)> {
        if !caller.may_act_on_run(run_id) {
            return Err(PlaneError::run_unknown());
        }
        let run = self.reach_run(request_id, caller, run_id).await?.ok_or_else(PlaneError::run_unknown)?;
        if run.status != RunStatus::Live {
            return Err(PlaneError::Conflict(Some(Reason::RunNotLive)));
        }
        if ask.why.trim().is_empty()
            || ask.why.chars().count() > MAX_WHY
            || ask.why.chars().any(char::is_control)
        {
            return Err(PlaneError::invalid("why is 1-500 characters without control characters"));
        }
        let rule = Self::asked_rule(ask)?;
        let policy = self.policies.policy(Some(&run.tenant_id)).map_err(|e| PlaneError::refusal(e.reason))?;
        rule.askable(&policy, guard, self.clock.now()).map_err(PlaneError::Refused)?;
        let asks = self.asks.as_ref().ok_or(PlaneError::NotServed)?;
        asks.record(&run.tenant_id, &run.run_id, &rule, ask.why.trim()).await
    }

    /// One proposal, for a caller that may act on its tenant.
    pub async fn proposal(&self, request_id: &str, caller: &Caller, proposal_id: &str) -> Result<Proposal> {
        let proposal = self.store()?.proposal(proposal_id).await?.ok_or_else(proposal_unknown)?;
        if !caller.may_act_on_run(&proposal.run_id) {
            return Err(proposal_unknown());
        }
        self.require(request_id, caller, Some(&proposal.tenant_id))?;
        Ok(proposal)
    }

    /// A tenant's proposals by status (see `Store::proposals`).
    pub async fn proposals(
        &self,
        request_id: &str,
        caller: &Caller,
        tenant_id: &str,
        status: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<Proposal>> {
        self.require(request_id, caller, Some(tenant_id))?;
        if status.is_some_and(|s| !matches!(s, "pending" | "approved" | "denied" | "expired")) {
            return Err(PlaneError::invalid("status is pending, approved, denied or expired"));
        }
        Ok(self.store()?.proposals(tenant_id, status, self.clock.now(), page).await?)
    }

    /// A person's decision on a pending proposal of a live run (see the
    /// module docs). `actor` is who decided, as the audit log names them.
    pub async fn decide_proposal(
        &self,
        request_id: &str,
        caller: &Caller,
        proposal_id: &str,
        decision: Decision,
        actor: &str,
    ) -> Result<Proposal> {
        let store = self.store()?;
        if caller.run_id.is_some() {
            // A run asks; only a person decides.
            return Err(PlaneError::NotServed);
        }
        let proposal = self.proposal(request_id, caller, proposal_id).await?;
        let now = self.clock.now();
        if proposal.status_at(now) != "pending" {
            return Err(PlaneError::Conflict(Some(Reason::ProposalNotPending)));
        }
        let run = store.run(&proposal.run_id).await?;
        if run.is_none_or(|r| r.status != RunStatus::Live) {
            return Err(PlaneError::Conflict(Some(Reason::RunNotLive)));
        }
        if decision == Decision::ApproveAlways {
            self.add_to_policy(request_id, &proposal, actor).await?;
        }
        let (approve, scope) = match decision {
            Decision::ApproveOnce => (true, Some("run")),
            Decision::ApproveAlways => (true, Some("tenant")),
            Decision::Deny => (false, None),
        };
        let decided =
            store.decide_proposal(proposal_id, approve, scope, actor, now).await.map_err(|e| match e {
                StoreError::Conflict => PlaneError::Conflict(Some(Reason::ProposalNotPending)),
                StoreError::NotFound => proposal_unknown(),
                e => e.into(),
            })?;
        if let Err(e) = self.policies.refresh(store).await {
            tracing::warn!(code = e.code(), "policy replica not refreshed; the poll will catch up");
        }
        let kind = if approve { "egress_proposal_approved" } else { "egress_proposal_denied" };
        self.refusals.record_event(proposal_event(&decided, kind, scope, now));
        tracing::info!(request_id, proposal_id, ?decision, "egress proposal decided");
        Ok(decided)
    }

    /// A new policy version with exactly the proposal's rule (once: a rule
    /// already there is not added again).
    async fn add_to_policy(&self, request_id: &str, proposal: &Proposal, actor: &str) -> Result<()> {
        let store = self.store()?;
        let current = store.current_policy(&proposal.tenant_id).await?;
        let (mut doc, version) = match &current {
            Some(p) => (
                serde_json::from_str::<PolicyDocument>(&p.document).map_err(|_| PlaneError::Invalid {
                    message: "the current policy does not read",
                    reason: Some(Reason::PolicyUnreadable),
                })?,
                p.version,
            ),
            None => (PolicyDocument::default(), 0),
        };
        let entry: Entry = serde_json::from_str(&proposal.rule)
            .map_err(|_| PlaneError::Internal("proposal_rule_unreadable"))?;
        if !doc.allow.contains(&entry) {
            doc.allow.push(entry);
            self.set_policy(request_id, &proposal.tenant_id, &doc, actor, Some(version)).await?;
        }
        Ok(())
    }
}

/// Where runs' asks are recorded: by the API, and by the door for a
/// request its policy refused (`ProposalSink`). The door asks once per
/// refused request, so the same ask of a run within [`RECENT_SECS`] is
/// answered from memory, never a store write per refusal of a flood.
pub struct Asks {
    store: Store,
    policies: Arc<crate::policy::PolicyCache>,
    refusals: Arc<crate::record::RefusalLog>,
    clock: Arc<dyn Clock>,
    guard: AddressGuard,
    /// Proposal id → when this node last recorded or found it.
    recent: Mutex<HashMap<String, UnixTime>>,
}

/// How long a recorded ask is answered from memory.
const RECENT_SECS: i64 = 60;
/// Asks remembered at once; past it the memory starts over.
const RECENT_MAX: usize = 10_000;

impl Asks {
    /// Asks over `store`, judged against the tenants' policies and `guard`.
    pub fn new(
        store: Store,
        policies: Arc<crate::policy::PolicyCache>,
        refusals: Arc<crate::record::RefusalLog>,
        clock: Arc<dyn Clock>,
        guard: AddressGuard,
    ) -> Self {
        Self { store, policies, refusals, clock, guard, recent: Mutex::default() }
    }

    /// Records `run_id`'s ask for `rule` (the same ask again is the same
    /// proposal), as an event of the run when it is new.
    async fn record(
        &self,
        tenant_id: &str,
        run_id: &str,
        rule: &ProposedRule,
        why: &str,
    ) -> Result<(Proposal, bool)> {
        let entry = rule.entry().to_string();
        let now = self.clock.now();
        let new = NewProposal {
            proposal_id: proposal_id(run_id, &entry),
            tenant_id: tenant_id.to_owned(),
            run_id: run_id.to_owned(),
            host: rule.host.to_string(),
            rule: entry,
            why: why.to_owned(),
            created_at: now,
            expires_at: now + PROPOSAL_LIFETIME_SECS,
        };
        let (proposal, created) = self.store.propose(&new, LIMITS).await?;
        if created {
            self.refusals.record_event(proposal_event(&proposal, "egress_proposal", None, now));
        }
        Ok((proposal, created))
    }

    /// The ask of a request the door refused: its proposal's id, or `None`
    /// (a host no one may be asked for, the limits, a store that cannot say).
    async fn refused(
        &self,
        tenant_id: &str,
        run_id: &str,
        rule: ProposedRule,
        reason: Reason,
    ) -> Option<String> {
        let now = self.clock.now();
        let id = proposal_id(run_id, &rule.entry().to_string());
        let seen = self.recent.lock().unwrap_or_else(PoisonError::into_inner).get(&id).copied();
        if seen.is_some_and(|at| now - at < RECENT_SECS) {
            return Some(id);
        }
        let policy = self.policies.policy(Some(tenant_id)).ok()?;
        rule.askable(&policy, &self.guard, now).ok()?;
        match self.record(tenant_id, run_id, &rule, &format!("refused: {reason}")).await {
            Ok((proposal, _)) => {
                let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
                if recent.len() >= RECENT_MAX {
                    recent.clear();
                }
                recent.insert(proposal.proposal_id.clone(), now);
                Some(proposal.proposal_id)
            }
            Err(e) => {
                tracing::warn!(run_id, error = %e, "a refused request's proposal was not recorded");
                None
            }
        }
    }
}

impl ProposalSink for Asks {
    fn propose<'a>(
        &'a self,
        tenant_id: &'a str,
        run_id: &'a str,
        rule: ProposedRule,
        reason: Reason,
    ) -> gatehouse_egress::leases::LeaseFuture<'a, Option<String>> {
        Box::pin(self.refused(tenant_id, run_id, rule, reason))
    }
}

/// A run event about a proposal (not a refusal): its host, and its id as
/// the rule.
fn proposal_event(proposal: &Proposal, kind: &str, reason: Option<&str>, at: UnixTime) -> NewEvent {
    NewEvent {
        host: Some(proposal.host.clone()),
        rule: Some(proposal.proposal_id.clone()),
        ..NewEvent::of_run(&proposal.tenant_id, &proposal.run_id, kind, reason, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_ask_of_a_run_is_one_proposal() {
        let rule = r#"{"host":"api.example.com","methods":["GET"]}"#;
        assert_eq!(proposal_id("run_1", rule), proposal_id("run_1", rule));
        assert_ne!(proposal_id("run_1", rule), proposal_id("run_2", rule));
        assert_ne!(proposal_id("run_1", rule), proposal_id("run_1", r#"{"host":"api.example.com"}"#));
        assert!(proposal_id("run_1", rule).starts_with("prop_") && proposal_id("run_1", rule).len() == 37);
    }
}
