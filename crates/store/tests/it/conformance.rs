//! One suite, two backends: each test below is a function of a fresh,
//! migrated [`Store`]; the macro at the end runs it on SQLite and on
//! PostgreSQL.

use std::time::Duration;

use gatehouse_core::Reason;
use gatehouse_store::files::{FileState, FileUpload, StoredFile, UploadFate};
use gatehouse_store::{
    Credential, DoorLease, LEASE_LIFETIME_SECS, Lease, LeaseFilter, LeaseStatus, NewEvent, NewLease, NewRun,
    PageRequest, REFUSAL_SCAN_ROWS, RefusalCount, RefusalFilter, Resealed, Run, RunStatus, SchemaState,
    Store, StoreConfig, StoreError,
};
use gatehouse_test_support::TestDatabase;

/// A fresh database on one backend, kept alive for the test.
pub struct Fresh {
    pub store: Store,
    pub url: String,
    _sqlite_dir: Option<tempfile::TempDir>,
    _postgres: Option<TestDatabase>,
}

impl Fresh {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
        Self::open(url, Some(dir), None).await
    }

    pub async fn postgres() -> Self {
        let db = TestDatabase::create();
        Self::open(db.url().to_owned(), None, Some(db)).await
    }

    async fn open(url: String, dir: Option<tempfile::TempDir>, pg: Option<TestDatabase>) -> Self {
        let store = Store::connect(&StoreConfig::new(&url)).await.unwrap();
        assert!(matches!(store.schema_state().await.unwrap(), SchemaState::Behind(_)));
        store.migrate().await.unwrap();
        Self { store, url, _sqlite_dir: dir, _postgres: pg }
    }

    /// A second, independent connection pool on the same database: another node.
    pub async fn another_node(&self) -> Store {
        Store::connect(&StoreConfig::new(&self.url)).await.unwrap()
    }
}

pub fn new_run(n: u32, tenant: &str, now: i64) -> NewRun {
    NewRun {
        run_id: format!("run_{n:04}"),
        tenant_id: tenant.into(),
        user_id: "u1".into(),
        grant_id: format!("gr_{n:04}"),
        execute_body_sha256: "ab".repeat(32),
        created_at: now,
        expires_at: now + 3600,
    }
}

fn refusal(
    tenant: &str,
    run: Option<&str>,
    kind: &str,
    reason: &str,
    host: Option<&str>,
    at: i64,
) -> NewEvent {
    NewEvent {
        at,
        kind: kind.into(),
        reason: Some(reason.into()),
        tenant_id: Some(tenant.into()),
        run_id: run.map(str::to_owned),
        host: host.map(str::to_owned),
        rule: None,
        request_id: Some("req-1".into()),
        lease_id: None,
        actor: None,
        file_name: None,
        dry_run: false,
        refusal: true,
    }
}

async fn assert_chain_intact(store: &Store) -> i64 {
    let verdict = store.verify_audit(Vec::new()).await.unwrap();
    verdict.unwrap_or_else(|broken| panic!("audit chain broken: {broken:?}"))
}

/// A credential of `tenant` for `host`, sealed to key `k1` at version 1.
pub fn credential(id: &str, tenant: &str, name: &str, host: &str, now: i64) -> Credential {
    Credential {
        credential_id: id.into(),
        tenant_id: tenant.into(),
        name: name.into(),
        purpose: "git_provider".into(),
        host: host.into(),
        inject: r#"{"header":"Authorization","format":"Bearer {secret}"}"#.into(),
        sealed: format!("ghc1.test.{id}"),
        key_id: "k1".into(),
        version: 1,
        fingerprint: "hmac-sha256:00".into(),
        created_at: now,
        updated_at: now,
    }
}

/// `lease_` and 32 hex digits: numbered in grant order, as UUIDv7s are.
pub fn lease_id(n: u64) -> String {
    format!("lease_{n:032x}")
}

/// A lease of `run` on `credential`, for its own purpose and host.
pub fn new_lease(n: u64, run: &str, credential: &Credential) -> NewLease {
    NewLease {
        lease_id: lease_id(n),
        run_id: run.into(),
        credential_id: credential.credential_id.clone(),
        purpose: credential.purpose.clone(),
        host: credential.host.clone(),
    }
}

async fn grant(s: &Store, n: u64, run: &str, credential: &Credential, now: i64) -> String {
    s.grant_lease(&new_lease(n, run, credential), "dispatcher", now, 120).await.unwrap().0.lease_id
}

/// A lease's status and expiry as of `now`.
async fn lease_at(s: &Store, lease_id: &str, now: i64) -> (LeaseStatus, i64) {
    let lease = s.lease(lease_id, now).await.unwrap().unwrap();
    (lease.status, lease.expires_at)
}

/// Why a lease is not live: (status, revoked_at, reason, by).
async fn revocation(s: &Store, lease_id: &str) -> (LeaseStatus, Option<i64>, Option<String>, Option<String>) {
    let lease = s.lease(lease_id, 0).await.unwrap().unwrap();
    (lease.status, lease.revoked_at, lease.revoke_reason, lease.revoked_by)
}

fn revoked(at: i64, reason: &str, by: &str) -> (LeaseStatus, Option<i64>, Option<String>, Option<String>) {
    (LeaseStatus::Revoked, Some(at), Some(reason.into()), Some(by.into()))
}

async fn all_leases(s: &Store, filter: &LeaseFilter, now: i64) -> Vec<Lease> {
    let page = s.leases(filter, &PageRequest { limit: 500, cursor: None }, now).await.unwrap();
    assert_eq!(page.next_cursor, None);
    page.items
}

pub async fn migrations_apply_once_and_a_newer_schema_is_refused(f: Fresh) {
    let s = &f.store;
    assert_eq!(s.schema_state().await.unwrap(), SchemaState::Current);
    assert_eq!(s.migrate().await.unwrap(), Vec::<i64>::new(), "migrating twice applies nothing");
    s.require_current_schema().await.unwrap();
    // A newer gatehouse migrated this database: this binary must not use it.
    let raw = raw(&f.url).await;
    let empty_bytes = if f.url.starts_with("sqlite") { "X''" } else { "''::bytea" };
    raw.exec(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', TRUE, {empty_bytes}, 1)"
    ))
    .await;
    assert_eq!(s.schema_state().await.unwrap(), SchemaState::Newer(vec![99990101000000]));
    assert_eq!(s.migrate().await.unwrap_err().code(), "store_schema_newer");
    assert_eq!(s.require_current_schema().await.unwrap_err().code(), "store_schema_newer");
}

pub async fn policies_are_versioned_with_who_and_when(f: Fresh) {
    let s = &f.store;
    assert_eq!(s.current_policy("t1").await.unwrap(), None);
    let v0 = s.settings_version().await.unwrap();
    let first = s.set_policy("t1", r#"{"mode":"open"}"#, "platform", 100).await.unwrap();
    let second =
        s.set_policy("t1", r#"{"mode":"allowlist","allow":["a.example"]}"#, "person:ada", 200).await.unwrap();
    s.set_policy("t2", r#"{"mode":"open"}"#, "platform", 300).await.unwrap();
    assert_eq!((first.version, second.version), (1, 2));
    let current = s.current_policy("t1").await.unwrap().unwrap();
    assert_eq!((current.version, current.actor.as_str(), current.created_at), (2, "person:ada", 200));
    assert!(current.document.contains("a.example"));

    let history = s.policy_history("t1", &PageRequest { limit: 1, cursor: None }).await.unwrap();
    assert_eq!(history.items[0].version, 2);
    let rest = s.policy_history("t1", &PageRequest { limit: 1, cursor: history.next_cursor }).await.unwrap();
    assert_eq!((rest.items[0].version, rest.next_cursor), (1, None));

    // The change feed a cache follows: every change bumps the version, and
    // a reader that saw version v gets exactly the tenants changed after it.
    let (v3, changed) = s.settings_since(v0).await.unwrap();
    assert_eq!(v3, v0 + 3);
    let mut tenants: Vec<_> = changed.iter().map(|t| t.tenant_id.as_str()).collect();
    tenants.sort_unstable();
    assert_eq!(tenants, ["t1", "t2"]);
    let (_, after_t1) = s.settings_since(v0 + 2).await.unwrap();
    assert_eq!(after_t1.iter().map(|t| t.tenant_id.as_str()).collect::<Vec<_>>(), ["t2"]);

    s.set_gate_mode("t1", "critical", "platform", 400).await.unwrap();
    let t1 = s.tenant("t1").await.unwrap().unwrap();
    assert_eq!((t1.gate_mode.as_str(), t1.policy.unwrap().version), ("critical", 2));
    assert_eq!(s.settings_version().await.unwrap(), v0 + 4);
    assert_eq!(assert_chain_intact(s).await, 4);
}

/// A policy edit made against a version that is no longer current is
/// refused whole, on any node, and two edits of one version: one wins.
pub async fn a_policy_edit_against_an_old_version_is_refused(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    let open = r#"{"mode":"open"}"#;
    assert_eq!(
        s.set_policy_if_version("t1", open, "person:ada", 100, 1).await.unwrap_err(),
        StoreError::Conflict
    );
    assert_eq!(s.set_policy_if_version("t1", open, "person:ada", 100, 0).await.unwrap().version, 1);
    let (a, b) = tokio::join!(
        s.set_policy_if_version("t1", r#"{"mode":"allowlist","allow":["a.example"]}"#, "person:ada", 200, 1),
        other.set_policy_if_version(
            "t1",
            r#"{"mode":"allowlist","allow":["b.example"]}"#,
            "person:bob",
            200,
            1
        ),
    );
    assert_eq!(
        u8::from(a.is_ok()) + u8::from(b.is_ok()),
        1,
        "one of two edits of version 1 lands: {a:?} {b:?}"
    );
    assert!([&a, &b].iter().any(|r| r.as_ref().err() == Some(&StoreError::Conflict)));
    let current = s.current_policy("t1").await.unwrap().unwrap();
    assert_eq!(current.version, 2);
    assert_eq!(assert_chain_intact(s).await, 2, "a refused edit is not audited");
}

/// The settings page's sessions: found by their token's hash only while
/// live (absolute end, idle limit, the password hash they began under),
/// ended by sign-out on every node, all at once by sign-out everywhere, and
/// each sign-in, sign-out and end audited.
pub async fn settings_page_sessions_live_idle_and_end(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    let (token, other_token) = ("a".repeat(64), "b".repeat(64));
    let (bound, rebound) = ("1".repeat(64), "2".repeat(64));
    s.create_admin_session(&token, &bound, "person:ada", 1_000, 1_000 + 8 * 3600).await.unwrap();
    let seen = other.admin_session(&token, &bound, 1_030, 1800).await.unwrap().unwrap();
    assert_eq!((seen.person.as_str(), seen.created_at, seen.last_seen), ("person:ada", 1_000, 1_000));
    assert_eq!(s.admin_session(&other_token, &bound, 1_030, 1800).await.unwrap(), None);
    // Used at 2_000 (a minute or more after the last write: recorded), so
    // idle counts from there.
    assert_eq!(s.admin_session(&token, &bound, 2_000, 1800).await.unwrap().unwrap().last_seen, 2_000);
    assert!(s.admin_session(&token, &bound, 2_000 + 1799, 1800).await.unwrap().is_some());
    assert_eq!(
        s.admin_session(&token, &bound, 2_000 + 1800 + 1799, 1800).await.unwrap(),
        None,
        "idle too long"
    );
    s.create_admin_session(&other_token, &bound, "person:bob", 10_000, 10_000 + 100).await.unwrap();
    assert!(s.admin_session(&other_token, &bound, 10_099, 1800).await.unwrap().is_some());
    assert_eq!(
        s.admin_session(&other_token, &bound, 10_100, 1800).await.unwrap(),
        None,
        "past its absolute end"
    );
    let fresh = "c".repeat(64);
    s.create_admin_session(&fresh, &bound, "person:ada", 20_000, 30_000).await.unwrap();
    assert!(other.end_admin_session(&fresh, 20_010).await.unwrap());
    assert!(!s.end_admin_session(&fresh, 20_011).await.unwrap(), "ended once");
    assert_eq!(s.admin_session(&fresh, &bound, 20_012, 1800).await.unwrap(), None);

    // A session presented under another password hash has ended, for good.
    let changed = "d".repeat(64);
    s.create_admin_session(&changed, &bound, "person:cy", 21_000, 30_000).await.unwrap();
    assert_eq!(other.admin_session(&changed, &rebound, 21_010, 1800).await.unwrap(), None);
    assert_eq!(s.admin_session(&changed, &bound, 21_020, 1800).await.unwrap(), None, "not revived");

    // Sign out everywhere: every session, on every node, audited with the count.
    for (i, t) in ["e", "f", "0"].iter().enumerate() {
        let at = 22_000 + i64::try_from(i).unwrap();
        s.create_admin_session(&t.repeat(64), &bound, "person:dee", at, 30_000).await.unwrap();
    }
    assert_eq!(
        other.end_all_admin_sessions("person:dee", 22_100, 1800).await.unwrap(),
        3,
        "live ones counted"
    );
    for t in ["e", "f", "0"] {
        assert_eq!(s.admin_session(&t.repeat(64), &bound, 22_101, 1800).await.unwrap(), None);
    }
    assert_eq!(s.end_all_admin_sessions("person:dee", 22_200, 1800).await.unwrap(), 0);
    assert_eq!(s.admin_session(&token, &bound, 22_201, 100_000).await.unwrap(), None, "idle ones ended too");

    let entries = s.audit_entries(0, 100).await.unwrap();
    let actions: Vec<(String, String)> =
        entries.iter().map(|e| (e.record.action.clone(), e.record.actor.clone())).collect();
    assert!(actions.contains(&("admin.sign_in".to_owned(), "person:bob".to_owned())));
    assert!(actions.contains(&("admin.sign_out".to_owned(), "person:ada".to_owned())));
    assert!(actions.contains(&("admin.session_ended".to_owned(), "person:cy".to_owned())));
    let everywhere: Vec<_> = entries
        .iter()
        .filter(|e| e.record.action == "admin.sign_out_everywhere")
        .map(|e| &e.record)
        .collect();
    assert_eq!(everywhere.len(), 2);
    assert_eq!(
        (everywhere[0].actor.as_str(), &everywhere[0].detail["sessions"]),
        ("person:dee", &serde_json::json!(3))
    );
    assert_chain_intact(s).await;
}

pub async fn a_run_lives_until_it_ends_once(f: Fresh) {
    let s = &f.store;
    let run = s.create_run(&new_run(1, "t1", 1000), "platform").await.unwrap();
    assert_eq!((run.status, run.heartbeat_at, run.ended_at), (RunStatus::Live, 1000, None));
    assert_eq!(s.create_run(&new_run(1, "t1", 1000), "platform").await.unwrap_err(), StoreError::Conflict);

    let (beat, renewed) = s.heartbeat(&run.run_id, 1060, 120).await.unwrap();
    assert_eq!((beat.heartbeat_at, renewed), (1060, 0));
    let (ended, changed) =
        s.finish_run(&run.run_id, RunStatus::Ended, "succeeded", "platform", 1100).await.unwrap();
    assert_eq!(changed, Some(0), "changed, no leases to revoke");
    assert_eq!(
        (ended.status, ended.ended_at, ended.end_reason.as_deref()),
        (RunStatus::Ended, Some(1100), Some("succeeded"))
    );
    // Ending again, or cancelling an ended run, changes nothing.
    let (again, changed) =
        s.finish_run(&run.run_id, RunStatus::Cancelled, "cancelled", "ada", 1200).await.unwrap();
    assert_eq!(changed, None);
    assert_eq!((again.status, again.ended_at), (RunStatus::Ended, Some(1100)));
    assert_eq!(s.heartbeat(&run.run_id, 1110, 120).await.unwrap_err(), StoreError::RunNotLive);
    assert_eq!(s.heartbeat("run_nope", 1110, 120).await.unwrap_err(), StoreError::NotFound);
    assert_eq!(
        s.finish_run("run_nope", RunStatus::Ended, "failed", "p", 1).await.unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(s.run(&run.run_id).await.unwrap().unwrap().status, RunStatus::Ended);
    assert_eq!(assert_chain_intact(s).await, 2, "create and end are audited; the no-op is not");
}

pub async fn concurrent_end_and_cancel_change_the_run_once(f: Fresh) {
    let s = f.store.clone();
    let other = f.another_node().await;
    for n in 0..10 {
        let run = s.create_run(&new_run(n, "t1", 1000), "platform").await.unwrap();
        let (a, b) = tokio::join!(
            s.finish_run(&run.run_id, RunStatus::Ended, "succeeded", "dispatcher", 1001),
            other.finish_run(&run.run_id, RunStatus::Cancelled, "cancelled", "ada", 1001),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.1.is_some() ^ b.1.is_some(), "exactly one of end and cancel changes the run");
        assert_eq!(a.0.status, b.0.status);
    }
    assert_eq!(assert_chain_intact(&s).await, 20);
}

pub async fn runs_expire_by_lost_heartbeat_or_lifetime_once(f: Fresh) {
    let s = &f.store;
    let mut short = new_run(1, "t1", 1000);
    short.expires_at = 1050;
    s.create_run(&short, "p").await.unwrap();
    s.create_run(&new_run(2, "t1", 1000), "p").await.unwrap();
    s.create_run(&new_run(3, "t1", 1000), "p").await.unwrap();
    s.heartbeat("run_0003", 1100, 120).await.unwrap();
    assert!(s.expire_runs(1040, 120).await.unwrap().runs.is_empty());
    let first = s.expire_runs(1060, 120).await.unwrap().runs;
    assert_eq!(
        first.iter().map(|r| (r.run_id.as_str(), r.end_reason.as_deref())).collect::<Vec<_>>(),
        [("run_0001", Some("lifetime_over"))]
    );
    // run 2 never beat: lost at 1000 + 120; run 3 beat at 1100.
    assert_eq!(
        s.heartbeat("run_0002", 1120, 120).await.unwrap_err(),
        StoreError::RunNotLive,
        "a heartbeat past the deadline does not revive"
    );
    let second = s.expire_runs(1125, 120).await.unwrap().runs;
    assert_eq!(
        second.iter().map(|r| (r.run_id.as_str(), r.end_reason.as_deref())).collect::<Vec<_>>(),
        [("run_0002", Some("heartbeat_lost"))]
    );
    // Two nodes sweeping at once expire each run once.
    let other = f.another_node().await;
    let (a, b) = tokio::join!(s.expire_runs(1300, 120), other.expire_runs(1300, 120));
    assert_eq!(a.unwrap().runs.len() + b.unwrap().runs.len(), 1);
    assert_eq!(s.run("run_0003").await.unwrap().unwrap().status, RunStatus::Expired);
}

/// The sweep reads the runs past their deadline, revokes their grants in
/// the ledger, and expires only those whose grants it revoked (and only
/// while they are still live and due): a run whose grant could not be
/// revoked stays live, for the next sweep of any node.
pub async fn only_runs_whose_grants_were_revoked_are_expired(f: Fresh) {
    let s = &f.store;
    for n in 1..=3 {
        s.create_run(&new_run(n, "t1", 1000), "p").await.unwrap();
    }
    s.heartbeat("run_0003", 1100, 120).await.unwrap();
    let ids = |runs: &[Run]| runs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&s.runs_to_expire(1125, 120, 500).await.unwrap()), ["run_0001", "run_0002"]);
    assert_eq!(ids(&s.runs_to_expire(1125, 120, 1).await.unwrap()), ["run_0001"], "bounded");
    // run 1's grant could not be revoked; run 3 is not due.
    let ended = s.expire_revoked_runs(1125, 120, &["run_0002".into(), "run_0003".into()]).await.unwrap();
    assert_eq!(ids(&ended.runs), ["run_0002"]);
    assert_eq!(ended.runs[0].end_reason.as_deref(), Some("heartbeat_lost"));
    assert_eq!(s.run("run_0001").await.unwrap().unwrap().status, RunStatus::Live);
    assert_eq!(ids(&s.runs_to_expire(1125, 120, 500).await.unwrap()), ["run_0001"]);
    assert_eq!(s.expire_revoked_runs(1125, 120, &[]).await.unwrap(), Default::default());
    // Another node gets there first: each run expires once.
    let other = f.another_node().await;
    let one = ["run_0001".to_owned()];
    let (a, b) =
        tokio::join!(s.expire_revoked_runs(1130, 120, &one), other.expire_revoked_runs(1130, 120, &one));
    assert_eq!(a.unwrap().runs.len() + b.unwrap().runs.len(), 1);
    assert_chain_intact(s).await;
}

pub async fn the_kill_switch_kills_live_runs_and_refuses_new_ones(f: Fresh) {
    let s = &f.store;
    for n in 0..3 {
        s.create_run(&new_run(n, "t1", 1000), "p").await.unwrap();
    }
    s.create_run(&new_run(10, "t2", 1000), "p").await.unwrap();
    s.finish_run("run_0000", RunStatus::Ended, "succeeded", "p", 1001).await.unwrap();
    let killed = s.set_kill_switch("t1", true, Some("incident 7"), "person:ada", 1002).await.unwrap().runs;
    assert_eq!(killed.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["run_0001", "run_0002"]);
    assert!(
        killed
            .iter()
            .all(|r| r.status == RunStatus::Killed && r.end_reason.as_deref() == Some("kill_switch"))
    );
    assert_eq!(s.create_run(&new_run(4, "t1", 1003), "p").await.unwrap_err(), StoreError::KillSwitch);
    assert_eq!(s.run("run_0004").await.unwrap(), None, "a refused run leaves no row");
    assert_eq!(
        s.run("run_0010").await.unwrap().unwrap().status,
        RunStatus::Live,
        "other tenants are untouched"
    );
    let t1 = s.tenant("t1").await.unwrap().unwrap();
    assert!(t1.kill_switch);
    assert_eq!(t1.kill_switch_reason.as_deref(), Some("incident 7"));
    assert!(s.set_kill_switch("t1", false, None, "person:ada", 1004).await.unwrap().runs.is_empty());
    s.create_run(&new_run(4, "t1", 1005), "p").await.unwrap();

    let all = s.kill_all_runs("breach", "person:ada", 1006).await.unwrap().runs;
    assert_eq!(all.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["run_0004", "run_0010"]);
    let live = s.runs(None, Some(RunStatus::Live), &PageRequest::default()).await.unwrap();
    assert!(live.items.is_empty());
    assert_chain_intact(s).await;
}

pub async fn a_run_created_while_the_switch_is_engaged_is_never_left_live(f: Fresh) {
    // Creation and engagement race from two nodes: whichever order the
    // store puts them in, no live run of the tenant remains afterwards.
    let s = f.store.clone();
    let other = f.another_node().await;
    let creating = tokio::spawn(async move {
        let mut created = 0;
        for n in 0..40 {
            if s.create_run(&new_run(n, "t1", 1000), "p").await.is_ok() {
                created += 1;
            }
        }
        created
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    other.set_kill_switch("t1", true, None, "ada", 1001).await.unwrap();
    let _ = creating.await.unwrap();
    let live = other
        .runs(Some("t1"), Some(RunStatus::Live), &PageRequest { limit: 500, cursor: None })
        .await
        .unwrap();
    assert!(live.items.is_empty(), "live after the kill switch: {:?}", live.items);
}

pub async fn runs_created_at_once_are_each_answered_on_their_own(f: Fresh) {
    // Many creations at once share transactions (group commit); each still
    // gets its own answer: a run of a switched-off tenant and a taken id are
    // refused alone, and every other run is recorded and audited.
    let s = &f.store;
    s.set_kill_switch("off", true, None, "ada", 999).await.unwrap();
    let mut runs: Vec<NewRun> =
        (0..60).map(|n| new_run(n, ["t1", "t2", "off"][n as usize % 3], 1000)).collect();
    runs.push(new_run(1, "t2", 1000)); // the id of run 1, again
    let answers = futures_util::future::join_all(runs.iter().map(|r| s.create_run(r, "p"))).await;
    let mut conflicts = 0;
    for (run, answer) in runs.iter().zip(&answers) {
        match answer {
            Ok(recorded) if run.tenant_id != "off" => assert_eq!(recorded.run_id, run.run_id),
            Err(StoreError::KillSwitch) if run.tenant_id == "off" => {}
            Err(StoreError::Conflict) if run.run_id == "run_0001" => conflicts += 1,
            other => panic!("{} of {}: {other:?}", run.run_id, run.tenant_id),
        }
    }
    assert_eq!(conflicts, 1, "one of the two creations of run_0001 wins");
    let live = s.runs(None, Some(RunStatus::Live), &PageRequest { limit: 500, cursor: None }).await.unwrap();
    assert_eq!(live.items.len(), 40);
    assert!(live.items.iter().all(|r| r.tenant_id != "off"));
    let entries = s.audit_entries(0, 1000).await.unwrap();
    assert_eq!(entries.iter().filter(|e| e.record.action == "run.create").count(), 40);
    assert_chain_intact(s).await;
}

pub async fn runs_list_newest_first_in_pages(f: Fresh) {
    let s = &f.store;
    for n in 0..5 {
        s.create_run(&new_run(n, if n % 2 == 0 { "t1" } else { "t2" }, 1000 + i64::from(n)), "p")
            .await
            .unwrap();
    }
    let mut seen: Vec<Run> = Vec::new();
    let mut cursor = None;
    loop {
        let page = s.runs(None, None, &PageRequest { limit: 2, cursor }).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(
        seen.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        ["run_0004", "run_0003", "run_0002", "run_0001", "run_0000"]
    );
    let t2 = s.runs(Some("t2"), Some(RunStatus::Live), &PageRequest::default()).await.unwrap();
    assert_eq!(t2.items.len(), 2);
}

pub async fn refusals_and_run_events_are_durable_filtered_and_paged(f: Fresh) {
    let s = &f.store;
    let mut events = Vec::new();
    for i in 0..7 {
        let run = if i % 2 == 0 { Some("run_a") } else { None };
        events.push(refusal(
            "t1",
            run,
            "egress_refused",
            "policy_not_allowed",
            Some("evil.example"),
            100 + i,
        ));
    }
    events.push(refusal("t2", Some("run_b"), "content_refused", "content_executable", None, 200));
    let mut ended = NewEvent::refusal(&gatehouse_core::Refusal {
        kind: gatehouse_core::RefusalKind::EgressRefused,
        reason: Reason::DnsFailed,
        tenant_id: Some("t1".into()),
        run_id: Some("run_a".into()),
        request_id: None,
        host: None,
        rule: None,
        lease_id: None,
        actor: None,
        file_name: None,
        dry_run: false,
        at: 300,
    });
    ended.kind = "run_ended".into();
    ended.reason = Some("succeeded".into());
    ended.refusal = false;
    events.push(ended);
    let seqs = s.append_events(&events).await.unwrap();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));

    let all = s.refusals(&RefusalFilter::default(), &PageRequest { limit: 5, cursor: None }).await.unwrap();
    assert_eq!(all.items.len(), 5);
    assert_eq!(all.items[0].event.kind, "content_refused", "newest first");
    let rest = s
        .refusals(&RefusalFilter::default(), &PageRequest { limit: 5, cursor: all.next_cursor })
        .await
        .unwrap();
    assert_eq!((rest.items.len(), rest.next_cursor), (3, None), "the run event is not a refusal");

    let narrow =
        RefusalFilter { tenant_id: Some("t1".into()), run_id: Some("run_a".into()), ..Default::default() };
    assert_eq!(s.refusals(&narrow, &PageRequest::default()).await.unwrap().items.len(), 4);
    let by_reason = RefusalFilter { reason: Some("content_executable".into()), ..Default::default() };
    assert_eq!(s.refusals(&by_reason, &PageRequest::default()).await.unwrap().items.len(), 1);
    let since = RefusalFilter { since: Some(104), kind: Some("egress_refused".into()), ..Default::default() };
    assert_eq!(s.refusals(&since, &PageRequest::default()).await.unwrap().items.len(), 3);
    let host = RefusalFilter { host: Some("evil.example".into()), ..Default::default() };
    assert_eq!(s.refusals(&host, &PageRequest::default()).await.unwrap().items.len(), 7);

    let run_a = s.run_events("run_a", 0, 100).await.unwrap();
    assert_eq!(run_a.len(), 5);
    assert_eq!(run_a.last().unwrap().event.kind, "run_ended");
    let after = s.run_events("run_a", run_a[2].seq, 100).await.unwrap();
    assert_eq!(after.len(), 2);

    // One entry per tenant and run refused in the batch, listing each refusal.
    assert_eq!(assert_chain_intact(s).await, 3, "t1/run_a, t1 outside a run, t2/run_b");
    let audited = |entries: Vec<gatehouse_store::AuditEntry>| {
        let mut listed: Vec<(Option<String>, String, i64)> = Vec::new();
        for e in entries {
            assert_eq!((e.record.action.as_str(), e.record.actor.as_str()), ("refusals", "gatehouse"));
            let items = e.record.detail["refusals"].as_array().unwrap();
            assert_eq!(e.record.detail["count"], items.len());
            for item in items {
                assert_eq!(item["request_id"], "req-1", "the request id is kept");
                listed.push((
                    e.record.tenant_id.clone(),
                    e.record.subject.clone(),
                    item["event_seq"].as_i64().unwrap(),
                ));
            }
        }
        listed
    };
    let before = audited(s.audit_entries(0, 100).await.unwrap());
    let refused: Vec<i64> =
        events.iter().zip(&seqs).filter(|(e, _)| e.refusal).map(|(_, seq)| *seq).collect();
    let mut listed_seqs: Vec<i64> = before.iter().map(|(_, _, seq)| *seq).collect();
    listed_seqs.sort_unstable();
    assert_eq!(listed_seqs, refused, "every refusal is audited once, run events are not");
    assert!(before.contains(&(Some("t2".into()), "run_b".into(), refused[7])));
    assert_eq!(s.prune_events(200).await.unwrap(), 7);
    assert_eq!(s.refusals(&RefusalFilter::default(), &PageRequest::default()).await.unwrap().items.len(), 1);
    assert_eq!(assert_chain_intact(s).await, 3, "pruning events never touches the audit log");
    assert_eq!(
        audited(s.audit_entries(0, 100).await.unwrap()),
        before,
        "the pruned refusals stay in the chain"
    );

    // A batch that holds an older time after a newer one: pruning never
    // deletes an event at or after its cutoff, and keeps the late one for
    // the next pass.
    s.append_events(&[
        refusal("t1", None, "egress_refused", "policy_denied", None, 500),
        refusal("t1", None, "egress_refused", "policy_denied", None, 150),
    ])
    .await
    .unwrap();
    assert_eq!(s.prune_events(400).await.unwrap(), 2, "t2's refusal at 200 and run_a's end at 300");
    let kept: Vec<i64> = s
        .refusals(&RefusalFilter::default(), &PageRequest::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|e| e.event.at)
        .collect();
    assert_eq!(kept, [150, 500], "newest number first");
    assert_eq!(s.prune_events(i64::MAX).await.unwrap(), 2);
}

/// Refusals from callers who proved nothing are counted, not itemized:
/// one row per minute, listener, client, kind and reason, which every node
/// adds to; listed with the others (with their count), never audited, and
/// pruned like every event.
pub async fn refusal_counts_add_up_across_nodes_unaudited_and_pruned(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    let count = |minute: i64, client: Option<&str>, reason: &str, count: i64| RefusalCount {
        minute,
        listener: "api".into(),
        client: client.map(str::to_owned),
        kind: "auth_refused".into(),
        reason: reason.into(),
        count,
    };
    let head = s.audit_head().await.unwrap();
    s.record_events(&[], &[count(60, Some("192.0.2.1"), "service_token_invalid", 400)]).await.unwrap();
    other
        .record_events(
            &[refusal("t1", None, "egress_refused", "policy_denied", None, 70)],
            &[
                count(60, Some("192.0.2.1"), "service_token_invalid", 600),
                count(60, None, "service_token_missing", 5),
                count(120, Some("192.0.2.1"), "service_token_invalid", 1),
            ],
        )
        .await
        .unwrap();
    let listed = s.refusals(&RefusalFilter::default(), &PageRequest::default()).await.unwrap().items;
    let rows: Vec<(i64, Option<&str>, Option<&str>, i64)> = listed
        .iter()
        .map(|e| (e.event.at, e.event.reason.as_deref(), e.client.as_deref(), e.count))
        .collect();
    assert_eq!(
        rows,
        [
            (120, Some("service_token_invalid"), Some("192.0.2.1"), 1),
            (60, Some("service_token_missing"), None, 5),
            (70, Some("policy_denied"), None, 1),
            (60, Some("service_token_invalid"), Some("192.0.2.1"), 1000),
        ],
        "one row per minute, client and reason, newest number first"
    );
    assert!(
        listed.iter().filter(|e| e.event.tenant_id.is_none()).all(|e| e.listener.as_deref() == Some("api"))
    );
    let audited = s.audit_entries(head.0, 100).await.unwrap();
    assert_eq!(audited.len(), 1, "only the itemized refusal is audited: {audited:?}");
    assert_eq!(audited[0].record.tenant_id.as_deref(), Some("t1"));
    assert_chain_intact(s).await;
    // A tenant's refusals never include the counts (they have no tenant).
    let filter = RefusalFilter { tenant_id: Some("t1".into()), ..RefusalFilter::default() };
    assert_eq!(s.refusals(&filter, &PageRequest::default()).await.unwrap().items.len(), 1);
    assert_eq!(s.prune_events(100).await.unwrap(), 3, "the first minute's rows and the refusal at 70");
    assert_eq!(s.prune_events(i64::MAX).await.unwrap(), 1);
    // A minute pruned and counted again starts a new row.
    s.record_events(&[], &[count(60, Some("192.0.2.1"), "service_token_invalid", 2)]).await.unwrap();
    let listed = s.refusals(&RefusalFilter::default(), &PageRequest::default()).await.unwrap().items;
    assert_eq!(listed.iter().map(|e| e.count).collect::<Vec<_>>(), [2]);
}

/// One page walks a bounded stretch of rows: a filter that matches only
/// an old refusal answers an early page with a cursor, and paging on finds
/// it; another tenant's refusals are not walked at all.
pub async fn a_rare_match_is_found_by_paging_on_not_by_walking_everything(f: Fresh) {
    let s = &f.store;
    let rare = refusal("t1", None, "egress_refused", "policy_denied", Some("rare.example"), 1);
    s.append_events(&[rare]).await.unwrap();
    let common: Vec<NewEvent> = (0..REFUSAL_SCAN_ROWS + 10)
        .map(|i| refusal("t1", None, "egress_refused", "policy_not_allowed", Some("common.example"), 2 + i))
        .collect();
    for chunk in common.chunks(2_000) {
        s.append_events(chunk).await.unwrap();
    }
    let others: Vec<NewEvent> = (0..50)
        .map(|i| refusal("t2", None, "egress_refused", "policy_denied", Some("rare.example"), 20_000 + i))
        .collect();
    s.append_events(&others).await.unwrap();
    let filter = RefusalFilter {
        tenant_id: Some("t1".into()),
        reason: Some("policy_denied".into()),
        ..RefusalFilter::default()
    };
    let first = s.refusals(&filter, &PageRequest { limit: 50, cursor: None }).await.unwrap();
    assert!(first.items.is_empty(), "the walk stops at its bound");
    let cursor = first.next_cursor.expect("and says where to go on");
    let second = s.refusals(&filter, &PageRequest { limit: 50, cursor: Some(cursor) }).await.unwrap();
    assert_eq!(second.items.len(), 1);
    assert_eq!(second.items[0].event.host.as_deref(), Some("rare.example"));
    assert_eq!(second.next_cursor, None, "the walk reached the oldest refusal");
    // Unfiltered pages are full pages, newest first.
    let t1 = RefusalFilter { tenant_id: Some("t1".into()), ..RefusalFilter::default() };
    let page = s.refusals(&t1, &PageRequest { limit: 3, cursor: None }).await.unwrap();
    assert_eq!(
        page.items.iter().map(|e| e.event.at).collect::<Vec<_>>(),
        [REFUSAL_SCAN_ROWS + 11, REFUSAL_SCAN_ROWS + 10, REFUSAL_SCAN_ROWS + 9]
    );
}

pub async fn event_numbers_only_grow_across_nodes_and_pruning(f: Fresh) {
    let other = f.another_node().await;
    let batch = |n: i64| {
        (0..n)
            .map(|i| refusal("t1", Some("run_1"), "egress_refused", "policy_denied", None, 100 + i))
            .collect::<Vec<_>>()
    };
    let (seven_hundred, three_hundred) = (batch(700), batch(300));
    let (a, b) = tokio::join!(f.store.append_events(&seven_hundred), other.append_events(&three_hundred));
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut all: Vec<i64> = a.iter().chain(&b).copied().collect();
    assert!(
        a.windows(2).all(|w| w[1] == w[0] + 1) && b.windows(2).all(|w| w[1] == w[0] + 1),
        "each batch in order"
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 1000, "no number given twice");
    // Everything pruned: numbers still only grow, so a reader's cursor stays valid.
    assert_eq!(f.store.prune_events(10_000).await.unwrap(), 1000);
    let next = f.store.append_events(&batch(1)).await.unwrap();
    assert!(next[0] > *all.last().unwrap(), "{next:?} after {:?}", all.last());
    let events = f.store.run_events("run_1", *all.last().unwrap(), 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), next);
    assert_chain_intact(&f.store).await;
}

pub async fn nodes_appending_at_once_keep_one_unbroken_chain(f: Fresh) {
    let a = f.store.clone();
    let b = f.another_node().await;
    let task = |store: Store, tenant: &'static str| {
        tokio::spawn(async move {
            for i in 0..25 {
                store.set_policy(tenant, r#"{"mode":"open"}"#, "p", i).await.unwrap();
                let e = refusal(tenant, None, "grant_refused", "grant_tampered", None, i);
                store.append_events(&[e.clone(), e]).await.unwrap();
            }
        })
    };
    let (x, y) = tokio::join!(task(a.clone(), "t1"), task(b, "t2"));
    x.unwrap();
    y.unwrap();
    // Per round and node: the policy change, and one entry for the batch's two refusals.
    assert_eq!(assert_chain_intact(&a).await, 100);
    assert_eq!(a.current_policy("t2").await.unwrap().unwrap().version, 25);
}

fn submission(id: &str, pull_request: i64, head: char, created_at: i64) -> gatehouse_store::NewScan {
    gatehouse_store::NewScan {
        scan_id: id.into(),
        tenant_id: "t1".into(),
        repository: "octo/app".into(),
        pull_request,
        head_sha: head.to_string().repeat(40),
        created_at,
    }
}

fn outcome(id: &str, status: &str, levels: &[&str]) -> gatehouse_store::ScanOutcome {
    gatehouse_store::ScanOutcome {
        status: status.into(),
        levels: levels.iter().map(|l| (*l).to_owned()).collect(),
        report: format!("{{\"scan_id\":\"{id}\"}}"),
    }
}

pub async fn the_scan_submitted_last_counts_whichever_finished_first(f: Fresh) {
    let other = f.another_node().await;
    // Two nodes submit at once: each submission gets its own number, recorded pending with it.
    let (sa, sb) = (submission("scan_a", 7, 'a', 100), submission("scan_b", 7, 'a', 100));
    let (a, b) = tokio::join!(f.store.submit_scan(&sa, "worker"), other.submit_scan(&sb, "worker"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a, b);
    let (first, second) = if a < b { ("scan_a", "scan_b") } else { ("scan_b", "scan_a") };
    let pending = f.store.scan("t1", second).await.unwrap().unwrap();
    assert_eq!(
        (pending.status.as_str(), pending.finished_at, pending.report.as_str()),
        ("pending", None, "")
    );
    let newest = f.store.newest_scan_of_head("t1", "octo/app", 7, &"a".repeat(40)).await.unwrap().unwrap();
    assert_eq!(
        (newest.scan_id.as_str(), newest.status.as_str()),
        (second, "pending"),
        "pending counts at once"
    );
    // The later submission finishes first; the earlier one after it.
    assert!(other.finish_scan(second, &outcome(second, "ok", &[]), 150, "worker").await.unwrap());
    assert!(
        f.store
            .finish_scan(first, &outcome(first, "error", &["high", "unknown"]), 160, "worker")
            .await
            .unwrap()
    );
    // A scan finishes once.
    assert!(!f.store.finish_scan(first, &outcome(first, "ok", &[]), 170, "worker").await.unwrap());
    assert!(
        !f.store.finish_scan("scan_none", &outcome("scan_none", "ok", &[]), 170, "worker").await.unwrap()
    );
    let newest = f.store.newest_scan_of_head("t1", "octo/app", 7, &"a".repeat(40)).await.unwrap().unwrap();
    assert_eq!(
        (newest.scan_id.as_str(), newest.status.as_str(), newest.finished_at),
        (second, "ok", Some(150)),
        "submission order, not completion order"
    );
    // Another head of the same pull request, and another pull request.
    f.store.submit_scan(&submission("scan_head_b", 7, 'b', 200), "worker").await.unwrap();
    f.store.submit_scan(&submission("scan_other_pr", 8, 'a', 210), "worker").await.unwrap();
    let head_b = f.store.newest_scan_of_head("t1", "octo/app", 7, &"b".repeat(40)).await.unwrap().unwrap();
    assert_eq!(head_b.scan_id, "scan_head_b");
    let head_a = f.store.newest_scan_of_head("t1", "octo/app", 7, &"a".repeat(40)).await.unwrap().unwrap();
    assert_eq!(head_a.scan_id, second, "a newer head's submission is not the old head's");
    assert_eq!(f.store.newest_scan_of_head("t1", "octo/app", 7, &"c".repeat(40)).await.unwrap(), None);
    assert_eq!(f.store.newest_scan_of_head("t2", "octo/app", 7, &"a".repeat(40)).await.unwrap(), None);
    assert_eq!(f.store.scan("t2", second).await.unwrap(), None, "scans are their tenant's own");

    let newest = |pr| {
        let store = f.store.clone();
        async move {
            store
                .scans("t1", Some("octo/app"), Some(pr), &PageRequest { limit: 2, cursor: None })
                .await
                .unwrap()
        }
    };
    let seven = newest(7).await;
    assert_eq!(seven.items[0].scan_id, "scan_head_b");
    assert_eq!(seven.items[1].scan_id, second);
    let older = f
        .store
        .scans("t1", Some("octo/app"), Some(7), &PageRequest { limit: 5, cursor: seven.next_cursor })
        .await
        .unwrap();
    let read = &older.items[0];
    assert_eq!(
        (read.scan_id.as_str(), read.status.as_str(), read.levels.clone(), read.finished_at, read.created_at),
        (first, "error", vec!["high".to_owned(), "unknown".to_owned()], Some(160), 100),
        "read back whole"
    );
    assert_eq!(read.report, format!("{{\"scan_id\":\"{first}\"}}"));
    assert_eq!(newest(8).await.items[0].scan_id, "scan_other_pr");
    let all = f.store.scans("t1", None, None, &PageRequest::default()).await.unwrap();
    assert_eq!(all.items.len(), 4);
    assert_eq!(f.store.scans("t2", None, None, &PageRequest::default()).await.unwrap().items, vec![]);
    // A scan id is recorded once.
    assert!(f.store.submit_scan(&submission(second, 7, 'a', 300), "worker").await.is_err());

    // A node that stopped leaves its scans pending: those submitted before
    // the bound are marked errored, once; newer ones are left to finish.
    assert_eq!(f.store.fail_stale_scans(205, 400, "gatehouse").await.unwrap(), 1);
    let failed = f.store.scan("t1", "scan_head_b").await.unwrap().unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.finished_at, failed.report.as_str()),
        ("error", Some(400), "")
    );
    assert_eq!(f.store.scan("t1", "scan_other_pr").await.unwrap().unwrap().status, "pending");
    assert_eq!(f.store.fail_stale_scans(205, 401, "gatehouse").await.unwrap(), 0);
    assert!(
        !f.store.finish_scan("scan_head_b", &outcome("scan_head_b", "ok", &[]), 402, "worker").await.unwrap(),
        "a scan marked errored is never finished later"
    );

    let audit = f.store.audit_entries(0, 100).await.unwrap();
    assert_eq!(audit.iter().filter(|e| e.record.action == "dependency_scan.create").count(), 4);
    let finished: Vec<_> = audit.iter().filter(|e| e.record.action == "dependency_scan.finish").collect();
    assert_eq!(finished.len(), 3);
    assert_eq!(finished[2].record.detail["interrupted"], true);
    assert_eq!(finished[2].record.subject, "scan_head_b");
    assert_eq!(assert_chain_intact(&f.store).await, 7, "the refused duplicate left nothing");
}

pub async fn the_verifier_names_the_first_tampered_entry(f: Fresh) {
    let s = &f.store;
    for i in 0..6 {
        s.set_policy("t1", r#"{"mode":"open"}"#, "p", i).await.unwrap();
    }
    let raw = raw(&f.url).await;
    let broken = |r: Result<i64, gatehouse_store::Broken>| r.unwrap_err();

    raw.exec(r#"UPDATE audit_log SET actor = 'mallory' WHERE seq = 3"#).await;
    let b = broken(s.verify_audit(vec![]).await.unwrap());
    assert_eq!((b.first_bad_seq, b.why), (3, "hash_mismatch"));
    raw.exec(r#"UPDATE audit_log SET actor = 'p' WHERE seq = 3"#).await;
    assert_eq!(s.verify_audit(vec![]).await.unwrap(), Ok(6));

    // Checkpoint the head, then remove the last two entries and rewind the head.
    let (seq, hash) = s.audit_head().await.unwrap();
    // A head rewound over entries still stored is caught, though the walk stops at it.
    let hash5 = s.audit_entries(4, 1).await.unwrap()[0].hash.clone();
    raw.exec(&format!("UPDATE control SET audit_seq = 5, audit_hash = '{hash5}' WHERE id = 1")).await;
    let b = broken(s.verify_audit(vec![]).await.unwrap());
    assert_eq!((b.first_bad_seq, b.why), (6, "head_mismatch"));
    raw.exec(&format!("UPDATE control SET audit_seq = {seq}, audit_hash = '{hash}' WHERE id = 1")).await;
    raw.exec("DELETE FROM audit_log WHERE seq > 4").await;
    assert_eq!(broken(s.verify_audit(vec![]).await.unwrap()).why, "head_mismatch");
    let (_, hash4) = {
        let e = s.audit_entries(3, 1).await.unwrap();
        (e[0].seq, e[0].hash.clone())
    };
    raw.exec(&format!("UPDATE control SET audit_seq = 4, audit_hash = '{hash4}' WHERE id = 1")).await;
    assert_eq!(s.verify_audit(vec![]).await.unwrap(), Ok(4), "truncation alone looks intact");
    let b = broken(s.verify_audit(vec![(seq, hash)]).await.unwrap());
    assert_eq!((b.first_bad_seq, b.why), (5, "checkpoint_missing"));

    raw.exec("DELETE FROM audit_log WHERE seq = 2").await;
    let b = broken(s.verify_audit(vec![]).await.unwrap());
    assert_eq!((b.first_bad_seq, b.why), (2, "seq_gap"));
}

pub async fn a_busy_chain_verifies_and_checkpoints_to_the_head_it_read(f: Fresh) {
    // Another node appends audited changes and refusals all along.
    let writer = f.another_node().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appending = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                writer.set_policy("t1", r#"{"mode":"open"}"#, "p", i).await.unwrap();
                let e = refusal("t1", None, "grant_refused", "grant_tampered", None, i);
                writer.append_events(&[e]).await.unwrap();
                i += 1;
            }
            i
        })
    };
    while f.store.audit_head().await.unwrap().0 < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut heads: Vec<(i64, String)> = Vec::new();
    let mut grew_meanwhile = 0;
    for _ in 0..30 {
        let head = f.store.verify_audit_head(heads.clone()).await.unwrap();
        let (seq, hash) = head.unwrap_or_else(|b| panic!("a busy chain is intact: {b:?}"));
        assert!(heads.last().is_none_or(|(last, _)| *last <= seq), "heads only move on");
        if f.store.audit_head().await.unwrap().0 > seq {
            grew_meanwhile += 1;
        }
        // What the checkpoint command signs: the head this walk vouched for.
        assert_eq!(f.store.audit_entries(seq - 1, 1).await.unwrap()[0].hash, hash);
        heads.push((seq, hash));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = appending.await.unwrap();
    assert!(grew_meanwhile > 0, "the chain grew while it was verified");
    // Every head vouched for is on the finished chain.
    assert_eq!(f.store.verify_audit(heads).await.unwrap(), Ok(rounds * 2));
}

pub async fn a_stored_detail_that_is_not_exactly_canonical_is_refused(f: Fresh) {
    let s = &f.store;
    s.set_policy("t1", r#"{"mode":"open"}"#, "p", 1).await.unwrap();
    let e = refusal("t1", Some("run_1"), "grant_refused", "grant_tampered", None, 2);
    s.append_events(&[e]).await.unwrap();
    s.set_policy("t1", r#"{"mode":"open"}"#, "p", 3).await.unwrap();
    let head = s.audit_head().await.unwrap();
    let entry = s.audit_entries(1, 1).await.unwrap().remove(0);
    assert_eq!(entry.record.action, "refusals");
    let stored = gatehouse_store::audit::canonical_detail(&entry.record.detail);
    assert!(stored.starts_with(r#"{"count":1,"refusals":["#), "{stored}");
    let raw = raw(&f.url).await;
    let set = |detail: String| {
        let raw = &raw;
        async move {
            let quoted = detail.replace('\'', "''");
            raw.exec(&format!("UPDATE audit_log SET detail = '{quoted}' WHERE seq = 2")).await;
        }
    };
    let rest = &stored[r#"{"count":1"#.len()..];
    let edits = [
        // A duplicate key: SQLite's JSON functions read the first, serde the last.
        format!(r#"{{"count":999,"count":1{rest}"#),
        format!(r#"{{"count":1,"count":1{rest}"#),
        // Other spacing, another number form, another key order, another string form.
        format!(r#"{{"count": 1{rest}"#),
        format!(r#"{{"count":1.0{rest}"#),
        format!(r#"{{"count":1e0{rest}"#),
        format!("{stored} "),
        format!("{{{},\"count\":1}}", &rest[1..rest.len() - 1]),
        stored.replacen("grant_tampered", r"grant\u005ftampered", 1),
    ];
    for edited in edits {
        assert_ne!(edited, stored);
        set(edited.clone()).await;
        let b = s.verify_audit(vec![head.clone()]).await.unwrap().unwrap_err();
        assert_eq!((b.first_bad_seq, b.why), (2, "detail_noncanonical"), "{edited}");
        set(stored.clone()).await;
        assert_eq!(s.verify_audit(vec![head.clone()]).await.unwrap(), Ok(3));
    }
    // The reader reads it strictly too: a duplicate key is no object.
    set(format!(r#"{{"count":999,"count":1{rest}"#)).await;
    let read = s.audit_entries(1, 1).await.unwrap().remove(0);
    assert!(read.record.detail.is_string(), "{:?}", read.record.detail);
}

pub async fn mcp_servers_are_versioned_audited_and_replicated(f: Fresh) {
    let s = &f.store;
    let v0 = s.settings_version().await.unwrap();
    s.set_policy("t1", r#"{"mode":"open"}"#, "platform", 100).await.unwrap();
    let first = s.set_mcp_servers("t1", r#"{"servers":[]}"#, "platform", 110).await.unwrap();
    let doc = r#"{"servers":[{"name":"tools","url":"https://mcp.example/mcp","tools":{"deny":["rm"]}}]}"#;
    let second = s.set_mcp_servers("t1", doc, "person:ada", 120).await.unwrap();
    assert_eq!((first.version, second.version), (1, 2));
    let t1 = s.tenant("t1").await.unwrap().unwrap();
    let current = t1.mcp_servers.unwrap();
    assert_eq!((current.version, current.document.as_str(), current.actor.as_str()), (2, doc, "person:ada"));
    assert!(!t1.mcp_servers_missing);
    assert_eq!(t1.policy.unwrap().version, 1, "the policy's version is its own");
    // Every node's replica sees the change.
    let (version, changed) = s.settings_since(v0 + 2).await.unwrap();
    assert_eq!((version, changed.len()), (v0 + 3, 1));
    assert_eq!(changed[0].mcp_servers.as_ref().map(|m| m.version), Some(2));
    // Audited in the chain, with the document.
    let entries = s.audit_entries(0, 100).await.unwrap();
    let set: Vec<_> = entries.iter().filter(|e| e.record.action == "mcp_servers.set").collect();
    assert_eq!(set.len(), 2);
    assert_eq!(set[1].record.detail["servers"]["servers"][0]["name"], "tools");
    assert_eq!(assert_chain_intact(s).await, 3);
    // A declaration whose current row is gone is missing, never "none".
    raw(&f.url).await.exec("DELETE FROM mcp_server_versions WHERE tenant_id = 't1' AND version = 2").await;
    let t1 = s.tenant("t1").await.unwrap().unwrap();
    assert!(t1.mcp_servers.is_none() && t1.mcp_servers_missing);
    // A tenant that never declared any: none, not missing.
    s.set_gate_mode("t2", "off", "p", 130).await.unwrap();
    let t2 = s.tenant("t2").await.unwrap().unwrap();
    assert!(t2.mcp_servers.is_none() && !t2.mcp_servers_missing);
}

pub async fn a_missing_current_policy_is_unreadable_never_open(f: Fresh) {
    let s = &f.store;
    let unreadable = StoreError::Refused(Reason::PolicyUnreadable);
    for t in ["t1", "t2", "t3", "t4"] {
        s.set_policy(t, r#"{"mode":"allowlist","allow":["a.example"]}"#, "p", 1).await.unwrap();
        s.set_policy(t, r#"{"mode":"allowlist","allow":["b.example"]}"#, "p", 2).await.unwrap();
    }
    s.set_gate_mode("t5", "off", "p", 3).await.unwrap();
    let raw = raw(&f.url).await;
    // t1: the current row deleted; t2: the tenant rewound to no policy while
    // versions exist; t3: rewound to an older version; t4: its tenant row gone.
    raw.exec("DELETE FROM policy_versions WHERE tenant_id = 't1' AND version = 2").await;
    raw.exec("UPDATE tenants SET policy_version = 0 WHERE tenant_id = 't2'").await;
    raw.exec("UPDATE tenants SET policy_version = 1 WHERE tenant_id = 't3'").await;
    raw.exec("DELETE FROM tenants WHERE tenant_id = 't4'").await;
    for t in ["t1", "t2", "t3", "t4"] {
        assert_eq!(s.current_policy(t).await.unwrap_err(), unreadable, "{t}");
    }
    // Never set a policy (with or without other settings): the default.
    assert_eq!(s.current_policy("t5").await.unwrap(), None);
    assert_eq!(s.current_policy("t6").await.unwrap(), None);
    // What every node's replica loads says the same.
    let (_, all) = s.settings_since(0).await.unwrap();
    let mut missing: Vec<(&str, bool)> =
        all.iter().map(|t| (t.tenant_id.as_str(), t.policy_missing && t.policy.is_none())).collect();
    missing.sort_unstable();
    assert_eq!(missing, [("t1", true), ("t2", true), ("t3", true), ("t4", true), ("t5", false)]);
    // A new version heals it.
    s.set_policy("t1", r#"{"mode":"open"}"#, "p", 4).await.unwrap();
    assert_eq!(s.current_policy("t1").await.unwrap().unwrap().version, 3);
}

pub async fn a_store_that_is_down_says_store_unavailable(_f: Fresh) {
    let port = gatehouse_test_support::free_port();
    let mut config = StoreConfig::new(format!("postgres://postgres@127.0.0.1:{port}/none"));
    config.op_timeout = Duration::from_millis(500);
    let down = Store::connect(&config).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(down.set_policy("t1", "{}", "p", 1).await.unwrap_err(), StoreError::Unavailable);
    assert_eq!(
        down.create_run(&new_run(1, "t1", 1), "p").await.unwrap_err().reason().as_str(),
        "store_unavailable"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(Store::connect(&StoreConfig::new("mysql://x")).await.unwrap_err(), StoreError::InvalidUrl);
}

pub async fn a_lease_lives_two_minutes_renewed_by_heartbeats_and_dies_with_its_run(f: Fresh) {
    let s = &f.store;
    let run = s.create_run(&new_run(1, "t1", 1000), "platform").await.unwrap();
    let mut short = new_run(2, "t1", 1000);
    short.expires_at = 1050;
    s.create_run(&short, "platform").await.unwrap();
    s.create_run(&new_run(3, "t1", 1000), "platform").await.unwrap();
    let given = credential("cred_1", "t1", "github", "github.com", 1000);
    let cred = s.create_credential(&given, "person:ada").await.unwrap();
    assert_eq!(cred, given, "read back whole");

    let (lease, holder) =
        s.grant_lease(&new_lease(1, &run.run_id, &cred), "dispatcher", 1000, 120).await.unwrap();
    assert_eq!(holder, run);
    let l1 = lease.lease_id.clone();
    assert_eq!(
        lease,
        Lease {
            lease_id: lease_id(1),
            tenant_id: "t1".into(),
            run_id: "run_0001".into(),
            credential_id: "cred_1".into(),
            purpose: "git_provider".into(),
            host: "github.com".into(),
            status: LeaseStatus::Live,
            created_at: 1000,
            expires_at: 1000 + LEASE_LIFETIME_SECS,
            revoked_at: None,
            revoke_reason: None,
            revoked_by: None,
        }
    );
    // A run whose lifetime ends sooner caps its lease there.
    let l2 = grant(s, 2, "run_0002", &cred, 1000).await;
    assert_eq!(lease_at(s, &l2, 1000).await, (LeaseStatus::Live, 1050));

    // Two minutes on, unrenewed, it reads expired; reading renews nothing.
    assert_eq!(lease_at(s, &l1, 1119).await, (LeaseStatus::Live, 1120));
    assert_eq!(lease_at(s, &l1, 1120).await, (LeaseStatus::Expired, 1120));
    assert_eq!(lease_at(s, &l1, 1121).await, (LeaseStatus::Expired, 1120));
    assert_eq!(lease_at(s, &l1, 1000).await, (LeaseStatus::Live, 1120), "reading is not renewing");

    // A heartbeat renews the run's live leases for two minutes from itself...
    let (beat, renewed) = s.heartbeat("run_0001", 1060, 120).await.unwrap();
    assert_eq!((beat.heartbeat_at, renewed), (1060, 1));
    assert_eq!(lease_at(s, &l1, 1121).await, (LeaseStatus::Live, 1180));
    // ... but never past the run's lifetime.
    assert_eq!(s.heartbeat("run_0002", 1040, 120).await.unwrap().1, 1);
    assert_eq!(lease_at(s, &l2, 1040).await, (LeaseStatus::Live, 1050));

    // A heartbeat never revives a revoked lease...
    let gone = s.revoke_lease(&l2, "revoked", "person:ada", 1045).await.unwrap().unwrap();
    assert_eq!(
        (gone.status, gone.revoked_at, gone.revoke_reason.as_deref(), gone.revoked_by.as_deref()),
        (LeaseStatus::Revoked, Some(1045), Some("revoked"), Some("person:ada"))
    );
    assert_eq!(s.heartbeat("run_0002", 1046, 120).await.unwrap().1, 0);
    assert_eq!(lease_at(s, &l2, 1046).await, (LeaseStatus::Revoked, 1050));
    // ... nor an expired one (a generous heartbeat timeout keeps the run live past it).
    let l3 = grant(s, 3, "run_0003", &cred, 1000).await;
    assert_eq!(s.heartbeat("run_0003", 1130, 300).await.unwrap().1, 0);
    assert_eq!(lease_at(s, &l3, 1130).await, (LeaseStatus::Expired, 1120));
    assert_eq!(lease_at(s, &l3, 1000).await, (LeaseStatus::Live, 1120), "its expiry is untouched");

    // The door sees the lease with its credential.
    let live = s.lease(&l1, 1100).await.unwrap().unwrap();
    assert_eq!(
        s.door_leases("run_0001", 1100).await.unwrap(),
        vec![DoorLease { lease: live, credential: Some(cred.clone()) }]
    );

    // Ending the run revokes its lease in the same change.
    let (ended, leases_revoked) =
        s.finish_run("run_0001", RunStatus::Ended, "succeeded", "dispatcher", 1100).await.unwrap();
    assert_eq!((ended.status, leases_revoked), (RunStatus::Ended, Some(1)));
    assert_eq!(revocation(s, &l1).await, revoked(1100, "run_ended", "dispatcher"));
    assert_eq!(lease_at(s, &l1, 1100).await, (LeaseStatus::Revoked, 1180));
    assert_eq!(s.heartbeat("run_0001", 1101, 120).await.unwrap_err(), StoreError::RunNotLive);
    assert_eq!(lease_at(s, &l1, 1101).await.0, LeaseStatus::Revoked, "a refused heartbeat renews nothing");
    let (_, again) = s.finish_run("run_0001", RunStatus::Cancelled, "cancelled", "ada", 1102).await.unwrap();
    assert_eq!(again, None);
    let door = s.door_leases("run_0001", 1100).await.unwrap();
    assert_eq!(door.len(), 1);
    assert_eq!((door[0].lease.status, door[0].credential.as_ref()), (LeaseStatus::Revoked, Some(&cred)));
    assert_eq!(s.door_leases("run_nope", 1100).await.unwrap(), vec![]);

    // Every grant and revocation is in the chain, naming what it bound.
    let entries = s.audit_entries(0, 100).await.unwrap();
    let of = |action: &str| {
        entries
            .iter()
            .filter(|e| e.record.action == action)
            .map(|e| (e.record.subject.clone(), e.record.detail["reason"].as_str().map(str::to_owned)))
            .collect::<Vec<_>>()
    };
    assert_eq!(of("lease.grant"), [(l1.clone(), None), (l2.clone(), None), (l3, None)]);
    assert_eq!(of("lease.revoke"), [(l2, Some("revoked".into())), (l1.clone(), Some("run_ended".into()))]);
    let first = entries.iter().find(|e| e.record.action == "lease.grant").unwrap();
    assert_eq!((first.record.tenant_id.as_deref(), first.record.actor.as_str()), (Some("t1"), "dispatcher"));
    assert_eq!(
        (&first.record.detail["run_id"], &first.record.detail["credential_id"], &first.record.detail["host"]),
        (&serde_json::json!("run_0001"), &serde_json::json!("cred_1"), &serde_json::json!("github.com"))
    );
    assert_eq!(
        assert_chain_intact(s).await,
        10,
        "3 runs, a credential, 3 grants, 2 revocations, an end; the no-op end is not audited"
    );
}

pub async fn lease_grants_are_refused_by_the_rules(f: Fresh) {
    let s = &f.store;
    for n in 1..=3 {
        s.create_run(&new_run(n, "t1", 1000), "p").await.unwrap();
    }
    let mut short = new_run(4, "t1", 1000);
    short.expires_at = 1050;
    s.create_run(&short, "p").await.unwrap();
    let github =
        s.create_credential(&credential("cred_1", "t1", "github", "github.com", 1000), "p").await.unwrap();
    let gitlab =
        s.create_credential(&credential("cred_2", "t1", "gitlab", "gitlab.com", 1000), "p").await.unwrap();
    let theirs =
        s.create_credential(&credential("cred_3", "t2", "github", "github.com", 1000), "p").await.unwrap();
    s.finish_run("run_0002", RunStatus::Ended, "succeeded", "p", 1001).await.unwrap();
    let audited = assert_chain_intact(s).await;

    let refused = |lease: NewLease, at: i64| async move {
        let err = s.grant_lease(&lease, "dispatcher", at, 120).await.unwrap_err();
        assert_eq!(s.lease(&lease.lease_id, at).await.unwrap(), None, "a refused grant leaves no row");
        err
    };
    let wrong_host = NewLease { host: "api.github.com".into(), ..new_lease(1, "run_0001", &github) };
    assert_eq!(refused(wrong_host, 1002).await, StoreError::Refused(Reason::LeaseHostMismatch));
    let wrong_purpose = NewLease { purpose: "mcp_server".into(), ..new_lease(2, "run_0001", &github) };
    assert_eq!(refused(wrong_purpose, 1002).await, StoreError::Refused(Reason::LeasePurposeMismatch));
    // Ids of one tenant never resolve in another, even with the right host and purpose.
    assert_eq!(
        refused(new_lease(3, "run_0001", &theirs), 1002).await,
        StoreError::Refused(Reason::CredentialUnknown)
    );
    let unknown = NewLease { credential_id: "cred_nope".into(), ..new_lease(4, "run_0001", &github) };
    assert_eq!(refused(unknown, 1002).await, StoreError::Refused(Reason::CredentialUnknown));
    assert_eq!(
        refused(new_lease(5, "run_0002", &github), 1002).await,
        StoreError::Refused(Reason::RunNotLive)
    );
    // Past its heartbeat deadline a run is not live, though no sweep has expired it yet.
    assert_eq!(
        refused(new_lease(6, "run_0003", &github), 1120).await,
        StoreError::Refused(Reason::RunNotLive)
    );
    assert_eq!(s.run("run_0003").await.unwrap().unwrap().status, RunStatus::Live, "not swept");
    // Nor past its lifetime.
    assert_eq!(
        refused(new_lease(7, "run_0004", &github), 1050).await,
        StoreError::Refused(Reason::RunNotLive)
    );
    assert_eq!(refused(new_lease(8, "run_nope", &github), 1002).await, StoreError::NotFound);
    assert!(all_leases(s, &LeaseFilter::default(), 1002).await.is_empty());
    assert_eq!(assert_chain_intact(s).await, audited, "refusals are not audited as grants");

    // Once one of its leases is revoked, a run never gets another, of any credential.
    let l10 = grant(s, 10, "run_0001", &github, 1002).await;
    let l11 = grant(s, 11, "run_0001", &gitlab, 1002).await;
    s.revoke_lease(&l10, "revoked", "person:ada", 1003).await.unwrap().unwrap();
    let before = all_leases(s, &LeaseFilter::default(), 1004).await;
    assert_eq!(
        refused(new_lease(12, "run_0001", &github), 1004).await,
        StoreError::Refused(Reason::RunLeaseRevoked)
    );
    assert_eq!(
        refused(new_lease(13, "run_0001", &gitlab), 1004).await,
        StoreError::Refused(Reason::RunLeaseRevoked),
        "even for a different credential"
    );
    assert_eq!(
        refused(NewLease { host: "evil.example".into(), ..new_lease(14, "run_0001", &gitlab) }, 1004).await,
        StoreError::Refused(Reason::RunLeaseRevoked),
        "checked before the credential"
    );
    // The mark is the run's: another run of the tenant still gets leases.
    let l15 = grant(s, 15, "run_0003", &github, 1004).await;
    let after = all_leases(s, &LeaseFilter::default(), 1004).await;
    assert_eq!(after[1..], before[..], "only the allowed grant was added");
    assert_eq!(after.iter().map(|l| l.lease_id.as_str()).collect::<Vec<_>>(), [&l15, &l11, &l10]);
    // A run that ended is refused as not live first.
    s.finish_run("run_0001", RunStatus::Ended, "succeeded", "p", 1005).await.unwrap();
    assert_eq!(
        refused(new_lease(16, "run_0001", &github), 1006).await,
        StoreError::Refused(Reason::RunNotLive)
    );
    let listed = |filter: LeaseFilter| async move {
        all_leases(s, &filter, 1006).await.into_iter().map(|l| l.lease_id).collect::<Vec<_>>()
    };
    let of_run = LeaseFilter { run_id: Some("run_0001".into()), ..Default::default() };
    assert_eq!(listed(of_run).await, [l11.as_str(), l10.as_str()]);
    let live = LeaseFilter { status: Some(LeaseStatus::Live), ..Default::default() };
    assert_eq!(listed(live).await, [l15.as_str()]);
    let of_gitlab = LeaseFilter { credential_id: Some("cred_2".into()), ..Default::default() };
    assert_eq!(listed(of_gitlab).await, [l11.as_str()]);
    assert!(listed(LeaseFilter { tenant_id: Some("t2".into()), ..Default::default() }).await.is_empty());
    let expired = LeaseFilter { status: Some(LeaseStatus::Expired), ..Default::default() };
    assert_eq!(all_leases(s, &expired, 1004 + LEASE_LIFETIME_SECS).await.len(), 1, "{l15} lapsed");
    assert_chain_intact(s).await;
}

pub async fn revoking_a_lease_happens_once_across_nodes(f: Fresh) {
    let s = f.store.clone();
    let other = f.another_node().await;
    let cred =
        s.create_credential(&credential("cred_1", "t1", "github", "github.com", 1000), "p").await.unwrap();
    for n in 0..10 {
        let run = s.create_run(&new_run(n, "t1", 1000), "p").await.unwrap();
        let lease = grant(&s, u64::from(n), &run.run_id, &cred, 1000).await;
        let (a, b) = tokio::join!(
            s.revoke_lease(&lease, "revoked", "person:ada", 1001),
            other.revoke_lease(&lease, "leaked", "gatehouse", 1001),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.is_some() ^ b.is_some(), "exactly one revocation changes the lease: {a:?} {b:?}");
        let winner = a.or(b).unwrap();
        assert_eq!(s.lease(&lease, 1001).await.unwrap(), Some(winner), "the one stored is the winner's");
        assert_eq!(other.revoke_lease(&lease, "revoked", "ada", 1002).await.unwrap(), None);
    }
    assert_eq!(s.revoke_lease("lease_nope", "revoked", "ada", 1002).await.unwrap_err(), StoreError::NotFound);
    let entries = s.audit_entries(0, 1000).await.unwrap();
    assert_eq!(entries.iter().filter(|e| e.record.action == "lease.revoke").count(), 10);
    assert_eq!(
        assert_chain_intact(&s).await,
        31,
        "a credential, then per round a run, a grant, one revocation"
    );
}

pub async fn deleting_a_credential_revokes_its_leases_and_kill_switch_and_emergency_report_leases(f: Fresh) {
    let s = &f.store;
    s.create_run(&new_run(1, "t1", 1000), "p").await.unwrap();
    s.create_run(&new_run(2, "t1", 1000), "p").await.unwrap();
    let github =
        s.create_credential(&credential("cred_1", "t1", "github", "github.com", 1000), "p").await.unwrap();
    let gitlab =
        s.create_credential(&credential("cred_2", "t1", "gitlab", "gitlab.com", 1000), "p").await.unwrap();
    let l1 = grant(s, 1, "run_0001", &github, 1000).await;
    let l2 = grant(s, 2, "run_0002", &github, 1000).await;
    let l3 = grant(s, 3, "run_0001", &gitlab, 1000).await;

    // Deleting a credential revokes its leases, and only its.
    let gone = s.delete_credential("t1", "cred_1", "person:ada", 1010).await.unwrap();
    assert_eq!(
        gone.iter()
            .map(|l| (l.lease_id.as_str(), l.status, l.revoke_reason.as_deref(), l.revoked_by.as_deref()))
            .collect::<Vec<_>>(),
        [
            (l1.as_str(), LeaseStatus::Revoked, Some("credential_deleted"), Some("person:ada")),
            (l2.as_str(), LeaseStatus::Revoked, Some("credential_deleted"), Some("person:ada")),
        ]
    );
    assert_eq!(revocation(s, &l1).await, revoked(1010, "credential_deleted", "person:ada"));
    assert_eq!(s.credential("t1", "cred_1").await.unwrap(), None);
    assert_eq!(
        s.delete_credential("t1", "cred_1", "person:ada", 1011).await.unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(
        s.delete_credential("t2", "cred_2", "person:eve", 1011).await.unwrap_err(),
        StoreError::NotFound,
        "one tenant cannot delete another's credential"
    );
    assert_eq!(s.credential("t1", "cred_2").await.unwrap(), Some(gitlab.clone()));
    assert_eq!(lease_at(s, &l3, 1011).await.0, LeaseStatus::Live);
    let door = s.door_leases("run_0001", 1011).await.unwrap();
    assert_eq!(
        door.iter()
            .map(|d| (d.lease.lease_id.as_str(), d.lease.status, d.credential.as_ref()))
            .collect::<Vec<_>>(),
        [(l1.as_str(), LeaseStatus::Revoked, None), (l3.as_str(), LeaseStatus::Live, Some(&gitlab))],
        "a deleted credential is absent"
    );
    let entries = s.audit_entries(0, 100).await.unwrap();
    let deleted = entries.iter().find(|e| e.record.action == "credential.delete").unwrap();
    assert_eq!(
        (deleted.record.subject.as_str(), &deleted.record.detail["leases_revoked"]),
        ("cred_1", &2.into())
    );

    // The kill switch reports the leases it revoked with its runs.
    s.create_run(&new_run(10, "t2", 1000), "p").await.unwrap();
    let t2 =
        s.create_credential(&credential("cred_3", "t2", "github", "github.com", 1000), "p").await.unwrap();
    let l10 = grant(s, 10, "run_0010", &t2, 1012).await;
    let killed = s.set_kill_switch("t1", true, Some("incident 7"), "person:ada", 1020).await.unwrap();
    assert_eq!(killed.runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["run_0001", "run_0002"]);
    assert_eq!(killed.leases, 1, "{l3}: the others were revoked already");
    assert_eq!(revocation(s, &l3).await, revoked(1020, "run_ended", "person:ada"));
    assert_eq!(lease_at(s, &l10, 1020).await.0, LeaseStatus::Live, "other tenants are untouched");

    // So does the emergency revoke, across tenants.
    s.create_run(&new_run(20, "t3", 1000), "p").await.unwrap();
    let t3a =
        s.create_credential(&credential("cred_4", "t3", "github", "github.com", 1000), "p").await.unwrap();
    let t3b =
        s.create_credential(&credential("cred_5", "t3", "gitlab", "gitlab.com", 1000), "p").await.unwrap();
    let l20 = grant(s, 20, "run_0020", &t3a, 1021).await;
    let l21 = grant(s, 21, "run_0020", &t3b, 1021).await;
    let all = s.kill_all_runs("breach", "person:ada", 1030).await.unwrap();
    assert_eq!(all.runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["run_0010", "run_0020"]);
    assert_eq!(all.leases, 3);
    for lease in [&l10, &l20, &l21] {
        assert_eq!(revocation(s, lease).await, revoked(1030, "run_ended", "person:ada"));
    }

    // And the sweep of expired runs: by lifetime and by lost heartbeat.
    let mut brief = new_run(30, "t4", 2000);
    brief.expires_at = 2100;
    s.create_run(&brief, "p").await.unwrap();
    s.create_run(&new_run(31, "t4", 2000), "p").await.unwrap();
    s.create_run(&new_run(32, "t4", 2000), "p").await.unwrap();
    let t4 =
        s.create_credential(&credential("cred_6", "t4", "github", "github.com", 2000), "p").await.unwrap();
    let l30 = grant(s, 30, "run_0030", &t4, 2000).await;
    let l31 = grant(s, 31, "run_0031", &t4, 2000).await;
    let l32 = grant(s, 32, "run_0032", &t4, 2000).await;
    assert_eq!(s.heartbeat("run_0032", 2100, 120).await.unwrap().1, 1);
    let expired = s.expire_runs(2120, 120).await.unwrap();
    assert_eq!(
        expired.runs.iter().map(|r| (r.run_id.as_str(), r.end_reason.as_deref())).collect::<Vec<_>>(),
        [("run_0030", Some("lifetime_over")), ("run_0031", Some("heartbeat_lost"))]
    );
    assert_eq!(expired.leases, 2);
    assert_eq!(revocation(s, &l30).await, revoked(2120, "run_ended", "gatehouse"));
    assert_eq!(revocation(s, &l31).await, revoked(2120, "run_ended", "gatehouse"));
    assert_eq!(lease_at(s, &l32, 2120).await, (LeaseStatus::Live, 2220), "a beating run keeps its lease");
    assert_eq!(s.expire_runs(2120, 120).await.unwrap(), Default::default(), "each run expires once");
    let live = LeaseFilter { status: Some(LeaseStatus::Live), ..Default::default() };
    assert_eq!(
        all_leases(s, &live, 2120).await.iter().map(|l| l.lease_id.as_str()).collect::<Vec<_>>(),
        [&l32]
    );
    assert_chain_intact(s).await;
}

fn resealed(id: &str, version: i64, previous: Option<&str>, sealed: &str, key_id: &str) -> Resealed {
    Resealed {
        credential_id: id.into(),
        version,
        previous_sealed: previous.map(str::to_owned),
        sealed: sealed.into(),
        key_id: key_id.into(),
        fingerprint: format!("hmac-sha256:{version:02}"),
    }
}

pub async fn credentials_rotate_and_rewrap_by_version(f: Fresh) {
    let s = &f.store;
    let first = credential("cred_0001", "t1", "github", "github.com", 1000);
    assert_eq!(s.create_credential(&first, "person:ada").await.unwrap(), first);
    // A sealed value is kept exactly, whatever its length and characters.
    let odd = Credential {
        sealed: format!("ghc1.{}.ü", "QUJD+/_-=".repeat(500)),
        ..credential("cred_0002", "t1", "gitlab", "gitlab.com", 1001)
    };
    s.create_credential(&odd, "person:ada").await.unwrap();
    s.create_credential(&credential("cred_0003", "t1", "mcp", "mcp.example", 1002), "person:ada")
        .await
        .unwrap();
    let elsewhere = credential("cred_0004", "t2", "github", "github.com", 1003);
    s.create_credential(&elsewhere, "person:bob").await.unwrap();
    assert_eq!(s.credential("t1", "cred_0002").await.unwrap(), Some(odd.clone()));
    assert_eq!(s.credential("t2", "cred_0004").await.unwrap(), Some(elsewhere));
    assert_eq!(s.credential("t2", "cred_0001").await.unwrap(), None, "ids resolve in their tenant only");

    let same_name = Credential { credential_id: "cred_0005".into(), ..first.clone() };
    assert_eq!(s.create_credential(&same_name, "person:ada").await.unwrap_err(), StoreError::Conflict);
    let same_id = Credential { name: "other".into(), ..first.clone() };
    assert_eq!(s.create_credential(&same_id, "person:ada").await.unwrap_err(), StoreError::Conflict);
    assert_eq!(s.credential("t1", "cred_0005").await.unwrap(), None);

    // A rotation: a new secret, one version up.
    let rotated = s
        .reseal_credentials(
            Some("t1"),
            &[resealed("cred_0001", 1, None, "ghc1.v2", "k1")],
            "person:ada",
            2000,
        )
        .await
        .unwrap();
    let v2 = Credential {
        sealed: "ghc1.v2".into(),
        version: 2,
        fingerprint: "hmac-sha256:01".into(),
        updated_at: 2000,
        ..first.clone()
    };
    assert_eq!(rotated, vec![v2.clone()]);
    // A second rotation still claiming version 1 lost the race.
    let stale = [resealed("cred_0001", 1, None, "ghc1.v2-again", "k1")];
    assert_eq!(
        s.reseal_credentials(None, &stale, "person:bob", 2001).await.unwrap_err(),
        StoreError::Conflict
    );
    // Resealing is one transaction: a conflict undoes the rest of the batch.
    let batch =
        [resealed("cred_0002", 1, None, "ghc1.x", "k1"), resealed("cred_0001", 1, None, "ghc1.y", "k1")];
    assert_eq!(
        s.reseal_credentials(None, &batch, "person:bob", 2001).await.unwrap_err(),
        StoreError::Conflict
    );
    assert_eq!(s.credential("t1", "cred_0002").await.unwrap(), Some(odd.clone()));
    assert_eq!(s.credential("t1", "cred_0001").await.unwrap(), Some(v2.clone()));

    // A rewrap: the same secret, sealed to the current key, the same version.
    let rewrap = [resealed("cred_0001", 2, Some("ghc1.v2"), "ghc1.v2.k2", "k2")];
    let rewrapped = s.reseal_credentials(None, &rewrap, "gatehouse", 2002).await.unwrap();
    let current = Credential {
        sealed: "ghc1.v2.k2".into(),
        key_id: "k2".into(),
        fingerprint: "hmac-sha256:02".into(),
        updated_at: 2002,
        ..v2
    };
    assert_eq!(rewrapped, vec![current.clone()]);
    // A rewrap of a seal that changed meanwhile is skipped, not an error...
    let outdated = [resealed("cred_0001", 2, Some("ghc1.v2"), "ghc1.v2.k3", "k3")];
    assert_eq!(s.reseal_credentials(None, &outdated, "gatehouse", 2003).await.unwrap(), vec![]);
    // ... as is one made for an older version.
    let old_version = [resealed("cred_0001", 1, Some("ghc1.v2.k2"), "ghc1.v1.k3", "k3")];
    assert_eq!(s.reseal_credentials(None, &old_version, "gatehouse", 2003).await.unwrap(), vec![]);
    // Scoped to another tenant, the credential is not found; nor is an unknown one.
    let theirs = [resealed("cred_0001", 2, None, "ghc1.v3", "k2")];
    assert_eq!(
        s.reseal_credentials(Some("t2"), &theirs, "person:eve", 2004).await.unwrap_err(),
        StoreError::NotFound
    );
    let unknown = [resealed("cred_nope", 1, None, "ghc1.v2", "k2")];
    assert_eq!(
        s.reseal_credentials(None, &unknown, "person:eve", 2004).await.unwrap_err(),
        StoreError::NotFound
    );
    assert_eq!(
        s.credential("t1", "cred_0001").await.unwrap(),
        Some(current.clone()),
        "exactly as last sealed"
    );

    // Newest first, in pages.
    let ids = |page: &gatehouse_store::Page<Credential>| {
        page.items.iter().map(|c| c.credential_id.clone()).collect::<Vec<_>>()
    };
    let page = s.credentials(Some("t1"), &PageRequest { limit: 2, cursor: None }).await.unwrap();
    assert_eq!(ids(&page), ["cred_0003", "cred_0002"]);
    let rest = s.credentials(Some("t1"), &PageRequest { limit: 2, cursor: page.next_cursor }).await.unwrap();
    assert_eq!((ids(&rest), rest.next_cursor), (vec!["cred_0001".to_owned()], None));
    assert_eq!(rest.items, vec![current]);
    let everyone = s.credentials(None, &PageRequest::default()).await.unwrap();
    assert_eq!(ids(&everyone), ["cred_0004", "cred_0003", "cred_0002", "cred_0001"]);

    // The sealed values live in their rows only: the audit log never holds one.
    let entries = s.audit_entries(0, 100).await.unwrap();
    let count = |action: &str| entries.iter().filter(|e| e.record.action == action).count();
    assert_eq!(
        (count("credential.create"), count("credential.rotate"), count("credential.rewrap")),
        (4, 1, 1)
    );
    for e in &entries {
        let text = format!("{} {} {}", e.record.subject, e.record.actor, e.record.detail);
        assert!(!text.contains("ghc1."), "a sealed value in the audit log: {text}");
    }
    assert_eq!(assert_chain_intact(s).await, 6, "refused and skipped reseals leave nothing");
}

/// Raw SQL on the same database, for tests that play the attacker.
pub struct Raw(RawPool);

enum RawPool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

async fn raw(url: &str) -> Raw {
    Raw(if url.starts_with("sqlite") {
        RawPool::Sqlite(sqlx::SqlitePool::connect(url).await.unwrap())
    } else {
        RawPool::Postgres(sqlx::PgPool::connect(url).await.unwrap())
    })
}

impl Raw {
    async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match &self.0 {
            RawPool::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
            RawPool::Postgres(p) => sqlx::query(sql).execute(p).await.map(drop),
        }
        .unwrap();
    }
}

/// The namespace of the test's files.
const NS: &str = "sk1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// A file record of `tenant`/`user`: a session's (`session`) or an input.
fn file_record(
    id: &str,
    tenant: &str,
    user: &str,
    session: Option<&str>,
    name: &str,
    now: i64,
) -> StoredFile {
    StoredFile {
        file_id: id.into(),
        tenant_id: tenant.into(),
        user_id: user.into(),
        namespace: NS.into(),
        session_id: session.map(str::to_owned),
        resource: session.is_none().then(|| "upload".to_owned()),
        name: name.into(),
        bytes: 42,
        sha256: "ab".repeat(32),
        verdict: "not_scanned".into(),
        created_at: now,
        run_id: None,
    }
}

/// Commits `file` as an upload does: its upload's row first, then the record.
async fn commit(s: &Store, file: &StoredFile, actor: &str) -> Result<Option<StoredFile>, StoreError> {
    let upload = FileUpload {
        file_id: file.file_id.clone(),
        namespace: file.namespace.clone(),
        node: "node-test".into(),
        started_at: file.created_at,
    };
    s.begin_upload(&upload).await?;
    s.record_file(file, actor).await
}

pub async fn files_are_kept_per_tenant_and_a_session_name_is_replaced(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    let input = file_record("file_in", "t1", "u1", None, "brief.pdf", 1_000);
    assert_eq!(commit(s, &input, "worker").await.unwrap(), None);
    // Only its own tenant resolves it: another tenant's, or none, never.
    assert_eq!(other.file(Some("t1"), "file_in").await.unwrap(), Some(input.clone()));
    assert_eq!(s.file(Some("t2"), "file_in").await.unwrap(), None);
    assert_eq!(s.file(None, "file_in").await.unwrap(), None);
    let untenanted = file_record("file_none", "", "u1", None, "x", 1_000);
    commit(s, &untenanted, "worker").await.unwrap();
    assert_eq!(s.file(None, "file_none").await.unwrap().map(|f| f.file_id), Some("file_none".into()));
    assert_eq!(s.file(Some(""), "file_none").await.unwrap().map(|f| f.file_id), Some("file_none".into()));
    assert_eq!(s.file(Some("t1"), "file_none").await.unwrap(), None);

    // A session's name holds one file: the second upload replaces the first
    // and says which, whose object the caller deletes.
    let first = file_record("file_1", "t1", "u1", Some("out-1"), "report.md", 1_100);
    let second = file_record("file_2", "t1", "u1", Some("out-1"), "report.md", 1_200);
    let beside = file_record("file_3", "t1", "u1", Some("out-1"), "data.csv", 1_200);
    assert_eq!(commit(s, &first, "run:r1").await.unwrap(), None);
    assert_eq!(commit(&other, &second, "run:r1").await.unwrap(), Some(first.clone()));
    commit(s, &beside, "run:r1").await.unwrap();
    let listed: Vec<String> = s
        .session_files(Some("t1"), "u1", NS, "out-1", 1_300)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.file_id)
        .collect();
    assert_eq!(listed, ["file_3", "file_2"], "by name");
    assert_eq!(s.file(Some("t1"), "file_1").await.unwrap(), None);
    // Another user's session of the same id, another tenant's: empty.
    assert!(s.session_files(Some("t1"), "u2", NS, "out-1", 1_300).await.unwrap().is_empty());
    assert!(s.session_files(Some("t2"), "u1", NS, "out-1", 1_300).await.unwrap().is_empty());
    // The same user's session of the same id in another namespace (another
    // conversation) is another session, with its own report.md.
    let elsewhere = StoredFile {
        namespace: "sk1_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB".into(),
        ..file_record("file_5", "t1", "u1", Some("out-1"), "report.md", 1_300)
    };
    assert_eq!(commit(s, &elsewhere, "run:r3").await.unwrap(), None, "nothing replaced");
    assert_eq!(s.session_files(Some("t1"), "u1", NS, "out-1", 1_300).await.unwrap().len(), 2);
    // The same name in another user's session is another file.
    let theirs = file_record("file_4", "t1", "u2", Some("out-1"), "report.md", 1_300);
    assert_eq!(commit(s, &theirs, "run:r2").await.unwrap(), None);

    // Deleted once, by its own tenant only.
    assert_eq!(s.delete_file(Some("t2"), "file_2", "worker", 1_400).await.unwrap(), None);
    assert_eq!(s.delete_file(Some("t1"), "file_2", "worker", 1_400).await.unwrap(), Some(second));
    assert_eq!(other.delete_file(Some("t1"), "file_2", "worker", 1_400).await.unwrap(), None);

    let actions: Vec<String> =
        s.audit_entries(0, 100).await.unwrap().into_iter().map(|e| e.record.action).collect();
    for action in ["file.store", "file.upload", "file.delete"] {
        assert!(actions.iter().any(|a| a == action), "{action} in {actions:?}");
    }
    assert_eq!(actions.iter().filter(|a| *a == "file.delete").count(), 1);
    assert_chain_intact(s).await;
}

pub async fn stale_sessions_are_swept_once_and_never_from_under_a_live_run(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    // One node at a time holds a maintenance task until its claim expires.
    assert!(s.claim_maintenance("sweeper", "node-a", 1_000, 1_600).await.unwrap());
    assert!(!other.claim_maintenance("sweeper", "node-b", 1_300, 1_900).await.unwrap());
    assert!(s.claim_maintenance("sweeper", "node-a", 1_300, 1_900).await.unwrap());
    assert!(other.claim_maintenance("sweeper", "node-b", 1_900, 2_500).await.unwrap());

    // u1's session, written at 1_000; u1 has a live run: held.
    commit(s, &file_record("file_a", "t1", "u1", Some("out-1"), "a.txt", 1_000), "run:r").await.unwrap();
    let run = s.create_run(&new_run(1, "t1", 1_000), "platform").await.unwrap();
    assert!(s.stale_file_sessions(5_000, 10).await.unwrap().is_empty(), "held by u1's live run");
    s.finish_run(&run.run_id, RunStatus::Ended, "succeeded", "platform", 1_100).await.unwrap();
    let stale = s.stale_file_sessions(5_000, 10).await.unwrap();
    assert_eq!(stale.iter().map(|x| x.session_id.as_str()).collect::<Vec<_>>(), ["out-1"]);
    // Touched after the listing: it stays.
    s.session_files(Some("t1"), "u1", NS, "out-1", 6_000).await.unwrap();
    assert!(s.sweep_file_session(&stale[0], 5_000, "gatehouse", 6_100).await.unwrap().is_empty());
    // Stale again later: swept once, by whichever node gets there.
    let stale = s.stale_file_sessions(9_000, 10).await.unwrap();
    let swept = s.sweep_file_session(&stale[0], 9_000, "gatehouse", 9_100).await.unwrap();
    assert_eq!(swept.iter().map(|f| f.file_id.as_str()).collect::<Vec<_>>(), ["file_a"]);
    assert!(other.sweep_file_session(&stale[0], 9_000, "gatehouse", 9_100).await.unwrap().is_empty());
    assert_eq!(s.file(Some("t1"), "file_a").await.unwrap(), None);
    assert!(s.stale_file_sessions(i64::MAX, 10).await.unwrap().is_empty());
    commit(s, &file_record("file_b", "t1", "u2", None, "b.txt", 9_200), "worker").await.unwrap();
    let ids: Vec<String> = ["file_a", "file_b", "file_none"].map(str::to_owned).to_vec();
    assert_eq!(other.file_states(&ids, 0).await.unwrap(), [("file_b".to_owned(), FileState::Recorded)]);
    assert_chain_intact(s).await;
}

/// An upload's row stands for it until its commit replaces it with the
/// record; a stale row expired by the sweeper, or one abandoned after an
/// uncertain commit, can no longer commit; an abandoning caller learns
/// whether the commit went through.
pub async fn an_upload_commits_once_and_an_expired_or_abandoned_one_never(f: Fresh) {
    let s = &f.store;
    let other = f.another_node().await;
    let upload = |id: &str, at: i64| FileUpload {
        file_id: id.into(),
        namespace: NS.into(),
        node: "node-a".into(),
        started_at: at,
    };
    let ids: Vec<String> = ["file_u1", "file_u2", "file_u3", "file_none"].map(str::to_owned).to_vec();
    s.begin_upload(&upload("file_u1", 1_000)).await.unwrap();
    s.begin_upload(&upload("file_u2", 5_000)).await.unwrap();
    assert_eq!(
        other.file_states(&ids, 2_000).await.unwrap(),
        [("file_u1".to_owned(), FileState::Stale), ("file_u2".to_owned(), FileState::Uploading)]
    );
    assert_eq!(other.stale_uploads(2_000, 10).await.unwrap(), [upload("file_u1", 1_000)]);
    // Expired only while still older than the bound, once.
    assert!(!s.expire_upload("file_u1", 900).await.unwrap());
    assert!(other.expire_upload("file_u1", 2_000).await.unwrap());
    assert!(!s.expire_upload("file_u1", 2_000).await.unwrap());
    // Its commit comes too late: refused, nothing recorded.
    let late = file_record("file_u1", "t1", "u1", None, "late.txt", 2_100);
    assert_eq!(s.record_file(&late, "worker").await, Err(StoreError::Refused(Reason::UploadExpired)));
    assert_eq!(s.file(Some("t1"), "file_u1").await.unwrap(), None);

    // A commit that went through: asked again, the caller learns so.
    let done = file_record("file_u2", "t1", "u1", None, "done.txt", 5_100);
    assert_eq!(s.record_file(&done, "worker").await.unwrap(), None);
    assert_eq!(other.file_states(&ids, 2_000).await.unwrap(), [("file_u2".to_owned(), FileState::Recorded)]);
    assert_eq!(other.abandon_upload("file_u2").await.unwrap(), UploadFate::Committed);
    assert!(s.file(Some("t1"), "file_u2").await.unwrap().is_some());
    // One that did not: abandoned, and no commit can follow.
    s.begin_upload(&upload("file_u3", 6_000)).await.unwrap();
    assert_eq!(other.abandon_upload("file_u3").await.unwrap(), UploadFate::Abandoned);
    let after = file_record("file_u3", "t1", "u1", None, "after.txt", 6_100);
    assert_eq!(s.record_file(&after, "worker").await, Err(StoreError::Refused(Reason::UploadExpired)));
    assert!(s.stale_uploads(i64::MAX, 10).await.unwrap().is_empty());
    assert_chain_intact(s).await;
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Fresh::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Fresh::postgres().await).await;
                }
            )*
        }
    };
}

conformance!(
    migrations_apply_once_and_a_newer_schema_is_refused,
    policies_are_versioned_with_who_and_when,
    mcp_servers_are_versioned_audited_and_replicated,
    a_policy_edit_against_an_old_version_is_refused,
    settings_page_sessions_live_idle_and_end,
    a_run_lives_until_it_ends_once,
    concurrent_end_and_cancel_change_the_run_once,
    runs_expire_by_lost_heartbeat_or_lifetime_once,
    only_runs_whose_grants_were_revoked_are_expired,
    the_kill_switch_kills_live_runs_and_refuses_new_ones,
    a_run_created_while_the_switch_is_engaged_is_never_left_live,
    runs_created_at_once_are_each_answered_on_their_own,
    runs_list_newest_first_in_pages,
    refusals_and_run_events_are_durable_filtered_and_paged,
    event_numbers_only_grow_across_nodes_and_pruning,
    refusal_counts_add_up_across_nodes_unaudited_and_pruned,
    a_rare_match_is_found_by_paging_on_not_by_walking_everything,
    nodes_appending_at_once_keep_one_unbroken_chain,
    the_scan_submitted_last_counts_whichever_finished_first,
    the_verifier_names_the_first_tampered_entry,
    a_busy_chain_verifies_and_checkpoints_to_the_head_it_read,
    a_stored_detail_that_is_not_exactly_canonical_is_refused,
    a_missing_current_policy_is_unreadable_never_open,
    a_store_that_is_down_says_store_unavailable,
    a_lease_lives_two_minutes_renewed_by_heartbeats_and_dies_with_its_run,
    lease_grants_are_refused_by_the_rules,
    revoking_a_lease_happens_once_across_nodes,
    deleting_a_credential_revokes_its_leases_and_kill_switch_and_emergency_report_leases,
    credentials_rotate_and_rewrap_by_version,
    files_are_kept_per_tenant_and_a_session_name_is_replaced,
    stale_sessions_are_swept_once_and_never_from_under_a_live_run,
    an_upload_commits_once_and_an_expired_or_abandoned_one_never,
);
