//! A hostile upstream tries to hand a lease's secret back to the run, at
//! every door the run has (the plain proxy, `/v1/egress/fetch`,
//! `/v1/egress/fetch/raw`): compressed echoes, a header echoed cut to a
//! window the run slides a byte at a time, the secret in the reason phrase
//! and in a header's name. And the run tries to place the placeholder where
//! an echo could be cut, and to send the secret over plain HTTP.

use std::io::{BufReader, Write as _};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::proxy::{api, start_logging};
use crate::support::TOKEN;

const SECRET: &str = "ghp_Q7x2Lm9Vt4Rk8Wz3Np6Yb1Hc5Jd0Fs";
/// What a hostile body carries so the test can tell it got through.
const MARKER: &str = "hostile-body-marker";

/// An upstream that answers each path with one way of echoing the request's
/// `authorization` value back.
struct Hostile {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    /// The length of each request body read whole.
    bodies: Arc<Mutex<Vec<usize>>>,
}

impl Hostile {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let whole = bodies.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, whole) = (log.clone(), whole.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let head = crate::leases::read_head(&mut reader);
                    log.lock().unwrap().push(head.clone());
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|n| n.trim().parse::<usize>().ok());
                    if let Some(length) = length {
                        let mut body = vec![0; length];
                        if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
                            return;
                        }
                        whole.lock().unwrap().push(length);
                    }
                    let mut stream = stream;
                    let _ = stream.write_all(&Self::answer(&head));
                });
            }
        });
        Self { port, seen, bodies }
    }

    /// The answer to a request with this head.
    fn answer(head: &str) -> Vec<u8> {
        let path = head.split(' ').nth(1).unwrap_or("/");
        let auth = head.lines().find_map(|l| l.strip_prefix("authorization: ")).unwrap_or("none");
        let plain = |extra: &str, body: &str| {
            format!(
                "HTTP/1.1 200 OK\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        };
        let answer = match path.trim_start_matches('/').split('/').collect::<Vec<_>>().as_slice() {
            // `authorization` cut to [from, from + len), in a header and the body.
            ["window", from, len] => {
                let (from, len): (usize, usize) = (from.parse().unwrap(), len.parse().unwrap());
                let window = auth.get(from..(from + len).min(auth.len())).unwrap_or("");
                plain(&format!("x-window: {window}\r\n"), &format!("window={window}"))
            }
            ["reason"] => {
                let name = auth.rsplit(' ').next().unwrap_or("x").to_ascii_lowercase();
                let body = "denied";
                format!(
                    "HTTP/1.1 401 bad token {auth}\r\n{name}: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            }
            ["content-coding"] => format!(
                "HTTP/1.1 200 OK\r\ncontent-encoding: identity\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{MARKER}",
                MARKER.len()
            ),
            ["transfer-coding"] => format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n{:x}\r\n{MARKER}\r\n0\r\n\r\n",
                MARKER.len()
            ),
            _ => plain("", "ok"),
        };
        answer.into_bytes()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn last(&self) -> String {
        self.seen.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

/// Whether `text` holds any 8 consecutive bytes of the secret.
fn holds_a_window(text: &str) -> bool {
    SECRET.as_bytes().windows(8).any(|w| text.as_bytes().windows(8).any(|t| t == w))
}

/// The three doors, each answering as the run would see it: the status
/// line, headers and body as text (the fetch API's JSON answer as it is).
struct Doors<'a> {
    api: &'a str,
    /// Every answer any door gave the run, for the sweep at the end.
    seen: std::cell::RefCell<String>,
    proxy: String,
    grant: String,
    /// The interception CA the run was given, for its trust store.
    ca_pem: String,
}

impl Doors<'_> {
    /// `out`, kept for the sweep.
    fn saw(&self, out: String) -> String {
        self.seen.borrow_mut().push_str(&out);
        out
    }

    fn proxy(&self, url: &str, headers: &[String]) -> String {
        let mut command = Command::new("curl");
        command.args(["-s", "-S", "--max-time", "10", "-D", "-", "-x", &self.proxy]);
        for header in headers {
            command.args(["-H", header]);
        }
        self.saw(String::from_utf8_lossy(&command.arg(url).output().unwrap().stdout).into_owned())
    }

    fn fetch(&self, url: &str, headers: &[String]) -> String {
        let pairs: Vec<Value> = headers
            .iter()
            .map(|h| {
                let (name, value) = h.split_once(": ").unwrap();
                json!([name, value])
            })
            .collect();
        let answer = api(
            self.api,
            "POST",
            "/v1/egress/fetch",
            &json!({"grant": self.grant, "url": url, "purpose": "git_provider", "headers": pairs}),
        );
        let body = answer["body_base64"]
            .as_str()
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
            .unwrap_or_default();
        self.saw(format!("{answer}\n{}", String::from_utf8_lossy(&body)))
    }

    fn raw(&self, url: &str, headers: &[String]) -> String {
        let mut command = Command::new("curl");
        command.args(["-s", "-S", "--max-time", "10", "-D", "-", "-X", "POST"]);
        command.args(["-H", &format!("authorization: Bearer {TOKEN}")]);
        command.args(["-H", &format!("x-gatehouse-grant: {}", self.grant)]);
        for header in headers {
            command.args(["-H", &format!("x-gatehouse-header: {header}")]);
        }
        let query =
            format!("url={}&purpose=git_provider&method=GET", url.replace(':', "%3A").replace('/', "%2F"));
        let api = self.api;
        let out = command.arg(format!("http://{api}/v1/egress/fetch/raw?{query}")).output().unwrap();
        self.saw(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn all(&self, url: &str, headers: &[String]) -> [(&'static str, String); 3] {
        [
            ("proxy", self.proxy(url, headers)),
            ("fetch", self.fetch(url, headers)),
            ("raw", self.raw(url, headers)),
        ]
    }
}

fn credential(api_addr: &str, name: &str, allow_plain_http: bool) -> String {
    let created = api(
        api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": name, "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"},
            "allow_plain_http": allow_plain_http, "secret": SECRET}),
    );
    assert_eq!(created["allow_plain_http"], allow_plain_http, "{created}");
    created["credential_id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
}

/// A run holding a lease on `credential_id`: its doors and its placeholder.
fn run_with_lease<'a>(
    api_addr: &'a str,
    proxy_addr: &str,
    credential_id: &str,
    host: &str,
) -> (Doors<'a>, String) {
    let run = api(
        api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "print(1)"},
            "input_files": [], "read_sessions": [], "budgets": {"max_requests": 1000, "max_egress_bytes": 10_000_000}}),
    );
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}"));
    let grant = run["grant"].as_str().unwrap().to_owned();
    let lease = api(
        api_addr,
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        &json!({"credential_id": credential_id, "purpose": "git_provider", "host": host}),
    );
    let placeholder = lease["placeholder"].as_str().unwrap_or_else(|| panic!("{lease}")).to_owned();
    let proxy = format!("http://grant:{grant}@{proxy_addr}");
    let ca_pem = run["ca_certificate_pem"].as_str().unwrap_or_default().to_owned();
    (Doors { api: api_addr, seen: Default::default(), proxy, grant, ca_pem }, placeholder)
}

/// The canary sweep of a node the hostile upstream worked on: the run's
/// refusals carry every reason in `reasons`, and neither the secret nor any
/// 8 of its bytes is in what the run saw, in an API listing of the record
/// (refusals, audit, leases), the metrics, any log line, or any file under
/// the node's directory (its database, write-ahead log, files).
fn sweep(
    server: crate::cli::Server,
    log: std::thread::JoinHandle<String>,
    dir: &std::path::Path,
    api_addr: &str,
    seen: &str,
    reasons: &[&str],
) {
    let get = |path: &str| api(api_addr, "GET", path, &Value::Null).to_string();
    let mut record = String::new();
    for reason in reasons {
        let refusals = api(api_addr, "GET", &format!("/v1/refusals?reason={reason}"), &Value::Null);
        assert!(refusals["items"].as_array().is_some_and(|i| !i.is_empty()), "{reason} recorded: {refusals}");
        record.push_str(&refusals.to_string());
    }
    for path in
        ["/v1/refusals?limit=500", "/v1/audit", "/v1/leases?tenant_id=t1", "/v1/tenants/t1/credentials"]
    {
        record.push_str(&get(path));
    }
    let metrics = crate::cli::http(api_addr, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    drop(server);
    let logs = log.join().unwrap();
    assert!(!logs.is_empty(), "the node logged nothing");
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    assert!(
        files.iter().any(|(name, _)| name.contains("gatehouse.db")),
        "no database under {}",
        dir.display()
    );
    let mut places: Vec<(String, Vec<u8>)> = vec![
        ("what the run saw".into(), seen.as_bytes().to_vec()),
        ("the record as the API lists it".into(), record.into_bytes()),
        ("metrics".into(), metrics.into_bytes()),
        ("logs".into(), logs.into_bytes()),
    ];
    places.extend(files);
    for (what, bytes) in &places {
        assert!(
            !SECRET.as_bytes().windows(8).any(|w| bytes.windows(8).any(|b| b == w)),
            "{what} holds 8 bytes of the secret"
        );
        gatehouse_test_support::assert_no_key_material(SECRET.as_bytes(), bytes, what);
    }
}

#[test]
fn no_echo_hands_the_secret_back_at_any_door() {
    let upstream = Hostile::start();
    let tmp = tempfile::tempdir().unwrap();
    let (server, api_addr, proxy_addr, log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let credential_id = credential(&api_addr, "echoed", true);
    let (doors, placeholder) = run_with_lease(&api_addr, &proxy_addr, &credential_id, "127.0.0.1");
    let bearer = vec![format!("authorization: Bearer {placeholder}")];
    let at = |path: &str| format!("http://127.0.0.1:{}/{path}", upstream.port);

    // The whole value echoed comes back as the placeholder.
    for (door, out) in doors.all(&at("window/0/200"), &bearer) {
        assert!(upstream.last().contains(&format!("authorization: Bearer {SECRET}")), "{door}");
        assert!(out.contains(&placeholder) && !holds_a_window(&out), "{door}: {out}");
    }
    // The echo cut to a window the run slides a byte at a time: no eight
    // consecutive bytes of the secret ever come back.
    for from in 0..=SECRET.len() {
        for len in [8, 9, 31] {
            for (door, out) in doors.all(&at(&format!("window/{}/{len}", 7 + from)), &bearer) {
                assert!(!holds_a_window(&out), "{door} window {from}+{len}: {out}");
            }
        }
    }
    // The reason phrase and a header named after the token.
    for (door, out) in doors.all(&at("reason"), &bearer) {
        assert!(!holds_a_window(&out) && !holds_a_window(&out.to_ascii_lowercase()), "{door}: {out}");
    }
    // Compressed answers: refused, nothing of the body passed on.
    for (path, doors_refusing) in
        [("content-coding", ["proxy", "fetch", "raw"]), ("transfer-coding", ["proxy", "fetch", "raw"])]
    {
        for (door, out) in doors.all(&at(path), &bearer) {
            assert!(doors_refusing.contains(&door));
            assert!(out.contains("content_encoding_invalid"), "{door} {path}: {out}");
            assert!(!out.contains(MARKER), "{door} {path}: {out}");
        }
    }

    // A placeholder anywhere but where the rule puts it: refused, nothing sent.
    let sent = upstream.count();
    for headers in [
        vec![format!("authorization: Bearer {placeholder}"), format!("x-debug: {placeholder}")],
        vec![format!("authorization: Bearer {placeholder}xxxx")],
        vec![format!("x-api-key: {placeholder}")],
        vec![format!("cookie: s={placeholder}")],
    ] {
        for (door, out) in doors.all(&at("window/0/200"), &headers) {
            assert!(out.contains("lease_placeholder_misplaced"), "{door} {headers:?}: {out}");
        }
    }
    assert_eq!(upstream.count(), sent, "nothing went out for a misplaced placeholder");

    // In a body: the fetch API's body in hand is refused before anything
    // moves; a streamed one (proxy, raw) is cut off before the placeholder
    // does, so the upstream never gets the request whole.
    let mut body = vec![b'x'; 1 << 20];
    body.splice(700_000..700_000, placeholder.bytes());
    let body_file = tmp.path().join("body");
    std::fs::write(&body_file, &body).unwrap();
    let data = format!("@{}", body_file.display());
    let proxied = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-", "-x", &doors.proxy, "-H", &bearer[0]])
        .args(["-H", "expect:", "--data-binary", &data, &at("window/0/200")])
        .output()
        .unwrap();
    let proxied = String::from_utf8_lossy(&proxied.stdout).into_owned();
    assert!(proxied.contains("lease_placeholder_misplaced"), "{proxied}");
    let fetched = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": doors.grant, "url": at("window/0/200"), "method": "POST", "purpose": "git_provider",
            "headers": [["authorization", format!("Bearer {placeholder}")]],
            "body_base64": base64::engine::general_purpose::STANDARD.encode(&body[690_000..710_000])}),
    );
    assert_eq!(fetched["error"]["reason"], "lease_placeholder_misplaced", "{fetched}");
    let raw = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-D", "-", "-X", "POST", "-H", "expect:"])
        .args(["-H", &format!("authorization: Bearer {TOKEN}")])
        .args(["-H", &format!("x-gatehouse-grant: {}", doors.grant)])
        .args(["-H", &format!("x-gatehouse-header: authorization: Bearer {placeholder}")])
        .args(["--data-binary", &data])
        .arg(format!(
            "http://{api_addr}/v1/egress/fetch/raw?url={}&purpose=git_provider&method=POST",
            at("window/0/200").replace(':', "%3A").replace('/', "%2F")
        ))
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout).into_owned();
    assert!(raw.contains("lease_placeholder_misplaced"), "{raw}");
    assert!(upstream.bodies.lock().unwrap().is_empty(), "no body went out whole");
    let sent = upstream.count();
    let mut seen = format!("{}{proxied}{fetched}{raw}", doors.seen.take());

    // A credential that does not allow plain HTTP is injected over TLS only.
    let tls_only = credential(&api_addr, "tls-only", false);
    let (doors, placeholder) = run_with_lease(&api_addr, &proxy_addr, &tls_only, "127.0.0.1");
    for headers in [vec![format!("authorization: Bearer {placeholder}")], vec![]] {
        for (door, out) in doors.all(&at("window/0/200"), &headers) {
            assert!(out.contains("lease_plain_http"), "{door}: {out}");
        }
    }
    assert_eq!(upstream.count(), sent, "nothing went out in clear");
    seen.push_str(&doors.seen.take());
    let reasons = ["content_encoding_invalid", "lease_placeholder_misplaced", "lease_plain_http"];
    sweep(server, log, tmp.path(), &api_addr, &seen, &reasons);
}

/// Where a node keeps its state, for tests that write it behind its back.
enum Backend {
    Sqlite(std::path::PathBuf),
    Postgres(gatehouse_test_support::TestDatabase),
}

impl Backend {
    /// Runs `sql` on the node's store, behind its back; it must change rows.
    fn edit(&self, sql: &str) {
        assert!(self.execute(sql) > 0, "{sql}");
    }

    /// Runs `sql`; how many rows it changed.
    fn execute(&self, sql: &str) -> u64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            use sqlx::Connection as _;
            match self {
                Backend::Sqlite(dir) => {
                    let url = format!("sqlite://{}", dir.join("gatehouse-data/gatehouse.db").display());
                    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
                    sqlx::query(sql).execute(&mut db).await.unwrap().rows_affected()
                }
                Backend::Postgres(database) => {
                    let mut db = sqlx::PgConnection::connect(database.url()).await.unwrap();
                    sqlx::query(sql).execute(&mut db).await.unwrap().rows_affected()
                }
            }
        })
    }
}

#[test]
fn a_store_row_edited_to_steer_a_secret_gets_nothing_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, api_addr, proxy_addr, log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let seen = steering_gets_nothing(&Backend::Sqlite(tmp.path().to_owned()), &api_addr, &proxy_addr);
    sweep(server, log, tmp.path(), &api_addr, &seen, &["lease_unavailable"]);
}

#[test]
fn a_store_row_edited_to_steer_a_secret_gets_nothing_on_postgres() {
    let db = gatehouse_test_support::TestDatabase::create();
    let tmp = tempfile::tempdir().unwrap();
    let node = crate::leases_cluster::start_node(
        tmp.path(),
        &crate::support::private_key_pem(),
        &[("GATEHOUSE_DATABASE_URL", db.url())],
    );
    let (api_addr, proxy_addr) = (node.api.clone(), node.proxy.clone());
    steering_gets_nothing(&Backend::Postgres(db), &api_addr, &proxy_addr);
}

/// A lease row, then a credential's host, then its rule, edited in the
/// store to steer the secret: each is refused and counted as tampering.
/// What the run saw, for the sweep.
fn steering_gets_nothing(store: &Backend, api_addr: &str, proxy_addr: &str) -> String {
    let upstream = Hostile::start();
    let credential_id = credential(api_addr, "steered", true);
    let at = |host: &str| format!("http://{host}:{}/window/0/200", upstream.port);
    let tampering = || {
        let metrics =
            crate::cli::http(api_addr, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("gatehouse_credential_tampering_total "))
            .unwrap_or_else(|| panic!("{metrics}"))
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(tampering(), 0);

    // A lease row pointed at another host: its credential's sealed host disagrees.
    let mut seen = String::new();
    let (doors, placeholder) = run_with_lease(api_addr, proxy_addr, &credential_id, "127.0.0.1");
    store.edit("UPDATE leases SET host = '127.0.0.2' WHERE credential_id IN (SELECT credential_id FROM credentials WHERE name = 'steered')");
    let bearer = vec![format!("authorization: Bearer {placeholder}")];
    for headers in [bearer.clone(), vec![]] {
        for (door, out) in doors.all(&at("127.0.0.2"), &headers) {
            assert!(out.contains("lease_unavailable"), "{door}: {out}");
        }
    }
    assert_eq!(upstream.count(), 0, "nothing reached the steered host");
    assert!(tampering() > 0);

    // The credential row pointed there too: the sealed secret no longer opens.
    seen.push_str(&doors.seen.take());
    store.edit("UPDATE credentials SET host = '127.0.0.2' WHERE name = 'steered'");
    let (doors, placeholder) = run_with_lease(api_addr, proxy_addr, &credential_id, "127.0.0.2");
    let before = tampering();
    for (door, out) in doors.all(&at("127.0.0.2"), &[format!("authorization: Bearer {placeholder}")]) {
        assert!(out.contains("lease_unavailable"), "{door}: {out}");
    }
    seen.push_str(&doors.seen.take());
    // Or its inject rule rewritten to put the secret in a header the upstream echoes.
    store.edit("UPDATE credentials SET host = '127.0.0.1', inject = '{\"header\":\"x-echo-me\",\"format\":\"{secret}\",\"allow_plain_http\":true}' WHERE name = 'steered'");
    let (doors, _) = run_with_lease(api_addr, proxy_addr, &credential_id, "127.0.0.1");
    for (door, out) in doors.all(&at("127.0.0.1"), &[]) {
        assert!(out.contains("lease_unavailable"), "{door}: {out}");
    }
    assert_eq!(upstream.count(), 0, "nothing went out with a steered secret");
    assert!(tampering() > before);
    seen.push_str(&doors.seen.take());
    seen
}

/// A leak whose revocation the store cannot record at once is refused all
/// the same: the lease is held revoked on the node and the run's grant is
/// revoked in the ledger; once the store takes writes again the revocation
/// is recorded.
#[test]
fn a_leaks_revocation_holds_while_the_store_cannot_record_it() {
    let upstream = Hostile::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, proxy_addr, _log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let credential_id = credential(&api_addr, "leaky", true);
    let (doors, placeholder) = run_with_lease(&api_addr, &proxy_addr, &credential_id, "127.0.0.1");
    let bearer = vec![format!("authorization: Bearer {placeholder}")];
    let at = |host: &str| format!("http://{host}:{}/window/0/200", upstream.port);
    assert!(doors.proxy(&at("127.0.0.1"), &bearer).starts_with("HTTP/1.1 200"));
    let sent = upstream.count();

    // The store takes no lease writes (reads still work).
    let store = Backend::Sqlite(tmp.path().to_owned());
    store.execute(
        "CREATE TRIGGER no_lease_writes BEFORE UPDATE ON leases BEGIN SELECT RAISE(ABORT, 'down'); END",
    );
    let leak = doors.proxy(&at("127.0.0.2"), &bearer);
    assert!(leak.contains("lease_host_mismatch"), "{leak}");
    for (door, out) in doors.all(&at("127.0.0.1"), &bearer) {
        assert!(!out.contains("HTTP/1.1 200") && !out.contains("\"status\":200"), "{door}: {out}");
    }
    assert_eq!(upstream.count(), sent, "nothing went out after the leak");

    // The store takes writes again: the revocation is recorded.
    store.execute("DROP TRIGGER no_lease_writes");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listed = api(&api_addr, "GET", "/v1/leases?tenant_id=t1", &Value::Null);
        let lease = listed["items"].as_array().and_then(|items| {
            items
                .iter()
                .find(|l| {
                    l["placeholder"] == placeholder.as_str() || l["credential_id"] == credential_id.as_str()
                })
                .cloned()
        });
        if lease.as_ref().is_some_and(|l| l["status"] == "revoked") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the revocation was never recorded: {listed}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The same hostile answers inside a tunnel gatehouse terminates for the
/// lease's host: the door's exchange is the plain proxy's, over TLS.
#[test]
fn no_echo_hands_the_secret_back_inside_an_intercepted_tunnel() {
    let upstream_ca = Arc::new(gatehouse_egress::intercept::InterceptCa::generate().unwrap());
    let upstream = crate::intercept::TlsEcho::answering(&upstream_ca, "127.0.0.1", 0, Hostile::answer);
    let tmp = tempfile::tempdir().unwrap();
    let upstream_ca_file = tmp.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    let (server, api_addr, proxy_addr, log) =
        crate::intercept::start(tmp.path(), &upstream_ca_file, &[upstream.port]);
    let credential_id = credential(&api_addr, "tunnelled", false);
    let (doors, placeholder) = run_with_lease(&api_addr, &proxy_addr, &credential_id, "127.0.0.1");
    let run_ca = tmp.path().join("run-ca.pem");
    std::fs::write(&run_ca, doors.ca_pem.as_bytes()).unwrap();
    let seen = std::cell::RefCell::new(String::new());
    let tunnel = |path: &str, headers: &[String]| {
        let mut command = Command::new("curl");
        command.args(["-s", "-S", "--max-time", "10", "-D", "-", "-x", &doors.proxy, "--cacert"]);
        command.arg(&run_ca);
        for header in headers {
            command.args(["-H", header]);
        }
        let url = format!("https://127.0.0.1:{}/{path}", upstream.port);
        let out = command.arg(url).output().unwrap();
        let out = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        seen.borrow_mut().push_str(&out);
        out
    };
    let bearer = vec![format!("authorization: Bearer {placeholder}")];
    let whole = tunnel("window/0/200", &bearer);
    assert!(upstream.last().contains(&format!("authorization: Bearer {SECRET}")), "{}", upstream.last());
    assert!(whole.contains(&placeholder) && !holds_a_window(&whole), "{whole}");
    for from in 0..=SECRET.len() {
        let out = tunnel(&format!("window/{}/9", 7 + from), &bearer);
        assert!(out.starts_with("HTTP/1.1 200") && !holds_a_window(&out), "window {from}: {out}");
    }
    let out = tunnel("reason", &bearer);
    assert!(!holds_a_window(&out) && !holds_a_window(&out.to_ascii_lowercase()), "{out}");
    for path in ["content-coding", "transfer-coding"] {
        let out = tunnel(path, &bearer);
        assert!(out.contains("content_encoding_invalid") && !out.contains(MARKER), "{path}: {out}");
    }
    let sent = upstream.seen.lock().unwrap().len();
    let out = tunnel("window/0/200", &[format!("x-api-key: {placeholder}")]);
    assert!(out.contains("lease_placeholder_misplaced"), "{out}");
    assert_eq!(upstream.seen.lock().unwrap().len(), sent, "nothing went out for a misplaced placeholder");
    let seen = seen.take();
    sweep(
        server,
        log,
        tmp.path(),
        &api_addr,
        &seen,
        &["content_encoding_invalid", "lease_placeholder_misplaced"],
    );
}

/// A webhook signing lease moved in the store onto another tenant's run
/// signs nothing for that run: the lease must be the grant's run's and
/// tenant's, and its credential's.
#[test]
fn a_signing_lease_moved_to_another_tenants_run_signs_nothing() {
    let upstream = Hostile::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, api_addr, _proxy_addr, _log) = start_logging(tmp.path(), &crate::proxy::Upstream::start());
    let store = Backend::Sqlite(tmp.path().to_owned());
    let signing = api(
        &api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "hooks", "purpose": "webhook_signing", "host": "127.0.0.1", "secret": SECRET}),
    );
    let new_run = |tenant: &str| {
        let run = api(
            &api_addr,
            "POST",
            "/v1/runs",
            &json!({"tenant_id": tenant, "user_id": "u1", "body": {"code": "x"},
                "budgets": {"max_requests": 10, "max_egress_bytes": 1_000_000}}),
        );
        (
            run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned(),
            run["grant"].as_str().unwrap().to_owned(),
        )
    };
    let (run_a, _) = new_run("t1");
    let (run_b, grant_b) = new_run("t2");
    let lease = api(
        &api_addr,
        "POST",
        &format!("/v1/runs/{run_a}/leases"),
        &json!({"credential_id": signing["credential_id"], "purpose": "webhook_signing", "host": "127.0.0.1"}),
    );
    let lease_id = lease["lease_id"].as_str().unwrap_or_else(|| panic!("{lease}"));
    store.edit(&format!("UPDATE leases SET run_id = '{run_b}' WHERE lease_id = '{lease_id}'"));
    let url = format!("http://127.0.0.1:{}/hook", upstream.port);
    let delivered = api(
        &api_addr,
        "POST",
        "/v1/egress/fetch",
        &json!({"grant": grant_b, "method": "POST", "url": url, "purpose": "webhook", "sign_with": lease_id}),
    );
    assert_eq!(delivered["error"]["reason"], "lease_revoked", "{delivered}");
    assert_eq!(upstream.count(), 0, "nothing was signed for the other tenant's run");
}
