//! Files through grants, in process on the local filesystem: the platform
//! stores inputs; a run's sandbox, with its grant, reads exactly its inputs
//! and sessions and writes only its output session, every budget counted.

use axum::body::Body;
use gatehouse_core::Clock as _;
use http::Request;
use serde_json::json;

use crate::support::*;

/// `POST /v1/files` as the platform: `query` then the content.
pub(crate) async fn store_input(node: &Node, query: &str, content: &[u8]) -> Reply {
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

/// Two conversations of one user share no session: a run of each reads
/// and writes its conversation's own; a run of neither sees neither.
#[tokio::test]
async fn two_conversations_of_one_user_share_no_session() {
    let node = node().await;
    let in_conversation = |conversation: Option<&str>, reads: &[&str], output: &str| {
        let mut body = json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "read_sessions": reads,
            "output_session_id": output, "budgets": {"max_upload_bytes": 100, "max_output_files": 4}});
        if let Some(c) = conversation {
            body["conversation_id"] = json!(c);
        }
        let node = &node;
        async move {
            let created = call(node, "/v1/runs", body).await;
            assert_eq!(created.status, 201, "{}", created.text);
            created.json()["grant"].as_str().unwrap().to_owned()
        }
    };
    let a = in_conversation(Some("conv-a"), &[], "out-1").await;
    assert_eq!(as_run(&node, &a, "PUT", "/v1/sessions/out-1/files/notes.md", b"from a").await.status, 201);
    let b = in_conversation(Some("conv-b"), &[], "out-1").await;
    assert_eq!(as_run(&node, &b, "PUT", "/v1/sessions/out-1/files/notes.md", b"from b").await.status, 201);
    for (conversation, expected) in [(Some("conv-a"), "from a"), (Some("conv-b"), "from b")] {
        let reader = in_conversation(conversation, &["out-1"], "out-2").await;
        let read = as_run(&node, &reader, "GET", "/v1/sessions/out-1/files/notes.md", b"").await;
        assert_eq!((read.status, read.text.as_str()), (200, expected), "{conversation:?}");
    }
    let neither = in_conversation(None, &["out-1"], "out-2").await;
    let listed = as_run(&node, &neither, "GET", "/v1/sessions/out-1/files", b"").await.json();
    assert_eq!(listed["items"], json!([]), "{listed}");
}

/// A live run of `tenant`/`user` with these scopes; returns its grant.
async fn run(node: &Node, tenant: &str, user: &str, inputs: &[&str], reads: &[&str], output: &str) -> String {
    run_and_id(node, tenant, user, inputs, reads, output).await.1
}

/// [`run`], and the run's id.
async fn run_and_id(
    node: &Node,
    tenant: &str,
    user: &str,
    inputs: &[&str],
    reads: &[&str],
    output: &str,
) -> (String, String) {
    let created = call(
        node,
        "/v1/runs",
        json!({"tenant_id": tenant, "user_id": user, "body": {"code": "x"}, "input_files": inputs,
            "read_sessions": reads, "output_session_id": output,
            "budgets": {"max_requests": 10, "max_upload_bytes": 100, "max_output_files": 4}}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let run = created.json();
    (run["run_id"].as_str().unwrap().to_owned(), run["grant"].as_str().unwrap().to_owned())
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
    // Who kept and deleted what is in the audit log, by caller and run.
    let audit = get(&node, "/v1/audit?limit=500").await.json();
    let entries = audit["items"].as_array().unwrap();
    let by = |action: &str| entries.iter().find(|e| e["action"] == action).map(|e| e["actor"].clone());
    assert_eq!(by("file.store"), Some(json!("service")), "{audit}");
    assert_eq!(by("file.delete"), Some(json!("service")), "{audit}");
    assert!(
        by("file.upload").is_some_and(|a| a.as_str().is_some_and(|a| a.starts_with("run:run_"))),
        "{audit}"
    );
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
pub(crate) fn files_under(root: &std::path::Path) -> Vec<std::path::PathBuf> {
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

/// A run of t1/u1 created through the API of a `gatehouse serve` at `api`,
/// with `max_upload_bytes` and five output files: its grant.
pub(crate) fn served_run(
    api: &str,
    inputs: &[&str],
    reads: &[&str],
    output: &str,
    max_upload_bytes: u64,
) -> String {
    let run = crate::proxy::api(
        api,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": "t1", "user_id": "u1", "body": {"code": "x"}, "input_files": inputs,
            "read_sessions": reads, "output_session_id": output,
            "budgets": {"max_upload_bytes": max_upload_bytes, "max_output_files": 5}}),
    );
    run["grant"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned()
}

/// curl against a node's API: the answer's status line and body.
pub(crate) fn curl(args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or_default();
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// The same life on a real S3-compatible server, through `gatehouse serve`
/// (which ignores the proxy settings in its environment for its storage
/// as for everything else), and an S3 outage: refused, nothing recorded.
#[test]
fn on_s3_a_run_reads_its_input_and_writes_its_output_and_an_outage_keeps_nothing() {
    let mut s3 = gatehouse_test_support::S3Server::start();
    s3.create_bucket("gatehouse-it");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = crate::proxy::door(tmp.path());
    c.env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_OBJECT_STORE_URL", "s3://gatehouse-it/files")
        .envs(s3.env());
    let (server, api, _, mut log) = crate::cli::spawn_server(c);
    // Sends `content` with `auth`; a status other than `want` fails the
    // test with the server's log, where the store's own error is.
    let mut server = Some(server);
    let mut send_file = |method: &str, auth: &str, content: &str, url: String, want: u16| {
        let (status, body) = curl(&["-X", method, "-H", auth, "--data-binary", content, &url]);
        if status != want {
            drop(server.take());
            panic!(
                "{status} {body}\n{}",
                std::mem::replace(&mut log, std::thread::spawn(String::new)).join().unwrap()
            );
        }
        (status, body)
    };
    let service = format!("authorization: Bearer {TOKEN}");
    let url = format!("http://{api}/v1/files?tenant_id=t1&user_id=u1&resource=r1&name=brief.txt");
    let (_, stored) = send_file("POST", &service, "the brief", url, 201);
    let file_id =
        serde_json::from_str::<serde_json::Value>(&stored).unwrap()["file_id"].as_str().unwrap().to_owned();
    let new_run = |inputs: &[&str], reads: &[&str], output: &str| {
        format!("authorization: Bearer {}", served_run(&api, inputs, reads, output, 1000))
    };
    let writer = new_run(&[&file_id], &[], "out-1");
    let (status, body) = curl(&["-H", &writer, &format!("http://{api}/v1/files/{file_id}")]);
    assert_eq!((status, body.as_str()), (200, "the brief"));
    send_file("PUT", &writer, "# report", format!("http://{api}/v1/sessions/out-1/files/report.md"), 201);
    let reader = new_run(&[], &["out-1"], "out-2");
    let (status, body) = curl(&["-H", &reader, &format!("http://{api}/v1/sessions/out-1/files/report.md")]);
    assert_eq!((status, body.as_str()), (200, "# report"));
    let keys = s3.keys("gatehouse-it");
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("files/ns/sk1_") && k.contains("/file_")), "{keys:?}");

    // The store goes away: uploads and reads are refused as an outage,
    // and nothing is recorded as stored.
    s3.stop();
    let (_, body) =
        send_file("PUT", &writer, "lost", format!("http://{api}/v1/sessions/out-1/files/lost.md"), 503);
    assert!(body.contains("storage_unavailable"), "{body}");
    let (status, body) = curl(&["-H", &writer, &format!("http://{api}/v1/files/{file_id}")]);
    assert!(status == 503 && body.contains("storage_unavailable"), "{status} {body}");
    let (status, body) = curl(&["-H", &reader, &format!("http://{api}/v1/sessions/out-1/files")]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("report.md") && !body.contains("lost.md"), "{body}");
}

/// Past the retention a session is deleted with its files, unless its user
/// has a live run (which may hold it); an object without a record is
/// removed; a second pass finds nothing; one node at a time holds the lease.
#[tokio::test]
async fn the_sweeper_deletes_stale_sessions_and_orphans_but_never_a_held_session() {
    use gatehouse_files::{ObjectPath, Storage};
    let node = node().await;
    let (store, storage): (&gatehouse_store::Store, &Storage) =
        (node.state.plane.store.as_ref().unwrap(), node.state.plane.storage.as_ref().unwrap());
    let (ended_run, grant) = run_and_id(&node, "t1", "u1", &[], &[], "out-1").await;
    let put = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/a.txt", b"aaaa").await;
    assert_eq!(put.status, 201, "{}", put.text);
    let swept_id = put.json()["file_id"].as_str().unwrap().to_owned();
    let live = run(&node, "t1", "u2", &[], &[], "out-9").await;
    let put = as_run(&node, &live, "PUT", "/v1/sessions/out-9/files/b.txt", b"b").await;
    assert_eq!(put.status, 201, "{}", put.text);
    let held_id = put.json()["file_id"].as_str().unwrap().to_owned();
    let ended = call(&node, &format!("/v1/runs/{ended_run}/end"), json!({"outcome": "succeeded"})).await;
    assert_eq!(ended.status, 200, "{}", ended.text);
    // An object whose record was never written (a crash between the two).
    let orphan =
        ObjectPath::new("sk1_OOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOO", &gatehouse_core::new_id("file"))
            .unwrap();
    let mut upload = storage.begin(&orphan).await.unwrap();
    upload.write(bytes::Bytes::from_static(b"orphan")).await.unwrap();
    upload.finish().await.unwrap();
    let wall = || gatehouse_core::SystemClock.now();
    let sweep = |now| gatehouse_plane::files::sweep(store, storage, 30, now, wall());
    // Younger than the grace (an upload between its object and its
    // record), it stays; two hours old, it goes.
    assert_eq!(sweep(node.clock.now()).await.unwrap(), Default::default());
    let on_disk = node.data.path().join("objects").join(orphan.to_string());
    let aged =
        std::process::Command::new("touch").arg("-d").arg("2 hours ago").arg(&on_disk).status().unwrap();
    assert!(aged.success(), "{}", on_disk.display());

    // Within the retention no session goes.
    let report = sweep(node.clock.now()).await.unwrap();
    assert_eq!((report.sessions, report.files, report.orphans), (0, 0, 1));
    let left = files_under(&node.data.path().join("objects"));
    assert_eq!(left.len(), 2, "the two kept files, not the orphan: {left:?}");

    node.clock.advance(31 * 86_400);
    let report = sweep(node.clock.now()).await.unwrap();
    assert_eq!((report.sessions, report.files, report.bytes, report.orphans), (1, 1, 4, 0));
    assert_eq!(store.file(Some("t1"), &swept_id).await.unwrap(), None);
    assert!(
        store.file(Some("t1"), &held_id).await.unwrap().is_some(),
        "a live run's user keeps their sessions"
    );
    let left = files_under(&node.data.path().join("objects"));
    assert_eq!(left.len(), 1, "{left:?}");
    let again = sweep(node.clock.now()).await.unwrap();
    assert_eq!(again, Default::default(), "a second pass finds nothing");
    let audit = get(&node, "/v1/audit?limit=500").await.json().to_string();
    assert!(audit.contains("file_session.swept"), "{audit}");

    // One node at a time: the lease holds until it expires.
    let t = node.clock.now();
    assert!(store.claim_maintenance("file-sweeper-test", "node-a", t, t + 60).await.unwrap());
    assert!(!store.claim_maintenance("file-sweeper-test", "node-b", t + 30, t + 90).await.unwrap());
    assert!(store.claim_maintenance("file-sweeper-test", "node-a", t + 30, t + 90).await.unwrap());
    assert!(store.claim_maintenance("file-sweeper-test", "node-b", t + 90, t + 150).await.unwrap());
}

/// Two uploads of one name at once: both are taken in whole, one replaces
/// the other, and exactly one object remains for the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_uploads_of_one_name_at_once_leave_one_whole_file() {
    let node = node().await;
    let grant = run(&node, "t1", "u1", &[], &[], "out-1").await;
    let first = vec![b'1'; 40];
    let second = vec![b'2'; 40];
    let (a, b) = tokio::join!(
        as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/same.txt", &first),
        as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/same.txt", &second),
    );
    assert_eq!((a.status, b.status), (201, 201), "{} {}", a.text, b.text);
    let reader = run(&node, "t1", "u1", &[], &["out-1"], "out-2").await;
    let listed = as_run(&node, &reader, "GET", "/v1/sessions/out-1/files", b"").await.json();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");
    let read = as_run(&node, &reader, "GET", "/v1/sessions/out-1/files/same.txt", b"").await;
    assert!(read.text == "1".repeat(40) || read.text == "2".repeat(40), "whole, never mixed: {}", read.text);
    assert_eq!(
        listed["items"][0]["file_id"],
        if read.text.starts_with('1') { &a } else { &b }.json()["file_id"]
    );
    assert_eq!(
        files_under(&node.data.path().join("objects")).len(),
        1,
        "the replaced upload's object is gone"
    );
}

/// With clamd, an upload is kept only when clamd says it is clean: EICAR is
/// refused (`content_malware`, the signature recorded) and never stored.
#[tokio::test]
async fn with_clamd_an_infected_upload_is_never_stored() {
    use gatehouse_test_support::{ClamdServer, EICAR};
    let clamd = ClamdServer::start();
    let port = clamd.port().to_string();
    let node = node_with(
        "all",
        &[
            (gatehouse_config::names::CLAMD_HOST, "127.0.0.1"),
            (gatehouse_config::names::CLAMD_PORT, port.as_str()),
        ],
    )
    .await;
    let grant = run(&node, "t1", "u1", &[], &[], "out-1").await;
    let clean = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/clean.txt", b"just text\n").await;
    assert_eq!((clean.status, clean.json()["verdict"].as_str()), (201, Some("clean")), "{}", clean.text);
    let infected = as_run(&node, &grant, "PUT", "/v1/sessions/out-1/files/eicar.txt", EICAR).await;
    assert_eq!((infected.status, reason(&infected).as_str()), (403, "content_malware"), "{}", infected.text);
    let refusal = refusals(&node).await.into_iter().find(|r| r["reason"] == "content_malware").unwrap();
    assert_eq!(refusal["kind"], "content_refused");
    assert!(refusal["rule"].as_str().is_some_and(|s| s.contains("Eicar")), "{refusal}");
    let stored = files_under(&node.data.path().join("objects"));
    assert_eq!(stored.len(), 1, "only the clean file: {stored:?}");
    assert!(!std::fs::read(&stored[0]).unwrap().windows(8).any(|w| w == &EICAR[..8]));
}

/// A client that declares a megabyte, sends a tenth of it and hangs up, over
/// a real socket to `gatehouse serve`: nothing is listed, nothing is left on
/// disk (the staged object is removed), and the bytes paid for stay paid.
#[test]
#[allow(clippy::disallowed_methods, reason = "a test client talking to the server under test on loopback")]
fn an_upload_cut_off_mid_stream_leaves_nothing() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut c = crate::proxy::door(tmp.path());
    c.env("GATEHOUSE_DATA_DIR", &data);
    let (_server, api, _, _log) = crate::cli::spawn_server(c);
    assert!(data.join("objects").is_dir(), "the store is where this test looks");
    let writer = served_run(&api, &[], &[], "out-1", 2_000_000);
    let mut conn = std::net::TcpStream::connect(&api).unwrap();
    write!(
        conn,
        "PUT /v1/sessions/out-1/files/big.txt HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {writer}\r\n\
         content-length: 1000000\r\n\r\n"
    )
    .unwrap();
    conn.write_all(&[b'a'; 100_000]).unwrap();
    conn.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(conn);

    let reader = format!("authorization: Bearer {}", served_run(&api, &[], &["out-1"], "out-2", 2_000_000));
    let mut listing = String::new();
    let gone = crate::plane::within(std::time::Duration::from_secs(5), || {
        let (status, body) = curl(&["-H", &reader, &format!("http://{api}/v1/sessions/out-1/files")]);
        listing = body;
        status == 200 && files_under(&data.join("objects")).is_empty()
    });
    assert!(gone.is_some(), "left on disk: {:?}; listed: {listing}", files_under(&data.join("objects")));
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(listing["items"], json!([]), "nothing half-written is listed");
    // The declared million was spent before a byte was read: a second
    // upload of that size no longer fits the budget of two million.
    let writer = format!("authorization: Bearer {writer}");
    let again = tmp.path().join("again.txt");
    std::fs::write(&again, "b".repeat(1_000_001)).unwrap();
    let (status, body) = curl(&[
        "-X",
        "PUT",
        "-H",
        &writer,
        "--data-binary",
        &format!("@{}", again.display()),
        &format!("http://{api}/v1/sessions/out-1/files/again.txt"),
    ]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("budget_upload_bytes_exhausted"), "{body}");
}
