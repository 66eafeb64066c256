//! Runs and their whole life: created (manifest, grant and record in one
//! step), kept alive by heartbeats, ended, cancelled, killed or expired.
//!
//! Every way a run stops revokes its grant in the ledger before the store
//! records it stopped (see the crate's invariants), and what follows a run
//! that stopped ([`Plane::after_runs_ended`]) is the same for every way.

use gatehouse_capability::canonical::BodyDigest;
use gatehouse_capability::grant::{GrantLifetime, GrantRequest, MintError};
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{Reason, RefusalKind, UnixTime, is_valid_id, new_id};
use gatehouse_ledger::{GrantRecord, LedgerBackend as _, Registration, RevokeScope};
use gatehouse_store::{Lease, LeaseFilter, NewEvent, NewRun, Page, PageRequest, Run, RunStatus, StoreError};
use serde_json::{Map, Value, json};

use crate::{Caller, ID_RULE, Plane, PlaneError, Result};

/// A run's budgets, each unlimited when absent.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBudgets {
    /// Outbound requests.
    #[serde(default)]
    pub max_requests: Option<u64>,
    /// Bytes uploaded as output files.
    #[serde(default)]
    pub max_upload_bytes: Option<u64>,
    /// Output files.
    #[serde(default)]
    pub max_output_files: Option<u64>,
    /// Bytes through the door, both ways.
    #[serde(default)]
    pub max_egress_bytes: Option<u64>,
    /// MCP tool calls (each one a request too).
    #[serde(default)]
    pub max_tool_calls: Option<u64>,
}

/// What a run is to be.
#[derive(Debug, Clone)]
pub struct NewRunRequest {
    /// Its tenant.
    pub tenant_id: String,
    /// Its user.
    pub user_id: String,
    /// The execute body its manifest is bound to.
    pub body: Value,
    /// Extra manifest claims (they may not contradict the run's own fields).
    pub claims: Map<String, Value>,
    /// Input files it may read.
    pub input_files: Vec<String>,
    /// Sessions it may read.
    pub read_sessions: Vec<String>,
    /// The session it writes its outputs to.
    pub output_session_id: Option<String>,
    /// The conversation it belongs to (its namespace).
    pub conversation_id: Option<String>,
    /// Its budgets.
    pub budgets: RunBudgets,
    /// Its lifetime, else the default.
    pub ttl_secs: Option<i64>,
}

/// A run just created: what its sandbox is handed.
#[derive(Debug, Clone)]
pub struct CreatedRun {
    /// The run.
    pub run_id: String,
    /// The signed manifest.
    pub manifest: String,
    /// The digest the manifest is bound to.
    pub execute_body_sha256: String,
    /// The sealed grant: the sandbox's proxy password.
    pub grant: String,
    /// The grant's id.
    pub grant_id: String,
    /// When the run and its grant end at the latest.
    pub expires_at: UnixTime,
}

/// A run as a read shows it: the record, its grant's ledger record, and its
/// leases (each as it could be read).
#[derive(Debug)]
pub struct RunView {
    /// The stored run.
    pub run: Run,
    /// The ledger's record (`None`: no ledger here, or no record), or why it
    /// could not be read.
    pub ledger: Result<Option<GrantRecord>, Reason>,
    /// Its leases, or the store's error code.
    pub leases: Result<Vec<Lease>, &'static str>,
}

/// What ending a run did.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The run as recorded now.
    pub run: Run,
    /// The leases revoked with it; `None` when it was not live (nothing
    /// was revoked, its grant included).
    pub leases: Option<u64>,
}

impl Plane {
    /// Records a run, registers its grant in the ledger, signs the manifest
    /// bound to the execute body and mints the grant, in one step: on any
    /// failure nothing usable is left behind (a registered grant whose run
    /// could not be recorded is revoked again).
    pub async fn create_run(
        &self,
        request_id: &str,
        caller: &Caller,
        req: NewRunRequest,
    ) -> Result<CreatedRun> {
        let (Some(signer), Some(sealer), Some(sessions), Some(ledger)) =
            (self.signer.as_ref(), self.sealer.as_ref(), self.sessions.as_ref(), self.ledger.as_ref())
        else {
            return Err(PlaneError::NotServed);
        };
        let store = self.store()?;
        let ids = [
            Some(&req.tenant_id),
            Some(&req.user_id),
            req.output_session_id.as_ref(),
            req.conversation_id.as_ref(),
        ];
        if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
            return Err(PlaneError::invalid(ID_RULE));
        }
        self.require(request_id, caller, Some(&req.tenant_id))?;
        let ttl = req.ttl_secs.unwrap_or(self.settings.grant_ttl_secs);
        if !(1..=self.settings.grant_max_lifetime_secs).contains(&ttl) {
            return Err(PlaneError::invalid(
                "ttl_secs must be positive and within GATEHOUSE_GRANT_MAX_LIFETIME_SECS",
            ));
        }
        let body = BodyDigest::of_value(&req.body).map_err(|_| {
            PlaneError::invalid("body is not canonicalizable JSON (integers must be within ±2^53-1)")
        })?;
        let now = self.clock.now();
        let run_id = new_id("run");

        // The manifest states what the run is: its ids, files, sessions and
        // budgets come from the request itself, and extra claims may not
        // say otherwise.
        let mut claims = req.claims;
        let derived = [
            ("exec_id", Some(json!(run_id))),
            ("tenant_id", Some(json!(req.tenant_id))),
            ("user_id", Some(json!(req.user_id))),
            ("input_files", Some(json!(req.input_files))),
            ("read_sessions", Some(json!(req.read_sessions))),
            ("output_session_id", req.output_session_id.as_ref().map(|s| json!(s))),
            ("max_requests", req.budgets.max_requests.map(|n| json!(n))),
            ("max_upload_bytes", req.budgets.max_upload_bytes.map(|n| json!(n))),
            ("max_output_files", req.budgets.max_output_files.map(|n| json!(n))),
            ("max_egress_bytes", req.budgets.max_egress_bytes.map(|n| json!(n))),
            ("max_tool_calls", req.budgets.max_tool_calls.map(|n| json!(n))),
        ];
        for (key, value) in derived {
            match (claims.get(key), value) {
                (Some(given), Some(value)) if *given != value => {
                    return Err(PlaneError::invalid(
                        "claims must not contradict the run's ids, files or budgets",
                    ));
                }
                (Some(_), None) => {
                    return Err(PlaneError::invalid(
                        "the run's files, sessions and budgets are top-level fields, not claims",
                    ));
                }
                (_, Some(value)) => {
                    claims.insert(key.to_owned(), value);
                }
                (None, None) => {}
            }
        }
        let (manifest, manifest_claims) = signer.sign_for_body(claims, &body, now, ttl).map_err(|e| {
            tracing::info!(request_id, error = %e, "run manifest rejected");
            PlaneError::invalid("claims are not a valid manifest (see the documentation)")
        })?;
        let principal = Principal { tenant_id: Some(req.tenant_id.clone()), user_id: req.user_id.clone() };
        // Outputs are always the user's own; a run of a conversation writes
        // and reads that conversation's namespace, so two conversations of
        // one user share no session (the seed's limitation).
        let namespace = match req.conversation_id.as_deref() {
            Some(conversation) => Namespace::User { conversation: Some(conversation) },
            None => Namespace::Output,
        };
        let session_key = sessions.derive(&principal, &namespace).map_err(|reason| {
            self.refusals.record(
                RefusalKind::GrantRefused,
                reason,
                Some(&req.tenant_id),
                None,
                Some(request_id),
            );
            PlaneError::Refused(reason)
        })?;
        let grant_request = GrantRequest {
            grant_id: None,
            exec_id: run_id.clone(),
            tenant_id: Some(req.tenant_id.clone()),
            user_id: req.user_id.clone(),
            input_files: req.input_files,
            read_sessions: req.read_sessions,
            output_session_id: req.output_session_id,
            max_upload_bytes: req.budgets.max_upload_bytes,
            max_output_files: req.budgets.max_output_files,
            max_requests: req.budgets.max_requests,
            max_egress_bytes: req.budgets.max_egress_bytes,
            max_tool_calls: req.budgets.max_tool_calls,
            iat: Some(now),
            exp: Some(now + ttl),
        };
        let lifetime = GrantLifetime { default_secs: ttl, max_secs: self.settings.grant_max_lifetime_secs };
        let grant_claims = grant_request.into_claims(session_key, now, lifetime).map_err(|e| {
            tracing::info!(request_id, error = %e, "run grant rejected");
            PlaneError::invalid(
                "the run's files, sessions or budgets are not valid (ids as above; budgets up to 2^53-1)",
            )
        })?;
        let grant = sealer.mint(&grant_claims).map_err(|e| mint_refused(request_id, e))?;
        ledger.register(&Registration::from(&grant_claims)).await.map_err(PlaneError::refusal)?;
        let new_run = NewRun {
            run_id: run_id.clone(),
            tenant_id: req.tenant_id.clone(),
            user_id: req.user_id.clone(),
            grant_id: grant_claims.grant_id.clone(),
            execute_body_sha256: manifest_claims.execute_body_sha256.clone(),
            created_at: now,
            expires_at: now + ttl,
        };
        if let Err(e) = store.create_run(&new_run, &caller.name).await {
            // The run does not exist, so neither may its grant.
            if ledger.revoke(&RevokeScope::Grant(grant_claims.grant_id.clone())).await.is_err() {
                tracing::error!(request_id, grant_id = %grant_claims.grant_id,
                    "a grant of a run that was not recorded could not be revoked; it expires at its exp");
            }
            if e == StoreError::KillSwitch {
                self.refusals.record(
                    RefusalKind::GrantRefused,
                    Reason::TenantKillSwitch,
                    Some(&req.tenant_id),
                    None,
                    Some(request_id),
                );
            }
            return Err(e.into());
        }
        Ok(CreatedRun {
            run_id,
            manifest,
            execute_body_sha256: manifest_claims.execute_body_sha256,
            grant,
            grant_id: grant_claims.grant_id,
            expires_at: now + ttl,
        })
    }

    /// The run `run_id` (`run_unknown` when there is none).
    pub async fn run(&self, run_id: &str) -> Result<Run> {
        self.store()?.run(run_id).await?.ok_or_else(PlaneError::run_unknown)
    }

    /// A run with its ledger record and its leases, each as it could be read.
    pub async fn run_view(&self, run: Run) -> RunView {
        let ledger = match self.ledger.as_ref() {
            Some(l) => l.get(&run.grant_id).await,
            None => Ok(None),
        };
        let filter = LeaseFilter { run_id: Some(run.run_id.clone()), ..Default::default() };
        let page = PageRequest { limit: 500, cursor: None };
        let leases = match self.store.as_ref() {
            Some(store) => {
                store.leases(&filter, &page, self.clock.now()).await.map(|p| p.items).map_err(|e| e.code())
            }
            None => Ok(Vec::new()),
        };
        RunView { run, ledger, leases }
    }

    /// One page of the runs `caller` may see, of `tenant` when given, in
    /// `status` when given, newest first.
    pub async fn list_runs(
        &self,
        request_id: &str,
        caller: &Caller,
        tenant: Option<String>,
        status: Option<RunStatus>,
        page: &PageRequest,
    ) -> Result<Page<Run>> {
        let store = self.store()?;
        let tenants = self.narrowed(request_id, caller, tenant)?;
        crate::tenancy::merged(
            tenants,
            page,
            |r: &Run| r.run_id.clone(),
            |tenant, page| async move { Ok(store.runs(tenant.as_deref(), status, &page).await?) },
        )
        .await
    }

    /// A live run's heartbeat: its deadline moved on, its leases renewed
    /// (every door reads the new expiry at the run's next request). The run
    /// and how many leases were renewed.
    pub async fn heartbeat(&self, run_id: &str) -> Result<(Run, u64)> {
        let (run, renewed) = self
            .store()?
            .heartbeat(run_id, self.clock.now(), self.settings.run_heartbeat_timeout_secs)
            .await?;
        if renewed > 0 {
            self.leases_changed(&run.grant_id).await?;
        }
        Ok((run, renewed))
    }

    /// Ends a live run by any path but expiry: its grant is revoked, then
    /// the run is recorded as ended. Ending a run that is not live revokes
    /// nothing.
    pub async fn finish(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: &str,
        actor: &str,
    ) -> Result<Finished> {
        let store = self.store()?;
        let ledger = self.ledger()?;
        let run = self.run(run_id).await?;
        if run.status == RunStatus::Live {
            ledger
                .revoke(&RevokeScope::Grant(run.grant_id.clone()))
                .await
                .map_err(PlaneError::unavailable)?;
        }
        let (run, leases) = store.finish_run(run_id, status, reason, actor, self.clock.now()).await?;
        if leases.is_some() {
            self.after_runs_ended(std::slice::from_ref(&run));
        }
        Ok(Finished { run, leases })
    }

    /// What follows runs that stopped being live: a `run_ended` event each,
    /// and their open tunnels and pooled connections closed (on this node
    /// now; on the others within a second, by their own sweep).
    pub fn after_runs_ended(&self, runs: &[Run]) {
        for run in runs {
            let mut event =
                NewEvent::run_event(run, "run_ended", run.end_reason.as_deref(), self.clock.now());
            event.rule = Some(run.status.as_str().to_owned());
            self.refusals.record_event(event);
        }
        if !runs.is_empty() {
            self.close_revoked_connections();
        }
    }

    /// Closes revoked grants' tunnels and pooled connections on this node
    /// now, without waiting for the next sweep (the other nodes' sweeps
    /// follow within a second).
    pub fn close_revoked_connections(&self) {
        if let Some(proxy) = self.proxy.clone() {
            tokio::spawn(async move {
                proxy.close_revoked().await;
            });
        }
    }

    /// One pass of the expiry sweep: each run past its deadline (or its
    /// heartbeat) has its grant revoked in the ledger first, and is written
    /// `expired` only once the ledger has revoked it (as ending a run
    /// does). A run whose grant the ledger could not revoke (an outage)
    /// stays live in the store, past its deadline, so the next sweep on any
    /// node, after a restart too, revokes it again: nothing to retry is
    /// kept in memory.
    pub async fn expire_due_runs(&self) {
        let Some(store) = self.store.as_ref() else { return };
        let now = self.clock.now();
        let timeout = self.settings.run_heartbeat_timeout_secs;
        let due = match store.runs_to_expire(now, timeout, 500).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(code = e.code(), "expired runs could not be swept");
                return;
            }
        };
        if due.is_empty() {
            return;
        }
        let mut revoked = Vec::with_capacity(due.len());
        let mut unrevoked = 0_usize;
        for run in due {
            let gone = match self.ledger.as_ref() {
                Some(ledger) => ledger.revoke(&RevokeScope::Grant(run.grant_id.clone())).await.is_ok(),
                None => true,
            };
            if gone {
                revoked.push(run.run_id);
            } else {
                unrevoked += 1;
            }
        }
        if unrevoked > 0 {
            tracing::warn!(
                runs = unrevoked,
                "runs past their deadline stay live until the ledger revokes their grants"
            );
        }
        match store.expire_revoked_runs(now, timeout, &revoked).await {
            Ok(ended) if !ended.runs.is_empty() => {
                tracing::info!(runs = ended.runs.len(), "runs expired");
                self.after_runs_ended(&ended.runs);
            }
            Ok(_) => {}
            // Their grants are dead already; the next sweep writes them.
            Err(e) => tracing::warn!(code = e.code(), "expired runs could not be recorded"),
        }
    }
}

/// A grant that could not be minted, as the plane tells it.
pub fn mint_refused(request_id: &str, e: MintError) -> PlaneError {
    match e {
        MintError::Invalid(what) => PlaneError::invalid(what),
        MintError::Random => {
            tracing::error!(request_id, "grant mint failed: no randomness");
            PlaneError::Internal("grant_mint_random")
        }
    }
}
