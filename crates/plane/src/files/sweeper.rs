//! The file sweeper: file sessions neither written nor read for
//! `GATEHOUSE_SESSION_TTL_DAYS` are deleted with their objects, and what
//! uploads that never committed left behind is removed: objects without a
//! record, local staging files, S3's incomplete multipart uploads. One node
//! of a cluster sweeps at a time, holding a maintenance lease in the store;
//! a pass is resumable (each session's records go in one audited
//! transaction before its objects, and a deleted object stays deleted), and
//! it reports what it deleted.
//!
//! What an upload wrote is judged by the store, never by the storage's own
//! dates (S3 may date an object from the start of its multipart upload, so
//! a long upload's object is "old" the moment it completes): an upload's
//! row, written before its first byte, keeps everything of it until the
//! commit replaces the row with the record, or until the row is older than
//! [`UPLOAD_BOUND_SECS`] and the sweeper expires it (a commit after that
//! is refused). Storage dates only decide, after a grace, for what the
//! store knows nothing of at all: leftovers of uploads whose row is gone
//! (abandoned, or from before upload rows existed).

use gatehouse_core::{Clock as _, Reason, UnixTime};
use gatehouse_files::{Leftover, ObjectPath, Storage};
use gatehouse_store::files::FileState;
use gatehouse_store::{AuditRecord, Store};

use futures_util::StreamExt as _;

/// The store's name for the sweeper's maintenance lease.
const TASK: &str = "file-sweeper";
/// How often a node tries to take the lease and sweep.
const EVERY_SECS: u64 = 600;
/// How long a taken lease lasts: longer than a pass takes, so two nodes
/// never sweep at once; short enough that a dead holder is soon replaced.
const LEASE_SECS: i64 = 1800;
/// An upload's row older than this (by the clock of the node that wrote it
/// and of the sweeping node) is stale: the upload is over, whether its node
/// died or its abort failed. An upload lasts at most the request timeout
/// (`http::REQUEST_TIMEOUT`, 30 s); the rest is margin for nodes' clocks
/// and a slow store.
pub const UPLOAD_BOUND_SECS: i64 = 3600;
/// What the store knows nothing of (no record, no upload row) is removed
/// once the storage dates it this old: a row is written before an upload's
/// first byte, so this only waits out uploads begun without one (a node
/// older than upload rows, during an upgrade).
pub const ORPHAN_GRACE_SECS: i64 = 3600;
/// Sessions and upload rows taken from the store at a time.
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
    /// Uploads whose row went stale without a commit: expired (their
    /// objects and leftovers removed, a late commit refused).
    pub expired_uploads: u64,
    /// Local staging files and S3 incomplete multipart uploads removed.
    pub leftovers: u64,
}

/// One pass: sessions untouched for `ttl_days` at `now` (the node's clock,
/// which wrote their times and the upload rows' times), then what
/// uncommitted uploads left: leftovers, stale upload rows with their
/// objects, and orphan objects. The storage's own dates are compared with
/// `wall_now` (the real time: an object's time is the store's, never a
/// test's manual clock), and only for what the store knows nothing of.
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
    let live_since = now - UPLOAD_BOUND_SECS;
    let dated_before = wall_now - ORPHAN_GRACE_SECS;
    let (leftovers, expired) = sweep_leftovers(store, storage, live_since, dated_before).await?;
    report.leftovers = leftovers;
    report.expired_uploads = expired + expire_stale_uploads(store, storage, live_since).await?;
    let (orphans, expired) = sweep_orphans(store, storage, live_since, dated_before).await?;
    report.orphans = orphans;
    report.expired_uploads += expired;
    if report.orphans > 0 || report.expired_uploads > 0 || report.leftovers > 0 {
        let detail = serde_json::json!({"orphans": report.orphans,
            "expired_uploads": report.expired_uploads, "leftovers": report.leftovers});
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

/// What the store says of each id, `None` for what it knows nothing of.
async fn states_of(
    store: &Store,
    ids: &[String],
    live_since: UnixTime,
) -> Result<Vec<Option<FileState>>, Reason> {
    let known = store.file_states(ids, live_since).await.map_err(|e| e.reason())?;
    Ok(ids.iter().map(|id| known.iter().find(|(k, _)| k == id).map(|(_, state)| *state)).collect())
}

/// What becomes of something an upload wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// Its record is there, or its upload is in progress (or was, until
    /// another node or a commit got to its stale row first: judged again
    /// next pass).
    Kept,
    /// Its upload's stale row was expired by this pass: no commit can
    /// follow, and all the upload wrote goes.
    Expired,
    /// The store knows nothing of it and the storage dates it past the
    /// grace: it goes.
    Orphan,
}

/// Judges what an upload wrote by the store: never removed while its
/// upload is in progress or its record is there; a stale upload's row is
/// expired first; what the store knows nothing of goes once the storage
/// dates it before `dated_before`.
async fn judge(
    store: &Store,
    state: Option<FileState>,
    file_id: &str,
    live_since: UnixTime,
    dated_at: i64,
    dated_before: UnixTime,
) -> Result<Judged, Reason> {
    Ok(match state {
        Some(FileState::Recorded | FileState::Uploading) => Judged::Kept,
        Some(FileState::Stale) => {
            if store.expire_upload(file_id, live_since).await.map_err(|e| e.reason())? {
                Judged::Expired
            } else {
                Judged::Kept
            }
        }
        None if dated_at < dated_before => Judged::Orphan,
        None => Judged::Kept,
    })
}

/// Removes local staging files and S3 incomplete multipart uploads no
/// upload in progress owns: (removed, uploads expired on the way).
async fn sweep_leftovers(
    store: &Store,
    storage: &Storage,
    live_since: UnixTime,
    dated_before: UnixTime,
) -> Result<(u64, u64), Reason> {
    // A storage that will not list them (S3 credentials without
    // s3:ListBucketMultipartUploads, say) costs this step only: the rest of
    // the pass still runs.
    let leftovers: Vec<Leftover> = match storage.leftovers().await {
        Ok(leftovers) => leftovers,
        Err(e) => {
            tracing::warn!(reason = %e.reason(), "unfinished uploads could not be listed; none were removed");
            return Ok((0, 0));
        }
    };
    let (mut removed, mut expired) = (0, 0);
    for batch in leftovers.chunks(OBJECT_BATCH) {
        let ids: Vec<String> = batch.iter().map(|l| l.path.file_id().to_owned()).collect();
        let states = states_of(store, &ids, live_since).await?;
        for (leftover, state) in batch.iter().zip(states) {
            let id = leftover.path.file_id();
            // A recorded file's upload completed: what is left of it under
            // its name is no upload in progress, and goes by its date.
            let state = state.filter(|s| *s != FileState::Recorded);
            let judged = judge(store, state, id, live_since, leftover.dated_at, dated_before).await?;
            if judged == Judged::Kept {
                continue;
            }
            let expiring = judged == Judged::Expired;
            if expiring {
                expired += 1;
                // Its object too, if the upload got as far as completing it.
                let _ = storage.delete(&leftover.path).await;
            }
            if storage.remove_leftover(leftover).await.is_ok() {
                removed += 1;
            }
        }
    }
    Ok((removed, expired))
}

/// Expires upload rows older than the bound and deletes their objects.
async fn expire_stale_uploads(store: &Store, storage: &Storage, live_since: UnixTime) -> Result<u64, Reason> {
    let mut expired = 0;
    loop {
        let stale = store.stale_uploads(live_since, SESSION_BATCH).await.map_err(|e| e.reason())?;
        for upload in &stale {
            if !store.expire_upload(&upload.file_id, live_since).await.map_err(|e| e.reason())? {
                continue;
            }
            expired += 1;
            if let Ok(path) = ObjectPath::new(&upload.namespace, &upload.file_id) {
                // Left behind on failure, the store knows nothing of it: an
                // orphan a later pass removes by its date.
                let _ = storage.delete(&path).await;
            }
        }
        if stale.len() < SESSION_BATCH as usize {
            return Ok(expired);
        }
    }
}

/// Deletes every object that has neither a record nor an upload in
/// progress (see [`judge`]): (deleted, uploads expired on the way).
async fn sweep_orphans(
    store: &Store,
    storage: &Storage,
    live_since: UnixTime,
    dated_before: UnixTime,
) -> Result<(u64, u64), Reason> {
    let mut listing = storage.list(None).map_err(|e| e.reason())?;
    let (mut orphans, mut expired) = (0, 0);
    let mut batch = Vec::with_capacity(OBJECT_BATCH);
    loop {
        let next = listing.next().await;
        let last = next.is_none();
        if let Some(object) = next {
            batch.push(object.map_err(|e| e.reason())?);
        }
        if batch.len() >= OBJECT_BATCH || (last && !batch.is_empty()) {
            let ids: Vec<String> = batch.iter().map(|o| o.path.file_id().to_owned()).collect();
            let states = states_of(store, &ids, live_since).await?;
            for (object, state) in batch.drain(..).zip(states) {
                let id = object.path.file_id();
                let judged = judge(store, state, id, live_since, object.modified_at, dated_before).await?;
                if judged == Judged::Kept {
                    continue;
                }
                let expiring = judged == Judged::Expired;
                expired += u64::from(expiring);
                if storage.delete(&object.path).await.is_ok() {
                    orphans += 1;
                }
            }
        }
        if last {
            return Ok((orphans, expired));
        }
    }
}

/// Every `EVERY_SECS`, takes the sweeper's lease if no other node holds it
/// and sweeps.
pub async fn run(
    clock: std::sync::Arc<dyn gatehouse_core::Clock>,
    store: Store,
    storage: Storage,
    ttl_days: i64,
) {
    let holder = gatehouse_core::new_id("node");
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(EVERY_SECS));
    loop {
        tick.tick().await;
        let now = clock.now();
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
                expired_uploads = r.expired_uploads,
                leftovers = r.leftovers,
                "file sweeper deleted stale sessions, orphan objects and what unfinished uploads left"
            ),
            Err(reason) => tracing::warn!(%reason, "the file sweeper stopped early; the next pass resumes"),
        }
    }
}
