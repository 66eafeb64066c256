//! Credential leases at the proxy, in process: the node's own proxy served
//! on a loopback port with the node's manual clock, curl as the sandbox,
//! echoing upstreams, and a DNS responder so hosts are reached by name.
//!
//! The unit tests of `gatehouse_egress::inject` hold the rules; these hold
//! that the door applies them to real requests.

use gatehouse_config::names;
use serde_json::{Value, json};

use crate::leases::Echo;
use crate::support::*;

/// A credential of tenant t1 for `host`, added as `Bearer {secret}`.
async fn credential(node: &Node, name: &str, host: &str, secret: &str) -> Value {
    let created = call(
        node,
        "/v1/tenants/t1/credentials",
        json!({"name": name, "purpose": "git_provider", "host": host,
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "allow_plain_http": true, "secret": secret}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    created.json()
}

/// A live run of tenant t1 and the proxy URL its sandbox uses.
async fn run(node: &Node, proxy: std::net::SocketAddr) -> (String, String) {
    let created = call(
        node,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"},
            "budgets": {"max_requests": 100, "max_egress_bytes": 10_000_000}}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let run = created.json();
    (
        run["run_id"].as_str().unwrap().to_owned(),
        format!("http://grant:{}@{proxy}", run["grant"].as_str().unwrap()),
    )
}

async fn lease(node: &Node, run_id: &str, credential: &Value, host: &str) -> Value {
    let granted = call(
        node,
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential["credential_id"], "purpose": "git_provider", "host": host}),
    )
    .await;
    assert_eq!(granted.status, 201, "{}", granted.text);
    granted.json()
}

/// The one lease of the run, as `GET /v1/leases` lists it.
async fn lease_of(node: &Node, run_id: &str) -> Value {
    let listed = get(node, &format!("/v1/leases?run_id={run_id}")).await.json();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");
    listed["items"][0].clone()
}

fn refused(out: &str, status: u16, reason: &str) -> bool {
    out.starts_with(&format!("HTTP/1.1 {status}"))
        && out.contains(&format!("x-gatehouse-reason: {reason}\r\n"))
        && out.contains("x-gatehouse-retryable: false\r\n")
}

/// Past its two minutes, with its run still live and no heartbeat renewing
/// it, a lease gives no credential at the proxy: `lease_expired`, whether
/// the request names the lease or not, and nothing goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_expires_at_the_proxy_while_its_run_lives_on() {
    const SECRET: &str = "canary-expiry-4d7e1f0a2b3c";
    let upstream = Echo::start("127.0.0.1", 0);
    let node = node_with(
        "all",
        &[(names::EGRESS_ALLOW_RANGES, "127.0.0.0/8"), (names::RUN_HEARTBEAT_TIMEOUT_SECS, "600")],
    )
    .await;
    let proxy = serve_proxy(&node).await;
    let credential = credential(&node, "gh", "127.0.0.1", SECRET).await;
    let (run_id, via) = run(&node, proxy).await;
    let granted = lease(&node, &run_id, &credential, "127.0.0.1").await;
    let placeholder = granted["placeholder"].as_str().unwrap();
    let target = format!("http://127.0.0.1:{}/repo", upstream.port);

    let out = sandbox_curl(&["-x", &via, &target]).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {SECRET}\r\n")), "{}", upstream.last());

    node.clock.advance(121);
    let sent = upstream.count();
    let out = sandbox_curl(&["-x", &via, &target]).await;
    assert!(refused(&out, 403, "lease_expired"), "{out}");
    let out =
        sandbox_curl(&["-x", &via, "-H", &format!("authorization: Bearer {placeholder}"), &target]).await;
    assert!(refused(&out, 403, "lease_expired"), "{out}");
    assert_eq!(upstream.count(), sent, "nothing went out without its credential");
    assert!(!out.contains(SECRET));

    // A heartbeat now keeps the run, not the lease: it stays expired.
    let heartbeat = call(&node, &format!("/v1/runs/{run_id}/heartbeat"), json!({})).await.json();
    assert_eq!((heartbeat["status"].as_str(), heartbeat["leases_renewed"].as_u64()), (Some("live"), Some(0)));
    let out = sandbox_curl(&["-x", &via, &target]).await;
    assert!(refused(&out, 403, "lease_expired"), "{out}");
    assert_eq!(upstream.count(), sent);

    let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let expired: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "secret_refused" && e["reason"] == "lease_expired")
        .collect();
    assert_eq!(expired.len(), 3, "{events}");
    assert!(expired.iter().all(|e| e["lease_id"] == granted["lease_id"]), "{events}");
}

/// At the door, by name: a host spelled with capitals or a trailing dot is
/// the lease's host; a placeholder cut in two is never put together (not
/// a credential, not a leak); the raw secret toward another host is a leak;
/// a deleted credential's placeholder gets nothing anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_door_hosts_compare_normalized_and_a_split_placeholder_is_never_assembled() {
    const SECRET: &str = "canary-door-8b2f6c1d9e0a";
    const DELETED: &str = "canary-deleted-5c3a7e9f1b";
    let upstream = Echo::start("127.0.0.1", 0);
    let other = Echo::start("127.0.0.2", upstream.port);
    let dns = Dns::start();
    let resolver = format!("127.0.0.1:{}", dns.port);
    let node = node_with(
        "all",
        &[(names::EGRESS_ALLOW_RANGES, "127.0.0.0/8"), (names::DNS_SERVERS, resolver.as_str())],
    )
    .await;
    let proxy = serve_proxy(&node).await;
    let port = upstream.port;
    let github = credential(&node, "gh", "Lease.Test.", SECRET).await;
    assert_eq!(github["host"], "lease.test", "{github}");
    let (run_id, via) = run(&node, proxy).await;
    let granted = lease(&node, &run_id, &github, "LEASE.test.").await;
    assert_eq!(granted["host"], "lease.test", "{granted}");
    let placeholder = granted["placeholder"].as_str().unwrap().to_owned();

    // Capitals and a trailing dot: the same host, given the credential.
    for url in [format!("http://LEASE.Test.:{port}/a"), format!("http://lease.test:{port}/b")] {
        let out = sandbox_curl(&["-x", &via, &url]).await;
        assert!(out.starts_with("HTTP/1.1 200"), "{url}: {out}");
        assert!(
            upstream.last().contains(&format!("authorization: Bearer {SECRET}\r\n")),
            "{}",
            upstream.last()
        );
        assert!(!out.contains(SECRET), "{out}");
    }
    assert!(dns.was_asked("lease.test"), "the sandbox reached the host by name");
    let url = format!("http://lease.TEST.:{port}/c");
    let out = sandbox_curl(&["-x", &via, "-H", &format!("authorization: Bearer {placeholder}"), &url]).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(upstream.last().contains(&format!("authorization: Bearer {SECRET}\r\n")), "{}", upstream.last());

    // A placeholder in two halves, in two headers: neither half is touched;
    // the lease's rule gives the credential as if none were there.
    let (front, back) = placeholder.split_at(placeholder.len() / 2);
    let halves = [format!("x-a: {front}"), format!("x-b: {back}")];
    let out = sandbox_curl(&["-x", &via, "-H", &halves[0], "-H", &halves[1], &url]).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let head = upstream.last();
    assert!(
        head.contains(&format!("{}\r\n", halves[0])) && head.contains(&format!("{}\r\n", halves[1])),
        "{head}"
    );
    assert!(head.contains(&format!("authorization: Bearer {SECRET}\r\n")), "{head}");
    // Toward another host the halves are no placeholder: they go as they
    // are, with no secret, and the lease lives on.
    let elsewhere = format!("http://127.0.0.2:{port}/");
    let out = sandbox_curl(&["-x", &via, "-H", &halves[0], "-H", &halves[1], &elsewhere]).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(other.last().contains(&halves[0]) && !other.last().contains(SECRET), "{}", other.last());
    assert_eq!(lease_of(&node, &run_id).await["status"], "live");

    // The raw secret (the sandbox should never have it) toward another
    // host: a leak attempt, refused, and the lease revoked at once.
    let sent = other.count();
    let out = sandbox_curl(&["-x", &via, "-H", &format!("x-stolen: {SECRET}"), &elsewhere]).await;
    assert!(refused(&out, 403, "lease_host_mismatch"), "{out}");
    assert_eq!(other.count(), sent, "nothing reached the other host");
    let revoked = lease_of(&node, &run_id).await;
    assert_eq!(
        (revoked["status"].as_str(), revoked["revoke_reason"].as_str()),
        (Some("revoked"), Some("leaked"))
    );

    // A deleted credential: its lease is revoked with it, and its
    // placeholder gets nothing, at its host or any other.
    let doomed = credential(&node, "doomed", "lease.test", DELETED).await;
    let (run2, via2) = run(&node, proxy).await;
    let granted2 = lease(&node, &run2, &doomed, "lease.test").await;
    let placeholder2 = granted2["placeholder"].as_str().unwrap();
    let deleted = send(
        &node.router,
        http::Request::delete(format!(
            "/v1/tenants/t1/credentials/{}",
            doomed["credential_id"].as_str().unwrap()
        ))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap(),
    )
    .await
    .json();
    assert_eq!(deleted, json!({"deleted": true, "revoked": {"leases": 1}}));
    let sent = (upstream.count(), other.count());
    let out =
        sandbox_curl(&["-x", &via2, "-H", &format!("authorization: Bearer {placeholder2}"), &url]).await;
    assert!(refused(&out, 403, "lease_revoked"), "{out}");
    let out = sandbox_curl(&["-x", &via2, &url]).await;
    assert!(refused(&out, 403, "lease_revoked"), "the host's requests say why: {out}");
    let out =
        sandbox_curl(&["-x", &via2, "-H", &format!("authorization: Bearer {placeholder2}"), &elsewhere])
            .await;
    assert!(refused(&out, 403, "lease_host_mismatch"), "{out}");
    assert_eq!((upstream.count(), other.count()), sent, "nothing went out for a deleted credential");

    let refusals = refusals(&node).await;
    let text = serde_json::to_string(&refusals).unwrap();
    for secret in [SECRET, DELETED] {
        assert!(!text.contains(secret), "a refusal holds a secret");
    }
}

/// A revocation that has returned is never followed by an injection: the
/// run's request spends its grant and is held in name resolution (a DNS
/// responder on a barrier); the lease is revoked and the revocation
/// returns; then the name resolves. The door reads the lease generation
/// again right before injecting, and refuses. Through the proxy and
/// through the fetch API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_that_returned_is_never_followed_by_an_injection() {
    const SECRET: &str = "canary-held-in-dns-7a1c9e3f";
    let upstream = Echo::start("127.0.0.1", 0);
    let dns = Dns::start();
    let resolver = format!("127.0.0.1:{}", dns.port);
    let node = node_with(
        "all",
        &[(names::EGRESS_ALLOW_RANGES, "127.0.0.0/8"), (names::DNS_SERVERS, resolver.as_str())],
    )
    .await;
    let proxy = serve_proxy(&node).await;
    let port = upstream.port;
    for (door, host) in [("proxy", "held.test"), ("fetch", "held-fetch.test")] {
        let github = credential(&node, door, host, SECRET).await;
        let (run_id, via) = run(&node, proxy).await;
        let granted = lease(&node, &run_id, &github, host).await;
        let placeholder = granted["placeholder"].as_str().unwrap().to_owned();
        let lease_id = granted["lease_id"].as_str().unwrap().to_owned();
        // Warm the door's view of the run's leases, so nothing but the
        // generation can tell it of the revocation.
        let url = format!("http://{host}:{port}/");
        let bearer = format!("authorization: Bearer {placeholder}");
        // (A request to an address needs no lookup and gets no credential.)
        let warm = sandbox_curl(&["-x", &via, &format!("http://127.0.0.1:{port}/")]).await;
        assert!(warm.starts_with("HTTP/1.1 200"), "{warm}");

        dns.hold();
        let sent = upstream.count();
        let request = match door {
            "proxy" => {
                let (via, bearer, url) = (via.clone(), bearer.clone(), url.clone());
                tokio::spawn(async move { sandbox_curl(&["-x", &via, "-H", &bearer, &url]).await })
            }
            _ => {
                let grant = via.trim_start_matches("http://grant:").split('@').next().unwrap().to_owned();
                let node_router = node.router.clone();
                let body = json!({"grant": grant, "url": url, "purpose": "git_provider",
                    "headers": [["authorization", format!("Bearer {placeholder}")]]});
                tokio::spawn(async move {
                    let request = http::Request::post("/v1/egress/fetch")
                        .header("authorization", format!("Bearer {TOKEN}"))
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(body.to_string()))
                        .unwrap();
                    send(&node_router, request).await.text
                })
            }
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dns.was_asked(host) {
            assert!(std::time::Instant::now() < deadline, "{door}: the request never reached DNS");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let revoked = call(&node, &format!("/v1/leases/{lease_id}/revoke"), json!({})).await;
        assert_eq!(revoked.status, 200, "{}", revoked.text);
        dns.release();
        let out = request.await.unwrap();
        assert!(out.contains("lease_revoked"), "{door}: {out}");
        assert_eq!(upstream.count(), sent, "{door}: nothing went out after the revocation returned");
        assert!(!upstream.last().contains(SECRET), "{door}");
    }
}
