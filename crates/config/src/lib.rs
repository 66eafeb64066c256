//! gatehouse configuration and secure startup.
//!
//! Settings use the seed documents' own names (`CODEAPI_*`, `SANDBOX_*`,
//! `LOCAL_MODE`, `CLAMD_*`) and `GATEHOUSE_*` only for what the seeds do not
//! name. A TOML file may set the same keys; the environment wins. Every secret
//! may instead be given as a file through the same name with `_FILE`.
//!
//! [`load`] is a pure function of a [`Source`]: it parses every setting, then
//! validates the combination for the node's role and returns **all** problems
//! at once, so an operator fixes a deployment in one pass. An insecure
//! combination is an error, never a warning: gatehouse fails loudly at start
//! rather than serving traffic quietly (seed: "Fail-fast startup").
//!
//! Architecture invariant: no network, no writes; reads only the files the
//! configuration names.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod source;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use gatehouse_capability::{
    AdminPasswordHash, CallerToken, Callers, KeyError, ManifestSigningKey, ManifestVerifyingKeys, Scope,
    SealingKey, SealingKeys, SealingPublicKey, Secret, ServiceToken,
};
use ipnet::IpNet;

pub use source::{MapSource, ProcessSource, Source};

/// Every setting name gatehouse reads.
pub mod names {
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
}

/// Files the embedded single-machine mode keeps in the data directory
/// (the same names `gatehouse keygen` writes).
pub mod embedded_files {
    /// PKCS#8 PEM.
    pub const MANIFEST_PRIVATE_KEY: &str = "manifest-private.pem";
    /// SPKI PEM.
    pub const MANIFEST_PUBLIC_KEY: &str = "manifest-public.pem";
    /// One line of text.
    pub const GRANT_SECRET: &str = "grant-secret";
    /// One line of text.
    pub const SERVICE_TOKEN: &str = "service-token";
    /// One line of text.
    pub const SESSION_KEY_SECRET: &str = "session-key-secret";
    /// One line: the credential sealing key (X25519, base64url).
    pub const CREDENTIAL_SEALING_KEY: &str = "credential-sealing-key";
    /// One line: its public half, for workers.
    pub const CREDENTIAL_SEALING_PUBLIC_KEY: &str = "credential-sealing-public-key";
    /// PKCS#8 PEM: the interception CA's key.
    pub const INTERCEPT_CA_KEY: &str = "intercept-ca-key.pem";
    /// PEM: the interception CA's certificate (public).
    pub const INTERCEPT_CA_CERT: &str = "intercept-ca.pem";
    /// One line: the settings page password's Argon2id hash (never the password).
    pub const ADMIN_PASSWORD_HASH: &str = "admin-password-hash";
    /// The embedded durable store (SQLite).
    pub const DATABASE: &str = "gatehouse.db";
    /// PKCS#8 PEM: signs audit checkpoints (its own key, never the manifest key).
    pub const AUDIT_SIGNING_KEY: &str = "audit-signing.pem";
    /// SPKI PEM: verifies audit checkpoints.
    pub const AUDIT_PUBLIC_KEY: &str = "audit-public.pem";
}

/// Which part of gatehouse this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every role in one process.
    All,
    /// Control plane: holds the manifest private key and the grant secret.
    Worker,
    /// Beside the sandbox runner: holds only the manifest public key.
    Runner,
    /// The outbound door: holds the grant secret, never the manifest private key.
    Gateway,
}

impl Role {
    /// Parses `all|worker|runner|gateway`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Some(Self::All),
            "worker" => Some(Self::Worker),
            "runner" => Some(Self::Runner),
            "gateway" => Some(Self::Gateway),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Worker => "worker",
            Self::Runner => "runner",
            Self::Gateway => "gateway",
        }
    }

    /// Signs manifests and mints grants.
    pub fn mints(self) -> bool {
        matches!(self, Self::All | Self::Worker)
    }

    /// Verifies manifests.
    pub fn verifies_manifests(self) -> bool {
        matches!(self, Self::All | Self::Worker | Self::Runner)
    }

    /// Opens grants.
    pub fn opens_grants(self) -> bool {
        matches!(self, Self::All | Self::Worker | Self::Gateway)
    }

    /// Uses the durable store. A runner does not: it sits beside the
    /// sandbox and needs nothing but the public key.
    pub fn has_store(self) -> bool {
        self.opens_grants()
    }
}

/// How principals authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProvider {
    /// The internal service token (default).
    ServiceToken,
    /// No authentication (requires `CODEAPI_ALLOW_AUTH_PROVIDER_NONE=true`).
    None,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// One configuration problem. Messages name settings and explain; they never
/// contain a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The setting concerned.
    pub setting: String,
    /// Stable code: `missing_required`, `weak_secret`, `key_malformed`,
    /// `key_wrong_type`, `invalid_value`, `insecure_combination`,
    /// `forbidden_for_role`, `ambiguous_source`, `unreadable_file`,
    /// `invalid_file`, `unknown_setting`.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Problem {
    fn new(setting: &str, code: &'static str, message: String) -> Self {
        Self { setting: setting.to_owned(), code, message }
    }
    fn new_dynamic(setting: String, code: &'static str, message: String) -> Self {
        Self { setting, code, message }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.setting, self.message, self.code)
    }
}

/// `GATEHOUSE_GRANT_MAX_LIFETIME_SECS`'s default: a day.
pub const DEFAULT_GRANT_MAX_LIFETIME_SECS: i64 = 86_400;

/// Where API dependency scans ask OSV by default.
pub const DEFAULT_OSV_URL: &str = "https://api.osv.dev";

/// What each listener (the API and the proxy) allows one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accepting a connection to the end of a request's header.
    pub header_read_timeout: std::time::Duration,
    /// Nothing moving and no request in hand for this long: closed.
    pub idle_timeout: std::time::Duration,
    /// Connections open at once per listener.
    pub max_connections: usize,
    /// Connections open at once from one client address, per listener.
    pub max_connections_per_client: usize,
}

/// A validated configuration. Holding one means every startup check passed.
#[derive(Debug)]
pub struct Config {
    /// This node's role.
    pub role: Role,
    /// HTTP API address.
    pub listen: SocketAddr,
    /// Forward-proxy address.
    pub proxy_listen: SocketAddr,
    /// Embedded state directory.
    pub data_dir: PathBuf,
    /// Single-machine mode: role `all`, loopback only, keys from the data dir.
    pub embedded: bool,
    /// Database URL (may hold a password: never log it); unset, the data
    /// directory's SQLite file (see [`Config::store_url`]).
    pub database_url: Option<Secretish>,
    /// Upper bound on one store operation.
    pub store_timeout: std::time::Duration,
    /// A live run without a heartbeat this long expires.
    pub run_heartbeat_timeout_secs: i64,
    /// Run events and refusals older than this many days are pruned.
    pub event_retention_days: i64,
    /// At shutdown, how long the events still queued may take to reach the store.
    pub shutdown_drain: std::time::Duration,
    /// The offline OSV database API dependency scans check against.
    pub osv_db: Option<PathBuf>,
    /// The OSV API asked when there is no offline database, without a trailing `/`.
    pub osv_url: String,
    /// Dependency scans parsing at once (`GATEHOUSE_DEPS_SCAN_CONCURRENCY`).
    pub deps_scan_concurrency: usize,
    /// How long a scan submission waits before it is answered pending (`GATEHOUSE_DEPS_SCAN_WAIT_MS`).
    pub deps_scan_wait: std::time::Duration,
    /// Where files are kept: `s3://bucket[/prefix]`, or `None` for the
    /// local filesystem under the data directory.
    pub object_store_url: Option<String>,
    /// File sessions untouched this many days are swept.
    pub session_ttl_days: i64,
    /// Longest run lifetime accepted.
    pub grant_max_lifetime_secs: i64,
    /// What each listener allows a connection.
    pub connections: ConnectionLimits,
    /// The proxy URL handed to sandboxes, without credentials.
    pub proxy_public_url: String,
    /// Redis URL (may hold a password: never log it).
    pub redis_url: Option<Secretish>,
    /// Prefix of ledger keys in Redis.
    pub ledger_key_prefix: String,
    /// Upper bound on one ledger operation.
    pub ledger_timeout: std::time::Duration,
    /// Operator-opened egress ranges.
    pub egress_allow_ranges: Vec<IpNet>,
    /// Ports the proxy lets `CONNECT` reach.
    pub proxy_connect_ports: Vec<u16>,
    /// Caps and time limits on what passes through the door.
    pub egress_limits: EgressLimits,
    /// DNS servers for egress (empty: the system's configuration).
    pub dns_servers: Vec<SocketAddr>,
    /// Extra PEM root certificates for egress TLS (file content).
    pub egress_extra_roots_pem: Option<String>,
    /// The manifest signing key (worker, all).
    pub manifest_signing_key: Option<ManifestSigningKey>,
    /// Keys manifests verify against (runner, worker, all).
    pub manifest_verifying_keys: Option<ManifestVerifyingKeys>,
    /// `SANDBOX_REQUIRE_EGRESS_MANIFEST`.
    pub require_manifest: bool,
    /// The grant secret (worker, gateway, all).
    pub grant_secret: Option<Secret>,
    /// The previous grant secret, for rotation.
    pub grant_previous_secret: Option<Secret>,
    /// `CODEAPI_EGRESS_LEDGER_REQUIRED`.
    pub ledger_required: bool,
    /// The service token (every scope), when configured.
    pub service_token: Option<ServiceToken>,
    /// The key session keys derive from (worker, all).
    pub session_key_secret: Option<Secret>,
    /// Gateway (and `all`): the keys that open stored credentials.
    pub credential_keys: Option<std::sync::Arc<SealingKeys>>,
    /// Worker (and `all`): the public key new credentials are sealed to.
    pub credential_public_key: Option<SealingPublicKey>,
    /// Gateway (and `all`): the interception CA's key, PEM.
    pub intercept_ca_key_pem: Option<Secretish>,
    /// Gateway and worker: the interception CA's certificate, PEM.
    pub intercept_ca_cert_pem: Option<String>,
    /// Worker (and `all`): the settings page's password hash; none, no sign-in.
    pub admin_password_hash: Option<AdminPasswordHash>,
    /// `GATEHOUSE_TRUSTED_PROXIES`: peers whose `X-Forwarded-For` names the
    /// client (the settings page's sign-in throttle). Empty: none.
    pub trusted_proxies: Vec<IpNet>,
    /// `GATEHOUSE_METRICS_TOKEN`: when set, `/metrics` requires it.
    pub metrics_token: Option<ServiceToken>,
    /// Named callers with scopes (`GATEHOUSE_CALLERS_FILE`).
    pub callers: Callers,
    /// `CODEAPI_TENANT_ISOLATION_STRICT`.
    pub tenant_isolation_strict: bool,
    /// `CODEAPI_AUTH_PROVIDER`.
    pub auth_provider: AuthProvider,
    /// `LOCAL_MODE`.
    pub local_mode: bool,
    /// Whether sandboxed executions are enabled.
    pub sandbox_execution: bool,
    /// clamd address, when configured.
    pub clamd: Option<(String, u16)>,
    /// Upper bound on one clamd exchange.
    pub clamd_timeout: std::time::Duration,
    /// Largest content scanned.
    pub content_max_bytes: u64,
    /// Manifest clock skew tolerance.
    pub manifest_clock_skew_secs: i64,
    /// Longest manifest lifetime accepted.
    pub manifest_max_lifetime_secs: i64,
    /// Default manifest lifetime.
    pub manifest_ttl_secs: i64,
    /// Default grant lifetime.
    pub grant_ttl_secs: i64,
    /// Log format.
    pub log_format: LogFormat,
    /// Accepted but worth a loud line at startup.
    pub warnings: Vec<String>,
}

impl Config {
    /// The durable store's URL: `GATEHOUSE_DATABASE_URL`, else the SQLite
    /// file in the data directory.
    pub fn store_url(&self) -> Secretish {
        self.database_url.clone().unwrap_or_else(|| default_store_url(&self.data_dir))
    }

    /// Whether `/v1` routes require the service token. Validation guarantees
    /// a token is configured unless authentication was explicitly switched
    /// off (`LOCAL_MODE`, `CODEAPI_AUTH_PROVIDER=none` with its allow flag, or
    /// the loopback-only development flag).
    pub fn service_auth_required(&self) -> bool {
        !self.local_mode
            && self.auth_provider == AuthProvider::ServiceToken
            && (self.service_token.is_some() || !self.callers.is_empty())
    }
}

/// A value that may carry credentials (a database URL): usable, never printed.
#[derive(Clone)]
pub struct Secretish(String);

impl Secretish {
    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secretish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.split_once("://") {
            Some((scheme, _)) => write!(f, "{scheme}://<redacted>"),
            None => f.write_str("<redacted>"),
        }
    }
}

/// The SQLite file in `data_dir`.
pub fn default_store_url(data_dir: &Path) -> Secretish {
    Secretish(format!("sqlite://{}", data_dir.join(embedded_files::DATABASE).display()))
}

/// The cloud metadata addresses no operator setting may open (the address
/// guard's own list).
pub use gatehouse_core::metadata::METADATA_ADDRESSES;

/// Loads and validates configuration. `file` is the optional TOML file
/// (`--config`, or `GATEHOUSE_CONFIG`).
pub fn load(source: &dyn Source, file: Option<&Path>) -> Result<Config, Vec<Problem>> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, file).as_deref(), names::ALL, &mut p);
    let r = Reader { layered: &layered, source, problems: &mut p };
    let config = r.build();
    match config {
        Some(c) if p.is_empty() => Ok(c),
        _ => Err(p),
    }
}

/// The settings gatehouse's own outbound calls use, read and validated
/// exactly as [`load`] reads them: for command-line tools that need no keys.
#[derive(Debug, Clone)]
pub struct EgressSettings {
    /// `GATEHOUSE_EGRESS_ALLOW_RANGES` (never containing a metadata address).
    pub allow_ranges: Vec<IpNet>,
    /// `GATEHOUSE_DNS_SERVERS` (empty: the system's configuration).
    pub dns_servers: Vec<SocketAddr>,
    /// The PEM text of `GATEHOUSE_EGRESS_EXTRA_CA_FILE`.
    pub extra_roots_pem: Option<String>,
    /// The door's caps and time limits.
    pub limits: EgressLimits,
}

/// Caps and time limits on every request and tunnel through the door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressLimits {
    /// `GATEHOUSE_EGRESS_RESPONSE_MAX_BYTES`.
    pub response_max_bytes: u64,
    /// `GATEHOUSE_EGRESS_REQUEST_MAX_BYTES`.
    pub request_max_bytes: u64,
    /// `GATEHOUSE_EGRESS_CONNECT_TIMEOUT_MS`.
    pub connect_timeout: std::time::Duration,
    /// `GATEHOUSE_EGRESS_RESPONSE_TIMEOUT_MS`.
    pub response_timeout: std::time::Duration,
    /// `GATEHOUSE_EGRESS_REQUEST_TIMEOUT_MS`.
    pub request_timeout: std::time::Duration,
    /// `GATEHOUSE_PROXY_TUNNEL_MAX_BYTES`.
    pub tunnel_max_bytes: u64,
    /// `GATEHOUSE_PROXY_TUNNEL_TIMEOUT_MS`.
    pub tunnel_timeout: std::time::Duration,
}

/// The content-scanning settings, read and validated as [`load`] reads them.
#[derive(Debug, Clone)]
pub struct ScannerSettings {
    /// `CLAMD_HOST` and `CLAMD_PORT`, when a scanner is configured.
    pub clamd: Option<(String, u16)>,
    /// `GATEHOUSE_CLAMD_TIMEOUT_MS`.
    pub clamd_timeout: std::time::Duration,
    /// `GATEHOUSE_CONTENT_MAX_BYTES`.
    pub content_max_bytes: u64,
}

/// Reads one group of settings with the same rules as [`load`].
fn read_part<T>(source: &dyn Source, part: impl FnOnce(&mut Reader<'_>) -> T) -> Result<T, Vec<Problem>> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, None).as_deref(), names::ALL, &mut p);
    let mut r = Reader { layered: &layered, source, problems: &mut p };
    let value = part(&mut r);
    if p.is_empty() { Ok(value) } else { Err(p) }
}

/// [`EgressSettings`] alone.
pub fn egress_settings(source: &dyn Source) -> Result<EgressSettings, Vec<Problem>> {
    read_part(source, |r| r.egress())
}

/// [`ScannerSettings`] alone.
pub fn scanner_settings(source: &dyn Source) -> Result<ScannerSettings, Vec<Problem>> {
    read_part(source, |r| r.scanner())
}

/// Whether the settings describe the embedded single-machine mode, and the
/// data directory it uses. `gatehouse serve` generates missing key files
/// there before calling [`load`].
pub fn embedded_data_dir(source: &dyn Source, file: Option<&Path>) -> Option<PathBuf> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, file).as_deref(), names::ALL, &mut p);
    let role = layered.get(names::ROLE).map_or(Some(Role::All), Role::parse)?;
    let listen = parse_addr(layered.get(names::LISTEN).unwrap_or(DEFAULT_LISTEN))?;
    let proxy = parse_addr(layered.get(names::PROXY_LISTEN).unwrap_or(DEFAULT_PROXY_LISTEN))?;
    (role == Role::All && listen.ip().is_loopback() && proxy.ip().is_loopback())
        .then(|| PathBuf::from(layered.get(names::DATA_DIR).unwrap_or(DEFAULT_DATA_DIR)))
}

/// The TOML file: `--config`, else `GATEHOUSE_CONFIG` when set and non-empty.
fn config_file(source: &dyn Source, file: Option<&Path>) -> Option<PathBuf> {
    file.map(Path::to_path_buf)
        .or_else(|| source.var(names::CONFIG_FILE).filter(|v| !v.trim().is_empty()).map(PathBuf::from))
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:8701";
/// The data directory when `GATEHOUSE_DATA_DIR` is unset.
pub const DEFAULT_DATA_DIR: &str = "./gatehouse-data";

fn parse_addr(s: &str) -> Option<SocketAddr> {
    s.trim().parse().ok()
}

struct Reader<'a> {
    layered: &'a source::Layered,
    source: &'a dyn Source,
    problems: &'a mut Vec<Problem>,
}

impl Reader<'_> {
    fn problem(&mut self, setting: &str, code: &'static str, message: impl Into<String>) {
        self.problems.push(Problem::new(setting, code, message.into()));
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.layered.get(name)
    }

    fn bool(&mut self, name: &str, default: bool) -> bool {
        match self.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            None => default,
            Some(v) => match v.as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    self.problem(name, "invalid_value", "must be true or false");
                    default
                }
            },
        }
    }

    /// The egress settings (see [`EgressSettings`]).
    fn egress(&mut self) -> EgressSettings {
        // Egress ranges an operator opens.
        let mut egress_allow_ranges = Vec::new();
        if let Some(v) = self.get(names::EGRESS_ALLOW_RANGES).map(str::to_owned) {
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let net = part.parse::<IpNet>().or_else(|_| part.parse::<IpAddr>().map(IpNet::from));
                match net {
                    Ok(net)
                        if METADATA_ADDRESSES
                            .iter()
                            .filter_map(|(m, _)| m.parse::<IpAddr>().ok())
                            .any(|m| net.contains(&m)) =>
                    {
                        self.problem(
                            names::EGRESS_ALLOW_RANGES,
                            "insecure_combination",
                            format!("{part} contains a cloud metadata address, which can never be opened"),
                        );
                    }
                    Ok(net) => egress_allow_ranges.push(net),
                    Err(_) => self.problem(
                        names::EGRESS_ALLOW_RANGES,
                        "invalid_value",
                        format!("{part} is not an IP address or CIDR range"),
                    ),
                }
            }
        }

        let mut dns_servers = Vec::new();
        let servers = self.get(names::DNS_SERVERS).unwrap_or("").to_owned();
        for part in servers.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part
                .parse::<SocketAddr>()
                .or_else(|_| part.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
            {
                Ok(addr) => dns_servers.push(addr),
                Err(_) => self.problem(
                    names::DNS_SERVERS,
                    "invalid_value",
                    "must be a comma-separated list of IP or IP:port",
                ),
            }
        }

        let egress_extra_roots_pem = match self.get(names::EGRESS_EXTRA_CA_FILE).map(str::to_owned) {
            None => None,
            Some(path) => match self.source.read_file(Path::new(path.trim())) {
                Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => Some(text),
                Ok(_) => {
                    self.problem(names::EGRESS_EXTRA_CA_FILE, "invalid_value", "holds no PEM certificate");
                    None
                }
                Err(e) => {
                    self.problem(
                        names::EGRESS_EXTRA_CA_FILE,
                        "unreadable_file",
                        format!("cannot read {}: {}", path.trim(), e.kind()),
                    );
                    None
                }
            },
        };
        EgressSettings {
            allow_ranges: egress_allow_ranges,
            dns_servers,
            extra_roots_pem: egress_extra_roots_pem,
            limits: self.egress_limits(),
        }
    }

    /// `GATEHOUSE_TRUSTED_PROXIES`: comma-separated CIDR ranges or single
    /// addresses. A range of every address (`/0`) is refused: it would let
    /// any client name its own address.
    fn trusted_proxies(&mut self) -> Vec<IpNet> {
        let mut nets = Vec::new();
        let Some(v) = self.get(names::TRUSTED_PROXIES).map(str::to_owned) else { return nets };
        for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<IpNet>().or_else(|_| part.parse::<IpAddr>().map(IpNet::from)) {
                Ok(net) if net.prefix_len() == 0 => self.problem(
                    names::TRUSTED_PROXIES,
                    "insecure_combination",
                    format!("{part} trusts every address: any client could then choose the address it is counted as"),
                ),
                Ok(net) => nets.push(net.trunc()),
                Err(_) => self.problem(
                    names::TRUSTED_PROXIES,
                    "invalid_value",
                    format!("{part} is not an IP address or CIDR range (such as 10.0.0.0/8 or 2001:db8::/32)"),
                ),
            }
        }
        nets
    }

    /// The content-scanning settings (see [`ScannerSettings`]).
    fn scanner(&mut self) -> ScannerSettings {
        let clamd = self.get(names::CLAMD_HOST).map(|h| h.trim().to_owned());
        let clamd_port = self.int(names::CLAMD_PORT, 3310, 1..=65_535);
        let clamd = clamd.filter(|h| !h.is_empty()).map(|h| (h, u16::try_from(clamd_port).unwrap_or(3310)));
        let clamd_timeout_ms = self.int(names::CLAMD_TIMEOUT_MS, 30_000, 100..=600_000);
        let clamd_timeout =
            std::time::Duration::from_millis(u64::try_from(clamd_timeout_ms).unwrap_or(30_000));
        let content_max_bytes = self.int(names::CONTENT_MAX_BYTES, 32 << 20, 1..=1 << 30);
        let content_max_bytes = u64::try_from(content_max_bytes).unwrap_or(32 << 20);
        ScannerSettings { clamd, clamd_timeout, content_max_bytes }
    }

    fn egress_limits(&mut self) -> EgressLimits {
        let bytes = |r: &mut Self, name, default: u64| {
            u64::try_from(r.int(name, default as i64, 1..=1 << 40)).unwrap_or(default)
        };
        let millis = |r: &mut Self, name, default: u64, max: i64| {
            std::time::Duration::from_millis(
                u64::try_from(r.int(name, default as i64, 100..=max)).unwrap_or(default),
            )
        };
        EgressLimits {
            response_max_bytes: bytes(self, names::EGRESS_RESPONSE_MAX_BYTES, 64 << 20),
            request_max_bytes: bytes(self, names::EGRESS_REQUEST_MAX_BYTES, 64 << 20),
            connect_timeout: millis(self, names::EGRESS_CONNECT_TIMEOUT_MS, 10_000, 120_000),
            response_timeout: millis(self, names::EGRESS_RESPONSE_TIMEOUT_MS, 30_000, 600_000),
            request_timeout: millis(self, names::EGRESS_REQUEST_TIMEOUT_MS, 600_000, 86_400_000),
            tunnel_max_bytes: bytes(self, names::PROXY_TUNNEL_MAX_BYTES, 1 << 30),
            tunnel_timeout: millis(self, names::PROXY_TUNNEL_TIMEOUT_MS, 600_000, 86_400_000),
        }
    }

    /// An `http://` or `https://` URL without credentials or a trailing `/`.
    fn http_url(&mut self, name: &str, default: &str) -> String {
        match self.get(name).map(|u| u.trim().trim_end_matches('/').to_owned()) {
            None => default.to_owned(),
            Some(u) if (u.starts_with("http://") || u.starts_with("https://")) && !u.contains('@') => u,
            Some(_) => {
                self.problem(name, "invalid_value", "must be an http:// or https:// URL without credentials");
                default.to_owned()
            }
        }
    }

    fn int(&mut self, name: &str, default: i64, range: std::ops::RangeInclusive<i64>) -> i64 {
        match self.get(name) {
            None => default,
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) if range.contains(&n) => n,
                _ => {
                    let msg = format!("must be an integer from {} to {}", range.start(), range.end());
                    self.problem(name, "invalid_value", msg);
                    default
                }
            },
        }
    }

    fn addr(&mut self, name: &str, default: &str) -> SocketAddr {
        let raw = self.get(name).unwrap_or(default).to_owned();
        parse_addr(&raw).unwrap_or_else(|| {
            self.problem(name, "invalid_value", "must be IP:PORT, e.g. 127.0.0.1:8700");
            parse_addr(default).unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
        })
    }

    /// A secret from `NAME` or `NAME_FILE` (never both), or, in embedded mode,
    /// from the data directory.
    /// Reads `GATEHOUSE_CALLERS_FILE`: every entry needs a unique name (an
    /// id), known scopes and a 64-digit lowercase hex SHA-256 of its token,
    /// and may bind the caller to `tenants` (a non-empty list of distinct ids).
    fn callers(&mut self) -> Callers {
        let Some(path) = self.get(names::CALLERS_FILE).map(|p| p.trim().to_owned()) else {
            return Callers::default();
        };
        let text = match self.source.read_file(Path::new(&path)) {
            Ok(text) => text,
            Err(e) => {
                self.problem(
                    names::CALLERS_FILE,
                    "unreadable_file",
                    format!("cannot read {path}: {}", e.kind()),
                );
                return Callers::default();
            }
        };
        let table: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(_) => {
                self.problem(names::CALLERS_FILE, "invalid_value", "not TOML");
                return Callers::default();
            }
        };
        let mut callers: Vec<CallerToken> = Vec::new();
        let mut digests: Vec<String> = Vec::new();
        let entries = table.get("caller").and_then(toml::Value::as_array).cloned().unwrap_or_default();
        if entries.is_empty() || table.keys().any(|k| k != "caller") {
            self.problem(
                names::CALLERS_FILE,
                "invalid_value",
                "must hold [[caller]] entries and nothing else",
            );
        }
        for (i, entry) in entries.iter().enumerate() {
            let field = |k: &str| entry.get(k);
            let name = field("name").and_then(toml::Value::as_str).unwrap_or_default();
            let digest = field("token_sha256").and_then(toml::Value::as_str).unwrap_or_default();
            let scopes: Option<Vec<Scope>> = field("scopes")
                .and_then(toml::Value::as_array)
                .map(|list| {
                    list.iter().map(|v| v.as_str().and_then(Scope::parse)).collect::<Option<Vec<_>>>()
                })
                .unwrap_or(None);
            // `tenants`, when present, binds the caller: a non-empty list
            // of distinct tenant ids. Absent: every tenant.
            let tenants: Option<Option<Vec<String>>> = field("tenants").map(|v| {
                let list = v.as_array()?;
                let ids: Vec<String> = list
                    .iter()
                    .map(|t| t.as_str().filter(|t| gatehouse_core::is_valid_id(t)).map(str::to_owned))
                    .collect::<Option<_>>()?;
                let distinct = ids.iter().collect::<std::collections::BTreeSet<_>>().len() == ids.len();
                (!ids.is_empty() && distinct).then_some(ids)
            });
            let known = entry.as_table().is_some_and(|t| {
                t.keys().all(|k| ["name", "scopes", "token_sha256", "tenants"].contains(&k.as_str()))
            });
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !gatehouse_core::is_reserved_actor_name(name)
                && !callers.iter().any(|c| c.name() == name);
            let parsed = CallerToken::from_digest_hex(name, Vec::new(), digest);
            // One token, one caller: a digest listed twice would make one
            // token two callers (whichever the comparison meets last wins).
            if parsed.is_some()
                && let Some(first) = digests.iter().position(|d| d == digest)
            {
                self.problem(
                    names::CALLERS_FILE,
                    "secret_reused",
                    format!(
                        "caller {}: its token_sha256 is caller {}'s too; each caller needs its own token",
                        i + 1,
                        first + 1
                    ),
                );
                digests.push(String::new());
                continue;
            }
            digests.push(if parsed.is_some() { digest.to_owned() } else { String::new() });
            match (scopes, parsed, tenants) {
                (Some(scopes), Some(_), None) if valid_name && known => {
                    callers.extend(CallerToken::from_digest_hex(name, scopes, digest));
                }
                (Some(scopes), Some(_), Some(Some(tenants))) if valid_name && known => {
                    callers.extend(
                        CallerToken::from_digest_hex(name, scopes, digest).map(|c| c.bound_to(tenants)),
                    );
                }
                _ => self.problem(
                    names::CALLERS_FILE,
                    "invalid_value",
                    format!(
                        "caller {}: needs a unique name of [A-Za-z0-9_-] (not {:?}, in any case), scopes from {:?}, token_sha256 (64 lowercase hex digits), optionally tenants (a non-empty list of distinct tenant ids), nothing else",
                        i + 1,
                        gatehouse_core::RESERVED_ACTOR_NAMES,
                        Scope::ALL.map(Scope::as_str)
                    ),
                ),
            }
        }
        Callers::new(callers)
    }

    /// Off loopback, refuses each insecure setting in `insecure` (name,
    /// whether it is set insecurely, what that would do) that
    /// `GATEHOUSE_ACCEPT_INSECURE` does not name; an entry there that is
    /// not such a setting is refused too. One problem per setting.
    fn refuse_unacknowledged_insecure(&mut self, loopback_only: bool, insecure: &[(&str, bool, &str)]) {
        let accepted: Vec<String> = self
            .get(names::ACCEPT_INSECURE)
            .map(|v| v.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        let unknown: Vec<&str> = accepted
            .iter()
            .map(String::as_str)
            .filter(|n| !names::INSECURE_WITH_ACKNOWLEDGEMENT.contains(n))
            .collect();
        if !unknown.is_empty() {
            let message = format!(
                "names settings that need no acknowledgement ({}); it takes a comma-separated list of {}",
                unknown.join(", "),
                names::INSECURE_WITH_ACKNOWLEDGEMENT.join(", ")
            );
            self.problem(names::ACCEPT_INSECURE, "invalid_value", message);
        }
        if loopback_only {
            return;
        }
        for (name, set_insecurely, effect) in insecure {
            if *set_insecurely && !accepted.iter().any(|a| a == name) {
                let message = format!(
                    "{name}=false on a non-loopback listen address: {effect}; refused unless {} names {name}",
                    names::ACCEPT_INSECURE
                );
                self.problem(name, "insecure_combination", message);
            }
        }
    }

    /// Refuses secrets that equal one another: a service token that is also
    /// the grant secret lets anyone who holds one forge with the other.
    fn refuse_shared_secrets(&mut self, secrets: &[(&str, Option<&[u8]>)]) {
        for (i, (name, value)) in secrets.iter().enumerate() {
            let Some(value) = value else { continue };
            if let Some((other, _)) = secrets[..i].iter().find(|(_, v)| v.is_some_and(|v| v == *value)) {
                self.problem(
                    name,
                    "secret_reused",
                    format!("must differ from {other}: every secret has its own value"),
                );
            }
        }
    }

    /// A value given directly, in a `_FILE`, or (embedded) in the data dir.
    fn setting_text(&mut self, name: &str, embedded: Option<&Path>) -> Option<String> {
        self.text_from(name, embedded, false)
    }

    /// As [`Reader::setting_text`], for a secret: a file it comes from must
    /// be readable by its owner alone, as ssh requires of private keys; a
    /// group- or world-readable one is refused (`file_permissions`).
    fn secret_text(&mut self, name: &str, embedded: Option<&Path>) -> Option<String> {
        self.text_from(name, embedded, true)
    }

    fn text_from(&mut self, name: &str, embedded: Option<&Path>, owner_only: bool) -> Option<String> {
        let file_name = format!("{name}_FILE");
        let direct = self.get(name).map(str::to_owned);
        let file = self.get(&file_name).map(str::to_owned);
        // Which setting names the file, and whether it is the data dir's own.
        let (path, setting, in_data_dir) = match (direct, file) {
            (Some(_), Some(_)) => {
                self.problem(name, "ambiguous_source", format!("set either {name} or {file_name}, not both"));
                return None;
            }
            (Some(v), None) => return Some(v),
            (None, Some(path)) => (PathBuf::from(path.trim()), file_name, false),
            (None, None) => (embedded?.to_path_buf(), name.to_owned(), true),
        };
        let text = match self.source.read_file(&path) {
            Ok(text) => text,
            Err(_) if in_data_dir => return None, // not generated yet
            Err(e) => {
                self.problem(
                    &setting,
                    "unreadable_file",
                    format!("cannot read {}: {}", path.display(), e.kind()),
                );
                return None;
            }
        };
        if owner_only
            && let Some(mode) = self.source.file_mode(&path)
            && mode & 0o077 != 0
        {
            self.problem(
                &setting,
                "file_permissions",
                format!(
                    "{} is accessible to its group or others (mode {:o}): a secret's file must be the owner's alone (chmod 600)",
                    path.display(),
                    mode & 0o777
                ),
            );
            return None;
        }
        Some(text)
    }

    fn build(mut self) -> Option<Config> {
        let role = match self.get(names::ROLE) {
            None => Role::All,
            Some(v) => Role::parse(v).unwrap_or_else(|| {
                self.problem(names::ROLE, "invalid_value", "must be all, worker, runner or gateway");
                Role::All
            }),
        };
        let listen = self.addr(names::LISTEN, DEFAULT_LISTEN);
        let proxy_listen = self.addr(names::PROXY_LISTEN, DEFAULT_PROXY_LISTEN);
        let loopback_only = listen.ip().is_loopback() && proxy_listen.ip().is_loopback();
        let data_dir = PathBuf::from(self.get(names::DATA_DIR).unwrap_or(DEFAULT_DATA_DIR));
        let embedded = role == Role::All && loopback_only;
        let in_data_dir = |f: &str| embedded.then(|| data_dir.join(f));

        let local_mode = self.bool(names::LOCAL_MODE, false);
        let require_manifest = self.bool(names::REQUIRE_MANIFEST, true);
        let ledger_required = self.bool(names::LEDGER_REQUIRED, true);
        let tenant_isolation_strict = self.bool(names::TENANT_ISOLATION_STRICT, true);
        let allow_none = self.bool(names::ALLOW_AUTH_PROVIDER_NONE, false);
        let sandbox_execution = self.bool(names::SANDBOX_EXECUTION, true);
        let dev_no_token = self.bool(names::DEV_ALLOW_NO_SERVICE_TOKEN, false);
        let auth_provider = match self.get(names::AUTH_PROVIDER).map(|v| v.trim().to_ascii_lowercase()) {
            None => AuthProvider::ServiceToken,
            Some(v) if v == "service_token" => AuthProvider::ServiceToken,
            Some(v) if v == "none" => AuthProvider::None,
            Some(_) => {
                self.problem(names::AUTH_PROVIDER, "invalid_value", "must be service_token or none");
                AuthProvider::ServiceToken
            }
        };
        let log_format = match self.get(names::LOG_FORMAT).map(|v| v.trim().to_ascii_lowercase()) {
            None => LogFormat::Text,
            Some(v) if v == "text" => LogFormat::Text,
            Some(v) if v == "json" => LogFormat::Json,
            Some(_) => {
                self.problem(names::LOG_FORMAT, "invalid_value", "must be text or json");
                LogFormat::Text
            }
        };
        let manifest_clock_skew_secs = self.int(names::MANIFEST_CLOCK_SKEW_SECS, 30, 0..=600);
        let manifest_max_lifetime_secs = self.int(names::MANIFEST_MAX_LIFETIME_SECS, 86_400, 1..=7 * 86_400);
        let manifest_ttl_secs = self.int(names::MANIFEST_TTL_SECS, 300, 1..=86_400);
        let grant_ttl_secs = self.int(names::GRANT_TTL_SECS, 900, 1..=7 * 86_400);
        if manifest_ttl_secs > manifest_max_lifetime_secs {
            self.problem(
                names::MANIFEST_TTL_SECS,
                "invalid_value",
                format!("must not exceed {}", names::MANIFEST_MAX_LIFETIME_SECS),
            );
        }

        // Secrets and keys.
        let private_text = self.secret_text(
            names::MANIFEST_PRIVATE_KEY,
            in_data_dir(embedded_files::MANIFEST_PRIVATE_KEY).as_deref(),
        );
        let manifest_signing_key = private_text.and_then(|t| {
            ManifestSigningKey::from_ed25519_text(&t)
                .map_err(|e| self.key_problem(names::MANIFEST_PRIVATE_KEY, &e))
                .ok()
        });
        let public_text = self.setting_text(names::MANIFEST_PUBLIC_KEY, None);
        let mut manifest_verifying_keys = public_text.and_then(|t| {
            ManifestVerifyingKeys::from_public_keys_text(&t)
                .map_err(|e| self.key_problem(names::MANIFEST_PUBLIC_KEY, &e))
                .ok()
        });
        let hmac_secret = self.strong_secret(names::MANIFEST_HMAC_SECRET, None);
        let grant_secret =
            self.strong_secret(names::GRANT_SECRET, in_data_dir(embedded_files::GRANT_SECRET).as_deref());
        let grant_previous_secret = self.strong_secret(names::GRANT_PREVIOUS_SECRET, None);
        let service_token_text =
            self.secret_text(names::SERVICE_TOKEN, in_data_dir(embedded_files::SERVICE_TOKEN).as_deref());
        let session_key_secret = self.strong_secret(
            names::SESSION_KEY_SECRET,
            in_data_dir(embedded_files::SESSION_KEY_SECRET).as_deref(),
        );
        let metrics_token_text = self.secret_text(names::METRICS_TOKEN, None);
        let (credential_keys, credential_public_key) = self.credential_keys(role, &in_data_dir);
        let (intercept_ca_key_pem, intercept_ca_cert_pem) = self.intercept_ca(role, &in_data_dir);
        let admin_password_hash = if role.mints() {
            self.secret_text(
                names::ADMIN_PASSWORD_HASH,
                in_data_dir(embedded_files::ADMIN_PASSWORD_HASH).as_deref(),
            )
            .and_then(|text| {
                AdminPasswordHash::parse(&text)
                    .map_err(|e| {
                        let code = e.code();
                        self.problem(
                            names::ADMIN_PASSWORD_HASH,
                            code,
                            format!("{e} (run `gatehouse admin hash-password`)"),
                        )
                    })
                    .ok()
            })
        } else {
            None
        };
        self.refuse_shared_secrets(&[
            (names::SERVICE_TOKEN, service_token_text.as_deref().map(|t| t.trim().as_bytes())),
            (names::GRANT_SECRET, grant_secret.as_ref().map(Secret::expose)),
            (names::GRANT_PREVIOUS_SECRET, grant_previous_secret.as_ref().map(Secret::expose)),
            (names::MANIFEST_HMAC_SECRET, hmac_secret.as_ref().map(Secret::expose)),
            (names::SESSION_KEY_SECRET, session_key_secret.as_ref().map(Secret::expose)),
            (names::METRICS_TOKEN, metrics_token_text.as_deref().map(|t| t.trim().as_bytes())),
        ]);
        let metrics_token = metrics_token_text.as_deref().and_then(|t| {
            ServiceToken::new(t)
                .map_err(|_| {
                    self.problem(
                        names::METRICS_TOKEN,
                        "weak_secret",
                        "must be at least 32 bytes of random text",
                    )
                })
                .ok()
        });
        let service_token = service_token_text.as_deref().and_then(|t| {
            ServiceToken::new(t)
                .map_err(|_| {
                    self.problem(
                        names::SERVICE_TOKEN,
                        "weak_secret",
                        "must be at least 32 bytes of random text",
                    )
                })
                .ok()
        });

        // Role rules: what each role must hold, and must never hold.
        if role == Role::Runner {
            if manifest_signing_key.is_some() || self.is_set(names::MANIFEST_PRIVATE_KEY) {
                self.problem(
                    names::MANIFEST_PRIVATE_KEY,
                    "forbidden_for_role",
                    "a runner must never hold the manifest private key: runner compromise would create a minting capability",
                );
            }
            if hmac_secret.is_some() || self.is_set(names::MANIFEST_HMAC_SECRET) {
                self.problem(
                    names::MANIFEST_HMAC_SECRET,
                    "forbidden_for_role",
                    "a runner must never hold the HMAC manifest secret: it can both verify and mint",
                );
            }
            for name in [names::GRANT_SECRET, names::GRANT_PREVIOUS_SECRET] {
                if self.is_set(name) {
                    self.problem(
                        name,
                        "forbidden_for_role",
                        "a runner must not hold an egress grant secret: it could mint grants",
                    );
                }
            }
        }
        if role == Role::Gateway {
            if manifest_signing_key.is_some() || self.is_set(names::MANIFEST_PRIVATE_KEY) {
                self.problem(
                    names::MANIFEST_PRIVATE_KEY,
                    "forbidden_for_role",
                    "the gateway must never hold the manifest private key",
                );
            }
            if hmac_secret.is_some() || self.is_set(names::MANIFEST_HMAC_SECRET) {
                self.problem(
                    names::MANIFEST_HMAC_SECRET,
                    "forbidden_for_role",
                    "the gateway must never hold the HMAC manifest secret: it can mint manifests",
                );
            }
        }
        if role.mints()
            && sandbox_execution
            && manifest_signing_key.is_none()
            && hmac_secret.is_none()
            && !self.is_set(names::MANIFEST_PRIVATE_KEY)
        {
            self.problem(
                names::MANIFEST_PRIVATE_KEY,
                "missing_required",
                "sandbox execution is enabled but no manifest signing key is set (run `gatehouse keygen`)",
            );
        }
        if role == Role::Runner
            && sandbox_execution
            && manifest_verifying_keys.is_none()
            && !self.is_set(names::MANIFEST_PUBLIC_KEY)
        {
            self.problem(
                names::MANIFEST_PUBLIC_KEY,
                "missing_required",
                "sandbox execution is enabled but the runner has no manifest public key",
            );
        }
        if role.mints() && session_key_secret.is_none() && !self.is_set(names::SESSION_KEY_SECRET) {
            self.problem(
                names::SESSION_KEY_SECRET,
                "missing_required",
                "the session key secret (32+ bytes, its own: not the grant secret) is required to derive storage namespaces (run `gatehouse keygen`)",
            );
        }
        if matches!(role, Role::All | Role::Worker | Role::Gateway)
            && grant_secret.is_none()
            && !self.is_set(names::GRANT_SECRET)
        {
            self.problem(
                names::GRANT_SECRET,
                "missing_required",
                "the egress grant secret (32+ bytes) is required",
            );
        }

        // A worker verifies what it signs (and, while HMAC is enabled, legacy
        // HMAC manifests still in flight). A runner never gets the HMAC secret.
        if role != Role::Runner {
            let own = [
                manifest_signing_key.as_ref().map(ManifestSigningKey::verifying_keys),
                hmac_secret.clone().map(|s| ManifestSigningKey::from_hmac_secret(s).verifying_keys()),
            ];
            for keys in own.into_iter().flatten() {
                manifest_verifying_keys.get_or_insert_with(Default::default).merge(keys);
            }
        }
        let manifest_signing_key =
            manifest_signing_key.or_else(|| hmac_secret.map(ManifestSigningKey::from_hmac_secret));

        // Authentication.
        if auth_provider == AuthProvider::None && !allow_none {
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                format!("CODEAPI_AUTH_PROVIDER=none requires {}=true", names::ALLOW_AUTH_PROVIDER_NONE),
            );
        }
        if auth_provider == AuthProvider::None && !loopback_only {
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                "CODEAPI_AUTH_PROVIDER=none disables authentication and is refused on a non-loopback listen address",
            );
        }
        if auth_provider == AuthProvider::None
            && (service_token_text.is_some() || self.is_set(names::CALLERS_FILE))
        {
            // It would silently ignore the token: say which one is meant.
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                "CODEAPI_AUTH_PROVIDER=none would ignore the configured service token or caller file; remove one",
            );
        }
        if local_mode && !loopback_only {
            self.problem(
                names::LOCAL_MODE,
                "insecure_combination",
                "LOCAL_MODE=true disables all authentication and is refused on a non-loopback listen address",
            );
        }
        if dev_no_token && !loopback_only {
            self.problem(
                names::DEV_ALLOW_NO_SERVICE_TOKEN,
                "insecure_combination",
                "running without a service token is allowed on loopback addresses only",
            );
        }
        self.refuse_unacknowledged_insecure(
            loopback_only,
            &[
                (names::REQUIRE_MANIFEST, !require_manifest, "unsigned requests would pass"),
                (
                    names::LEDGER_REQUIRED,
                    !ledger_required,
                    "grants without a ledger record would not be refused",
                ),
                (
                    names::TENANT_ISOLATION_STRICT,
                    !tenant_isolation_strict,
                    "requests without a tenant would share a legacy namespace",
                ),
            ],
        );
        let callers = self.callers();
        if let Some(token) = service_token_text.as_deref()
            && let Some(caller) = callers.identify(token)
        {
            let message = format!(
                "caller {}'s token_sha256 is the service token's; a named caller needs a token of its own",
                caller.name()
            );
            self.problem(names::CALLERS_FILE, "secret_reused", message);
        }
        let auth_off = local_mode || auth_provider == AuthProvider::None || dev_no_token;
        if service_token.is_none() && service_token_text.is_none() && callers.is_empty() && !auth_off {
            self.problem(
                names::SERVICE_TOKEN,
                "missing_required",
                "internal routes would be open; set a 32+ byte token (or, on loopback for development only, GATEHOUSE_DEV_ALLOW_NO_SERVICE_TOKEN=true)",
            );
        }

        // Stores.
        let database_url = self.get(names::DATABASE_URL).map(|u| Secretish(u.trim().to_owned()));
        if let Some(u) = &database_url {
            let u = u.expose();
            if !(u.starts_with("sqlite:") || u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                self.problem(names::DATABASE_URL, "invalid_value", "must be a sqlite:// or postgres:// URL");
            }
        }
        let redis_url = self.get(names::REDIS_URL).map(|u| Secretish(u.trim().to_owned()));
        if let Some(u) = &redis_url {
            let u = u.expose();
            if u.starts_with("rediss://") {
                self.problem(
                    names::REDIS_URL,
                    "invalid_value",
                    "TLS to Redis (rediss://) is not supported yet; use redis:// on a private network or redis+unix://",
                );
            } else if !["redis://", "redis+unix://", "unix://"].iter().any(|s| u.starts_with(s)) {
                self.problem(names::REDIS_URL, "invalid_value", "must be a redis:// or redis+unix:// URL");
            }
        }

        let ledger_key_prefix = self.get(names::LEDGER_KEY_PREFIX).unwrap_or("gatehouse:ledger:").to_owned();
        if ledger_key_prefix.contains(['{', '}']) || ledger_key_prefix.chars().any(char::is_whitespace) {
            self.problem(
                names::LEDGER_KEY_PREFIX,
                "invalid_value",
                "must not contain braces (they would break the per-grant hash tag) or whitespace",
            );
        }
        let store_timeout_ms = self.int(names::STORE_TIMEOUT_MS, 5000, 10..=60_000);
        let store_timeout = std::time::Duration::from_millis(u64::try_from(store_timeout_ms).unwrap_or(5000));
        let run_heartbeat_timeout_secs = self.int(names::RUN_HEARTBEAT_TIMEOUT_SECS, 120, 5..=86_400);
        let event_retention_days = self.int(names::EVENT_RETENTION_DAYS, 30, 1..=3650);
        let shutdown_drain = std::time::Duration::from_secs(
            u64::try_from(self.int(names::SHUTDOWN_DRAIN_SECS, 10, 0..=600)).unwrap_or(10),
        );
        let grant_max_lifetime_secs =
            self.int(names::GRANT_MAX_LIFETIME_SECS, DEFAULT_GRANT_MAX_LIFETIME_SECS, 60..=7 * 86_400);
        if grant_ttl_secs > grant_max_lifetime_secs {
            self.problem(
                names::GRANT_TTL_SECS,
                "invalid_value",
                "must not exceed GATEHOUSE_GRANT_MAX_LIFETIME_SECS",
            );
        }
        let millis = |n: i64| std::time::Duration::from_millis(u64::try_from(n).unwrap_or(0));
        let connections = ConnectionLimits {
            header_read_timeout: millis(self.int(names::HEADER_READ_TIMEOUT_MS, 10_000, 100..=300_000)),
            idle_timeout: millis(self.int(names::IDLE_TIMEOUT_MS, 60_000, 100..=3_600_000)),
            max_connections: usize::try_from(self.int(names::MAX_CONNECTIONS, 4096, 1..=1_000_000))
                .unwrap_or(4096),
            max_connections_per_client: usize::try_from(self.int(
                names::MAX_CONNECTIONS_PER_CLIENT,
                512,
                1..=1_000_000,
            ))
            .unwrap_or(512),
        };
        if connections.max_connections_per_client > connections.max_connections {
            self.problem(
                names::MAX_CONNECTIONS_PER_CLIENT,
                "invalid_value",
                "must not exceed GATEHOUSE_MAX_CONNECTIONS",
            );
        }
        let proxy_public_url = self.http_url(names::PROXY_PUBLIC_URL, &format!("http://{proxy_listen}"));
        let osv_db = self.get(names::OSV_DB).map(|p| PathBuf::from(p.trim()));
        let osv_url = self.http_url(names::OSV_URL, DEFAULT_OSV_URL);
        let deps_scan_concurrency =
            usize::try_from(self.int(names::DEPS_SCAN_CONCURRENCY, 2, 1..=64)).unwrap_or(2);
        // Under the API's 30 s request timeout, with room to record and answer.
        let deps_scan_wait = std::time::Duration::from_millis(
            u64::try_from(self.int(names::DEPS_SCAN_WAIT_MS, 20_000, 0..=25_000)).unwrap_or(20_000),
        );
        let object_store_url = self.get(names::OBJECT_STORE_URL).map(|u| u.trim().to_owned());
        if object_store_url.as_deref().is_some_and(|u| !u.starts_with("s3://") || u.contains(['@', '?', '#']))
        {
            self.problem(
                names::OBJECT_STORE_URL,
                "invalid_value",
                "must be s3://bucket[/prefix], credentials in the AWS_* settings, not the URL",
            );
        }
        let session_ttl_days = self.int(names::SESSION_TTL_DAYS, 30, 1..=3650);
        let trusted_proxies = self.trusted_proxies();
        let ledger_timeout_ms = self.int(names::LEDGER_TIMEOUT_MS, 1000, 10..=60_000);
        let ledger_timeout =
            std::time::Duration::from_millis(u64::try_from(ledger_timeout_ms).unwrap_or(1000));

        let mut proxy_connect_ports = Vec::new();
        let ports = self.get(names::PROXY_CONNECT_PORTS).unwrap_or("443").to_owned();
        for part in ports.split(',') {
            match part.trim().parse::<u16>() {
                Ok(p) if p > 0 => proxy_connect_ports.push(p),
                _ => self.problem(
                    names::PROXY_CONNECT_PORTS,
                    "invalid_value",
                    "must be a comma-separated list of ports",
                ),
            }
        }

        let EgressSettings {
            allow_ranges: egress_allow_ranges,
            dns_servers,
            extra_roots_pem: egress_extra_roots_pem,
            limits: egress_limits,
        } = self.egress();
        let ScannerSettings { clamd, clamd_timeout, content_max_bytes } = self.scanner();

        let mut warnings = Vec::new();
        if local_mode {
            warnings.push("LOCAL_MODE=true: authentication is disabled entirely (development only)".into());
        }
        if auth_provider == AuthProvider::None {
            warnings.push("CODEAPI_AUTH_PROVIDER=none: principals are not authenticated".into());
        }
        if dev_no_token && service_token.is_none() {
            warnings.push(
                "GATEHOUSE_DEV_ALLOW_NO_SERVICE_TOKEN=true: internal routes are open (development only)"
                    .into(),
            );
        }
        if database_url.is_none() && matches!(role, Role::Worker | Role::Gateway) {
            warnings.push(format!(
                "role {} keeps its durable state in the data directory's SQLite file, which no other node \
                 shares: set {} to a postgres:// URL when workers and gateways run apart",
                role.as_str(),
                names::DATABASE_URL
            ));
        }
        if !require_manifest {
            warnings.push(
                "SANDBOX_REQUIRE_EGRESS_MANIFEST=false: unsigned requests pass and are recorded as unsigned"
                    .into(),
            );
        }
        if !ledger_required {
            warnings.push(
                "CODEAPI_EGRESS_LEDGER_REQUIRED=false: grants without a ledger record are not refused".into(),
            );
        }
        if !tenant_isolation_strict {
            warnings.push(
                "CODEAPI_TENANT_ISOLATION_STRICT=false: requests without a tenant share a legacy namespace"
                    .into(),
            );
        }
        if self.is_set(names::MANIFEST_HMAC_SECRET) {
            warnings.push("legacy HMAC manifests are enabled: weaker than the keypair; never mount this secret into a runner".into());
        }
        if !egress_allow_ranges.is_empty() {
            let list: Vec<String> = egress_allow_ranges.iter().map(ToString::to_string).collect();
            warnings.push(format!(
                "GATEHOUSE_EGRESS_ALLOW_RANGES opens internal ranges to egress: {}",
                list.join(", ")
            ));
        }

        Some(Config {
            role,
            listen,
            proxy_listen,
            data_dir,
            embedded,
            database_url,
            store_timeout,
            run_heartbeat_timeout_secs,
            event_retention_days,
            shutdown_drain,
            object_store_url,
            session_ttl_days,
            osv_db,
            osv_url,
            deps_scan_concurrency,
            deps_scan_wait,
            grant_max_lifetime_secs,
            connections,
            proxy_public_url,
            redis_url,
            ledger_key_prefix,
            ledger_timeout,
            egress_allow_ranges,
            proxy_connect_ports,
            egress_limits,
            dns_servers,
            egress_extra_roots_pem,
            manifest_signing_key: if role.mints() { manifest_signing_key } else { None },
            manifest_verifying_keys: if role.verifies_manifests() { manifest_verifying_keys } else { None },
            require_manifest,
            grant_secret: if role.opens_grants() { grant_secret } else { None },
            grant_previous_secret: if role.opens_grants() { grant_previous_secret } else { None },
            ledger_required,
            service_token,
            session_key_secret: if role.mints() { session_key_secret } else { None },
            credential_keys,
            credential_public_key,
            intercept_ca_key_pem,
            intercept_ca_cert_pem,
            admin_password_hash,
            trusted_proxies,
            metrics_token,
            callers,
            tenant_isolation_strict,
            auth_provider,
            local_mode,
            sandbox_execution,
            clamd,
            clamd_timeout,
            content_max_bytes,
            manifest_clock_skew_secs,
            manifest_max_lifetime_secs,
            manifest_ttl_secs,
            grant_ttl_secs,
            log_format,
            warnings,
        })
    }

    fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some() || self.get(&format!("{name}_FILE")).is_some()
    }

    /// The credential sealing keys a role holds. The gateway (and `all`)
    /// must hold the private key, which opens credentials; a worker must
    /// not — it seals to the public key and cannot read a credential back —
    /// and neither may a runner.
    fn credential_keys(
        &mut self,
        role: Role,
        in_data_dir: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> (Option<std::sync::Arc<SealingKeys>>, Option<SealingPublicKey>) {
        let private_names = [names::CREDENTIAL_SEALING_KEY, names::CREDENTIAL_SEALING_PREVIOUS_KEY];
        if matches!(role, Role::Worker | Role::Runner) {
            let held: Vec<&str> = private_names.into_iter().filter(|n| self.is_set(n)).collect();
            for name in held {
                self.problem(
                    name,
                    "forbidden_for_role",
                    "only the gateway holds the credential sealing key: a worker seals to its public key and must not be able to read credentials back",
                );
            }
        }
        let private = |this: &mut Self, name: &str, embedded: Option<&Path>| {
            let text = zeroize::Zeroizing::new(this.secret_text(name, embedded)?);
            SealingKey::from_text(&text)
                .map_err(|e| this.problem(name, "key_malformed", format!("{e} (run `gatehouse keygen`)")))
                .ok()
        };
        let keys = if matches!(role, Role::Gateway | Role::All) {
            let current = private(
                self,
                names::CREDENTIAL_SEALING_KEY,
                in_data_dir(embedded_files::CREDENTIAL_SEALING_KEY).as_deref(),
            );
            let previous = private(self, names::CREDENTIAL_SEALING_PREVIOUS_KEY, None);
            match current {
                Some(current) => SealingKeys::new(current, previous)
                    .map_err(|e| {
                        self.problem(names::CREDENTIAL_SEALING_PREVIOUS_KEY, "invalid_value", e.to_string())
                    })
                    .ok(),
                None => {
                    if !self.is_set(names::CREDENTIAL_SEALING_KEY) {
                        self.problem(
                            names::CREDENTIAL_SEALING_KEY,
                            "missing_required",
                            "the gateway needs the credential sealing key to open the credentials it injects (run `gatehouse keygen`)",
                        );
                    }
                    None
                }
            }
        } else {
            None
        };
        let public = if matches!(role, Role::Worker | Role::All) {
            let text = self.setting_text(
                names::CREDENTIAL_SEALING_PUBLIC_KEY,
                in_data_dir(embedded_files::CREDENTIAL_SEALING_PUBLIC_KEY).as_deref(),
            );
            let given = text.and_then(|t| {
                SealingPublicKey::from_text(&t)
                    .map_err(|e| {
                        self.problem(names::CREDENTIAL_SEALING_PUBLIC_KEY, "key_malformed", e.to_string())
                    })
                    .ok()
            });
            let own = keys.as_ref().map(|k| k.current_public().clone());
            match (given, own) {
                (Some(given), Some(own)) if given != own => {
                    self.problem(
                        names::CREDENTIAL_SEALING_PUBLIC_KEY,
                        "key_mismatch",
                        "is not the public half of GATEHOUSE_CREDENTIAL_SEALING_KEY",
                    );
                    None
                }
                (given, own) => {
                    let public = given.or(own);
                    if public.is_none()
                        && role == Role::Worker
                        && !self.is_set(names::CREDENTIAL_SEALING_PUBLIC_KEY)
                    {
                        self.problem(
                            names::CREDENTIAL_SEALING_PUBLIC_KEY,
                            "missing_required",
                            "the worker seals credentials to the gateway's public key (run `gatehouse keygen`)",
                        );
                    }
                    public
                }
            }
        } else {
            None
        };
        (keys.map(std::sync::Arc::new), public)
    }

    /// The interception CA a role holds: key and certificate on the gateway
    /// (and `all`), the certificate alone on a worker (it hands it to
    /// sandboxes with their runs); the key never on a worker or runner.
    /// Their contents are checked where they are used, at startup.
    fn intercept_ca(
        &mut self,
        role: Role,
        in_data_dir: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> (Option<Secretish>, Option<String>) {
        if matches!(role, Role::Worker | Role::Runner) && self.is_set(names::INTERCEPT_CA_KEY) {
            self.problem(
                names::INTERCEPT_CA_KEY,
                "forbidden_for_role",
                "only the gateway holds the interception CA's key: whoever holds it can impersonate any host to a sandbox",
            );
        }
        let gateway = matches!(role, Role::Gateway | Role::All);
        let key = if gateway {
            self.secret_text(
                names::INTERCEPT_CA_KEY,
                in_data_dir(embedded_files::INTERCEPT_CA_KEY).as_deref(),
            )
        } else {
            None
        };
        let cert = if gateway || role == Role::Worker {
            self.setting_text(
                names::INTERCEPT_CA_CERT,
                in_data_dir(embedded_files::INTERCEPT_CA_CERT).as_deref(),
            )
        } else {
            None
        };
        let missing = |this: &mut Self, name: &str, why: &str| {
            if !this.is_set(name) {
                this.problem(name, "missing_required", format!("{why} (run `gatehouse keygen`)"));
            }
        };
        if gateway && key.is_none() {
            missing(
                self,
                names::INTERCEPT_CA_KEY,
                "the gateway terminates TLS for lease hosts under its interception CA",
            );
        }
        if (gateway || role == Role::Worker) && cert.is_none() {
            missing(
                self,
                names::INTERCEPT_CA_CERT,
                "the interception CA's certificate is handed to sandboxes with their runs",
            );
        }
        (key.map(Secretish), cert)
    }

    fn strong_secret(&mut self, name: &str, embedded: Option<&Path>) -> Option<Secret> {
        let text = self.secret_text(name, embedded)?;
        Secret::new(&text)
            .map_err(|_| {
                self.problem(name, "weak_secret", "must be at least 32 bytes of random text (weak_secret)")
            })
            .ok()
    }

    fn key_problem(&mut self, name: &str, e: &KeyError) {
        let code = match e {
            KeyError::Malformed => "key_malformed",
            KeyError::WrongType(_) => "key_wrong_type",
            KeyError::Missing => "missing_required",
        };
        self.problem(name, code, e.to_string());
    }
}
