//! The proxy in process, against real loopback upstreams, with tight limits:
//! pinning under a rebinding resolver, slow upstreams, body caps.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]
#![allow(clippy::disallowed_methods, reason = "the egress crate's own tests probe loopback servers")]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gatehouse_capability::{GrantRequest, GrantSealer, OpenedGrants, Secret};
use gatehouse_core::{ManualClock, Refusal};
use gatehouse_egress::AddressGuard;
use gatehouse_egress::pool::{PoolLimits, UpstreamPool};
use gatehouse_egress::proxy::{Limits, MemoryPolicies, Proxy, ProxyStats, RefusalSink, Resolver};
use gatehouse_ledger::{Ledger, LedgerBackend as _, MemoryLedger, Registration};

const NOW: i64 = 1_800_000_000;
const SECRET: &str = "proxy-test-0123456789abcdefghijklmnopqrstuvwxyz";

#[derive(Default)]
struct Sink(std::sync::Mutex<Vec<Refusal>>);
impl RefusalSink for Sink {
    fn refused(&self, refusal: Refusal) {
        self.0.lock().unwrap().push(refusal);
    }
}

/// Reads one request head from `stream`.
fn read_head(stream: &std::net::TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        line.clear();
    }
}

/// An upstream that answers every request with `body` after `delay`, then closes.
fn upstream(body: &'static str, delay: Duration) -> u16 {
    upstream_framed(body, delay, true)
}

/// As [`upstream`]; without `content-length` the body ends where the connection does.
fn upstream_framed(body: &'static str, delay: Duration, declare_length: bool) -> u16 {
    answer_each_request(move |mut stream| {
        std::thread::sleep(delay);
        let length =
            if declare_length { format!("content-length: {}\r\n", body.len()) } else { String::new() };
        let _ = write!(stream, "HTTP/1.1 200 OK\r\n{length}connection: close\r\n\r\n{body}");
    })
}

/// A loopback upstream that reads one request head per connection, on a
/// thread of its own, and leaves the answer to `answer`.
fn answer_each_request(answer: impl Fn(std::net::TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                read_head(&stream);
                answer(stream);
            });
        }
    });
    port
}

struct Harness {
    proxy_addr: String,
    token: String,
    /// A second run's grant (same tenant).
    other_token: String,
    sink: Arc<Sink>,
    _runtime: tokio::runtime::Runtime,
}

fn harness(limits: Limits, resolver: Resolver) -> Harness {
    harness_with_pool(limits, resolver, UpstreamPool::default())
}

fn harness_with_pool(limits: Limits, resolver: Resolver, pool: UpstreamPool) -> Harness {
    harness_full(limits, resolver, pool, None)
}

/// A harness whose grants may move `max_egress_bytes` through the door.
fn harness_with_egress_budget(limits: Limits, max_egress_bytes: u64) -> Harness {
    harness_full(limits, Resolver::Static(Arc::default()), UpstreamPool::default(), Some(max_egress_bytes))
}

fn harness_full(
    limits: Limits,
    resolver: Resolver,
    pool: UpstreamPool,
    max_egress_bytes: Option<u64>,
) -> Harness {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let secret = Secret::new(SECRET).unwrap();
    let sealer = GrantSealer::new(&secret);
    let ledger = MemoryLedger::new();
    let mint = |exec_id: &str| {
        let claims = GrantRequest {
            exec_id: exec_id.into(),
            tenant_id: Some("t".into()),
            user_id: "u".into(),
            max_egress_bytes,
            ..Default::default()
        }
        .into_claims(
            "sk1_x".into(),
            NOW,
            gatehouse_capability::GrantLifetime { default_secs: 600, max_secs: 86_400 },
        )
        .unwrap();
        runtime.block_on(ledger.register(&Registration::from(&claims))).unwrap();
        sealer.mint(&claims).unwrap()
    };
    let (token, other_token) = (mint("e"), mint("e2"));
    let sink = Arc::new(Sink::default());
    let proxy = Arc::new(Proxy {
        grants: OpenedGrants::new(sealer, 16),
        ledger: Ledger::Memory(ledger),
        ledger_required: true,
        policies: Arc::new(MemoryPolicies::default()),
        guard: AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]),
        resolver,
        sink: sink.clone(),
        clock: Arc::new(ManualClock::new(NOW)),
        limits,
        stats: ProxyStats::default(),
        pool,
        tunnels: Default::default(),
        leases: None,
        leaves: None,
        upstream_tls: None,
        proposals: None,
    });
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let proxy_addr = listener.local_addr().unwrap().to_string();
    let listener = gatehouse_listener::Listener::new(listener, gatehouse_listener::Limits::default());
    runtime.spawn(gatehouse_egress::proxy::serve(proxy, listener));
    Harness { proxy_addr, token, other_token, sink, _runtime: runtime }
}

fn curl(h: &Harness, url: &str) -> (Option<i32>, String) {
    curl_as(h, &h.token, url)
}

fn curl_as(h: &Harness, token: &str, url: &str) -> (Option<i32>, String) {
    curl_with(h, token, &[], url)
}

fn curl_with(h: &Harness, token: &str, extra: &[&str], url: &str) -> (Option<i32>, String) {
    let out = Command::new("curl")
        .args(extra)
        .args(["-s", "-D", "-", "--max-time", "10", "-x"])
        .arg(format!("http://grant:{token}@{}", h.proxy_addr))
        .arg(url)
        .output()
        .expect("curl is installed");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_name_is_resolved_once_and_the_checked_answer_is_dialled() {
    let port = upstream("pinned", Duration::ZERO);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    // First answer: the (opened) loopback upstream. Any later answer: a
    // private address the guard refuses. A second resolution would show.
    let resolver = Resolver::Custom(Arc::new(move |_host: &str| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let ip: IpAddr =
            if n.is_multiple_of(2) { "127.0.0.1".parse().unwrap() } else { "10.9.9.9".parse().unwrap() };
        Ok(vec![ip])
    }));
    let h = harness(Limits::default(), resolver);
    let (_, out) = curl(&h, &format!("http://rebind.test:{port}/"));
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("pinned"), "{out}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "exactly one resolution per request");
    // The next request's resolution answers the private address: refused.
    let (_, out) = curl(&h, &format!("http://rebind.test:{port}/"));
    assert!(out.contains("x-gatehouse-reason: address_special_purpose"), "{out}");
}

#[test]
fn names_refused_by_name_are_never_looked_up() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let resolver = Resolver::Custom(Arc::new(move |_host: &str| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(vec!["127.0.0.1".parse().unwrap()])
    }));
    let h = harness(Limits::default(), resolver);
    for (url, reason) in [
        ("http://metadata.google.internal/computeMetadata/v1/", "host_metadata_name"),
        ("http://data-to-carry-out.localhost/", "host_special_use_name"),
        ("http://printer.local/", "host_special_use_name"),
    ] {
        let (_, out) = curl(&h, url);
        assert!(out.contains(&format!("x-gatehouse-reason: {reason}")), "{url}: {out}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no DNS query carries a refused name out");
}

/// A keep-alive upstream on `ip:port` answering `<name> conn <n> req <m>`
/// (its n-th accepted connection, that connection's m-th request); counts
/// connections accepted and connections the client closed.
struct KeepAlive {
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

fn keep_alive_upstream(name: &'static str, listener: TcpListener) -> KeepAlive {
    keep_alive_upstream_idle(name, listener, None)
}

/// As [`keep_alive_upstream`], closing a connection idle for `idle` without a word.
fn keep_alive_upstream_idle(name: &'static str, listener: TcpListener, idle: Option<Duration>) -> KeepAlive {
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (a, c) = (accepted.clone(), closed.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let n = a.fetch_add(1, Ordering::SeqCst) + 1;
            let closed = c.clone();
            std::thread::spawn(move || {
                stream.set_read_timeout(idle).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                for m in 1.. {
                    let mut line = String::new();
                    let mut lines = 0;
                    let (mut head, mut big) = (false, false);
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            closed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        lines += 1;
                        head |= lines == 1 && line.starts_with("HEAD ");
                        big |= lines == 1 && line.contains(" /big ");
                        if line == "\r\n" && lines > 1 {
                            break;
                        }
                    }
                    // `/big` is more than loopback's socket buffers and the proxy's
                    // together hold (a few MiB), so a client that stops reading
                    // leaves the response unfinished however slowly it closes.
                    let body = if big { "x".repeat(64 << 20) } else { format!("{name} conn {n} req {m}") };
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    if !head {
                        let _ = stream.write_all(body.as_bytes());
                    }
                }
            });
        }
    });
    KeepAlive { accepted, closed }
}

fn body_of(out: &str) -> &str {
    out.rsplit("\r\n\r\n").next().unwrap_or("")
}

#[test]
fn idle_upstream_connections_are_reused_within_a_grant_only() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let up = keep_alive_upstream("a", listener);
    let h = harness(Limits::default(), Resolver::Static(Arc::default()));
    let url = format!("http://127.0.0.1:{port}/");
    for m in 1..=3 {
        // A new client connection each time: the reuse is on the upstream side.
        let (_, out) = curl(&h, &url);
        assert_eq!(body_of(&out), format!("a conn 1 req {m}"), "{out}");
    }
    // A response with no body at all (HEAD) hands its connection back too.
    let (code, out) = curl_with(&h, &h.token, &["-I"], &url);
    assert!(code == Some(0) && out.starts_with("HTTP/1.1 200"), "{out}");
    let (_, out) = curl(&h, &url);
    assert_eq!(body_of(&out), "a conn 1 req 5", "{out}");
    // Another run never gets the first run's connection.
    let (_, out) = curl_as(&h, &h.other_token.clone(), &url);
    assert_eq!(body_of(&out), "a conn 2 req 1", "{out}");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn an_idle_connection_the_upstream_closed_is_not_used() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let up = keep_alive_upstream_idle("a", listener, Some(Duration::from_millis(100)));
    let pool = UpstreamPool::default();
    let h = harness_with_pool(Limits::default(), Resolver::Static(Arc::default()), pool.clone());
    let url = format!("http://127.0.0.1:{port}/");
    let (_, out) = curl(&h, &url);
    assert_eq!(body_of(&out), "a conn 1 req 1", "{out}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while up.closed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    // Nothing polls an idle connection, yet its close is noticed: before
    // reuse, or at the latest before the request is written to it.
    assert_eq!(pool.idle_count(), 1, "still pooled, unaware");
    let (code, out) = curl(&h, &url);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(body_of(&out), "a conn 2 req 1", "{out}");
}

#[test]
fn a_pooled_connection_serves_only_a_request_that_vetted_its_address() {
    // Two upstreams on the same port, one per loopback address.
    let (a, b) = loop {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(b) = TcpListener::bind(("127.0.0.2", a.local_addr().unwrap().port())) {
            break (a, b);
        }
    };
    let port = a.local_addr().unwrap().port();
    let (_a, _b) = (keep_alive_upstream("a", a), keep_alive_upstream("b", b));
    let answers = Arc::new(std::sync::Mutex::new(vec!["127.0.0.1", "127.0.0.2", "127.0.0.1"]));
    let resolver = Resolver::Custom(Arc::new(move |_host: &str| {
        let ip = answers.lock().unwrap().remove(0);
        Ok(vec![ip.parse().unwrap()])
    }));
    let h = harness(Limits::default(), resolver);
    let url = format!("http://moving.test:{port}/");
    // The name moves: the idle connection to the old address is not used.
    for expected in ["a conn 1 req 1", "b conn 1 req 1", "a conn 1 req 2"] {
        let (_, out) = curl(&h, &url);
        assert_eq!(body_of(&out), expected, "{out}");
    }
}

#[test]
fn idle_connections_expire_and_closing_upstreams_are_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let up = keep_alive_upstream("a", listener);
    let limits = PoolLimits { idle_timeout: Duration::from_millis(200), ..PoolLimits::default() };
    let pool = UpstreamPool::new(limits);
    let h = harness_with_pool(Limits::default(), Resolver::Static(Arc::default()), pool.clone());
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
    assert_eq!(body_of(&out), "a conn 1 req 1", "{out}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while up.closed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(up.closed.load(Ordering::SeqCst), 1, "the reaper closed the expired connection");
    assert_eq!(pool.idle_count(), 0);
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
    assert_eq!(body_of(&out), "a conn 2 req 1", "{out}");

    // An upstream that closes after each response: every request still succeeds.
    let closing = upstream("closing", Duration::ZERO);
    for _ in 0..3 {
        let (_, out) = curl(&h, &format!("http://127.0.0.1:{closing}/"));
        assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("closing"), "{out}");
    }
}

#[test]
fn a_slow_upstream_times_out() {
    let port = upstream("late", Duration::from_secs(3));
    let limits = Limits { response_timeout: Duration::from_millis(300), ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
    assert!(out.starts_with("HTTP/1.1 502") && out.contains("x-gatehouse-reason: upstream_timeout"), "{out}");
    assert!(h.sink.0.lock().unwrap().iter().any(|r| r.reason.as_str() == "upstream_timeout"));
}

#[test]
fn a_trickling_response_is_cut_off_at_the_request_deadline() {
    let port = answer_each_request(|mut stream| {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n");
        for _ in 0..100 {
            if stream.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let limits = Limits { request_duration: Duration::from_millis(500), ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let started = std::time::Instant::now();
    let (code, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
    assert_ne!(code, Some(0), "{out}");
    assert!(out.starts_with("HTTP/1.1 200") && body_of(&out).len() < 20, "{out}");
    assert!(started.elapsed() < Duration::from_secs(5), "cut off at the deadline, not at curl's own timeout");
}

#[test]
fn response_bodies_are_capped() {
    let body = "0123456789abcdefghijklmnopqrstuvwxyz";
    let limits = Limits { response_bytes: 10, ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    // A declared length over the cap is refused before any of the body moves.
    let declared = upstream(body, Duration::ZERO);
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{declared}/"));
    assert!(
        out.starts_with("HTTP/1.1 502") && out.contains("x-gatehouse-reason: response_too_large"),
        "{out}"
    );
    assert!(h.sink.0.lock().unwrap().iter().any(|r| r.reason.as_str() == "response_too_large"));
    // A body of unknown length is cut off at the cap.
    let undeclared = upstream_framed(body, Duration::ZERO, false);
    let (code, out) = curl(&h, &format!("http://127.0.0.1:{undeclared}/"));
    assert_ne!(code, Some(0), "the client sees a broken transfer, not a complete body: {out}");
    assert!(!out.contains("qrstuvwxyz"), "{out}");
}

#[test]
fn a_response_left_unread_takes_its_upstream_connection_with_it() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let up = keep_alive_upstream("a", listener);
    let pool = UpstreamPool::default();
    let h = harness_with_pool(Limits::default(), Resolver::Static(Arc::default()), pool.clone());
    // curl gives up on the 64 MiB body as soon as it sees its length.
    let (code, out) =
        curl_with(&h, &h.token, &["--max-filesize", "1000"], &format!("http://127.0.0.1:{port}/big"));
    assert_eq!(code, Some(63), "{out}");
    // The rest of that response is still on the wire: the connection is
    // closed, never handed to the next request.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while up.closed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(up.closed.load(Ordering::SeqCst), 1);
    assert_eq!(pool.idle_count(), 0);
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
    assert_eq!(body_of(&out), "a conn 2 req 1", "{out}");
}

#[test]
fn a_closed_port_is_unreachable_not_a_hang() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let h = harness(Limits::default(), Resolver::Static(Arc::default()));
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{closed}/"));
    assert!(
        out.starts_with("HTTP/1.1 502") && out.contains("x-gatehouse-reason: upstream_unreachable"),
        "{out}"
    );
}

#[test]
fn request_bodies_are_capped() {
    let port = upstream("ok", Duration::ZERO);
    let limits = Limits { request_bytes: 16, ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let out = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "--max-time",
            "10",
            "--data-binary",
            "0123456789abcdefghijklmnopqrstuvwxyz",
            "-x",
        ])
        .arg(format!("http://grant:{}@{}", h.token, h.proxy_addr))
        .arg(format!("http://127.0.0.1:{port}/upload"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("x-gatehouse-reason: request_too_large"), "{out}");
}

/// `openssl s_server` with a fresh self-signed certificate, killed on drop.
struct TlsUpstream {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_upstream() -> TlsUpstream {
    let dir = tempfile::tempdir().unwrap();
    // A test CA and a server certificate it signs (a self-signed CA
    // certificate cannot serve as an end-entity certificate in webpki).
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir.path())
            .args(args)
            .output()
            .expect("openssl is installed");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=gatehouse-test-ca", "-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[&["req"][..], &ec, &["-subj", "/CN=127.0.0.1", "-keyout", "key.pem", "-out", "leaf.csr"]].concat(),
    );
    std::fs::write(
        dir.path().join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:good.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "cert.pem",
        "-extfile",
        "ext.cnf",
    ]);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &format!("127.0.0.1:{port}")])
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    TlsUpstream { child, port, _dir: dir }
}

#[test]
fn a_connect_tunnel_carries_real_tls_end_to_end() {
    let upstream = tls_upstream();
    let limits = Limits { connect_ports: vec![443, upstream.port], ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let out = Command::new("curl")
        .args(["-s", "-k", "--max-time", "10", "-x"])
        .arg(format!("http://grant:{}@{}", h.token, h.proxy_addr))
        .arg(format!("https://127.0.0.1:{}/", upstream.port))
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    // s_server -www answers with its TLS session report: the handshake ran
    // between curl and the upstream, through the tunnel.
    assert!(body.contains("Cipher") || body.contains("s_server"), "{body}");
}

/// An upstream that echoes what it reads and counts the bytes.
fn echo_upstream() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = std::io::Read::read(&mut stream, &mut buf) {
                    counter.fetch_add(n, Ordering::SeqCst);
                    if stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// Opens a tunnel to `port`, sending `early` in the same write as the
/// `CONNECT` head; returns the stream after the proxy's `200`.
fn open_tunnel(h: &Harness, port: u16, early: &[u8]) -> std::net::TcpStream {
    open_tunnel_to(h, "127.0.0.1", port, early)
}

/// As [`open_tunnel`], to `host`.
fn open_tunnel_to(h: &Harness, host: &str, port: u16, early: &[u8]) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(&h.proxy_addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = format!(
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        h.token
    )
    .into_bytes();
    head.extend_from_slice(early);
    stream.write_all(&head).unwrap();
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        std::io::Read::read_exact(&mut stream, &mut byte).unwrap();
        response.push(byte[0]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    stream
}

#[test]
fn a_tunnel_passes_bytes_sent_behind_the_connect_head() {
    let (port, _) = echo_upstream();
    let h =
        harness(Limits { connect_ports: vec![port], ..Limits::default() }, Resolver::Static(Arc::default()));
    let mut stream = open_tunnel(&h, port, b"early bytes");
    let mut echoed = [0u8; 11];
    std::io::Read::read_exact(&mut stream, &mut echoed).unwrap();
    assert_eq!(&echoed, b"early bytes");
}

#[test]
fn a_tunnel_closes_when_both_directions_together_reach_the_byte_cap() {
    const CAP: u64 = 100_000;
    let (port, upstream_got) = echo_upstream();
    let limits = Limits { connect_ports: vec![port], tunnel_bytes: CAP, ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let stream = open_tunnel(&h, port, b"");
    // 80 kB up and its echo down would be 160 kB: the cap ends the tunnel.
    let received = send_80_kb_and_read_to_close(stream);
    let up = upstream_got.load(Ordering::SeqCst);
    assert!(received < 80_000, "the tunnel was cut before the whole echo came back: {received}");
    assert!((up + received) as u64 <= CAP, "{up} up + {received} down passed a cap of {CAP}");
}

#[test]
fn a_tunnel_closes_at_its_time_limit() {
    let (port, _) = echo_upstream();
    let limits = Limits {
        connect_ports: vec![port],
        tunnel_duration: Duration::from_millis(300),
        ..Limits::default()
    };
    let h = harness(limits, Resolver::Static(Arc::default()));
    let mut stream = open_tunnel(&h, port, b"");
    let started = std::time::Instant::now();
    // Quiet tunnel: the read returns only when the proxy closes it.
    let n = std::io::Read::read(&mut stream, &mut [0u8; 16]).unwrap_or(0);
    assert_eq!(n, 0);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(5), "{waited:?}");
}

/// Writes 80 kB into a tunnel in 1 kB pieces while reading what comes back
/// until the proxy closes it; returns how much came back.
fn send_80_kb_and_read_to_close(stream: std::net::TcpStream) -> usize {
    let mut writer = stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        for _ in 0..80 {
            if writer.write_all(&[b'x'; 1000]).is_err() {
                break;
            }
        }
    });
    let received = read_to_close(stream).len();
    sending.join().unwrap();
    received
}

/// Everything the proxy sends back on `stream` until it closes.
fn read_to_close(mut stream: std::net::TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut got);
    got
}

#[test]
fn a_tunnel_to_a_name_carries_tls_for_that_name_only() {
    let upstream = tls_upstream();
    let (echo_port, echo_seen) = echo_upstream();
    let loopback: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap()];
    let names = ["a.example", "b.example"].map(|n| (n.to_owned(), loopback.clone()));
    let limits = Limits { connect_ports: vec![upstream.port, echo_port], ..Limits::default() };
    let h = harness(limits, Resolver::Static(Arc::new(names.into_iter().collect())));

    // The name the tunnel was opened to: a real TLS session end to end.
    let out = Command::new("curl")
        .args(["-s", "-k", "--max-time", "10", "-x"])
        .arg(format!("http://grant:{}@{}", h.token, h.proxy_addr))
        .arg(format!("https://a.example:{}/", upstream.port))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));

    // Another virtual host behind the same address, a hello naming none,
    // and plain bytes: closed before a byte reaches the upstream.
    let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];
    for (early, reason) in [
        (gatehouse_test_support::tls_client_hello("b.example"), "tunnel_sni_mismatch"),
        (gatehouse_test_support::tls_client_hello("127.0.0.1"), "tunnel_sni_missing"),
        (b"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n".to_vec(), "tunnel_not_tls"),
    ] {
        let stream = open_tunnel_to(&h, "a.example", echo_port, &early);
        let back = read_to_close(stream);
        if reason == "tunnel_not_tls" {
            assert!(back.is_empty(), "{reason}: {back:?}");
        } else {
            assert_eq!(back, alert, "{reason}: the client is told unrecognized_name");
        }
        let refusals = h.sink.0.lock().unwrap();
        let last = refusals.last().unwrap();
        assert_eq!((last.reason.as_str(), last.host.as_deref()), (reason, Some("a.example")));
        assert_eq!(last.run_id.as_deref(), Some("e"));
    }
    assert_eq!(echo_seen.load(Ordering::SeqCst), 0, "nothing reached the upstream");

    // A hello that arrives in pieces is read whole, then passed on whole.
    let hello = gatehouse_test_support::tls_client_hello("a.example");
    let mut stream = open_tunnel_to(&h, "a.example", echo_port, &hello[..10]);
    std::thread::sleep(Duration::from_millis(50));
    stream.write_all(&hello[10..]).unwrap();
    let mut echoed = vec![0u8; hello.len()];
    std::io::Read::read_exact(&mut stream, &mut echoed).unwrap();
    assert_eq!(echoed, hello);
}

#[test]
fn a_tunnel_to_an_address_may_not_name_a_host() {
    let (port, seen) = echo_upstream();
    let h =
        harness(Limits { connect_ports: vec![port], ..Limits::default() }, Resolver::Static(Arc::default()));
    let back = read_to_close(open_tunnel(&h, port, &gatehouse_test_support::tls_client_hello("b.example")));
    assert_eq!(back, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70]);
    assert_eq!(h.sink.0.lock().unwrap().last().unwrap().reason.as_str(), "tunnel_sni_mismatch");
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    // Without SNI (as clients connect to an address) the hello goes through.
    let hello = gatehouse_test_support::tls_client_hello("127.0.0.1");
    let mut stream = open_tunnel(&h, port, &hello);
    let mut echoed = vec![0u8; hello.len()];
    std::io::Read::read_exact(&mut stream, &mut echoed).unwrap();
    assert_eq!(echoed, hello);
}

#[test]
fn a_server_first_protocol_through_an_address_tunnel_is_not_held_up() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"SSH-2.0-test\r\n");
            std::thread::sleep(Duration::from_secs(2));
        }
    });
    let h =
        harness(Limits { connect_ports: vec![port], ..Limits::default() }, Resolver::Static(Arc::default()));
    let mut stream = open_tunnel(&h, port, b"");
    let mut banner = [0u8; 14];
    std::io::Read::read_exact(&mut stream, &mut banner).unwrap();
    assert_eq!(&banner, b"SSH-2.0-test\r\n");
}

#[test]
fn a_tunnel_closes_when_its_grant_has_paid_its_egress_budget() {
    const BUDGET: u64 = 50_000;
    let (port, upstream_got) = echo_upstream();
    // The tunnel's own cap is far away: the grant's budget is what ends it.
    let h = harness_with_egress_budget(Limits { connect_ports: vec![port], ..Limits::default() }, BUDGET);
    let mut stream = open_tunnel(&h, port, b"");
    // Paid for both ways: 1000 up, 1000 back.
    stream.write_all(&[b'x'; 1000]).unwrap();
    std::io::Read::read_exact(&mut stream, &mut [0u8; 1000]).unwrap();
    // A chunk that would pass the budget is refused whole.
    let received = 1000 + send_80_kb_and_read_to_close(stream);
    let up = upstream_got.load(Ordering::SeqCst);
    assert!((up + received) as u64 <= BUDGET, "{up} up + {received} down passed a budget of {BUDGET}");
    // The record is written as the tunnel task ends, just after the close.
    for _ in 0..100 {
        if !h.sink.0.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let refusals = h.sink.0.lock().unwrap();
    let last = refusals.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.reason.as_str()),
        ("budget_exhausted", "budget_egress_bytes_exhausted")
    );
    assert_eq!(last.run_id.as_deref(), Some("e"));
}

#[test]
fn forwarded_bodies_are_paid_from_the_egress_budget() {
    // A declared body larger than what is left: refused before it moves.
    let declared = upstream("0123456789", Duration::ZERO);
    let h = harness_with_egress_budget(Limits::default(), 25);
    for expected in ["200", "200", "403"] {
        let (code, out) = curl(&h, &format!("http://127.0.0.1:{declared}/"));
        assert_eq!(code, Some(0), "curl failed: {out}");
        assert!(out.starts_with(&format!("HTTP/1.1 {expected}")), "{out}");
    }
    let (_, out) = curl(&h, &format!("http://127.0.0.1:{declared}/"));
    assert!(out.contains("x-gatehouse-reason: budget_egress_bytes_exhausted"), "{out}");

    // A body without a length is paid as it flows and cut where it runs out.
    let chunked = answer_each_request(|mut stream| {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        for _ in 0..5 {
            let _ = stream.write_all(b"a\r\n0123456789\r\n");
            let _ = stream.flush();
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = stream.write_all(b"0\r\n\r\n");
    });
    let h = harness_with_egress_budget(Limits::default(), 35);
    let (code, out) = curl(&h, &format!("http://127.0.0.1:{chunked}/"));
    assert_ne!(code, Some(0), "the body was cut short, and curl says so: {out}");
    let body = body_of(&out);
    assert_eq!(body, "0123456789".repeat(3), "three chunks were paid for, the fourth never left");
    let refusals = h.sink.0.lock().unwrap();
    assert_eq!(refusals.last().unwrap().reason.as_str(), "budget_egress_bytes_exhausted");

    // Uploads too: a declared request body over the budget never leaves.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let sink = answer_each_request(move |mut stream| {
        counter.fetch_add(1, Ordering::SeqCst);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    });
    let h = harness_with_egress_budget(Limits::default(), 100);
    let (_, out) =
        curl_with(&h, &h.token, &["--data-binary", &"x".repeat(101)], &format!("http://127.0.0.1:{sink}/"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the upstream never saw the request");
}

#[test]
fn connect_to_port_80_is_off_by_default() {
    assert_eq!(Limits::default().connect_ports, [443]);
}

// ---- The fetch client -------------------------------------------------------

use gatehouse_egress::Purpose;
use gatehouse_egress::connect::tls_config;
use gatehouse_egress::fetch::{FetchRequest, Fetcher};
use gatehouse_egress::{Policy, PolicyError};

/// An upstream that routes by path: redirects of every kind, a big body.
fn routing_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, location, body) = match path.as_str() {
                    "/same" => ("302 Found", Some("/final".to_owned()), String::new()),
                    "/cross" => ("302 Found", Some(format!("http://127.0.0.2:{port}/final")), String::new()),
                    "/loop" => ("307 Temporary Redirect", Some("/loop".to_owned()), String::new()),
                    // A chain of n redirects, then the answer.
                    chain if chain.starts_with("/chain/") && chain != "/chain/0" => {
                        let n: u32 = chain["/chain/".len()..].parse().unwrap_or(0);
                        ("302 Found", Some(format!("/chain/{}", n.saturating_sub(1))), String::new())
                    }
                    "/chain/0" => ("200 OK", None, "end of the chain".to_owned()),
                    "/final" => (
                        "200 OK",
                        None,
                        format!("final via {}", request_line.split_whitespace().next().unwrap_or("")),
                    ),
                    "/big" => ("200 OK", None, "x".repeat(4096)),
                    _ => ("404 Not Found", None, String::new()),
                };
                let location = location.map(|l| format!("location: {l}\r\n")).unwrap_or_default();
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\n{location}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn fetcher(limits: Limits, extra_roots: &[rustls::pki_types::CertificateDer<'static>]) -> Fetcher {
    Fetcher::new(
        AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]),
        Resolver::Static(Arc::default()),
        limits,
        tls_config(extra_roots).unwrap(),
    )
}

fn get(url: &str, purpose: Purpose) -> FetchRequest {
    FetchRequest {
        method: http::Method::POST,
        url: url.into(),
        headers: http::HeaderMap::new(),
        body: "payload".into(),
        purpose,
        scrub: Default::default(),
        last_check: None,
    }
}

const OPEN: Result<&Policy, &PolicyError> = Ok(&Policy::open_const());

#[tokio::test]
async fn same_origin_redirects_are_followed_and_others_refused() {
    let port = routing_upstream();
    let f = fetcher(Limits::default(), &[]);
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/same"), Purpose::Request)).await.unwrap();
    assert_eq!((r.status.as_u16(), r.redirects), (200, 1));
    assert_eq!(r.body, "final via GET", "a 302 continues as GET");

    let r =
        f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/cross"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::RedirectCrossOrigin);
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/loop"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::RedirectLimit);
    // Exactly three: a chain of three is followed to its end, one of four is not.
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/chain/3"), Purpose::Request)).await.unwrap();
    assert_eq!((r.status.as_u16(), r.redirects, &r.body[..]), (200, 3, &b"end of the chain"[..]));
    let r =
        f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/chain/4"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::RedirectLimit);

    // Webhook deliveries follow nothing: the redirect is the answer.
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/same"), Purpose::Webhook)).await.unwrap();
    assert_eq!((r.status.as_u16(), r.redirects), (302, 0));
}

#[tokio::test]
async fn every_redirect_hop_is_decided_again() {
    // The same origin by name, but the name moves into a private range
    // between the first hop and the second.
    let port = routing_upstream();
    let answers = Arc::new(std::sync::Mutex::new(vec!["127.0.0.1", "10.0.0.1"]));
    let resolver = Resolver::Custom(Arc::new(move |_host: &str| {
        let ip = answers.lock().unwrap().remove(0);
        Ok(vec![ip.parse().unwrap()])
    }));
    let f = Fetcher::new(
        AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]),
        resolver,
        Limits::default(),
        tls_config(&[]).unwrap(),
    );
    let r =
        f.fetch(OPEN, get(&format!("http://moving.test:{port}/same"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::AddressSpecialPurpose);
    assert_eq!(r.host.as_deref(), Some("moving.test"));
}

#[tokio::test]
async fn a_connect_that_hangs_times_out() {
    // A listener that never accepts, with its accept queue full: Linux drops
    // further SYNs, so a connect hangs as it would towards a black hole.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let _fillers: Vec<_> = (0..4)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    let limits = Limits {
        connect_timeout: Duration::from_millis(300),
        response_timeout: Duration::from_secs(20),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let r = fetcher(limits, &[])
        .fetch(OPEN, get(&format!("http://127.0.0.1:{}/", addr.port()), Purpose::Request))
        .await
        .unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::UpstreamTimeout);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn fetch_applies_the_guard_caps_and_timeouts() {
    let port = routing_upstream();
    let r = fetcher(Limits::default(), &[])
        .fetch(OPEN, get("http://169.254.169.254/latest/", Purpose::Request))
        .await;
    assert_eq!(r.unwrap_err().reason, gatehouse_core::Reason::AddressMetadata);
    let f = fetcher(Limits { response_bytes: 1024, request_bytes: 4, ..Limits::default() }, &[]);
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{port}/big"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::RequestTooLarge, "the 7-byte body exceeds the 4-byte cap");
    let small = FetchRequest {
        body: bytes::Bytes::new(),
        ..get(&format!("http://127.0.0.1:{port}/big"), Purpose::Request)
    };
    assert_eq!(f.fetch(OPEN, small).await.unwrap_err().reason, gatehouse_core::Reason::ResponseTooLarge);

    let slow = upstream("late", Duration::from_secs(3));
    let f = fetcher(Limits { response_timeout: Duration::from_millis(300), ..Limits::default() }, &[]);
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{slow}/"), Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::UpstreamTimeout);
}

#[tokio::test]
async fn https_verifies_the_certificate_against_the_roots() {
    let upstream = tls_upstream();
    let url = format!("https://127.0.0.1:{}/", upstream.port);
    // Not trusted: refused, nothing sent in clear.
    let r = fetcher(Limits::default(), &[]).fetch(OPEN, get(&url, Purpose::Request)).await.unwrap_err();
    assert_eq!(r.reason, gatehouse_core::Reason::TlsFailed);
    // Trusted as an operator-added root: the exchange happens over TLS.
    let cert = {
        use rustls::pki_types::pem::PemObject as _;
        rustls::pki_types::CertificateDer::from_pem_file(upstream._dir.path().join("ca.pem")).unwrap()
    };
    // (s_server -www answers GET only.)
    let req =
        FetchRequest { method: http::Method::GET, body: bytes::Bytes::new(), ..get(&url, Purpose::Request) };
    let r = fetcher(Limits::default(), std::slice::from_ref(&cert)).fetch(OPEN, req.clone()).await.unwrap();
    assert_eq!(r.status.as_u16(), 200);
    assert!(String::from_utf8_lossy(&r.body).contains("Cipher"), "{:?}", r.body);

    // By name: the certificate must name the host asked for, not merely
    // come from a trusted root and sit at the vetted address.
    let loopback = vec!["127.0.0.1".parse().unwrap()];
    let names = [("good.test".to_owned(), loopback.clone()), ("other.test".to_owned(), loopback)];
    let by_name = Fetcher::new(
        AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]),
        Resolver::Static(Arc::new(names.into_iter().collect())),
        Limits::default(),
        tls_config(&[cert]).unwrap(),
    );
    let at = |host: &str| FetchRequest { url: format!("https://{host}:{}/", upstream.port), ..req.clone() };
    assert_eq!(by_name.fetch(OPEN, at("good.test")).await.unwrap().status.as_u16(), 200);
    let r = by_name.fetch(OPEN, at("other.test")).await.unwrap_err();
    assert_eq!((r.reason, r.host.as_deref()), (gatehouse_core::Reason::TlsFailed, Some("other.test")));
}

/// Sends `head` to the proxy as it is; returns the status line and the
/// refusal reason header of the answer.
fn raw_exchange(h: &Harness, head: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(&h.proxy_addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let (mut status, mut reason, mut line) = (String::new(), String::new(), String::new());
    reader.read_line(&mut status).unwrap();
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("x-gatehouse-reason:") {
            reason = v.trim().to_owned();
        }
        line.clear();
    }
    (status.trim().to_owned(), reason)
}

#[test]
fn only_the_authority_form_is_a_connect_target() {
    let (port, _) = echo_upstream();
    let h =
        harness(Limits { connect_ports: vec![port], ..Limits::default() }, Resolver::Static(Arc::default()));
    for target in [
        format!("http://127.0.0.1:{port}/path"),
        format!("ftp://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}"),
        "/just/a/path".to_owned(),
    ] {
        let head = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
            h.token
        );
        let (status, reason) = raw_exchange(&h, &head);
        assert!(status.starts_with("HTTP/1.1 400"), "{target}: {status}");
        assert_eq!(reason, "connect_target_invalid", "{target}");
    }
    assert!(h.sink.0.lock().unwrap().iter().any(|r| r.reason.as_str() == "connect_target_invalid"));
    // The authority form itself still opens a tunnel.
    let mut stream = open_tunnel(&h, port, b"ok?");
    let mut echoed = [0u8; 3];
    std::io::Read::read_exact(&mut stream, &mut echoed).unwrap();
    assert_eq!(&echoed, b"ok?");
}

#[test]
fn two_proxy_credentials_are_refused_whichever_is_valid() {
    let port = upstream("hello", Duration::ZERO);
    let h = harness(Limits::default(), Resolver::Static(Arc::default()));
    for (first, second) in [(&h.token, &h.other_token), (&h.token, &"ceg1.bogus".to_owned())] {
        for order in [[first, second], [second, first]] {
            let head = format!(
                "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                 Proxy-Authorization: Bearer {}\r\nProxy-Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
                order[0], order[1]
            );
            let (status, reason) = raw_exchange(&h, &head);
            assert!(status.starts_with("HTTP/1.1 407"), "{status}");
            assert_eq!(reason, "credentials_ambiguous");
        }
    }
}

#[test]
fn an_upstream_answer_with_ambiguous_framing_is_a_502_never_passed_on() {
    let h = harness(Limits::default(), Resolver::Static(Arc::default()));
    for framing in [
        "content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "content-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
    ] {
        let port = answer_each_request(move |mut stream| {
            let _ = write!(stream, "HTTP/1.1 200 OK\r\n{framing}");
        });
        let (code, out) = curl(&h, &format!("http://127.0.0.1:{port}/"));
        assert_eq!(code, Some(0), "curl failed: {out}");
        assert!(out.starts_with("HTTP/1.1 502"), "{framing:?}: {out}");
        assert!(out.contains("x-gatehouse-reason: upstream_bad_response"), "{out}");
    }
    let refusals = h.sink.0.lock().unwrap();
    assert!(refusals.iter().filter(|r| r.reason.as_str() == "upstream_bad_response").count() >= 1);
}

#[tokio::test]
async fn fetch_decodes_compressed_bodies_and_caps_what_they_decode_to() {
    use std::io::Write as _;
    let gzip = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let serve = |body: Vec<u8>| {
        let body = Arc::new(body);
        answer_each_request(move |mut stream| {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        })
    };
    let f = fetcher(Limits { response_bytes: 128 << 10, ..Limits::default() }, &[]);
    let small = serve(gzip(b"hello, compressed"));
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{small}/"), Purpose::Request)).await.unwrap();
    assert_eq!(&r.body[..], b"hello, compressed");
    assert!(!r.headers.contains_key(http::header::CONTENT_ENCODING), "the caller gets decoded bytes");
    // 2 MiB of zeros in a few kilobytes: well under the cap on the wire.
    let bomb = serve(gzip(&vec![0u8; 2 << 20]));
    let r = f.fetch(OPEN, get(&format!("http://127.0.0.1:{bomb}/"), Purpose::Request)).await;
    assert_eq!(r.unwrap_err().reason, gatehouse_core::Reason::ResponseTooLarge);
}
