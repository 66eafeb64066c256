//! Shared test harnesses. A dev-dependency only: nothing in a shipped binary
//! links this crate.
//!
//! Real components, started per test on free loopback ports and stopped on
//! drop: the suites never talk to a mock where the real server can answer.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, reason = "test harness: fails loudly")]

pub mod browser;
mod clamd_server;
pub mod leaks;
mod mcp_server;
mod postgres;
mod redis_server;
mod s3_server;
mod token_server;

pub use browser::Browser;
pub use clamd_server::{
    ClamdServer, DEFAULT_STREAM_MAX_LENGTH, EICAR, EICAR_SIGNATURE, TEST_MARKER, TEST_MARKER_SIGNATURE,
    UNOFFICIAL_SUFFIX,
};
pub use leaks::{assert_no_key_material, assert_no_pem_key};
pub use mcp_server::{McpAnswers, McpServer};
pub use postgres::{TestDatabase, admin_url as postgres_admin_url};
pub use redis_server::RedisServer;
pub use s3_server::S3Server;
pub use token_server::TokenServer;

/// A free TCP port on 127.0.0.1 for a server a test starts (bound, checked,
/// released), from below Linux's ephemeral range (32768-60999).
///
/// A port the kernel hands out for port 0 is one it hands out again, to any
/// process's `bind(0)` or outgoing connection, the moment it is released: a
/// server started on it a moment later can find it taken. Ports below the
/// range are never handed out that way; each process walks them from its own
/// offset, so two test binaries rarely try the same one, and the bind check
/// skips any in use.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = u16::try_from(FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// A real TLS ClientHello for `server_name`, as rustls' client writes it
/// (an IP address makes it send no SNI, as every client does).
pub fn tls_client_hello(server_name: &str) -> Vec<u8> {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the default protocol versions are supported")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).expect("a server name");
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("a client");
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).expect("writing to a Vec");
    }
    out
}
