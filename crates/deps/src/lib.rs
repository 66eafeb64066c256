//! The dependency gate: what a pull request changes in its dependencies.
//!
//! - [`package`]: the (ecosystem, name, version) triple and its normalization.
//! - [`lockfile`]: format detection and one parser per lockfile format, each
//!   reading the exact committed bytes.
//! - [`mod@diff`]: base vs head package sets.
//!
//! Pure logic: nothing here touches the network. OSV queries go through the
//! egress crate's client, wired in by the caller.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod diff;
pub mod gate;
pub mod lockfile;
pub mod matching;
pub mod osv;
pub mod osv_client;
pub mod package;
pub mod scan;
pub mod severity;
pub mod version;

pub use diff::{Change, Diff, diff};
pub use lockfile::{Format, ParseError, ParseErrorCode, Parsed, Warning, detect, parse};
pub use package::{Ecosystem, Package};
