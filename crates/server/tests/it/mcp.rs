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
