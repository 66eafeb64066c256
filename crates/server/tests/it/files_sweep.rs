//! What uploads that never committed leave behind, and the sweeper that
//! removes it, judged by the store: an upload's row keeps its object
//! however old the storage dates it; a stale row goes with what it wrote;
//! local staging files and S3's incomplete multipart uploads are swept too;
//! a commit that errs but went through keeps its object.

use gatehouse_core::{Clock as _, Reason, new_id};
use gatehouse_files::{ObjectPath, Storage};
use gatehouse_plane::files::{UPLOAD_BOUND_SECS, sweep};
use gatehouse_store::files::{FileUpload, StoredFile};
use gatehouse_store::{Store, StoreError};

use crate::files::{files_under, store_input};
use crate::support::*;

const NS: &str = "sk1_SSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSSS";

fn wall() -> i64 {
    gatehouse_core::SystemClock.now()
}

/// A fresh object path in the test's namespace.
fn new_path() -> ObjectPath {
    ObjectPath::new(NS, &new_id("file")).unwrap()
}

/// Records the upload to `path` as begun at `at`, as the routes do.
async fn begin(store: &Store, path: &ObjectPath, at: i64) {
    let upload = FileUpload {
        file_id: path.file_id().into(),
        namespace: NS.into(),
        node: "node-test".into(),
        started_at: at,
    };
    store.begin_upload(&upload).await.unwrap();
}

/// The record an upload to `path` commits.
fn record_of(path: &ObjectPath, at: i64) -> StoredFile {
    StoredFile {
        file_id: path.file_id().into(),
        tenant_id: "t1".into(),
        user_id: "u1".into(),
        namespace: NS.into(),
        session_id: None,
        resource: Some("r1".into()),
        name: "late.txt".into(),
        bytes: 4,
        sha256: "ab".repeat(32),
        verdict: "not_scanned".into(),
        created_at: at,
        run_id: None,
    }
}

/// Writes `content` to `path` and completes it.
async fn write_object(storage: &Storage, path: &ObjectPath, content: &'static [u8]) {
    let mut upload = storage.begin(path).await.unwrap();
    upload.write(bytes::Bytes::from_static(content)).await.unwrap();
    upload.finish().await.unwrap();
}

/// Begins an upload to `path` and leaves it as a crashed node would: never
/// finished, never aborted.
async fn leave_unfinished(storage: &Storage, path: &ObjectPath) {
    let mut upload = storage.begin(path).await.unwrap();
    upload.write(bytes::Bytes::from_static(b"part")).await.unwrap();
    // A crash: the upload's drop (which aborts it) never runs.
    let _crashed = std::mem::ManuallyDrop::new(upload);
}

/// A store and local storage of their own, with no node sweeping them
/// meanwhile (a node's own sweeper makes its first pass when it starts).
async fn local() -> (tempfile::TempDir, Store, Storage) {
    let data = tempfile::tempdir().unwrap();
    let store =
        Store::connect(&gatehouse_store::StoreConfig::sqlite_file(&data.path().join("g.db"))).await.unwrap();
    store.migrate().await.unwrap();
    let storage = Storage::local(&data.path().join("objects")).unwrap();
    (data, store, storage)
}

/// Dates a local file `ago` back (`touch -d`).
fn backdate(file: &std::path::Path, ago: &str) {
    let touched = std::process::Command::new("touch").arg("-d").arg(ago).arg(file).status().unwrap();
    assert!(touched.success(), "{}", file.display());
}

/// An upload whose object the storage dates two hours back (as S3 dates an
/// object from the start of its multipart upload) and whose record comes
/// after a pass: the pass keeps it, judged by its upload's row. An upload
/// whose node died goes once its row is older than the bound, with its
/// object, and a commit after that is refused.
#[tokio::test]
async fn an_upload_dated_long_ago_but_committed_late_is_kept_and_a_stale_one_expires() {
    let (data, store, storage) = local().await;
    let (store, storage) = (&store, &storage);
    let objects = data.path().join("objects");
    let mut now = wall();
    let late = new_path();
    begin(store, &late, now).await;
    write_object(storage, &late, b"late").await;
    backdate(&objects.join(late.to_string()), "2 hours ago");

    let report = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!(report, Default::default(), "an upload in progress is never an orphan");
    assert!(objects.join(late.to_string()).is_file(), "the object waits for its record");
    store.record_file(&record_of(&late, now), "worker").await.unwrap();
    let again = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!(again, Default::default());
    let (size, _) = storage.read(&late).await.unwrap();
    assert_eq!(size, 4, "the record's object is there");

    // A node died mid-upload: its row goes stale, and its object with it.
    let dead = new_path();
    begin(store, &dead, now).await;
    write_object(storage, &dead, b"dead").await;
    now += UPLOAD_BOUND_SECS - 10;
    let report = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!(report, Default::default(), "within the bound it is in progress");
    now += 20;
    let report = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!((report.expired_uploads, report.orphans, report.leftovers), (1, 0, 0));
    assert!(!objects.join(dead.to_string()).exists(), "the stale upload's object is gone");
    let commit = store.record_file(&record_of(&dead, now), "worker").await;
    assert_eq!(commit, Err(StoreError::Refused(Reason::UploadExpired)), "too late: nothing recorded");
    assert!(store.file(Some("t1"), dead.file_id()).await.unwrap().is_none());
    assert!(objects.join(late.to_string()).is_file(), "the committed file stays");
    let audit = store.audit_entries(0, 100).await.unwrap();
    let swept = audit.iter().find(|e| e.record.action == "files.orphans_swept").expect("audited");
    assert_eq!(swept.record.detail["expired_uploads"], 1, "{:?}", swept.record);
}

/// Uploads cut off by a crash leave local staging files (`{object}#1`):
/// one of an upload in progress stays however old its file; one whose row
/// went stale goes; one the store knows nothing of goes once an hour old.
#[tokio::test]
async fn stale_staging_files_are_swept_and_those_of_uploads_in_progress_kept() {
    let (data, store, storage) = local().await;
    let (store, storage) = (&store, &storage);
    let objects = data.path().join("objects");
    let now = wall();
    let staged = |path: &ObjectPath| objects.join(format!("{path}#1"));
    let (live, stale, unknown_young, unknown_old) = (new_path(), new_path(), new_path(), new_path());
    begin(store, &live, now).await;
    begin(store, &stale, now - UPLOAD_BOUND_SECS - 60).await;
    for path in [&live, &stale, &unknown_young, &unknown_old] {
        leave_unfinished(storage, path).await;
        assert!(staged(path).is_file(), "{:?}", files_under(&objects));
    }
    backdate(&staged(&live), "3 hours ago");
    backdate(&staged(&unknown_old), "2 hours ago");

    let report = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!((report.leftovers, report.expired_uploads, report.orphans), (2, 1, 0), "{report:?}");
    assert!(staged(&live).is_file(), "an upload in progress keeps its staging file");
    assert!(staged(&unknown_young).is_file(), "unknown and young: kept for now");
    assert!(!staged(&stale).exists() && !staged(&unknown_old).exists(), "{:?}", files_under(&objects));
    let again = sweep(store, storage, 30, now, wall()).await.unwrap();
    assert_eq!(again, Default::default(), "a second pass finds nothing");
}

/// On a real S3-compatible server, uploads cut off by a crash leave
/// incomplete multipart uploads, which moto dates 2010-11-10 whenever they
/// began: one of an upload in progress stays all the same (its row says
/// so), one whose row went stale is aborted, one the store knows nothing
/// of goes by its date; once the first one's row is stale, it goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_stale_multipart_uploads_are_aborted_and_those_in_progress_kept() {
    let s3 = gatehouse_test_support::S3Server::start();
    s3.create_bucket("gatehouse-sweep");
    let storage = Storage::s3_with("s3://gatehouse-sweep/files", &s3.settings()).unwrap();
    let data = tempfile::tempdir().unwrap();
    let store =
        Store::connect(&gatehouse_store::StoreConfig::sqlite_file(&data.path().join("g.db"))).await.unwrap();
    store.migrate().await.unwrap();
    let now = wall();
    let (live, stale, unknown) = (new_path(), new_path(), new_path());
    begin(&store, &live, now).await;
    begin(&store, &stale, now - UPLOAD_BOUND_SECS - 60).await;
    for path in [&live, &stale, &unknown] {
        leave_unfinished(&storage, path).await;
    }
    let key = |path: &ObjectPath| format!("files/{path}");
    let mut pending = s3.multipart_uploads("gatehouse-sweep");
    pending.sort();
    let mut want = vec![key(&live), key(&stale), key(&unknown)];
    want.sort();
    assert_eq!(pending, want);
    let listed = storage.leftovers().await.unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.iter().all(|l| l.dated_at < now - 86_400), "moto dates them long ago: {listed:?}");

    let report = sweep(&store, &storage, 30, now, now).await.unwrap();
    assert_eq!((report.leftovers, report.expired_uploads, report.orphans), (2, 1, 0), "{report:?}");
    assert_eq!(s3.multipart_uploads("gatehouse-sweep"), [key(&live)], "the upload in progress stays");
    assert!(s3.keys("gatehouse-sweep").is_empty(), "and nothing became visible");
    // Once its row is stale too, it goes.
    let later = sweep(&store, &storage, 30, now + UPLOAD_BOUND_SECS + 1, now).await.unwrap();
    assert_eq!((later.leftovers, later.expired_uploads), (1, 1), "{later:?}");
    assert!(s3.multipart_uploads("gatehouse-sweep").is_empty());
}

/// A commit whose answer never came (the store's time bound ran out while
/// PostgreSQL was still committing) but which went through: the upload
/// asks the store again, waits out the commit, and keeps the object its
/// record names. A commit that really failed leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_errs_but_went_through_keeps_its_object() {
    let db = gatehouse_test_support::TestDatabase::create();
    let node = node_with(
        "all",
        &[("GATEHOUSE_DATABASE_URL", db.url()), (gatehouse_config::names::STORE_TIMEOUT_MS, "1000")],
    )
    .await;
    // Every commit that records a file takes 1.5 s, past the store's 1 s
    // bound: the node sees an error; PostgreSQL commits all the same.
    let slow = "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS \
                $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$; \
                CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON files \
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();";
    let out = std::process::Command::new("psql")
        .args([db.url(), "-v", "ON_ERROR_STOP=1", "-q", "-c", slow])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let put = store_input(&node, "tenant_id=t1&user_id=u1&resource=r1&name=kept.txt", b"kept").await;
    assert_eq!(put.status, 201, "{}", put.text);
    let file_id = put.json()["file_id"].as_str().unwrap().to_owned();
    let store = node.state.plane.store.as_ref().unwrap();
    let file = store.file(Some("t1"), &file_id).await.unwrap().expect("the record went through");
    let path = ObjectPath::new(&file.namespace, &file_id).unwrap();
    let (size, _) = node.state.plane.storage.as_ref().unwrap().read(&path).await.unwrap();
    assert_eq!(size, 4, "its object is kept");

    // A commit that fails for certain (the trigger refuses): nothing is
    // recorded and the object goes.
    let refuse = "CREATE OR REPLACE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS \
                  $$ BEGIN RAISE EXCEPTION 'refused'; END $$;";
    let out = std::process::Command::new("psql")
        .args([db.url(), "-v", "ON_ERROR_STOP=1", "-q", "-c", refuse])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let put = store_input(&node, "tenant_id=t1&user_id=u1&resource=r1&name=lost.txt", b"lost").await;
    assert_eq!(put.status, 503, "{}", put.text);
    let objects = files_under(&node.data.path().join("objects"));
    assert_eq!(objects.len(), 1, "only the kept file's object: {objects:?}");
    assert!(store.stale_uploads(i64::MAX, 10).await.unwrap().is_empty(), "no upload row is left");
}
