//! Shared test fixtures.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use gatehouse_capability::ManifestSigningKey;
use gatehouse_config::{MapSource, load, names};
use gatehouse_core::ManualClock;
use gatehouse_server::state::AppState;
use http::Request;
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower::ServiceExt as _;

pub const TOKEN: &str = "svc-token-0123456789abcdefghijklmnopqrstuvwxyz";
pub const GRANT_SECRET: &str = "grant-secret-0123456789abcdefghijklmnopqrstuvwxyz";
pub const SESSION_KEY_SECRET: &str = "session-key-secret-0123456789abcdefghijklmnopqrstuvwxyz";
pub const NOW: i64 = 1_800_000_000;
/// The gateway's credential sealing key (X25519, base64url of 32 bytes).
pub const SEALING_KEY: &str = "dGVzdC1zZWFsaW5nLWtleS0wMTIzNDU2Nzg5YWJjZGU";

/// One interception CA for every test node: (key PEM, certificate PEM).
pub fn intercept_ca() -> &'static (String, String) {
    static CA: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    CA.get_or_init(|| {
        let ca = gatehouse_egress::intercept::InterceptCa::generate().unwrap();
        (ca.key_pem().to_string(), ca.cert_pem().to_owned())
    })
}

/// Its public half, which workers seal to.
pub fn sealing_public_key() -> String {
    gatehouse_capability::SealingKey::from_text(SEALING_KEY).unwrap().public_key().to_text()
}

pub struct Node {
    pub router: Router,
    pub state: AppState,
    pub clock: ManualClock,
    pub private_pem: String,
    /// The node's data directory (its SQLite store), kept for the test.
    pub data: tempfile::TempDir,
}

pub fn private_key_pem() -> String {
    ManifestSigningKey::generate().unwrap().to_pkcs8_pem().unwrap().to_string()
}

/// A node of `role` with the given extra settings, its store (SQLite in a
/// data directory of its own unless the settings name a database) migrated
/// and its background work (event writer, policy replica) running.
pub async fn node_with(role: &str, extra: &[(&str, &str)]) -> Node {
    let private_pem = private_key_pem();
    let data = tempfile::tempdir().unwrap();
    let mut src = MapSource::new()
        .with(names::ROLE, role)
        .with(names::LISTEN, "127.0.0.1:0")
        .with(names::PROXY_LISTEN, "127.0.0.1:0")
        .with(names::DATA_DIR, data.path().to_str().unwrap())
        .with(names::SERVICE_TOKEN, TOKEN);
    match role {
        "runner" => {
            let public =
                ManifestSigningKey::from_ed25519_text(&private_pem).unwrap().public_key_pem().unwrap();
            src.set(names::MANIFEST_PUBLIC_KEY, public);
        }
        "gateway" => {
            src.set(names::GRANT_SECRET, GRANT_SECRET);
            src.set(names::CREDENTIAL_SEALING_KEY, SEALING_KEY);
            src.set(names::INTERCEPT_CA_KEY, intercept_ca().0.clone());
            src.set(names::INTERCEPT_CA_CERT, intercept_ca().1.clone());
        }
        _ => {
            src.set(names::MANIFEST_PRIVATE_KEY, private_pem.clone());
            src.set(names::GRANT_SECRET, GRANT_SECRET);
            src.set(names::SESSION_KEY_SECRET, SESSION_KEY_SECRET);
            src.set(names::INTERCEPT_CA_CERT, intercept_ca().1.clone());
            if role == "worker" {
                src.set(names::CREDENTIAL_SEALING_PUBLIC_KEY, sealing_public_key());
            } else {
                src.set(names::CREDENTIAL_SEALING_KEY, SEALING_KEY);
                src.set(names::INTERCEPT_CA_KEY, intercept_ca().0.clone());
            }
        }
    }
    for (k, v) in extra {
        src.set(k, *v);
    }
    let config = load(&src, None).unwrap_or_else(|p| panic!("test config invalid: {p:?}"));
    let clock = ManualClock::new(NOW);
    let store = if config.role.has_store() {
        Some(gatehouse_server::serve::open_store(&config).await.unwrap())
    } else {
        None
    };
    let retention = config.event_retention_days;
    let state = AppState::from_config(config, Arc::new(clock.clone()), store.clone()).unwrap();
    if let Some(store) = store {
        gatehouse_server::serve::background(&state, store, retention).await;
    }
    Node { router: gatehouse_server::serve::router(state.clone()), state, clock, private_pem, data }
}

/// The node's recorded refusals, oldest first, through `GET /v1/refusals`.
pub async fn refusals(node: &Node) -> Vec<Value> {
    let reply = get(node, "/v1/refusals?limit=500").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut items = reply.json()["items"].as_array().unwrap().clone();
    items.reverse();
    items
}

pub async fn node() -> Node {
    node_with("all", &[]).await
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

pub async fn send(router: &Router, req: Request<Body>) -> Reply {
    let response = router.clone().oneshot(req).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply { status, headers, text: String::from_utf8_lossy(&bytes).into_owned() }
}

pub fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// `GET path` with the service token.
/// A read of the record (refusals, run events, audit) that said it could
/// not wait for every queued event (`x-gatehouse-record-complete: false`,
/// a store slowed by a busy machine) is read again, for up to 30 s.
pub async fn get(node: &Node, path: &str) -> Reply {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let req = Request::get(path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        let reply = send(&node.router, req).await;
        let short = reply.headers.get("x-gatehouse-record-complete").is_some_and(|v| v == "false");
        if !short || tokio::time::Instant::now() >= deadline {
            return reply;
        }
    }
}

/// `PUT path` with the service token and a JSON body.
pub async fn put(node: &Node, path: &str, body: Value) -> Reply {
    let req = Request::put(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(&node.router, req).await
}

pub async fn call(node: &Node, path: &str, body: Value) -> Reply {
    send(&node.router, post(path, &body.to_string())).await
}

/// Log output of the whole test binary, captured by a *global* subscriber.
///
/// A thread-local `set_default` subscriber misses events when other tests
/// register the same callsites concurrently (tracing caches callsite
/// interest per process), which made a log assertion flaky; a global
/// subscriber sees every event. Tests read what was written after a mark.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    /// The binary-wide buffer, installing the global subscriber on first use.
    pub fn global() -> &'static LogBuffer {
        static LOGS: std::sync::OnceLock<LogBuffer> = std::sync::OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = LogBuffer::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in tests");
            logs
        })
    }

    /// How much has been written so far.
    pub fn mark(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Everything written since `mark` (by this test and any running beside it).
    pub fn since(&self, mark: usize) -> String {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(bytes.get(mark..).unwrap_or_default()).into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A DNS server on a loopback UDP port: every A query is answered with
/// 127.0.0.1 (where the echo upstream listens), any other type with no
/// record. The names asked for are kept, in order.
pub struct Dns {
    pub port: u16,
    asked: Arc<Mutex<Vec<String>>>,
    /// While set, queries are read and logged but not answered.
    held: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl Dns {
    #[allow(clippy::disallowed_methods, reason = "a DNS responder for the test, on loopback")]
    pub fn start() -> Self {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let held = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let barrier = held.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, peer)) = socket.recv_from(&mut buf) {
                let q = &buf[..n];
                // The header (12 bytes), then the question: labels up to a
                // zero byte, its type and class.
                let mut i = 12;
                let mut labels = Vec::new();
                while i < n && q[i] != 0 {
                    let len = usize::from(q[i]);
                    labels
                        .push(String::from_utf8_lossy(&q[(i + 1).min(n)..(i + 1 + len).min(n)]).into_owned());
                    i += 1 + len;
                }
                let end = i + 5;
                if end > n {
                    continue;
                }
                log.lock().unwrap().push(labels.join(".").to_ascii_lowercase());
                let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
                let mut r = Vec::from(&q[..2]);
                r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(qtype == 1), 0, 0, 0, 0]);
                r.extend_from_slice(&q[12..end]);
                if qtype == 1 {
                    r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
                }
                let (lock, released) = &*barrier;
                let _held = released.wait_while(lock.lock().unwrap(), |held| *held).unwrap();
                let _ = socket.send_to(&r, peer);
            }
        });
        Self { port, asked, held }
    }

    /// Holds every answer until [`Dns::release`]: a lookup in flight stays
    /// in flight.
    pub fn hold(&self) {
        *self.held.0.lock().unwrap() = true;
    }

    /// Answers what was held, and everything after.
    pub fn release(&self) {
        *self.held.0.lock().unwrap() = false;
        self.held.1.notify_all();
    }

    pub fn was_asked(&self, name: &str) -> bool {
        self.asked.lock().unwrap().iter().any(|n| n == name)
    }
}

/// Serves the node's egress proxy on a loopback port in this runtime (so it
/// keeps the node's manual clock); its address. The runtime must have
/// worker threads to spare if the test then blocks on a client.
pub async fn serve_proxy(node: &Node) -> std::net::SocketAddr {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let proxy = node.state.plane.proxy.clone().expect("a node with a proxy");
    let listener = gatehouse_listener::Listener::new(socket, gatehouse_listener::Limits::default())
        .with_peer_addresses();
    tokio::spawn(gatehouse_egress::proxy::serve(proxy, listener));
    addr
}

/// Serves the node's API (its router, as `serve` mounts it) on a loopback
/// port, for clients that must dial it; its address.
pub async fn serve_api(node: &Node) -> std::net::SocketAddr {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let router = node.router.clone();
    let listener = gatehouse_listener::Listener::new(socket, gatehouse_listener::Limits::default())
        .with_peer_addresses();
    let handler = move |req| tower::ServiceExt::oneshot(router.clone(), req);
    tokio::spawn(listener.serve_http1(handler, std::future::pending()));
    addr
}

/// curl as a run's sandbox, off the runtime's threads: the response head
/// and body as the sandbox sees them (`-D -`), then curl's own errors.
pub async fn sandbox_curl(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "-D", "-"])
            .args(&args)
            .output()
            .expect("curl is installed");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
    .await
    .unwrap()
}
