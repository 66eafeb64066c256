//! The settings page's tenant view with 1,000 and with 1,000,000 stored
//! refusals, on SQLite and on PostgreSQL, in the same run.
//!
//! Run: `cargo bench -p gatehouse-server --bench admin` (needs the local
//! PostgreSQL that the tests use; `GATEHOUSE_TEST_POSTGRES_URL` overrides it).
//!
//! Each measurement is a signed-in `GET /admin/tenants/t1` through the
//! in-process router (no sockets): the session lookup, every section's reads
//! (the policy, Allow candidates from the tenant's newest refusals, scans,
//! the scanner, runs, leases, one page of refusals) and the HTML. Two nodes,
//! one store holding 1,000 refusals and one 1,000,000 (half of them the
//! viewed tenant's, the rest nine other tenants'), are loaded in turn,
//! interleaved, so the machine's drift touches both alike; the target is the
//! large store within 1.5x of the small one. A view filtered by a reason
//! that matches almost nothing is reported beside it: its page walks at most
//! `REFUSAL_SCAN_ROWS` rows, so it grows from 1,000 rows to that bound.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use gatehouse_config::{MapSource, load, names};
use gatehouse_core::SystemClock;
use gatehouse_server::state::AppState;
use gatehouse_test_support::TestDatabase;
use http::Request;
use tower::ServiceExt as _;

const PASSWORD: &str = "bench password, long enough";
const SMALL: i64 = 1_000;
const LARGE: i64 = 1_000_000;
const ROUNDS: usize = 40;

async fn node(url: &str, dir: &std::path::Path, hash: &str) -> axum::Router {
    let key =
        gatehouse_capability::ManifestSigningKey::generate().unwrap().to_pkcs8_pem().unwrap().to_string();
    let sealing = gatehouse_capability::SealingKey::generate().unwrap().public_key().to_text();
    let ca = gatehouse_egress::intercept::InterceptCa::generate().unwrap();
    // A worker: the role that serves the page (no proxy, no sealing key).
    let src = MapSource::new()
        .with(names::ROLE, "worker")
        .with(names::SESSION_KEY_SECRET, "bench-session-0123456789abcdefghijklmnopqrstuvwxyz")
        .with(names::CREDENTIAL_SEALING_PUBLIC_KEY, sealing)
        .with(names::INTERCEPT_CA_CERT, ca.cert_pem())
        .with(names::LISTEN, "127.0.0.1:0")
        .with(names::PROXY_LISTEN, "127.0.0.1:0")
        .with(names::DATA_DIR, dir.to_str().unwrap())
        .with(names::DATABASE_URL, url)
        .with(names::SERVICE_TOKEN, "bench-token-0123456789abcdefghijklmnopqrstuvwxyz")
        .with(names::GRANT_SECRET, "bench-grant-0123456789abcdefghijklmnopqrstuvwxyz")
        .with(names::MANIFEST_PRIVATE_KEY, key)
        .with(names::ADMIN_PASSWORD_HASH, hash);
    let config = load(&src, None).unwrap();
    let store = gatehouse_server::serve::open_store(&config).await.unwrap();
    let state = AppState::from_config(config, Arc::new(SystemClock), Some(store.clone())).unwrap();
    gatehouse_server::serve::background(&state, store, 30).await;
    gatehouse_server::serve::router(state)
}

async fn sign_in(router: &axum::Router) -> String {
    let form = serde_urlencoded::to_string([("person", "bench"), ("password", PASSWORD)]).unwrap();
    let req = Request::post("/admin/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .unwrap();
    let response = router.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), 303);
    response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
}

/// One page load, in milliseconds.
async fn load_ms(router: &axum::Router, cookie: &str, path: &str) -> f64 {
    let req = Request::get(path).header("cookie", cookie).body(Body::empty()).unwrap();
    let started = Instant::now();
    let response = router.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(body.len() > 1000);
    ms
}

/// The median times of `path` on the small and the large node, their
/// loads interleaved so the machine's drift touches both alike.
async fn interleaved(
    small: &(axum::Router, String),
    large: &(axum::Router, String),
    path: &str,
) -> (f64, f64) {
    let (mut a, mut b) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        // Alternate which goes first, too.
        if round % 2 == 0 {
            a.push(load_ms(&small.0, &small.1, path).await);
            b.push(load_ms(&large.0, &large.1, path).await);
        } else {
            b.push(load_ms(&large.0, &large.1, path).await);
            a.push(load_ms(&small.0, &small.1, path).await);
        }
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[ROUNDS / 2], b[ROUNDS / 2])
}

/// Refusals `from..=to`: even ones the viewed tenant's, odd ones spread
/// over nine others; one in 100,000 has the rare reason.
fn insert_sql(from: i64, to: i64, series: &str) -> String {
    format!(
        "INSERT INTO events (seq, at, tenant_id, run_id, kind, reason, host, rule, request_id, dry_run, refusal) \
         SELECT x, 1800000000 + x, CASE WHEN x % 2 = 0 THEN 't1' ELSE 't' || (x % 9 + 2) END, 'run_' || (x % 5000), \
         'egress_refused', CASE WHEN x % 100000 = 7 THEN 'policy_denied' ELSE 'policy_not_allowed' END, \
         'h' || (x % 1000) || '.example', NULL, 'req_' || x, 0, 1 FROM {series} \
         WHERE x BETWEEN {from} AND {to}"
    )
}

fn report(backend: &str, whole: (f64, f64), rare: (f64, f64)) {
    println!("{backend:<9} tenant page, {SMALL} refusals stored:      {:>7.2} ms", whole.0);
    println!("{backend:<9} tenant page, {LARGE} refusals stored:   {:>7.2} ms", whole.1);
    println!("{backend:<9} ratio: {:.2} (target <= 1.50)", whole.1 / whole.0);
    println!("{backend:<9} filtered by a rare reason: {:.2} ms, then {:.2} ms", rare.0, rare.1);
}

/// A node whose store holds refusals `1..=count`, signed in.
async fn filled(
    url: &str,
    dir: &std::path::Path,
    hash: &str,
    count: i64,
    series: &str,
) -> (axum::Router, String) {
    let router = node(url, dir, hash).await;
    let sql = insert_sql(1, count, series);
    if url.starts_with("sqlite") {
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        sqlx::raw_sql("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE)").execute(&pool).await.unwrap();
    } else {
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        sqlx::raw_sql("ANALYZE events").execute(&pool).await.unwrap();
    }
    let cookie = sign_in(&router).await;
    (router, cookie)
}

async fn measure(small: &(axum::Router, String), large: &(axum::Router, String)) -> ((f64, f64), (f64, f64)) {
    // Warm both first.
    interleaved(small, large, "/admin/tenants/t1").await;
    let whole = interleaved(small, large, "/admin/tenants/t1").await;
    let rare = interleaved(small, large, "/admin/tenants/t1?reason=policy_denied").await;
    (whole, rare)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let hash = gatehouse_capability::AdminPasswordHash::hash(PASSWORD).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let series = "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) SELECT x FROM c)";
        let (dir_small, dir_large) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let url = |d: &tempfile::TempDir| format!("sqlite://{}", d.path().join("bench.db").display());
        let small = filled(&url(&dir_small), dir_small.path(), hash.as_str(), SMALL, series).await;
        let large = filled(&url(&dir_large), dir_large.path(), hash.as_str(), LARGE, series).await;
        let (whole, rare) = measure(&small, &large).await;
        report("sqlite", whole, rare);

        let series = "generate_series(1, 1000000) AS g(x)";
        let (db_small, db_large) = (TestDatabase::create(), TestDatabase::create());
        let (pg_small, pg_large) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let small = filled(db_small.url(), pg_small.path(), hash.as_str(), SMALL, series).await;
        let large = filled(db_large.url(), pg_large.path(), hash.as_str(), LARGE, series).await;
        let (whole, rare) = measure(&small, &large).await;
        report("postgres", whole, rare);
    });
}
