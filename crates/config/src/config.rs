//! What loading produces: the validated [`Config`] and the groups of
//! settings read on their own ([`EgressSettings`], [`ScannerSettings`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use gatehouse_capability::{
    AdminPasswordHash, Callers, ManifestSigningKey, ManifestVerifyingKeys, SealingKeys, SealingPublicKey,
    Secret, ServiceToken,
};
use ipnet::IpNet;

use crate::defaults::default_store_url;
use crate::role::Role;
use crate::secretish::Secretish;

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
    /// Requests a minute a tenant's people may make with its stored credentials.
    pub credential_use_per_minute: u64,
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

/// The settings gatehouse's own outbound calls use, read and validated
/// exactly as [`load`](crate::load) reads them: for command-line tools that need no keys.
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

/// The content-scanning settings, read and validated as [`load`](crate::load) reads them.
#[derive(Debug, Clone)]
pub struct ScannerSettings {
    /// `CLAMD_HOST` and `CLAMD_PORT`, when a scanner is configured.
    pub clamd: Option<(String, u16)>,
    /// `GATEHOUSE_CLAMD_TIMEOUT_MS`.
    pub clamd_timeout: std::time::Duration,
    /// `GATEHOUSE_CONTENT_MAX_BYTES`.
    pub content_max_bytes: u64,
}
