//! `poetry.lock`: lock-version 1.x (Poetry 1.0-1.4, hashes in a
//! `[metadata.files]` table) and 2.x (Poetry 1.5 and later, `files` inline per
//! package; 2.1 adds `groups` and per-group markers). Every `[[package]]` is
//! a name and a version; names are PEP 503-normalized by [`Package::new`].
//! Another major lock-version is `unsupported_version`.
//!
//! By `[package.source] type`:
//!
//! - none: PyPI. Kept.
//! - `legacy` (another package index) and `url` (a remote archive): kept; the
//!   name is matched against PyPI advisories, which is what a mirror or a
//!   dependency-confusion look-alike needs.
//! - `git`: kept with its `version` and its commit (`resolved_reference`). A
//!   git checkout is not the PyPI release of that version: matching by
//!   version can be wrong both ways (a fixed commit still carrying the old
//!   version number, or an unfixed fork with a newer one). Leaving it out is
//!   always wrong in the silent direction, so it is kept: a false positive is
//!   visible and reviewable, a dropped package is not.
//! - `directory` and `file`: the project itself or a local path. Not from an
//!   index: left out.
//! - anything else: kept, with an `unknown_source` warning.
//!
//! [`Package::new`]: crate::package::Package::new

use serde::Deserialize;
use toml::Spanned;

use super::cargo::from_toml;
use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::{Ecosystem, is_commit};

#[derive(Deserialize)]
struct Lockfile {
    package: Option<Vec<Spanned<RawPackage>>>,
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(rename = "lock-version")]
    lock_version: Option<Spanned<String>>,
}

#[derive(Deserialize)]
struct RawPackage {
    name: String,
    version: String,
    source: Option<PackageSource>,
}

#[derive(Deserialize)]
struct PackageSource {
    #[serde(rename = "type")]
    kind: Option<String>,
    resolved_reference: Option<String>,
}

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let lock: Lockfile = from_toml(src)?;
    if let Some(v) = lock.metadata.as_ref().and_then(|m| m.lock_version.as_ref()) {
        let major = v.get_ref().split('.').next().unwrap_or("");
        let minor_ok =
            v.get_ref().split('.').skip(1).all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !matches!(major, "1" | "2") || !minor_ok {
            return Err(src.error(
                ParseErrorCode::UnsupportedVersion,
                Some(src.line_at(v.span().start)),
                "a poetry.lock lock-version this parser does not read (1.x and 2.x)",
            ));
        }
    }
    let Some(packages) = lock.package else {
        if lock.metadata.is_some() {
            // `[metadata]` alone (or `package = []`): a project with no dependencies.
            return Ok(Collector::default().finish(Format::Poetry));
        }
        return Err(src.error(ParseErrorCode::Structure, None, "no [[package]] entries and no [metadata]"));
    };
    let mut out = Collector::default();
    for p in &packages {
        // Counted only when a message needs it (for every package, it was quadratic).
        let start = p.span().start;
        let line = || src.line_at(start);
        let p = p.get_ref();
        if !valid_name(&p.name) {
            return Err(src.error(
                ParseErrorCode::Structure,
                Some(line()),
                "package `name` is not a package name",
            ));
        }
        if !valid_version(&p.version) {
            return Err(src.error(
                ParseErrorCode::Structure,
                Some(line()),
                "package `version` is not a version",
            ));
        }
        match p.source.as_ref().map(|s| s.kind.as_deref()) {
            None | Some(Some("legacy" | "url" | "git")) => {}
            Some(Some("directory" | "file")) => continue,
            Some(_) => out.warn(
                "unknown_source",
                Some(line()),
                format!("{} has a source of an unknown type; it is matched against PyPI advisories", p.name),
            ),
        }
        let commit = p.source.as_ref().and_then(|s| s.resolved_reference.as_deref()).filter(|c| is_commit(c));
        out.add_git(Ecosystem::PyPI, &p.name, &p.version, commit);
    }
    Ok(out.finish(Format::Poetry))
}

/// A distribution name as PEP 508 allows it: letters, digits, `.`, `_`, `-`,
/// starting and ending with a letter or digit.
fn valid_name(name: &str) -> bool {
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    name.len() <= 256
        && edge(name.bytes().next())
        && edge(name.bytes().last())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A PEP 440 version's characters (Poetry writes them normalized).
fn valid_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 256
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'!'))
}
