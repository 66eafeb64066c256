//! Every setting name gatehouse reads.

/// Worker only: Ed25519 PKCS#8 private key (PEM or base64 DER).
pub const MANIFEST_PRIVATE_KEY: &str = "CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY";
/// Runner (and worker): SPKI public key(s) (PEM or base64 DER).
pub const MANIFEST_PUBLIC_KEY: &str = "SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY";
/// Refuse requests without a manifest [true].
pub const REQUIRE_MANIFEST: &str = "SANDBOX_REQUIRE_EGRESS_MANIFEST";
/// The egress grant secret, 32+ bytes.
pub const GRANT_SECRET: &str = "CODEAPI_EGRESS_GRANT_SECRET";
/// Refuse grants without a live ledger record [true].
pub const LEDGER_REQUIRED: &str = "CODEAPI_EGRESS_LEDGER_REQUIRED";
/// The internal service token, 32+ bytes.
pub const SERVICE_TOKEN: &str = "CODEAPI_INTERNAL_SERVICE_TOKEN";
/// The key storage namespaces (session keys) derive from: its own, so
/// rotating the grant secret never moves a user's files (worker, all).
pub const SESSION_KEY_SECRET: &str = "GATEHOUSE_SESSION_KEY_SECRET";
/// When set, `/metrics` requires it as a bearer token.
pub const METRICS_TOKEN: &str = "GATEHOUSE_METRICS_TOKEN";
/// Refuse requests without a tenant [true].
pub const TENANT_ISOLATION_STRICT: &str = "CODEAPI_TENANT_ISOLATION_STRICT";
/// A TOML file of named caller tokens with scopes (`[[caller]] name,
/// scopes, token_sha256`, optionally `tenants` to bind the caller to
/// those tenants); with it, the service token is optional.
pub const CALLERS_FILE: &str = "GATEHOUSE_CALLERS_FILE";
/// `service_token` [default] or `none`.
pub const AUTH_PROVIDER: &str = "CODEAPI_AUTH_PROVIDER";
/// Must be true for `CODEAPI_AUTH_PROVIDER=none`.
pub const ALLOW_AUTH_PROVIDER_NONE: &str = "CODEAPI_ALLOW_AUTH_PROVIDER_NONE";
/// Development mode: no authentication at all. Loopback only.
pub const LOCAL_MODE: &str = "LOCAL_MODE";
/// clamd host; unset means no scanner (verdict `not_scanned`).
pub const CLAMD_HOST: &str = "CLAMD_HOST";
/// clamd port [3310].
pub const CLAMD_PORT: &str = "CLAMD_PORT";
/// `all`, `worker`, `runner`, `gateway` [all].
pub const ROLE: &str = "GATEHOUSE_ROLE";
/// HTTP API address [127.0.0.1:8700].
pub const LISTEN: &str = "GATEHOUSE_LISTEN";
/// Forward-proxy address [127.0.0.1:8701].
pub const PROXY_LISTEN: &str = "GATEHOUSE_PROXY_LISTEN";
/// Embedded state and generated keys [./gatehouse-data].
pub const DATA_DIR: &str = "GATEHOUSE_DATA_DIR";
/// `sqlite://…` or `postgres://…` [SQLite in the data dir].
pub const DATABASE_URL: &str = "GATEHOUSE_DATABASE_URL";
/// Upper bound on one store operation, in milliseconds [5000].
pub const STORE_TIMEOUT_MS: &str = "GATEHOUSE_STORE_TIMEOUT_MS";
/// A live run without a heartbeat this long is `expired`, in seconds [120].
pub const RUN_HEARTBEAT_TIMEOUT_SECS: &str = "GATEHOUSE_RUN_HEARTBEAT_TIMEOUT_SECS";
/// Run events and refusals are kept this many days [30]; the audit log is never pruned.
pub const EVENT_RETENTION_DAYS: &str = "GATEHOUSE_EVENT_RETENTION_DAYS";
/// At SIGTERM/SIGINT, how long the events still queued for the store may take to be written before the process exits [10].
pub const SHUTDOWN_DRAIN_SECS: &str = "GATEHOUSE_SHUTDOWN_DRAIN_SECS";
/// An offline OSV database (a directory of advisories, or osv.dev's zip exports) for API dependency scans [unset].
pub const OSV_DB: &str = "GATEHOUSE_OSV_DB";
/// The OSV API (or a mirror, `gatehouse osv serve`) API dependency scans ask when no offline database is set [https://api.osv.dev].
pub const OSV_URL: &str = "GATEHOUSE_OSV_URL";
/// Dependency scans parsing at once on this node; more wait their turn, before their body is read [2].
pub const DEPS_SCAN_CONCURRENCY: &str = "GATEHOUSE_DEPS_SCAN_CONCURRENCY";
/// How long a scan submission waits for its turn and its scan before it is answered `202` (pending), in milliseconds [20000].
pub const DEPS_SCAN_WAIT_MS: &str = "GATEHOUSE_DEPS_SCAN_WAIT_MS";
/// Where files through grants are kept: `s3://bucket[/prefix]` (with the usual `AWS_*` settings) [the data dir's `objects`].
pub const OBJECT_STORE_URL: &str = "GATEHOUSE_OBJECT_STORE_URL";
/// A file session untouched (not written or read) this many days is deleted with its files [30].
pub const SESSION_TTL_DAYS: &str = "GATEHOUSE_SESSION_TTL_DAYS";
/// Requests a minute a tenant's people may make with its stored credentials (`POST /v1/tenants/{t}/credentials/{id}/fetch`), counted across the fleet in the ledger [60].
pub const CREDENTIAL_USE_PER_MINUTE: &str = "GATEHOUSE_CREDENTIAL_USE_PER_MINUTE";
/// Longest grant lifetime (`exp - iat`) accepted, for runs and for `POST /v1/grants`, in seconds [86400].
pub const GRANT_MAX_LIFETIME_SECS: &str = "GATEHOUSE_GRANT_MAX_LIFETIME_SECS";
/// Longest a client may take to send a request's header, in milliseconds [10000].
pub const HEADER_READ_TIMEOUT_MS: &str = "GATEHOUSE_HEADER_READ_TIMEOUT_MS";
/// A connection with nothing moving and no request in hand is closed after this, in milliseconds [60000].
pub const IDLE_TIMEOUT_MS: &str = "GATEHOUSE_IDLE_TIMEOUT_MS";
/// Connections open at once on each listener (API, proxy) [4096].
pub const MAX_CONNECTIONS: &str = "GATEHOUSE_MAX_CONNECTIONS";
/// Connections open at once from one client address on each listener [512].
pub const MAX_CONNECTIONS_PER_CLIENT: &str = "GATEHOUSE_MAX_CONNECTIONS_PER_CLIENT";
/// The proxy address sandboxes are given (`POST /v1/runs`) [http://GATEHOUSE_PROXY_LISTEN].
pub const PROXY_PUBLIC_URL: &str = "GATEHOUSE_PROXY_PUBLIC_URL";
/// Redis for the ledger and leases [in-process].
pub const REDIS_URL: &str = "GATEHOUSE_REDIS_URL";
/// Prefix of every ledger key in Redis [gatehouse:ledger:].
pub const LEDGER_KEY_PREFIX: &str = "GATEHOUSE_LEDGER_KEY_PREFIX";
/// Upper bound on one ledger operation, in milliseconds [1000].
pub const LEDGER_TIMEOUT_MS: &str = "GATEHOUSE_LEDGER_TIMEOUT_MS";
/// Largest content `POST /v1/content/scan` and `content scan` accept, in bytes [33554432 (32 MiB)].
pub const CONTENT_MAX_BYTES: &str = "GATEHOUSE_CONTENT_MAX_BYTES";
/// Upper bound on one clamd exchange (connect, stream, reply), in milliseconds [30000].
pub const CLAMD_TIMEOUT_MS: &str = "GATEHOUSE_CLAMD_TIMEOUT_MS";
/// CIDRs an operator explicitly opens to egress (never metadata).
pub const EGRESS_ALLOW_RANGES: &str = "GATEHOUSE_EGRESS_ALLOW_RANGES";
/// DNS servers for egress resolution: comma-separated `IP` or `IP:port` [/etc/resolv.conf].
pub const DNS_SERVERS: &str = "GATEHOUSE_DNS_SERVERS";
/// PEM file of extra root certificates for egress TLS (an internal CA) [none].
pub const EGRESS_EXTRA_CA_FILE: &str = "GATEHOUSE_EGRESS_EXTRA_CA_FILE";
/// Ports the proxy lets `CONNECT` reach [443]. Port 80 is off by default:
/// plain HTTP goes absolute-form, where every request is checked.
pub const PROXY_CONNECT_PORTS: &str = "GATEHOUSE_PROXY_CONNECT_PORTS";
/// Largest upstream response body the door passes on, in bytes [67108864 (64 MiB)].
pub const EGRESS_RESPONSE_MAX_BYTES: &str = "GATEHOUSE_EGRESS_RESPONSE_MAX_BYTES";
/// Largest request body the door sends upstream, in bytes [67108864 (64 MiB)].
pub const EGRESS_REQUEST_MAX_BYTES: &str = "GATEHOUSE_EGRESS_REQUEST_MAX_BYTES";
/// Time for one TCP connect to an upstream, in milliseconds [10000].
pub const EGRESS_CONNECT_TIMEOUT_MS: &str = "GATEHOUSE_EGRESS_CONNECT_TIMEOUT_MS";
/// Time to an upstream's response headers, in milliseconds [30000].
pub const EGRESS_RESPONSE_TIMEOUT_MS: &str = "GATEHOUSE_EGRESS_RESPONSE_TIMEOUT_MS";
/// Time for a whole forwarded request, body included, in milliseconds [600000].
pub const EGRESS_REQUEST_TIMEOUT_MS: &str = "GATEHOUSE_EGRESS_REQUEST_TIMEOUT_MS";
/// Bytes one `CONNECT` tunnel may carry, both directions together [1073741824 (1 GiB)].
pub const PROXY_TUNNEL_MAX_BYTES: &str = "GATEHOUSE_PROXY_TUNNEL_MAX_BYTES";
/// How long one `CONNECT` tunnel may stay open, in milliseconds [600000].
pub const PROXY_TUNNEL_TIMEOUT_MS: &str = "GATEHOUSE_PROXY_TUNNEL_TIMEOUT_MS";
/// The gateway's credential sealing key (X25519, base64): opens stored
/// credentials for one request at a time. Never on a worker or runner.
pub const CREDENTIAL_SEALING_KEY: &str = "GATEHOUSE_CREDENTIAL_SEALING_KEY";
/// The previous sealing key, still opened while `gatehouse credentials rewrap` moves rows off it.
pub const CREDENTIAL_SEALING_PREVIOUS_KEY: &str = "GATEHOUSE_CREDENTIAL_SEALING_PREVIOUS_KEY";
/// The sealing key's public half (base64): what a worker seals new credentials to.
pub const CREDENTIAL_SEALING_PUBLIC_KEY: &str = "GATEHOUSE_CREDENTIAL_SEALING_PUBLIC_KEY";
/// The interception CA's private key (PKCS#8 PEM): the gateway's, to mint
/// leaf certificates for the hosts runs hold leases for. Never on a worker or runner.
pub const INTERCEPT_CA_KEY: &str = "GATEHOUSE_INTERCEPT_CA_KEY";
/// The interception CA's certificate (PEM): the gateway presents leaves
/// under it; the worker returns it with every run for the sandbox's trust store.
pub const INTERCEPT_CA_CERT: &str = "GATEHOUSE_INTERCEPT_CA_CERT";
/// The settings page's sign-in: an Argon2id PHC string (`gatehouse admin hash-password`).
pub const ADMIN_PASSWORD_HASH: &str = "GATEHOUSE_ADMIN_PASSWORD_HASH";
/// Proxies (comma-separated CIDRs or addresses) whose `X-Forwarded-For`
/// names the client, for the settings page's sign-in throttle [empty].
pub const TRUSTED_PROXIES: &str = "GATEHOUSE_TRUSTED_PROXIES";
/// Legacy HMAC manifest secret (weaker; never on a runner).
pub const MANIFEST_HMAC_SECRET: &str = "GATEHOUSE_MANIFEST_HMAC_SECRET";
/// The previous grant secret, accepted for opening during rotation.
pub const GRANT_PREVIOUS_SECRET: &str = "GATEHOUSE_EGRESS_GRANT_PREVIOUS_SECRET";
/// Whether this deployment runs sandboxed executions (needs manifest keys) [true].
pub const SANDBOX_EXECUTION: &str = "GATEHOUSE_SANDBOX_EXECUTION";
/// Development only, loopback only: allow running without a service token.
pub const DEV_ALLOW_NO_SERVICE_TOKEN: &str = "GATEHOUSE_DEV_ALLOW_NO_SERVICE_TOKEN";
/// Comma-separated names of the insecure settings
/// ([`INSECURE_WITH_ACKNOWLEDGEMENT`]) accepted off loopback: each one
/// set to `false` on a non-loopback listen address is refused unless
/// named here.
pub const ACCEPT_INSECURE: &str = "GATEHOUSE_ACCEPT_INSECURE";
/// The settings whose `false` is refused off loopback unless
/// [`ACCEPT_INSECURE`] names them.
pub const INSECURE_WITH_ACKNOWLEDGEMENT: &[&str] =
    &[REQUIRE_MANIFEST, LEDGER_REQUIRED, TENANT_ISOLATION_STRICT];
/// Manifest clock skew tolerance in seconds [30].
pub const MANIFEST_CLOCK_SKEW_SECS: &str = "GATEHOUSE_MANIFEST_CLOCK_SKEW_SECS";
/// Longest manifest lifetime accepted, in seconds [86400].
pub const MANIFEST_MAX_LIFETIME_SECS: &str = "GATEHOUSE_MANIFEST_MAX_LIFETIME_SECS";
/// Default manifest lifetime when signing, in seconds [300].
pub const MANIFEST_TTL_SECS: &str = "GATEHOUSE_MANIFEST_TTL_SECS";
/// Default grant lifetime when minting, in seconds [900].
pub const GRANT_TTL_SECS: &str = "GATEHOUSE_GRANT_TTL_SECS";
/// `text` or `json` [text].
pub const LOG_FORMAT: &str = "GATEHOUSE_LOG_FORMAT";
/// Log filter in `tracing` syntax, e.g. `info,gatehouse_server=debug` [info].
pub const LOG_FILTER: &str = "GATEHOUSE_LOG";
/// A TOML configuration file (same keys as the environment).
pub const CONFIG_FILE: &str = "GATEHOUSE_CONFIG";

/// Settings that hold secrets: each also accepts `NAME_FILE`.
pub const SECRETS: &[&str] = &[
    MANIFEST_PRIVATE_KEY,
    GRANT_SECRET,
    SERVICE_TOKEN,
    MANIFEST_HMAC_SECRET,
    GRANT_PREVIOUS_SECRET,
    SESSION_KEY_SECRET,
    METRICS_TOKEN,
    CREDENTIAL_SEALING_KEY,
    CREDENTIAL_SEALING_PREVIOUS_KEY,
    INTERCEPT_CA_KEY,
    ADMIN_PASSWORD_HASH,
];

/// Every name, including the `_FILE` forms.
pub const ALL: &[&str] = &[
    MANIFEST_PRIVATE_KEY,
    "CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY_FILE",
    MANIFEST_PUBLIC_KEY,
    "SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY_FILE",
    REQUIRE_MANIFEST,
    GRANT_SECRET,
    "CODEAPI_EGRESS_GRANT_SECRET_FILE",
    LEDGER_REQUIRED,
    SERVICE_TOKEN,
    "CODEAPI_INTERNAL_SERVICE_TOKEN_FILE",
    SESSION_KEY_SECRET,
    "GATEHOUSE_SESSION_KEY_SECRET_FILE",
    METRICS_TOKEN,
    "GATEHOUSE_METRICS_TOKEN_FILE",
    TENANT_ISOLATION_STRICT,
    CALLERS_FILE,
    AUTH_PROVIDER,
    ALLOW_AUTH_PROVIDER_NONE,
    ACCEPT_INSECURE,
    LOCAL_MODE,
    CLAMD_HOST,
    CLAMD_PORT,
    ROLE,
    LISTEN,
    PROXY_LISTEN,
    DATA_DIR,
    DATABASE_URL,
    STORE_TIMEOUT_MS,
    RUN_HEARTBEAT_TIMEOUT_SECS,
    EVENT_RETENTION_DAYS,
    SHUTDOWN_DRAIN_SECS,
    OSV_DB,
    OSV_URL,
    DEPS_SCAN_CONCURRENCY,
    DEPS_SCAN_WAIT_MS,
    OBJECT_STORE_URL,
    SESSION_TTL_DAYS,
    CREDENTIAL_USE_PER_MINUTE,
    GRANT_MAX_LIFETIME_SECS,
    HEADER_READ_TIMEOUT_MS,
    IDLE_TIMEOUT_MS,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_CLIENT,
    PROXY_PUBLIC_URL,
    REDIS_URL,
    LEDGER_KEY_PREFIX,
    LEDGER_TIMEOUT_MS,
    CONTENT_MAX_BYTES,
    CLAMD_TIMEOUT_MS,
    EGRESS_ALLOW_RANGES,
    PROXY_CONNECT_PORTS,
    EGRESS_RESPONSE_MAX_BYTES,
    EGRESS_REQUEST_MAX_BYTES,
    EGRESS_CONNECT_TIMEOUT_MS,
    EGRESS_RESPONSE_TIMEOUT_MS,
    EGRESS_REQUEST_TIMEOUT_MS,
    PROXY_TUNNEL_MAX_BYTES,
    PROXY_TUNNEL_TIMEOUT_MS,
    DNS_SERVERS,
    EGRESS_EXTRA_CA_FILE,
    MANIFEST_HMAC_SECRET,
    "GATEHOUSE_MANIFEST_HMAC_SECRET_FILE",
    GRANT_PREVIOUS_SECRET,
    "GATEHOUSE_EGRESS_GRANT_PREVIOUS_SECRET_FILE",
    CREDENTIAL_SEALING_KEY,
    "GATEHOUSE_CREDENTIAL_SEALING_KEY_FILE",
    CREDENTIAL_SEALING_PREVIOUS_KEY,
    "GATEHOUSE_CREDENTIAL_SEALING_PREVIOUS_KEY_FILE",
    CREDENTIAL_SEALING_PUBLIC_KEY,
    "GATEHOUSE_CREDENTIAL_SEALING_PUBLIC_KEY_FILE",
    INTERCEPT_CA_KEY,
    "GATEHOUSE_INTERCEPT_CA_KEY_FILE",
    INTERCEPT_CA_CERT,
    "GATEHOUSE_INTERCEPT_CA_CERT_FILE",
    ADMIN_PASSWORD_HASH,
    "GATEHOUSE_ADMIN_PASSWORD_HASH_FILE",
    TRUSTED_PROXIES,
    SANDBOX_EXECUTION,
    DEV_ALLOW_NO_SERVICE_TOKEN,
    MANIFEST_CLOCK_SKEW_SECS,
    MANIFEST_MAX_LIFETIME_SECS,
    MANIFEST_TTL_SECS,
    GRANT_TTL_SECS,
    LOG_FORMAT,
    LOG_FILTER,
    CONFIG_FILE,
];
