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
    /// The version as the lockfile writes it (Go keeps its leading `v`).
    pub version: String,
}

impl Package {
    /// A package; PyPI names are PEP 503-normalized.
    pub fn new(ecosystem: Ecosystem, name: &str, version: &str) -> Self {
        let name = match ecosystem {
            Ecosystem::PyPI => normalize_pypi_name(name),
            _ => name.to_owned(),
        };
        Self { ecosystem, name, version: version.to_owned() }
    }
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
    fn ecosystems_serialize_as_osv_spells_them() {
        let all = [Ecosystem::Npm, Ecosystem::PyPI, Ecosystem::Go, Ecosystem::CratesIo, Ecosystem::RubyGems];
        for e in all {
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
    }
}
