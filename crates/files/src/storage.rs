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

use std::path::Path;
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

/// Where files are kept.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    described: String,
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
        Ok(Self { store: Arc::new(store), described: format!("file://{}", root.display()) })
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
        for (key, value) in &given {
            let key = key.parse().map_err(|_| FileError::Config(format!("unknown S3 setting {key}")))?;
            builder = builder.with_config(key, value);
        }
        let s3 = builder.build().map_err(|e| FileError::Config(format!("S3 settings: {e}")))?;
        let store: Arc<dyn ObjectStore> =
            if prefix.is_empty() { Arc::new(s3) } else { Arc::new(PrefixStore::new(s3, prefix)) };
        Ok(Self { store, described: format!("s3://{bucket}/{prefix}") })
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
        let sha256 = self.hasher.clone().finalize().iter().map(|b| format!("{b:02x}")).collect();
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
