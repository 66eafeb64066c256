//! Base vs head: which package versions a change adds, changes or removes.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::package::{Ecosystem, Package};

/// A package whose set of versions changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The ecosystem.
    pub ecosystem: Ecosystem,
    /// The name.
    pub name: String,
    /// Versions in the base, sorted; a git dependency's as
    /// [`Package::revision`] writes it (`1.0.0#<commit>`), so a new commit
    /// under an unchanged version is a change.
    pub from: Vec<String>,
    /// Versions in the head, likewise.
    pub to: Vec<String>,
    /// The head's packages whose revision the base did not have.
    #[serde(skip)]
    new: Vec<Package>,
}

/// The difference between two package sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// Packages (by name) only in the head, every version.
    pub added: Vec<Package>,
    /// Packages in both whose versions differ.
    pub changed: Vec<Change>,
    /// Packages (by name) only in the base, every version.
    pub removed: Vec<Package>,
}

impl Diff {
    /// The versions a scan must check: every added one, and each changed
    /// package's versions (with their commits) that the base did not have.
    /// Removed versions and unchanged ones are not checked.
    pub fn to_check(&self) -> Vec<Package> {
        let mut out: BTreeSet<Package> = self.added.iter().cloned().collect();
        out.extend(self.changed.iter().flat_map(|c| c.new.iter().cloned()));
        out.into_iter().collect()
    }
}

fn by_name(packages: &[Package]) -> BTreeMap<(Ecosystem, &str), BTreeMap<String, &Package>> {
    let mut map: BTreeMap<(Ecosystem, &str), BTreeMap<String, &Package>> = BTreeMap::new();
    for p in packages {
        map.entry((p.ecosystem, p.name.as_str())).or_default().insert(p.revision(), p);
    }
    map
}

/// Diffs `base` (absent: a new lockfile, or one read as absent) against `head`.
pub fn diff(base: Option<&[Package]>, head: &[Package]) -> Diff {
    let base = by_name(base.unwrap_or_default());
    let head = by_name(head);
    let mut out = Diff::default();
    for ((eco, name), versions) in &head {
        match base.get(&(*eco, *name)) {
            None => out.added.extend(versions.values().map(|p| (*p).clone())),
            Some(before) if before.keys().ne(versions.keys()) => out.changed.push(Change {
                ecosystem: *eco,
                name: (*name).to_owned(),
                from: before.keys().cloned().collect(),
                to: versions.keys().cloned().collect(),
                new: versions
                    .iter()
                    .filter(|(r, _)| !before.contains_key(*r))
                    .map(|(_, p)| (*p).clone())
                    .collect(),
            }),
            Some(_) => {}
        }
    }
    for ((eco, name), versions) in &base {
        if !head.contains_key(&(*eco, *name)) {
            out.removed.extend(versions.values().map(|p| (*p).clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, version: &str) -> Package {
        Package::new(Ecosystem::Npm, name, version)
    }

    #[test]
    fn added_changed_removed_and_what_to_check() {
        let base = [p("a", "1.0.0"), p("b", "1.0.0"), p("c", "2.0.0"), p("d", "1.0.0"), p("d", "2.0.0")];
        let head = [p("a", "1.0.0"), p("b", "1.1.0"), p("e", "0.1.0"), p("d", "2.0.0"), p("d", "3.0.0")];
        let d = diff(Some(&base), &head);
        assert_eq!(d.added, vec![p("e", "0.1.0")]);
        assert_eq!(d.removed, vec![p("c", "2.0.0")]);
        assert_eq!(d.changed.len(), 2);
        assert_eq!(d.changed[0].name, "b");
        assert_eq!(d.changed[1].from, vec!["1.0.0", "2.0.0"]);
        assert_eq!(d.changed[1].to, vec!["2.0.0", "3.0.0"]);
        assert_eq!(d.to_check(), vec![p("b", "1.1.0"), p("d", "3.0.0"), p("e", "0.1.0")]);
    }

    #[test]
    fn a_new_commit_under_the_same_version_is_checked() {
        let at = |c: &str| p("a", "1.0.0").at_commit(Some(c));
        let d = diff(Some(&[at("aaaaaaa")]), &[at("bbbbbbb")]);
        assert_eq!(d.changed[0].from, ["1.0.0#aaaaaaa"]);
        assert_eq!(d.to_check(), vec![at("bbbbbbb")]);
        assert!(diff(Some(&[at("aaaaaaa")]), &[at("aaaaaaa")]).to_check().is_empty());
    }

    #[test]
    fn an_absent_base_checks_everything() {
        let head = [p("a", "1.0.0"), p("b", "1.1.0")];
        assert_eq!(diff(None, &head).to_check(), head.to_vec());
    }
}
