//! What a setting left unset means, and where the embedded mode keeps its database.

use std::path::Path;

use crate::embedded_files;
use crate::secretish::Secretish;

/// `GATEHOUSE_GRANT_MAX_LIFETIME_SECS`'s default: a day.
pub const DEFAULT_GRANT_MAX_LIFETIME_SECS: i64 = 86_400;

/// Where API dependency scans ask OSV by default.
pub const DEFAULT_OSV_URL: &str = "https://api.osv.dev";

/// The HTTP API address when `GATEHOUSE_LISTEN` is unset.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
/// The forward-proxy address when `GATEHOUSE_PROXY_LISTEN` is unset.
pub(crate) const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:8701";
/// The data directory when `GATEHOUSE_DATA_DIR` is unset.
pub const DEFAULT_DATA_DIR: &str = "./gatehouse-data";

/// The SQLite file in `data_dir`.
pub fn default_store_url(data_dir: &Path) -> Secretish {
    Secretish(format!("sqlite://{}", data_dir.join(embedded_files::DATABASE).display()))
}
