//! gatehouse-ledger integration tests.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod conformance;
