//! `GET /openapi.json`: an OpenAPI 3.1 description of the HTTP API, built
//! from one table of routes. A test calls every route in the table against
//! the real router, so the document cannot name a route that does not exist.

use serde_json::{Map, Value, json};

/// One documented route.
pub struct Route {
    /// `get`, `post` or `put`.
    pub method: &'static str,
    /// The path, with `{param}` placeholders.
    pub path: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Whether it takes the internal service token.
    pub auth: bool,
    /// The request body: `None`, a JSON object's field names, or raw bytes.
    pub body: Body,
    /// The answer's top-level fields (JSON).
    pub answer: &'static [&'static str],
}

/// A request body.
pub enum Body {
    /// No body.
    None,
    /// A JSON object with these fields.
    Json(&'static [&'static str]),
    /// Raw bytes (the content to scan).
    Raw,
}

/// Every route the router serves.
pub const ROUTES: &[Route] = &[
    Route {
        method: "get",
        path: "/healthz",
        summary: "Liveness.",
        auth: false,
        body: Body::None,
        answer: &["status"],
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "Readiness: the ledger and a configured clamd answer (503 otherwise, with the reason).",
        auth: false,
        body: Body::None,
        answer: &["status", "role", "reason"],
    },
    Route {
        method: "get",
        path: "/metrics",
        summary: "Prometheus text exposition.",
        auth: false,
        body: Body::None,
        answer: &[],
    },
    Route {
        method: "get",
        path: "/openapi.json",
        summary: "This document.",
        auth: false,
        body: Body::None,
        answer: &["openapi", "info", "paths"],
    },
    Route {
        method: "post",
        path: "/v1/manifests/sign",
        summary: "Sign an execution manifest bound to a request body (worker).",
        auth: true,
        body: Body::Json(&["claims", "body"]),
        answer: &["token", "kid", "exp", "execute_body_sha256"],
    },
    Route {
        method: "post",
        path: "/v1/manifests/verify",
        summary: "Verify a manifest against a request body.",
        auth: true,
        body: Body::Json(&["token", "body"]),
        answer: &["valid", "claims", "reason"],
    },
    Route {
        method: "post",
        path: "/v1/grants",
        summary: "Mint an egress grant and register its ledger record.",
        auth: true,
        body: Body::Json(&[
            "exec_id",
            "tenant_id",
            "user_id",
            "input_files",
            "read_sessions",
            "output_session_id",
        ]),
        answer: &["token", "grant_id", "exp"],
    },
    Route {
        method: "post",
        path: "/v1/grants/open",
        summary: "Open a grant: its claims and ledger state.",
        auth: true,
        body: Body::Json(&["token"]),
        answer: &["valid", "claims", "ledger", "reason"],
    },
    Route {
        method: "post",
        path: "/v1/grants/consume",
        summary: "Spend from a grant's budget.",
        auth: true,
        body: Body::Json(&["token", "operation"]),
        answer: &["allowed", "remaining", "reason"],
    },
    Route {
        method: "post",
        path: "/v1/grants/revoke",
        summary: "Revoke grants by run, tenant or all.",
        auth: true,
        body: Body::Json(&["exec_id", "tenant_id", "all"]),
        answer: &["revoked"],
    },
    Route {
        method: "post",
        path: "/v1/grants/{grant_id}/revoke",
        summary: "Revoke one grant.",
        auth: true,
        body: Body::None,
        answer: &["revoked"],
    },
    Route {
        method: "get",
        path: "/v1/refusals",
        summary: "Recent refusals (kind, reason code, tenant, run, host, time); `?run_id=` gives one run's refusal events, `tenant_id` and `kind` narrow further.",
        auth: true,
        body: Body::None,
        answer: &["refusals"],
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/egress-policy",
        summary: "Set a tenant's egress policy.",
        auth: true,
        body: Body::Json(&["mode", "allow", "deny", "dry_run"]),
        answer: &["tenant_id", "policy"],
    },
    Route {
        method: "post",
        path: "/v1/egress/fetch",
        summary: "Make an outbound request on a run's behalf through the door.",
        auth: true,
        body: Body::Json(&["grant", "method", "url", "headers", "body_base64", "purpose"]),
        answer: &["status", "headers", "body_base64", "redirects"],
    },
    Route {
        method: "post",
        path: "/v1/content/scan",
        summary: "Judge content by its bytes (and clamd, when configured); query: tenant_id, run_id.",
        auth: true,
        body: Body::Raw,
        answer: &["verdict", "kind", "reason", "offset", "signature", "bytes"],
    },
    Route {
        method: "get",
        path: "/v1/content/scanner",
        summary: "Whether a malware scanner is configured and answering.",
        auth: true,
        body: Body::None,
        answer: &["configured", "address", "reachable", "version", "max_bytes"],
    },
];

fn object(fields: &[&str]) -> Value {
    let properties: Map<String, Value> = fields.iter().map(|f| ((*f).to_owned(), json!({}))).collect();
    json!({"type": "object", "properties": properties})
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let mut op = json!({
            "summary": r.summary,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": object(r.answer)}}},
                "default": {
                    "description": "The safe error shape",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        });
        if r.auth {
            op["security"] = json!([{"serviceToken": []}]);
        }
        match r.body {
            Body::None => {}
            Body::Json(fields) => {
                op["requestBody"] =
                    json!({"required": true, "content": {"application/json": {"schema": object(fields)}}});
            }
            Body::Raw => {
                op["requestBody"] = json!({
                    "required": true,
                    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                });
            }
        }
        let params: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        entry[r.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "gatehouse",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The security plane for platforms that run untrusted code and AI agents.",
        },
        "components": {
            "securitySchemes": {"serviceToken": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": object(&["code", "message", "reason", "request_id"])},
            }},
        },
        "paths": paths,
    })
}
