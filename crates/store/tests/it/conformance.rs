//! One suite, two backends: each test below is a function of a fresh,
//! migrated [`Store`]; the macro at the end runs it on SQLite and on
//! PostgreSQL.

use std::time::Duration;

use gatehouse_store::{
    NewEvent, NewRun, PageRequest, RefusalFilter, Run, RunStatus, SchemaState, Store, StoreConfig, StoreError,
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

fn new_run(n: u32, tenant: &str, now: i64) -> NewRun {
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
        dry_run: false,
        refusal: true,
    }
}

async fn assert_chain_intact(store: &Store) -> i64 {
    let verdict = store.verify_audit(Vec::new()).await.unwrap();
    verdict.unwrap_or_else(|broken| panic!("audit chain broken: {broken:?}"))
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
        reason: gatehouse_core::Reason::DnsFailed,
        tenant_id: Some("t1".into()),
        run_id: Some("run_a".into()),
        request_id: None,
        host: None,
        rule: None,
        lease_id: None,
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

fn scan(
    id: &str,
    submitted: i64,
    pull_request: i64,
    status: &str,
    levels: &[&str],
) -> gatehouse_store::DependencyScan {
    gatehouse_store::DependencyScan {
        scan_id: id.into(),
        submitted,
        tenant_id: "t1".into(),
        repository: "octo/app".into(),
        pull_request,
        head_sha: "a".repeat(40),
        created_at: 100 + submitted,
        status: status.into(),
        levels: levels.iter().map(|l| (*l).to_owned()).collect(),
        report: format!("{{\"scan_id\":\"{id}\"}}"),
    }
}

pub async fn the_scan_submitted_last_counts_whichever_finished_first(f: Fresh) {
    let other = f.another_node().await;
    // Two nodes take numbers at once: each gets its own, and they only grow.
    let (a, b) = tokio::join!(f.store.next_scan_number(), other.next_scan_number());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a, b);
    let (first, second) = (a.min(b), a.max(b));
    // The later submission finishes first; the earlier one is recorded after it.
    other.record_scan(&scan("scan_second", second, 7, "ok", &[]), "worker").await.unwrap();
    f.store
        .record_scan(&scan("scan_first", first, 7, "error", &["high", "unknown"]), "worker")
        .await
        .unwrap();
    f.store
        .record_scan(
            &scan("scan_other_pr", f.store.next_scan_number().await.unwrap(), 8, "ok", &[]),
            "worker",
        )
        .await
        .unwrap();
    let newest = |pr| {
        let store = f.store.clone();
        async move {
            store
                .scans("t1", Some("octo/app"), Some(pr), &PageRequest { limit: 1, cursor: None })
                .await
                .unwrap()
        }
    };
    let seven = newest(7).await;
    assert_eq!(seven.items[0].scan_id, "scan_second", "submission order, not completion order");
    assert!(seven.next_cursor.is_some());
    let older = f
        .store
        .scans("t1", Some("octo/app"), Some(7), &PageRequest { limit: 5, cursor: seven.next_cursor })
        .await
        .unwrap();
    assert_eq!(
        older.items,
        vec![scan("scan_first", first, 7, "error", &["high", "unknown"])],
        "read back whole"
    );
    assert_eq!(newest(8).await.items[0].scan_id, "scan_other_pr");
    let all = f.store.scans("t1", None, None, &PageRequest::default()).await.unwrap();
    assert_eq!(all.items.len(), 3);
    assert_eq!(f.store.scans("t2", None, None, &PageRequest::default()).await.unwrap().items, vec![]);
    // A scan id is recorded once.
    assert!(f.store.record_scan(&scan("scan_second", 99, 7, "ok", &[]), "worker").await.is_err());
    let audit = f.store.audit_entries(0, 100).await.unwrap();
    assert_eq!(audit.iter().filter(|e| e.record.action == "dependency_scan.create").count(), 3);
    assert_eq!(assert_chain_intact(&f.store).await, 3, "the refused duplicate left nothing");
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
    a_run_lives_until_it_ends_once,
    concurrent_end_and_cancel_change_the_run_once,
    runs_expire_by_lost_heartbeat_or_lifetime_once,
    the_kill_switch_kills_live_runs_and_refuses_new_ones,
    a_run_created_while_the_switch_is_engaged_is_never_left_live,
    runs_created_at_once_are_each_answered_on_their_own,
    runs_list_newest_first_in_pages,
    refusals_and_run_events_are_durable_filtered_and_paged,
    event_numbers_only_grow_across_nodes_and_pruning,
    nodes_appending_at_once_keep_one_unbroken_chain,
    the_scan_submitted_last_counts_whichever_finished_first,
    the_verifier_names_the_first_tampered_entry,
    a_store_that_is_down_says_store_unavailable,
);
