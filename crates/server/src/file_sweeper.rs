//! The file sweeper: file sessions neither written nor read for
//! `GATEHOUSE_SESSION_TTL_DAYS` are deleted with their objects, and objects
//! without a record (an upload whose record was never written: a crash
//! between the two) are removed. One node of a cluster sweeps at a time,
//! holding a maintenance lease in the store; a pass is resumable (each
//! session's records go in one audited transaction before its objects, and
//! a deleted object stays deleted), and it reports what it deleted.

use gatehouse_core::{Clock as _, Reason, UnixTime};
use gatehouse_files::{ObjectPath, Storage};
use gatehouse_store::{AuditRecord, Store};

use futures_util::StreamExt as _;

/// The store's name for the sweeper's maintenance lease.
const TASK: &str = "file-sweeper";
/// How often a node tries to take the lease and sweep.
const EVERY_SECS: u64 = 600;
/// How long a taken lease lasts: longer than a pass takes, so two nodes
/// never sweep at once; short enough that a dead holder is soon replaced.
const LEASE_SECS: i64 = 1800;
/// An object younger than this is never an orphan: an upload's object is
/// complete a moment before its record is written.
pub const ORPHAN_GRACE_SECS: i64 = 3600;
/// Sessions taken from the store at a time.
const SESSION_BATCH: i64 = 100;
/// Objects checked against the store at a time.
const OBJECT_BATCH: usize = 256;

/// What a pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Stale sessions deleted.
    pub sessions: u64,
    /// Their files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Objects that had no record.
    pub orphans: u64,
}

/// One pass: sessions untouched for `ttl_days` at `now` (the node's clock,
/// which wrote their times), then orphans older than the grace at
/// `wall_now` (the real time: an object's time is the store's, never a
/// test's manual clock).
pub async fn sweep(
    store: &Store,
    storage: &Storage,
    ttl_days: i64,
    now: UnixTime,
    wall_now: UnixTime,
) -> Result<SweepReport, Reason> {
    let mut report = SweepReport::default();
    let cutoff = now - ttl_days * 86_400;
    loop {
        let stale = store.stale_file_sessions(cutoff, SESSION_BATCH).await.map_err(|e| e.reason())?;
        let mut kept = 0;
        for session in &stale {
            let swept =
                store.sweep_file_session(session, cutoff, "gatehouse", now).await.map_err(|e| e.reason())?;
            if swept.is_empty() {
                kept += 1;
                continue;
            }
            report.sessions += 1;
            for file in swept {
                report.files += 1;
                report.bytes += u64::try_from(file.bytes).unwrap_or(0);
                if let Ok(path) = ObjectPath::new(&file.namespace, &file.file_id) {
                    // Left behind on failure, it is an orphan the next pass removes.
                    let _ = storage.delete(&path).await;
                }
            }
        }
        // A batch that was all touched or held meanwhile: stop, not spin.
        if stale.len() < SESSION_BATCH as usize || kept == stale.len() {
            break;
        }
    }
    report.orphans = sweep_orphans(store, storage, wall_now).await?;
    if report.orphans > 0 {
        let detail = serde_json::json!({"orphans": report.orphans});
        let record = AuditRecord {
            at: now,
            actor: "gatehouse".into(),
            action: "files.orphans_swept".into(),
            tenant_id: None,
            subject: "objects".into(),
            detail,
        };
        store.audit(&[record]).await.map_err(|e| e.reason())?;
    }
    Ok(report)
}

/// Deletes every object older than the grace that has no record.
async fn sweep_orphans(store: &Store, storage: &Storage, now: UnixTime) -> Result<u64, Reason> {
    let mut listing = storage.list(None).map_err(|e| e.reason())?;
    let mut orphans = 0;
    let mut batch = Vec::with_capacity(OBJECT_BATCH);
    loop {
        let next = listing.next().await;
        let last = next.is_none();
        if let Some(object) = next {
            let object = object.map_err(|e| e.reason())?;
            if object.modified_at < now - ORPHAN_GRACE_SECS {
                batch.push(object.path);
            }
        }
        if batch.len() >= OBJECT_BATCH || (last && !batch.is_empty()) {
            let ids: Vec<String> = batch.iter().map(|p| p.file_id().to_owned()).collect();
            let known = store.known_file_ids(&ids).await.map_err(|e| e.reason())?;
            for path in batch.drain(..) {
                if !known.iter().any(|k| k == path.file_id()) && storage.delete(&path).await.is_ok() {
                    orphans += 1;
                }
            }
        }
        if last {
            return Ok(orphans);
        }
    }
}

/// Every `EVERY_SECS`, takes the sweeper's lease if no other node holds it
/// and sweeps.
pub async fn run(state: crate::state::AppState, store: Store, storage: Storage, ttl_days: i64) {
    let holder = gatehouse_core::new_id("node");
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(EVERY_SECS));
    loop {
        tick.tick().await;
        let now = state.clock.now();
        match store.claim_maintenance(TASK, &holder, now, now + LEASE_SECS).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(code = e.code(), "the file sweeper could not take its lease");
                continue;
            }
        }
        match sweep(&store, &storage, ttl_days, now, gatehouse_core::SystemClock.now()).await {
            Ok(r) if r == SweepReport::default() => {}
            Ok(r) => tracing::info!(
                sessions = r.sessions,
                files = r.files,
                bytes = r.bytes,
                orphans = r.orphans,
                "file sweeper deleted stale sessions and orphan objects"
            ),
            Err(reason) => tracing::warn!(%reason, "the file sweeper stopped early; the next pass resumes"),
        }
    }
}
