//! Tenants' egress policies as the door reads them: a replica of the
//! store's current policies in memory, kept fresh by following the store's
//! settings version.
//!
//! The door asks on every request and cannot wait for a database, so it
//! reads this replica. A poll every [`POLL`] asks the store for its settings
//! version and reloads the tenants changed since the version already held
//! (one small query when nothing changed), so another node's change is in
//! force here within a poll. The replica vouches for itself only for
//! [`VOUCH`] after its last successful poll: past that, with the store
//! unreadable, nobody can say whether a policy changed, and every request is
//! refused (`store_unavailable`), never let through on a stale policy. A
//! stored policy that does not parse refuses its tenant's requests
//! (`policy_unreadable`); a tenant with no policy is `open`.
//!
//! Polls and refreshes may overlap (the follower's poll and a writing
//! node's refresh), and the one that read older settings may finish last:
//! each tenant's entry is replaced only by settings newer than those it
//! was read at (the tenant's settings version, which every change to it
//! bumps), so the replica never moves backwards to a looser policy.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use gatehouse_egress::proxy::PolicySource;
use gatehouse_egress::{Policy, PolicyDocument, PolicyError};
use gatehouse_store::{Store, StoreError, TenantSettings};

/// How often the store is asked whether anything changed.
pub const POLL: Duration = Duration::from_millis(250);
/// How long a replica vouches for itself without hearing from the store.
pub const VOUCH: Duration = Duration::from_secs(2);

type Entry = Result<Arc<Policy>, PolicyError>;

/// A tenant's policy as read at the tenant's settings version, and the
/// policies of its runs that a person approved rules for (the tenant's
/// with those rules after its own).
struct Held {
    settings_version: i64,
    entry: Entry,
    runs: HashMap<String, Entry>,
}

/// The rules approved for single runs, by tenant: (run, rule's JSON).
type RunRules = HashMap<String, Vec<(String, String)>>;

#[derive(Default)]
struct Replica {
    version: i64,
    tenants: HashMap<String, Held>,
    confirmed_at: Option<Instant>,
}

/// The replica. `policy` never blocks on I/O.
#[derive(Default)]
pub struct PolicyCache {
    replica: RwLock<Replica>,
}

/// How a stored policy document reads.
pub fn parse_stored(document: &str) -> Entry {
    let doc: PolicyDocument = serde_json::from_str(document)
        .map_err(|_| PolicyError::unreadable("the stored policy is not a policy document"))?;
    Policy::from_document(&doc).map(Arc::new)
}

impl PolicyCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Replica> {
        self.replica.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Brings the replica up to the store's current version.
    pub async fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        let since = self.read().version;
        let (version, changed) = store.settings_since(since).await?;
        let mut run_rules = RunRules::new();
        if !changed.is_empty() {
            for (tenant_id, run_id, rule) in store.run_rules().await? {
                run_rules.entry(tenant_id).or_default().push((run_id, rule));
            }
        }
        self.apply_with_runs(version, changed, &run_rules);
        Ok(())
    }

    #[cfg(test)]
    fn apply(&self, version: i64, changed: Vec<TenantSettings>) {
        self.apply_with_runs(version, changed, &RunRules::new());
    }

    fn apply_with_runs(&self, version: i64, changed: Vec<TenantSettings>, run_rules: &RunRules) {
        let mut replica = self.replica.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for tenant in changed {
            if replica
                .tenants
                .get(&tenant.tenant_id)
                .is_some_and(|held| held.settings_version >= tenant.settings_version)
            {
                // Read before a change this replica already holds: older.
                continue;
            }
            let entry = match &tenant.policy {
                Some(p) => {
                    let entry = parse_stored(&p.document);
                    if let Err(e) = &entry {
                        tracing::error!(tenant_id = %tenant.tenant_id, version = p.version, error = %e,
                            "stored egress policy unreadable: the tenant's requests are refused");
                    }
                    entry
                }
                None if tenant.policy_missing => {
                    tracing::error!(tenant_id = %tenant.tenant_id,
                        "the tenant's current egress policy is missing from the store: its requests are refused");
                    Err(PolicyError::unreadable("the tenant's current policy is missing"))
                }
                None => Ok(Arc::new(Policy::open())),
            };
            let entry = entry.and_then(|policy| with_mcp_servers(policy, &tenant));
            let runs =
                runs_of(&entry, run_rules.get(&tenant.tenant_id).map(Vec::as_slice).unwrap_or_default());
            replica
                .tenants
                .insert(tenant.tenant_id, Held { settings_version: tenant.settings_version, entry, runs });
        }
        replica.version = replica.version.max(version);
        replica.confirmed_at = Some(Instant::now());
    }

    /// Follows the store until the process ends, saying so once when the
    /// replica can no longer vouch and once when it can again.
    pub async fn follow(self: Arc<Self>, store: Store) {
        let mut failing = false;
        loop {
            match self.refresh(&store).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("policy store answers again: egress decided on current policies");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::error!(
                        code = e.code(),
                        "policy store cannot be read: egress is refused once the last \
                        confirmed policies are older than {} s",
                        VOUCH.as_secs()
                    );
                }
                Err(_) => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The tenant's policy with its declared MCP servers: a declaration that
/// is missing or no longer reads refuses the tenant's requests, as a policy
/// does (its servers' messages could not be told apart from others).
fn with_mcp_servers(policy: Arc<Policy>, tenant: &TenantSettings) -> Entry {
    if tenant.mcp_servers_missing {
        tracing::error!(tenant_id = %tenant.tenant_id,
            "the tenant's current MCP servers are missing from the store: its requests are refused");
        return Err(PolicyError::unreadable("the tenant's current MCP servers are missing"));
    }
    let Some(stored) = &tenant.mcp_servers else { return Ok(policy) };
    let declared = crate::mcp::servers_of(&stored.document)
        .map_err(|_| "the stored MCP servers are not a declaration")
        .and_then(gatehouse_egress::policy::mcp::declared)
        .map_err(|e| {
            tracing::error!(tenant_id = %tenant.tenant_id, error = e, "stored MCP servers unreadable: the tenant's requests are refused");
            PolicyError::unreadable(e)
        })?;
    Ok(Arc::new(Policy::clone(&policy).with_mcp_servers(declared)))
}

/// Each run's policy: the tenant's with the rules approved for the run
/// after its own. A rule that does not read leaves the run on its
/// tenant's policy (logged): it was checked when it was proposed.
fn runs_of(tenant: &Entry, rules: &[(String, String)]) -> HashMap<String, Entry> {
    let Ok(policy) = tenant else { return HashMap::new() };
    let mut by_run: HashMap<&str, Vec<gatehouse_egress::policy::Entry>> = HashMap::new();
    for (run_id, rule) in rules {
        match serde_json::from_str(rule) {
            Ok(entry) => by_run.entry(run_id.as_str()).or_default().push(entry),
            Err(_) => {
                tracing::error!(run_id, "an approved rule does not read: the run keeps its tenant's policy")
            }
        }
    }
    by_run
        .into_iter()
        .map(|(run_id, entries)| {
            let merged = policy.with_allowed(&entries).map(Arc::new);
            if let Err(e) = &merged {
                tracing::error!(run_id, error = %e, "an approved rule does not read: the run keeps its tenant's policy");
            }
            (run_id.to_owned(), merged.or_else(|_| Ok(policy.clone())))
        })
        .collect()
}

impl PolicyCache {
    fn held<T>(
        &self,
        tenant_id: Option<&str>,
        read: impl FnOnce(Option<&Held>) -> T,
    ) -> Result<T, PolicyError> {
        let replica = self.read();
        if replica.confirmed_at.is_none_or(|at| at.elapsed() > VOUCH) {
            return Err(PolicyError::unavailable());
        }
        Ok(read(tenant_id.and_then(|t| replica.tenants.get(t))))
    }
}

impl PolicySource for PolicyCache {
    fn policy(&self, tenant_id: Option<&str>) -> Entry {
        self.held(tenant_id, |held| held.map_or_else(|| Ok(Arc::new(Policy::open())), |h| h.entry.clone()))?
    }

    fn policy_of_run(&self, tenant_id: Option<&str>, run_id: &str) -> Entry {
        self.held(tenant_id, |held| match held {
            Some(h) => h.runs.get(run_id).unwrap_or(&h.entry).clone(),
            None => Ok(Arc::new(Policy::open())),
        })?
    }
}

#[cfg(test)]
mod tests {
    use gatehouse_core::Reason;
    use gatehouse_store::PolicyVersion;

    use super::*;

    fn tenant(id: &str, document: Option<&str>) -> TenantSettings {
        tenant_at(id, 1, document)
    }

    fn tenant_at(id: &str, settings_version: i64, document: Option<&str>) -> TenantSettings {
        TenantSettings {
            mcp_servers: None,
            mcp_servers_missing: false,
            tenant_id: id.into(),
            settings_version,
            policy_missing: false,
            policy: document.map(|d| PolicyVersion {
                tenant_id: id.into(),
                version: 1,
                document: d.into(),
                actor: "p".into(),
                created_at: 0,
            }),
            gate_mode: "high".into(),
            kill_switch: false,
            kill_switch_reason: None,
        }
    }

    #[test]
    fn a_replica_that_never_heard_from_the_store_refuses() {
        let cache = PolicyCache::default();
        assert_eq!(cache.policy(Some("t1")).unwrap_err().reason, Reason::StoreUnavailable);
        assert_eq!(cache.policy(None).unwrap_err().reason, Reason::StoreUnavailable);
    }

    #[test]
    fn stored_policies_apply_unreadable_ones_refuse_and_missing_ones_are_open() {
        let cache = PolicyCache::default();
        cache.apply(
            3,
            vec![
                tenant("t1", Some(r#"{"mode":"allowlist","allow":["a.example"]}"#)),
                tenant("t2", Some(r#"{"mode":"allowlist","allow":["bad entry"]}"#)),
                tenant("t3", Some("not json")),
            ],
        );
        assert!(!cache.policy(Some("t1")).unwrap().dry_run());
        assert_eq!(cache.policy(Some("t2")).unwrap_err().reason, Reason::PolicyUnreadable);
        assert_eq!(cache.policy(Some("t3")).unwrap_err().reason, Reason::PolicyUnreadable);
        assert!(cache.policy(Some("t4")).is_ok(), "no policy: open");
        // Policy versions, but the current one is gone: refused, never open.
        let mut missing = tenant_at("t5", 3, None);
        missing.policy_missing = true;
        cache.apply(3, vec![missing]);
        assert_eq!(cache.policy(Some("t5")).unwrap_err().reason, Reason::PolicyUnreadable);
        // A later version without a policy for t1 (never happens today, but
        // the replica follows the store) reopens it.
        cache.apply(4, vec![tenant_at("t1", 4, None)]);
        assert!(cache.policy(Some("t1")).is_ok());
        assert_eq!(cache.read().version, 4);
    }

    #[test]
    fn an_older_read_applied_after_a_newer_one_changes_nothing() {
        let cache = PolicyCache::default();
        let strict = r#"{"mode":"allowlist","allow":["a.example"]}"#;
        // The writing node's refresh read t1 at settings version 7 (strict);
        // the follower's poll, begun earlier, read t1 at 6 (open, no
        // policy) and t2 at 5, and finishes last.
        cache.apply(7, vec![tenant_at("t1", 7, Some(strict))]);
        cache.apply(6, vec![tenant_at("t1", 6, None), tenant_at("t2", 5, Some(strict))]);
        let policy = cache.policy(Some("t1")).unwrap();
        assert_eq!(policy, Arc::new(Policy::from_document(&serde_json::from_str(strict).unwrap()).unwrap()));
        assert!(
            cache.policy(Some("t2")).unwrap() != Arc::new(Policy::open()),
            "a tenant it did not hold applies"
        );
        assert_eq!(cache.read().version, 7);
        // The same read again, or an older policy version's, changes nothing either.
        cache.apply(7, vec![tenant_at("t1", 7, Some(r#"{"mode":"open"}"#))]);
        assert_eq!(cache.policy(Some("t1")).unwrap(), policy);
        // A newer one applies, loosening included.
        cache.apply(8, vec![tenant_at("t1", 8, None)]);
        assert_eq!(cache.policy(Some("t1")).unwrap(), Arc::new(Policy::open()));
    }

    #[test]
    fn a_replica_stops_vouching_after_its_window() {
        let cache = PolicyCache::default();
        cache.apply(1, vec![]);
        assert!(cache.policy(Some("t1")).is_ok());
        cache.replica.write().unwrap().confirmed_at = Some(Instant::now() - VOUCH - Duration::from_millis(1));
        assert_eq!(cache.policy(Some("t1")).unwrap_err().reason, Reason::StoreUnavailable);
    }
}
