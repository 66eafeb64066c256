//! Shared test harnesses. A dev-dependency only: nothing in a shipped binary
//! links this crate.
//!
//! Real components, started per test on free loopback ports and stopped on
//! drop: the suites never talk to a mock where the real server can answer.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, reason = "test harness: fails loudly")]

mod clamd_server;
pub mod leaks;
mod postgres;
mod redis_server;

pub use clamd_server::{
    ClamdServer, DEFAULT_STREAM_MAX_LENGTH, EICAR, EICAR_SIGNATURE, TEST_MARKER, TEST_MARKER_SIGNATURE,
    UNOFFICIAL_SUFFIX,
};
pub use leaks::{assert_no_key_material, assert_no_pem_key};
pub use postgres::{TestDatabase, admin_url as postgres_admin_url};
pub use redis_server::RedisServer;

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
