//! `POST /v1/runs` end to end, beside raw inserts of the same rows, on
//! SQLite and on PostgreSQL, in the same run.
//!
//! Run: `cargo bench -p gatehouse-server --bench runs` (needs the local
//! PostgreSQL that the tests use; `GATEHOUSE_TEST_POSTGRES_URL` overrides it).
//!
//! End to end is the in-process router (no sockets): strict JSON, the
//! kill-switch check, manifest signing, grant minting, the in-process ledger
//! and the store's transaction (control lock, tenant row, run row, chained
//! audit entry). The reference inserts the same run row and audit row with
//! sqlx in one transaction per run, from the same number of tasks.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use gatehouse_config::{MapSource, load, names};
use gatehouse_core::SystemClock;
use gatehouse_server::state::AppState;
use gatehouse_test_support::TestDatabase;
use http::Request;
use tower::ServiceExt as _;

const TOKEN: &str = "bench-token-0123456789abcdefghijklmnopqrstuvwxyz";
const RUNS: usize = 2000;
const TASKS: usize = 8;

async fn node(url: &str, dir: &std::path::Path) -> axum::Router {
    let key =
        gatehouse_capability::ManifestSigningKey::generate().unwrap().to_pkcs8_pem().unwrap().to_string();
    let sealing = gatehouse_capability::SealingKey::generate().unwrap().public_key().to_text();
    let ca = gatehouse_egress::intercept::InterceptCa::generate().unwrap();
    // A worker: the role that creates runs (no proxy, no sealing key).
    let src = MapSource::new()
        .with(names::ROLE, "worker")
        .with(names::SESSION_KEY_SECRET, "bench-session-0123456789abcdefghijklmnopqrstuvwxyz")
        .with(names::CREDENTIAL_SEALING_PUBLIC_KEY, sealing)
        .with(names::INTERCEPT_CA_CERT, ca.cert_pem())
        .with(names::LISTEN, "127.0.0.1:0")
        .with(names::PROXY_LISTEN, "127.0.0.1:0")
        .with(names::DATA_DIR, dir.to_str().unwrap())
        .with(names::DATABASE_URL, url)
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::GRANT_SECRET, "bench-grant-0123456789abcdefghijklmnopqrstuvwxyz")
        .with(names::MANIFEST_PRIVATE_KEY, key);
    let config = load(&src, None).unwrap();
    let store = gatehouse_server::serve::open_store(&config).await.unwrap();
    let state = AppState::from_config(config, Arc::new(SystemClock), Some(store.clone())).unwrap();
    gatehouse_server::serve::background(&state, store, 30).await;
    gatehouse_server::serve::router(state)
}

/// Runs `op(i)` for `RUNS` values of `i` from `TASKS` tasks; returns runs/s.
async fn throughput<F, Fut>(op: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let op = op.clone();
            tokio::spawn(async move {
                for i in (t..RUNS).step_by(TASKS) {
                    op(i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    RUNS as f64 / started.elapsed().as_secs_f64()
}

async fn end_to_end(router: axum::Router) -> f64 {
    throughput(move |i| {
        let router = router.clone();
        async move {
            let body =
                format!(r#"{{"tenant_id":"t{}","user_id":"u1","body":{{"code":"print({i})"}}}}"#, i % 10);
            let req = Request::post("/v1/runs")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
            let status = router.oneshot(req).await.unwrap().status();
            assert_eq!(status, 201);
        }
    })
    .await
}

const RAW_RUN: &str = "INSERT INTO runs (run_id, tenant_id, user_id, status, grant_id, execute_body_sha256, \
     created_at, heartbeat_at, expires_at) VALUES ($1, $2, 'u1', 'live', $3, $4, 1, 1, 901)";
const RAW_AUDIT: &str = "INSERT INTO audit_log (seq, at, actor, action, tenant_id, subject, detail, prev_hash, hash) \
     VALUES ($1, 1, 'service', 'run.create', $2, $3, '{}', $4, $4)";

macro_rules! raw_inserts {
    ($pool:expr) => {{
        let pool = $pool;
        throughput(move |i| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await.unwrap();
                let id = format!("raw_{i:06}");
                sqlx::query(RAW_RUN)
                    .bind(&id)
                    .bind(format!("t{}", i % 10))
                    .bind(format!("gr_{i}"))
                    .bind("ab".repeat(32))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                sqlx::query(RAW_AUDIT)
                    .bind(1_000_000 + i64::try_from(i).unwrap())
                    .bind(format!("t{}", i % 10))
                    .bind(&id)
                    .bind("cd".repeat(32))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        })
        .await
    }};
}

fn report(backend: &str, e2e: f64, raw: f64) {
    println!("{backend:<10} POST /v1/runs end to end {e2e:>9.0} runs/s");
    println!("{backend:<10} raw inserts, same rows    {raw:>9.0} runs/s");
    println!("{backend:<10} ratio end to end / raw: {:.2} (target >= 0.50)", e2e / raw);
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let e2e = end_to_end(node(&url, dir.path()).await).await;
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(
                url.parse::<sqlx::sqlite::SqliteConnectOptions>()
                    .unwrap()
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        let raw = raw_inserts!(pool);
        report("sqlite", e2e, raw);

        let db = TestDatabase::create();
        let pg_dir = tempfile::tempdir().unwrap();
        let e2e = end_to_end(node(db.url(), pg_dir.path()).await).await;
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(16).connect(db.url()).await.unwrap();
        let raw = raw_inserts!(pool);
        report("postgres", e2e, raw);
    });
}
