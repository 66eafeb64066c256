//! gatehouse configuration and secure startup.
//!
//! Settings use the seed documents' own names (`CODEAPI_*`, `SANDBOX_*`,
//! `LOCAL_MODE`, `CLAMD_*`) and `GATEHOUSE_*` only for what the seeds do not
//! name. A TOML file may set the same keys; the environment wins. Every secret
//! may instead be given as a file through the same name with `_FILE`.
//!
//! [`load`] is a pure function of a [`Source`]: it parses every setting, then
//! validates the combination for the node's role and returns **all** problems
//! at once, so an operator fixes a deployment in one pass. An insecure
//! combination is an error, never a warning: gatehouse fails loudly at start
//! rather than serving traffic quietly (seed: "Fail-fast startup").
//!
//! Architecture invariant: no network, no writes; reads only the files the
//! configuration names.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod callers;
mod config;
mod defaults;
pub mod embedded_files;
mod groups;
pub mod names;
mod problem;
mod reader;
mod role;
mod role_keys;
mod secretish;
mod source;
mod validate;

use std::path::{Path, PathBuf};

pub use config::{
    AuthProvider, Config, ConnectionLimits, EgressLimits, EgressSettings, LogFormat, ScannerSettings,
};
pub use defaults::{DEFAULT_DATA_DIR, DEFAULT_GRANT_MAX_LIFETIME_SECS, DEFAULT_OSV_URL, default_store_url};
pub use problem::Problem;
pub use role::Role;
pub use secretish::Secretish;
pub use source::{MapSource, ProcessSource, Source};

use defaults::{DEFAULT_LISTEN, DEFAULT_PROXY_LISTEN};
use reader::{Reader, parse_addr};

/// The cloud metadata addresses no operator setting may open (the address
/// guard's own list).
pub use gatehouse_core::metadata::METADATA_ADDRESSES;

/// Loads and validates configuration. `file` is the optional TOML file
/// (`--config`, or `GATEHOUSE_CONFIG`).
pub fn load(source: &dyn Source, file: Option<&Path>) -> Result<Config, Vec<Problem>> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, file).as_deref(), names::ALL, &mut p);
    let r = Reader { layered: &layered, source, problems: &mut p };
    let config = r.build();
    match config {
        Some(c) if p.is_empty() => Ok(c),
        _ => Err(p),
    }
}

/// Reads one group of settings with the same rules as [`load`].
fn read_part<T>(source: &dyn Source, part: impl FnOnce(&mut Reader<'_>) -> T) -> Result<T, Vec<Problem>> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, None).as_deref(), names::ALL, &mut p);
    let mut r = Reader { layered: &layered, source, problems: &mut p };
    let value = part(&mut r);
    if p.is_empty() { Ok(value) } else { Err(p) }
}

/// [`EgressSettings`] alone.
pub fn egress_settings(source: &dyn Source) -> Result<EgressSettings, Vec<Problem>> {
    read_part(source, |r| r.egress())
}

/// [`ScannerSettings`] alone.
pub fn scanner_settings(source: &dyn Source) -> Result<ScannerSettings, Vec<Problem>> {
    read_part(source, |r| r.scanner())
}

/// Whether the settings describe the embedded single-machine mode, and the
/// data directory it uses. `gatehouse serve` generates missing key files
/// there before calling [`load`].
pub fn embedded_data_dir(source: &dyn Source, file: Option<&Path>) -> Option<PathBuf> {
    let mut p = Vec::new();
    let layered = source::layer(source, config_file(source, file).as_deref(), names::ALL, &mut p);
    let role = layered.get(names::ROLE).map_or(Some(Role::All), Role::parse)?;
    let listen = parse_addr(layered.get(names::LISTEN).unwrap_or(DEFAULT_LISTEN))?;
    let proxy = parse_addr(layered.get(names::PROXY_LISTEN).unwrap_or(DEFAULT_PROXY_LISTEN))?;
    (role == Role::All && listen.ip().is_loopback() && proxy.ip().is_loopback())
        .then(|| PathBuf::from(layered.get(names::DATA_DIR).unwrap_or(DEFAULT_DATA_DIR)))
}

/// The TOML file: `--config`, else `GATEHOUSE_CONFIG` when set and non-empty.
fn config_file(source: &dyn Source, file: Option<&Path>) -> Option<PathBuf> {
    file.map(Path::to_path_buf)
        .or_else(|| source.var(names::CONFIG_FILE).filter(|v| !v.trim().is_empty()).map(PathBuf::from))
}
