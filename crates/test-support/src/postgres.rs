//! A database of its own per test on a real PostgreSQL server.
//!
//! The server is the machine's (`GATEHOUSE_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; `.ci/run` makes sure it is
//! up). Each [`TestDatabase`] is a fresh database created with `psql` and
//! dropped (forcibly, closing any connection left) when it goes out of
//! scope, so no test ever sees another's rows. A server that cannot be
//! reached fails the test: nothing is skipped.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The administrative URL tests create databases through.
pub fn admin_url() -> String {
    std::env::var("GATEHOUSE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// One test's own database.
pub struct TestDatabase {
    name: String,
    url: String,
}

fn psql(sql: &str) -> Result<(), String> {
    let out = Command::new("psql")
        .args([admin_url().as_str(), "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .output()
        .map_err(|e| format!("psql could not run ({e}); install postgresql-client"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

impl TestDatabase {
    /// Creates a fresh, empty database.
    pub fn create() -> Self {
        let name = format!(
            "gatehouse_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
        );
        psql(&format!("CREATE DATABASE {name}")).unwrap_or_else(|e| {
            panic!(
                "cannot create a test database on {} (is PostgreSQL up? \
                 `pg_ctlcluster --skip-systemctl-redirect 15 main start`): {e}",
                admin_url()
            )
        });
        let admin = admin_url();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Self { name, url }
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Makes the database refuse every connection, closing the open ones
    /// (`false`), as if its server were down for its users; or lets them in
    /// again (`true`).
    pub fn set_reachable(&self, reachable: bool) {
        let name = &self.name;
        psql(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {reachable}")).unwrap();
        if !reachable {
            psql(&format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
                .unwrap();
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}
