//! `gatehouse serve`: secure startup, then the HTTP API.

use std::path::Path;
use std::sync::Arc;

use gatehouse_config::{Config, LogFormat, Source, embedded_data_dir, embedded_files, load, names};
use gatehouse_core::{Clock as _, SystemClock};
use gatehouse_ledger::Ledger;

use crate::files::{KeySet, ensure_private_dir, restrict_dir};
use crate::state::AppState;

/// In embedded mode (role `all`, loopback only, no explicit keys), creates the
/// data directory and any missing key files, and says what it made — file
/// names, never contents. Returns the lines to print.
pub fn bootstrap_embedded(source: &dyn Source, file: Option<&Path>) -> Result<Vec<String>, String> {
    let Some(dir) = embedded_data_dir(source, file) else {
        return Ok(Vec::new());
    };
    let fresh_dir = !dir.exists();
    ensure_private_dir(&dir)?;
    if fresh_dir {
        restrict_dir(&dir)?;
    }
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
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // A stale public key without its private key would be misleading: the
    // pair is always written together.
    if wanted.contains(&embedded_files::MANIFEST_PUBLIC_KEY) {
        let stale = dir.join(embedded_files::MANIFEST_PUBLIC_KEY);
        if stale.exists() {
            std::fs::remove_file(&stale)
                .map_err(|e| format!("cannot replace {}: {}", stale.display(), e.kind()))?;
        }
    }
    let keys = KeySet::generate()?.only(&wanted);
    keys.write_new(&dir)?;
    Ok(vec![format!(
        "gatehouse: first start in embedded mode; generated {} in {} (owner-only)",
        keys.names().join(", "),
        dir.display()
    )])
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
    let config = load(source, file).map_err(|problems| {
        let mut msg = format!("refusing to start: {} configuration problem(s)", problems.len());
        for p in problems {
            msg.push_str(&format!("\n  - {p}"));
        }
        msg
    })?;
    init_tracing(config.log_format);
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    run(config, generated).await
}

async fn run(config: Config, generated: Vec<String>) -> Result<(), String> {
    let listen = config.listen;
    let proxy_listen = config.proxy_listen;
    let role = config.role;
    let embedded = config.embedded;
    let data_dir = config.data_dir.clone();
    let auth = config.service_auth_required();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {}", e.kind()))?;
    let bound = listener.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
    let state = AppState::from_config(config, Arc::new(SystemClock))?;
    if let Some(Ledger::Memory(memory)) = &state.ledger {
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
    let proxy_line = match state.proxy.clone() {
        Some(proxy) => {
            let listener = tokio::net::TcpListener::bind(proxy_listen)
                .await
                .map_err(|e| format!("cannot listen on {proxy_listen}: {}", e.kind()))?;
            let bound =
                listener.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
            tokio::spawn(gatehouse_egress::proxy::serve(proxy, listener));
            Some(format!("gatehouse egress proxy listening on http://{bound}"))
        }
        None => None,
    };
    let app = crate::api::router(state.clone());
    for line in generated {
        println!("{line}");
    }
    if let Some(line) = proxy_line {
        println!("{line}");
    }
    println!("gatehouse {} listening on http://{bound} (role {})", env!("CARGO_PKG_VERSION"), role.as_str());
    if embedded && auth {
        let token = data_dir.join(embedded_files::SERVICE_TOKEN);
        println!(
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
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("server error: {}", e.kind()))
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
