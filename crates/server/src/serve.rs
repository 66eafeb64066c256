//! `gatehouse serve`: secure startup, then the HTTP API.

use std::path::Path;
use std::sync::Arc;

use gatehouse_config::{Config, LogFormat, Source, embedded_data_dir, embedded_files, load, names};
use gatehouse_core::{Clock as _, Reason, SystemClock};
use gatehouse_ledger::Ledger;
use gatehouse_listener::Listener;

use crate::files::{KeySet, ensure_private_dir, restrict_dir};
use crate::state::AppState;

/// In embedded mode (role `all`, loopback only, no explicit keys), creates the
/// data directory and any missing key files, and says what it made — file
/// names, never contents. Returns the lines to print.
pub fn bootstrap_embedded(source: &dyn Source, file: Option<&Path>) -> Result<Vec<String>, String> {
    let Some(dir) = embedded_data_dir(source, file) else {
        return Ok(Vec::new());
    };
    let configured = |name: &str| source.var(name).is_some() || source.var(&format!("{name}_FILE")).is_some();
    let mut wanted = Vec::new();
    if !configured(names::MANIFEST_PRIVATE_KEY) && !dir.join(embedded_files::MANIFEST_PRIVATE_KEY).exists() {
        wanted.extend([embedded_files::MANIFEST_PRIVATE_KEY, embedded_files::MANIFEST_PUBLIC_KEY]);
    }
    if !configured(names::GRANT_SECRET) && !dir.join(embedded_files::GRANT_SECRET).exists() {
        wanted.push(embedded_files::GRANT_SECRET);
    }
    if !configured(names::SERVICE_TOKEN) && !dir.join(embedded_files::SERVICE_TOKEN).exists() {
        wanted.push(embedded_files::SERVICE_TOKEN);
    }
    if !configured(names::SESSION_KEY_SECRET) && !dir.join(embedded_files::SESSION_KEY_SECRET).exists() {
        wanted.push(embedded_files::SESSION_KEY_SECRET);
    }
    if !configured(names::CREDENTIAL_SEALING_KEY)
        && !dir.join(embedded_files::CREDENTIAL_SEALING_KEY).exists()
    {
        // The `all` role derives the public half; the file is for workers.
        wanted
            .extend([embedded_files::CREDENTIAL_SEALING_KEY, embedded_files::CREDENTIAL_SEALING_PUBLIC_KEY]);
    }
    if !configured(names::INTERCEPT_CA_KEY) && !dir.join(embedded_files::INTERCEPT_CA_KEY).exists() {
        wanted.extend([embedded_files::INTERCEPT_CA_KEY, embedded_files::INTERCEPT_CA_CERT]);
    }
    if !configured(names::ADMIN_PASSWORD_HASH) && !dir.join(embedded_files::ADMIN_PASSWORD_HASH).exists() {
        wanted.push(embedded_files::ADMIN_PASSWORD_HASH);
    }
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // Everything is validated first, with the keys about to be made in
    // hand: a start that would be refused anyway leaves nothing behind.
    let keys = KeySet::generate()?.only(&wanted);
    let with_keys = WithGeneratedKeys {
        base: source,
        vars: [
            (names::MANIFEST_PRIVATE_KEY, embedded_files::MANIFEST_PRIVATE_KEY),
            (names::GRANT_SECRET, embedded_files::GRANT_SECRET),
            (names::SERVICE_TOKEN, embedded_files::SERVICE_TOKEN),
            (names::SESSION_KEY_SECRET, embedded_files::SESSION_KEY_SECRET),
            (names::CREDENTIAL_SEALING_KEY, embedded_files::CREDENTIAL_SEALING_KEY),
            (names::INTERCEPT_CA_KEY, embedded_files::INTERCEPT_CA_KEY),
            (names::INTERCEPT_CA_CERT, embedded_files::INTERCEPT_CA_CERT),
            (names::ADMIN_PASSWORD_HASH, embedded_files::ADMIN_PASSWORD_HASH),
        ]
        .into_iter()
        .filter_map(|(name, f)| keys.content(f).map(|c| (name, c.trim().to_owned())))
        .collect(),
    };
    load(&with_keys, file).map_err(refusal_message)?;
    let fresh_dir = !dir.exists();
    ensure_private_dir(&dir)?;
    if fresh_dir {
        restrict_dir(&dir)?;
    }
    // A stale public key without its private key would be misleading: the
    // pair is always written together.
    let publics = [
        embedded_files::MANIFEST_PUBLIC_KEY,
        embedded_files::CREDENTIAL_SEALING_PUBLIC_KEY,
        embedded_files::INTERCEPT_CA_CERT,
    ];
    for public in publics {
        let stale = dir.join(public);
        if wanted.contains(&public) && stale.exists() {
            std::fs::remove_file(&stale)
                .map_err(|e| format!("cannot replace {}: {}", stale.display(), e.kind()))?;
        }
    }
    keys.write_new(&dir)?;
    let mut lines = vec![format!(
        "gatehouse: first start in embedded mode; generated {} in {} (owner-only)",
        keys.names().join(", "),
        dir.display()
    )];
    if let Some(password) = keys.admin_password() {
        lines.push(format!(
            "gatehouse: the settings page's password, shown once (only its hash is kept): {password}"
        ));
    }
    Ok(lines)
}

/// The configuration as given, with the keys the embedded start is about
/// to write standing in for their files.
struct WithGeneratedKeys<'a> {
    base: &'a dyn Source,
    vars: Vec<(&'static str, String)>,
}

impl Source for WithGeneratedKeys<'_> {
    fn var(&self, name: &str) -> Option<String> {
        match self.vars.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => Some(value.clone()),
            None => self.base.var(name),
        }
    }
    fn var_names(&self) -> Vec<String> {
        self.base.var_names()
    }
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        self.base.read_file(path)
    }
    fn file_mode(&self, path: &Path) -> Option<u32> {
        self.base.file_mode(path)
    }
}

fn refusal_message(problems: Vec<gatehouse_config::Problem>) -> String {
    let mut msg = format!("refusing to start: {} configuration problem(s)", problems.len());
    for p in problems {
        msg.push_str(&format!("\n  - {p}"));
    }
    msg
}

/// Installs the log subscriber.
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(names::LOG_FILTER)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Loads configuration (after the embedded bootstrap) and serves until
/// SIGINT/SIGTERM.
pub async fn serve(source: &dyn Source, file: Option<&Path>) -> Result<(), String> {
    let generated = bootstrap_embedded(source, file)?;
    let config = load(source, file).map_err(refusal_message)?;
    init_tracing(config.log_format);
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    run(config, generated).await
}

async fn run(mut config: Config, generated: Vec<String>) -> Result<(), String> {
    let listen = config.listen;
    let proxy_listen = config.proxy_listen;
    let role = config.role;
    let embedded = config.embedded;
    let data_dir = config.data_dir.clone();
    let auth = config.service_auth_required();
    let limits = listener_limits(&config.connections);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {}", e.kind()))?;
    // The settings page throttles failed sign-ins by client address.
    let listener = Listener::new(listener, limits).with_peer_addresses();
    let bound = listener.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
    // The proxy's socket is bound before the state is built: with port 0,
    // the address runs are handed (`proxy.url`) is the one bound, not `:0`.
    let proxy_socket = if matches!(role, gatehouse_config::Role::Gateway | gatehouse_config::Role::All) {
        let socket = tokio::net::TcpListener::bind(proxy_listen)
            .await
            .map_err(|e| format!("cannot listen on {proxy_listen}: {}", e.kind()))?;
        let proxy_bound =
            socket.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
        if config.proxy_public_url == format!("http://{proxy_listen}") {
            config.proxy_public_url = format!("http://{proxy_bound}");
        }
        Some(socket)
    } else {
        None
    };
    let store = if role.has_store() { Some(open_store(&config).await?) } else { None };
    let event_retention_days = config.event_retention_days;
    let shutdown_drain = config.shutdown_drain;
    let state = AppState::from_config(config, Arc::new(SystemClock), store)?;
    if let Some(store) = state.plane.store.clone() {
        background(&state, store, event_retention_days).await;
    }
    if let Some(ledger @ Ledger::Redis(redis)) = &state.plane.ledger {
        // A Redis that may evict ledger keys could undo a revocation: refuse
        // to start. One that does not answer yet is waited for (readiness
        // says so, and checks the policy again once it answers).
        match ledger.check_retention().await {
            Ok(()) => {}
            Err(Reason::LedgerEvictionUnsafe) => {
                let policy = redis.eviction_policy().await.unwrap_or_default();
                return Err(format!(
                    "GATEHOUSE_REDIS_URL: the Redis maxmemory-policy is {policy}, which may evict ledger keys \
                     (revocation markers, run indexes, grant records) and undo a revocation; \
                     set maxmemory-policy noeviction (ledger_eviction_unsafe)"
                ));
            }
            Err(reason) => {
                tracing::warn!(%reason, "the ledger's Redis does not answer yet: not ready until it does")
            }
        }
    }
    if let Some(Ledger::Memory(memory)) = &state.plane.ledger {
        // Records of long-expired grants are dropped from memory; Redis
        // expires its keys by itself.
        let memory = memory.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tick.tick().await;
                memory.purge_expired(SystemClock.now());
            }
        });
    }
    // SIGTERM stops both listeners at once; the events their last requests
    // queued are drained once both have answered them.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut proxy_task = None;
    let proxy_line = match (state.plane.proxy.clone(), proxy_socket) {
        (Some(proxy), Some(listener)) => {
            let bound =
                listener.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
            // Refusals of clients that proved nothing are counted by address.
            let listener = Listener::new(listener, limits).with_peer_addresses();
            state.metrics.watch_listener("proxy", listener.stats());
            let serving = gatehouse_egress::proxy::serve_until(proxy, listener, stopping(&stop));
            proxy_task = Some(tokio::spawn(serving));
            Some(format!("gatehouse egress proxy listening on http://{bound}"))
        }
        _ => None,
    };
    state.metrics.watch_listener("api", listener.stats());
    let app = router(state.clone());
    for line in generated {
        say!("{line}");
    }
    if let Some(line) = proxy_line {
        say!("{line}");
    }
    say!("gatehouse {} listening on http://{bound} (role {})", env!("CARGO_PKG_VERSION"), role.as_str());
    if state.admin_page.is_some() && state.plane.store.is_some() {
        say!("gatehouse settings page: http://{bound}/admin");
    } else if matches!(role, gatehouse_config::Role::Worker | gatehouse_config::Role::All) {
        tracing::warn!("no settings page: set GATEHOUSE_ADMIN_PASSWORD_HASH (gatehouse admin hash-password)");
    }
    if embedded && auth {
        let token = data_dir.join(embedded_files::SERVICE_TOKEN);
        say!(
            "try: curl -s -H \"Authorization: Bearer $(cat {})\" -H 'content-type: application/json' \
             -d '{{\"claims\":{{\"exec_id\":\"exec-1\",\"tenant_id\":\"t1\",\"user_id\":\"u1\"}},\"body\":{{\"code\":\"print(1)\"}}}}' \
             http://{bound}/v1/manifests/sign",
            token.display()
        );
    }
    match state.content.clamd() {
        Some(clamd) => match clamd.version().await {
            Ok(version) => tracing::info!(at = %clamd.describe(), %version, "content scanning with clamd"),
            Err(e) => tracing::warn!(
                at = %clamd.describe(),
                reason = %e.reason(),
                "clamd does not answer: content is refused until it does"
            ),
        },
        None => tracing::warn!(
            "no malware scanner (CLAMD_HOST unset): accepted content is not_scanned, never clean"
        ),
    }
    tracing::info!(%bound, role = role.as_str(), "listening");
    let handler = move |req| tower::ServiceExt::oneshot(app.clone(), req);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    listener.serve_http1(handler, stopping(&stop)).await;
    if let Some(proxy) = proxy_task {
        let _ = proxy.await;
    }
    drain_events(&state, shutdown_drain).await;
    Ok(())
}

/// At shutdown, once the API listener has stopped: the events still queued
/// for the store (refusals, run events, counts) are written before the
/// process exits, for at most `within` (`GATEHOUSE_SHUTDOWN_DRAIN_SECS`),
/// so a rolling restart loses none of them. What is left past the bound
/// is said in the log.
pub async fn drain_events(state: &AppState, within: std::time::Duration) {
    let Some(queue) = state.plane.refusals.queue() else { return };
    let waiting = queue.waiting();
    if waiting == 0 {
        return;
    }
    tracing::info!(events = waiting, "writing the events still queued before exiting");
    if queue.flush(within).await {
        tracing::info!("every queued event is written");
    } else {
        tracing::error!(
            events = queue.waiting(),
            secs = within.as_secs(),
            "events not written within GATEHOUSE_SHUTDOWN_DRAIN_SECS are lost"
        );
    }
}

/// The configured connection limits, for each listener.
pub fn listener_limits(c: &gatehouse_config::ConnectionLimits) -> gatehouse_listener::Limits {
    gatehouse_listener::Limits {
        header_read_timeout: c.header_read_timeout,
        idle_timeout: c.idle_timeout,
        max_connections: c.max_connections,
        max_connections_per_client: c.max_connections_per_client,
    }
}

/// Opens the durable store and brings its schema up to this binary's:
/// pending migrations are applied (each in a transaction; on PostgreSQL
/// under the migrator's lock, so nodes starting together migrate once), and
/// a schema newer than this binary refuses the start.
pub async fn open_store(config: &Config) -> Result<gatehouse_store::Store, String> {
    if config.database_url.is_none() {
        ensure_private_dir(&config.data_dir)?;
    }
    let mut store_config = gatehouse_store::StoreConfig::new(config.store_url().expose());
    store_config.op_timeout = config.store_timeout;
    let refuse = |e: gatehouse_store::StoreError| format!("refusing to start: the store: {e}");
    let store = gatehouse_store::Store::connect(&store_config).await.map_err(refuse)?;
    let applied = store.migrate().await.map_err(refuse)?;
    if !applied.is_empty() {
        tracing::info!(?applied, "store migrated");
    }
    Ok(store)
}

/// This node's HTTP face: the API, with the settings page beside it where
/// the node serves one. The one place both are mounted: neither knows the
/// other.
pub fn router(state: AppState) -> axum::Router {
    let pages = crate::admin::router(&state).unwrap_or_default();
    crate::api::router(state, pages)
}

/// The store's background work on this node: the durable event writer, the
/// policy replica, the expiry sweep, retention and closing revoked grants'
/// connections. The replica is loaded before the node serves.
pub async fn background(state: &AppState, store: gatehouse_store::Store, retention_days: i64) {
    if let Some(queue) = state.plane.refusals.queue() {
        tokio::spawn(queue.clone().write_to(store.clone()));
    }
    if let Err(e) = state.plane.policies.refresh(&store).await {
        tracing::error!(
            code = e.code(),
            "egress policies could not be loaded: egress is refused until they are"
        );
    }
    tokio::spawn(state.plane.policies.clone().follow(store.clone()));
    tokio::spawn(sweep_expired_runs(state.clone()));
    if let Some(minter) = state.plane.door_leases.as_ref().and_then(|l| l.minter()) {
        tokio::spawn(minter.clone().sweep_forever());
    }
    if state.plane.osv.is_some() {
        tokio::spawn(gatehouse_plane::scans::fail_stale_scans(store.clone(), state.plane.clock.clone()));
    }
    if let Some(storage) = state.plane.storage.clone() {
        tokio::spawn(gatehouse_plane::files::run(
            state.plane.clock.clone(),
            store.clone(),
            storage,
            state.session_ttl_days,
        ));
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            tick.tick().await;
            match store.prune_events(SystemClock.now() - retention_days * 86_400).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(pruned = n, "old run events and refusals pruned"),
                Err(e) => tracing::warn!(code = e.code(), "event retention could not prune"),
            }
        }
    });
    if let Some(proxy) = state.plane.proxy.clone() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                proxy.close_revoked().await;
            }
        });
    }
}

/// Expires live runs whose heartbeat was lost or whose lifetime is over,
/// every two seconds ([`gatehouse_plane::Plane::expire_due_runs`]).
pub async fn sweep_expired_runs(state: AppState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    loop {
        tick.tick().await;
        state.plane.expire_due_runs().await;
    }
}

/// Resolves once the node is told to stop.
fn stopping(stop: &tokio::sync::watch::Receiver<bool>) -> impl Future<Output = ()> + use<> {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
