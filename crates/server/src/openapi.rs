//! `GET /openapi.json`: an OpenAPI 3.1 description of the HTTP API, built
//! from one table of routes. A test calls every route in the table against
//! the real router, and compares the paths the router was given
//! (`api::served_paths`) and the methods it answers on each with the table,
//! so neither can have a route the other lacks.

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
        summary: "Durable refusals, newest first, paged (`limit`, `cursor`); narrowed by `tenant_id`, `run_id`, `kind`, `reason`, `host` and `since`.",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/egress-policy",
        summary: "Store a new version of a tenant's egress policy (400 policy_unreadable if it does not read).",
        auth: true,
        body: Body::Json(&["mode", "allow", "deny", "dry_run"]),
        answer: &["tenant_id", "version", "policy"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/egress-policy",
        summary: "A tenant's current egress policy and its version (0 and open when it never had one).",
        auth: true,
        body: Body::None,
        answer: &["tenant_id", "version", "policy", "actor", "created_at"],
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/dependency-gate",
        summary: "Set a tenant's dependency gate: off, high or critical.",
        auth: true,
        body: Body::Json(&["mode"]),
        answer: &["tenant_id", "mode"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-gate",
        summary: "A tenant's dependency gate mode [high].",
        auth: true,
        body: Body::None,
        answer: &["tenant_id", "mode"],
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/dependency-scans",
        summary: "Scan a pull request's changed lockfiles (the committed bytes, base64) against OSV and record it; the newest submission for a head counts. Recorded pending when submitted; 201 with the scan when it finishes in time, else 202 with its id (it finishes in the background: GET it by id).",
        auth: true,
        body: Body::Json(&["repository", "pull_request", "head_sha", "lockfiles"]),
        answer: &[
            "scan_id",
            "created_at",
            "tenant_id",
            "repository",
            "pull_request",
            "head_sha",
            "status",
            "findings",
            "gate",
            "errors",
            "checked",
            "lockfiles",
            "markdown",
        ],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-scans",
        summary: "A tenant's scans (?repository=&pull_request=), newest submission first.",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-scans/{scan_id}",
        summary: "One scan: while pending its identity and status pending; finished, the scan as submitting it answers.",
        auth: true,
        body: Body::None,
        answer: &[
            "scan_id",
            "created_at",
            "tenant_id",
            "repository",
            "pull_request",
            "head_sha",
            "status",
            "findings",
            "gate",
            "errors",
            "checked",
            "lockfiles",
            "markdown",
        ],
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/gate-checks",
        summary: "Whether the dependency gate blocks a pull request's head (actor agent or person) under the tenant's mode and the head's newest submission: complete, by severity; pending, errored or none, blocked.",
        auth: true,
        body: Body::Json(&["repository", "pull_request", "head_sha", "actor"]),
        answer: &["blocked", "policy_failure_code", "scan_id"],
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/kill-switch",
        summary: "Engage (kill every live run, revoke every grant, refuse new runs) or release a tenant's kill switch.",
        auth: true,
        body: Body::Json(&["engaged", "reason"]),
        answer: &["engaged", "revoked"],
    },
    Route {
        method: "post",
        path: "/v1/emergency-revoke",
        summary: "Kill every live run of every tenant and revoke every grant, in one step.",
        auth: true,
        body: Body::Json(&["reason"]),
        answer: &["revoked"],
    },
    Route {
        method: "post",
        path: "/v1/runs",
        summary: "Start a run: record it, register and mint its grant, sign its manifest bound to the execute body (201).",
        auth: true,
        body: Body::Json(&[
            "tenant_id",
            "user_id",
            "body",
            "claims",
            "input_files",
            "read_sessions",
            "output_session_id",
            "conversation_id",
            "budgets",
            "ttl_secs",
        ]),
        answer: &[
            "run_id",
            "status",
            "manifest",
            "execute_body_sha256",
            "grant",
            "grant_id",
            "expires_at",
            "proxy",
            "ca_certificate_pem",
        ],
    },
    Route {
        method: "get",
        path: "/v1/runs",
        summary: "Runs, newest first, paged; narrowed by `tenant_id` and `status`.",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}",
        summary: "One run: status, times, end reason, its ledger counters and budgets.",
        auth: true,
        body: Body::None,
        answer: &[
            "run_id",
            "tenant_id",
            "user_id",
            "status",
            "created_at",
            "heartbeat_at",
            "ended_at",
            "end_reason",
            "ledger",
            "leases",
        ],
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/heartbeat",
        summary: "A live run's heartbeat (409 run_not_live otherwise).",
        auth: true,
        body: Body::None,
        answer: &["status", "heartbeat_at", "leases_renewed"],
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/end",
        summary: "End a run (outcome succeeded or failed) and revoke its grant; idempotent.",
        auth: true,
        body: Body::Json(&["outcome"]),
        answer: &["status", "revoked"],
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/cancel",
        summary: "Cancel a run and revoke its grant; idempotent.",
        auth: true,
        body: Body::Json(&["actor"]),
        answer: &["status", "revoked"],
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}/events",
        summary: "One run's events after `after` (refusals inside it, run_ended, ...), oldest first.",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/credentials",
        summary: "Store a credential, sealed at once to the gateway's key; the answer carries its fingerprint, never the secret.",
        auth: true,
        body: Body::Json(&["name", "purpose", "host", "inject", "secret"]),
        answer: &["credential_id", "name", "purpose", "host", "fingerprint", "created_at"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/credentials",
        summary: "The tenant's credentials, newest first (fingerprints, never secrets).",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}",
        summary: "One credential (its fingerprint, never its secret).",
        auth: true,
        body: Body::None,
        answer: &["credential_id", "name", "purpose", "host", "fingerprint", "created_at"],
    },
    Route {
        method: "delete",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}",
        summary: "Delete a credential and revoke its leases.",
        auth: true,
        body: Body::None,
        answer: &["deleted", "revoked"],
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}/secret",
        summary: "Rotate a credential's secret: runs holding leases on it inject the new one from their next request.",
        auth: true,
        body: Body::Json(&["secret"]),
        answer: &["credential_id", "fingerprint", "version"],
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/leases",
        summary: "Lease a credential to a live run for its one host and purpose, 120 s, renewed by the run's heartbeat.",
        auth: true,
        body: Body::Json(&["credential_id", "purpose", "host"]),
        answer: &["lease_id", "run_id", "credential_id", "purpose", "host", "expires_at", "placeholder"],
    },
    Route {
        method: "get",
        path: "/v1/leases",
        summary: "Leases, newest first, narrowed by tenant_id, run_id, credential_id and status (live, expired, revoked).",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "post",
        path: "/v1/leases/{lease_id}/revoke",
        summary: "Revoke a lease on every node before answering; its run never gets another.",
        auth: true,
        body: Body::None,
        answer: &["revoked"],
    },
    Route {
        method: "get",
        path: "/v1/audit",
        summary: "The hash-chained audit log after `after`, in order.",
        auth: true,
        body: Body::None,
        answer: &["items", "next_cursor"],
    },
    Route {
        method: "post",
        path: "/v1/egress/fetch",
        summary: "Make an outbound request on a run's behalf through the door.",
        auth: true,
        body: Body::Json(&["grant", "method", "url", "headers", "body_base64", "purpose", "sign_with"]),
        answer: &["status", "headers", "body_base64", "redirects"],
    },
    Route {
        method: "post",
        path: "/v1/egress/fetch/raw",
        summary: "The same fetch with both bodies streamed: query url, method, purpose; the grant in x-gatehouse-grant, upstream headers as x-gatehouse-header: name: value; the body is the upstream body, the answer the upstream's status, headers and body, with x-gatehouse-redirects.",
        auth: true,
        body: Body::Raw,
        answer: &[],
    },
    Route {
        method: "post",
        path: "/v1/files",
        summary: "Store a user's input file (the body, streamed and content-scanned); query: tenant_id, user_id, resource (kind:id:version for a resource shared in the tenant), name, conversation_id.",
        auth: true,
        body: Body::Raw,
        answer: &["file_id", "bytes", "sha256", "verdict"],
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/files/{file_id}",
        summary: "An input file's record (never its content).",
        auth: true,
        body: Body::None,
        answer: &[
            "file_id",
            "name",
            "bytes",
            "sha256",
            "verdict",
            "created_at",
            "user_id",
            "session_id",
            "resource",
        ],
    },
    Route {
        method: "delete",
        path: "/v1/tenants/{tenant_id}/files/{file_id}",
        summary: "Delete an input file.",
        auth: true,
        body: Body::None,
        answer: &["deleted"],
    },
    Route {
        method: "get",
        path: "/v1/files/{file_id}",
        summary: "The sandbox reads an input file its grant names (bearer: the run's grant; a read_file spend). The body is the content.",
        auth: true,
        body: Body::None,
        answer: &[],
    },
    Route {
        method: "get",
        path: "/v1/sessions/{session_id}/files",
        summary: "The sandbox lists a session its grant may read (bearer: the run's grant; a read_session spend).",
        auth: true,
        body: Body::None,
        answer: &["session_id", "items"],
    },
    Route {
        method: "get",
        path: "/v1/sessions/{session_id}/files/{name}",
        summary: "The sandbox reads a file of a session its grant may read (bearer: the run's grant; a read_session spend). The body is the content.",
        auth: true,
        body: Body::None,
        answer: &[],
    },
    Route {
        method: "put",
        path: "/v1/sessions/{session_id}/files/{name}",
        summary: "The sandbox writes a file into its output session (bearer: the run's grant): an output file and every byte spent first, content-scanned, kept only if accepted.",
        auth: true,
        body: Body::Raw,
        answer: &["file_id", "bytes", "sha256", "verdict"],
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

/// Answers besides a route's usual one: (method, path, status, what it
/// means, its top-level fields). A route listed here answers its usual
/// fields under this status's neighbour (`201` beside a `202`).
const OTHER_ANSWERS: &[(&str, &str, &str, &str, &[&str])] = &[(
    "post",
    "/v1/tenants/{tenant_id}/dependency-scans",
    "202",
    "Submitted and recorded, not finished within GATEHOUSE_DEPS_SCAN_WAIT_MS: it finishes in the background; GET it by id",
    &["scan_id", "created_at", "tenant_id", "repository", "pull_request", "head_sha", "status"],
)];

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
        for (_, _, status, description, fields) in
            OTHER_ANSWERS.iter().filter(|(m, p, ..)| *m == r.method && *p == r.path)
        {
            // The usual answer is then a creation's.
            if let Some(usual) = op["responses"].as_object_mut().and_then(|all| all.remove("200")) {
                op["responses"]["201"] = usual;
            }
            op["responses"][*status] = json!({"description": description,
                "content": {"application/json": {"schema": object(fields)}}});
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
