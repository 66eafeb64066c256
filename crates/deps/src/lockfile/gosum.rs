//! Go `go.sum`: one `module version hash` line per checksum.
//!
//! A module version appears as up to two lines: `mod v1.2.3 h1:...` (the
//! hash of the module's content) and `mod v1.2.3/go.mod h1:...` (the hash of
//! its `go.mod` alone). Decisions:
//!
//! - A `/go.mod` line names the same module version (the suffix is not part
//!   of it), so a version with both lines is one package.
//! - A version that appears **only** with `/go.mod` is left out. The go
//!   command fetched just its `go.mod` while computing the module graph (a
//!   version minimal version selection passed over, or a module none of whose
//!   packages the build imports); its code was never downloaded, so it cannot
//!   be built into anything. Counting these would flood a scan with versions
//!   that are not in the build (most of a typical go.sum), as osv-scalibr also
//!   judges.
//! - Every version with a content hash is kept, even when go.sum holds more
//!   than one version of a module (it can list more than the final build
//!   list): without `go.mod` and minimal version selection the parser cannot
//!   tell which one the build selected, and over-reporting is the safe side.
//! - Versions are kept exactly as written, with their leading `v`,
//!   `+incompatible` and pseudo-versions (`v0.0.0-20200101000000-abcdef123456`).
//!
//! An empty go.sum (only blank lines) is a module without dependencies and
//! yields no packages. Any line that is not `module version hash` is a
//! `syntax` error with its line number: a go.sum is machine-written, and a
//! line this parser cannot read may hide a dependency.

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::Ecosystem;

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let mut out = Collector::default();
    for (i, line) in src.text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(module), Some(version), Some(hash), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(src.error(ParseErrorCode::Syntax, Some(n), "not a `module version hash` line"));
        };
        if !valid_module(module) {
            return Err(src.error(ParseErrorCode::Syntax, Some(n), "not a Go module path"));
        }
        let (version, go_mod_only) = match version.strip_suffix("/go.mod") {
            Some(v) => (v, true),
            None => (version, false),
        };
        if !valid_version(version) {
            return Err(src.error(ParseErrorCode::Syntax, Some(n), "not a Go module version"));
        }
        if !valid_hash(hash) {
            return Err(src.error(ParseErrorCode::Syntax, Some(n), "not a go.sum hash (h1:...)"));
        }
        if !go_mod_only {
            out.add(Ecosystem::Go, module, version);
        }
    }
    Ok(out.finish(Format::GoSum))
}

/// A module path's characters (golang.org/x/mod/module: letters, digits,
/// `-._~`, `/` between elements; `+` appears in some old paths).
fn valid_module(m: &str) -> bool {
    m.len() <= 1024
        && !m.starts_with('/')
        && !m.ends_with('/')
        && !m.contains("//")
        && m.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b'+'))
}

/// `v` and a semantic version: `v1.2.3`, `v1.2.3-pre.1`, `v2.0.0+incompatible`,
/// `v0.0.0-20200101000000-abcdef123456`.
fn valid_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    rest.len() <= 256
        && rest.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && rest.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
}

/// `h1:` and the base64 of a SHA-256 (44 characters, so a truncated line is
/// caught); a later `hN:` is accepted with any base64 digest.
fn valid_hash(h: &str) -> bool {
    let Some((alg, digest)) = h.split_once(':') else {
        return false;
    };
    let base64 = !digest.is_empty()
        && digest.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    match alg {
        "h1" => base64 && digest.len() == 44 && digest.find('=') == Some(43),
        _ => {
            base64
                && alg.len() >= 2
                && alg.starts_with('h')
                && alg.bytes().skip(1).all(|b| b.is_ascii_digit())
        }
    }
}
