//! The object store: the local filesystem under the data directory by
//! default, or S3-compatible storage (`s3://bucket[/prefix]`, with the
//! usual `AWS_*` settings for credentials, region and endpoint).
//!
//! An upload is a multipart upload written chunk by chunk as the bytes
//! arrive (memory stays at a part or two, whatever the size), and becomes
//! visible only when [`Upload::finish`] completes it: an upload aborted,
//! dropped, cut off or refused midway leaves nothing a reader can see (the
//! local store stages into a temporary file renamed at the end; S3 keeps
//! parts invisible until `CompleteMultipartUpload`).
//!
//! An upload that never finishes (its node crashed, or its abort failed)
//! leaves a staging file on the local filesystem or an incomplete multipart
//! upload on S3, which no listing of objects shows and which S3 bills for:
//! [`Storage::leftovers`] finds them and [`Storage::remove_leftover`] removes
//! one, for the sweeper to judge by its upload's row in the store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt as _};
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt as _, WriteMultipart};
use sha2::{Digest as _, Sha256};

use crate::FileError;
use crate::layout::{ObjectPath, ROOT};

/// Bytes read from a local file per blocking-pool hop: large enough that
/// the hop costs little beside the copy, small enough that a download holds
/// a few of them at most.
const LOCAL_READ_CHUNK: u64 = 1 << 20;

/// How many parts of one upload may be in flight at once: enough to keep
/// S3 busy while the next part fills, few enough to bound memory.
const PARTS_IN_FLIGHT: usize = 2;

/// The most leftovers one call to [`Storage::leftovers`] returns: a pass
/// removes these, the next pass finds the rest.
const LEFTOVERS_AT_ONCE: usize = 10_000;

/// Where files are kept.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    described: String,
    backend: Backend,
}

/// What [`Storage::leftovers`] needs beyond the object store's interface,
/// which lists neither staging files nor multipart uploads.
#[derive(Clone)]
enum Backend {
    /// The directory the local store is rooted at.
    Local { root: PathBuf },
    /// The bucket's own client (multipart uploads are listed at its root),
    /// the key prefix gatehouse keeps under, and an HTTP client with the
    /// same settings as the store's, to send the signed listing.
    S3 { s3: Arc<object_store::aws::AmazonS3>, prefix: String, http: object_store::client::HttpClient },
}

/// What an upload that never finished left behind: a local staging file,
/// or an incomplete S3 multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The object it was to become.
    pub path: ObjectPath,
    /// When the storage says it was last written (a staging file) or begun
    /// (a multipart upload), Unix seconds; `i64::MAX` when it gave no
    /// readable date (never old).
    pub dated_at: i64,
    handle: LeftoverHandle,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LeftoverHandle {
    Staged(PathBuf),
    Multipart { key: String, upload_id: String },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("at", &self.described).finish_non_exhaustive()
    }
}

/// A completed upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its size.
    pub bytes: u64,
    /// The SHA-256 of its content, lowercase hex.
    pub sha256: String,
}

/// An object found by listing the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Where it is.
    pub path: ObjectPath,
    /// When it was last written (Unix seconds).
    pub modified_at: i64,
    /// Its size.
    pub bytes: u64,
}

impl Storage {
    /// The local filesystem under `root`, created owner-only if missing.
    pub fn local(root: &Path) -> Result<Self, FileError> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|e| FileError::Config(format!("cannot create {}: {}", root.display(), e.kind())))?;
        let store = LocalFileSystem::new_with_prefix(root)
            .map_err(|e| FileError::Config(format!("cannot use {}: {e}", root.display())))?
            .with_automatic_cleanup(true)
            // A file is on disk before its record says it is stored: a
            // crash never leaves a record over a torn or empty object.
            .with_fsync(true);
        Ok(Self {
            store: Arc::new(store),
            described: format!("file://{}", root.display()),
            backend: Backend::Local { root: root.to_owned() },
        })
    }

    /// S3-compatible storage at `s3://bucket[/prefix]`. Credentials, region
    /// and endpoint come from the standard `AWS_*` environment variables
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...) or the instance's role.
    pub fn s3(url: &str) -> Result<Self, FileError> {
        Self::s3_with(url, &[])
    }

    /// [`Storage::s3`], with `settings` (`aws_endpoint_url`, `aws_region`,
    /// ... as object_store names them) over the environment's.
    pub fn s3_with(url: &str, settings: &[(&str, String)]) -> Result<Self, FileError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| FileError::Config("an object store URL is s3://bucket[/prefix]".into()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_end_matches('/');
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !bucket_ok {
            return Err(FileError::Config("the bucket name is not a valid S3 bucket name".into()));
        }
        let prefix_ok = prefix.is_empty()
            || prefix.split('/').all(|s| {
                !s.is_empty()
                    && s != "."
                    && s != ".."
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
        if !prefix_ok {
            return Err(FileError::Config(
                "the prefix is segments of [A-Za-z0-9._-], no empty, `.` or `..` segment".into(),
            ));
        }
        // A store that does not answer is refused in seconds, not after
        // object_store's default three minutes of retries: the caller (an
        // upload, a sandbox's read) is waiting, and fails closed.
        let retry = object_store::RetryConfig {
            max_retries: 2,
            retry_timeout: std::time::Duration::from_secs(10),
            ..Default::default()
        };
        // The environment's AWS_* settings, then the caller's over them.
        let mut given: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .filter(|(k, _)| k.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok())
            .collect();
        given.extend(settings.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        // The storage client never takes HTTP_PROXY and its kin from the
        // environment, as the door never does: an explicit proxy that
        // excludes every host turns reqwest's environment proxies off. An
        // operator who routes storage through a proxy says so for storage
        // alone (AWS_PROXY_URL, AWS_PROXY_EXCLUDES).
        if !given.iter().any(|(k, _)| k.ends_with("proxy_url")) {
            given.push(("proxy_url".into(), "http://0.0.0.0:9".into()));
            given.push(("proxy_excludes".into(), "*,0.0.0.0/0,::/0".into()));
        }
        let mut builder =
            object_store::aws::AmazonS3Builder::new().with_bucket_name(bucket).with_retry(retry);
        let mut client_options = object_store::ClientOptions::new();
        for (key, value) in &given {
            let key = key.parse().map_err(|_| FileError::Config(format!("unknown S3 setting {key}")))?;
            if let object_store::aws::AmazonS3ConfigKey::Client(client_key) = &key {
                client_options = client_options.with_config(*client_key, value);
            }
            builder = builder.with_config(key, value);
        }
        let s3 = builder.build().map_err(|e| FileError::Config(format!("S3 settings: {e}")))?;
        let http = object_store::client::HttpConnector::connect(
            &object_store::client::ReqwestConnector::default(),
            &client_options,
        )
        .map_err(|e| FileError::Config(format!("S3 settings: {e}")))?;
        let backend = Backend::S3 { s3: Arc::new(s3.clone()), prefix: prefix.to_owned(), http };
        let store: Arc<dyn ObjectStore> =
            if prefix.is_empty() { Arc::new(s3) } else { Arc::new(PrefixStore::new(s3, prefix)) };
        Ok(Self { store, described: format!("s3://{bucket}/{prefix}"), backend })
    }

    /// The configured store: `url` if given (`s3://...`), else the local
    /// filesystem under `local_root`.
    pub fn from_setting(url: Option<&str>, local_root: &Path) -> Result<Self, FileError> {
        match url {
            Some(url) => Self::s3(url),
            None => Self::local(local_root),
        }
    }

    /// Where the store is, for logs and the settings page (no credentials).
    pub fn describe(&self) -> &str {
        &self.described
    }

    /// Starts an upload to `path`.
    pub async fn begin(&self, path: &ObjectPath) -> Result<Upload, FileError> {
        let upload = self.store.put_multipart(&path.to_store_path()).await.map_err(unavailable)?;
        Ok(Upload {
            writer: Some(WriteMultipart::new(upload)),
            hasher: Sha256::new(),
            bytes: 0,
            path: path.clone(),
        })
    }

    /// Reads `path`: its size, and its content as a stream of chunks.
    pub async fn read(
        &self,
        path: &ObjectPath,
    ) -> Result<(u64, BoxStream<'static, Result<Bytes, FileError>>), FileError> {
        let got = self.store.get(&path.to_store_path()).await.map_err(unavailable)?;
        let size = got.meta.size;
        let chunks = match got.payload {
            // object_store reads a local file 8 KiB per blocking-pool hop,
            // which caps a download far below the disk: read it in large
            // chunks instead.
            GetResultPayload::File(file, _) => file_chunks(file, size),
            GetResultPayload::Stream(chunks) => chunks.map(|chunk| chunk.map_err(unavailable)).boxed(),
        };
        Ok((size, chunks))
    }

    /// Deletes `path`; an object already gone is not an error.
    pub async fn delete(&self, path: &ObjectPath) -> Result<(), FileError> {
        match self.store.delete(&path.to_store_path()).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Every object gatehouse keeps, or those of one namespace: what the
    /// sweeper walks. Objects that are not of gatehouse's shape (another
    /// application's, in a shared bucket) are never listed.
    pub fn list(
        &self,
        session_key: Option<&str>,
    ) -> Result<BoxStream<'static, Result<Listed, FileError>>, FileError> {
        let prefix = match session_key {
            Some(key) => ObjectPath::namespace_prefix(key)?,
            None => object_store::path::Path::from(ROOT),
        };
        let listing = self.store.list(Some(&prefix)).filter_map(|meta| async move {
            match meta {
                Ok(meta) => ObjectPath::parse(meta.location.as_ref()).map(|path| {
                    Ok(Listed { path, modified_at: meta.last_modified.timestamp(), bytes: meta.size })
                }),
                Err(e) => Some(Err(unavailable(e))),
            }
        });
        Ok(listing.boxed())
    }

    /// Uploads that never finished, up to [`LEFTOVERS_AT_ONCE`]: local
    /// staging files (`{object}#{n}`, which object_store writes beside the
    /// object and renames into place), or S3's incomplete multipart uploads
    /// under gatehouse's prefix. Only those of gatehouse's shape are listed.
    /// The caller judges each by its upload's row in the store: one still
    /// uploading must be kept.
    pub async fn leftovers(&self) -> Result<Vec<Leftover>, FileError> {
        match &self.backend {
            Backend::Local { root } => {
                let root = root.clone();
                tokio::task::spawn_blocking(move || staged_files(&root))
                    .await
                    .unwrap_or(Err(FileError::Unavailable))
            }
            Backend::S3 { s3, prefix, http } => multipart_uploads(s3, prefix, http).await,
        }
    }

    /// Removes a leftover (aborts a multipart upload, deletes a staging
    /// file); one already gone is not an error.
    pub async fn remove_leftover(&self, leftover: &Leftover) -> Result<(), FileError> {
        match (&self.backend, &leftover.handle) {
            (_, LeftoverHandle::Staged(file)) => match tokio::fs::remove_file(file).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e.kind(), "a staging file could not be removed");
                    Err(FileError::Unavailable)
                }
            },
            (Backend::S3 { s3, .. }, LeftoverHandle::Multipart { key, upload_id }) => {
                use object_store::multipart::MultipartStore as _;
                match s3.abort_multipart(&object_store::path::Path::from(key.as_str()), upload_id).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(unavailable(e)),
                }
            }
            (Backend::Local { .. }, LeftoverHandle::Multipart { .. }) => Err(FileError::PathInvalid),
        }
    }
}

/// The local store's staging files under `root/ns`, oldest first.
fn staged_files(root: &Path) -> Result<Vec<Leftover>, FileError> {
    let mut found = Vec::new();
    let namespaces = match std::fs::read_dir(root.join(ROOT)) {
        Ok(dirs) => dirs,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => {
            tracing::warn!(error = %e.kind(), "listing the local store");
            return Err(FileError::Unavailable);
        }
    };
    for namespace in namespaces.flatten() {
        let Ok(files) = std::fs::read_dir(namespace.path()) else { continue };
        let namespace = namespace.file_name();
        for file in files.flatten() {
            let name = file.file_name();
            let (Some(namespace), Some(name)) = (namespace.to_str(), name.to_str()) else { continue };
            // object_store's staging name: the object's, `#`, then digits.
            let Some((object, suffix)) = name.split_once('#') else { continue };
            if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Some(path) = ObjectPath::parse(&format!("{ROOT}/{namespace}/{object}")) else { continue };
            let dated_at = file
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MAX, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            found.push(Leftover { path, dated_at, handle: LeftoverHandle::Staged(file.path()) });
            if found.len() >= LEFTOVERS_AT_ONCE {
                return Ok(found);
            }
        }
    }
    found.sort_by_key(|l| l.dated_at);
    Ok(found)
}

/// One page of S3's `ListMultipartUploads` answer, as far as it is read.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MultipartListing {
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_key_marker: Option<String>,
    #[serde(default)]
    next_upload_id_marker: Option<String>,
    #[serde(default, rename = "Upload")]
    uploads: Vec<MultipartListed>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MultipartListed {
    key: String,
    upload_id: String,
    #[serde(default)]
    initiated: String,
}

/// S3's incomplete multipart uploads under `prefix/ns/`. object_store has
/// no call for `ListMultipartUploads`, so the request is signed by its own
/// signer (its endpoint, credentials and region, the query folded into the
/// signature) and sent with an HTTP client of the store's settings.
async fn multipart_uploads(
    s3: &object_store::aws::AmazonS3,
    prefix: &str,
    http: &object_store::client::HttpClient,
) -> Result<Vec<Leftover>, FileError> {
    use object_store::signer::{SignedUrlOptions, Signer as _};
    let key_prefix = if prefix.is_empty() { format!("{ROOT}/") } else { format!("{prefix}/{ROOT}/") };
    let mut found = Vec::new();
    let mut markers: Option<(String, String)> = None;
    loop {
        let mut query =
            vec![("uploads".to_owned(), String::new()), ("prefix".to_owned(), key_prefix.clone())];
        if let Some((key, upload)) = &markers {
            query.push(("key-marker".to_owned(), key.clone()));
            query.push(("upload-id-marker".to_owned(), upload.clone()));
        }
        let options = SignedUrlOptions::new().with_query(query);
        let url = s3
            .signed_url_opts(
                http::Method::GET,
                &object_store::path::Path::from(""),
                std::time::Duration::from_secs(300),
                &options,
            )
            .await
            .map_err(unavailable)?;
        let request = http::Request::get(url.as_str())
            .body(object_store::client::HttpRequestBody::empty())
            .map_err(|_| FileError::Unavailable)?;
        let response = http.execute(request).await.map_err(|e| {
            tracing::warn!(error = %e, "listing multipart uploads");
            FileError::Unavailable
        })?;
        let status = response.status();
        let body = response.into_body().bytes().await.map_err(|e| {
            tracing::warn!(error = %e, "listing multipart uploads");
            FileError::Unavailable
        })?;
        if !status.is_success() {
            tracing::warn!(%status, "listing multipart uploads was refused");
            return Err(FileError::Unavailable);
        }
        let text = std::str::from_utf8(&body).map_err(|_| FileError::Unavailable)?;
        let page: MultipartListing = quick_xml::de::from_str(text).map_err(|e| {
            tracing::warn!(error = %e, "a multipart upload listing did not read");
            FileError::Unavailable
        })?;
        for upload in page.uploads {
            let within = upload.key.strip_prefix(prefix).map(|k| k.trim_start_matches('/'));
            let Some(path) = within.and_then(ObjectPath::parse) else { continue };
            let dated_at = utc_seconds(&upload.initiated).unwrap_or(i64::MAX);
            let handle = LeftoverHandle::Multipart { key: upload.key, upload_id: upload.upload_id };
            found.push(Leftover { path, dated_at, handle });
        }
        let next = page.next_key_marker.zip(page.next_upload_id_marker);
        match next {
            Some(next)
                if page.is_truncated
                    && found.len() < LEFTOVERS_AT_ONCE
                    && markers.as_ref() != Some(&next) =>
            {
                markers = Some(next);
            }
            _ => return Ok(found),
        }
    }
}

/// Unix seconds of an S3 date (`2026-12-05T09:47:01.000Z`, UTC).
fn utc_seconds(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || !text.ends_with('Z') || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |from: usize, to: usize| text.get(from..to)?.parse::<i64>().ok();
    let (y, m, d, hh, mm, ss) = (n(0, 4)?, n(5, 7)?, n(8, 10)?, n(11, 13)?, n(14, 16)?, n(17, 19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// An upload in progress. Dropped without [`Upload::finish`], it is
/// aborted: nothing of it becomes visible.
pub struct Upload {
    writer: Option<WriteMultipart>,
    hasher: Sha256,
    bytes: u64,
    path: ObjectPath,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload").field("path", &self.path).field("bytes", &self.bytes).finish_non_exhaustive()
    }
}

impl Upload {
    /// Adds `chunk`, waiting while too many parts are in flight.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), FileError> {
        let writer = self.writer.as_mut().ok_or(FileError::Unavailable)?;
        writer.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(unavailable)?;
        self.hasher.update(&chunk);
        self.bytes += chunk.len() as u64;
        writer.put(chunk);
        Ok(())
    }

    /// How many bytes were written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Completes the upload: from now on it is visible, whole.
    pub async fn finish(mut self) -> Result<Stored, FileError> {
        let writer = self.writer.take().ok_or(FileError::Unavailable)?;
        writer.finish().await.map_err(unavailable)?;
        let sha256 = hex::encode(self.hasher.clone().finalize());
        Ok(Stored { bytes: self.bytes, sha256 })
    }

    /// Abandons the upload: nothing of it becomes visible.
    pub async fn abort(mut self) {
        if let Some(writer) = self.writer.take()
            && let Err(e) = writer.abort().await
        {
            tracing::warn!(path = %self.path, error = %e, "an abandoned upload could not be aborted; the sweeper removes what is left");
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Cut off mid-stream (the client went away, the handler's future was
        // dropped): abort in the background, if there is a runtime to do it.
        if let Some(writer) = self.writer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = writer.abort().await;
            });
        }
    }
}

/// The `size` bytes of a local object, `LOCAL_READ_CHUNK` at a time. A file
/// that ends early (it cannot grow: objects are written once, under a new
/// name each time) is an error, never a short answer passed off as whole.
fn file_chunks(file: std::fs::File, size: u64) -> BoxStream<'static, Result<Bytes, FileError>> {
    futures_util::stream::try_unfold((file, size), |(mut file, remaining)| async move {
        if remaining == 0 {
            return Ok(None);
        }
        tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let want = remaining.min(LOCAL_READ_CHUNK);
            let mut chunk = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
            match (&mut file).take(want).read_to_end(&mut chunk) {
                Ok(n) if n as u64 == want => Ok(Some((Bytes::from(chunk), (file, remaining - want)))),
                Ok(_) => {
                    tracing::warn!("a local object ended before its recorded size");
                    Err(FileError::Unavailable)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading a local object");
                    Err(FileError::Unavailable)
                }
            }
        })
        .await
        .unwrap_or(Err(FileError::Unavailable))
    })
    .boxed()
}

fn unavailable(e: object_store::Error) -> FileError {
    match e {
        object_store::Error::NotFound { .. } => FileError::NotFound,
        e => {
            tracing::warn!(error = %e, "object store");
            FileError::Unavailable
        }
    }
}
