//! `Cargo.lock`, every format Cargo has written:
//!
//! - v1: no `version` line; checksums in a `[metadata]` table;
//! - v2: no `version` line; `checksum` inline in each `[[package]]`;
//! - v3: `version = 3`; v4: `version = 4` (same package shape).
//!
//! Any other `version` is `unsupported_version`: a format this parser has not
//! seen may mean something else by the same keys.
//!
//! Which `[[package]]` entries are packages a scan must check, by `source`:
//!
//! - no `source`: a workspace member or a `path` dependency. Local code, not
//!   a published crate: left out.
//! - `registry+...` / `sparse+...`: a registry crate, kept. Only crates.io
//!   (`registry+https://github.com/rust-lang/crates.io-index` or
//!   `sparse+https://index.crates.io/`) is what OSV's `crates.io` ecosystem
//!   describes. A crate from another registry is kept too, with a warning
//!   (`other_registry`, once per registry): most such registries mirror
//!   crates.io under the same names and versions, so dropping them would hide
//!   real advisories (a silent false negative), while a name that only
//!   collides yields a visible, reviewable false positive.
//! - `git+...`: kept with its `version` and its commit (the source's `#<sha>`).
//!   The commit may differ from the released crate of that version, but the
//!   version is the best key OSV has, and leaving git crates out would let a
//!   vulnerable fork through unseen.
//! - anything else (`path+`, `directory+`, `local-registry+`, unknown kinds):
//!   `path+` is local and left out; other kinds are kept with a warning
//!   (`unknown_source`), on the same reasoning as other registries.

use std::collections::BTreeSet;

use serde::Deserialize;
use toml::Spanned;

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source, toml_tables};
use crate::package::Ecosystem;

/// The two spellings of crates.io's index.
const CRATES_IO: [&str; 2] =
    ["registry+https://github.com/rust-lang/crates.io-index", "sparse+https://index.crates.io/"];

#[derive(Deserialize)]
struct Lockfile {
    version: Option<Spanned<toml::Value>>,
    package: Option<Vec<Spanned<RawPackage>>>,
}

#[derive(Deserialize)]
struct RawPackage {
    name: String,
    version: String,
    source: Option<String>,
}

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let mut out = Collector::default();
    let mut warned = BTreeSet::new();
    // One `[[package]]` at a time: the whole document costs 17x the text.
    let read = toml_tables::read::<Lockfile, RawPackage>(src, |p, at| {
        check_package(src, p, at, &mut out, &mut warned)
    })?;
    check_version(src, read.rest.version.as_ref(), |at| read.rest_doc.original(at))?;
    if let Some(e) = read.refused {
        return Err(e);
    }
    match read.rest.package {
        // `package = [...]` written inline: read beside the rest.
        Some(packages) => {
            for p in &packages {
                check_package(
                    src,
                    p.get_ref(),
                    read.rest_doc.original(p.span().start),
                    &mut out,
                    &mut warned,
                )?;
            }
        }
        None if read.any_package || read.rest.version.is_some() => {}
        None => {
            return Err(src.error(
                ParseErrorCode::Structure,
                None,
                "no `version` and no [[package]] entries",
            ));
        }
    }
    Ok(out.finish(Format::CargoLock))
}

/// The whole document at once, as [`parse`] read it before it read one
/// package at a time: what the tests hold [`parse`] equal to.
#[cfg(test)]
pub(crate) fn parse_whole(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let lock: Lockfile = from_toml(src)?;
    check_version(src, lock.version.as_ref(), |at| at)?;
    let Some(packages) = lock.package else {
        if lock.version.is_some() {
            // `version = 3` and nothing else: no dependencies at all.
            return Ok(Collector::default().finish(Format::CargoLock));
        }
        return Err(src.error(ParseErrorCode::Structure, None, "no `version` and no [[package]] entries"));
    };
    let mut out = Collector::default();
    let mut warned = BTreeSet::new();
    for p in &packages {
        check_package(src, p.get_ref(), p.span().start, &mut out, &mut warned)?;
    }
    Ok(out.finish(Format::CargoLock))
}

/// The `version` line, if any: v3 and v4 are read (v1 and v2 have none).
/// `original` maps its span to the lockfile's offsets.
fn check_version(
    src: &Source<'_>,
    version: Option<&Spanned<toml::Value>>,
    original: impl Fn(usize) -> usize,
) -> Result<(), ParseError> {
    let Some(v) = version else { return Ok(()) };
    match v.get_ref() {
        toml::Value::Integer(3 | 4) => Ok(()),
        toml::Value::Integer(n) => Err(src.error(
            ParseErrorCode::UnsupportedVersion,
            Some(src.line_at(original(v.span().start))),
            format!("Cargo.lock version {n} is not one this parser reads (v1-v4)"),
        )),
        _ => Err(src.error(
            ParseErrorCode::Structure,
            Some(src.line_at(original(v.span().start))),
            "`version` is not an integer",
        )),
    }
}

/// One `[[package]]` (its header at lockfile offset `start`): a crate to
/// check goes to `out`, local code is left out, other sources warn once.
fn check_package(
    src: &Source<'_>,
    p: &RawPackage,
    start: usize,
    out: &mut Collector,
    warned: &mut BTreeSet<String>,
) -> Result<(), ParseError> {
    // Counted only when a message needs it: counting for every package
    // walked the text from its start each time (quadratic: minutes for a
    // 25 MiB Cargo.lock).
    let line = || src.line_at(start);
    if !valid_name(&p.name) {
        return Err(src.error(ParseErrorCode::Structure, Some(line()), "package `name` is not a crate name"));
    }
    if !valid_version(&p.version) {
        return Err(src.error(ParseErrorCode::Structure, Some(line()), "package `version` is not a version"));
    }
    let Some(source) = &p.source else {
        return Ok(()); // workspace member or path dependency
    };
    if source.starts_with("registry+") || source.starts_with("sparse+") {
        if !CRATES_IO.contains(&source.as_str()) && warned.insert(source.clone()) {
            out.warn(
                "other_registry",
                Some(line()),
                format!(
                    "crates from a registry other than crates.io ({}) are matched against crates.io advisories by name",
                    host_of(source)
                ),
            );
        }
    } else if source.starts_with("git+") {
        // Kept: see the module documentation.
    } else if source.starts_with("path+") {
        return Ok(());
    } else if warned.insert(source.clone()) {
        out.warn(
            "unknown_source",
            Some(line()),
            "a package source of an unknown kind; its crates are matched against crates.io advisories by name",
        );
    }
    let commit = source.strip_prefix("git+").and_then(crate::package::commit_in);
    out.add_git(Ecosystem::CratesIo, &p.name, &p.version, commit);
    Ok(())
}

/// Deserializes the whole TOML document, telling malformed TOML (`syntax`)
/// from a wrong shape (`structure`): the tests' reference for [`toml_tables`].
#[cfg(test)]
pub(super) fn from_toml<T: serde::de::DeserializeOwned>(src: &Source<'_>) -> Result<T, ParseError> {
    toml::from_str::<T>(src.text).map_err(|e| match toml::from_str::<toml::Table>(src.text) {
        Err(syntax) => src.toml_error(&syntax, ParseErrorCode::Syntax),
        Ok(_) => {
            let mut err = src.toml_error(&e, ParseErrorCode::Structure);
            // Serde names the missing field (ours, not the file's): keep it.
            if let Some(field) = e.message().strip_prefix("missing field `").and_then(|r| r.split('`').next())
            {
                err.message = format!("missing field `{field}`");
            }
            err
        }
    })
}

/// A crate name as Cargo accepts it (ASCII letters, digits, `-`, `_`).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A semver version: starts with a digit, then digits, letters, `.`, `-`, `+`.
fn valid_version(v: &str) -> bool {
    v.len() <= 256
        && v.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
}

/// The host of a source URL, for messages: no scheme, user info, path or query.
fn host_of(source: &str) -> String {
    let after_scheme = source.split_once("://").map_or(source, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    host.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')).take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> Result<Parsed, ParseError> {
        parse(&Source { file: "Cargo.lock", text })
    }

    #[test]
    fn spans_give_lines() {
        let e = run("version = 3\n\n[[package]]\nname = \"a\"\n").unwrap_err();
        assert_eq!(e.code, ParseErrorCode::Structure);
        assert!(e.line.is_some(), "{e}");
        let e = run("version = 3\n\n[[package]]\nname = \"a\"\nversion = \"1.0.0\nsource = 1\n").unwrap_err();
        assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(5)), "{e}");
        let e = run("version = 3\n\n[[package]]\nname = \"a\"\nversion = 7\n").unwrap_err();
        assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(5)), "{e}");
        let e = run("version = 3\n\n[[package]]\nname = \"a b\"\nversion = \"1.0.0\"\n").unwrap_err();
        assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(3)), "{e}");
    }

    #[test]
    fn host_of_strips_everything_but_the_host() {
        assert_eq!(host_of("registry+https://user:tok@my.example:8080/index?x#y"), "my.example:8080");
        assert_eq!(host_of("sparse+https://cargo.example/api/"), "cargo.example");
        assert_eq!(host_of("weird"), "weird");
    }
}
