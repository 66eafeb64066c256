//! A property of leases, on SQLite: whatever a run's dispatcher, its
//! heartbeats, revocations, the sweeper and the clock do, a run that is
//! not live holds no live lease, a run that had a lease revoked is never
//! granted another, and no lease reads live at or after its expiry. A tiny
//! model beside the store predicts every answer, and the store must agree.

use gatehouse_core::Reason;
use gatehouse_store::{
    LEASE_LIFETIME_SECS, Lease, LeaseFilter, LeaseStatus, NewLease, PageRequest, RunStatus, Store, StoreError,
};
use proptest::prelude::*;

use crate::conformance::{Fresh, credential, lease_id, new_lease, new_run};

const TENANT: &str = "t1";
const HEARTBEAT_TIMEOUT: i64 = 120;
const START: i64 = 1000;
/// Run 0 lives an hour; run 1's lifetime ends inside its first heartbeat
/// window and a half, so its leases are capped by it.
const LIFETIMES: [i64; 2] = [3600, 150];
const CREDENTIALS: [(&str, &str, &str); 2] =
    [("cred_1", "github", "github.com"), ("cred_2", "gitlab", "gitlab.com")];

#[derive(Debug, Clone)]
enum Op {
    Grant {
        run: usize,
        credential: usize,
    },
    /// The run's heartbeat.
    Renew {
        run: usize,
    },
    /// Of the leases granted so far, the one at this index (modulo).
    Revoke {
        lease: usize,
    },
    End {
        run: usize,
    },
    Advance {
        secs: i64,
    },
    /// The sweeper: `expire_runs`.
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..2usize).prop_map(|(run, credential)| Op::Grant { run, credential }),
        3 => (0..2usize).prop_map(|run| Op::Renew { run }),
        1 => (0..8usize).prop_map(|lease| Op::Revoke { lease }),
        1 => (0..2usize).prop_map(|run| Op::End { run }),
        // Mostly small steps, so runs often stay live a while; now and then a leap.
        2 => (0..40i64).prop_map(|secs| Op::Advance { secs }),
        1 => (0..200i64).prop_map(|secs| Op::Advance { secs }),
        // Exactly two minutes: a lease granted or renewed just before reaches its expiry.
        1 => Just(Op::Advance { secs: LEASE_LIFETIME_SECS }),
        1 => Just(Op::Sweep),
    ]
}

#[derive(Debug)]
struct ModelRun {
    id: String,
    ended: bool,
    heartbeat_at: i64,
    expires_at: i64,
    /// Set by the first revocation of one of its leases: the number the
    /// next grant attempt had then. No grant numbered from it on may succeed.
    revoked_from: Option<u64>,
}

impl ModelRun {
    /// Live as the store defines it: not ended, within its lifetime and its
    /// heartbeat deadline.
    fn live(&self, now: i64) -> bool {
        !self.ended && self.expires_at > now && self.heartbeat_at + HEARTBEAT_TIMEOUT > now
    }

    /// Whether the store's row still says `live` (nothing has ended or swept it).
    fn stored_live(&self) -> bool {
        !self.ended
    }
}

#[derive(Debug)]
struct ModelLease {
    id: String,
    number: u64,
    run: usize,
    expires_at: i64,
    revoke_reason: Option<&'static str>,
}

impl ModelLease {
    fn status(&self, now: i64) -> LeaseStatus {
        match self.revoke_reason {
            Some(_) => LeaseStatus::Revoked,
            None if self.expires_at <= now => LeaseStatus::Expired,
            None => LeaseStatus::Live,
        }
    }
}

#[derive(Debug)]
struct Model {
    now: i64,
    runs: Vec<ModelRun>,
    leases: Vec<ModelLease>,
    /// Grant attempts so far: the next one's number (and lease id).
    attempts: u64,
}

impl Model {
    fn new() -> Self {
        let runs = (0..2)
            .map(|n| ModelRun {
                id: format!("run_{n:04}"),
                ended: false,
                heartbeat_at: START,
                expires_at: START + LIFETIMES[n],
                revoked_from: None,
            })
            .collect();
        Self { now: START, runs, leases: Vec::new(), attempts: 0 }
    }

    /// The rules, independently: a live run, never marked, gets a lease
    /// for two minutes, capped by its lifetime and its heartbeat deadline.
    fn grant(&self, run: usize) -> Result<i64, Reason> {
        let r = &self.runs[run];
        if !r.live(self.now) {
            Err(Reason::RunNotLive)
        } else if r.revoked_from.is_some() {
            Err(Reason::RunLeaseRevoked)
        } else {
            Ok((self.now + LEASE_LIFETIME_SECS).min(r.expires_at).min(r.heartbeat_at + HEARTBEAT_TIMEOUT))
        }
    }

    /// Revokes every unrevoked lease of `run`; returns how many.
    fn end(&mut self, run: usize) -> u64 {
        self.runs[run].ended = true;
        let mut revoked = 0;
        for lease in self.leases.iter_mut().filter(|l| l.run == run && l.revoke_reason.is_none()) {
            lease.revoke_reason = Some("run_ended");
            revoked += 1;
        }
        revoked
    }
}

async fn step(s: &Store, m: &mut Model, op: &Op) {
    let now = m.now;
    match *op {
        Op::Grant { run, credential: c } => {
            let n = m.attempts;
            m.attempts += 1;
            let (id, _, host) = CREDENTIALS[c];
            let new = NewLease {
                lease_id: lease_id(n),
                run_id: m.runs[run].id.clone(),
                credential_id: id.into(),
                purpose: "git_provider".into(),
                host: host.into(),
            };
            let answer = s.grant_lease(&new, "dispatcher", now, HEARTBEAT_TIMEOUT).await;
            match (m.grant(run), answer) {
                (Ok(expires_at), Ok((lease, holder))) => {
                    assert_eq!(
                        (lease.status, lease.created_at, lease.expires_at, holder.run_id.as_str()),
                        (LeaseStatus::Live, now, expires_at, m.runs[run].id.as_str())
                    );
                    m.leases.push(ModelLease {
                        id: lease.lease_id,
                        number: n,
                        run,
                        expires_at,
                        revoke_reason: None,
                    });
                }
                (Err(reason), Err(e)) => assert_eq!(e, StoreError::Refused(reason)),
                (predicted, answer) => {
                    panic!("grant {n} on run {run}: model {predicted:?}, store {answer:?}")
                }
            }
        }
        Op::Renew { run } => {
            let answer = s.heartbeat(&m.runs[run].id, now, HEARTBEAT_TIMEOUT).await;
            if !m.runs[run].live(now) {
                assert_eq!(answer.unwrap_err(), StoreError::RunNotLive);
                return;
            }
            let (beat, renewed) = answer.unwrap();
            let r = &mut m.runs[run];
            r.heartbeat_at = now;
            let renewal = (now + LEASE_LIFETIME_SECS).min(r.expires_at);
            let mut expected = 0;
            for lease in m.leases.iter_mut().filter(|l| l.run == run && l.status(now) == LeaseStatus::Live) {
                lease.expires_at = renewal;
                expected += 1;
            }
            assert_eq!((beat.heartbeat_at, renewed), (now, expected));
        }
        Op::Revoke { lease } => {
            if m.leases.is_empty() {
                let answer = s.revoke_lease(&lease_id(u64::MAX), "revoked", "person:ada", now).await;
                assert_eq!(answer.unwrap_err(), StoreError::NotFound);
                return;
            }
            let index = lease % m.leases.len();
            let answer = s.revoke_lease(&m.leases[index].id, "revoked", "person:ada", now).await.unwrap();
            let l = &mut m.leases[index];
            // A lease that lapsed but was never revoked is still revoked (and
            // its run marked): only a revoked one is left alone.
            if l.revoke_reason.is_none() {
                l.revoke_reason = Some("revoked");
                let first = m.attempts;
                m.runs[l.run].revoked_from.get_or_insert(first);
                assert_eq!(answer.map(|l| l.status), Some(LeaseStatus::Revoked));
            } else {
                assert_eq!(answer, None);
            }
        }
        Op::End { run } => {
            let (ended, revoked) = s
                .finish_run(&m.runs[run].id, RunStatus::Ended, "succeeded", "dispatcher", now)
                .await
                .unwrap();
            assert_ne!(ended.status, RunStatus::Live);
            // The store ends a run its row says is live, deadline passed or not.
            let expected = m.runs[run].stored_live().then(|| m.end(run));
            assert_eq!(revoked, expected);
        }
        Op::Advance { secs } => m.now += secs,
        Op::Sweep => {
            let ended = s.expire_runs(now, HEARTBEAT_TIMEOUT).await.unwrap();
            let due: Vec<usize> =
                (0..m.runs.len()).filter(|&r| m.runs[r].stored_live() && !m.runs[r].live(now)).collect();
            let revoked: u64 = due.iter().map(|&r| m.end(r)).sum();
            assert_eq!(
                ended.runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
                due.iter().map(|&r| m.runs[r].id.as_str()).collect::<Vec<_>>()
            );
            assert_eq!(ended.leases, revoked);
        }
    }
}

/// The store agrees with the model, and the invariants hold.
async fn check(s: &Store, m: &Model) {
    let now = m.now;
    let page = PageRequest { limit: 500, cursor: None };
    let filter = LeaseFilter { tenant_id: Some(TENANT.into()), ..Default::default() };
    let mut stored: Vec<Lease> = s.leases(&filter, &page, now).await.unwrap().items;
    stored.reverse();
    // Exactly the leases granted: a refused grant inserted nothing.
    assert_eq!(
        stored.iter().map(|l| l.lease_id.as_str()).collect::<Vec<_>>(),
        m.leases.iter().map(|l| l.id.as_str()).collect::<Vec<_>>()
    );
    for (lease, model) in stored.iter().zip(&m.leases) {
        assert_eq!(
            (lease.status, lease.expires_at, lease.revoke_reason.as_deref(), lease.run_id.as_str()),
            (model.status(now), model.expires_at, model.revoke_reason, m.runs[model.run].id.as_str()),
            "{}",
            lease.lease_id
        );
        assert_eq!(s.lease(&lease.lease_id, now).await.unwrap().as_ref(), Some(lease), "one read, as listed");
        // (c) A lease is never live at or after its expiry.
        assert!(lease.status != LeaseStatus::Live || lease.expires_at > now, "{lease:?} at {now}");
    }
    for (r, run) in m.runs.iter().enumerate() {
        let row = s.run(&run.id).await.unwrap().unwrap();
        assert_eq!(row.status == RunStatus::Live, run.stored_live(), "{}", run.id);
        let of_run: Vec<&Lease> = stored.iter().filter(|l| l.run_id == run.id).collect();
        // (a) A run that is not live holds no live lease.
        if row.status != RunStatus::Live {
            assert!(of_run.iter().all(|l| l.status != LeaseStatus::Live), "{of_run:?} of {row:?}");
        }
        // (b) After a revocation, every grant to the run was refused: no lease
        // of it was granted after the first revocation, by number (the model)
        // or by time (the store's own record).
        if let Some(from) = run.revoked_from {
            assert!(m.leases.iter().filter(|l| l.run == r).all(|l| l.number < from));
        }
        let first_revocation = of_run.iter().filter(|l| l.revoke_reason.as_deref() == Some("revoked"));
        if let Some(at) = first_revocation.filter_map(|l| l.revoked_at).min() {
            assert!(of_run.iter().all(|l| l.created_at <= at), "a lease of {} granted after {at}", run.id);
        }
    }
    // The live filter lists exactly the leases that read live.
    let live = LeaseFilter { status: Some(LeaseStatus::Live), ..filter };
    let listed = s.leases(&live, &page, now).await.unwrap().items;
    assert!(listed.iter().all(|l| l.status == LeaseStatus::Live && l.expires_at > now));
    assert_eq!(listed.len(), m.leases.iter().filter(|l| l.status(now) == LeaseStatus::Live).count());
}

async fn play(ops: Vec<Op>) {
    let f = Fresh::sqlite().await;
    let s = &f.store;
    let mut m = Model::new();
    for run in &m.runs {
        let mut new = new_run(0, TENANT, START);
        new.run_id.clone_from(&run.id);
        new.expires_at = run.expires_at;
        s.create_run(&new, "platform").await.unwrap();
    }
    for (id, name, host) in CREDENTIALS {
        s.create_credential(&credential(id, TENANT, name, host, START), "platform").await.unwrap();
    }
    for op in &ops {
        step(s, &mut m, op).await;
        check(s, &m).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_run_holds_a_lease_it_should_not(ops in proptest::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(play(ops));
    }
}

/// A lease granted late in its run's heartbeat window outlives the window:
/// the store already treats the run as not live (grants and heartbeats are
/// refused `run_not_live`), yet the lease reads `live` to `door_leases`
/// until the sweeper expires the run (or its own two minutes run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_never_outlives_its_runs_heartbeat_deadline() {
    let f = Fresh::sqlite().await;
    let s = &f.store;
    s.create_run(&new_run(1, TENANT, START), "platform").await.unwrap();
    let cred = credential("cred_1", TENANT, "github", "github.com", START);
    s.create_credential(&cred, "platform").await.unwrap();
    // Heartbeat deadline: START + 120. Granted at START + 100: two minutes on is START + 220.
    s.grant_lease(&new_lease(1, "run_0001", &cred), "dispatcher", START + 100, HEARTBEAT_TIMEOUT)
        .await
        .unwrap();
    let past_deadline = START + 130;
    assert_eq!(
        s.heartbeat("run_0001", past_deadline, HEARTBEAT_TIMEOUT).await.unwrap_err(),
        StoreError::RunNotLive,
        "the run is past its deadline"
    );
    let door = s.door_leases("run_0001", past_deadline).await.unwrap();
    assert_ne!(door[0].lease.status, LeaseStatus::Live, "{:?} of a run that is not live", door[0].lease);
}
