//! Content scanning through the API and the command line, against a real
//! clamd (`gatehouse_test_support::ClamdServer`) where a scanner is involved.

use std::path::PathBuf;

use axum::body::Body;
use gatehouse_config::names;
use gatehouse_test_support::{ClamdServer, EICAR, EICAR_SIGNATURE, UNOFFICIAL_SUFFIX};
use http::Request;
use serde_json::Value;

use crate::cli::gatehouse;
use crate::support::{Node, TOKEN, node, node_with, send};

fn sample(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../content/tests/samples").join(name)
}

fn scan_request(body: Vec<u8>, query: &str) -> Request<Body> {
    Request::post(format!("/v1/content/scan{query}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/octet-stream")
        .body(Body::from(body))
        .unwrap()
}

async fn scan(node: &Node, body: Vec<u8>) -> Value {
    let reply = send(&node.router, scan_request(body, "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()
}

async fn clamd_node(clamd: &ClamdServer, extra: &[(&str, &str)]) -> Node {
    let port = clamd.port().to_string();
    let mut settings = vec![(names::CLAMD_HOST, "127.0.0.1"), (names::CLAMD_PORT, port.as_str())];
    settings.extend_from_slice(extra);
    node_with("all", &settings).await
}

#[tokio::test]
async fn without_a_scanner_text_is_not_scanned_and_binaries_are_refused_and_recorded() {
    let node = node().await;
    let text = scan(&node, b"hello, plain text\n".to_vec()).await;
    assert_eq!(text["verdict"], "not_scanned", "never clean without a scanner");
    assert_eq!(text["kind"], "utf8_text");
    assert_eq!(text["bytes"], 18, "the bytes examined, with or without a scanner");
    assert!(text.get("reason").is_none());

    let elf = std::fs::read(sample("elf-x86_64")).unwrap();
    let v = scan(&node, elf).await;
    assert_eq!((v["verdict"].as_str(), v["kind"].as_str()), (Some("refused"), Some("elf")));
    assert_eq!(v["reason"], "content_executable");

    let reply = send(&node.router, scan_request(b"{\"a\": 1}".to_vec(), "?tenant_id=t-1&run_id=run-7")).await;
    assert_eq!(reply.json()["verdict"], "not_scanned");
    let zip = std::fs::read(sample("zip-text.zip")).unwrap();
    // No run run-7 exists: the refusal is the tenant's, attached to no run.
    let reply = send(&node.router, scan_request(zip.clone(), "?tenant_id=t-1&run_id=run-7")).await;
    assert_eq!(reply.json()["reason"], "content_archive");
    // A live run's refusal is one of its events; a run that ended takes none.
    let run = crate::support::call(
        &node,
        "/v1/runs",
        serde_json::json!({"tenant_id": "t-1", "user_id": "u1", "body": {}}),
    )
    .await
    .json();
    let run_id = run["run_id"].as_str().unwrap();
    let reply = send(&node.router, scan_request(zip.clone(), &format!("?run_id={run_id}"))).await;
    assert_eq!(reply.json()["reason"], "content_archive");
    let other =
        send(&node.router, scan_request(zip.clone(), &format!("?tenant_id=t-2&run_id={run_id}"))).await;
    assert_eq!(other.status, 400, "a run of another tenant than the one named: {}", other.text);
    crate::support::call(&node, &format!("/v1/runs/{run_id}/end"), serde_json::json!({"outcome": "failed"}))
        .await;
    let reply = send(&node.router, scan_request(zip, &format!("?tenant_id=t-1&run_id={run_id}"))).await;
    assert_eq!(reply.json()["reason"], "content_archive");
    let events = crate::support::get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let refused: Vec<&Value> =
        events["items"].as_array().unwrap().iter().filter(|e| e["kind"] == "content_refused").collect();
    assert_eq!(refused.len(), 1, "only the scan while the run was live: {events}");

    let refusals = send(
        &node.router,
        Request::get("/v1/refusals")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .json();
    let list = refusals["items"].as_array().unwrap();
    assert!(list.iter().any(|r| r["kind"] == "content_refused" && r["reason"] == "content_executable"));
    let archives: Vec<&Value> = list.iter().filter(|r| r["reason"] == "content_archive").collect();
    assert_eq!(archives.len(), 3, "{archives:?}");
    assert!(archives.iter().all(|r| r["tenant_id"] == "t-1"), "{archives:?}");
    assert_eq!(archives.iter().filter(|r| r["run_id"] == run_id).count(), 1, "{archives:?}");
    assert!(archives.iter().all(|r| r["run_id"] != "run-7"), "no event of a run that does not exist");

    let metrics = send(&node.router, Request::get("/metrics").body(Body::empty()).unwrap()).await.text;
    assert!(metrics.contains("gatehouse_content_scans_total{verdict=\"refused\"} 4"), "{metrics}");
    assert!(metrics.contains("gatehouse_content_scans_total{verdict=\"not_scanned\"} 2"), "{metrics}");
}

#[tokio::test]
async fn the_scan_endpoint_needs_the_service_token_and_valid_ids() {
    let node = node().await;
    let reply = send(&node.router, Request::post("/v1/content/scan").body(Body::from("text")).unwrap()).await;
    assert_eq!(reply.status, 401);
    let reply = send(&node.router, scan_request(b"text".to_vec(), "?tenant_id=a%20b")).await;
    assert_eq!(reply.status, 400);
    let reply = send(&node.router, scan_request(b"text".to_vec(), "?other=1")).await;
    assert_eq!(reply.status, 400);
}

#[tokio::test]
async fn content_over_the_cap_is_refused_without_reading_it_all() {
    let node = node_with("all", &[(names::CONTENT_MAX_BYTES, "1000")]).await;
    let v = scan(&node, vec![b'a'; 1001]).await;
    assert_eq!((v["verdict"].as_str(), v["reason"].as_str()), (Some("refused"), Some("content_too_large")));
    assert_eq!(scan(&node, vec![b'a'; 1000]).await["verdict"], "not_scanned");
}

#[tokio::test]
async fn a_real_clamd_judges_what_sniffing_accepted() {
    let clamd = ClamdServer::start();
    let node = clamd_node(&clamd, &[]).await;
    let clean = scan(&node, b"just some text\n".to_vec()).await;
    assert_eq!(clean["verdict"], "clean");

    let infected = scan(&node, EICAR.to_vec()).await;
    assert_eq!(infected["verdict"], "infected");
    assert_eq!(infected["reason"], "content_malware");
    assert_eq!(infected["signature"], format!("{EICAR_SIGNATURE}{UNOFFICIAL_SUFFIX}"));

    // Sniffing runs first: an archive carrying EICAR is refused as an
    // archive, and clamd (which would unpack it) never sees it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("eicar.txt"), EICAR).unwrap();
    let status = std::process::Command::new("zip")
        .current_dir(dir.path())
        .args(["-q", "eicar.zip", "eicar.txt"])
        .status()
        .unwrap();
    assert!(status.success());
    let zipped = std::fs::read(dir.path().join("eicar.zip")).unwrap();
    let v = scan(&node, zipped).await;
    assert_eq!((v["verdict"].as_str(), v["reason"].as_str()), (Some("refused"), Some("content_archive")));

    let status = send(
        &node.router,
        Request::get("/v1/content/scanner")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .json();
    assert_eq!(status["configured"], true);
    assert_eq!(status["reachable"], true);
    assert!(status["version"].as_str().unwrap().starts_with("ClamAV "), "{status}");
    let ready = send(&node.router, Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(ready.status, 200);
}

#[tokio::test]
async fn a_scanner_that_cannot_answer_refuses_everything() {
    let mut clamd = ClamdServer::start();
    let node = clamd_node(&clamd, &[(names::CLAMD_TIMEOUT_MS, "500")]).await;

    // Slow: a stopped clamd accepts the connection and never answers.
    clamd.pause();
    let v = scan(&node, b"text while clamd hangs\n".to_vec()).await;
    assert_eq!((v["verdict"].as_str(), v["reason"].as_str()), (Some("refused"), Some("scanner_timeout")));
    clamd.resume();
    assert_eq!(scan(&node, b"text\n".to_vec()).await["verdict"], "clean");

    // Down.
    clamd.stop();
    let v = scan(&node, b"text while clamd is down\n".to_vec()).await;
    assert_eq!((v["verdict"].as_str(), v["reason"].as_str()), (Some("refused"), Some("scanner_unavailable")));
    let ready = send(&node.router, Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()["reason"], "scanner_unavailable");
}

#[tokio::test]
async fn clamds_own_size_limit_refuses() {
    let clamd = ClamdServer::with_stream_max_length(1000);
    let node = clamd_node(&clamd, &[]).await;
    let v = scan(&node, vec![b'x'; 5000]).await;
    assert_eq!((v["verdict"].as_str(), v["reason"].as_str()), (Some("refused"), Some("scanner_size_limit")));
}

#[test]
fn content_scan_follows_the_cli_contract() {
    let dir = tempfile::tempdir().unwrap();
    let text = sample("text-utf8-prose.txt");
    let elf = sample("elf-x86_64");
    let eicar = dir.path().join("eicar.txt");
    std::fs::write(&eicar, EICAR).unwrap();

    let out = gatehouse(dir.path()).args(["content", "scan", "--json"]).arg(&text).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["verdict"], "not_scanned");
    assert_eq!(v["results"][0]["kind"], "utf8_text");
    assert_eq!(v["results"][0]["file"], text.display().to_string());
    assert_eq!(v["results"][0]["bytes"], std::fs::metadata(&text).unwrap().len());

    let out =
        gatehouse(dir.path()).args(["content", "scan", "--json"]).arg(&text).arg(&elf).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][1]["verdict"], "refused");
    assert_eq!(v["results"][1]["kind"], "elf");
    assert_eq!(v["results"][1]["reason"], "content_executable");

    let out = gatehouse(dir.path()).args(["content", "scan"]).arg(&elf).output().unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.contains("refused elf content_executable"), "{line}");

    // An unreadable file: exit 2, a reason on stderr, the others still reported.
    let out =
        gatehouse(dir.path()).args(["content", "scan", "--json", "missing.txt"]).arg(&text).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.txt"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 1);

    // With a real clamd: --clamd, or CLAMD_HOST/CLAMD_PORT.
    let clamd = ClamdServer::start();
    let at = format!("127.0.0.1:{}", clamd.port());
    let out = gatehouse(dir.path())
        .args(["content", "scan", "--json", "--clamd", &at])
        .arg(&eicar)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["verdict"], "infected");
    let out = gatehouse(dir.path())
        .env(names::CLAMD_HOST, "127.0.0.1")
        .env(names::CLAMD_PORT, clamd.port().to_string())
        .args(["content", "scan", "--json"])
        .arg(&text)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["verdict"], "clean");

    let out =
        gatehouse(dir.path()).args(["content", "scan", "--clamd", "nowhere"]).arg(&text).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_gigabyte_file_is_refused_at_the_cap_without_being_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.txt");
    // Sparse: two gigabytes of NUL that occupy no disk.
    std::fs::File::create(&huge).unwrap().set_len(2 << 30).unwrap();
    let out = gatehouse(dir.path()).args(["content", "scan", "--json"]).arg(&huge).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // NUL is not text: decided on the first byte, the rest is never read.
    assert_eq!(v["results"][0]["reason"], "content_not_text");
    assert!(v["results"][0]["bytes"].as_u64().unwrap() <= 1 << 20);

    let text = dir.path().join("big.txt");
    std::fs::write(&text, "all text, but too much of it\n".repeat(40_000)).unwrap();
    let out = gatehouse(dir.path())
        .args(["content", "scan", "--json", "--max-bytes", "100000"])
        .arg(&text)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["reason"], "content_too_large");
    assert!(v["results"][0]["bytes"].as_u64().unwrap() <= 100_000 + 64 * 1024);
}
