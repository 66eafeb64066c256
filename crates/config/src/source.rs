//! Where settings come from: an environment map, an optional TOML file, and
//! files named by `*_FILE` variables.
//!
//! Loading is a pure function of a [`Source`], so tests build a map instead of
//! mutating the process environment (which `clippy.toml` forbids).

use std::collections::BTreeMap;
use std::path::Path;

use crate::problem::Problem;

/// A view of the environment and the file system as configuration sees them.
pub trait Source {
    /// The variable's value, if set.
    fn var(&self, name: &str) -> Option<String>;
    /// All variable names (to spot misspelled `GATEHOUSE_*` settings).
    fn var_names(&self) -> Vec<String>;
    /// A file's content.
    fn read_file(&self, path: &Path) -> std::io::Result<String>;
    /// A file's permission bits, where the file system has them.
    fn file_mode(&self, path: &Path) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).ok().map(|m| m.permissions().mode())
    }
}

/// The real process environment and file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessSource;

impl Source for ProcessSource {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn var_names(&self) -> Vec<String> {
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect()
    }
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// An explicit map of variables over the real file system (tests, `config check`).
#[derive(Clone, Default)]
pub struct MapSource {
    vars: BTreeMap<String, String>,
}

/// Names only: the values are raw settings, secrets among them.
impl std::fmt::Debug for MapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapSource").field("names", &self.vars.keys().collect::<Vec<_>>()).finish()
    }
}

impl MapSource {
    /// An empty environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one variable.
    #[must_use]
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.vars.insert(name.to_owned(), value.into());
        self
    }

    /// Leaves one variable unset.
    #[must_use]
    pub fn without(mut self, name: &str) -> Self {
        self.vars.remove(name);
        self
    }

    /// Sets one variable in place.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.vars.insert(name.to_owned(), value.into());
    }
}

impl Source for MapSource {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }
    fn var_names(&self) -> Vec<String> {
        self.vars.keys().cloned().collect()
    }
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Settings merged from a TOML file and the environment (the environment wins).
#[derive(Clone, Default)]
pub(crate) struct Layered {
    pub(crate) values: BTreeMap<String, String>,
}

/// Names only: the values are raw settings, secrets among them.
impl std::fmt::Debug for Layered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Layered").field("names", &self.values.keys().collect::<Vec<_>>()).finish()
    }
}

impl Layered {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str).filter(|v| !v.trim().is_empty())
    }
}

/// Reads the TOML file (a flat table using the same names as the
/// environment) and overlays the environment.
pub(crate) fn layer(
    source: &dyn Source,
    file: Option<&Path>,
    known: &[&str],
    problems: &mut Vec<Problem>,
) -> Layered {
    let mut out = Layered::default();
    if let Some(path) = file {
        match source.read_file(path) {
            Err(e) => problems.push(Problem::new(
                "--config",
                "unreadable_file",
                format!("cannot read the configuration file {}: {}", path.display(), e.kind()),
            )),
            Ok(text) => match text.parse::<toml::Table>() {
                Err(e) => problems.push(Problem::new(
                    "--config",
                    "invalid_file",
                    format!("{} is not valid TOML: {}", path.display(), e.message()),
                )),
                Ok(table) => {
                    for (k, v) in table {
                        let value = match v {
                            toml::Value::String(s) => s,
                            toml::Value::Integer(i) => i.to_string(),
                            toml::Value::Boolean(b) => b.to_string(),
                            toml::Value::Array(items) => items
                                .iter()
                                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                                .collect::<Vec<_>>()
                                .join(","),
                            _ => {
                                problems.push(Problem::new_dynamic(
                                    k.clone(),
                                    "invalid_value",
                                    "must be a string, integer, boolean or array of strings".into(),
                                ));
                                continue;
                            }
                        };
                        if !known.contains(&k.as_str()) {
                            problems.push(Problem::new_dynamic(
                                k.clone(),
                                "unknown_setting",
                                format!("{} names a setting gatehouse does not have", path.display()),
                            ));
                            continue;
                        }
                        out.values.insert(k, value);
                    }
                }
            },
        }
    }
    for name in known {
        if let Some(v) = source.var(name) {
            out.values.insert((*name).to_owned(), v);
        }
    }
    // A misspelled GATEHOUSE_ setting would silently fall back to a default;
    // refuse it instead. CODEAPI_/SANDBOX_ names are shared with the platform's
    // own components, so unknown ones there are not ours to judge.
    for name in source.var_names() {
        if name.starts_with("GATEHOUSE_") && !known.contains(&name.as_str()) {
            problems.push(Problem::new_dynamic(
                name,
                "unknown_setting",
                "gatehouse has no setting of this name (misspelled?)".into(),
            ));
        }
    }
    out
}
