//! Files through grants: where a run's files live and what they may be
//! called.
//!
//! - [`name`]: the rule for a file's name, which a caller chooses. A name is
//!   metadata only; it never becomes part of a storage path.
//! - [`layout`]: storage paths, built only from a session key gatehouse
//!   derived and a file id gatehouse generated.
//! - [`storage`]: the object store (the local filesystem under the data
//!   directory, or S3-compatible storage), with uploads streamed in chunks
//!   and visible only once complete.
//!
//! Who may read or write which file (the grant's scopes, the ledger's
//! budgets, the content scanner) is decided by the caller of this crate;
//! this crate only makes sure that whatever is decided cannot be escaped
//! through a name or a path.

#![forbid(unsafe_code)]
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod layout;
pub mod name;
#[cfg(feature = "storage")]
pub mod storage;

pub use layout::ObjectPath;
pub use name::check_name;
#[cfg(feature = "storage")]
pub use storage::{Leftover, Storage, Stored, Upload};

use gatehouse_core::Reason;

/// Why a file operation failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FileError {
    /// The caller's file name breaks the rule in [`name`].
    #[error("file name not allowed: {0}")]
    NameInvalid(&'static str),
    /// A session key or file id that gatehouse did not make.
    #[error("not a storage path component gatehouse makes")]
    PathInvalid,
    /// No such object.
    #[error("no such file")]
    NotFound,
    /// The object store did not answer or failed.
    #[error("the object store is unavailable")]
    Unavailable,
    /// The storage setting does not name a store gatehouse can use.
    #[error("storage setting not usable: {0}")]
    Config(String),
}

impl FileError {
    /// The stable refusal code for the caller.
    pub fn reason(&self) -> Reason {
        match self {
            Self::NameInvalid(_) => Reason::FileNameInvalid,
            Self::NotFound | Self::PathInvalid => Reason::FileUnknown,
            Self::Unavailable | Self::Config(_) => Reason::StorageUnavailable,
        }
    }
}
