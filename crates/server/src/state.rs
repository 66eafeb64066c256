//! Shared state: this node's control plane, and what its faces hold
//! beside it (the door, callers' tokens, the fetch client, the content
//! scanner, the metrics).

use std::sync::Arc;

use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{GrantSealer, ManifestVerifier, OpenedGrants, ServiceToken, SessionKeyDeriver};
use gatehouse_config::{Config, Role, names};
use gatehouse_core::Clock;
use gatehouse_egress::AddressGuard;
use gatehouse_egress::connect::tls_config;
use gatehouse_egress::fetch::Fetcher;
use gatehouse_egress::proxy::{Limits, Proxy, ProxyStats, Resolver};
use gatehouse_egress::resolve::DnsResolver;
use gatehouse_egress::run_fetch::{FetchDoor, SigningSecrets};
use gatehouse_ledger::{Ledger, MemoryLedger, RedisLedger, RedisLedgerConfig};
use gatehouse_plane::door::DoorLeases;
use gatehouse_plane::policy::PolicyCache;
use gatehouse_plane::record::{EventQueue, RefusalLog};
use gatehouse_plane::scans::{EgressTransport, OsvSource, ScanLimits};
use gatehouse_plane::{Plane, Settings};
use gatehouse_store::Store;

pub use crate::metrics::Metrics;

/// Hosts whose leaf certificates a gateway keeps minted.
const LEAF_CERTIFICATES: usize = 4096;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// See [`AppState`].
pub struct Inner {
    /// The control plane: runs, tenants, credentials and leases, the record.
    pub plane: Plane,
    /// This node's role.
    pub role: Role,
    /// The internal service token (every scope); `None` when not configured
    /// or authentication is explicitly off.
    pub service_token: Option<ServiceToken>,
    /// Named callers with scopes (empty when authentication is off).
    pub callers: gatehouse_capability::Callers,
    /// `GATEHOUSE_METRICS_TOKEN`: when set, `/metrics` requires it.
    pub metrics_token: Option<ServiceToken>,
    /// The last readiness answer and when it was taken (see `readiness`).
    pub readiness: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), gatehouse_core::Reason>)>>,
    /// The proxy URL handed to sandboxes.
    pub proxy_public_url: String,
    /// Sniffing plus clamd when configured (`POST /v1/content/scan`).
    pub content: gatehouse_content::ContentScanner,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Worker: the interception CA's certificate, returned with every run.
    pub intercept_ca_cert_pem: Option<String>,
    /// How this node resolves egress names (the settings page's "test a URL"
    /// asks it as the door does).
    pub resolver: Resolver,
    /// The door's address guard (the operator's allowed ranges).
    pub egress_guard: AddressGuard,
    /// The settings page's sign-in (worker and all, with its password hash set).
    pub admin_page: Option<AdminPage>,
    /// File sessions untouched this many days are swept.
    pub session_ttl_days: i64,
}

/// How the settings page signs people in.
pub struct AdminPage {
    /// The password's Argon2id hash.
    pub password: gatehouse_capability::AdminPasswordHash,
    /// The node listens on loopback (the cookie need not be `Secure`).
    pub listens_on_loopback: bool,
    /// Peers whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Builds the state from a validated configuration, moving the keys out
    /// of it. `store` is the node's durable store (see [`Role::has_store`]).
    pub fn from_config(config: Config, clock: Arc<dyn Clock>, store: Option<Store>) -> Result<Self, String> {
        let ledger = if config.role.opens_grants() {
            Some(match &config.redis_url {
                Some(url) => {
                    let mut ledger_config = RedisLedgerConfig::new(url.expose());
                    ledger_config.prefix.clone_from(&config.ledger_key_prefix);
                    ledger_config.op_timeout = config.ledger_timeout;
                    Ledger::Redis(
                        RedisLedger::new(&ledger_config)
                            .map_err(|_| "GATEHOUSE_REDIS_URL is not a usable Redis URL".to_owned())?,
                    )
                }
                None => Ledger::Memory(MemoryLedger::new()),
            })
        } else {
            None
        };
        let auth_required = config.service_auth_required();
        let queue = store.as_ref().map(|_| Arc::new(EventQueue::default()));
        let refusals = Arc::new(RefusalLog::new(clock.clone(), queue));
        let policies = Arc::new(PolicyCache::default());
        let verifier = config.manifest_verifying_keys.map(|keys| {
            let mut v = ManifestVerifier::new(keys);
            v.clock_skew_secs = config.manifest_clock_skew_secs;
            v.max_lifetime_secs = config.manifest_max_lifetime_secs;
            v
        });
        // The API's and the proxy's sealers: the current secret, and the
        // previous one during rotation.
        let new_sealer = |secret| {
            let sealer = GrantSealer::new(secret);
            match &config.grant_previous_secret {
                Some(previous) => sealer.with_previous(previous),
                None => sealer,
            }
        };
        let sealer = config.grant_secret.as_ref().map(new_sealer);
        // The forward proxy is the gateway's (and the single-machine `all`
        // node's); a worker is control plane and never carries sandbox traffic.
        let runs_proxy = matches!(config.role, Role::Gateway | Role::All);
        let resolver = dns_resolver(&config.dns_servers);
        let limits = Limits {
            // The time a client has to say what it wants, whether in a
            // request head or in a tunnel's ClientHello.
            hello_timeout: config.connections.header_read_timeout,
            ..egress_limits(&config.egress_limits, &config.proxy_connect_ports)
        };
        let fetcher = if runs_proxy {
            Some(egress_fetcher(
                &config.egress_allow_ranges,
                config.egress_extra_roots_pem.as_deref(),
                resolver.clone(),
                limits.clone(),
            )?)
        } else {
            None
        };
        // Dependency scans are the worker's (and `all`'s): the gate sits at the worker's pass.
        let osv = if matches!(config.role, Role::Worker | Role::All) {
            // An `all` node's fetch client serves OSV too; a worker builds its own.
            Some(osv_source(config.osv_db.as_deref(), &config.osv_url, || match &fetcher {
                Some(fetcher) => Ok(fetcher.clone()),
                None => egress_fetcher(
                    &config.egress_allow_ranges,
                    config.egress_extra_roots_pem.as_deref(),
                    resolver.clone(),
                    limits.clone(),
                ),
            })?)
        } else {
            None
        };
        let door_leases = match (&config.credential_keys, &store, &ledger) {
            (Some(keys), Some(store), Some(ledger)) if runs_proxy => {
                let leases = DoorLeases::new(
                    store.clone(),
                    keys.clone(),
                    ledger.clone(),
                    refusals.clone(),
                    clock.clone(),
                )?;
                // Tokens are minted through the door, under the tenants' policies.
                Some(Arc::new(match &fetcher {
                    Some(fetcher) => {
                        leases.with_minter(fetcher.clone().with_clock(clock.clone()), policies.clone())
                    }
                    None => leases,
                }))
            }
            _ => None,
        };
        // TLS is terminated only for hosts a run holds a live lease for,
        // under the interception CA (a bad key or certificate stops the start).
        let leaves = match (&config.intercept_ca_key_pem, &config.intercept_ca_cert_pem) {
            (Some(key), Some(cert)) if runs_proxy => {
                let ca = gatehouse_egress::intercept::InterceptCa::from_pem(key.expose(), cert)
                    .map_err(|e| format!("the interception CA does not load: {e}"))?;
                Some(Arc::new(gatehouse_egress::intercept::Leaves::new(Arc::new(ca), LEAF_CERTIFICATES)))
            }
            _ => None,
        };
        let upstream_tls = if runs_proxy {
            let tls = egress_tls(config.egress_extra_roots_pem.as_deref())?;
            Some(tokio_rustls::TlsConnector::from(Arc::new(tls)))
        } else {
            None
        };
        let asks = store.as_ref().map(|store| {
            Arc::new(gatehouse_plane::proposals::Asks::new(
                store.clone(),
                policies.clone(),
                refusals.clone(),
                clock.clone(),
                AddressGuard::new(config.egress_allow_ranges.clone()),
            ))
        });
        let ask_sink =
            || asks.clone().map(|a| a as Arc<dyn gatehouse_egress::policy::proposal::ProposalSink>);
        let proxy = match (config.grant_secret.as_ref(), ledger.as_ref()) {
            (Some(secret), Some(ledger)) if runs_proxy => Some(Arc::new(Proxy {
                grants: OpenedGrants::new(new_sealer(secret), OPENED_GRANTS),
                ledger: ledger.clone(),
                ledger_required: config.ledger_required,
                policies: policies.clone(),
                guard: AddressGuard::new(config.egress_allow_ranges.clone()),
                resolver: resolver.clone(),
                sink: refusals.clone(),
                clock: clock.clone(),
                limits,
                stats: ProxyStats::default(),
                pool: Default::default(),
                tunnels: Default::default(),
                leases: door_leases.clone().map(|d| d as Arc<dyn gatehouse_egress::leases::LeaseSource>),
                leaves,
                upstream_tls,
                proposals: ask_sink(),
            })),
            _ => None,
        };
        let fetch_door = match (&fetcher, config.grant_secret.as_ref(), ledger.as_ref()) {
            (Some(fetcher), Some(secret), Some(ledger)) => Some(Arc::new(FetchDoor {
                fetcher: fetcher.clone(),
                grants: new_sealer(secret),
                ledger: ledger.clone(),
                ledger_required: config.ledger_required,
                policies: policies.clone(),
                leases: door_leases.clone().map(|d| d as Arc<dyn gatehouse_egress::leases::LeaseSource>),
                signing: door_leases.clone().map(|d| d as Arc<dyn SigningSecrets>),
                sink: refusals.clone(),
                clock: clock.clone(),
                proposals: ask_sink(),
            })),
            _ => None,
        };
        let sessions = config
            .session_key_secret
            .as_ref()
            .filter(|_| config.role.mints())
            .map(|s| SessionKeyDeriver::new(s, config.tenant_isolation_strict));
        let storage = match config.role {
            Role::Worker | Role::Gateway | Role::All => Some(
                gatehouse_files::Storage::from_setting(
                    config.object_store_url.as_deref(),
                    &config.data_dir.join("objects"),
                )
                .map_err(|e| format!("GATEHOUSE_OBJECT_STORE_URL: {e}"))?,
            ),
            Role::Runner => None,
        };
        let content = crate::scanner::content_scanner(
            config.clamd.as_ref().map(|(host, port)| (host.as_str(), *port)),
            config.clamd_timeout,
            config.content_max_bytes,
        );
        let plane = Plane::new(gatehouse_plane::Parts {
            clock,
            store,
            ledger,
            refusals,
            policies,
            signer: config.manifest_signing_key.map(ManifestSigner::new),
            verifier,
            sealer,
            sessions,
            credential_public_key: config.credential_public_key.filter(|_| config.role.mints()),
            fingerprints: config
                .session_key_secret
                .as_ref()
                .filter(|_| config.role.mints())
                .map(gatehouse_capability::FingerprintKey::new),
            door_leases,
            proxy,
            asks,
            fetch_door,
            storage,
            osv,
            scan_limits: ScanLimits::new(config.deps_scan_concurrency, config.deps_scan_wait),
            settings: Settings {
                keeps_credentials: config.role.mints(),
                ledger_required: config.ledger_required,
                tenant_isolation_strict: config.tenant_isolation_strict,
                require_manifest: config.require_manifest,
                manifest_ttl_secs: config.manifest_ttl_secs,
                grant_ttl_secs: config.grant_ttl_secs,
                grant_max_lifetime_secs: config.grant_max_lifetime_secs,
                run_heartbeat_timeout_secs: config.run_heartbeat_timeout_secs,
                credential_use_per_minute: config.credential_use_per_minute,
            },
        });
        Ok(Self(Arc::new(Inner {
            plane,
            role: config.role,
            service_token: if auth_required { config.service_token } else { None },
            callers: if auth_required { config.callers } else { gatehouse_capability::Callers::default() },
            metrics_token: config.metrics_token,
            readiness: tokio::sync::Mutex::new(None),
            proxy_public_url: config.proxy_public_url,
            content,
            metrics: Metrics::default(),
            intercept_ca_cert_pem: config.intercept_ca_cert_pem.clone().filter(|_| config.role.mints()),
            resolver,
            egress_guard: AddressGuard::new(config.egress_allow_ranges.clone()),
            admin_page: config
                .admin_password_hash
                .clone()
                .filter(|_| matches!(config.role, Role::Worker | Role::All))
                .map(|password| AdminPage {
                    password,
                    listens_on_loopback: config.listen.ip().is_loopback(),
                    trusted_proxies: config.trusted_proxies.clone(),
                }),
            session_ttl_days: config.session_ttl_days,
        })))
    }
}

/// Where scans find advisories: the offline database at `osv_db` when
/// set (loaded now, so a bad one stops the start), else the OSV API at
/// `osv_url` through the door.
pub fn osv_source(
    osv_db: Option<&std::path::Path>,
    osv_url: &str,
    fetcher: impl FnOnce() -> Result<Fetcher, String>,
) -> Result<Arc<OsvSource>, String> {
    match osv_db {
        Some(dir) => {
            let advisories =
                gatehouse_deps::osv::load_dir(dir).map_err(|e| format!("{}: {e}", names::OSV_DB))?;
            Ok(Arc::new(OsvSource::Offline(Arc::new(gatehouse_deps::matching::Index::new(advisories)))))
        }
        None => {
            let client = gatehouse_deps::osv_client::ClientConfig {
                base_url: osv_url.to_owned(),
                ..Default::default()
            };
            Ok(Arc::new(OsvSource::Online(Box::new(gatehouse_deps::osv_client::OsvClient::new(
                EgressTransport::new(fetcher()?),
                client,
            )))))
        }
    }
}

/// The egress resolver: the operator's servers, or the system's. A system
/// without a readable DNS configuration resolves nothing (every name is
/// `dns_failed`) rather than failing to start: fail closed, loudly.
/// The egress fetch client: the operator's allow ranges, the system's roots
/// plus any extra PEM roots, `resolver` and `limits`. The server and the
/// command line (OSV lookups) build theirs here.
pub fn egress_fetcher(
    allow_ranges: &[ipnet::IpNet],
    extra_roots_pem: Option<&str>,
    resolver: Resolver,
    limits: Limits,
) -> Result<Fetcher, String> {
    let tls = egress_tls(extra_roots_pem)?;
    Ok(Fetcher::new(AddressGuard::new(allow_ranges.to_vec()), resolver, limits, tls))
}

/// TLS to the outside: the system's roots and the operator's extra ones.
pub fn egress_tls(extra_roots_pem: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let roots = match extra_roots_pem {
        Some(pem) => {
            use rustls::pki_types::pem::PemObject as _;
            rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| format!("{} holds an unreadable certificate", names::EGRESS_EXTRA_CA_FILE))?
        }
        None => Vec::new(),
    };
    tls_config(&roots)
}

/// The door's limits as configured.
pub fn egress_limits(limits: &gatehouse_config::EgressLimits, connect_ports: &[u16]) -> Limits {
    Limits {
        connect_ports: connect_ports.to_vec(),
        hello_timeout: Limits::default().hello_timeout,
        tunnel_bytes: limits.tunnel_max_bytes,
        tunnel_duration: limits.tunnel_timeout,
        response_bytes: usize::try_from(limits.response_max_bytes).unwrap_or(usize::MAX),
        request_bytes: usize::try_from(limits.request_max_bytes).unwrap_or(usize::MAX),
        connect_timeout: limits.connect_timeout,
        response_timeout: limits.response_timeout,
        request_duration: limits.request_timeout,
    }
}

/// DNS through `servers`, else the system's configuration.
pub fn dns_resolver(servers: &[std::net::SocketAddr]) -> Resolver {
    let built = if servers.is_empty() { DnsResolver::system() } else { DnsResolver::with_servers(servers) };
    match built {
        Ok(dns) => Resolver::Dns(Arc::new(dns)),
        Err(e) => {
            tracing::warn!(error = %e, "no DNS resolver: every egress host name will be refused (dns_failed)");
            Resolver::Static(Arc::default())
        }
    }
}

/// Grants the proxy keeps opened: a few per live run, with room to spare
/// (each entry is well under a kilobyte).
const OPENED_GRANTS: usize = 4096;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_configured_limit_reaches_the_door() {
        let configured = gatehouse_config::EgressLimits {
            response_max_bytes: 1,
            request_max_bytes: 2,
            connect_timeout: Duration::from_millis(7),
            response_timeout: Duration::from_millis(3),
            request_timeout: Duration::from_millis(4),
            tunnel_max_bytes: 5,
            tunnel_timeout: Duration::from_millis(6),
        };
        let limits = egress_limits(&configured, &[443, 8443]);
        assert_eq!(limits.connect_ports, [443, 8443]);
        assert_eq!((limits.response_bytes, limits.request_bytes, limits.tunnel_bytes), (1, 2, 5));
        assert_eq!(limits.response_timeout, Duration::from_millis(3));
        assert_eq!(limits.request_duration, Duration::from_millis(4));
        assert_eq!(limits.tunnel_duration, Duration::from_millis(6));
        assert_eq!(limits.connect_timeout, Duration::from_millis(7));
    }
}
