//! The object store, the same suite on the local filesystem and on a real
//! S3-compatible server (moto, started per test on loopback).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use gatehouse_core::{Reason, new_id};
use gatehouse_files::storage::Listed;
use gatehouse_files::{FileError, ObjectPath, Storage};
use gatehouse_test_support::S3Server;
use sha2::{Digest as _, Sha256};

const KEY_A: &str = "sk1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const KEY_B: &str = "sk1_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";

fn path(key: &str) -> ObjectPath {
    ObjectPath::new(key, &new_id("file")).unwrap()
}

async fn read_all(storage: &Storage, path: &ObjectPath) -> Result<Vec<u8>, FileError> {
    let (size, mut chunks) = storage.read(path).await?;
    let mut out = Vec::new();
    while let Some(chunk) = chunks.next().await {
        out.extend_from_slice(&chunk?);
    }
    assert_eq!(out.len() as u64, size);
    Ok(out)
}

async fn listed(storage: &Storage, key: Option<&str>) -> Vec<Listed> {
    storage.list(key).unwrap().map(|l| l.unwrap()).collect().await
}

/// The suite's aborted and dropped uploads left nothing unfinished behind
/// (a dropped upload is aborted in the background: given a few seconds).
async fn no_leftovers(storage: &Storage) {
    for _ in 0..50 {
        if storage.leftovers().await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("left behind: {:?}", storage.leftovers().await.unwrap());
}

/// What every store must do.
async fn suite(storage: &Storage) {
    // A large upload in uneven chunks (over S3's 5 MiB part size, so it is
    // a true multipart upload there), read back whole.
    let content: Vec<u8> =
        (0..12 * 1024 * 1024 + 7).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let big = path(KEY_A);
    let mut upload = storage.begin(&big).await.unwrap();
    for chunk in content.chunks(1_000_003) {
        upload.write(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(upload.bytes(), content.len() as u64);
    // Written but not finished: nobody sees it.
    assert_eq!(storage.read(&big).await.err(), Some(FileError::NotFound));
    let stored = upload.finish().await.unwrap();
    assert_eq!(stored.bytes, content.len() as u64);
    let expected: String = Sha256::digest(&content).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(stored.sha256, expected);
    assert!(read_all(storage, &big).await.unwrap() == content, "read back differs");

    // An empty file is a file.
    let empty = path(KEY_A);
    let stored = storage.begin(&empty).await.unwrap().finish().await.unwrap();
    assert_eq!(stored.bytes, 0);
    assert_eq!(stored.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(read_all(storage, &empty).await.unwrap(), b"");

    // Aborted, or dropped mid-stream: nothing becomes visible.
    let aborted = path(KEY_A);
    let mut upload = storage.begin(&aborted).await.unwrap();
    upload.write(Bytes::from_static(b"half of it")).await.unwrap();
    upload.abort().await;
    let dropped = path(KEY_A);
    let mut upload = storage.begin(&dropped).await.unwrap();
    upload.write(Bytes::from(vec![7u8; 6 * 1024 * 1024])).await.unwrap();
    drop(upload);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for gone in [&aborted, &dropped] {
        assert_eq!(storage.read(gone).await.err(), Some(FileError::NotFound), "{gone}");
    }

    // Listing: a namespace holds exactly its completed objects.
    let other = path(KEY_B);
    let mut upload = storage.begin(&other).await.unwrap();
    upload.write(Bytes::from_static(b"b")).await.unwrap();
    upload.finish().await.unwrap();
    let mut in_a: Vec<String> =
        listed(storage, Some(KEY_A)).await.iter().map(|l| l.path.to_string()).collect();
    in_a.sort();
    let mut want = vec![big.to_string(), empty.to_string()];
    want.sort();
    assert_eq!(in_a, want);
    let all = listed(storage, None).await;
    assert_eq!(all.len(), 3, "{all:?}");
    let b = all.iter().find(|l| l.path == other).unwrap();
    assert_eq!(b.bytes, 1);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - 120..=now + 120).contains(&b.modified_at), "{b:?}");

    // Delete, twice.
    storage.delete(&big).await.unwrap();
    storage.delete(&big).await.unwrap();
    assert_eq!(storage.read(&big).await.err(), Some(FileError::NotFound));
    assert_eq!(listed(storage, Some(KEY_A)).await.len(), 1);

    // An upload its node never finished nor aborted (it crashed): a
    // leftover, listed under the object it was to become, which no listing
    // of objects shows, until it is removed.
    let crashed = path(KEY_B);
    let mut upload = storage.begin(&crashed).await.unwrap();
    upload.write(Bytes::from_static(b"half")).await.unwrap();
    let _crashed = std::mem::ManuallyDrop::new(upload);
    let found: Vec<_> =
        storage.leftovers().await.unwrap().into_iter().filter(|l| l.path == crashed).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(listed(storage, None).await.iter().all(|l| l.path != crashed));
    storage.remove_leftover(&found[0]).await.unwrap();
    storage.remove_leftover(&found[0]).await.unwrap();
    assert!(storage.leftovers().await.unwrap().iter().all(|l| l.path != crashed), "removed, once");
    assert_eq!(storage.read(&crashed).await.err(), Some(FileError::NotFound), "and nothing became visible");
}

#[tokio::test]
async fn the_local_filesystem_keeps_files_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("objects");
    let storage = Storage::local(&root).unwrap();
    // Not of gatehouse's shape: never listed as a leftover.
    std::fs::create_dir_all(root.join("ns").join(KEY_A)).unwrap();
    std::fs::write(root.join("ns").join(KEY_A).join("notes.txt#1"), "x").unwrap();
    std::fs::write(root.join("ns").join(KEY_A).join(format!("{}#tmp", new_id("file"))), "x").unwrap();
    suite(&storage).await;
    no_leftovers(&storage).await;
    // The foreign files go, for the count below.
    for entry in std::fs::read_dir(root.join("ns").join(KEY_A)).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().contains('#') {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o700);
    // Nothing else was left under the root: no staging file of the
    // aborted or dropped uploads.
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() { dirs.push(p) } else { files.push(p) }
        }
    }
    assert_eq!(files.len(), 2, "{files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_keeps_files_whole_or_not_at_all_under_its_prefix() {
    let s3 = S3Server::start();
    s3.create_bucket("gatehouse-files");
    let storage = Storage::s3_with("s3://gatehouse-files/tenant-data/v1", &s3.settings()).unwrap();
    assert_eq!(storage.describe(), "s3://gatehouse-files/tenant-data/v1");
    // Another application's unfinished upload in the bucket, outside the
    // prefix: never listed, never aborted.
    let foreign = std::process::Command::new("curl")
        .args(["-s", "-S", "-f", "-X", "POST"])
        .arg(format!("{}/gatehouse-files/other/ns/{KEY_A}/{}?uploads", s3.endpoint(), new_id("file")))
        .status()
        .unwrap();
    assert!(foreign.success());
    suite(&storage).await;
    no_leftovers(&storage).await;
    assert_eq!(s3.multipart_uploads("gatehouse-files").len(), 1, "the other application's stays");
    let keys = s3.keys("gatehouse-files");
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with(&format!("tenant-data/v1/ns/{KEY_A}/"))
            || k.starts_with(&format!("tenant-data/v1/ns/{KEY_B}/"))),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_storage_unavailable() {
    let mut s3 = S3Server::start();
    s3.create_bucket("gone");
    let storage = Storage::s3_with("s3://gone", &s3.settings()).unwrap();
    let file = path(KEY_A);
    let mut upload = storage.begin(&file).await.unwrap();
    upload.write(Bytes::from_static(b"x")).await.unwrap();
    upload.finish().await.unwrap();
    s3.stop();
    let refused = storage.read(&file).await.err().unwrap();
    assert_eq!((refused.clone(), refused.reason()), (FileError::Unavailable, Reason::StorageUnavailable));
    assert_eq!(storage.begin(&path(KEY_A)).await.err(), Some(FileError::Unavailable));
    assert!(storage.list(None).unwrap().next().await.unwrap().is_err());
}

#[test]
fn storage_settings_that_cannot_work_are_refused_at_start() {
    for url in [
        "http://bucket/x",
        "s3://",
        "s3://Upper_Case",
        "s3://ab",
        "s3://bucket/../escape",
        "s3://bucket//double",
        "s3://bucket/a b",
        "file:///tmp/x",
    ] {
        let refused = Storage::s3(url).err();
        assert!(matches!(refused, Some(FileError::Config(_))), "{url}: {refused:?}");
    }
    assert!(matches!(
        Storage::s3_with("s3://bucket", &[("not_a_setting", String::new())]),
        Err(FileError::Config(_))
    ));
}
