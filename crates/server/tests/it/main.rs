//! gatehouse-server integration tests: one binary, several modules.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod api;
mod cli;
mod content;
mod deps;
mod leases;
mod ledger;
mod plane;
mod proxy;
mod runs;
mod scans;
mod support;
