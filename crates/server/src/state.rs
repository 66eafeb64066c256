//! Shared state: the capabilities this node holds, its clock, its store,
//! the refusal record and the metrics.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{GrantSealer, ManifestVerifier, OpenedGrants, ServiceToken, SessionKeyDeriver};
use gatehouse_config::{Config, Role, names};
use gatehouse_core::Clock;
use gatehouse_egress::AddressGuard;
use gatehouse_egress::connect::tls_config;
use gatehouse_egress::fetch::Fetcher;
use gatehouse_egress::proxy::{Limits, Proxy, ProxyStats, Resolver};
use gatehouse_egress::resolve::DnsResolver;
use gatehouse_ledger::{Ledger, MemoryLedger, RedisLedger, RedisLedgerConfig};
use gatehouse_store::Store;

use crate::api::FetchPurpose;
use crate::events::{EventQueue, RefusalLog};
use crate::policy_cache::PolicyCache;

/// Hosts whose leaf certificates a gateway keeps minted.
const LEAF_CERTIFICATES: usize = 4096;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// See [`AppState`].
pub struct Inner {
    /// This node's role.
    pub role: Role,
    /// Present on minting roles.
    pub signer: Option<ManifestSigner>,
    /// Present on verifying roles.
    pub verifier: Option<ManifestVerifier>,
    /// Present on roles that mint or open grants.
    pub sealer: Option<GrantSealer>,
    /// The grant ledger (roles that mint or open grants).
    pub ledger: Option<Ledger>,
    /// `CODEAPI_EGRESS_LEDGER_REQUIRED`: a grant without a live record is refused.
    pub ledger_required: bool,
    /// Derives storage namespaces (minting roles).
    pub sessions: Option<SessionKeyDeriver>,
    /// The internal service token (every scope); `None` when not configured
    /// or authentication is explicitly off.
    pub service_token: Option<ServiceToken>,
    /// Named callers with scopes (empty when authentication is off).
    pub callers: gatehouse_capability::Callers,
    /// `GATEHOUSE_METRICS_TOKEN`: when set, `/metrics` requires it.
    pub metrics_token: Option<ServiceToken>,
    /// The last readiness answer and when it was taken (see `readiness`).
    pub readiness: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), gatehouse_core::Reason>)>>,
    /// `SANDBOX_REQUIRE_EGRESS_MANIFEST`.
    pub require_manifest: bool,
    /// `CODEAPI_TENANT_ISOLATION_STRICT`.
    pub tenant_isolation_strict: bool,
    /// Default manifest lifetime.
    pub manifest_ttl_secs: i64,
    /// Default grant lifetime.
    pub grant_ttl_secs: i64,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// The refusal record (logs, counters, the durable queue).
    pub refusals: Arc<RefusalLog>,
    /// Tenants' egress policies, replicated from the store.
    pub policies: Arc<PolicyCache>,
    /// Durable state (worker, gateway and all; a runner has none).
    pub store: Option<Store>,
    /// A live run without a heartbeat this long expires.
    pub run_heartbeat_timeout_secs: i64,
    /// Longest run lifetime accepted.
    pub grant_max_lifetime_secs: i64,
    /// The proxy URL handed to sandboxes.
    pub proxy_public_url: String,
    /// The forward proxy (gateway and all).
    pub proxy: Option<Arc<Proxy>>,
    /// The fetch client behind `POST /v1/egress/fetch` (gateway and all).
    pub fetcher: Option<Fetcher>,
    /// Where dependency scans find advisories (worker and all).
    pub osv: Option<Arc<crate::scans::OsvSource>>,
    /// Dependency scans' turns and how long a submission waits for its scan.
    pub scan_limits: crate::scans::ScanLimits,
    /// Sniffing plus clamd when configured (`POST /v1/content/scan`).
    pub content: gatehouse_content::ContentScanner,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Worker: the gateway's public key new credentials are sealed to.
    pub credential_public_key: Option<gatehouse_capability::SealingPublicKey>,
    /// Worker: the keyed fingerprints credentials are shown by.
    pub fingerprints: Option<gatehouse_capability::FingerprintKey>,
    /// Gateway: runs' leases as the door reads them.
    pub door_leases: Option<Arc<crate::door_leases::DoorLeases>>,
    /// Worker: the interception CA's certificate, returned with every run.
    pub intercept_ca_cert_pem: Option<String>,
    /// How this node resolves egress names (the settings page's "test a URL"
    /// asks it as the door does).
    pub resolver: Resolver,
    /// The door's address guard (the operator's allowed ranges).
    pub egress_guard: AddressGuard,
    /// The settings page (worker and all, with its password hash set).
    pub admin: Option<Arc<crate::admin::Admin>>,
    /// Where files through grants are kept (worker, gateway and all).
    pub storage: Option<gatehouse_files::Storage>,
    /// File sessions untouched this many days are swept.
    pub session_ttl_days: i64,
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
            Some(crate::scans::osv_source(config.osv_db.as_deref(), &config.osv_url, || match &fetcher {
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
                Some(Arc::new(crate::door_leases::DoorLeases::new(
                    store.clone(),
                    keys.clone(),
                    ledger.clone(),
                    refusals.clone(),
                    clock.clone(),
                )?))
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
        Ok(Self(Arc::new(Inner {
            role: config.role,
            signer: config.manifest_signing_key.map(ManifestSigner::new),
            verifier,
            sealer,
            ledger,
            ledger_required: config.ledger_required,
            sessions,
            service_token: if auth_required { config.service_token } else { None },
            callers: if auth_required { config.callers } else { gatehouse_capability::Callers::default() },
            metrics_token: config.metrics_token,
            readiness: tokio::sync::Mutex::new(None),
            require_manifest: config.require_manifest,
            tenant_isolation_strict: config.tenant_isolation_strict,
            manifest_ttl_secs: config.manifest_ttl_secs,
            grant_ttl_secs: config.grant_ttl_secs,
            refusals,
            policies,
            store,
            run_heartbeat_timeout_secs: config.run_heartbeat_timeout_secs,
            grant_max_lifetime_secs: config.grant_max_lifetime_secs,
            proxy_public_url: config.proxy_public_url,
            proxy,
            fetcher,
            osv,
            scan_limits: crate::scans::ScanLimits::new(config.deps_scan_concurrency, config.deps_scan_wait),
            content,
            metrics: Metrics::default(),
            credential_public_key: config.credential_public_key.filter(|_| config.role.mints()),
            fingerprints: config
                .session_key_secret
                .as_ref()
                .filter(|_| config.role.mints())
                .map(gatehouse_capability::FingerprintKey::new),
            door_leases,
            intercept_ca_cert_pem: config.intercept_ca_cert_pem.clone().filter(|_| config.role.mints()),
            resolver,
            egress_guard: AddressGuard::new(config.egress_allow_ranges.clone()),
            admin: config
                .admin_password_hash
                .clone()
                .filter(|_| matches!(config.role, Role::Worker | Role::All))
                .map(|hash| {
                    Arc::new(crate::admin::Admin::new(
                        hash,
                        config.listen.ip().is_loopback(),
                        config.trusted_proxies.clone(),
                    ))
                }),
            storage,
            session_ttl_days: config.session_ttl_days,
            clock,
        })))
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

/// Response counters by status class. Labels come from closed sets only, so
/// no request data can reach a metric label.
#[derive(Default)]
pub struct Metrics {
    by_class: [AtomicU64; 5],
    unsigned_passed: AtomicU64,
    content_verdicts: [AtomicU64; 4],
    egress_fetched: [AtomicU64; FetchPurpose::ALL.len()],
    listeners: std::sync::Mutex<Vec<(&'static str, Arc<gatehouse_listener::ConnectionStats>)>>,
}

/// Grants the proxy keeps opened: a few per live run, with room to spare
/// (each entry is well under a kilobyte).
const OPENED_GRANTS: usize = 4096;

const VERDICTS: [gatehouse_content::VerdictKind; 4] = [
    gatehouse_content::VerdictKind::Clean,
    gatehouse_content::VerdictKind::NotScanned,
    gatehouse_content::VerdictKind::Refused,
    gatehouse_content::VerdictKind::Infected,
];

impl Metrics {
    /// Counts one response.
    pub fn record_response(&self, status: u16) {
        let class = usize::from(status / 100).saturating_sub(1).min(4);
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an execute request that passed without a manifest because
    /// `SANDBOX_REQUIRE_EGRESS_MANIFEST=false`.
    pub fn record_unsigned(&self) {
        self.unsigned_passed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request the fetch API made on a run's behalf.
    pub fn record_fetch(&self, purpose: FetchPurpose) {
        if let Some(i) = FetchPurpose::ALL.iter().position(|p| *p == purpose) {
            self.egress_fetched[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one content verdict.
    pub fn record_content(&self, verdict: gatehouse_content::VerdictKind) {
        if let Some(i) = VERDICTS.iter().position(|v| *v == verdict) {
            self.content_verdicts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reports a listener's connection counters under `listener="name"`.
    pub fn watch_listener(&self, name: &'static str, stats: Arc<gatehouse_listener::ConnectionStats>) {
        self.listeners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((name, stats));
    }

    /// Prometheus text exposition of every counter.
    pub fn render(
        &self,
        refusals: &RefusalLog,
        proxy: Option<&ProxyStats>,
        door_leases: Option<&crate::door_leases::DoorLeases>,
    ) -> String {
        let mut out = String::new();
        let classes = self
            .by_class
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("{{class=\"{}xx\"}}", i + 1), c.load(Ordering::Relaxed)));
        counter_family(
            &mut out,
            "gatehouse_http_responses_total",
            "HTTP responses by status class.",
            classes,
        );
        counter_family(
            &mut out,
            "gatehouse_unsigned_requests_total",
            "Execute requests passed without a manifest (SANDBOX_REQUIRE_EGRESS_MANIFEST=false).",
            [(String::new(), self.unsigned_passed.load(Ordering::Relaxed))],
        );
        let verdicts = VERDICTS
            .iter()
            .zip(&self.content_verdicts)
            .map(|(v, c)| (format!("{{verdict=\"{}\"}}", v.as_str()), c.load(Ordering::Relaxed)));
        counter_family(&mut out, "gatehouse_content_scans_total", "Content verdicts.", verdicts);
        let by_purpose = FetchPurpose::ALL
            .iter()
            .zip(&self.egress_fetched)
            .map(|(p, c)| (format!("{{purpose=\"{}\"}}", p.as_str()), c.load(Ordering::Relaxed)));
        counter_family(
            &mut out,
            "gatehouse_egress_fetch_total",
            "Fetch API requests made, by purpose.",
            by_purpose,
        );
        let all_fetched = self.egress_fetched.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let fetched = [("{kind=\"fetch\"}".to_owned(), all_fetched)];
        let proxied = proxy.into_iter().flat_map(|stats| {
            [
                ("{kind=\"request\"}".to_owned(), stats.forwarded.load(Ordering::Relaxed)),
                ("{kind=\"tunnel\"}".to_owned(), stats.tunnels.load(Ordering::Relaxed)),
            ]
        });
        counter_family(
            &mut out,
            "gatehouse_egress_allowed_total",
            "Egress requests (proxied or fetched) and tunnels let through.",
            proxied.chain(fetched),
        );
        let listeners = self.listeners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let connections = listeners.iter().flat_map(|(name, c)| {
            [
                ("accepted", c.accepted.load(Ordering::Relaxed)),
                ("refused_listener_full", c.refused_listener_full.load(Ordering::Relaxed)),
                ("refused_client_full", c.refused_client_full.load(Ordering::Relaxed)),
                ("closed_idle", c.closed_idle.load(Ordering::Relaxed)),
                ("closed_header_timeout", c.closed_header_timeout.load(Ordering::Relaxed)),
            ]
            .map(|(outcome, n)| (format!("{{listener=\"{name}\",outcome=\"{outcome}\"}}"), n))
        });
        counter_family(
            &mut out,
            "gatehouse_connections_total",
            "Client connections by listener: accepted, closed at once over a cap, closed for idling or a slow header.",
            connections,
        );
        let _ =
            writeln!(out, "# HELP gatehouse_connections_open Client connections open now, tunnels included.");
        let _ = writeln!(out, "# TYPE gatehouse_connections_open gauge");
        for (name, c) in &listeners {
            let _ = writeln!(
                out,
                "gatehouse_connections_open{{listener=\"{name}\"}} {}",
                c.open.load(Ordering::Relaxed)
            );
        }
        counter_family(
            &mut out,
            "gatehouse_credential_tampering_total",
            "Lease or credential rows found not to match their credential's sealed facts (the store was written behind the API's back); each such lease is refused.",
            [(String::new(), door_leases.map_or(0, crate::door_leases::DoorLeases::tampered))],
        );
        refusals.render(&mut out);
        out
    }
}

/// One Prometheus counter family: HELP, TYPE, then `name{labels} value` per
/// sample. Labels come from closed sets only.
pub(crate) fn counter_family(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

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
