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

/// The embedded database's URL: the SQLite file [`embedded_files::DATABASE`]
/// in `data_dir`, as `sqlite://PATH`.
///
/// This is the one place that knows where the embedded database lives.
/// Configuration owns it, not the store, because the file's name and place
/// are the data directory's layout, which [`embedded_files`] defines here;
/// and neither crate depends on the other (configuration would pull in the
/// SQL drivers, the store the parsing of settings), so the store cannot be
/// asked. The store takes the URL it is given (`StoreConfig::new`), so
/// [`Config::store_url`](crate::Config::store_url) and the command line,
/// which call this, open the same file. The URL is one the validation of
/// `GATEHOUSE_DATABASE_URL` accepts (`sqlite:`).
pub fn default_store_url(data_dir: &Path) -> Secretish {
    Secretish(format!("sqlite://{}", data_dir.join(embedded_files::DATABASE).display()))
}
