//! Content scanning: what gatehouse accepts as an upload, export or artifact.
//!
//! Content is judged by its bytes, never by its name or declared type:
//! executables, archives and anything that is not text are refused, and so
//! is text that carries a base64-encoded executable or archive. Content that
//! passes goes to ClamAV's clamd when one is configured; with none the
//! verdict is `not_scanned`, never `clean`.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod clamd;
pub mod embedded;
pub mod kind;
pub mod magic;
pub mod scan;
pub mod sniff;
pub mod text;

pub use kind::{Class, Kind};
pub use scan::{ContentScanner, DEFAULT_MAX_BYTES, Intake, Verdict, VerdictKind};
pub use sniff::{Finding, Sniffer, sniff_bytes};
