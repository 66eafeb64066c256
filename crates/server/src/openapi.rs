//! `GET /openapi.json`: an OpenAPI 3.1 description of the HTTP API, built
//! from one table of routes. A test calls every route in the table against
//! the real router, and compares the paths the router was given
//! (`api::served_paths`) and the methods it answers on each with the table,
//! so neither can have a route the other lacks.
//!
//! The document states every constraint the server enforces on what it is
//! given (ids, enums, ranges, required fields, `additionalProperties: false`
//! where the server refuses unknown fields, `null` where it takes one), so
//! a client or fuzzer generating requests from it sends what the server
//! accepts, and what violates it is refused: `.ci/run` holds the two equal
//! with schemathesis against a real `gatehouse serve`.

use serde_json::{Map, Value, json};

/// One documented route.
pub struct Route {
    /// `get`, `post`, `put` or `delete`.
    pub method: &'static str,
    /// The path, with `{param}` placeholders (each an id, but `{name}`, a
    /// file name).
    pub path: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Whether it takes the internal service token.
    pub auth: bool,
    /// The query parameters it reads (it refuses any other).
    pub query: &'static [Param],
    /// The request body.
    pub body: Body,
    /// The success status.
    pub status: u16,
    /// The answer.
    pub answer: Answer,
}

/// A query parameter.
pub struct Param {
    /// Its name.
    pub name: &'static str,
    /// Whether it must be given.
    pub required: bool,
    /// Its schema.
    pub schema: fn() -> Value,
}

/// A request body.
pub enum Body {
    /// No body.
    None,
    /// A JSON object (`application/json`), described by this schema.
    Json(fn() -> Value),
    /// Raw bytes, streamed (possibly none).
    Raw,
}

/// A success answer.
pub enum Answer {
    /// A JSON object with these top-level fields.
    Json(&'static [&'static str]),
    /// Prometheus text exposition.
    Text,
    /// Bytes of any type (a file's content, an upstream's answer).
    Bytes,
}

const fn param(name: &'static str, required: bool, schema: fn() -> Value) -> Param {
    Param { name, required, schema }
}

/// `limit` and `cursor` of a paged list.
const PAGE_QUERY: &[Param] = &[param("limit", false, schema::limit), param("cursor", false, schema::id)];
const RUNS_QUERY: &[Param] = &[
    param("tenant_id", false, schema::id),
    param("status", false, schema::run_status),
    param("limit", false, schema::limit),
    param("cursor", false, schema::id),
];
const EVENTS_QUERY: &[Param] = &[param("after", false, schema::int64), param("limit", false, schema::limit)];
const AUDIT_QUERY: &[Param] = EVENTS_QUERY;
const REFUSALS_QUERY: &[Param] = &[
    param("tenant_id", false, schema::id),
    param("run_id", false, schema::id),
    param("kind", false, schema::refusal_kind),
    param("reason", false, schema::reason),
    param("host", false, schema::host_filter),
    param("since", false, schema::int64),
    param("limit", false, schema::limit),
    param("cursor", false, schema::id),
];
const LEASES_QUERY: &[Param] = &[
    param("tenant_id", false, schema::id),
    param("run_id", false, schema::id),
    param("credential_id", false, schema::id),
    param("status", false, schema::lease_status),
    param("limit", false, schema::limit),
    param("cursor", false, schema::id),
];
const SCANS_QUERY: &[Param] = &[
    param("repository", false, schema::repository),
    param("pull_request", false, schema::pull_request),
    param("limit", false, schema::limit),
    param("cursor", false, schema::id),
];
const RAW_FETCH_QUERY: &[Param] = &[
    param("url", true, schema::string),
    param("method", false, schema::method),
    param("purpose", true, schema::fetch_purpose),
];
const FILES_QUERY: &[Param] = &[
    param("tenant_id", false, schema::id),
    param("user_id", true, schema::id),
    param("resource", true, schema::id),
    param("name", true, schema::file_name),
    param("conversation_id", false, schema::id),
];
/// What a proposal is answered with.
const PROPOSAL_FIELDS: &[&str] = &[
    "proposal_id",
    "run_id",
    "tenant_id",
    "host",
    "methods",
    "paths",
    "why",
    "status",
    "scope",
    "decided_by",
    "decided_at",
];

const PROPOSALS_QUERY: &[Param] = &[
    param("status", false, schema::proposal_status),
    param("limit", false, schema::limit),
    param("cursor", false, schema::string),
];

const SCAN_CONTENT_QUERY: &[Param] = &[
    param("tenant_id", false, schema::id),
    param("run_id", false, schema::id),
    param("name", false, schema::file_name),
];

/// Every route the router serves.
pub const ROUTES: &[Route] = &[
    Route {
        method: "get",
        path: "/healthz",
        summary: "Liveness.",
        auth: false,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["status"]),
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "Readiness: the ledger, the store (where the role has one) and a configured clamd answer (503 otherwise, with the reason).",
        auth: false,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["status", "role", "reason"]),
    },
    Route {
        method: "get",
        path: "/metrics",
        summary: "Prometheus text exposition.",
        auth: false,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Text,
    },
    Route {
        method: "get",
        path: "/openapi.json",
        summary: "This document.",
        auth: false,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["openapi", "info", "paths"]),
    },
    Route {
        method: "post",
        path: "/v1/manifests/sign",
        summary: "Sign an execution manifest bound to a request body (worker).",
        auth: true,
        query: &[],
        body: Body::Json(schema::sign_request),
        status: 200,
        answer: Answer::Json(&["token", "kid", "exp", "execute_body_sha256"]),
    },
    Route {
        method: "post",
        path: "/v1/manifests/verify",
        summary: "Verify a manifest against a request body.",
        auth: true,
        query: &[],
        body: Body::Json(schema::verify_request),
        status: 200,
        answer: Answer::Json(&["valid", "claims", "reason"]),
    },
    Route {
        method: "post",
        path: "/v1/grants",
        summary: "Mint an egress grant and register its ledger record.",
        auth: true,
        query: &[],
        body: Body::Json(schema::grant_request),
        status: 200,
        answer: Answer::Json(&["token", "grant_id", "exp"]),
    },
    Route {
        method: "post",
        path: "/v1/grants/open",
        summary: "Open a grant: its claims and ledger state.",
        auth: true,
        query: &[],
        body: Body::Json(schema::open_request),
        status: 200,
        answer: Answer::Json(&["valid", "claims", "ledger", "reason"]),
    },
    Route {
        method: "post",
        path: "/v1/grants/consume",
        summary: "Spend from a grant's budget.",
        auth: true,
        query: &[],
        body: Body::Json(schema::consume_request),
        status: 200,
        answer: Answer::Json(&["allowed", "remaining", "reason"]),
    },
    Route {
        method: "post",
        path: "/v1/grants/revoke",
        summary: "Revoke grants by run, tenant or all.",
        auth: true,
        query: &[],
        body: Body::Json(schema::revoke_request),
        status: 200,
        answer: Answer::Json(&["revoked"]),
    },
    Route {
        method: "post",
        path: "/v1/grants/{grant_id}/revoke",
        summary: "Revoke one grant.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["revoked"]),
    },
    Route {
        method: "get",
        path: "/v1/refusals",
        summary: "Durable refusals, newest first, paged (`limit`, `cursor`); narrowed by `tenant_id`, `run_id`, `kind`, `reason`, `host` and `since`.",
        auth: true,
        query: REFUSALS_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/egress-policy",
        summary: "Store a new version of a tenant's egress policy (400 policy_unreadable if it does not read).",
        auth: true,
        query: &[],
        body: Body::Json(schema::policy_document),
        status: 200,
        answer: Answer::Json(&["tenant_id", "version", "policy"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/egress-policy",
        summary: "A tenant's current egress policy and its version (0 and open when it never had one).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["tenant_id", "version", "policy", "actor", "created_at"]),
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/mcp-servers",
        summary: "Declare a tenant's MCP servers and the tools a run may call on each (a new version, audited).",
        auth: true,
        query: &[],
        body: Body::Json(schema::mcp_servers),
        status: 200,
        answer: Answer::Json(&["tenant_id", "version", "servers"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/mcp-servers",
        summary: "A tenant's declared MCP servers and their version (0 and none when it never declared any).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["tenant_id", "version", "servers", "actor", "created_at"]),
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/egress-proposals",
        summary: "A live run asks for one exact rule its policy refuses (201; the same ask again is the same proposal, 200).",
        auth: true,
        query: &[],
        body: Body::Json(schema::proposal_request),
        status: 201,
        answer: Answer::Json(PROPOSAL_FIELDS),
    },
    Route {
        method: "get",
        path: "/v1/egress-proposals/{proposal_id}",
        summary: "One egress proposal and where it stands (pending, approved, denied, expired).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(PROPOSAL_FIELDS),
    },
    Route {
        method: "post",
        path: "/v1/egress-proposals/{proposal_id}/decide",
        summary: "A person approves a pending proposal for its run alone or for the tenant (a new policy version with exactly that rule), or denies it; audited.",
        auth: true,
        query: &[],
        body: Body::Json(schema::decide_request),
        status: 200,
        answer: Answer::Json(PROPOSAL_FIELDS),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/egress-proposals",
        summary: "A tenant's egress proposals, newest first, by status.",
        auth: true,
        query: PROPOSALS_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "get",
        path: "/v1/egress-presets",
        summary: "The egress presets a policy may name ({\"preset\": NAME}), each with its host entries and the documentation they come from.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items"]),
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/dependency-gate",
        summary: "Set a tenant's dependency gate: off, high or critical.",
        auth: true,
        query: &[],
        body: Body::Json(schema::gate_mode),
        status: 200,
        answer: Answer::Json(&["tenant_id", "mode"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-gate",
        summary: "A tenant's dependency gate mode [high].",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["tenant_id", "mode"]),
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/dependency-scans",
        summary: "Scan a pull request's changed lockfiles (the committed bytes, base64) against OSV and record it; the newest submission for a head counts. Recorded pending when submitted; 201 with the scan when it finishes in time, else 202 with its id (it finishes in the background: GET it by id).",
        auth: true,
        query: &[],
        body: Body::Json(schema::scan_request),
        status: 201,
        answer: Answer::Json(&[
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
        ]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-scans",
        summary: "A tenant's scans (?repository=&pull_request=), newest submission first.",
        auth: true,
        query: SCANS_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/dependency-scans/{scan_id}",
        summary: "One scan: while pending its identity and status pending; finished, the scan as submitting it answers.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&[
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
        ]),
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/gate-checks",
        summary: "Whether the dependency gate blocks a pull request's head (actor agent or person) under the tenant's mode and the head's newest submission: complete, by severity; pending, errored or none, blocked.",
        auth: true,
        query: &[],
        body: Body::Json(schema::gate_check_request),
        status: 200,
        answer: Answer::Json(&["blocked", "policy_failure_code", "scan_id"]),
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/kill-switch",
        summary: "Engage (kill every live run, revoke every grant, refuse new runs) or release a tenant's kill switch.",
        auth: true,
        query: &[],
        body: Body::Json(schema::kill_switch_request),
        status: 200,
        answer: Answer::Json(&["engaged", "revoked"]),
    },
    Route {
        method: "post",
        path: "/v1/emergency-revoke",
        summary: "Kill every live run of every tenant and revoke every grant, in one step.",
        auth: true,
        query: &[],
        body: Body::Json(schema::emergency_request),
        status: 200,
        answer: Answer::Json(&["revoked"]),
    },
    Route {
        method: "post",
        path: "/v1/runs",
        summary: "Start a run: record it, register and mint its grant, sign its manifest bound to the execute body (201).",
        auth: true,
        query: &[],
        body: Body::Json(schema::run_request),
        status: 201,
        answer: Answer::Json(&[
            "run_id",
            "status",
            "manifest",
            "execute_body_sha256",
            "grant",
            "grant_id",
            "expires_at",
            "proxy",
            "ca_certificate_pem",
        ]),
    },
    Route {
        method: "get",
        path: "/v1/runs",
        summary: "Runs, newest first, paged; narrowed by `tenant_id` and `status`.",
        auth: true,
        query: RUNS_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}",
        summary: "One run: status, times, end reason, its ledger counters and budgets.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&[
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
        ]),
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/heartbeat",
        summary: "A live run's heartbeat (409 run_not_live otherwise).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["status", "heartbeat_at", "leases_renewed"]),
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/end",
        summary: "End a run (outcome succeeded or failed) and revoke its grant; idempotent.",
        auth: true,
        query: &[],
        body: Body::Json(schema::end_request),
        status: 200,
        answer: Answer::Json(&["status", "revoked"]),
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/cancel",
        summary: "Cancel a run and revoke its grant; idempotent.",
        auth: true,
        query: &[],
        body: Body::Json(schema::cancel_request),
        status: 200,
        answer: Answer::Json(&["status", "revoked"]),
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}/events",
        summary: "One run's events after `after` (refusals inside it, run_ended, ...), oldest first.",
        auth: true,
        query: EVENTS_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "get",
        path: "/v1/runs/{run_id}/artifacts",
        summary: "The files a run wrote, with their content verdicts, and its uploads refused as content.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "refused", "truncated"]),
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/credentials",
        summary: "Store a credential, sealed at once to the gateway's key; the answer carries its fingerprint, never the secret.",
        auth: true,
        query: &[],
        body: Body::Json(schema::credential_request),
        status: 201,
        answer: Answer::Json(&[
            "credential_id",
            "name",
            "purpose",
            "kind",
            "host",
            "hosts",
            "fingerprint",
            "created_at",
        ]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/credentials",
        summary: "The tenant's credentials, newest first (fingerprints, never secrets).",
        auth: true,
        query: PAGE_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}",
        summary: "One credential (its fingerprint, never its secret).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&[
            "credential_id",
            "name",
            "purpose",
            "kind",
            "host",
            "hosts",
            "fingerprint",
            "created_at",
        ]),
    },
    Route {
        method: "delete",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}",
        summary: "Delete a credential and revoke its leases.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["deleted", "revoked"]),
    },
    Route {
        method: "put",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}/secret",
        summary: "Rotate a credential's secret: runs holding leases on it inject the new one from their next request.",
        auth: true,
        query: &[],
        body: Body::Json(schema::secret_request),
        status: 200,
        answer: Answer::Json(&["credential_id", "fingerprint", "version"]),
    },
    Route {
        method: "post",
        path: "/v1/tenants/{tenant_id}/credentials/{credential_id}/fetch",
        summary: "A person's own request with a stored credential (gateway and all roles): the door injects it, the tenant's policy applies, the answer is scrubbed; audited as credential.use, rate-limited per tenant.",
        auth: true,
        query: &[],
        body: Body::Json(schema::person_fetch_request),
        status: 200,
        answer: Answer::Json(&["status", "headers", "body_base64", "redirects"]),
    },
    Route {
        method: "post",
        path: "/v1/runs/{run_id}/leases",
        summary: "Lease a credential to a live run for its one host and purpose, 120 s, renewed by the run's heartbeat.",
        auth: true,
        query: &[],
        body: Body::Json(schema::lease_request),
        status: 201,
        answer: Answer::Json(&[
            "lease_id",
            "run_id",
            "credential_id",
            "purpose",
            "host",
            "expires_at",
            "placeholder",
        ]),
    },
    Route {
        method: "get",
        path: "/v1/leases",
        summary: "Leases, newest first, narrowed by tenant_id, run_id, credential_id and status (live, expired, revoked).",
        auth: true,
        query: LEASES_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "post",
        path: "/v1/leases/{lease_id}/revoke",
        summary: "Revoke a lease on every node before answering; its run never gets another.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["revoked"]),
    },
    Route {
        method: "get",
        path: "/v1/audit",
        summary: "The hash-chained audit log after `after`, in order.",
        auth: true,
        query: AUDIT_QUERY,
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["items", "next_cursor"]),
    },
    Route {
        method: "post",
        path: "/v1/egress/fetch",
        summary: "Make an outbound request on a run's behalf through the door.",
        auth: true,
        query: &[],
        body: Body::Json(schema::fetch_request),
        status: 200,
        answer: Answer::Json(&["status", "headers", "body_base64", "redirects"]),
    },
    Route {
        method: "post",
        path: "/v1/egress/fetch/raw",
        summary: "The same fetch with both bodies streamed: query url, method, purpose; the grant in x-gatehouse-grant, upstream headers as x-gatehouse-header: name: value; the body is the upstream body, the answer the upstream's status, headers and body, with x-gatehouse-redirects.",
        auth: true,
        query: RAW_FETCH_QUERY,
        body: Body::Raw,
        status: 200,
        answer: Answer::Bytes,
    },
    Route {
        method: "post",
        path: "/v1/files",
        summary: "Store a user's input file (the body, streamed and content-scanned); query: tenant_id, user_id, resource (kind:id:version for a resource shared in the tenant), name, conversation_id.",
        auth: true,
        query: FILES_QUERY,
        body: Body::Raw,
        status: 201,
        answer: Answer::Json(&["file_id", "bytes", "sha256", "verdict"]),
    },
    Route {
        method: "get",
        path: "/v1/tenants/{tenant_id}/files/{file_id}",
        summary: "An input file's record (never its content).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&[
            "file_id",
            "name",
            "bytes",
            "sha256",
            "verdict",
            "created_at",
            "user_id",
            "session_id",
            "resource",
        ]),
    },
    Route {
        method: "delete",
        path: "/v1/tenants/{tenant_id}/files/{file_id}",
        summary: "Delete an input file.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["deleted"]),
    },
    Route {
        method: "get",
        path: "/v1/files/{file_id}",
        summary: "The sandbox reads an input file its grant names (bearer: the run's grant; a read_file spend). The body is the content.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Bytes,
    },
    Route {
        method: "get",
        path: "/v1/sessions/{session_id}/files",
        summary: "The sandbox lists a session its grant may read (bearer: the run's grant; a read_session spend).",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["session_id", "items"]),
    },
    Route {
        method: "get",
        path: "/v1/sessions/{session_id}/files/{name}",
        summary: "The sandbox reads a file of a session its grant may read (bearer: the run's grant; a read_session spend). The body is the content.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Bytes,
    },
    Route {
        method: "put",
        path: "/v1/sessions/{session_id}/files/{name}",
        summary: "The sandbox writes a file into its output session (bearer: the run's grant): an output file and every byte spent first, content-scanned, kept only if accepted.",
        auth: true,
        query: &[],
        body: Body::Raw,
        status: 201,
        answer: Answer::Json(&["file_id", "bytes", "sha256", "verdict"]),
    },
    Route {
        method: "post",
        path: "/v1/content/scan",
        summary: "Judge content by its bytes (and clamd, when configured); query: tenant_id, run_id, and the file's name.",
        auth: true,
        query: SCAN_CONTENT_QUERY,
        body: Body::Raw,
        status: 200,
        answer: Answer::Json(&["verdict", "kind", "reason", "offset", "signature", "bytes"]),
    },
    Route {
        method: "get",
        path: "/v1/content/scanner",
        summary: "Whether a malware scanner is configured and answering.",
        auth: true,
        query: &[],
        body: Body::None,
        status: 200,
        answer: Answer::Json(&["configured", "address", "reachable", "version", "max_bytes"]),
    },
];

/// The schemas of parameters and bodies, each the rule the server applies.
pub mod schema {
    use serde_json::{Value, json};

    /// The largest integer a budget or JSON body may hold (2^53 - 1).
    const MAX_SAFE: u64 = (1 << 53) - 1;
    /// Control characters (Unicode `Cc`), which free text may not hold.
    const NO_CONTROLS: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

    /// Any string.
    pub fn string() -> Value {
        json!({"type": "string"})
    }

    /// An id (`gatehouse_core::is_valid_id`): 1-128 characters of
    /// `[A-Za-z0-9._:-]`, not `.` or `..`.
    pub fn id() -> Value {
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": "^[A-Za-z0-9._:-]{1,128}$",
            "not": {"enum": [".", ".."]},
        })
    }

    /// `schema`, or `null` (an `Option` the server reads `null` as absent).
    pub fn nullable(mut schema: Value) -> Value {
        match schema.get("type").cloned() {
            Some(Value::String(t)) => schema["type"] = json!([t, "null"]),
            _ => schema = json!({"anyOf": [schema, {"type": "null"}]}),
        }
        schema
    }

    fn one_of(values: &[&str]) -> Value {
        json!({"type": "string", "enum": values})
    }

    /// A page's size.
    pub fn limit() -> Value {
        json!({"type": "integer", "minimum": 1, "maximum": 500})
    }

    /// A signed 64-bit integer (a sequence number, a time).
    pub fn int64() -> Value {
        json!({"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX})
    }

    fn uint64() -> Value {
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
    }

    fn budget() -> Value {
        nullable(json!({"type": "integer", "minimum": 0, "maximum": MAX_SAFE}))
    }

    fn strings() -> Value {
        json!({"type": "array", "items": {"type": "string"}})
    }

    /// Free text (a reason, an actor): at most 500 characters, no control
    /// character.
    fn text() -> Value {
        json!({"type": "string", "maxLength": 500, "pattern": NO_CONTROLS})
    }

    /// An HTTP method: a token (RFC 9110).
    pub fn method() -> Value {
        json!({"type": "string", "minLength": 1, "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"})
    }

    /// A run's status.
    pub fn run_status() -> Value {
        one_of(&["live", "ended", "cancelled", "killed", "expired"])
    }

    /// A lease's status.
    pub fn lease_status() -> Value {
        one_of(&["live", "expired", "revoked"])
    }

    /// A refusal kind.
    pub fn refusal_kind() -> Value {
        let kinds: Vec<&str> = gatehouse_core::RefusalKind::ALL.iter().map(|k| k.as_str()).collect();
        one_of(&kinds)
    }

    /// A reason code.
    pub fn reason() -> Value {
        let reasons: Vec<&str> = gatehouse_core::Reason::ALL.iter().map(|r| r.as_str()).collect();
        one_of(&reasons)
    }

    /// A host a refusal list is narrowed to: at most 253 bytes, no control
    /// character or whitespace.
    pub fn host_filter() -> Value {
        json!({"type": "string", "maxLength": 253, "pattern": "^[^\\s\\u0000-\\u001F\\u007F-\\u009F]*$"})
    }

    /// What a fetch is for.
    pub fn fetch_purpose() -> Value {
        let purposes: Vec<&str> = crate::metrics::FetchPurpose::ALL.iter().map(|p| p.as_str()).collect();
        one_of(&purposes)
    }

    /// A file's name (`gatehouse_files::check_name`): 1-255 bytes, not only
    /// dots, no separator, control or bidirectional formatting character,
    /// no whitespace at either end.
    pub fn file_name() -> Value {
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^[^/\\\\\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u202A-\\u202E\\u2066-\\u2069]+$",
            "not": {"anyOf": [{"pattern": "^\\.+$"}, {"pattern": "^\\s"}, {"pattern": "\\s$"}]},
        })
    }

    /// A JSON object with these properties (`required` among them), and
    /// no other.
    fn closed(properties: Value, required: &[&str]) -> Value {
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
    }

    /// Any JSON value (an execute body: canonicalizable, its integers
    /// within ±2^53-1).
    fn any() -> Value {
        json!({})
    }

    fn run_ids() -> Value {
        json!({
            "exec_id": id(),
            "tenant_id": nullable(id()),
            "user_id": id(),
            "input_files": strings(),
            "read_sessions": strings(),
            "output_session_id": nullable(id()),
        })
    }

    /// A manifest's claims (`ManifestClaims`, which refuses any other).
    fn manifest_claims() -> Value {
        let mut claims = run_ids();
        for budget in
            ["max_upload_bytes", "max_output_files", "max_requests", "max_egress_bytes", "max_tool_calls"]
        {
            claims[budget] = nullable(uint64());
        }
        // Set by the signer whatever is given.
        for set in ["v", "typ", "kid"] {
            claims[set] = any();
        }
        claims["execute_body_sha256"] = json!({"type": "string", "pattern": "^[0-9a-f]{64}$"});
        claims["iat"] = int64();
        claims["exp"] = int64();
        claims
    }

    /// `POST /v1/manifests/sign`.
    pub fn sign_request() -> Value {
        let claims = manifest_claims();
        closed(
            json!({
                "claims": closed(claims, &["exec_id", "user_id"]),
                "body": any(),
                "ttl_seconds": nullable(json!({"type": "integer", "minimum": 1, "maximum": i64::MAX})),
            }),
            &["claims", "body"],
        )
    }

    /// `POST /v1/manifests/verify`.
    pub fn verify_request() -> Value {
        closed(json!({"token": nullable(string()), "body": any()}), &["body"])
    }

    /// `POST /v1/grants`.
    pub fn grant_request() -> Value {
        let mut properties = run_ids();
        properties["grant_id"] = nullable(id());
        for field in
            ["max_upload_bytes", "max_output_files", "max_requests", "max_egress_bytes", "max_tool_calls"]
        {
            properties[field] = budget();
        }
        properties["iat"] = nullable(int64());
        properties["exp"] = nullable(int64());
        closed(properties, &["exec_id", "user_id"])
    }

    /// `POST /v1/grants/open`.
    pub fn open_request() -> Value {
        closed(json!({"token": nullable(string())}), &[])
    }

    /// `POST /v1/grants/consume`: the operation by its `kind`.
    pub fn consume_request() -> Value {
        let kind = |k: &str| json!({"type": "string", "const": k});
        let operation = json!({"oneOf": [
            {"type": "object", "properties": {"kind": kind("request")}, "required": ["kind"]},
            {"type": "object", "properties": {"kind": kind("tool_call")}, "required": ["kind"]},
            closed(json!({"kind": kind("read_file"), "file": string()}), &["kind", "file"]),
            closed(json!({"kind": kind("read_session"), "session": string()}), &["kind", "session"]),
            closed(
                json!({"kind": kind("upload"), "session": string(), "bytes": uint64(), "output_file_id": string()}),
                &["kind", "session", "bytes", "output_file_id"],
            ),
            closed(json!({"kind": kind("egress"), "bytes": uint64()}), &["kind", "bytes"]),
        ]});
        closed(json!({"token": nullable(string()), "operation": operation}), &["operation"])
    }

    /// `POST /v1/grants/revoke`: exactly one of a run, a tenant or all.
    pub fn revoke_request() -> Value {
        let none = json!({"type": "null"});
        let not_all = json!({"type": "boolean", "const": false});
        let mut schema = closed(
            json!({"exec_id": nullable(id()), "tenant_id": nullable(id()), "all": {"type": "boolean"}}),
            &[],
        );
        schema["oneOf"] = json!([
            {"properties": {"exec_id": id(), "tenant_id": none, "all": not_all}, "required": ["exec_id"]},
            {"properties": {"tenant_id": id(), "exec_id": none, "all": not_all}, "required": ["tenant_id"]},
            {"properties": {"all": {"const": true}, "exec_id": none, "tenant_id": none}, "required": ["all"]},
        ]);
        schema
    }

    /// An HTTP method of the IANA registry, as registered (upper case).
    fn registered_method() -> Value {
        json!({"type": "string", "pattern": "^[A-Z][A-Z-]*$"})
    }

    /// A policy entry: a host entry, a rule object or a preset reference
    /// (`PolicyDocument`'s `Entry`; what each field holds is checked when
    /// the policy is read: `400 policy_unreadable` naming the entry).
    fn policy_entry(side_reason: bool) -> Value {
        let methods = json!({"type": "array", "items": registered_method(), "minItems": 1});
        let mut rule = json!({
            "host": {"type": "string", "minLength": 1},
            "methods": methods,
            "paths": {"type": "array", "items": {"type": "string", "pattern": "^/"}, "minItems": 1, "maxItems": 64},
            "expires_at": {"type": "string", "format": "date-time"},
        });
        if side_reason {
            rule["reason"] = json!({"type": "string", "minLength": 1, "maxLength": 200});
        }
        json!({"oneOf": [
            {"type": "string", "minLength": 1},
            closed(rule, &["host"]),
            closed(json!({"preset": {"type": "string", "minLength": 1}, "methods": methods,
                "expires_at": {"type": "string", "format": "date-time"}}), &["preset"]),
        ]})
    }

    /// `POST /v1/runs/{run_id}/egress-proposals`.
    pub fn proposal_request() -> Value {
        closed(
            json!({
                "host": {"type": "string", "minLength": 1, "maxLength": 260},
                "methods": nullable(json!({"type": "array", "items": registered_method(), "minItems": 1})),
                "paths": nullable(json!({"type": "array", "items": {"type": "string", "pattern": "^/"},
                    "minItems": 1, "maxItems": 64})),
                "why": {"type": "string", "minLength": 1, "maxLength": 500, "pattern": NO_CONTROLS},
            }),
            &["host", "why"],
        )
    }

    /// `POST /v1/egress-proposals/{proposal_id}/decide`.
    pub fn decide_request() -> Value {
        closed(
            json!({
                "decision": one_of(&["approve", "deny"]),
                "scope": {"type": ["string", "null"], "enum": ["run", "tenant", null]},
                "actor": {"type": "string", "pattern": "^person:[A-Za-z0-9._@-]{1,64}$"},
            }),
            &["decision", "actor"],
        )
    }

    /// A proposal's status as lists narrow by it.
    pub fn proposal_status() -> Value {
        one_of(&["pending", "approved", "denied", "expired"])
    }

    /// `PUT /v1/tenants/{tenant_id}/egress-policy`.
    pub fn policy_document() -> Value {
        closed(
            json!({
                "mode": one_of(&["open", "allowlist"]),
                "default_methods": nullable(json!({"type": "array", "items": registered_method(), "minItems": 1})),
                "allow": {"type": "array", "items": policy_entry(false)},
                "deny": {"type": "array", "items": policy_entry(true)},
                "dry_run": {"type": "boolean"},
            }),
            &["mode"],
        )
    }

    /// `PUT /v1/tenants/{tenant_id}/mcp-servers`.
    pub fn mcp_servers() -> Value {
        let tool_name = json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"});
        let tool_list = json!({"type": "array", "items": tool_name, "maxItems": 1024});
        let server = closed(
            json!({
                "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
                "url": {"type": "string", "minLength": 1, "maxLength": 2048},
                "tools": closed(json!({"allow": tool_list, "deny": tool_list}), &[]),
            }),
            &["name", "url"],
        );
        closed(json!({"servers": {"type": "array", "items": server, "maxItems": 64}}), &["servers"])
    }

    /// `PUT /v1/tenants/{tenant_id}/dependency-gate`.
    pub fn gate_mode() -> Value {
        closed(json!({"mode": one_of(&["off", "high", "critical"])}), &["mode"])
    }

    /// A repository: `owner/name` (segments of `[A-Za-z0-9._-]`, not `.`
    /// or `..`), at most 200 bytes.
    pub fn repository() -> Value {
        json!({
            "type": "string",
            "maxLength": 200,
            "pattern": "^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+$",
            "not": {"pattern": "(^|/)\\.\\.?(/|$)"},
        })
    }

    /// A pull request's number.
    pub fn pull_request() -> Value {
        json!({"type": "integer", "minimum": 1, "maximum": i64::MAX})
    }

    /// `POST /v1/tenants/{tenant_id}/dependency-scans`.
    pub fn scan_request() -> Value {
        let lockfile = closed(
            json!({
                "path": {"type": "string", "minLength": 1, "maxLength": 500},
                "head_base64": string(),
                "base_base64": nullable(string()),
                "base_size": nullable(uint64()),
            }),
            &["path", "head_base64"],
        );
        closed(
            json!({
                "repository": repository(),
                "pull_request": pull_request(),
                "head_sha": {"type": "string", "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})$"},
                "lockfiles": {"type": "array", "items": lockfile, "minItems": 1, "maxItems": 100},
            }),
            &["repository", "pull_request", "head_sha", "lockfiles"],
        )
    }

    /// `POST /v1/tenants/{tenant_id}/gate-checks`.
    pub fn gate_check_request() -> Value {
        closed(
            json!({
                "repository": repository(),
                "pull_request": pull_request(),
                "head_sha": {"type": "string", "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})$"},
                "actor": one_of(&["agent", "person"]),
            }),
            &["repository", "pull_request", "head_sha", "actor"],
        )
    }

    /// `POST /v1/tenants/{tenant_id}/kill-switch`.
    pub fn kill_switch_request() -> Value {
        closed(json!({"engaged": {"type": "boolean"}, "reason": nullable(text())}), &["engaged"])
    }

    /// `POST /v1/emergency-revoke`.
    pub fn emergency_request() -> Value {
        closed(json!({"reason": nullable(text())}), &[])
    }

    /// A run's extra manifest claims: the run's own ids, files, sessions
    /// and budgets are its top-level fields, which a claim may only repeat
    /// (its `exec_id` is made by the server).
    fn run_claims() -> Value {
        let mut claims = manifest_claims();
        if let Some(properties) = claims.as_object_mut() {
            properties.remove("exec_id");
        }
        closed(claims, &[])
    }

    /// `POST /v1/runs`.
    pub fn run_request() -> Value {
        let budgets = closed(
            json!({
                "max_requests": budget(),
                "max_upload_bytes": budget(),
                "max_output_files": budget(),
                "max_egress_bytes": budget(),
                "max_tool_calls": budget(),
            }),
            &[],
        );
        closed(
            json!({
                "tenant_id": id(),
                "user_id": id(),
                "body": any(),
                "claims": run_claims(),
                "input_files": strings(),
                "read_sessions": strings(),
                "output_session_id": nullable(id()),
                "conversation_id": nullable(id()),
                "budgets": budgets,
                "ttl_secs": nullable(json!({"type": "integer", "minimum": 1, "maximum": i64::MAX})),
            }),
            &["tenant_id", "user_id", "body"],
        )
    }

    /// `POST /v1/runs/{run_id}/end`.
    pub fn end_request() -> Value {
        closed(json!({"outcome": one_of(&["succeeded", "failed"])}), &["outcome"])
    }

    /// `POST /v1/runs/{run_id}/cancel`.
    pub fn cancel_request() -> Value {
        closed(json!({"actor": nullable(text())}), &[])
    }

    /// A credential's host: one host name (IDNA) or address, without
    /// scheme, port, path or user; what no host holds is refused.
    fn host() -> Value {
        json!({"type": "string", "minLength": 1, "pattern": "^[^\\s\\u0000-\\u001F\\u007F-\\u009F\\\\@%/?#<>^|]+$"})
    }

    fn credential_purpose() -> Value {
        one_of(&gatehouse_plane::credentials::PURPOSES)
    }

    /// `POST /v1/tenants/{tenant_id}/credentials`: one closed shape per
    /// kind (`kind` absent is `static`); `inject` is `{"header", "format"}`
    /// or `{"basic_username"}`.
    pub fn credential_request() -> Value {
        let inject = json!({"oneOf": [
            closed(json!({"header": string(), "format": string(), "basic_username": {"type": "null"}}), &["header", "format"]),
            closed(json!({"basic_username": string(), "header": {"type": "null"}, "format": {"type": "null"}}), &["basic_username"]),
        ]});
        // Every kind's own fields; in another kind's shape each may only be null.
        let mut kind_fields = vec!["inject"];
        for (_, fields) in gatehouse_plane::credential_kinds::KIND_FIELDS {
            kind_fields.extend(fields.iter().filter(|f| !kind_fields.contains(f)).collect::<Vec<_>>());
        }
        let common = |kind: Value| {
            let mut properties = json!({
                "name": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": NO_CONTROLS},
                "purpose": credential_purpose(),
                "kind": kind,
                "allow_plain_http": {"type": "boolean"},
            });
            for field in &kind_fields {
                properties[*field] = json!({"type": "null"});
            }
            properties
        };
        let with = |kind: &str, fields: Value, required: &[&str]| {
            let mut properties = common(json!({"const": kind}));
            if let (Some(p), Value::Object(fields)) = (properties.as_object_mut(), fields) {
                p.extend(fields);
            }
            let mut required: Vec<&str> = required.to_vec();
            required.extend(["name", "purpose", "kind"]);
            let mut schema = json!({"properties": properties, "required": required});
            // Only a static secret signs webhook deliveries.
            schema["not"] = json!({"properties": {"purpose": {"const": "webhook_signing"}}});
            schema
        };
        let hosts = json!({"type": "array", "items": host(), "minItems": 1, "maxItems": 16});
        let mut static_kind = {
            let mut properties = common(nullable(json!({"type": "string", "const": "static"})));
            if let Some(p) = properties.as_object_mut() {
                p.insert("host".into(), host());
                p.insert("inject".into(), nullable(inject.clone()));
                p.insert("secret".into(), secret());
            }
            json!({"properties": properties, "required": ["name", "purpose", "host", "secret"]})
        };
        // A webhook signing secret signs deliveries and takes no inject
        // rule; every other static credential needs one.
        static_kind["if"] =
            json!({"properties": {"purpose": {"const": "webhook_signing"}}, "required": ["purpose"]});
        static_kind["then"] = json!({"properties": {"inject": {"type": "null"}}});
        static_kind["else"] = json!({"properties": {"inject": {"type": "object"}}, "required": ["inject"]});
        let id_from_1 = json!({"type": "integer", "minimum": 1, "maximum": u64::MAX});
        let github_app = with(
            "github_app",
            json!({
                "app_id": id_from_1,
                "installation_id": id_from_1,
                "private_key": {"type": "string", "minLength": 1},
                "api_url": nullable(string()),
                "repositories": nullable(json!({"type": "array", "minItems": 1, "maxItems": 500,
                    "items": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,100}$"}})),
                "permissions": nullable(json!({"type": "object", "minProperties": 1, "maxProperties": 100,
                    "propertyNames": {"pattern": "^[a-z_]{1,64}$"},
                    "additionalProperties": {"type": "string", "enum": ["read", "write", "admin"]}})),
                "hosts": hosts,
                "inject": nullable(inject.clone()),
            }),
            &["app_id", "installation_id", "private_key", "hosts"],
        );
        let vschar =
            |max: u32| json!({"type": "string", "minLength": 1, "maxLength": max, "pattern": "^[ -~]+$"});
        let oauth2_refresh = with(
            "oauth2_refresh",
            json!({
                "token_url": string(),
                "client_id": vschar(256),
                "client_secret": nullable(vschar(1024)),
                "refresh_token": vschar(4096),
                "scope": nullable(json!({"type": "string", "maxLength": 1024})),
                "host": host(),
                "inject": nullable(inject),
            }),
            &["token_url", "client_id", "refresh_token", "host"],
        );
        let name = json!({"type": "string", "pattern": "^[a-z0-9-]{1,64}$"});
        let aws_sigv4 = with(
            "aws_sigv4",
            json!({
                "access_key_id": {"type": "string", "pattern": "^[A-Z0-9]{16,128}$"},
                "secret_access_key": {"type": "string", "pattern": "^[!-~]{1,256}$"},
                "session_token": nullable(json!({"type": "string", "pattern": "^[!-~]{1,2048}$"})),
                "region": name,
                "service": name,
                "hosts": hosts,
            }),
            &["access_key_id", "secret_access_key", "region", "service", "hosts"],
        );
        // One closed object of every field, and each kind's shape in it.
        let mut every_field = common(one_of(&gatehouse_plane::credential_kinds::KINDS));
        for field in &kind_fields {
            every_field[*field] = json!({});
        }
        let mut schema = closed(every_field, &["name", "purpose"]);
        schema["oneOf"] = json!([static_kind, github_app, oauth2_refresh, aws_sigv4]);
        schema
    }

    /// A credential's secret: 1-4096 bytes, no control character.
    fn secret() -> Value {
        json!({"type": "string", "minLength": 1, "maxLength": 4096, "pattern": NO_CONTROLS})
    }

    /// `PUT /v1/tenants/{tenant_id}/credentials/{credential_id}/secret`.
    pub fn secret_request() -> Value {
        closed(json!({"secret": secret()}), &["secret"])
    }

    /// `POST /v1/runs/{run_id}/leases`.
    pub fn lease_request() -> Value {
        closed(
            json!({"credential_id": id(), "purpose": credential_purpose(), "host": host()}),
            &["credential_id", "purpose", "host"],
        )
    }

    /// A header to send: `[name, value]`.
    fn header_pair() -> Value {
        json!({
            "type": "array",
            "prefixItems": [string(), string()],
            "items": false,
            "minItems": 2,
        })
    }

    /// `POST /v1/tenants/{tenant_id}/credentials/{credential_id}/fetch`.
    pub fn person_fetch_request() -> Value {
        closed(
            json!({
                "actor": {"type": "string", "pattern": "^person:[A-Za-z0-9._@-]{1,64}$"},
                "method": method(),
                "url": string(),
                "headers": {"type": "array", "items": header_pair()},
                "body_base64": nullable(string()),
            }),
            &["actor", "url"],
        )
    }

    /// `POST /v1/egress/fetch`.
    pub fn fetch_request() -> Value {
        let header = header_pair();
        closed(
            json!({
                "grant": nullable(string()),
                "method": method(),
                "url": string(),
                "headers": {"type": "array", "items": header},
                "body_base64": nullable(string()),
                "purpose": fetch_purpose(),
                "sign_with": nullable(string()),
            }),
            &["url", "purpose"],
        )
    }
}

fn fields(names: &[&str]) -> Value {
    let properties: Map<String, Value> = names.iter().map(|f| ((*f).to_owned(), json!({}))).collect();
    json!({"type": "object", "properties": properties})
}

/// Answers besides a route's usual one: (method, path, status, what it
/// means, its top-level fields). A route listed here answers its usual
/// fields under this status's neighbour (`201` beside a `202`).
const OTHER_ANSWERS: &[(&str, &str, &str, &str, &[&str])] = &[
    (
        "post",
        "/v1/tenants/{tenant_id}/dependency-scans",
        "202",
        "Submitted and recorded, not finished within GATEHOUSE_DEPS_SCAN_WAIT_MS: it finishes in the background; GET it by id",
        &["scan_id", "created_at", "tenant_id", "repository", "pull_request", "head_sha", "status"],
    ),
    (
        "post",
        "/v1/runs/{run_id}/egress-proposals",
        "200",
        "The same ask of the run was made before: the same proposal, as it stands",
        PROPOSAL_FIELDS,
    ),
];

fn answer(answer: &Answer) -> Value {
    match answer {
        Answer::Json(names) => json!({"application/json": {"schema": fields(names)}}),
        Answer::Text => json!({"text/plain": {"schema": {"type": "string"}}}),
        Answer::Bytes => json!({"*/*": {"schema": {}}}),
    }
}

/// A path parameter's schema: `{name}` is a file name, every other one an id.
fn path_param(name: &str) -> Value {
    if name == "name" { schema::file_name() } else { schema::id() }
}

/// Under strict tenant isolation (`CODEAPI_TENANT_ISOLATION_STRICT`, the
/// default) a request that takes a tenant must name one: `tenant_id` is
/// required (and not `null`) where it is otherwise optional.
fn require_tenant(object: &mut Value) {
    object["properties"]["tenant_id"] = schema::id();
    if let Some(required) = object["required"].as_array_mut() {
        required.push(json!("tenant_id"));
    }
}

/// The document, for a node that requires a tenant (`strict_tenants`) or not.
pub fn document(strict_tenants: bool) -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let mut responses = json!({
            r.status.to_string(): {"description": "OK", "content": answer(&r.answer)},
            "default": {
                "description": "The safe error shape",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        });
        if matches!(
            r.path,
            "/v1/refusals" | "/v1/runs/{run_id}/events" | "/v1/runs/{run_id}/artifacts" | "/v1/audit"
        ) {
            responses[r.status.to_string()]["headers"] = json!({crate::http::RECORD_COMPLETE: {
                "description": "Whether every event this node queued before the read was in the store (false: read again).",
                "schema": {"type": "string", "enum": ["true", "false"]},
            }});
        }
        if r.path == "/readyz" {
            responses["503"] = json!({
                "description": "Not ready, and why",
                "content": {"application/json": {"schema": fields(&["status", "role", "reason"])}},
            });
        }
        let mut op = json!({"summary": r.summary, "responses": responses});
        if r.auth {
            op["security"] = json!([{"serviceToken": []}]);
        }
        match r.body {
            Body::None => {}
            Body::Json(schema) => {
                let mut schema = schema();
                if strict_tenants {
                    match r.path {
                        "/v1/grants" => require_tenant(&mut schema),
                        "/v1/manifests/sign" => require_tenant(&mut schema["properties"]["claims"]),
                        _ => {}
                    }
                }
                op["requestBody"] =
                    json!({"required": true, "content": {"application/json": {"schema": schema}}});
            }
            Body::Raw => {
                op["requestBody"] = json!({
                    "required": false,
                    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                });
            }
        }
        let params: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": path_param(name)}))
            .chain(r.query.iter().map(|p| {
                let required =
                    p.required || (strict_tenants && r.path == "/v1/files" && p.name == "tenant_id");
                json!({"name": p.name, "in": "query", "required": required, "schema": (p.schema)()})
            }))
            .collect();
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        for (_, _, status, description, names) in
            OTHER_ANSWERS.iter().filter(|(m, p, ..)| *m == r.method && *p == r.path)
        {
            // The usual answer is then a creation's.
            if let Some(usual) = op["responses"].as_object_mut().and_then(|all| all.remove("200")) {
                op["responses"]["201"] = usual;
            }
            op["responses"][*status] = json!({"description": description,
                "content": {"application/json": {"schema": fields(names)}}});
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
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "message", "request_id"],
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "reason": {"type": "string"},
                        "retryable": {"type": "boolean"},
                        "request_id": {"type": "string"},
                        "retry_after_secs": {"type": "integer", "minimum": 0},
                        "rule_reason": {"type": "string", "description": "A deny rule's reason for the agent (also x-gatehouse-rule-reason)."},
                        "proposal_id": {"type": "string", "description": "The egress proposal a policy refusal made, for a person to decide (also x-gatehouse-proposal)."},
                    },
                }},
            }},
        },
        "paths": paths,
    })
}
