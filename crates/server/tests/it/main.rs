//! gatehouse-server integration tests: one binary, several modules.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod admin;
mod api;
mod browser;
mod chart;
mod cli;
mod content;
mod credential_kinds;
mod deps;
mod echoes;
mod files;
mod files_cluster;
mod files_sweep;
mod fleet;
mod intercept;
mod lease_door;
mod leases;
mod leases_cluster;
mod ledger;
mod mcp;
mod person;
mod plane;
mod proposals;
mod proxy;
mod record;
mod rewrap;
mod rules;
mod runs;
mod scans;
mod support;
mod tenants;
