//! HTTPS through `CONNECT` for a host the run holds a lease for: the
//! gateway terminates TLS under its interception CA (the sandbox trusts the
//! certificate returned with its run), gives each request inside the tunnel
//! its credential, and talks to the real upstream over TLS verified against
//! the upstream's own CA. Tunnels to any other host stay opaque.

use std::io::Write as _;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_egress::intercept::{InterceptCa, Leaves};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cli::{Server, gatehouse, spawn_server};
use crate::plane::within;
use crate::proxy::{api, proxy_address};
use crate::support::{GRANT_SECRET, TOKEN, private_key_pem};

/// A TLS upstream on `ip` (a certificate under its own test CA) that answers
/// every request of a keep-alive connection with the request's head.
pub(crate) struct TlsEcho {
    pub(crate) port: u16,
    pub(crate) seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl TlsEcho {
    pub(crate) fn start(ca: &Arc<InterceptCa>, ip: &str, port: u16) -> Self {
        Self::answering(ca, ip, port, |head| {
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{head}", head.len()).into_bytes()
        })
    }

    /// As [`TlsEcho::start`], answering each request head with `answer(head)`.
    pub(crate) fn answering(
        ca: &Arc<InterceptCa>,
        ip: &str,
        port: u16,
        answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        let answer = Arc::new(answer);
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (config, _) = Leaves::new(ca.clone(), 4).server_config(ip).unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind((ip, port))).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        runtime.spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, log, answer) = (acceptor.clone(), log.clone(), answer.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        let Ok(n) = tls.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
                            buf.drain(..end + 4);
                            log.lock().unwrap().push(head.clone());
                            if tls.write_all(&answer(&head)).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { port, seen, _runtime: runtime }
    }

    pub(crate) fn last(&self) -> String {
        self.seen.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-s", "-S", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl is installed")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A gateway (role all) trusting `upstream_ca` for upstreams, with
/// `CONNECT` open to `ports`; its API and proxy addresses, and its log.
pub(crate) fn start(
    dir: &std::path::Path,
    upstream_ca: &std::path::Path,
    ports: &[u16],
) -> (Server, String, String, std::thread::JoinHandle<String>) {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut c = gatehouse(dir);
    c.env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8")
        .env("GATEHOUSE_PROXY_CONNECT_PORTS", format!("443,{}", ports.join(",")))
        .env("GATEHOUSE_EGRESS_EXTRA_CA_FILE", upstream_ca)
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", private_key_pem())
        .env("CODEAPI_EGRESS_GRANT_SECRET", GRANT_SECRET)
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN", TOKEN);
    let (server, api_addr, printed, log) = spawn_server(c);
    (server, api_addr, proxy_address(&printed), log)
}

#[test]
fn https_to_a_lease_host_is_intercepted_and_injected_and_every_other_tunnel_stays_opaque() {
    const CANARY: &str = "canary-tls-5e6f7a8b9c0d1e2f";
    let upstream_ca = Arc::new(InterceptCa::generate().unwrap());
    let leased = TlsEcho::start(&upstream_ca, "127.0.0.1", 0);
    let other = TlsEcho::start(&upstream_ca, "127.0.0.2", leased.port);
    let tmp = tempfile::tempdir().unwrap();
    let upstream_ca_file = tmp.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    let (server, api_addr, proxy_addr, log) = start(tmp.path(), &upstream_ca_file, &[leased.port]);

    let credential = api(
        &api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "gh", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"basic_username": "x-access-token"}, "secret": CANARY}),
    );
    let run = api(
        &api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "budgets": {"max_requests": 50, "max_egress_bytes": 1_000_000}}),
    );
    let ca_pem =
        run["ca_certificate_pem"].as_str().unwrap_or_else(|| panic!("the run carries the CA: {run}"));
    let ca_file = tmp.path().join("gatehouse-ca.pem");
    std::fs::File::create(&ca_file).unwrap().write_all(ca_pem.as_bytes()).unwrap();
    let proxy = format!("http://grant:{}@{proxy_addr}", run["grant"].as_str().unwrap());
    let run_id = run["run_id"].as_str().unwrap();

    // Before any lease, the tunnel is opaque: the upstream's own certificate.
    let url = format!("https://127.0.0.1:{}/repo.git/info/refs", leased.port);
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), &url]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!leased.last().contains("authorization"), "{}", leased.last());

    let lease = api(
        &api_addr,
        "POST",
        &format!("/v1/runs/{run_id}/leases"),
        &json!({"credential_id": credential["credential_id"], "purpose": "git_provider", "host": "127.0.0.1"}),
    );
    let placeholder = lease["placeholder"].as_str().unwrap_or_else(|| panic!("{lease}")).to_owned();

    // Now gatehouse presents a leaf under its own CA; two requests on one
    // kept-alive connection are each injected, and the echo is scrubbed.
    let userinfo = format!("x-access-token:{placeholder}");
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), "-u", &userinfo, &url, &url]);
    let seen_by_sandbox = text(&out);
    assert!(out.status.success(), "{seen_by_sandbox}");
    let requests = leased.seen.lock().unwrap().clone();
    let injected: Vec<&String> = requests.iter().filter(|h| h.contains("authorization: Basic")).collect();
    assert_eq!(injected.len(), 2, "{requests:?}");
    let basic = gatehouse_test_support::leaks::base64(
        format!("x-access-token:{CANARY}").as_bytes(),
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    );
    assert!(injected[1].contains(&basic), "the upstream got the secret: {}", injected[1]);
    assert!(!seen_by_sandbox.contains(&basic) && !seen_by_sandbox.contains(CANARY), "{seen_by_sandbox}");

    // A client that does not trust the interception CA fails its handshake,
    // cleanly, and the failure is recorded.
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), &url]);
    assert!(!out.status.success(), "{}", text(&out));
    // The gateway records the failed handshake once it sees it fail, which
    // may be after curl has given up: wait for the record.
    let refusals =
        || api(&api_addr, "GET", &format!("/v1/refusals?run_id={run_id}&reason=tls_failed"), &json!({}));
    let recorded =
        within(Duration::from_secs(10), || refusals()["items"].as_array().is_some_and(|i| !i.is_empty()));
    assert!(recorded.is_some(), "the failed handshake never reached the record: {}", refusals());
    assert_eq!(refusals()["items"].as_array().map(Vec::len), Some(1), "{}", refusals());

    // Another host: opaque, whatever the run holds.
    let other_url = format!("https://127.0.0.2:{}/", other.port);
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), &other_url]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!other.last().contains("authorization"), "{}", other.last());

    // Revoked: the next tunnel to the host is opaque again, and the
    // request goes without the credential.
    let revoked = api(
        &api_addr,
        "POST",
        &format!("/v1/leases/{}/revoke", lease["lease_id"].as_str().unwrap()),
        &json!({}),
    );
    assert_eq!(revoked["revoked"], 1, "{revoked}");
    let out = curl(&["-x", &proxy, "--cacert", upstream_ca_file.to_str().unwrap(), &url]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!leased.last().contains(&basic));

    // The gateway's log holds neither the secret nor its Basic form.
    drop(server);
    let log = log.join().unwrap();
    assert!(log.contains("listening"), "{log}");
    for form in [CANARY, basic.as_str()] {
        assert!(!log.contains(form), "the log holds the secret");
    }
    gatehouse_test_support::assert_no_key_material(CANARY.as_bytes(), &log, "the gateway's log");
}

/// Inside an intercepted tunnel each request is a request of its own: it
/// spends the run's budget (the `CONNECT` spent one), is counted, and once
/// the budget is gone is refused and recorded, tunnel or not. An upstream
/// whose certificate the real roots do not vouch for gets no request and no
/// credential, however the sandbox's side of the tunnel was set up.
#[test]
fn inside_an_intercepted_tunnel_each_request_is_spent_and_an_untrusted_upstream_gets_nothing() {
    const CANARY: &str = "canary-tunnel-2c4e6a8b0d1f";
    let upstream_ca = Arc::new(InterceptCa::generate().unwrap());
    let leased = TlsEcho::start(&upstream_ca, "127.0.0.1", 0);
    // The same host on another port, under a CA nobody configured.
    let rogue = TlsEcho::start(&Arc::new(InterceptCa::generate().unwrap()), "127.0.0.1", 0);
    let tmp = tempfile::tempdir().unwrap();
    let upstream_ca_file = tmp.path().join("upstream-ca.pem");
    std::fs::write(&upstream_ca_file, upstream_ca.cert_pem()).unwrap();
    let (server, api_addr, proxy_addr, log) =
        start(tmp.path(), &upstream_ca_file, &[leased.port, rogue.port]);
    let credential = api(
        &api_addr,
        "POST",
        "/v1/tenants/t1/credentials",
        &json!({"name": "gh", "purpose": "git_provider", "host": "127.0.0.1",
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": CANARY}),
    );
    let ca_file = tmp.path().join("gatehouse-ca.pem");
    let leased_run = |max_requests: u64| {
        let run = api(
            &api_addr,
            "POST",
            "/v1/runs",
            &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"},
                "budgets": {"max_requests": max_requests, "max_egress_bytes": 1_000_000}}),
        );
        let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
        std::fs::write(&ca_file, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
        let lease = api(
            &api_addr,
            "POST",
            &format!("/v1/runs/{run_id}/leases"),
            &json!({"credential_id": credential["credential_id"], "purpose": "git_provider", "host": "127.0.0.1"}),
        );
        assert!(lease["placeholder"].is_string(), "{lease}");
        (run_id, format!("http://grant:{}@{proxy_addr}", run["grant"].as_str().unwrap()))
    };

    // A budget of four: the CONNECT and three requests; the fourth request
    // on the same kept-alive connection is refused inside the tunnel.
    let (run_id, proxy) = leased_run(4);
    let url = format!("https://127.0.0.1:{}/api", leased.port);
    let out = curl(&["-x", &proxy, "--cacert", ca_file.to_str().unwrap(), "-D", "-", &url, &url, &url, &url]);
    let seen_by_sandbox = text(&out);
    assert_eq!(
        seen_by_sandbox.matches("HTTP/1.1 200").count(),
        4,
        "the CONNECT and three: {seen_by_sandbox}"
    );
    assert_eq!(
        seen_by_sandbox.matches("x-gatehouse-reason: budget_requests_exhausted").count(),
        1,
        "{seen_by_sandbox}"
    );
    let requests = leased.seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|h| h.contains(&format!("authorization: Bearer {CANARY}"))), "{requests:?}");
    assert!(!seen_by_sandbox.contains(CANARY), "{seen_by_sandbox}");
    let refusals = api(
        &api_addr,
        "GET",
        &format!("/v1/refusals?run_id={run_id}&reason=budget_requests_exhausted"),
        &json!({}),
    );
    assert_eq!(refusals["items"].as_array().map(Vec::len), Some(1), "{refusals}");
    assert_eq!(refusals["items"][0]["host"], "127.0.0.1", "{refusals}");
    let metrics =
        crate::cli::http(&api_addr, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    for counted in [
        "gatehouse_egress_allowed_total{kind=\"tunnel\"} 1\n",
        "gatehouse_egress_allowed_total{kind=\"request\"} 3\n",
    ] {
        assert!(metrics.contains(counted), "{counted} in {metrics}");
    }

    // The rogue upstream: the sandbox trusts gatehouse's leaf, but
    // gatehouse does not trust the upstream, so nothing is sent to it.
    let (rogue_run, proxy) = leased_run(10);
    let out = curl(&[
        "-x",
        &proxy,
        "--cacert",
        ca_file.to_str().unwrap(),
        "-D",
        "-",
        &format!("https://127.0.0.1:{}/api", rogue.port),
    ]);
    let answer = text(&out);
    assert!(answer.contains("HTTP/1.1 502") && answer.contains("x-gatehouse-reason: tls_failed"), "{answer}");
    assert!(rogue.seen.lock().unwrap().is_empty(), "the rogue upstream got a request");
    let refusals =
        || api(&api_addr, "GET", &format!("/v1/refusals?run_id={rogue_run}&reason=tls_failed"), &json!({}));
    let recorded =
        within(Duration::from_secs(10), || refusals()["items"].as_array().is_some_and(|i| !i.is_empty()));
    assert!(recorded.is_some(), "the upstream's bad certificate never reached the record: {}", refusals());
    assert_eq!(refusals()["items"].as_array().map(Vec::len), Some(1), "{}", refusals());

    drop(server);
    let log = log.join().unwrap();
    gatehouse_test_support::assert_no_key_material(CANARY.as_bytes(), &log, "the gateway's log");
}
