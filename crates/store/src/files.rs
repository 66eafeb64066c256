//! Files' metadata: what the object store holds, whose it is, what it is
//! called and what the content scanner said of it.

use gatehouse_core::UnixTime;

/// A file's record. Its content is the object `ns/{namespace}/{file_id}`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredFile {
    /// Made by gatehouse.
    pub file_id: String,
    /// `""` where the deployment has no tenants.
    pub tenant_id: String,
    /// The user whose file it is.
    pub user_id: String,
    /// The session key whose namespace holds the object.
    pub namespace: String,
    /// A session's file (a run's output): its session.
    pub session_id: Option<String>,
    /// An input file: the resource it belongs to.
    pub resource: Option<String>,
    /// The name its writer gave it (checked by `gatehouse_files::check_name`).
    pub name: String,
    /// Its size.
    pub bytes: i64,
    /// SHA-256 of its content, lowercase hex.
    pub sha256: String,
    /// The content scanner's verdict (`clean`, `not_scanned`, ...).
    pub verdict: String,
    /// When it was kept.
    pub created_at: UnixTime,
    /// The run that wrote it (a session's file written through a grant).
    pub run_id: Option<String>,
}

impl StoredFile {
    /// The tenant as callers name it.
    pub fn tenant(&self) -> Option<&str> {
        (!self.tenant_id.is_empty()).then_some(self.tenant_id.as_str())
    }
}

/// An upload of a run refused as content.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RefusedUpload {
    /// The name the file was given (none: content scanned without one).
    pub file_name: Option<String>,
    /// Why (`content_malware`, `content_executable`, ...).
    pub reason: Option<String>,
    /// When.
    pub at: UnixTime,
}

/// What a run left behind: its files and its refused uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunArtifacts {
    /// The files it wrote, each with its content verdict.
    pub written: Vec<StoredFile>,
    /// The uploads refused as content.
    pub refused: Vec<RefusedUpload>,
}

/// A session that holds files, as the sweeper sees it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FileSession {
    /// `""` where the deployment has no tenants.
    pub tenant_id: String,
    /// Whose.
    pub user_id: String,
    /// Which.
    pub session_id: String,
    /// Where its objects are.
    pub namespace: String,
    /// Last written or read.
    pub touched_at: UnixTime,
}

/// An upload in progress, recorded before its object is begun (see
/// [`crate::Store::begin_upload`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FileUpload {
    /// The file id its record will have.
    pub file_id: String,
    /// The session key whose namespace holds its object.
    pub namespace: String,
    /// The node taking it in.
    pub node: String,
    /// When it began (the node's clock).
    pub started_at: UnixTime,
}

/// What the store says of a file id found in the object store, as the
/// sweeper asks it: one answer per id, all read at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// It has a record: its object is kept.
    Recorded,
    /// Its upload began after the bound asked about: in progress, kept.
    Uploading,
    /// Its upload began before the bound and never committed: stale.
    Stale,
}

/// How an upload whose commit failed ended, once the store was asked again
/// (see [`crate::Store::abandon_upload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadFate {
    /// The commit did go through: the record is there, the object is kept.
    Committed,
    /// No record is there and none can be written any more: the object
    /// is the caller's to delete.
    Abandoned,
}
