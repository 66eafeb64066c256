//! The store's errors: each a stable code.

use gatehouse_core::Reason;

/// Why a store operation failed. Every variant has a stable [`code`](Self::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached, timed out, or failed: callers refuse.
    #[error("store_unavailable: the store cannot answer")]
    Unavailable,
    /// The database is out of space (SQLite `SQLITE_FULL`, PostgreSQL class 53).
    #[error("store_full: the store is out of space")]
    Full,
    /// The URL is neither `sqlite://...` nor `postgres://...`.
    #[error("store_url_invalid: not a sqlite:// or postgres:// URL")]
    InvalidUrl,
    /// The database was migrated by a newer gatehouse.
    #[error("store_schema_newer: the schema has migrations this binary does not know ({0:?})")]
    SchemaNewer(Vec<i64>),
    /// The database needs `gatehouse migrate`.
    #[error("store_schema_behind: the schema needs migrating")]
    SchemaBehind,
    /// A migration failed; it was rolled back.
    #[error("store_migration_failed: a migration failed and was rolled back")]
    MigrationFailed,
    /// No such row.
    #[error("not_found")]
    NotFound,
    /// The id is taken.
    #[error("conflict: the id is taken")]
    Conflict,
    /// The tenant's kill switch is engaged.
    #[error("tenant_kill_switch: the tenant's kill switch is engaged")]
    KillSwitch,
    /// The run is not live.
    #[error("run_not_live")]
    RunNotLive,
    /// A refusal with its own reason (a lease for the wrong host, ...).
    #[error("{}", .0.as_str())]
    Refused(Reason),
    /// A stored row does not read back (edited by hand, or a bug): refuse.
    #[error("store_corrupt: a stored row is unreadable")]
    Corrupt,
}

impl StoreError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable => "store_unavailable",
            Self::Full => "store_full",
            Self::InvalidUrl => "store_url_invalid",
            Self::SchemaNewer(_) => "store_schema_newer",
            Self::SchemaBehind => "store_schema_behind",
            Self::MigrationFailed => "store_migration_failed",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::KillSwitch => "tenant_kill_switch",
            Self::RunNotLive => "run_not_live",
            Self::Refused(reason) => reason.as_str(),
            Self::Corrupt => "store_corrupt",
        }
    }

    /// The refusal reason a caller answers with, for errors that are refusals
    /// or outages.
    pub fn reason(&self) -> Reason {
        match self {
            Self::KillSwitch => Reason::TenantKillSwitch,
            Self::RunNotLive => Reason::RunNotLive,
            Self::Refused(reason) => *reason,
            Self::Full => Reason::StoreFull,
            _ => Reason::StoreUnavailable,
        }
    }

    /// Classifies a driver error. Its text may name the server or the
    /// statement, so only its kind is logged.
    pub(crate) fn from_sqlx(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            let code = db.code().unwrap_or_default();
            // SQLite's primary result codes SQLITE_FULL (13) and extended
            // variants; PostgreSQL's class 53 (insufficient resources).
            if code == "13" || code.starts_with("53") {
                tracing::error!(code = %code, "store full");
                return Self::Full;
            }
            if db.is_unique_violation() {
                return Self::Conflict;
            }
            tracing::warn!(code = %code, "store error");
            return Self::Unavailable;
        }
        if matches!(
            e,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::ColumnNotFound(_)
        ) {
            tracing::error!("store row unreadable");
            return Self::Corrupt;
        }
        tracing::warn!(kind = error_kind(&e), "store unavailable");
        Self::Unavailable
    }
}

fn error_kind(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::Io(_) => "io",
        sqlx::Error::Tls(_) => "tls",
        sqlx::Error::PoolTimedOut => "pool_timed_out",
        sqlx::Error::PoolClosed => "pool_closed",
        sqlx::Error::Protocol(_) => "protocol",
        sqlx::Error::Configuration(_) => "configuration",
        _ => "other",
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::from_sqlx(e)
    }
}
