//! The plane's operations, each held to its invariants where it is
//! written, without sockets: the in-process ledger, SQLite in a temporary
//! directory, a manual clock.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod support;

mod credentials;
mod files;
mod manifests;
mod runs;
mod scans;
mod tenants;
