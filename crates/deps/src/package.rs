//! Packages as OSV names them: an ecosystem, a name and a version.

use serde::{Deserialize, Serialize};

/// The ecosystems gatehouse's lockfile parsers produce, spelled as OSV spells
/// them (`affected[].package.ecosystem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Ecosystem {
    /// npm (package-lock, shrinkwrap, yarn, pnpm).
    #[serde(rename = "npm")]
    Npm,
    /// Python packages (requirements.txt, poetry.lock).
    #[serde(rename = "PyPI")]
    PyPI,
    /// Go modules (go.sum).
    #[serde(rename = "Go")]
    Go,
    /// Rust crates (Cargo.lock).
    #[serde(rename = "crates.io")]
    CratesIo,
    /// Ruby gems (Gemfile.lock).
    #[serde(rename = "RubyGems")]
    RubyGems,
}

impl Ecosystem {
    /// The OSV spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Npm => "npm",
            Self::PyPI => "PyPI",
            Self::Go => "Go",
            Self::CratesIo => "crates.io",
            Self::RubyGems => "RubyGems",
        }
    }
}

impl std::fmt::Display for Ecosystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One resolved package version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Package {
    /// The ecosystem.
    pub ecosystem: Ecosystem,
    /// The name, normalized as the ecosystem's registry does (PEP 503 for PyPI).
    pub name: String,
    /// The version as the lockfile writes it (Go keeps its leading `v`,
    /// build metadata and PEP 440 local labels are kept). Empty only for a
    /// git dependency whose lockfile records no version, or an entry whose
    /// version is not a version at all (a URL): the scan reports either as
    /// not checked, never as clean.
    pub version: String,
    /// The commit of a git dependency, as the lockfile records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

impl Package {
    /// A package; PyPI names are PEP 503-normalized.
    pub fn new(ecosystem: Ecosystem, name: &str, version: &str) -> Self {
        let name = match ecosystem {
            Ecosystem::PyPI => normalize_pypi_name(name),
            _ => name.to_owned(),
        };
        Self { ecosystem, name, version: version.to_owned(), commit: None }
    }

    /// The same package at a git commit.
    pub fn at_commit(mut self, commit: Option<&str>) -> Self {
        self.commit = commit.map(str::to_owned);
        self
    }

    /// The version with its commit, for diffs and messages: `1.0.0`,
    /// `1.0.0#<commit>`, or `#<commit>` for a git dependency without one.
    pub fn revision(&self) -> String {
        match &self.commit {
            Some(c) => format!("{}#{c}", self.version),
            None => self.version.clone(),
        }
    }
}

/// 7 to 64 hex digits: a (possibly abbreviated) SHA-1 or SHA-256 commit id.
pub fn is_commit(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit a git URL or spec pins, if it names one: the fragment
/// (`...git#<sha>`, Berry's `#commit=<sha>`) or a code host's tarball path
/// (`codeload.github.com/u/r/tar.gz/<sha>`). Only 7 to 64 hex digits count:
/// `#main` or `#semver:^1` names a branch or a range, not a commit.
pub fn commit_in(spec: &str) -> Option<&str> {
    let is_commit = |s: &&str| is_commit(s);
    if let Some((_, fragment)) = spec.rsplit_once('#') {
        let fragment = fragment.split('&').find_map(|p| p.strip_prefix("commit=")).unwrap_or(fragment);
        return Some(fragment).filter(is_commit);
    }
    let path = spec.split('?').next().unwrap_or(spec);
    path.rsplit('/').next().filter(|_| path.contains("/tar.gz/")).filter(is_commit)
}

/// PEP 503: lowercase, and every run of `-`, `_` and `.` becomes one `-`.
pub fn normalize_pypi_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_separator = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_separator {
                out.push('-');
            }
            in_separator = true;
        } else {
            out.extend(c.to_lowercase());
            in_separator = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep_503() {
        assert_eq!(normalize_pypi_name("Zope.Interface"), "zope-interface");
        assert_eq!(normalize_pypi_name("Foo__Bar-._baz"), "foo-bar-baz");
        assert_eq!(Package::new(Ecosystem::PyPI, "Twisted", "17.5.0").name, "twisted");
        assert_eq!(Package::new(Ecosystem::Npm, "@Scope/Pkg", "1.0.0").name, "@Scope/Pkg");
    }

    #[test]
    fn commits_in_git_specs() {
        let sha = "af885e2e890b9ef0875edd2b117305119ee5bdc5";
        assert_eq!(commit_in(&format!("git+ssh://git@github.com/a/b.git#{sha}")), Some(sha));
        assert_eq!(commit_in(&format!("https://github.com/a/b.git#commit={sha}")), Some(sha));
        assert_eq!(commit_in(&format!("https://codeload.github.com/a/b/tar.gz/{sha}")), Some(sha));
        assert_eq!(commit_in("github:a/b#main"), None);
        assert_eq!(commit_in("git+https://github.com/a/b.git"), None);
        assert_eq!(commit_in("https://github.com/a/b.git#semver:^1.0"), None);
    }

    #[test]
    fn ecosystems_serialize_as_osv_spells_them() {
        let all = [Ecosystem::Npm, Ecosystem::PyPI, Ecosystem::Go, Ecosystem::CratesIo, Ecosystem::RubyGems];
        for e in all {
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
    }
}
