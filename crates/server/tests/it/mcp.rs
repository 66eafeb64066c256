//! MCP at the door, its declarations: `PUT`/`GET
//! /v1/tenants/{t}/mcp-servers`, versioned and audited like the policy.

use serde_json::json;

use crate::support::{get, node, put};

#[tokio::test]
async fn a_tenant_declares_its_mcp_servers_in_versions_each_audited() {
    let node = node().await;
    let none = get(&node, "/v1/tenants/t1/mcp-servers").await;
    assert_eq!(none.status, 200, "{}", none.text);
    assert_eq!(none.json(), json!({"tenant_id": "t1", "version": 0, "servers": []}));

    let servers = json!({"servers": [
        {"name": "tools", "url": "https://MCP.example.com/a/../mcp", "tools": {"allow": ["echo", "big"], "deny": ["big"]}},
        {"name": "docs", "url": "http://127.0.0.1:8931/mcp"},
    ]});
    let set = put(&node, "/v1/tenants/t1/mcp-servers", servers.clone()).await;
    assert_eq!((set.status, set.json()["version"].clone()), (200, json!(1)), "{}", set.text);
    let read = get(&node, "/v1/tenants/t1/mcp-servers").await.json();
    assert_eq!(read["version"], 1);
    assert_eq!(read["servers"][0]["tools"], json!({"allow": ["echo", "big"], "deny": ["big"]}));
    assert_eq!(read["servers"][1]["tools"], json!({}), "no rules: every tool");
    assert!(read["actor"].is_string() && read["created_at"].is_number(), "{read}");
    let again = put(&node, "/v1/tenants/t1/mcp-servers", json!({"servers": []})).await;
    assert_eq!(again.json()["version"], 2);
    // Another tenant's are its own.
    assert_eq!(get(&node, "/v1/tenants/t2/mcp-servers").await.json()["version"], 0);

    // Each declaration is in the audit log with its document.
    let audit = get(&node, "/v1/audit?limit=100").await.json();
    let set: Vec<&serde_json::Value> =
        audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "mcp_servers.set").collect();
    assert_eq!(set.len(), 2, "{audit}");
    assert!(set.iter().any(|e| e["detail"]["servers"]["servers"][0]["name"] == "tools"), "{set:?}");
}

#[tokio::test]
async fn a_declaration_that_does_not_read_one_way_is_refused_whole() {
    let node = node().await;
    let server =
        |name: &str, url: &str, tools: serde_json::Value| json!({"name": name, "url": url, "tools": tools});
    for bad in [
        json!({"servers": [server("a b", "https://x.example/mcp", json!({}))]}),
        json!({"servers": [server("a", "ftp://x.example/mcp", json!({}))]}),
        json!({"servers": [server("a", "https://user:pw@x.example/mcp", json!({}))]}),
        json!({"servers": [server("a", "https://x.example/a%2Fmcp", json!({}))]}),
        json!({"servers": [server("a", "https://x.example/mcp", json!({"deny": ["two words"]}))]}),
        json!({"servers": [server("a", "https://x.example/mcp", json!({"only": ["x"]}))]}),
        json!({"servers": [server("a", "https://x.example/mcp", json!({})), server("a", "https://y.example/mcp", json!({}))]}),
        json!({"servers": [server("a", "https://x.example/mcp", json!({})), server("b", "https://X.example/MCP/", json!({}))]}),
        json!({"servers": {}}),
        json!({}),
    ] {
        let refused = put(&node, "/v1/tenants/t1/mcp-servers", bad.clone()).await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.text);
        assert!(!refused.text.contains("user:pw"), "no fragment of the input is echoed");
    }
    assert_eq!(get(&node, "/v1/tenants/t1/mcp-servers").await.json()["version"], 0, "nothing was stored");
}

#[tokio::test]
async fn a_run_takes_a_tool_call_budget_its_ledger_spends() {
    let node = node().await;
    let run = crate::support::call(
        &node,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {}, "budgets": {"max_requests": 10, "max_tool_calls": 2}}),
    )
    .await
    .json();
    let grant = run["grant"].as_str().unwrap_or_else(|| panic!("{run}")).to_owned();
    let consume = || async {
        crate::support::call(
            &node,
            "/v1/grants/consume",
            json!({"token": grant, "operation": {"kind": "tool_call"}}),
        )
        .await
        .json()
    };
    assert_eq!(consume().await["remaining"]["tool_calls"], 1);
    assert_eq!(consume().await["remaining"]["tool_calls"], 0);
    assert_eq!(consume().await, json!({"allowed": false, "reason": "budget_tool_calls_exhausted"}));
    let read = get(&node, &format!("/v1/runs/{}", run["run_id"].as_str().unwrap())).await.json();
    assert_eq!(read["ledger"]["tool_call_count"], 2, "the run's ledger shows its tool calls: {read}");
    assert_eq!(read["ledger"]["budgets"]["max_tool_calls"], 2);
    assert_eq!(read["ledger"]["request_count"], 2, "each tool call is a request too");
    // The refusal is recorded as a spent budget.
    let refusals = get(&node, "/v1/refusals?reason=budget_tool_calls_exhausted").await.json();
    assert_eq!(refusals["items"][0]["kind"], "budget_exhausted", "{refusals}");
}

/// A node that may reach loopback servers, with tenant t1's MCP servers
/// declared as `servers`.
async fn node_declaring(servers: serde_json::Value) -> crate::support::Node {
    let node = crate::support::node_with("all", &[("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.1/32")]).await;
    declare(&node, servers).await;
    node
}

/// Declares tenant t1's MCP servers.
async fn declare(node: &crate::support::Node, servers: serde_json::Value) {
    let declared = put(node, "/v1/tenants/t1/mcp-servers", json!({ "servers": servers })).await;
    assert_eq!(declared.status, 200, "{}", declared.text);
}

/// A run's JSON-RPC body sent to `url` through the fetch API: the status,
/// the content type and the answer's body.
async fn mcp_fetch(
    node: &crate::support::Node,
    grant: &str,
    url: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let reply = crate::support::call(
        node,
        "/v1/egress/fetch",
        json!({"grant": grant, "method": "POST", "url": url, "purpose": "runtime",
            "headers": [["content-type", "application/json"], ["accept", "application/json, text/event-stream"]],
            "body_base64": b64.encode(body)}),
    )
    .await;
    let answer = reply.json();
    let Some(encoded) = answer["body_base64"].as_str() else { return (reply.status, answer) };
    let text = String::from_utf8(b64.decode(encoded).unwrap()).unwrap();
    (answer["status"].as_u64().unwrap() as u16, json!(text))
}

/// The JSON-RPC messages of an answer: the JSON itself, or each SSE event's data.
fn messages(text: &serde_json::Value) -> Vec<serde_json::Value> {
    let text = text.as_str().unwrap();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Array(items)) => items,
        Ok(one) => vec![one],
        Err(_) => text
            .split("\n\n")
            .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
            .filter(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).unwrap())
            .collect(),
    }
}

fn tool_names(message: &serde_json::Value) -> Vec<&str> {
    message["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn the_fetch_api_reads_a_runs_mcp_messages_with_the_real_sdk_server() {
    use gatehouse_test_support::{McpAnswers, McpServer};
    let json_server = McpServer::start(McpAnswers::Json);
    let sse_server = McpServer::start(McpAnswers::Sse);
    let node = node_declaring(json!([
        {"name": "tools", "url": json_server.url(), "tools": {"allow": ["echo", "big"]}},
        {"name": "stream", "url": sse_server.url(), "tools": {"deny": ["rm"]}},
    ]))
    .await;
    let run = crate::support::call(
        &node,
        "/v1/runs",
        json!({"tenant_id": "t1", "user_id": "u1", "body": {}, "budgets": {"max_tool_calls": 2}}),
    )
    .await
    .json();
    let (run_id, grant) =
        (run["run_id"].as_str().unwrap().to_owned(), run["grant"].as_str().unwrap().to_owned());
    let call = |id: u64, tool: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"text": "hi", "kib": 64}}})
            .to_string()
    };

    // The list names only the tools the run may call, JSON and SSE alike.
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let (status, answer) = mcp_fetch(&node, &grant, &json_server.url(), list).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(tool_names(&messages(&answer)[0]), ["echo", "big"]);
    let (_, answer) = mcp_fetch(&node, &grant, &sse_server.url(), list).await;
    assert!(answer.as_str().unwrap().contains("event: message"), "an SSE answer stays SSE: {answer}");
    assert_eq!(tool_names(&messages(&answer)[0]), ["echo", "big", "slow"], "rm denied");

    // An allowed call reaches the server; a denied one never does and is
    // answered for its id; the call past the budget too.
    let (_, answer) = mcp_fetch(&node, &grant, &json_server.url(), &call(2, "echo")).await;
    assert!(
        messages(&answer)[0]["result"]["content"][0]["text"].as_str().unwrap().contains("\"text\":\"hi\""),
        "{answer}"
    );
    let (status, answer) = mcp_fetch(&node, &grant, &json_server.url(), &call(3, "rm")).await;
    assert_eq!(status, 200);
    assert_eq!(
        messages(&answer)[0],
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32003, "message": "gatehouse: this tool is not allowed for this run",
            "data": {"reason": "mcp_tool_denied", "tool": "rm"}}})
    );
    let (_, answer) = mcp_fetch(&node, &grant, &json_server.url(), &call(4, "big")).await;
    assert_eq!(messages(&answer)[0]["result"]["content"][0]["text"].as_str().unwrap().len(), 64 * 1024);
    let (_, answer) = mcp_fetch(&node, &grant, &json_server.url(), &call(5, "echo")).await;
    assert_eq!(
        messages(&answer)[0]["error"]["data"],
        json!({"reason": "budget_tool_calls_exhausted", "tool": "echo"})
    );

    // A batch to the SSE server: what is allowed goes on, the refused call
    // is answered beside the server's stream.
    let batch = format!("[{list},{}]", call(6, "rm"));
    let (_, answer) = mcp_fetch(&node, &grant, &sse_server.url(), &batch).await;
    let answered = messages(&answer);
    assert_eq!(answered.len(), 2, "{answer}");
    assert!(
        answered.iter().any(|m| m["id"] == 6 && m["error"]["data"]["reason"] == "mcp_tool_denied"),
        "{answer}"
    );
    assert!(answered.iter().any(|m| m["id"] == 1 && tool_names(m) == ["echo", "big", "slow"]), "{answer}");

    // The streamed route reads a declared server's messages whole too.
    let raw = |body: String| {
        let uri = format!("/v1/egress/fetch/raw?url={}&purpose=runtime&method=POST", json_server.url());
        http::Request::post(uri)
            .header("authorization", format!("Bearer {}", crate::support::TOKEN))
            .header("x-gatehouse-grant", grant.as_str())
            .header("x-gatehouse-header", "content-type: application/json")
            .header("x-gatehouse-header", "accept: application/json, text/event-stream")
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    let listed = crate::support::send(&node.router, raw(list.to_owned())).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(tool_names(&messages(&json!(listed.text))[0]), ["echo", "big"]);
    let denied = crate::support::send(&node.router, raw(call(8, "rm"))).await;
    assert_eq!(
        messages(&json!(denied.text))[0]["error"]["data"]["reason"],
        "mcp_tool_denied",
        "{}",
        denied.text
    );

    // Not JSON-RPC: refused, nothing sent.
    let refused = crate::support::call(
        &node,
        "/v1/egress/fetch",
        json!({"grant": grant, "method": "POST", "url": json_server.url(), "purpose": "runtime",
            "headers": [["content-type", "application/json"]], "body_base64": "bm90IGpzb24="}),
    )
    .await;
    assert_eq!(refused.json()["error"]["reason"], "mcp_message_invalid", "{}", refused.text);

    // Each refused call is a refusal and a run event naming the tool.
    let refusals = get(&node, &format!("/v1/refusals?run_id={run_id}&reason=mcp_tool_denied")).await.json();
    assert_eq!(refusals["items"].as_array().unwrap().len(), 3, "{refusals}");
    let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let tools: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_call_refused")
        .filter_map(|e| e["rule"].as_str())
        .collect();
    assert_eq!(tools.len(), 4, "{events}");
    assert!(tools.contains(&"rm") && tools.contains(&"echo"), "{tools:?}");
    let ledger = get(&node, &format!("/v1/runs/{run_id}")).await.json()["ledger"].clone();
    assert_eq!(ledger["tool_call_count"], 2, "{ledger}");
    let metrics = get(&node, "/metrics").await.text;
    for line in [
        "gatehouse_mcp_tool_calls_total{outcome=\"allowed\"} 2",
        "gatehouse_mcp_tool_calls_total{outcome=\"mcp_tool_denied\"} 3",
        "gatehouse_mcp_tool_calls_total{outcome=\"budget_tool_calls_exhausted\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

/// The SDK's own client (`crates/test-support/mcp/client.mjs`) through the
/// proxy: what it lists, and each call's text or error, as one JSON value.
async fn sdk_client(url: &str, proxy: &str, tools: &[&str]) -> serde_json::Value {
    sdk_client_trusting(url, proxy, tools, None).await
}

/// [`sdk_client`], trusting the CA in `ca_file` too (the run's
/// interception CA, for a server gatehouse terminates).
async fn sdk_client_trusting(
    url: &str,
    proxy: &str,
    tools: &[&str],
    ca_file: Option<&std::path::Path>,
) -> serde_json::Value {
    let mut args = vec!["client.mjs".to_owned(), url.to_owned(), proxy.to_owned()];
    args.extend(tools.iter().map(|t| (*t).to_owned()));
    let ca_file = ca_file.map(std::path::Path::to_owned);
    let out = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new("node");
        if let Some(ca) = ca_file {
            command.env("NODE_EXTRA_CA_CERTS", ca);
        }
        command
            .args(&args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../test-support/mcp"))
            .output()
            .expect("node (Node.js) is installed")
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(said.trim()).unwrap_or_else(|_| panic!("{said}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_through_the_proxy_sees_only_what_the_run_may_call() {
    use gatehouse_test_support::{McpAnswers, McpServer};
    use sha2::Digest as _;
    let secret = "mcp-lease-secret-never-shown-5b1c";
    let json_server = McpServer::start(McpAnswers::Json);
    let sse_server = McpServer::start(McpAnswers::Sse);
    let node = node_declaring(json!([
        {"name": "tools", "url": json_server.url(), "tools": {"allow": ["echo", "big"]}},
        {"name": "stream", "url": sse_server.url(), "tools": {"deny": ["rm"]}},
    ]))
    .await;
    let credential = crate::support::call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "mcp", "purpose": "mcp_server", "host": "127.0.0.1", "allow_plain_http": true,
            "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": secret}),
    )
    .await
    .json();
    let proxy = crate::support::serve_proxy(&node).await;
    let new_run = || async {
        let run = crate::support::call(
            &node,
            "/v1/runs",
            json!({"tenant_id": "t1", "user_id": "u1", "body": {}, "budgets": {"max_tool_calls": 2}}),
        )
        .await
        .json();
        let run_id = run["run_id"].as_str().unwrap().to_owned();
        let leased = crate::support::call(
            &node,
            &format!("/v1/runs/{run_id}/leases"),
            json!({"credential_id": credential["credential_id"], "purpose": "mcp_server", "host": "127.0.0.1"}),
        )
        .await;
        assert_eq!(leased.status, 201, "{}", leased.text);
        (run_id, format!("http://grant:{}@{proxy}", run["grant"].as_str().unwrap()))
    };

    // JSON answers: the list narrowed by the allow list; echo carries the
    // leased credential (the server saw it; its echo comes back scrubbed);
    // rm never reaches the server; the third call is past the budget.
    let (run_id, via) = new_run().await;
    let seen = sdk_client(&json_server.url(), &via, &["echo", "rm", "big", "echo"]).await;
    assert_eq!(seen["tools"], json!(["echo", "big"]), "{seen}");
    let echoed: serde_json::Value = serde_json::from_str(seen["calls"][0]["text"].as_str().unwrap()).unwrap();
    let expected = hex::encode(sha2::Sha256::digest(format!("Bearer {secret}")));
    assert_eq!(echoed["authorization_sha256"], expected.as_str(), "{seen}");
    assert!(!seen.to_string().contains(secret), "the run never sees the secret: {seen}");
    assert_eq!(seen["calls"][1]["code"], -32003, "{seen}");
    assert_eq!(seen["calls"][1]["data"], json!({"reason": "mcp_tool_denied", "tool": "rm"}));
    assert_eq!(seen["calls"][2]["length"], 64 * 1024, "the large result passes whole: {seen}");
    assert_eq!(seen["calls"][3]["data"], json!({"reason": "budget_tool_calls_exhausted", "tool": "echo"}));

    // SSE answers, narrowed as they stream.
    let (_, via) = new_run().await;
    let seen = sdk_client(&sse_server.url(), &via, &["rm", "big"]).await;
    assert_eq!(seen["tools"], json!(["echo", "big", "slow"]), "{seen}");
    assert_eq!(seen["calls"][0]["data"], json!({"reason": "mcp_tool_denied", "tool": "rm"}), "{seen}");
    assert_eq!(seen["calls"][1]["length"], 64 * 1024, "{seen}");

    // The same client through the fetch API (the platform sending each of
    // the run's requests to the raw route).
    let api = crate::support::serve_api(&node).await;
    let (_, via) = new_run().await;
    let grant = via.split_once("grant:").unwrap().1.split_once('@').unwrap().0.to_owned();
    let door = format!("fetch-api:http://{api}#{}#{grant}", crate::support::TOKEN);
    let seen = sdk_client(&json_server.url(), &door, &["echo", "rm"]).await;
    assert_eq!(seen["tools"], json!(["echo", "big"]), "{seen}");
    let echoed: serde_json::Value = serde_json::from_str(seen["calls"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        echoed["authorization_sha256"],
        expected.as_str(),
        "the lease applies at the fetch API too: {seen}"
    );
    assert_eq!(seen["calls"][1]["data"], json!({"reason": "mcp_tool_denied", "tool": "rm"}), "{seen}");

    // Sessions: a stateful server's Mcp-Session-Id, its GET stream and the
    // DELETE that ends it all pass through the door.
    let stateful = McpServer::stateful(McpAnswers::Sse);
    declare(
        &node,
        json!([
            {"name": "tools", "url": json_server.url(), "tools": {"allow": ["echo", "big"]}},
            {"name": "stream", "url": sse_server.url(), "tools": {"deny": ["rm"]}},
            {"name": "sessions", "url": stateful.url(), "tools": {"deny": ["rm"]}},
        ]),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, via) = new_run().await;
    let seen = sdk_client(&stateful.url(), &via, &["echo", "rm"]).await;
    assert_eq!(seen["tools"], json!(["echo", "big", "slow"]), "{seen}");
    assert!(seen["session"].is_string(), "{seen}");
    assert!(seen["calls"][0]["text"].as_str().unwrap().contains("\"text\":\"hi\""), "{seen}");
    assert_eq!(seen["calls"][1]["data"]["reason"], "mcp_tool_denied", "{seen}");
    let stats = stateful.stats();
    assert_eq!((stats["opened"].clone(), stats["ended"].clone()), (json!(1), json!(1)), "{stats}");
    assert!(stats["streams"].as_u64() >= Some(1), "the client's GET stream reached the server: {stats}");

    // Recorded: the refusals and the run's events name the tools.
    let events = get(&node, &format!("/v1/runs/{run_id}/events")).await.json();
    let refused: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_call_refused")
        .filter_map(|e| e["rule"].as_str())
        .collect();
    assert_eq!(refused.len(), 2, "{events}");
    let ledger = get(&node, &format!("/v1/runs/{run_id}")).await.json()["ledger"].clone();
    assert_eq!(ledger["tool_call_count"], 2, "{ledger}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_passes_event_by_event_and_bad_messages_never_reach_the_server() {
    use gatehouse_test_support::{McpAnswers, McpServer};
    let server = McpServer::start(McpAnswers::Sse);
    let node =
        node_declaring(json!([{"name": "stream", "url": server.url(), "tools": {"deny": ["rm"]}}])).await;
    let run =
        crate::support::call(&node, "/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}}))
            .await
            .json();
    let (run_id, grant) =
        (run["run_id"].as_str().unwrap().to_owned(), run["grant"].as_str().unwrap().to_owned());
    let proxy = crate::support::serve_proxy(&node).await;
    let via = format!("http://grant:{grant}@{proxy}");

    // A slow tool's answer streams: its first event (a log notification)
    // arrives while the server is still working, its result 1.5 s later.
    let (url, via_slow) = (server.url(), via.clone());
    let arrivals = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        let started = std::time::Instant::now();
        let mut curl = std::process::Command::new("curl")
            .args(["-s", "-N", "--max-time", "10", "-x", &via_slow, "-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream", "-d"])
            .arg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{}}}"#)
            .arg(&url)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(curl.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.starts_with("data: ") {
                seen.push((started.elapsed(), line));
            }
        }
        curl.wait().unwrap();
        seen
    })
    .await
    .unwrap();
    assert_eq!(arrivals.len(), 2, "{arrivals:?}");
    assert!(
        arrivals[0].1.contains("notifications/message") && arrivals[1].1.contains("\"done\""),
        "{arrivals:?}"
    );
    let (first, last) = (arrivals[0].0, arrivals[1].0);
    assert!(
        last.saturating_sub(first) >= std::time::Duration::from_millis(1000),
        "the first event was held back until the stream ended: {arrivals:?}"
    );

    // What is not a JSON-RPC message, or is one no server should be handed,
    // is refused at the door; nothing reaches the server, nothing is spent.
    let call = |id: usize, tool: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}"}}}}"#)
    };
    let huge_batch = format!("[{}]", (0..10_000).map(|i| call(i, "echo")).collect::<Vec<_>>().join(","));
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{}{}}}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    for (what, content_type, method, body) in [
        ("malformed JSON", "application/json", "POST", r#"{"jsonrpc":"2.0","id":1,"method":"#.to_owned()),
        ("a batch of 10,000 calls", "application/json", "POST", huge_batch),
        ("deeply nested params", "application/json", "POST", deep),
        ("not JSON at all", "text/plain", "POST", call(1, "echo")),
        ("a method MCP does not use", "application/json", "PUT", call(1, "echo")),
    ] {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &body).unwrap();
        let data = format!("@{}", file.path().display());
        let content_type = format!("content-type: {content_type}");
        let args = ["-x", &via, "-X", method, "-H", &content_type, "--data-binary", &data, &server.url()];
        let out = crate::support::sandbox_curl(&args).await;
        assert!(
            out.starts_with("HTTP/1.1 403") && out.contains("x-gatehouse-reason: mcp_message_invalid"),
            "{what}: {out}"
        );
    }
    let ledger = get(&node, &format!("/v1/runs/{run_id}")).await.json()["ledger"].clone();
    assert_eq!(ledger["tool_call_count"], 1, "only the slow call was paid: {ledger}");
    let refused =
        get(&node, &format!("/v1/refusals?run_id={run_id}&reason=mcp_message_invalid")).await.json();
    assert_eq!(refused["items"].as_array().unwrap().len(), 5, "{refused}");
}

/// A CA and a leaf for 127.0.0.1 it signed, made by openssl: the key, the
/// leaf and the CA's certificate, as PEM files in `dir`.
pub(crate) fn upstream_pki(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    upstream_pki_for(dir, &["127.0.0.1"])
}

/// As [`upstream_pki`], the leaf for each of `ips`.
pub(crate) fn upstream_pki_for(
    dir: &std::path::Path,
    ips: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=mcp test CA", "-days", "2"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1"]].concat());
    let names: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
    let ext = format!("subjectAltName={}\nbasicConstraints=CA:FALSE\n", names.join(","));
    std::fs::write(dir.join("leaf.ext"), ext).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (dir.join("leaf.key"), dir.join("leaf.pem"), dir.join("ca.pem"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_mcp_server_is_read_inside_the_tunnel_gatehouse_terminates() {
    use gatehouse_test_support::McpServer;
    let pki = tempfile::tempdir().unwrap();
    let (key, cert, ca) = upstream_pki(pki.path());
    let server = McpServer::tls(&key, &cert);
    let ports = format!("443,{}", server.port);
    let node = crate::support::node_with(
        "all",
        &[
            ("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.1/32"),
            ("GATEHOUSE_PROXY_CONNECT_PORTS", &ports),
            ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", ca.to_str().unwrap()),
        ],
    )
    .await;
    declare(&node, json!([{"name": "secure", "url": server.url(), "tools": {"allow": ["echo"]}}])).await;
    let run =
        crate::support::call(&node, "/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}}))
            .await
            .json();
    let run_ca = pki.path().join("run-ca.pem");
    std::fs::write(&run_ca, run["ca_certificate_pem"].as_str().unwrap_or_else(|| panic!("{run}"))).unwrap();
    let proxy = crate::support::serve_proxy(&node).await;
    let via = format!("http://grant:{}@{proxy}", run["grant"].as_str().unwrap());
    let seen = sdk_client_trusting(&server.url(), &via, &["echo", "rm"], Some(&run_ca)).await;
    assert_eq!(seen["tools"], json!(["echo"]), "{seen}");
    assert!(seen["calls"][0]["text"].as_str().unwrap().contains("\"text\":\"hi\""), "{seen}");
    assert_eq!(seen["calls"][1]["data"], json!({"reason": "mcp_tool_denied", "tool": "rm"}), "{seen}");
}
