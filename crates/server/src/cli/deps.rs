//! `gatehouse deps scan` and `gatehouse osv serve`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gatehouse_deps::Package;
use gatehouse_deps::gate::GateMode;
use gatehouse_deps::matching::Index;
use gatehouse_deps::osv_client::{ClientConfig, OsvClient};
use gatehouse_deps::scan::{self, BaseAbsent, ScanError};

use gatehouse_plane::scans::{EgressTransport, OsvSource};
use serde::Deserialize;
use serde_json::{Value, json};

/// The largest base lockfile read; a larger one is read as absent.
pub const DEFAULT_BASE_MAX_BYTES: u64 = gatehouse_plane::scans::BASE_MAX_BYTES;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScanFormat {
    /// A table for people.
    Text,
    /// DESIGN.md's JSON shape.
    Json,
    /// SARIF 2.1.0 for code-scanning UIs.
    Sarif,
    /// A summary for an agent's tool output or a pull-request comment.
    Markdown,
}

/// Everything `deps scan` was asked.
pub struct ScanArgs {
    /// The base branch's lockfile.
    pub base: Option<PathBuf>,
    /// The head's lockfile.
    pub head: PathBuf,
    /// An offline OSV database directory.
    pub osv_db: Option<PathBuf>,
    /// The OSV API root.
    pub osv_url: Option<String>,
    /// off, high or critical.
    pub gate: String,
    /// Output format.
    pub format: ScanFormat,
    /// Larger base lockfiles are read as absent.
    pub base_max_bytes: u64,
}

/// Runs a scan. Exit 0 when the gate passes, 1 when it trips, 2 on bad
/// input (an unreadable head file, a bad option) — and 2 as well when the
/// scan did not complete under gate `off`, which does not block but must
/// not look like a clean pass either.
pub fn deps_scan(
    args: ScanArgs,
    fetcher: impl FnOnce() -> Result<gatehouse_egress::fetch::Fetcher, String>,
) -> Result<ExitCode, String> {
    let mode: GateMode =
        args.gate.parse().map_err(|_| format!("--gate {}: expected off, high or critical", args.gate))?;
    let mut errors = Vec::new();
    let head_name = args.head.display().to_string();
    let head_len =
        std::fs::metadata(&args.head).map_err(|e| format!("cannot read {head_name}: {}", e.kind()))?.len();
    // Never read more than a parser would accept (a 200 MB file is refused unread).
    let limit = gatehouse_deps::lockfile::MAX_LOCKFILE_BYTES as u64;
    let parsed_head = if head_len > limit {
        Err(gatehouse_deps::ParseError {
            code: gatehouse_deps::ParseErrorCode::TooLarge,
            file: head_name.clone(),
            line: None,
            message: format!("{head_len} bytes; the limit is {limit}"),
        })
    } else {
        let bytes =
            std::fs::read(&args.head).map_err(|e| format!("cannot read {head_name}: {}", e.kind()))?;
        // `-r`/`-c` includes stay inside the lockfile's directory tree
        // (symbolic links included): a pull request names them.
        gatehouse_deps::lockfile::parse_file(&args.head, &bytes, None)
    };
    let base = match &args.base {
        None => Err(BaseAbsent::NotGiven),
        Some(path) => {
            let len = std::fs::metadata(path)
                .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?
                .len();
            if len > args.base_max_bytes {
                Err(BaseAbsent::TooLarge { bytes: len, limit: args.base_max_bytes })
            } else {
                let bytes = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
                scan::read_base(gatehouse_deps::lockfile::parse_file(path, &bytes, None))
            }
        }
    };
    let plan = scan::plan(parsed_head, base);
    errors.extend(plan.error);
    let (to_check, base_absent) = (plan.to_check, plan.base_absent);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    let source = if to_check.is_empty() {
        None
    } else if let Some(dir) = &args.osv_db {
        let dir = dir.clone();
        let loaded = runtime
            .block_on(with_spinner("loading the OSV database", async move {
                tokio::task::spawn_blocking(move || gatehouse_deps::osv::load_dir(&dir)).await
            }))
            .map_err(|_| "the database loader stopped unexpectedly".to_owned())?;
        match loaded {
            Ok(advisories) => Some(OsvSource::Offline(Arc::new(Index::new(advisories)))),
            Err(e) => {
                errors.push(ScanError {
                    code: format!("database_{}", e.code.as_str()),
                    message: e.to_string(),
                });
                None
            }
        }
    } else {
        let fetcher = fetcher()?;
        let mut config = ClientConfig::default();
        if let Some(url) = &args.osv_url {
            config.base_url.clone_from(url);
        }
        Some(OsvSource::Online(Box::new(OsvClient::new(EgressTransport::new(fetcher), config))))
    };
    let findings = match source {
        None => Vec::new(),
        Some(source) => {
            let message = format!("checking {} package version(s) against OSV", to_check.len());
            let (findings, check_errors) =
                runtime.block_on(with_spinner(&message, source.check(to_check.clone())));
            errors.extend(check_errors);
            findings
        }
    };
    let report = scan::report(findings, errors, to_check.len(), base_absent, mode);
    let text = match args.format {
        ScanFormat::Json => serde_json::to_string(&report).unwrap_or_default(),
        ScanFormat::Text => scan::render_text(&report),
        ScanFormat::Markdown => scan::render_markdown(&report),
        ScanFormat::Sarif => {
            serde_json::to_string_pretty(&scan::render_sarif(&report, &head_name, env!("CARGO_PKG_VERSION")))
                .unwrap_or_default()
        }
    };
    say!("{}", text.trim_end());
    Ok(ExitCode::from(if report.gate.tripped {
        1
    } else if report.status == "error" {
        2
    } else {
        0
    }))
}

/// Runs `work`; if it takes more than a moment, a spinner on stderr says
/// what it is doing. indicatif draws nothing when stderr is not a terminal,
/// so pipes and CI logs stay clean.
async fn with_spinner<T>(message: &str, work: impl Future<Output = T>) -> T {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => done,
        () = tokio::time::sleep(std::time::Duration::from_millis(400)) => {
            let spinner = indicatif::ProgressBar::new_spinner().with_message(message.to_owned());
            spinner.enable_steady_tick(std::time::Duration::from_millis(100));
            let done = work.await;
            spinner.finish_and_clear();
            done
        }
    }
}

#[derive(Deserialize)]
struct QueryPackage {
    name: String,
    ecosystem: String,
}

#[derive(Deserialize)]
struct Query {
    package: Option<QueryPackage>,
    version: Option<String>,
    commit: Option<String>,
    #[serde(default)]
    #[allow(dead_code, reason = "accepted for compatibility; every answer fits one page")]
    page_token: Option<String>,
}

#[derive(Deserialize)]
struct Batch {
    queries: Vec<Query>,
}

fn api_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"code": status.as_u16(), "message": message}))).into_response()
}

/// The advisories answering one query, or why there is no answer.
fn answer(index: &Index, q: &Query) -> Result<Vec<String>, (StatusCode, String)> {
    if let Some(commit) = &q.commit {
        if q.version.is_some() {
            return Err((StatusCode::BAD_REQUEST, "a query has a commit or a version, not both".into()));
        }
        // Without the repositories' history, only a GIT range that lists the
        // commit itself can say; for a named package, the offline reading
        // decides as it does for a git dependency without a version (an
        // advisory for the package that lists no such commit cannot be
        // evaluated: an error, never "not affected").
        let Some(package) = &q.package else {
            return Ok(index.listing_commit(commit).iter().map(|a| a.id.clone()).collect());
        };
        let Some(ecosystem) = gatehouse_deps::matching::ecosystem_from_osv(&package.ecosystem) else {
            return Ok(index.listing_commit(commit).iter().map(|a| a.id.clone()).collect());
        };
        let mut versionless = Package::new(ecosystem, &package.name, "");
        versionless.commit = Some(commit.clone());
        return evaluated(index, &versionless);
    }
    let Some(package) = &q.package else {
        return Err((StatusCode::BAD_REQUEST, "a query needs a package".into()));
    };
    let Some(ecosystem) = gatehouse_deps::matching::ecosystem_from_osv(&package.ecosystem) else {
        // An ecosystem gatehouse does not index: nothing known.
        return Ok(Vec::new());
    };
    let Some(version) = &q.version else {
        return Err((StatusCode::BAD_REQUEST, "a query needs a version".into()));
    };
    evaluated(index, &Package::new(ecosystem, &package.name, version))
}

fn evaluated(index: &Index, package: &Package) -> Result<Vec<String>, (StatusCode, String)> {
    let evaluation = index.evaluate(package);
    if let Some(e) = evaluation.errors.first() {
        // Fail closed: the client must not read "no vulnerabilities" into an
        // advisory this mirror could not evaluate.
        return Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    }
    Ok(evaluation.affected.iter().map(|a| a.id.clone()).collect())
}

async fn query(State(index): State<Arc<Index>>, Json(q): Json<Query>) -> Response {
    match answer(&index, &q) {
        Ok(ids) => {
            let vulns: Vec<Value> = ids
                .iter()
                .filter_map(|id| index.get(id))
                .map(|a| serde_json::to_value(a).unwrap_or_default())
                .collect();
            if vulns.is_empty() {
                Json(json!({})).into_response()
            } else {
                Json(json!({"vulns": vulns})).into_response()
            }
        }
        Err((status, message)) => api_error(status, &message),
    }
}

async fn querybatch(State(index): State<Arc<Index>>, Json(batch): Json<Batch>) -> Response {
    if batch.queries.len() > gatehouse_deps::osv_client::MAX_BATCH {
        return api_error(StatusCode::BAD_REQUEST, "too many queries in one batch (at most 1000)");
    }
    let mut results = Vec::with_capacity(batch.queries.len());
    for q in &batch.queries {
        match answer(&index, q) {
            Ok(ids) => {
                let vulns: Vec<Value> = ids
                    .iter()
                    .filter_map(|id| index.get(id))
                    .map(|a| json!({"id": a.id, "modified": a.modified}))
                    .collect();
                results.push(if vulns.is_empty() { json!({}) } else { json!({"vulns": vulns}) });
            }
            Err((status, message)) => return api_error(status, &message),
        }
    }
    Json(json!({"results": results})).into_response()
}

async fn vuln(State(index): State<Arc<Index>>, UrlPath(id): UrlPath<String>) -> Response {
    match index.get(&id) {
        Some(a) => Json(serde_json::to_value(a).unwrap_or_default()).into_response(),
        None => api_error(StatusCode::NOT_FOUND, "Bug not found."),
    }
}

/// The mirror's routes over an index.
pub fn osv_router(index: Arc<Index>) -> Router {
    Router::new()
        .route("/v1/query", post(query))
        .route("/v1/querybatch", post(querybatch))
        .route("/v1/vulns/{id}", get(vuln))
        .with_state(index)
}

/// `gatehouse osv serve`: loads the database (every file must be valid
/// OSV: a partial mirror would answer "not affected" for what it dropped)
/// and serves it until interrupted.
pub fn osv_serve(db: &Path, listen: SocketAddr) -> Result<ExitCode, String> {
    let advisories = gatehouse_deps::osv::load_dir(db).map_err(|e| e.to_string())?;
    let index = Arc::new(Index::new(advisories));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    runtime.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {}", e.kind()))?;
        let bound = listener.local_addr().map_err(|e| format!("cannot read the bound address: {}", e.kind()))?;
        say!(
            "gatehouse osv mirror listening on http://{bound} ({} advisories, {} withdrawn not served as matches)",
            index.len(),
            index.withdrawn()
        );
        axum::serve(listener, osv_router(index))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| format!("server error: {}", e.kind()))
    })?;
    Ok(ExitCode::SUCCESS)
}
