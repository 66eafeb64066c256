//! Files through grants, in process on the local filesystem: the platform
//! stores inputs; a run's sandbox, with its grant, reads exactly its inputs
//! and sessions and writes only its output session, every budget counted.

use axum::body::Body;
use http::Request;
use serde_json::json;

use crate::support::*;

/// `POST /v1/files` as the platform: `query` then the content.
async fn store_input(node: &Node, query: &str, content: &[u8]) -> Reply {
    let req = Request::post(format!("/v1/files?{query}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(content.to_vec()))
        .unwrap();
    send(&node.router, req).await
}

/// A sandbox request with the run's grant as its bearer token.
async fn as_run(node: &Node, grant: &str, method: &str, path: &str, content: &[u8]) -> Reply {
    let mut req =
        Request::builder().method(method).uri(path).header("authorization", format!("Bearer {grant}"));
    if method == "PUT" {
        req = req.header("content-length", content.len());
    }
    send(&node.router, req.body(Body::from(content.to_vec())).unwrap()).await
}

/// A live run of `tenant`/`user` with these scopes; returns its grant.
async fn run(node: &Node, tenant: &str, user: &str, inputs: &[&str], reads: &[&str], output: &str) -> String {
    let created = call(
        node,
        "/v1/runs",
        json!({"tenant_id": tenant, "user_id": user, "body": {"code": "x"}, "input_files": inputs,
            "read_sessions": reads, "output_session_id": output,
            "budgets": {"max_requests": 10, "max_upload_bytes": 100, "max_output_files": 4}}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    created.json()["grant"].as_str().unwrap().to_owned()
}

fn reason(reply: &Reply) -> String {
    reply.json()["error"]["reason"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_run_reads_exactly_its_inputs_and_sessions_and_writes_only_its_output() {
    let node = node().await;
    let brief =
        store_input(&node, "tenant_id=t1&user_id=u1&resource=chat-upload-1&name=brief.txt", b"the brief")
            .await;
    assert_eq!(brief.status, 201, "{}", brief.text);
    let brief = brief.json();
    assert_eq!(brief["bytes"], 9);
    assert_eq!(brief["verdict"], "not_scanned", "no clamd configured: never `clean`");
    let sha = brief["sha256"].as_str().unwrap();
    assert!(sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()), "{brief}");
    let brief_id = brief["file_id"].as_str().unwrap().to_owned();
    let other =
        store_input(&node, "tenant_id=t1&user_id=u1&resource=chat-upload-2&name=other.txt", b"not yours")
            .await;
    let other_id = other.json()["file_id"].as_str().unwrap().to_owned();
    let skill =
        store_input(&node, "tenant_id=t1&user_id=owner&resource=skill:pdf-tools:3&name=SKILL.md", b"# skill")
            .await;
    let skill_id = skill.json()["file_id"].as_str().unwrap().to_owned();
    let theirs =
        store_input(&node, "tenant_id=t1&user_id=u2&resource=chat-upload-3&name=private.txt", b"u2's").await;
    let theirs_id = theirs.json()["file_id"].as_str().unwrap().to_owned();

    let grant = run(&node, "t1", "u1", &[&brief_id, &skill_id, &theirs_id], &[], "out-1").await;
    // Its inputs: its own, and a resource shared in the tenant.
    let read = as_run(&node, &grant, "GET", &format!("/v1/files/{brief_id}"), b"").await;
    assert_eq!((read.status, read.text.as_str()), (200, "the brief"));
    assert_eq!(read.headers["x-gatehouse-sha256"], brief["sha256"].as_str().unwrap());
    let read = as_run(&node, &grant, "GET", &format!("/v1/files/{skill_id}"), b"").await;
    assert_eq!((read.status, read.text.as_str()), (200, "# skill"));
    // Not named by the grant; named, but another user's private file.
    let refused = as_run(&node, &grant, "GET", &format!("/v1/files/{other_id}"), b"").await;
    assert_eq!((refused.status, reason(&refused).as_str()), (403, "scope_file_not_granted"));
    let refused = as_run(&node, &grant, "GET", &format!("/v1/files/{theirs_id}"), b"").await;
    assert_eq!((refused.status, reason(&refused).as_str()), (404, "file_unknown"));

    // Writes: only the output session, names checked, budgets spent first.
    let put = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/report.md", b"# report").await;
    assert_eq!(put.status, 201, "{}", put.text);
    assert_eq!(
        (put.json()["bytes"].as_u64(), put.json()["verdict"].as_str()),
        (Some(8), Some("not_scanned"))
    );
    let elsewhere = as_run(&node, &grant, "PUT", "/v1/sessions/prev-1/files/x.md", b"x").await;
    assert_eq!((elsewhere.status, reason(&elsewhere).as_str()), (403, "scope_output_session_mismatch"));
    for bad in ["..", "a%2Fb", "%2E%2E", "nul%00byte", "tab%09x", "rtl%E2%80%AEtxt.exe"] {
        let refused = as_run(&node, &grant, "PUT", &format!("/v1/sessions/out-1/files/{bad}"), b"x").await;
        assert_eq!((refused.status, reason(&refused).as_str()), (400, "file_name_invalid"), "{bad}");
    }
    let executable = [b"MZ\x90\x00\x03".as_slice(), &[0u8; 59]].concat();
    let refused = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/tool.bin", &executable).await;
    assert_eq!((refused.status, reason(&refused).as_str()), (403, "content_executable"), "{}", refused.text);
    // Over the byte budget (100, 8 + 64 spent): refused, nothing kept.
    let refused = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/big.txt", &[b'a'; 40]).await;
    assert_eq!((refused.status, reason(&refused).as_str()), (403, "budget_upload_bytes_exhausted"));
    // An upload declares its length, and is exactly that long.
    let unknown_length = send(
        &node.router,
        Request::put("/v1/sessions/out-1/files/x.txt")
            .header("authorization", format!("Bearer {grant}"))
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(unknown_length.status, 411, "{}", unknown_length.text);
    let short = send(
        &node.router,
        Request::put("/v1/sessions/out-1/files/x.txt")
            .header("authorization", format!("Bearer {grant}"))
            .header("content-length", "2")
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(short.status, 400, "{}", short.text);
    // A replaced name spends bytes, not another output file. An attempt at
    // a new name that was paid for spends one, kept or not (report, tool,
    // x: three of four); big.txt's payment was refused whole.
    let again = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/report.md", b"#2").await;
    assert_eq!(again.status, 201, "{}", again.text);
    let fourth = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/notes.txt", b"n").await;
    assert_eq!(fourth.status, 201, "{}", fourth.text);
    let fifth = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/more.txt", b"m").await;
    assert_eq!((fifth.status, reason(&fifth).as_str()), (403, "budget_output_files_exhausted"));
    // The session holds exactly what was accepted; the output is the user's.
    let reader = run(&node, "t1", "u1", &[], &["out-1"], "out-2").await;
    let listed = as_run(&node, &reader, "GET", "/v1/sessions/out-1/files", b"").await.json();
    let names: Vec<&str> =
        listed["items"].as_array().unwrap().iter().filter_map(|f| f["name"].as_str()).collect();
    assert_eq!(names, ["notes.txt", "report.md"], "{listed}");
    let read = as_run(&node, &reader, "GET", "/v1/sessions/out-1/files/report.md", b"").await;
    assert_eq!((read.status, read.text.as_str()), (200, "#2"));
    let not_granted = as_run(&node, &reader, "GET", "/v1/sessions/out-9/files", b"").await;
    assert_eq!(reason(&not_granted), "scope_session_not_granted");
    let stranger = run(&node, "t1", "u2", &[], &["out-1"], "out-3").await;
    let listed = as_run(&node, &stranger, "GET", "/v1/sessions/out-1/files", b"").await.json();
    assert_eq!(listed["items"], json!([]), "another user's session of the same id is not theirs");
    let other_tenant = run(&node, "t2", "u1", &[&brief_id], &["out-1"], "out-4").await;
    let refused = as_run(&node, &other_tenant, "GET", &format!("/v1/files/{brief_id}"), b"").await;
    assert_eq!((refused.status, reason(&refused).as_str()), (404, "file_unknown"));
    let listed = as_run(&node, &other_tenant, "GET", "/v1/sessions/out-1/files", b"").await.json();
    assert_eq!(listed["items"], json!([]));

    // The record: the refused upload is a content_refused event of the run.
    let refusals = refusals(&node).await;
    let content =
        refusals.iter().find(|r| r["kind"] == "content_refused").unwrap_or_else(|| panic!("{refusals:?}"));
    assert_eq!(content["reason"], "content_executable");
    assert!(content["run_id"].is_string(), "{content}");
    // On disk: objects named by namespace and id only, and exactly one per
    // kept file (the replaced and refused ones are gone).
    let objects = files_under(&node.data.path().join("objects"));
    let names: Vec<String> =
        objects.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(objects.len(), 6, "four inputs and two outputs: {names:?}");
    assert!(names.iter().all(|n| n.starts_with("file_")), "{names:?}");
    // The platform reads records and deletes inputs, by tenant.
    let meta = get(&node, &format!("/v1/tenants/t1/files/{brief_id}")).await;
    assert_eq!(meta.json()["name"], "brief.txt");
    assert_eq!(get(&node, &format!("/v1/tenants/t2/files/{brief_id}")).await.status, 404);
    let deleted = send(
        &node.router,
        Request::delete(format!("/v1/tenants/t1/files/{other_id}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(deleted.json(), json!({"deleted": true}));
}

#[tokio::test]
async fn bad_platform_requests_store_nothing() {
    let node = node().await;
    for query in [
        "user_id=u1&resource=r&name=../x",
        "user_id=u1&resource=r",
        "user_id=u1&resource=r&name=a&extra=1",
        "user_id=u%2F1&resource=r&name=a",
        "tenant_id=t1&user_id=u1&resource=r&name=",
    ] {
        let refused = store_input(&node, query, b"content").await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.text);
    }
    let refused =
        store_input(&node, "tenant_id=t1&user_id=u1&resource=r&name=x.exe", b"\x7fELF\x02\x01\x01").await;
    assert_eq!((refused.status, reason(&refused).as_str()), (403, "content_executable"));
    let no_grant = send(&node.router, Request::get("/v1/files/file_x").body(Body::empty()).unwrap()).await;
    assert_eq!((no_grant.status, reason(&no_grant).as_str()), (401, "grant_malformed"));
    let service_token = send(
        &node.router,
        Request::get("/v1/files/file_x")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(service_token.status, 403, "the service token is not a run's grant: {}", service_token.text);
    assert!(files_under(&node.data.path().join("objects")).is_empty(), "nothing was kept");
}

/// Every file under `root`, at any depth.
fn files_under(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
