//! npm `package-lock.json` and `npm-shrinkwrap.json`, lockfileVersion 1, 2 and 3.
//!
//! - v2 and v3 list every installed package under `packages`, keyed by its
//!   path (`node_modules/a/node_modules/@s/b`); the name is the part after the
//!   last `node_modules/`, or the entry's `name` field when npm wrote one (an
//!   alias `npm:real@1.2.3` installs `real` under the alias's folder and
//!   records `name: real`). v2 also carries v1's `dependencies` tree for old
//!   npm versions: `packages` is preferred whenever present.
//! - v1 nests `dependencies` inside `dependencies`; an alias's `version` is
//!   written `npm:real@1.2.3`; a package installed from a registry tarball
//!   URL has that URL as its `version`, and the URL's file name gives it.
//!
//! Git dependencies (see [`is_git_source`]) are packages with their commit
//! (the `#<sha>` of `resolved`, or of v1's `version`): v2/v3 record the
//! package's own `version` beside the git `resolved`; v1 writes the git URL
//! as the `version`, so such a package has no version, only its commit.
//! A `version` that is a URL or a spec rather than a version is reported as
//! no version (the URL may hold a token); any other text is kept as written,
//! and the scan reports what it cannot read.
//!
//! An entry that is `null`, or has neither a `version` nor a `resolved`, is
//! an entry this parser cannot read: the parse fails with its line. So does a
//! mapping that repeats a key (`JSON.parse` would keep only the last).
//!
//! Left out: the root project (`""`), workspace folders (keys outside any
//! `node_modules/`), `link: true` entries (workspace symlinks) and `file:`
//! packages (local code, no registry release to look up). Kept: dev,
//! optional, peer and bundled (`inBundle`, v1 `bundled`) packages, and
//! tarballs fetched over http(s): a private registry or mirror serves the
//! same package by URL, and nothing in the lockfile tells such a mirror from
//! a bare tarball, so the package is scanned under its name rather than
//! skipped.
//!
//! The helpers shared with the yarn and pnpm parsers live here too:
//! [`OrderedMap`], [`is_semver_like`], [`is_git_source`], [`split_name`].

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::Ecosystem;

/// A JSON or YAML mapping in file order. Used instead of a `BTreeMap` so
/// warnings come out in file order; a repeated key is an error (serde_json
/// gives it its line), never silently dropped or kept twice.
pub(super) struct OrderedMap<T>(pub Vec<(String, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OrderedMap<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for MapVisitor<T> {
            type Value = OrderedMap<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                let mut keys = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !keys.insert(key.clone()) {
                        return Err(serde::de::Error::custom("a mapping repeats a key"));
                    }
                    entries.push((key, map.next_value::<T>()?));
                }
                Ok(OrderedMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

/// True for a version npm's registry could have published: `MAJOR.MINOR.PATCH`
/// in digits, then optionally a `-prerelease` and/or `+build` part of ASCII
/// letters, digits, dots, hyphens (and `+` inside build metadata). Anything
/// else (a git URL, a `file:` path, a tarball URL, a dist-tag) is not a
/// version OSV's npm ranges can be compared with.
pub(super) fn is_semver_like(version: &str) -> bool {
    let (core, rest) = match version.find(['-', '+']) {
        Some(i) => version.split_at(i),
        None => (version, ""),
    };
    let mut parts = 0;
    for part in core.split('.') {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        parts += 1;
    }
    if parts != 3 {
        return false;
    }
    let suffix = rest.get(1..).unwrap_or("");
    rest.is_empty()
        || (!suffix.is_empty()
            && suffix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+')))
}

/// True when a `resolved` URL, a version spec or a resolution points at a git
/// repository rather than a registry release: git URLs and shorthands, URLs
/// ending in `.git`, and URLs of code hosts (`github.com`, `gitlab.com`,
/// `bitbucket.org`, `codeload.github.com`), whose tarballs are built from a
/// commit. Such a package's version comes from its `package.json` at some
/// commit, not from a registry release: it is checked under that version
/// (the best key OSV's npm entries have) and its commit.
pub(super) fn is_git_source(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    const PREFIXES: [&str; 9] =
        ["git+", "git:", "git@", "github:", "gitlab:", "bitbucket:", "gist:", "ssh://", "git://"];
    if PREFIXES.iter().any(|p| lower.starts_with(p)) || lower.contains("#commit=") {
        return true;
    }
    let Some(rest) = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://")) else {
        return false;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = host.rsplit('@').next().unwrap_or(host);
    let repo_path = path.split(['#', '?']).next().unwrap_or(path);
    match host {
        // Code hosts: every tarball they serve is built from a commit. (GitHub's
        // npm registry is npm.pkg.github.com; GitLab's lives under /api/.)
        "codeload.github.com" | "github.com" | "www.github.com" | "bitbucket.org" => true,
        "gitlab.com" => !path.starts_with("api/"),
        _ => repo_path.ends_with(".git"),
    }
}

/// True for a spec naming code on this machine: `file:`, `link:`, `portal:`.
pub(super) fn is_local_spec(spec: &str) -> bool {
    ["file:", "link:", "portal:"].iter().any(|p| spec.starts_with(p))
}

/// Splits `name@rest` where `name` may be scoped (`@scope/name@rest`).
/// `None` when there is no `@` after the name or the name is empty.
pub(super) fn split_name(spec: &str) -> Option<(&str, &str)> {
    let from = usize::from(spec.starts_with('@'));
    let at = spec.get(from..)?.find('@')? + from;
    let (name, rest) = (spec.get(..at)?, spec.get(at + 1..)?);
    (!name.is_empty() && name != "@").then_some((name, rest))
}

/// The 1-based line of the first line that holds `needle`, best effort (for
/// errors found after deserialization, which has forgotten positions).
pub(super) fn line_of(text: &str, needle: &str) -> Option<usize> {
    let at = text.find(needle)?;
    Some(text.get(..at)?.bytes().filter(|&b| b == b'\n').count() + 1)
}

/// A name cut short for a message: never more than 100 characters of file content.
pub(super) fn short(name: &str) -> &str {
    name.char_indices().nth(100).map_or(name, |(i, _)| name.get(..i).unwrap_or(name))
}

/// The version in a registry tarball URL, `<registry>/<name>/-/<base>-<version>.tgz`
/// (`<base>` is the name without its scope), when the URL is one for `name`.
/// npm 6 writes such a URL as the `version` of a package installed from it.
fn registry_tarball_version<'a>(name: &str, url: &'a str) -> Option<&'a str> {
    let path = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let path = path.split(['?', '#']).next()?;
    let (before, file) = path.rsplit_once("/-/")?;
    let encoded = name.replacen('/', "%2f", 1);
    let named = before.ends_with(&format!("/{name}"))
        || before.to_ascii_lowercase().ends_with(&format!("/{}", encoded.to_ascii_lowercase()));
    let base = name.rsplit('/').next()?;
    let version = file.strip_prefix(base)?.strip_prefix('-')?.strip_suffix(".tgz")?;
    (named && is_semver_like(version)).then_some(version)
}

/// The version to report for a package whose lockfile says `version`: as
/// written, unless it is a URL or a spec (`git+...`, `file:`, `npm:`,
/// `user/repo`), which is no version at all and may carry a token.
pub(super) fn reported_version(version: &str) -> &str {
    if version.contains([':', '/', '#']) { "" } else { version }
}

/// Adds an npm package: a git one with its commit, any other as
/// [`reported_version`] gives its version.
pub(super) fn add_npm(out: &mut Collector, name: &str, version: &str, git: bool, source: &str) {
    let reported = reported_version(version);
    if git {
        let commit = crate::package::commit_in(source).or_else(|| crate::package::commit_in(version));
        out.add_git(Ecosystem::Npm, name, reported, commit);
    } else {
        out.add(Ecosystem::Npm, name, reported);
    }
}

/// The fields read first, so an unknown version is reported as such even
/// when the rest of the file has a shape this parser does not know.
#[derive(serde::Deserialize)]
struct Header {
    #[serde(rename = "lockfileVersion")]
    lockfile_version: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct Lockfile {
    packages: Option<OrderedMap<Option<PackageEntry>>>,
    dependencies: Option<OrderedMap<Option<DependencyV1>>>,
}

/// An entry of v2/v3 `packages`.
#[derive(serde::Deserialize)]
struct PackageEntry {
    name: Option<String>,
    version: Option<String>,
    resolved: Option<String>,
    #[serde(default)]
    link: bool,
}

/// An entry of v1 `dependencies` (and of v2's copy of it).
#[derive(serde::Deserialize)]
struct DependencyV1 {
    version: Option<String>,
    resolved: Option<String>,
    dependencies: Option<OrderedMap<Option<DependencyV1>>>,
}

pub(crate) fn parse(src: &Source<'_>, format: Format) -> Result<Parsed, ParseError> {
    let header: Header = serde_json::from_str(src.text).map_err(|e| src.json_error(&e))?;
    let version = match header.lockfile_version {
        None => return Err(src.error(ParseErrorCode::Structure, None, "no lockfileVersion")),
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(_) => {
            let line = line_of(src.text, "\"lockfileVersion\"");
            return Err(src.error(ParseErrorCode::Structure, line, "lockfileVersion is not a number"));
        }
    };
    let Some(version @ 1..=3) = version else {
        let line = line_of(src.text, "\"lockfileVersion\"");
        return Err(src.error(ParseErrorCode::UnsupportedVersion, line, "lockfileVersion is not 1, 2 or 3"));
    };
    let lock: Lockfile = serde_json::from_str(src.text).map_err(|e| src.json_error(&e))?;
    let mut out = Collector::default();
    match (lock.packages, lock.dependencies) {
        (Some(packages), _) if version >= 2 => read_packages(src, packages, &mut out)?,
        (_, Some(deps)) if version <= 2 => read_dependencies(src, deps, &mut out)?,
        (None, None) if version == 1 => {} // npm 6 writes no `dependencies` for a project without any
        _ => {
            let want = if version == 1 { "dependencies" } else { "packages" };
            return Err(src.error(
                ParseErrorCode::Structure,
                None,
                format!("lockfileVersion {version} without a {want} object"),
            ));
        }
    }
    Ok(out.finish(format))
}

/// v2/v3 `packages`.
fn read_packages(
    src: &Source<'_>,
    packages: OrderedMap<Option<PackageEntry>>,
    out: &mut Collector,
) -> Result<(), ParseError> {
    for (path, entry) in packages.0 {
        // The root project and workspace folders: keys outside any node_modules.
        let Some(at) = path.rfind("node_modules/") else { continue };
        let unreadable = |message: &str| {
            let line = line_of(src.text, &format!("\"{path}\""));
            src.error(ParseErrorCode::Structure, line, message.to_owned())
        };
        let Some(entry) = entry else { return Err(unreadable("a packages entry is null")) };
        if entry.link {
            continue; // a symlink to a workspace folder or a local directory
        }
        let folder = path.get(at + "node_modules/".len()..).unwrap_or("");
        let name = entry.name.as_deref().unwrap_or(folder);
        if name.is_empty() || folder.is_empty() {
            return Err(unreadable("a packages key names no package"));
        }
        let resolved = entry.resolved.as_deref().unwrap_or("");
        if entry.version.is_none() && resolved.is_empty() {
            return Err(unreadable("a packages entry has neither a version nor a resolved source"));
        }
        if is_local_spec(resolved) {
            continue;
        }
        let version = entry.version.as_deref().unwrap_or("");
        add_npm(out, name, version, is_git_source(resolved) || is_git_source(version), resolved);
    }
    Ok(())
}

/// v1 `dependencies`, nested to any depth (serde_json's recursion limit has
/// already bounded it); walked with an explicit stack.
fn read_dependencies(
    src: &Source<'_>,
    deps: OrderedMap<Option<DependencyV1>>,
    out: &mut Collector,
) -> Result<(), ParseError> {
    let mut stack = vec![deps.0.into_iter()];
    while let Some(level) = stack.last_mut() {
        let Some((key, dep)) = level.next() else {
            stack.pop();
            continue;
        };
        let unreadable = |message: &str| {
            let line = line_of(src.text, &format!("\"{key}\""));
            src.error(ParseErrorCode::Structure, line, message.to_owned())
        };
        if key.is_empty() {
            return Err(unreadable("a dependencies key is empty"));
        }
        let Some(dep) = dep else { return Err(unreadable("a dependencies entry is null")) };
        let Some(version) = dep.version.as_deref() else {
            return Err(unreadable("a dependencies entry has no version"));
        };
        let resolved = dep.resolved.as_deref().unwrap_or("");
        // An alias: `"version": "npm:real@1.2.3"`.
        let (name, version) = match version.strip_prefix("npm:").and_then(split_name) {
            Some((real, v)) => (real, v),
            None => (key.as_str(), version),
        };
        // Installed from a registry tarball URL: the URL says the version.
        let version = registry_tarball_version(name, version).unwrap_or(version);
        if !is_local_spec(version) && !is_local_spec(resolved) {
            add_npm(out, name, version, is_git_source(resolved) || is_git_source(version), resolved);
        }
        if let Some(children) = dep.dependencies {
            stack.push(children.0.into_iter());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_like() {
        for ok in ["1.2.3", "0.0.0", "10.20.30-rc.1", "1.0.0+build.5", "1.0.0-beta-2+x.y", "3.0.0-canary-5"] {
            assert!(is_semver_like(ok), "{ok}");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "v1.2.3",
            "1.2.x",
            "^1.2.3",
            "1.2.3-",
            "1.2.3+",
            "1.2.3 ",
            "latest",
            "git+ssh://git@github.com/a/b.git#abc",
            "file:../x",
            "npm:a@1.2.3",
            "1.2.3_react@18.0.0",
            "1.2.3(a@1.0.0)",
            "https://example.com/a-1.0.0.tgz",
            "1..3",
            "１.2.3",
        ] {
            assert!(!is_semver_like(bad), "{bad:?}");
        }
    }

    #[test]
    fn git_sources() {
        for git in [
            "git+ssh://git@github.com/a/b.git#0123",
            "git+https://github.com/a/b.git",
            "git://github.com/a/b",
            "github:a/b#main",
            "gitlab:a/b",
            "https://codeload.github.com/webpack/tooling/tar.gz/4c13a00ac84cf0e2dd57c457cd1ce46faa9e456a",
            "https://github.com/a/b/archive/v1.0.0.tar.gz",
            "https://github.com/a/b.git#commit=abc",
            "https://gitlab.com/a/b/-/archive/main/b-main.tar.gz",
            "https://example.com/a/b.git",
        ] {
            assert!(is_git_source(git), "{git}");
        }
        for not_git in [
            "https://registry.npmjs.org/a/-/a-1.0.0.tgz",
            "https://npm.pkg.github.com/download/@a/b/1.0.0/abc",
            "https://gitlab.my-org.org/api/v4/projects/1/packages/npm/@a/b/-/@a/b-3.2.3.tgz",
            "1.2.3",
            "",
            "file:../x",
        ] {
            assert!(!is_git_source(not_git), "{not_git}");
        }
    }

    #[test]
    fn tarball_versions() {
        let v = |n, u| registry_tarball_version(n, u);
        assert_eq!(
            v("node-uuid", "https://registry.npmjs.org/node-uuid/-/node-uuid-1.4.7.tgz"),
            Some("1.4.7")
        );
        assert_eq!(v("@s/a", "https://r.test/@s/a/-/a-1.0.0-rc.1.tgz"), Some("1.0.0-rc.1"));
        assert_eq!(v("@s/a", "https://r.test/@s%2Fa/-/a-2.0.0.tgz"), Some("2.0.0"));
        assert_eq!(v("a", "https://r.test/b/-/a-1.0.0.tgz"), None);
        assert_eq!(v("a", "https://r.test/a/-/a-latest.tgz"), None);
        assert_eq!(v("a", "https://r.test/a-1.0.0.tgz"), None);
        assert_eq!(v("a", "1.0.0"), None);
        assert_eq!(short(&"x".repeat(300)).len(), 100);
    }

    #[test]
    fn names() {
        assert_eq!(split_name("a@1.0.0"), Some(("a", "1.0.0")));
        assert_eq!(split_name("@s/a@npm:1.0.0"), Some(("@s/a", "npm:1.0.0")));
        assert_eq!(split_name("@s/a"), None);
        assert_eq!(split_name("a"), None);
        assert_eq!(split_name("@"), None);
        assert_eq!(split_name("@@1"), None);
        assert_eq!(split_name("@1"), None);
        assert_eq!(split_name(""), None);
    }
}
