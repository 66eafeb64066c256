//! `pnpm-lock.yaml`, lockfileVersion 5.x, 6.x and 9.x, and the YAML reading
//! shared with yarn Berry ([`from_yaml`]).
//!
//! Every resolved package is a key of `packages`; the key syntax differs:
//!
//! | version | registry key                                   | peers                          |
//! |---------|------------------------------------------------|--------------------------------|
//! | 5.x     | `/name/1.0.0`, `/@scope/name/1.0.0`            | `/foo/1.0.0_react@18.0.0`      |
//! | 6.x     | `/name@1.0.0`, `/@scope/name@1.0.0`            | `/foo@1.0.0(react@18.0.0)`     |
//! | 9.x     | `name@1.0.0`, `@scope/name@1.0.0`              | only in `snapshots`, not read  |
//!
//! Peer suffixes are not part of the version and are cut. An npm alias is
//! keyed under the real package in every version (`string-width@4.2.3`;
//! only the importers and snapshots mention the alias), so the key's name is
//! the real name. A key for a registry other than the default carries the
//! host first (`registry.example/foo/1.1.0`); the host is dropped. The
//! entry's own `name` and `version` fields, which pnpm writes for packages
//! not from a registry, win over the key.
//!
//! Left out: local packages (`resolution: {directory: ...}`, `file:`/`link:`
//! keys or tarballs) and `runtime:` entries (Node.js itself). Git
//! dependencies (`resolution: {commit, repo}` or a code host's commit
//! tarball such as `codeload.github.com`) are packages under the entry's
//! `version` (their `package.json`'s) with their commit. An http(s) tarball
//! from elsewhere (a private registry) is kept under its `name` and
//! `version`.
//!
//! A key that names no package and version (and whose entry does not either)
//! fails the parse with its line: no partial list.
//!
//! pnpm 11 and later may write two YAML documents: an "env" document first
//! (`packageManagerDependencies`, `configDependencies`: pnpm itself and its
//! config dependencies, real npm packages) and the project's lockfile second,
//! both with a `lockfileVersion`. Every document is read and the packages of
//! all are listed, as pnpm's documentation advises for vulnerability scanning;
//! reading only the first would report the project as dependency-free.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::npm::{OrderedMap, is_git_source, line_of, reported_version, split_name};
use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source, first_clause};
use crate::package::{Ecosystem, commit_in, is_commit};

/// Deserializes a YAML lockfile with resource limits, mapping errors to
/// [`ParseError`]s (`syntax` for malformed YAML and refused documents,
/// `structure` for well-formed YAML of the wrong shape).
///
/// serde-saphyr streams the document into the target types (no tree is
/// built) and enforces a budget while parsing. Lockfiles use neither
/// anchors nor deep nesting, so the limits are tight there and loose
/// elsewhere:
/// - nesting: 64 levels (serde-saphyr's default; lockfiles use about 5);
/// - alias replay: at most 100,000 replayed events in all, which is what
///   stops a billion-laughs document early;
/// - nodes and events: at least the defaults (250,000 and 1,000,000), raised
///   with the input's length so a large real lockfile (each node takes at
///   least a byte of input) is never refused for its size.
pub(super) fn from_yaml<T: DeserializeOwned>(src: &Source<'_>) -> Result<T, ParseError> {
    serde_saphyr::from_str_with_options(src.text, yaml_options(src, 1)).map_err(|e| yaml_error(src, &e))
}

/// Like [`from_yaml`], for a stream of up to 8 documents; empty documents are skipped.
fn from_yaml_documents<T: DeserializeOwned>(src: &Source<'_>) -> Result<Vec<T>, ParseError> {
    serde_saphyr::from_multiple_with_options(src.text, yaml_options(src, 8)).map_err(|e| yaml_error(src, &e))
}

fn yaml_options(src: &Source<'_>, max_documents: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = budget.max_nodes.max(src.text.len());
    budget.max_events = budget.max_events.max(src.text.len().saturating_mul(2));
    budget.max_documents = max_documents;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = 100_000;
    options.with_snippet = false;
    options
}

fn yaml_error(src: &Source<'_>, e: &serde_saphyr::Error) -> ParseError {
    use serde_saphyr::Error as E;
    let mut inner = e;
    while let E::WithSnippet { error, .. } | E::AliasError { error, .. } = inner {
        inner = error;
    }
    let line = e.location().map(|l| l.line()).filter(|&l| l > 0).and_then(|l| usize::try_from(l).ok());
    let describe = || {
        let text = inner.to_string();
        let text = text.split(" at line ").next().unwrap_or("");
        let text: String = first_clause(text).chars().take(120).collect();
        text
    };
    let (code, message) = match inner {
        E::Budget { breach, .. } => {
            (ParseErrorCode::Syntax, format!("YAML refused: over the parser's limits ({breach:?})"))
        }
        E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::AliasReplayCounterOverflow { .. } => {
            (ParseErrorCode::Syntax, "YAML refused: alias expansion over the parser's limits".to_owned())
        }
        E::DuplicateMappingKey { .. } => {
            (ParseErrorCode::Syntax, "invalid YAML: a mapping repeats a key".to_owned())
        }
        E::Unexpected { .. }
        | E::Message { .. }
        | E::SerdeInvalidType { .. }
        | E::SerdeInvalidValue { .. }
        | E::SerdeInvalidLength { .. }
        | E::SerdeUnknownVariant { .. }
        | E::SerdeUnknownField { .. }
        | E::SerdeMissingField { .. }
        | E::NullIntoString { .. }
        | E::InvalidScalar { .. }
        | E::TaggedScalarCannotDeserializeIntoString { .. }
        | E::BytesNotSupportedMissingBinaryTag { .. }
        | E::UnexpectedValueForUnit { .. }
        | E::ExpectedEmptyMappingForUnitStruct { .. } => {
            (ParseErrorCode::Structure, format!("unexpected YAML structure: {}", describe()))
        }
        _ => (ParseErrorCode::Syntax, format!("invalid YAML: {}", describe())),
    };
    src.error(code, line, message)
}

/// The line of the `lockfileVersion: <version>` line (quoted or not).
fn version_line_of(text: &str, version: &str) -> Option<usize> {
    let found = text.lines().position(|l| {
        l.strip_prefix("lockfileVersion:").is_some_and(|v| v.trim().trim_matches(['\'', '"']) == version)
    });
    found.map(|i| i + 1)
}

/// The key syntax of a lockfile version.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dialect {
    V5,
    V6,
    V9,
}

#[derive(Deserialize)]
struct Header {
    #[serde(rename = "lockfileVersion")]
    lockfile_version: Option<String>,
}

#[derive(Deserialize)]
struct Lockfile {
    packages: Option<OrderedMap<Option<Package>>>,
}

#[derive(Deserialize)]
struct Package {
    name: Option<String>,
    version: Option<String>,
    resolution: Option<Resolution>,
}

static NO_RESOLUTION: Resolution =
    Resolution { tarball: None, directory: None, commit: None, repo: None, kind: None };

#[derive(Deserialize)]
struct Resolution {
    tarball: Option<String>,
    directory: Option<String>,
    commit: Option<String>,
    repo: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let version_line = line_of(src.text, "lockfileVersion:");
    let headers: Vec<Header> = from_yaml_documents(src)?;
    if headers.is_empty() {
        return Err(src.error(ParseErrorCode::Structure, version_line, "no lockfileVersion"));
    }
    let mut dialects = Vec::with_capacity(headers.len());
    for header in headers {
        let Some(version) = header.lockfile_version else {
            return Err(src.error(ParseErrorCode::Structure, version_line, "no lockfileVersion"));
        };
        let major = version.split(['.', '-']).next().unwrap_or("");
        dialects.push(match major {
            "5" => Dialect::V5,
            "6" => Dialect::V6,
            "9" => Dialect::V9,
            _ => {
                let line = version_line_of(src.text, &version).or(version_line);
                return Err(src.error(
                    ParseErrorCode::UnsupportedVersion,
                    line,
                    "lockfileVersion is not 5.x, 6.x or 9.x",
                ));
            }
        });
    }
    let documents: Vec<Lockfile> = from_yaml_documents(src)?;
    if documents.len() != dialects.len() {
        return Err(src.error(ParseErrorCode::Structure, None, "documents changed between readings"));
    }
    let mut out = Collector::default();
    for (dialect, lock) in dialects.into_iter().zip(&documents) {
        // No `packages`: a project (or env document) without dependencies.
        let Some(packages) = &lock.packages else { continue };
        for (key, entry) in &packages.0 {
            match classify(key, entry.as_ref(), dialect) {
                Kind::Registry(name, version) => out.add(Ecosystem::Npm, name, reported_version(version)),
                Kind::Local => {}
                Kind::Git(name, version, commit) => {
                    out.add_git(Ecosystem::Npm, name, reported_version(version), commit);
                }
                Kind::Unknown => {
                    return Err(src.error(
                        ParseErrorCode::Structure,
                        line_of(src.text, key),
                        "a packages key names no package and version",
                    ));
                }
            }
        }
    }
    Ok(out.finish(Format::Pnpm))
}

enum Kind<'a> {
    Registry(&'a str, &'a str),
    Local,
    /// Name, version (possibly empty) and commit.
    Git(&'a str, &'a str, Option<&'a str>),
    Unknown,
}

fn classify<'a>(key: &'a str, entry: Option<&'a Package>, dialect: Dialect) -> Kind<'a> {
    let from_key = parse_key(key, dialect);
    let name = entry.and_then(|e| e.name.as_deref()).or(from_key.map(|(n, _)| n));
    let version = entry.and_then(|e| e.version.as_deref()).or(from_key.map(|(_, v)| v));
    let res = entry.and_then(|e| e.resolution.as_ref()).unwrap_or(&NO_RESOLUTION);
    let tarball = res.tarball.as_deref().unwrap_or("");
    let key_spec = from_key.map_or("", |(_, v)| v);
    let local = res.directory.is_some()
        || res.kind.as_deref() == Some("directory")
        || tarball.starts_with("file:")
        || ["file:", "link:"].iter().any(|p| key.starts_with(p) || key_spec.starts_with(p));
    // `node@runtime:22.0.0` (pnpm 10) is the Node.js runtime itself, not an npm package.
    if local || key_spec.starts_with("runtime:") {
        return Kind::Local;
    }
    let git = res.commit.is_some()
        || res.repo.is_some()
        || res.kind.as_deref() == Some("git")
        || is_git_source(tarball)
        || is_git_source(key_spec)
        || (host_prefixed(key).is_some() && is_git_source(&format!("https://{key}")));
    if git {
        // `github.com/user/repo/<sha>` keys end in the commit.
        let key_commit = host_prefixed(key).and_then(|_| key.rsplit('/').next()).filter(|c| is_commit(c));
        let commit = res
            .commit
            .as_deref()
            .filter(|c| is_commit(c))
            .or_else(|| commit_in(tarball))
            .or_else(|| commit_in(key_spec))
            .or(key_commit);
        // `name@<git URL>` keys (6.x, 9.x) name the package; a key that is a
        // repository path (`github.com/user/repo/<sha>`) does not, and then
        // only the entry's own `name` does.
        let key_name =
            from_key.map(|(n, _)| n).filter(|_| is_git_source(key_spec) || key_spec.starts_with("http"));
        return match entry.and_then(|e| e.name.as_deref()).or(key_name) {
            Some(name) if !name.is_empty() => {
                Kind::Git(name, entry.and_then(|e| e.version.as_deref()).unwrap_or(""), commit)
            }
            _ => Kind::Unknown,
        };
    }
    match (name, version) {
        (Some(name), Some(version)) if !name.is_empty() => Kind::Registry(name, version),
        _ => Kind::Unknown,
    }
}

/// Splits a key that starts with a host name (`registry.example/foo/1.0.0`,
/// `github.com/user/repo/sha`) into the host and the rest.
fn host_prefixed(key: &str) -> Option<(&str, &str)> {
    let (host, rest) = key.split_once('/')?;
    (host.contains('.') && !host.contains(['@', ':'])).then_some((host, rest))
}

/// The name and version (peer suffix cut) a `packages` key names, if any.
fn parse_key(key: &str, dialect: Dialect) -> Option<(&str, &str)> {
    let path = match key.strip_prefix('/') {
        Some(p) => p,
        // A registry other than the default: `host/name/1.0.0` or `host/name@1.0.0`.
        None => host_prefixed(key).map_or(key, |(_, rest)| rest),
    };
    match dialect {
        Dialect::V5 => {
            let scope_end = if path.starts_with('@') { path.find('/')? + 1 } else { 0 };
            let slash = path.get(scope_end..)?.find('/')? + scope_end;
            let (name, rest) = (path.get(..slash)?, path.get(slash + 1..)?);
            let version = rest.split('_').next().unwrap_or(rest);
            (!name.is_empty() && !version.is_empty() && !version.contains('/')).then_some((name, version))
        }
        Dialect::V6 | Dialect::V9 => {
            let base = path.split('(').next().unwrap_or(path);
            let (name, version) = split_name(base)?;
            (!version.is_empty()).then_some((name, version))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        use Dialect::*;
        type Case<'a> = (&'a str, Dialect, Option<(&'a str, &'a str)>);
        let cases: [Case<'_>; 16] = [
            ("/foo/1.0.0", V5, Some(("foo", "1.0.0"))),
            ("/@s/foo/1.0.0", V5, Some(("@s/foo", "1.0.0"))),
            ("/foo/1.0.0_react@18.0.0", V5, Some(("foo", "1.0.0"))),
            ("/foo/1.4.0_@types+babel__core@7.1.14", V5, Some(("foo", "1.4.0"))),
            ("/string_decoder/1.1.1", V5, Some(("string_decoder", "1.1.1"))),
            ("registry.npm.invalid/@foo/bar/1.1.0", V5, Some(("@foo/bar", "1.1.0"))),
            ("example.com/foo/1.3.0_bar@2.0.0", V5, Some(("foo", "1.3.0"))),
            ("invalidpath", V5, None),
            ("/foo", V5, None),
            ("/foo@1.0.0(react@18.0.0)(b@1.0.0)", V6, Some(("foo", "1.0.0"))),
            ("/@s/foo@1.0.0", V6, Some(("@s/foo", "1.0.0"))),
            ("foo@1.0.0", V9, Some(("foo", "1.0.0"))),
            ("@s/foo@1.0.0(@s/bar@2.0.0(c@1.0.0))", V9, Some(("@s/foo", "1.0.0"))),
            ("@s/foo", V9, None),
            ("foo@", V9, None),
            (
                "a@https://codeload.github.com/a/b/tar.gz/0123",
                V9,
                Some(("a", "https://codeload.github.com/a/b/tar.gz/0123")),
            ),
        ];
        for (key, dialect, want) in cases {
            assert_eq!(parse_key(key, dialect), want, "{key}");
        }
    }
}
