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

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source, toml_tables};
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
    let mut out = Collector::default();
    // One `[[package]]` at a time: the whole document costs 24x the text.
    let read = toml_tables::read::<Lockfile, RawPackage>(src, |p, at| check_package(src, p, at, &mut out))?;
    check_version(src, read.rest.metadata.as_ref(), |at| read.rest_doc.original(at))?;
    if let Some(e) = read.refused {
        return Err(e);
    }
    match read.rest.package {
        // `package = []` (or inline tables): read beside the rest.
        Some(packages) => {
            for p in &packages {
                check_package(src, p.get_ref(), read.rest_doc.original(p.span().start), &mut out)?;
            }
        }
        // `[metadata]` alone: a project with no dependencies.
        None if read.any_package || read.rest.metadata.is_some() => {}
        None => {
            return Err(src.error(
                ParseErrorCode::Structure,
                None,
                "no [[package]] entries and no [metadata]",
            ));
        }
    }
    Ok(out.finish(Format::Poetry))
}

/// The whole document at once, as [`parse`] read it before it read one
/// package at a time: what the tests hold [`parse`] equal to.
#[cfg(test)]
pub(crate) fn parse_whole(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let lock: Lockfile = super::cargo::from_toml(src)?;
    check_version(src, lock.metadata.as_ref(), |at| at)?;
    let Some(packages) = lock.package else {
        if lock.metadata.is_some() {
            // `[metadata]` alone (or `package = []`): a project with no dependencies.
            return Ok(Collector::default().finish(Format::Poetry));
        }
        return Err(src.error(ParseErrorCode::Structure, None, "no [[package]] entries and no [metadata]"));
    };
    let mut out = Collector::default();
    for p in &packages {
        check_package(src, p.get_ref(), p.span().start, &mut out)?;
    }
    Ok(out.finish(Format::Poetry))
}

/// `[metadata] lock-version`, if any: 1.x and 2.x are read. `original` maps
/// its span to the lockfile's offsets.
fn check_version(
    src: &Source<'_>,
    metadata: Option<&Metadata>,
    original: impl Fn(usize) -> usize,
) -> Result<(), ParseError> {
    let Some(v) = metadata.and_then(|m| m.lock_version.as_ref()) else { return Ok(()) };
    let major = v.get_ref().split('.').next().unwrap_or("");
    let minor_ok =
        v.get_ref().split('.').skip(1).all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !matches!(major, "1" | "2") || !minor_ok {
        return Err(src.error(
            ParseErrorCode::UnsupportedVersion,
            Some(src.line_at(original(v.span().start))),
            "a poetry.lock lock-version this parser does not read (1.x and 2.x)",
        ));
    }
    Ok(())
}

/// One `[[package]]` (its header at lockfile offset `start`): kept in `out`
/// unless its source is local.
fn check_package(
    src: &Source<'_>,
    p: &RawPackage,
    start: usize,
    out: &mut Collector,
) -> Result<(), ParseError> {
    // Counted only when a message needs it (for every package, it was quadratic).
    let line = || src.line_at(start);
    if !valid_name(&p.name) {
        return Err(src.error(
            ParseErrorCode::Structure,
            Some(line()),
            "package `name` is not a package name",
        ));
    }
    if !valid_version(&p.version) {
        return Err(src.error(ParseErrorCode::Structure, Some(line()), "package `version` is not a version"));
    }
    match p.source.as_ref().map(|s| s.kind.as_deref()) {
        None | Some(Some("legacy" | "url" | "git")) => {}
        Some(Some("directory" | "file")) => return Ok(()),
        Some(_) => out.warn(
            "unknown_source",
            Some(line()),
            format!("{} has a source of an unknown type; it is matched against PyPI advisories", p.name),
        ),
    }
    let commit = p.source.as_ref().and_then(|s| s.resolved_reference.as_deref()).filter(|c| is_commit(c));
    out.add_git(Ecosystem::PyPI, &p.name, &p.version, commit);
    Ok(())
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
