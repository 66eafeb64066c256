//! The store's conformance suite: every test runs against SQLite and against
//! a real PostgreSQL, each on a database of its own.

#![allow(clippy::unwrap_used, missing_docs, reason = "tests")]

mod conformance;
mod lease_property;
