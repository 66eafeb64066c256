//! OSV loading, version ordering and matching.
//!
//! The real advisories under `tests/fixtures/osv/` (see its SOURCES.md) are
//! matched at their boundaries: the introduced version and the one before
//! it, the fixed version and the one before it, `last_affected` and the one
//! after it. Every expected answer below was read off the advisory JSON by
//! hand (the comment above each block quotes the ranges it relies on), not
//! taken from this code's output. Odd cases (unknown range type, unreadable
//! versions, empty events, `limit`) use hand-written advisories.

#![allow(missing_docs, clippy::unwrap_used, reason = "tests")]

use std::cmp::Ordering;
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gatehouse_deps::matching::{Index, MatchErrorCode, ecosystem_from_osv, fixed_versions};
use gatehouse_deps::osv::{self, Advisory, Event, LoadErrorCode, RangeType};
use gatehouse_deps::version::{Scheme, Version, compare};
use gatehouse_deps::{Ecosystem, Package};
use proptest::prelude::*;
use serde_json::json;

use Ecosystem::{CratesIo, Go, Npm, PyPI, RubyGems};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/osv")
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| Index::new(osv::load_dir(&fixtures()).unwrap()))
}

fn ids(index: &Index, eco: Ecosystem, name: &str, version: &str) -> Vec<String> {
    let package = Package::new(eco, name, version);
    match index.affecting(&package) {
        Ok(found) => found.iter().map(|a| a.id.clone()).collect(),
        Err(e) => panic!("{eco}/{name}@{version}: unexpected error {e}"),
    }
}

/// `version` of `name` is affected by exactly `expected` (in id order).
#[track_caller]
fn check(eco: Ecosystem, name: &str, version: &str, expected: &[&str]) {
    assert_eq!(ids(index(), eco, name, version), expected, "{eco}/{name}@{version}");
}

/// Matching `version` of `name` fails with `code`, naming `advisory`.
#[track_caller]
fn check_err(index: &Index, eco: Ecosystem, name: &str, version: &str, code: MatchErrorCode, advisory: &str) {
    let err = index.affecting(&Package::new(eco, name, version)).unwrap_err();
    assert_eq!((err.code, err.advisory.as_str()), (code, advisory), "{eco}/{name}@{version}: {err}");
}

fn advisory(value: serde_json::Value) -> Advisory {
    osv::from_json_bytes("inline.json", value.to_string().as_bytes()).unwrap()
}

/// A one-entry advisory for `ecosystem`/`name` with these ranges.
fn one(id: &str, ecosystem: &str, name: &str, ranges: serde_json::Value) -> Advisory {
    advisory(json!({
        "id": id, "modified": "2024-01-01T00:00:00Z",
        "affected": [{"package": {"ecosystem": ecosystem, "name": name}, "ranges": ranges}]
    }))
}

// ---------------------------------------------------------------- loading

#[test]
fn loads_every_fixture_in_path_order() {
    let advisories = osv::load_dir(&fixtures()).unwrap();
    assert_eq!(advisories.len(), 34);
    // Go/ < PyPI/ < RubyGems/ < crates.io/ < npm/ (byte order of the paths).
    assert_eq!(advisories[0].id, "GO-2022-0755");
    assert_eq!(advisories[33].id, "GHSA-wc69-rhjr-hc9g");
    let index = index();
    assert_eq!(index.len(), 34);
    assert_eq!(index.withdrawn(), 3);
    assert_eq!(index.duplicates(), 0);
    // GitHub Actions:word-wrap and NuGet:Moment.js.
    assert_eq!(index.other_ecosystem_entries(), 2);
    fn shareable<T: Send + Sync>(_: &T) {}
    shareable(index);
}

#[test]
fn fields_are_read() {
    let a = index().get("GHSA-29mw-wpgm-hmr9").unwrap();
    assert_eq!(a.modified, "2023-09-05T22:58:25Z");
    assert_eq!(a.aliases, ["CVE-2020-28500"]);
    assert!(a.details.as_deref().unwrap().contains("ReDoS"));
    assert_eq!(a.database_specific.as_ref().unwrap()["severity"], "MODERATE");
    assert_eq!(a.severity[0].kind, "CVSS_V3");
    assert!(a.severity[0].score.starts_with("CVSS:3.1/"));
    assert_eq!(a.affected.len(), 4);
    let trim = &a.affected[3];
    assert_eq!(trim.package.as_ref().unwrap().name, "lodash.trim");
    assert_eq!(trim.ranges[0].kind, RangeType::Ecosystem);
    assert_eq!(trim.ranges[0].events, [Event::Introduced("0".into()), Event::LastAffected("4.5.1".into())]);
    assert!(!a.references.is_empty());

    let go = index().get("GO-2024-2730").unwrap();
    assert_eq!(go.withdrawn.as_deref(), Some("2024-04-17T18:06:23Z"));
    let py = index().get("PYSEC-2021-150").unwrap();
    assert_eq!(py.affected[0].ranges[0].kind, RangeType::Git);
    assert_eq!(py.affected[0].ranges[0].repo.as_deref(), Some("https://github.com/tensorflow/tensorflow"));
}

#[test]
fn unknown_fields_ignored_null_lists_empty_bom_accepted() {
    let a = osv::from_json_bytes(
        "x.json",
        b"\xEF\xBB\xBF{\"id\":\"X-1\",\"modified\":\"2024-01-01T00:00:00Z\",\"aliases\":null,\
          \"whatever\":{\"deep\":[1,2]},\"affected\":[{\"package\":{\"ecosystem\":\"npm\",\"name\":\"a\"},\
          \"ranges\":[{\"type\":\"SEMVER\",\"events\":[{\"introduced\":\"0\"}],\"extra\":1}],\"versions\":null}]}",
    )
    .unwrap();
    assert!(a.aliases.is_empty());
    assert!(a.affected[0].versions.is_empty());
    assert!(a.details.is_none());
}

#[test]
fn invalid_advisories_are_errors_naming_the_source() {
    let cases: [(&[u8], LoadErrorCode); 11] = [
        (b"{\"id\": \"X-1\", \"modified\": ", LoadErrorCode::Syntax),
        (b"not json", LoadErrorCode::Syntax),
        (b"[]", LoadErrorCode::Structure),
        (b"{\"modified\": \"2024-01-01T00:00:00Z\"}", LoadErrorCode::Structure),
        (b"{\"id\": \"X-1\"}", LoadErrorCode::Structure),
        (b"{\"id\": \"  \", \"modified\": \"m\"}", LoadErrorCode::Structure),
        (b"{\"id\": 5, \"modified\": \"m\"}", LoadErrorCode::Structure),
        // Two keys in one event, and an unknown event key.
        (
            b"{\"id\":\"X\",\"modified\":\"m\",\"affected\":[{\"ranges\":[{\"type\":\"SEMVER\",\
              \"events\":[{\"introduced\":\"1.0.0\",\"fixed\":\"1.0.2\"}]}]}]}",
            LoadErrorCode::Structure,
        ),
        (
            b"{\"id\":\"X\",\"modified\":\"m\",\"affected\":[{\"ranges\":[{\"type\":\"SEMVER\",\
              \"events\":[{\"introduced\":\"0\"},{\"removed\":\"1.0.2\"}]}]}]}",
            LoadErrorCode::Structure,
        ),
        // An empty event, and a version that is not a string.
        (
            b"{\"id\":\"X\",\"modified\":\"m\",\"affected\":[{\"ranges\":[{\"type\":\"SEMVER\",\
              \"events\":[{}]}]}]}",
            LoadErrorCode::Structure,
        ),
        (
            b"{\"id\":\"X\",\"modified\":\"m\",\"affected\":[{\"ranges\":[{\"type\":\"SEMVER\",\
              \"events\":[{\"introduced\":1}]}]}]}",
            LoadErrorCode::Structure,
        ),
    ];
    for (bytes, code) in cases {
        let err = osv::from_json_bytes("db/npm/X.json", bytes).unwrap_err();
        assert_eq!(err.code, code, "{}: {err}", String::from_utf8_lossy(bytes));
        assert_eq!(err.source_name, "db/npm/X.json");
        assert!(err.to_string().starts_with("db/npm/X.json: "), "{err}");
        assert!(err.to_string().ends_with(&format!("({})", code.as_str())), "{err}");
    }
}

#[test]
fn load_dir_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("npm/deeper")).unwrap();
    fs::write(dir.path().join("README.md"), "not an advisory").unwrap();
    fs::write(dir.path().join("npm/A-1.json"), r#"{"id":"A-1","modified":"2024-01-01T00:00:00Z"}"#).unwrap();
    fs::write(dir.path().join("npm/deeper/A-2.json"), r#"{"id":"A-2","modified":"2024-01-01T00:00:00Z"}"#)
        .unwrap();
    let ids: Vec<_> = osv::load_dir(dir.path()).unwrap().into_iter().map(|a| a.id).collect();
    assert_eq!(ids, ["A-1", "A-2"]);

    // One bad file fails the whole load, and the error names it.
    fs::write(dir.path().join("npm/B-1.json"), r#"{"id":"B-1","modified":"#).unwrap();
    fs::write(dir.path().join("npm/C-1.json"), r#"{"id":"C-1"}"#).unwrap();
    let err = osv::load_dir(dir.path()).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Syntax);
    assert!(err.source_name.ends_with("B-1.json"), "{err}");
    // load_dir_all lists every bad file.
    let errors = osv::load_dir_all(dir.path()).unwrap_err();
    assert_eq!(errors.len(), 2);
    assert!(errors[0].source_name.ends_with("B-1.json"));
    assert_eq!(errors[1].code, LoadErrorCode::Structure);
    assert!(errors[1].source_name.ends_with("C-1.json"));

    // No advisory at all, and no directory at all, are errors too.
    let empty = tempfile::tempdir().unwrap();
    fs::write(empty.path().join("SOURCES.md"), "x").unwrap();
    assert_eq!(osv::load_dir(empty.path()).unwrap_err().code, LoadErrorCode::Empty);
    assert_eq!(osv::load_dir(&empty.path().join("missing")).unwrap_err().code, LoadErrorCode::Io);
}

#[test]
fn ecosystem_strings_match_exactly() {
    assert_eq!(ecosystem_from_osv("npm"), Some(Npm));
    assert_eq!(ecosystem_from_osv("PyPI"), Some(PyPI));
    assert_eq!(ecosystem_from_osv("Go"), Some(Go));
    assert_eq!(ecosystem_from_osv("crates.io"), Some(CratesIo));
    assert_eq!(ecosystem_from_osv("RubyGems"), Some(RubyGems));
    for other in ["pypi", "NPM", "npm:foo", "Debian:11", "GitHub Actions", "Maven", ""] {
        assert_eq!(ecosystem_from_osv(other), None, "{other}");
    }
}

// ---------------------------------------------------------------- npm

#[test]
fn npm_introduced_zero_and_fixed() {
    // p6mc: lodash, lodash-es [0, 4.17.20). 29mw: lodash, lodash-es [0, 4.17.21).
    const P6MC: &str = "GHSA-p6mc-m468-83gw";
    const MW29: &str = "GHSA-29mw-wpgm-hmr9";
    check(Npm, "lodash", "0.0.1", &[MW29, P6MC]);
    check(Npm, "lodash", "4.17.19", &[MW29, P6MC]);
    check(Npm, "lodash", "4.17.20-0", &[MW29, P6MC]);
    check(Npm, "lodash", "4.17.20", &[MW29]);
    check(Npm, "lodash", "4.17.21-rc.1", &[MW29]);
    check(Npm, "lodash", "4.17.21", &[]);
    check(Npm, "lodash-es", "4.17.20", &[MW29]);
    // npm's own leniency: a leading `v` / `=`.
    check(Npm, "lodash", "v4.17.19", &[MW29, P6MC]);
    check(Npm, "lodash", "=4.17.20", &[MW29]);
}

#[test]
fn npm_last_affected_is_inclusive() {
    // 29mw: lodash.trim, lodash.trimend [0, last_affected 4.5.1].
    check(Npm, "lodash.trim", "4.5.0", &["GHSA-29mw-wpgm-hmr9"]);
    check(Npm, "lodash.trim", "4.5.1", &["GHSA-29mw-wpgm-hmr9"]);
    check(Npm, "lodash.trim", "4.5.2", &[]);
    check(Npm, "lodash.trimend", "4.5.1", &["GHSA-29mw-wpgm-hmr9"]);
    // w573: decode-uri-component [0, last_affected 0.2.0].
    check(Npm, "decode-uri-component", "0.2.0", &["GHSA-w573-4hg7-7wgq"]);
    check(Npm, "decode-uri-component", "0.2.1", &[]);
    // 78xj: ip [0, last_affected 1.1.8].
    check(Npm, "ip", "1.1.8", &["GHSA-78xj-cgh5-2h22"]);
    check(Npm, "ip", "1.1.8-beta.1", &["GHSA-78xj-cgh5-2h22"]);
    check(Npm, "ip", "1.1.9", &[]);
    check(Npm, "ip", "2.0.0", &[]);
}

#[test]
fn npm_prereleases() {
    // w7rc: node-fetch [0, 2.6.1), [3.0.0-beta.1, 3.0.0-beta.9).
    // r683: node-fetch [1.0 (= 1.0.0), 3.1.1), [0, 2.6.7).
    const W7RC: &str = "GHSA-w7rc-rwvf-8q5r";
    const R683: &str = "GHSA-r683-j2x4-v87g";
    check(Npm, "node-fetch", "0.9.0", &[R683, W7RC]);
    check(Npm, "node-fetch", "2.6.0", &[R683, W7RC]);
    check(Npm, "node-fetch", "2.6.1", &[R683]);
    check(Npm, "node-fetch", "2.6.7", &[R683]);
    check(Npm, "node-fetch", "3.0.0-alpha.1", &[R683]);
    check(Npm, "node-fetch", "3.0.0-beta.1", &[R683, W7RC]);
    check(Npm, "node-fetch", "3.0.0-beta.8", &[R683, W7RC]);
    check(Npm, "node-fetch", "3.0.0-beta.9", &[R683]);
    check(Npm, "node-fetch", "3.0.0-beta.10", &[R683]);
    check(Npm, "node-fetch", "3.1.0", &[R683]);
    check(Npm, "node-fetch", "3.1.1", &[]);
    // qw6h: express [0, 4.20.0), [5.0.0-alpha.1, 5.0.0).
    // rv95: express [0, 4.19.2), [5.0.0-alpha.1, 5.0.0-beta.3).
    const QW6H: &str = "GHSA-qw6h-vgh9-j6wx";
    const RV95: &str = "GHSA-rv95-896h-c2vc";
    check(Npm, "express", "4.19.1", &[QW6H, RV95]);
    check(Npm, "express", "4.19.2", &[QW6H]);
    check(Npm, "express", "4.20.0", &[]);
    check(Npm, "express", "5.0.0-alpha.0", &[]);
    check(Npm, "express", "5.0.0-alpha.1", &[QW6H, RV95]);
    check(Npm, "express", "5.0.0-beta.2", &[QW6H, RV95]);
    check(Npm, "express", "5.0.0-beta.3", &[QW6H]);
    check(Npm, "express", "5.0.0-rc.1", &[QW6H]);
    check(Npm, "express", "5.0.0", &[]);
}

#[test]
fn npm_several_ranges_names_and_ecosystems() {
    // c2qf: semver [7.0.0, 7.5.2), [6.0.0, 6.3.1), [0, 5.7.2).
    const C2QF: &str = "GHSA-c2qf-rxjj-qqgw";
    check(Npm, "semver", "5.7.1", &[C2QF]);
    check(Npm, "semver", "5.7.2", &[]);
    check(Npm, "semver", "5.99.0", &[]);
    check(Npm, "semver", "6.0.0", &[C2QF]);
    check(Npm, "semver", "6.3.0", &[C2QF]);
    check(Npm, "semver", "6.3.1", &[]);
    check(Npm, "semver", "6.99.0", &[]);
    check(Npm, "semver", "7.0.0", &[C2QF]);
    check(Npm, "semver", "7.5.1", &[C2QF]);
    check(Npm, "semver", "7.5.2", &[]);
    // 8hc4 spells the package "Axios": npm names are exact.
    check(Npm, "Axios", "1.3.1", &[]);
    check(Npm, "Axios", "1.3.2", &["GHSA-8hc4-vh64-cxmj"]);
    check(Npm, "Axios", "1.7.3", &["GHSA-8hc4-vh64-cxmj"]);
    check(Npm, "Axios", "1.7.4", &[]);
    check(Npm, "axios", "1.7.3", &[]);
    // j8xg is labelled `GitHub Actions:word-wrap`, never npm.
    check(Npm, "word-wrap", "1.2.3", &[]);
    // wc69: npm moment [2.18.0, 2.29.4) (and NuGet Moment.js, ignored).
    check(Npm, "moment", "2.17.1", &[]);
    check(Npm, "moment", "2.18.0", &["GHSA-wc69-rhjr-hc9g"]);
    check(Npm, "moment", "2.29.3", &["GHSA-wc69-rhjr-hc9g"]);
    check(Npm, "moment", "2.29.4", &[]);
    check(Npm, "Moment.js", "2.20.0", &[]);
    // A package no advisory names.
    check(Npm, "left-pad", "1.0.0", &[]);
}

// ---------------------------------------------------------------- PyPI

#[test]
fn pypi_last_affected_with_versions_list() {
    // 42969: py [0, last_affected 1.11.0] + versions (… 1.10.0, 1.11.0).
    check(PyPI, "py", "1.10.0", &["PYSEC-2022-42969"]);
    check(PyPI, "py", "1.11.0", &["PYSEC-2022-42969"]);
    check(PyPI, "py", "1.11.0.post1", &[]);
    check(PyPI, "py", "1.11.1", &[]);
    check(PyPI, "py", "0.8.0a2", &["PYSEC-2022-42969"]);
}

#[test]
fn pypi_versions_only_and_withdrawn() {
    // PYSEC-2024-1: gratient, versions ["0.5"], no ranges.
    check(PyPI, "gratient", "0.5", &["PYSEC-2024-1"]);
    check(PyPI, "gratient", "0.5.0", &["PYSEC-2024-1"]); // PEP 440: 0.5 == 0.5.0
    check(PyPI, "gratient", "0.4", &[]);
    check(PyPI, "gratient", "0.6", &[]);
    // PYSEC-2022-15: loguru, withdrawn.
    check(PyPI, "loguru", "0.5.3", &[]);
}

/// PEP 440 orders `1.0+ubuntu1` above `1.0`, but a specifier without a
/// local label ignores the candidate's ("Version matching", "Inclusive
/// ordered comparison"): a bound or listed version with no label is
/// compared with the package's public version, one with a label with the
/// whole version.
#[test]
fn local_versions_match_as_their_public_version() {
    let index = Index::new(vec![
        one(
            "LA-1",
            "PyPI",
            "a",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"last_affected": "1.0"}]}]),
        ),
        one(
            "FX-1",
            "PyPI",
            "b",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "2.0"}]}]),
        ),
        one(
            "LO-1",
            "PyPI",
            "c",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "1.0+ubuntu2"}, {"fixed": "1.0+ubuntu5"}]}]),
        ),
        advisory(json!({
            "id": "VS-1", "modified": "2024-01-01T00:00:00Z",
            "affected": [{"package": {"ecosystem": "PyPI", "name": "d"}, "versions": ["1.0", "1.1+vendor"]}]
        })),
        one(
            "MX-1",
            "PyPI",
            "e",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "1.0+fix"}]}]),
        ),
    ]);
    // last_affected 1.0: a build of 1.0 is 1.0.
    check_in(&index, PyPI, "a", "1.0+ubuntu1", &["LA-1"]);
    check_in(&index, PyPI, "a", "1.0.post1+ubuntu1", &[]);
    check_in(&index, PyPI, "a", "1.0a1+x", &["LA-1"]);
    // introduced 1.0, fixed 2.0: 2.0+x is a build of the fix.
    check_in(&index, PyPI, "b", "1.0+x", &["FX-1"]);
    check_in(&index, PyPI, "b", "2.0+x", &[]);
    check_in(&index, PyPI, "b", "2.0.dev1+x", &["FX-1"]);
    // Bounds with labels compare whole versions.
    check_in(&index, PyPI, "c", "1.0", &[]);
    check_in(&index, PyPI, "c", "1.0+ubuntu1", &[]);
    check_in(&index, PyPI, "c", "1.0+ubuntu2", &["LO-1"]);
    check_in(&index, PyPI, "c", "1.0+ubuntu4.9", &["LO-1"]);
    check_in(&index, PyPI, "c", "1.0+ubuntu5", &[]);
    check_in(&index, PyPI, "c", "1.0+ubuntu10", &[]);
    check_in(&index, PyPI, "c", "1.0.post1", &[]);
    // Listed versions: `1.0` lists every build of 1.0, `1.1+vendor` only itself.
    check_in(&index, PyPI, "d", "1.0+anything", &["VS-1"]);
    check_in(&index, PyPI, "d", "1.0.0", &["VS-1"]);
    check_in(&index, PyPI, "d", "1.1+vendor", &["VS-1"]);
    check_in(&index, PyPI, "d", "1.1", &[]);
    check_in(&index, PyPI, "d", "1.1+other", &[]);
    // Mixed: introduced 1.0 (any build of it), fixed at the build 1.0+fix.
    check_in(&index, PyPI, "e", "1.0", &["MX-1"]);
    check_in(&index, PyPI, "e", "1.0+a", &["MX-1"]);
    check_in(&index, PyPI, "e", "1.0+fix", &[]);
    check_in(&index, PyPI, "e", "1.0+fix.1", &[]);
    check_in(&index, PyPI, "e", "1.0.post1", &[]);
    // fixed_versions reads ranges the same way.
    let b = index.get("FX-1").unwrap();
    assert_eq!(fixed_versions(b, &Package::new(PyPI, "b", "1.0+x")), ["2.0"]);
    assert!(fixed_versions(b, &Package::new(PyPI, "b", "2.0+x")).is_empty());
    let e = index.get("MX-1").unwrap();
    assert_eq!(fixed_versions(e, &Package::new(PyPI, "e", "1.0+a")), ["1.0+fix"]);
    assert!(fixed_versions(index.get("LO-1").unwrap(), &Package::new(PyPI, "c", "1.0+ubuntu5")).is_empty());
}

#[track_caller]
fn check_in(index: &Index, eco: Ecosystem, name: &str, version: &str, want: &[&str]) {
    assert_eq!(ids(index, eco, name, version), want, "{eco}/{name}@{version}");
}

#[test]
fn pypi_names_are_pep503_normalized() {
    // 341: "jw.util" [0, 2.3) + versions, one of which is not PEP 440.
    for name in ["jw.util", "jw-util", "JW_Util", "jw__util"] {
        check(PyPI, name, "2.2", &["PYSEC-2020-341"]);
    }
    check(PyPI, "jw.util", "2.3.dev0", &["PYSEC-2020-341"]);
    check(PyPI, "jw.util", "2.3", &[]);
    check(PyPI, "jw.util", "2.3.0", &[]);
    // Not a PEP 440 version, but listed verbatim: affected, and no error.
    check(PyPI, "jw.util", "-class.-jw.util.version.Version-", &["PYSEC-2020-341"]);
    // Not PEP 440 and not listed: the range cannot place it.
    check_err(index(), PyPI, "jw.util", "nightly", MatchErrorCode::InvalidPackageVersion, "PYSEC-2020-341");
}

#[test]
fn pypi_git_ranges_ignored_prereleases_ordered() {
    // 150: tensorflow GIT (ignored) + ECOSYSTEM [0, 2.2.0rc0), [2.2.0, 2.3.0rc0),
    // [2.3.0, 2.3.4), [2.4.0, 2.4.3) + versions (… 2.2.0, …, 2.4.2).
    const T: &str = "PYSEC-2021-150";
    check(PyPI, "tensorflow", "2.1.4", &[T]);
    check(PyPI, "tensorflow", "2.2.0.dev1", &[T]); // dev sorts before rc0
    check(PyPI, "tensorflow", "2.2.0rc0", &[]);
    check(PyPI, "tensorflow", "2.2.0rc4", &[]);
    check(PyPI, "tensorflow", "2.2.0", &[T]);
    check(PyPI, "tensorflow", "2.3.0rc0", &[]);
    check(PyPI, "tensorflow", "2.3.3", &[T]);
    check(PyPI, "tensorflow", "2.3.4", &[]);
    check(PyPI, "tensorflow", "2.4.2", &[T]);
    check(PyPI, "tensorflow", "2.4.2.0", &[T]);
    check(PyPI, "tensorflow", "2.4.3", &[]);
    check(PyPI, "tensorflow", "2.5.0", &[]);
    // A commit hash is no PyPI version.
    check_err(
        index(),
        PyPI,
        "tensorflow",
        "030af767d357d1b4088c4a25c72cb3906abac489",
        MatchErrorCode::InvalidPackageVersion,
        T,
    );
}

#[test]
fn pypi_unsorted_events_with_ties_keep_listed_order() {
    // 236: pyspark events, as listed: introduced 0, fixed 3.1.1, introduced
    // 3.2.0, fixed 3.2.2, introduced 3.1.1, fixed 3.1.3 (+ versions incl.
    // 3.1.1, 3.1.2, 3.2.0, 3.2.1).
    const S: &str = "PYSEC-2022-236";
    check(PyPI, "pyspark", "3.0.3", &[S]);
    check(PyPI, "pyspark", "3.1.1", &[S]);
    check(PyPI, "pyspark", "3.1.2", &[S]);
    check(PyPI, "pyspark", "3.1.3", &[]);
    check(PyPI, "pyspark", "3.2.1", &[S]);
    check(PyPI, "pyspark", "3.2.2", &[]);
    // 42972: apache-iotdb events as listed: introduced 0.13.0, fixed
    // 0.14.0rc1, introduced 0.12.2, fixed 0.13.0; versions 0.12.2 … 0.12.6.
    // Sorted stably, 0.13.0's introduced precedes its fixed, so 0.13.x is not
    // affected: the same answer as the advisory's own versions list, which
    // osv.dev computed from these events.
    const I: &str = "PYSEC-2022-42972";
    check(PyPI, "apache-iotdb", "0.12.1", &[]);
    check(PyPI, "apache-iotdb", "0.12.2", &[I]);
    check(PyPI, "apache-iotdb", "0.12.9", &[I]);
    check(PyPI, "apache-iotdb", "0.13.0", &[]);
    check(PyPI, "apache-iotdb", "0.13.1", &[]);
    check(PyPI, "apache-iotdb", "0.14.0", &[]);
}

// ---------------------------------------------------------------- Go

#[test]
fn go_incompatible() {
    // 2916: harbor [0, 2.8.6+inc), [2.9.0+inc, 2.9.4+inc), [2.10.0+inc, 2.10.2+inc).
    const H: &str = "GO-2024-2916";
    let harbor = "github.com/goharbor/harbor";
    check(Go, harbor, "v0.0.0-20190101000000-abcdefabcdef", &[H]);
    check(Go, harbor, "v2.8.5+incompatible", &[H]);
    check(Go, harbor, "v2.8.6+incompatible", &[]);
    check(Go, harbor, "v2.8.6", &[]); // build metadata is not part of the order
    check(Go, harbor, "v2.9.0+incompatible", &[H]);
    check(Go, harbor, "v2.9.3+incompatible", &[H]);
    check(Go, harbor, "v2.9.4+incompatible", &[]);
    check(Go, harbor, "v2.10.1+incompatible", &[H]);
    check(Go, harbor, "v2.10.2+incompatible", &[]);
    check(Go, harbor, "v2.11.0+incompatible", &[]);
    // 5495: mattermost-server [11.3.0-rc1+inc, 11.3.3+inc), [11.4.0-rc1+inc,
    // 11.4.3+inc), [11.5.0-rc1+inc, 11.5.0+inc); /v5 and /v6 introduced 0.
    const M: &str = "GO-2026-5495";
    let mm = "github.com/mattermost/mattermost-server";
    check(Go, mm, "v11.2.9+incompatible", &[]);
    check(Go, mm, "v11.3.0-rc0+incompatible", &[]);
    check(Go, mm, "v11.3.0-rc1+incompatible", &[M]);
    check(Go, mm, "v11.3.2+incompatible", &[M]);
    check(Go, mm, "v11.3.3+incompatible", &[]);
    check(Go, mm, "v11.5.0-rc2+incompatible", &[M]);
    check(Go, mm, "v11.5.0+incompatible", &[]);
    check(Go, "github.com/mattermost/mattermost-server/v5", "v5.39.3", &[M]);
    check(Go, "github.com/mattermost/mattermost-server/v6", "v6.0.0-rc1", &[M]);
}

#[test]
fn go_pseudo_versions_order_by_time() {
    // 5495: mattermost/server/v8 [8.0.0-20250721062209-4952acea88ce,
    // 8.0.0-20260220133927-c29cf05d40f8).
    const M: &str = "GO-2026-5495";
    let v8 = "github.com/mattermost/mattermost/server/v8";
    check(Go, v8, "v8.0.0-20250721062208-ffffffffffff", &[]);
    check(Go, v8, "v8.0.0-20250721062209-4952acea88ce", &[M]);
    check(Go, v8, "v8.0.0-20251001000000-000000000000", &[M]);
    check(Go, v8, "v8.0.0-20260220133926-ffffffffffff", &[M]);
    check(Go, v8, "v8.0.0-20260220133927-c29cf05d40f8", &[]);
    check(Go, v8, "v8.0.0", &[]);
    // 5383: filebrowser [0, 0.0.0-20260501183844-112740bdd41d).
    const F: &str = "GO-2026-5383";
    let fb = "github.com/gtsteffaniak/filebrowser";
    check(Go, fb, "v0.0.0-20200101000000-abcdef123456", &[F]);
    check(Go, fb, "v0.0.0-20260501183843-ffffffffffff", &[F]);
    check(Go, fb, "v0.0.0-20260501183844-112740bdd41d", &[]);
    check(Go, fb, "v0.0.0-20260601000000-000000000000", &[]);
    check(Go, fb, "v0.0.1", &[]);
    // 0755: rancher [0, 2.2.5-rc6.0.20190621200032-0ddffe484adc+incompatible):
    // a pseudo-version whose base is the prerelease 2.2.5-rc6.
    const R: &str = "GO-2022-0755";
    let r = "github.com/rancher/rancher";
    check(Go, r, "v2.2.4+incompatible", &[R]);
    check(Go, r, "v2.2.5-rc6+incompatible", &[R]);
    check(Go, r, "v2.2.5-rc6.0.20190620000000-aaaaaaaaaaaa+incompatible", &[R]);
    check(Go, r, "v2.2.5-rc6.0.20190621200032-0ddffe484adc+incompatible", &[]);
    check(Go, r, "v2.2.5-rc6.0.20190622000000-aaaaaaaaaaaa+incompatible", &[]);
    check(Go, r, "v2.2.5-rc7+incompatible", &[]);
    check(Go, r, "v2.2.5+incompatible", &[]);
}

#[test]
fn go_withdrawn() {
    // 2730: gorilla/sessions, introduced 0, withdrawn.
    check(Go, "github.com/gorilla/sessions", "v1.2.1", &[]);
}

// ---------------------------------------------------------------- crates.io

#[test]
fn crates_ranges_prereleases_and_an_empty_interval() {
    // 0012: arrow2 [0.0.0-0, 0.7.1), [0.8.0, 0.8.2), [0.9.0, 0.9.2), and
    // "introduced 0.10.0, fixed 0.10.0" (empty).
    const A: &str = "RUSTSEC-2022-0012";
    check(CratesIo, "arrow2", "0.0.0", &[A]);
    check(CratesIo, "arrow2", "0.7.0", &[A]);
    check(CratesIo, "arrow2", "0.7.1", &[]);
    check(CratesIo, "arrow2", "0.7.9", &[]);
    check(CratesIo, "arrow2", "0.8.0", &[A]);
    check(CratesIo, "arrow2", "0.8.1", &[A]);
    check(CratesIo, "arrow2", "0.8.2", &[]);
    check(CratesIo, "arrow2", "0.9.1", &[A]);
    check(CratesIo, "arrow2", "0.9.2", &[]);
    check(CratesIo, "arrow2", "0.10.0", &[]);
    check(CratesIo, "arrow2", "0.11.0", &[]);
    // 0069: lettre [0.7.0, 0.7.1), [0.8.0, 0.8.4), [0.9.0, 0.9.5),
    // [0.10.0-alpha.1, 0.10.0-alpha.4).
    const L: &str = "RUSTSEC-2020-0069";
    check(CratesIo, "lettre", "0.6.9", &[]);
    check(CratesIo, "lettre", "0.7.0", &[L]);
    check(CratesIo, "lettre", "0.9.4", &[L]);
    check(CratesIo, "lettre", "0.9.5", &[]);
    check(CratesIo, "lettre", "0.10.0-alpha.0", &[]);
    check(CratesIo, "lettre", "0.10.0-alpha.1", &[L]);
    check(CratesIo, "lettre", "0.10.0-alpha.3", &[L]);
    check(CratesIo, "lettre", "0.10.0-alpha.4", &[]);
    check(CratesIo, "lettre", "0.10.0", &[]);
    // Build metadata does not matter.
    check(CratesIo, "lettre", "0.9.4+build.7", &[L]);
    // 0053: dirs, withdrawn.
    check(CratesIo, "dirs", "1.0.0", &[]);
    // A leading `v` is tolerated, as osv.dev tolerates it.
    check(CratesIo, "lettre", "v0.9.4", &[L]);
    check_err(index(), CratesIo, "lettre", "=0.9.4", MatchErrorCode::InvalidPackageVersion, L);
}

// ---------------------------------------------------------------- RubyGems

#[test]
fn rubygems_prereleases_and_segments() {
    // fwhr: actionpack [6.1.0, 6.1.7.8), [7.0.0, 7.0.8.4), [7.1.0, "7.1.3.4, 7.1.4 "),
    // [7.2.0.beta1, 7.2.0.beta2) + versions [7.2.0.beta1].
    // 9822: actionpack and rails [7.0.0, 7.0.8.1), [7.1.0, 7.1.3.1).
    const FWHR: &str = "GHSA-fwhr-88qx-h9g7";
    const N9822: &str = "GHSA-9822-6m93-xqf4";
    check(RubyGems, "actionpack", "6.0.9", &[]);
    check(RubyGems, "actionpack", "6.1.0", &[FWHR]);
    check(RubyGems, "actionpack", "6.1.7.7", &[FWHR]);
    check(RubyGems, "actionpack", "6.1.7.8", &[]);
    check(RubyGems, "actionpack", "7.0.0.rc1", &[]); // a prerelease of 7.0.0 sorts below it
    check(RubyGems, "actionpack", "7.0.0", &[N9822, FWHR]);
    check(RubyGems, "actionpack", "7.0.8", &[N9822, FWHR]);
    check(RubyGems, "actionpack", "7.0.8.0", &[N9822, FWHR]);
    check(RubyGems, "actionpack", "7.0.8.1", &[FWHR]);
    check(RubyGems, "actionpack", "7.0.8.4", &[]);
    check(RubyGems, "actionpack", "7.2.0.beta1", &[FWHR]);
    check(RubyGems, "rails", "7.1.3", &[N9822]);
    check(RubyGems, "rails", "7.1.3.1", &[]);
    // 65f5: rack [1.5.0, 2.0.9.2), [2.1.0.0, 2.1.4.2), [2.2.0.0, 2.2.6.2), [3.0.0.0, 3.0.4.1).
    const R: &str = "GHSA-65f5-mfpf-vfhj";
    check(RubyGems, "rack", "1.4.7", &[]);
    check(RubyGems, "rack", "1.5.0", &[R]);
    check(RubyGems, "rack", "2.0.9.1", &[R]);
    check(RubyGems, "rack", "2.0.9.2", &[]);
    check(RubyGems, "rack", "2.1.0", &[R]); // 2.1.0 == 2.1.0.0
    check(RubyGems, "rack", "2.2.6.1", &[R]);
    check(RubyGems, "rack", "2.2.6.2", &[]);
    check(RubyGems, "rack", "3.0.0.beta1", &[]);
    check(RubyGems, "rack", "3.0.0", &[R]);
    check(RubyGems, "rack", "3.0.4", &[R]);
    check(RubyGems, "rack", "3.0.4.1", &[]);
    // hv5j: uri [0.12.0, 0.12.1), [0.11.0, 0.11.1), [0.10.1, 0.10.2), [0, 0.10.0.1).
    const U: &str = "GHSA-hv5j-3h9f-99c2";
    check(RubyGems, "uri", "0.9.9", &[U]);
    check(RubyGems, "uri", "0.10.0", &[U]);
    check(RubyGems, "uri", "0.10.0.1", &[]);
    check(RubyGems, "uri", "0.10.1", &[U]);
    check(RubyGems, "uri", "0.10.2", &[]);
    check(RubyGems, "uri", "0.12.0", &[U]);
    check(RubyGems, "uri", "0.12.1", &[]);
    check(RubyGems, "uri", "0.13.0", &[]);
    // 3hhc: activerecord [7.0.0, 7.0.3.1), [6.1.0, 6.1.6.1), [6.0.0, 6.0.5.1), [0, 5.2.8.1).
    const A: &str = "GHSA-3hhc-qp5v-9p2j";
    check(RubyGems, "activerecord", "5.2.8", &[A]);
    check(RubyGems, "activerecord", "5.2.8.1", &[]);
    check(RubyGems, "activerecord", "5.2.9", &[]);
    check(RubyGems, "activerecord", "6.0.5", &[A]);
    check(RubyGems, "activerecord", "6.0.5.1", &[]);
    check(RubyGems, "activerecord", "6.1.6.1", &[]);
    check(RubyGems, "activerecord", "7.0.0.rc1", &[]);
    check(RubyGems, "activerecord", "7.0.3", &[A]);
    check(RubyGems, "activerecord", "7.0.3.1", &[]);
}

#[test]
fn an_unreadable_event_blocks_only_versions_it_could_decide() {
    // fwhr's third entry is [7.1.0, fixed "7.1.3.4, 7.1.4 "): the fixed
    // version is unreadable, so every actionpack version at or above 7.1.0
    // that nothing else in fwhr marks affected is undecidable. Below 7.1.0
    // the answer does not depend on it (tested above).
    const FWHR: &str = "GHSA-fwhr-88qx-h9g7";
    for v in ["7.1.0", "7.1.3", "7.1.3.4", "7.2.0.beta2", "7.2.1", "8.0.0"] {
        check_err(index(), RubyGems, "actionpack", v, MatchErrorCode::InvalidEventVersion, FWHR);
    }
    // `evaluate` still reports what could be decided.
    let e = index().evaluate(&Package::new(RubyGems, "actionpack", "7.1.3"));
    assert_eq!(e.affected.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["GHSA-9822-6m93-xqf4"]);
    assert_eq!(e.errors.len(), 1);
    assert!(e.errors[0].message.contains("7.1.3.4, 7.1.4"), "{}", e.errors[0]);
    assert!(e.errors[0].to_string().starts_with("GHSA-fwhr-88qx-h9g7: RubyGems/actionpack@7.1.3: "));
}

// ---------------------------------------------------------------- fixed_versions

#[test]
fn fixed_versions_for_reports() {
    let fixed = |id: &str, eco, name: &str, version: &str| {
        fixed_versions(index().get(id).unwrap(), &Package::new(eco, name, version))
    };
    assert_eq!(fixed("GHSA-r683-j2x4-v87g", Npm, "node-fetch", "2.6.0"), ["2.6.7", "3.1.1"]);
    assert_eq!(fixed("GHSA-r683-j2x4-v87g", Npm, "node-fetch", "3.0.0"), ["3.1.1"]);
    assert_eq!(fixed("RUSTSEC-2020-0069", CratesIo, "lettre", "0.10.0-alpha.2"), ["0.10.0-alpha.4"]);
    assert_eq!(
        fixed("GO-2024-2916", Go, "github.com/goharbor/harbor", "v2.9.1+incompatible"),
        ["2.9.4+incompatible", "2.10.2+incompatible"]
    );
    assert_eq!(fixed("GHSA-65f5-mfpf-vfhj", RubyGems, "rack", "2.1.0"), ["2.1.4.2"]);
    assert_eq!(fixed("PYSEC-2021-150", PyPI, "TensorFlow", "2.3.0"), ["2.3.4", "2.4.3"]);
    // Not affected, last_affected only, versions list only.
    assert!(fixed("GHSA-r683-j2x4-v87g", Npm, "node-fetch", "3.1.1").is_empty());
    assert!(fixed("GHSA-29mw-wpgm-hmr9", Npm, "lodash.trim", "4.5.0").is_empty());
    assert!(fixed("PYSEC-2024-1", PyPI, "gratient", "0.5").is_empty());
    assert!(fixed("GHSA-29mw-wpgm-hmr9", Npm, "lodash", "4.17.0") == ["4.17.21"]);
}

// ---------------------------------------------------------------- hand-written

#[test]
fn limit_events() {
    let index = Index::new(vec![
        one(
            "L-1",
            "npm",
            "a",
            json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"limit": "2.0.0"}]}]),
        ),
        one(
            "L-2",
            "npm",
            "b",
            json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"limit": "*"}]}]),
        ),
        one(
            "L-3",
            "npm",
            "c",
            json!([{"type": "SEMVER", "events": [
                {"introduced": "1.0.0"}, {"limit": "1.5.0"}, {"limit": "3.0.0"}, {"fixed": "2.5.0"}]}]),
        ),
        one(
            "L-4",
            "npm",
            "d",
            json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"limit": "x"}]}]),
        ),
    ]);
    let ids = |name: &str, v: &str| ids(&index, Npm, name, v);
    assert_eq!(ids("a", "0.9.0"), [""; 0]);
    assert_eq!(ids("a", "1.0.0"), ["L-1"]);
    assert_eq!(ids("a", "1.9.9"), ["L-1"]);
    assert_eq!(ids("a", "2.0.0"), [""; 0]); // limit is exclusive
    assert_eq!(ids("b", "99.0.0"), ["L-2"]);
    assert_eq!(ids("c", "2.0.0"), ["L-3"]); // below one of the limits
    assert_eq!(ids("c", "2.5.0"), [""; 0]);
    assert_eq!(ids("c", "3.0.0"), [""; 0]);
    // An unreadable limit: decided below `introduced`, not above it.
    assert_eq!(ids("d", "0.5.0"), [""; 0]);
    check_err(&index, Npm, "d", "1.5.0", MatchErrorCode::InvalidEventVersion, "L-4");
}

#[test]
fn unknown_range_type_and_bad_ranges_are_errors() {
    let index = Index::new(vec![
        one("U-1", "npm", "a", json!([{"type": "DATE", "events": [{"introduced": "2020-01-01"}]}])),
        one("U-2", "npm", "b", json!([{"type": "ECOSYSTEM", "events": []}])),
        one("U-3", "npm", "c", json!([{"type": "ECOSYSTEM", "events": [{"fixed": "1.0.0"}]}])),
        one(
            "U-4",
            "npm",
            "d",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "banana"}]}]),
        ),
        one(
            "U-5",
            "npm",
            "e",
            json!([{"type": "ECOSYSTEM", "events": [{"introduced": "2.x"}, {"fixed": "3.0.0"}]}]),
        ),
        one(
            "U-6",
            "npm",
            "f",
            json!([{"type": "GIT", "repo": "https://example.com/r", "events": [{"introduced": "0"}]}]),
        ),
        one(
            "U-8",
            "npm",
            "h",
            json!([{"type": "ECOSYSTEM", "events": [{"fixed": "3.0.0"}, {"introduced": "2.x"}]}]),
        ),
    ]);
    check_err(&index, Npm, "a", "1.0.0", MatchErrorCode::UnknownRangeType, "U-1");
    check_err(&index, Npm, "b", "1.0.0", MatchErrorCode::InvalidRange, "U-2");
    check_err(&index, Npm, "c", "0.1.0", MatchErrorCode::InvalidRange, "U-3");
    // introduced 0, fixed unreadable: every version is at or above 0.
    check_err(&index, Npm, "d", "0.0.1", MatchErrorCode::InvalidEventVersion, "U-4");
    // introduced unreadable, then fixed 3.0.0: below 3.0.0 it may or may not
    // have started; at 3.0.0 the fix comes last whatever the introduced
    // version is (ties keep listed order); above it, a later introduced
    // could reopen the range.
    check_err(&index, Npm, "e", "2.5.0", MatchErrorCode::InvalidEventVersion, "U-5");
    assert_eq!(ids(&index, Npm, "e", "3.0.0"), [""; 0]);
    check_err(&index, Npm, "e", "3.0.1", MatchErrorCode::InvalidEventVersion, "U-5");
    // Listed the other way round, an introduced at 3.0.0 would sort after
    // the fix, so 3.0.0 is undecidable too.
    check_err(&index, Npm, "h", "3.0.0", MatchErrorCode::InvalidEventVersion, "U-8");
    // GIT ranges are skipped: a registry version has no commit.
    assert_eq!(ids(&index, Npm, "f", "1.0.0"), [""; 0]);

    // A `versions` hit decides, whatever the broken range.
    let listed = advisory(json!({
        "id": "U-7", "modified": "2024-01-01T00:00:00Z",
        "affected": [{"package": {"ecosystem": "npm", "name": "g"}, "versions": ["1.2.3"],
                      "ranges": [{"type": "DATE", "events": [{"introduced": "x"}]}]}]
    }));
    let index = Index::new(vec![listed]);
    assert_eq!(ids(&index, Npm, "g", "1.2.3"), ["U-7"]);
    check_err(&index, Npm, "g", "1.2.4", MatchErrorCode::UnknownRangeType, "U-7");
    // Every code has its stable spelling.
    let codes = [
        MatchErrorCode::UnknownRangeType,
        MatchErrorCode::InvalidEventVersion,
        MatchErrorCode::InvalidRange,
        MatchErrorCode::InvalidPackageVersion,
    ];
    let spelled: Vec<_> = codes.iter().map(|c| serde_json::to_value(c).unwrap()).collect();
    assert_eq!(
        spelled,
        ["unknown_range_type", "invalid_event_version", "invalid_range", "invalid_package_version"]
    );
    assert!(codes.iter().all(|c| serde_json::to_value(c).unwrap() == c.as_str()));
}

#[test]
fn unreadable_package_versions_are_errors_only_when_compared() {
    let index = Index::new(vec![
        one(
            "P-1",
            "npm",
            "a",
            json!([{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}]),
        ),
        one("P-2", "PyPI", "b", json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}]}])),
    ]);
    check_err(&index, Npm, "a", "latest", MatchErrorCode::InvalidPackageVersion, "P-1");
    // A missing patch reads as 0 (osv.dev's leniency).
    assert_eq!(ids(&index, Npm, "a", "1.0"), ["P-1"]);
    // No advisory names the package: nothing to compare, nothing to report.
    assert_eq!(ids(&index, Npm, "unrelated", "latest"), [""; 0]);
    // A SEMVER range in a PyPI advisory needs a SemVer version.
    assert_eq!(ids(&index, PyPI, "B", "1.0.0"), ["P-2"]);
    assert_eq!(ids(&index, PyPI, "b", "1.0"), ["P-2"]);
    check_err(&index, PyPI, "b", "1.0.post1", MatchErrorCode::InvalidPackageVersion, "P-2");
}

#[test]
fn event_order_ties_and_last_affected() {
    let index = Index::new(vec![
        // Listed out of order.
        one(
            "T-1",
            "npm",
            "a",
            json!([{"type": "SEMVER", "events": [{"fixed": "2.0.0"}, {"introduced": "1.0.0"}]}]),
        ),
        // PYSEC-2022-236's events, without its versions list.
        one(
            "T-2",
            "PyPI",
            "b",
            json!([{"type": "ECOSYSTEM", "events": [
                {"introduced": "0"}, {"fixed": "3.1.1"}, {"introduced": "3.2.0"},
                {"fixed": "3.2.2"}, {"introduced": "3.1.1"}, {"fixed": "3.1.3"}]}]),
        ),
        // introduced X then fixed X: nothing.
        one(
            "T-3",
            "npm",
            "c",
            json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "1.0.0"}]}]),
        ),
        // introduced X then last_affected X: X alone.
        one(
            "T-4",
            "npm",
            "d",
            json!([{"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"last_affected": "1.0.0"}]}]),
        ),
        // Two advisory entries for one package, one of them matching.
        advisory(json!({"id": "T-5", "modified": "2024-01-01T00:00:00Z", "affected": [
            {"package": {"ecosystem": "npm", "name": "e"},
             "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.0.0"}]}]},
            {"package": {"ecosystem": "npm", "name": "e"},
             "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "2.0.0"}]}]}]})),
    ]);
    assert_eq!(ids(&index, Npm, "a", "0.9.0"), [""; 0]);
    assert_eq!(ids(&index, Npm, "a", "1.5.0"), ["T-1"]);
    assert_eq!(ids(&index, Npm, "a", "2.0.0"), [""; 0]);
    assert_eq!(ids(&index, PyPI, "b", "3.1.0"), ["T-2"]);
    assert_eq!(ids(&index, PyPI, "b", "3.1.1"), ["T-2"]);
    assert_eq!(ids(&index, PyPI, "b", "3.1.3"), [""; 0]);
    assert_eq!(ids(&index, Npm, "c", "1.0.0"), [""; 0]);
    assert_eq!(ids(&index, Npm, "c", "1.0.1"), [""; 0]);
    assert_eq!(ids(&index, Npm, "d", "0.9.9"), [""; 0]);
    assert_eq!(ids(&index, Npm, "d", "1.0.0"), ["T-4"]);
    assert_eq!(ids(&index, Npm, "d", "1.0.1"), [""; 0]);
    // Listed once, though two of its entries match.
    assert_eq!(ids(&index, Npm, "e", "0.5.0"), ["T-5"]);
    assert_eq!(ids(&index, Npm, "e", "1.5.0"), ["T-5"]);
}

#[test]
fn duplicate_ids_keep_the_latest_modified() {
    let at = |modified: &str, fixed: &str| {
        advisory(json!({"id": "D-1", "modified": modified, "affected": [
            {"package": {"ecosystem": "npm", "name": "a"},
             "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": fixed}]}]}]}))
    };
    let index = Index::new(vec![
        at("2024-01-01T00:00:00Z", "1.0.0"),
        at("2024-01-01T00:00:00.5Z", "2.0.0"),
        at("2023-12-31T23:59:59.999Z", "3.0.0"),
    ]);
    assert_eq!((index.len(), index.duplicates()), (1, 2));
    assert_eq!(ids(&index, Npm, "a", "1.5.0"), ["D-1"]);
    assert_eq!(ids(&index, Npm, "a", "2.5.0"), [""; 0]);
}

// ---------------------------------------------------------------- versions

fn parse(scheme: Scheme, s: &str) -> Version {
    scheme.parse(s).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
fn ascending(scheme: Scheme, list: &[&str]) {
    for pair in list.windows(2) {
        assert_eq!(parse(scheme, pair[0]).cmp(&parse(scheme, pair[1])), Ordering::Less, "{pair:?}");
    }
}

#[track_caller]
fn equal(scheme: Scheme, list: &[&str]) {
    for pair in list.windows(2) {
        assert_eq!(parse(scheme, pair[0]), parse(scheme, pair[1]), "{pair:?}");
    }
}

#[test]
fn pep440_examples() {
    // PEP 440, "Summary of permitted suffixes and relative ordering".
    ascending(
        Scheme::Pep440,
        &[
            "1.0.dev456",
            "1.0a1",
            "1.0a2.dev456",
            "1.0a12.dev456",
            "1.0a12",
            "1.0b1.dev456",
            "1.0b2",
            "1.0b2.post345.dev456",
            "1.0b2.post345",
            "1.0rc1.dev456",
            "1.0rc1",
            "1.0",
            "1.0.post456.dev34",
            "1.0.post456",
            "1.0.15",
            "1.1.dev1",
        ],
    );
    ascending(Scheme::Pep440, &["2.0", "2013.10", "1!1.0"]);
    // Normalization (PEP 440 "Normalization").
    equal(Scheme::Pep440, &["1.0", "1.0.0", "1", "v1.0", " 1.0 ", "1.0.0.0"]);
    equal(Scheme::Pep440, &["1.0a1", "1.0.a1", "1.0-alpha1", "1.0_a_1", "1.0ALPHA1"]);
    equal(Scheme::Pep440, &["1.0rc1", "1.0c1", "1.0pre1", "1.0preview1"]);
    equal(Scheme::Pep440, &["1.0.post1", "1.0-1", "1.0post1", "1.0.rev1", "1.0-r1"]);
    equal(Scheme::Pep440, &["1.0.dev0", "1.0.dev", "1.0-dev0"]);
    equal(Scheme::Pep440, &["1.0+ubuntu-1", "1.0+ubuntu.1", "1.0+ubuntu_1"]);
    // Local versions sort above their public version (PEP 440, "Local
    // version identifiers"); matching ignores the label where a bound has
    // none (see `local_versions_match_as_their_public_version`).
    ascending(Scheme::Pep440, &["1.0", "1.0+abc.5", "1.0+abc.7", "1.0+5", "1.0.post1"]);
    for bad in ["", "1.0-n653", "2019-09-12", "abc", "1.0+", "1..0"] {
        assert!(Scheme::Pep440.parse(bad).is_err(), "{bad:?}");
    }
}

fn pep440_fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pep440").join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// packaging's `VERSIONS` list (tests/test_version.py): every version
/// strictly below the next, every one equal to itself and to its own
/// normalized spelling.
#[test]
fn pep440_orders_packagings_versions_list() {
    let text = pep440_fixture("packaging-versions.txt");
    let list: Vec<&str> = fixture_lines(&text).collect();
    assert_eq!(list.len(), 92);
    let mut wrong = Vec::new();
    for pair in list.windows(2) {
        let (a, b) = (parse(Scheme::Pep440, pair[0]), parse(Scheme::Pep440, pair[1]));
        if a.cmp(&b) != Ordering::Less || b.cmp(&a) != Ordering::Greater {
            wrong.push(format!("{} < {}: got {:?}", pair[0], pair[1], a.cmp(&b)));
        }
    }
    assert!(wrong.is_empty(), "{} pairs out of order:\n{}", wrong.len(), wrong.join("\n"));
}

/// packaging's normalization cases (test_normalized_versions): each
/// spelling equals its normalized form, and both hash alike.
#[test]
fn pep440_normalizes_as_packaging_does() {
    let text = pep440_fixture("packaging-normalized.txt");
    let mut pairs: Vec<(String, String)> = fixture_lines(&text)
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_owned(), b.to_owned())
        })
        .collect();
    assert_eq!(pairs.len(), 100);
    // The two with whitespace around them (Python's `\s`: Unicode white
    // space, U+202F and U+2029 among it).
    pairs.push(("   v1.0\t\n".to_owned(), "1.0".to_owned()));
    pairs.push(("\u{202f}1.0\t\u{2029}\n ".to_owned(), "1.0".to_owned()));
    for (spelling, normalized) in &pairs {
        let (a, b) = (parse(Scheme::Pep440, spelling), parse(Scheme::Pep440, normalized));
        assert_eq!(a, b, "{spelling:?} is {normalized:?}");
        assert_eq!(hash_of(&a), hash_of(&b), "{spelling:?}");
    }
    // packaging's invalid versions stay invalid.
    for bad in [
        "french toast",
        "1.0+a+",
        "1.0++",
        "1.0+_foobar",
        "1.0+foo&asd",
        "1.0+1+1",
        "1. 0",
        "1 .0",
        "1. 0a1",
        "1 .0a1",
        "1.0 a1",
        "1.0a 1",
        "\u{660}\u{661}\u{662}.\u{663}\u{664}\u{665}.\u{666}\u{667}\u{668}\u{669}",
        ".",
        "..",
        "1..0",
        "1.0.",
        ".1.0",
        "1..2.3",
        "1.0+\u{130}",
    ] {
        assert!(Scheme::Pep440.parse(bad).is_err(), "{bad:?}");
    }
}

/// Hand-written `A < B` / `A = B` / `A > B` lines from PEP 440 (the format
/// of osv-scalibr's `pypi-versions.txt`), each checked against packaging.
#[test]
fn pep440_pairs_from_the_pep() {
    let text = pep440_fixture("pypi-pairs.txt");
    let mut wrong = Vec::new();
    let mut count = 0;
    for line in fixture_lines(&text) {
        let parts: Vec<&str> = line.split(' ').collect();
        let [a, op, b] = parts[..] else { panic!("{line:?}") };
        let want = match op {
            "<" => Ordering::Less,
            "=" => Ordering::Equal,
            ">" => Ordering::Greater,
            _ => panic!("{line:?}"),
        };
        let (x, y) = (parse(Scheme::Pep440, a), parse(Scheme::Pep440, b));
        if x.cmp(&y) != want || y.cmp(&x) != want.reverse() || (x == y) != (want == Ordering::Equal) {
            wrong.push(format!("{line}: got {:?}", x.cmp(&y)));
        }
        count += 1;
    }
    assert_eq!(count, 108);
    assert!(wrong.is_empty(), "{} pairs wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// 4,000 random spellings from a PEP 440 grammar (epochs, `v`, leading
/// zeros, every pre/post/dev spelling and separator, implicit post-releases,
/// local labels, numbers past 64 bits), sorted by packaging.version.Version:
/// see `tests/fixtures/pep440/generate.py`. Each line is one version (its
/// spellings equal), strictly below the next line's.
///
/// Every spelling reads and orders as packaging orders it, those with a
/// number above `u64::MAX` included (PEP 440 bounds no number; they were
/// refused while versions were read by `pep440_rs`, which holds 64 bits).
#[test]
fn pep440_agrees_with_packaging_on_generated_versions() {
    let text = pep440_fixture("pep440-sorted.txt");
    let lines: Vec<Vec<&str>> = fixture_lines(&text).map(|l| l.split(' ').collect()).collect();
    assert!(lines.len() > 3500, "{}", lines.len());
    let mut wrong = Vec::new();
    let (mut compared, mut big) = (0, 0);
    let mut previous: Option<(Version, &str)> = None;
    for line in &lines {
        let mut versions: Vec<(Version, &str)> = Vec::new();
        for s in line {
            match Scheme::Pep440.parse(s) {
                Ok(v) => {
                    big += usize::from(has_number_past_u64(s));
                    versions.push((v, s));
                }
                Err(e) => wrong.push(format!("packaging reads {s:?}: {e}")),
            }
        }
        let Some((first, first_s)) = versions.first().cloned() else { continue };
        for (v, s) in &versions[1..] {
            if *v != first || hash_of(v) != hash_of(&first) {
                wrong.push(format!("{s} = {first_s}"));
            }
        }
        if let Some((p, ps)) = &previous
            && p.cmp(&first) != Ordering::Less
        {
            wrong.push(format!("{ps} < {first_s}: got {:?}", p.cmp(&first)));
        }
        compared += versions.len();
        previous = Some((first, first_s));
    }
    assert!(wrong.is_empty(), "{} disagreements:\n{}", wrong.len(), wrong.join("\n"));
    assert!(compared > 3800 && big > 0, "{compared} compared, {big} with a number past 64 bits");
}

/// A run of digits whose value is above `u64::MAX`.
fn has_number_past_u64(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_digit()).any(|run| {
        let digits = run.trim_start_matches('0');
        digits.len() > 20 || (digits.len() == 20 && digits > "18446744073709551615")
    })
}

#[test]
fn semver_schemes() {
    ascending(
        Scheme::SemVer,
        &[
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.10.0",
        ],
    );
    equal(Scheme::SemVer, &["1.0.0+a", "1.0.0+b", "1.0.0"]);
    // npm: node-semver's clean() drops whitespace and a leading run of = and v.
    equal(Scheme::Npm, &["1.2.3", "v1.2.3", "=1.2.3", "=v1.2.3", "  v1.2.3 "]);
    // osv.dev's leniency: a missing minor or patch is 0, a leading v is dropped.
    equal(Scheme::Npm, &["1.2", "1.2.0", "v1.2"]);
    equal(Scheme::SemVer, &["1.2.0", "1.2", "v1.2.0", "v1.2"]);
    for bad in ["1.2.x", "^1.2.3", "01.2.3", "1.2.3-01", "latest", "", "1.2.3.4"] {
        assert!(Scheme::Npm.parse(bad).is_err(), "npm {bad:?}");
    }
    for bad in ["=1.2.3", " 1.2.3", "vv1.2.3"] {
        assert!(Scheme::SemVer.parse(bad).is_err(), "semver {bad:?}");
    }
    // Go: optional v; +incompatible ignored; pseudo-versions by time.
    equal(Scheme::Go, &["v2.0.0+incompatible", "2.0.0", "v2.0.0"]);
    ascending(
        Scheme::Go,
        &[
            "v0.0.0-20190101000000-ffffffffffff",
            "v0.0.0-20200101000000-000000000000",
            "v0.0.0",
            "v1.2.3",
            "v1.2.4-0.20200101000000-abcdefabcdef",
            "v1.2.4-pre",
            "v1.2.4-pre.0.20200101000000-abcdefabcdef",
            "v1.2.4",
        ],
    );
    assert!(Scheme::Go.parse("vv1.2.3").is_err());
    assert_eq!(compare(Go, "v1.10.0", "1.9.0").unwrap(), Ordering::Greater);
    // golang.org/x/mod/semver: `v1` and `v1.2` are shorthands, without suffixes.
    assert_eq!(compare(Go, "v1", "v1.0.0").unwrap(), Ordering::Equal);
    assert_eq!(compare(Go, "v1.2", "v1.2.0").unwrap(), Ordering::Equal);
    assert!(compare(Go, "v1.2-pre", "v1.2.0").is_err());
    // Numbers of any length compare as numbers (x/mod/semver's compareInt).
    assert_eq!(
        compare(Go, "v1.99999999999999999999.0", "v1.18446744073709551615.0").unwrap(),
        Ordering::Greater
    );
    assert_eq!(compare(Go, "v1.0.0-18446744073709551616", "v1.0.0-9").unwrap(), Ordering::Greater);
}

#[test]
fn rubygems_examples() {
    // lib/rubygems/version.rb's class comment: 1.0 > 1.0.b1 > 1.0.a.2 > 0.9.
    ascending(Scheme::RubyGems, &["0.9", "1.0.a.2", "1.0.b1", "1.0"]);
    ascending(
        Scheme::RubyGems,
        &["0.9", "1.0.a.2", "1.0.a9", "1.0.a10", "1.0.b1", "1.0.b.2", "1.0.b10", "1.0", "1.0.1"],
    );
    ascending(Scheme::RubyGems, &["1.9.3", "1.9.3.1", "1.10", "2.0.0.rc1", "2.0.0.rc2", "2.0.0"]);
    ascending(Scheme::RubyGems, &["7.2.0.beta1", "7.2.0.beta2", "7.2.0.rc1", "7.2.0"]);
    ascending(Scheme::RubyGems, &["1.0.A", "1.0.a"]); // letters compare bytewise
    ascending(Scheme::RubyGems, &["1.0-1", "1.0"]); // `-` is `.pre.`: a prerelease
    // Trailing zeros, zeros before the first letter, and digit/letter splits.
    equal(Scheme::RubyGems, &["1", "1.0", "1.0.0", " 1.0 ", "1.00"]);
    equal(Scheme::RubyGems, &["1.0.a", "1.a", "1.0.0.a", "1.a.0"]);
    equal(Scheme::RubyGems, &["1.0.b1", "1.0.b.1"]);
    equal(Scheme::RubyGems, &["1.0-1", "1.0.pre.1"]);
    equal(Scheme::RubyGems, &["2.1.0.0", "2.1"]);
    equal(Scheme::RubyGems, &["10000000000000000000000001.0", "10000000000000000000000001"]);
    for bad in ["", "  ", "a", "1.", ".1", "1..2", "1.0-", "1.0+build", "1,0", "7.1.3.4, 7.1.4 "] {
        assert!(Scheme::RubyGems.parse(bad).is_err(), "{bad:?}");
    }
}

// ---------------------------------------------------------------- properties

fn semver_string() -> impl Strategy<Value = String> {
    let ident = prop::sample::select(vec!["alpha", "beta", "rc", "0", "1", "2", "10", "x-y", "0a"]);
    (0..3u64, 0..3u64, 0..3u64, prop::collection::vec(ident, 0..3), prop::option::of(Just("incompatible")))
        .prop_map(|(a, b, c, pre, build)| {
            let mut s = format!("{a}.{b}.{c}");
            if !pre.is_empty() {
                s.push('-');
                s.push_str(&pre.join("."));
            }
            if let Some(build) = build {
                s.push('+');
                s.push_str(build);
            }
            s
        })
}

fn pep440_string() -> impl Strategy<Value = String> {
    let release = prop::collection::vec(0..3u32, 1..4);
    let pre =
        prop::option::of((prop::sample::select(vec!["a", "b", "rc", "alpha", "c", "preview"]), 0..3u32));
    let post = prop::option::of((prop::sample::select(vec![".post", "-", "post"]), 0..3u32));
    let dev = prop::option::of(0..3u32);
    let local =
        prop::option::of(prop::collection::vec(prop::sample::select(vec!["abc", "1", "ubuntu", "7"]), 1..3));
    (prop::bool::weighted(0.1), release, pre, post, dev, local).prop_map(
        |(epoch, release, pre, post, dev, local)| {
            let mut s = if epoch { "1!".to_owned() } else { String::new() };
            s.push_str(&release.iter().map(u32::to_string).collect::<Vec<_>>().join("."));
            if let Some((kind, n)) = pre {
                s.push_str(&format!("{kind}{n}"));
            }
            if let Some((sep, n)) = post {
                s.push_str(&format!("{sep}{n}"));
            }
            if let Some(n) = dev {
                s.push_str(&format!(".dev{n}"));
            }
            if let Some(local) = local {
                s.push('+');
                s.push_str(&local.join("."));
            }
            s
        },
    )
}

fn gem_string() -> impl Strategy<Value = String> {
    let segment = prop::sample::select(vec![
        "0", "1", "2", "00", "10", "a", "b", "pre", "rc", "beta", "b1", "rc2", "A",
    ]);
    let suffix = prop::option::of(prop::sample::select(vec!["1", "beta", "beta.1", "x-y"]));
    (0..3u32, prop::collection::vec(segment, 0..4), suffix).prop_map(|(first, rest, suffix)| {
        let mut s = first.to_string();
        for seg in rest {
            s.push('.');
            s.push_str(seg);
        }
        if let Some(suffix) = suffix {
            s.push('-');
            s.push_str(suffix);
        }
        s
    })
}

fn hash_of(v: &Version) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// Antisymmetry, transitivity, and equality agreeing with the order (and
/// with `Hash`), over a triple.
fn total_order(a: &Version, b: &Version, c: &Version) -> Result<(), TestCaseError> {
    for (x, y) in [(a, b), (b, c), (a, c)] {
        prop_assert_eq!(x.cmp(y), y.cmp(x).reverse());
        prop_assert_eq!(x == y, x.cmp(y) == Ordering::Equal);
        prop_assert_eq!(x.partial_cmp(y), Some(x.cmp(y)));
        if x == y {
            prop_assert_eq!(hash_of(x), hash_of(y));
        }
    }
    if a <= b && b <= c {
        prop_assert!(a <= c);
    }
    if a < b && b <= c || a <= b && b < c {
        prop_assert!(a < c);
    }
    if a == b && b == c {
        prop_assert!(a == c);
    }
    Ok(())
}

proptest! {
    #[test]
    fn semver_is_a_total_order(a in semver_string(), b in semver_string(), c in semver_string()) {
        let p = |s: &str| Scheme::SemVer.parse(s).unwrap();
        total_order(&p(&a), &p(&b), &p(&c))?;
        // Go and npm read the same strings (with their prefixes) the same way.
        prop_assert_eq!(Scheme::Go.parse(&format!("v{a}")).unwrap(), p(&a));
        prop_assert_eq!(Scheme::Npm.parse(&format!("=v{a}")).unwrap(), p(&a));
    }

    #[test]
    fn pep440_is_a_total_order(a in pep440_string(), b in pep440_string(), c in pep440_string()) {
        let p = |s: &str| Scheme::Pep440.parse(s).unwrap();
        total_order(&p(&a), &p(&b), &p(&c))?;
    }

    #[test]
    fn rubygems_is_a_total_order(a in gem_string(), b in gem_string(), c in gem_string()) {
        let p = |s: &str| Scheme::RubyGems.parse(s).unwrap();
        total_order(&p(&a), &p(&b), &p(&c))?;
    }

    #[test]
    fn loading_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = osv::from_json_bytes("fuzz.json", &bytes);
    }

    #[test]
    fn loading_and_matching_osv_shaped_json_never_panics(
        value in osv_shaped(),
        name in prop::sample::select(vec!["a", "A", "b"]),
        version in prop::sample::select(vec!["0", "1.0.0", "v1.0.0", "1.0", "1.0.a", "x", "", "2.0.0-rc.1"]),
    ) {
        if let Ok(a) = osv::from_json_bytes("fuzz.json", value.to_string().as_bytes()) {
            let index = Index::new(vec![a.clone()]);
            for eco in [Npm, PyPI, Go, CratesIo, RubyGems] {
                let package = Package::new(eco, name, version);
                let _ = index.evaluate(&package);
                let _ = fixed_versions(&a, &package);
            }
        }
    }

    #[test]
    fn loading_arbitrary_json_never_panics(value in arbitrary_json()) {
        let _ = osv::from_json_bytes("fuzz.json", value.to_string().as_bytes());
    }
}

/// The OSV "Evaluation" pseudo-code, written again as plainly as possible
/// (sorting each range's events stably by version, `introduced: "0"`
/// lowest), for advisories whose every version reads: the model the index
/// is checked against. `None` when something does not read.
fn reference(a: &Advisory, p: &Package) -> Option<bool> {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum B {
        Zero,
        V(Version),
        Inf,
    }
    if a.withdrawn.is_some() {
        return Some(false);
    }
    let norm = |n: &str| {
        if p.ecosystem == PyPI { gatehouse_deps::package::normalize_pypi_name(n) } else { n.to_owned() }
    };
    let own = Scheme::of(p.ecosystem);
    let mut unknown = false;
    for affected in &a.affected {
        let Some(pkg) = &affected.package else { continue };
        if ecosystem_from_osv(&pkg.ecosystem) != Some(p.ecosystem) || norm(&pkg.name) != norm(&p.name) {
            continue;
        }
        for listed in &affected.versions {
            let same = match (own.parse(listed), own.parse(&p.version)) {
                (Ok(x), Ok(y)) => x == y,
                _ => *listed == p.version,
            };
            if same {
                return Some(true);
            }
        }
        for range in &affected.ranges {
            let scheme = match &range.kind {
                RangeType::Git => continue,
                RangeType::Semver => Scheme::semver_range(p.ecosystem),
                RangeType::Ecosystem => own,
                RangeType::Other(_) => {
                    unknown = true;
                    continue;
                }
            };
            let Ok(v) = scheme.parse(&p.version) else {
                unknown = true;
                continue;
            };
            let v = B::V(v);
            let mut events = Vec::new();
            let mut limits = Vec::new();
            let mut readable = range.events.iter().any(|e| matches!(e, Event::Introduced(_)));
            for e in &range.events {
                let b = match e {
                    Event::Introduced(x) if x == "0" => B::Zero,
                    Event::Limit(x) if x.contains('*') => B::Inf,
                    _ => match scheme.parse(e.version()) {
                        Ok(x) => B::V(x),
                        Err(_) => {
                            readable = false;
                            break;
                        }
                    },
                };
                match e {
                    Event::Limit(_) => limits.push(b),
                    _ => events.push((b, e)),
                }
            }
            if !readable {
                unknown = true;
                continue;
            }
            if !limits.is_empty() && !limits.iter().any(|l| v < *l) {
                continue;
            }
            events.sort_by(|x, y| x.0.cmp(&y.0)); // stable
            let mut vulnerable = false;
            for (b, e) in &events {
                match e {
                    Event::Introduced(_) if v >= *b => vulnerable = true,
                    Event::Fixed(_) if v >= *b => vulnerable = false,
                    Event::LastAffected(_) if v > *b => vulnerable = false,
                    _ => {}
                }
            }
            if vulnerable {
                return Some(true);
            }
        }
    }
    if unknown { None } else { Some(false) }
}

/// Advisories over a small pool of versions per ecosystem (so that ties,
/// boundaries and prereleases are frequent), with package versions from the
/// same pool.
fn pooled_case() -> impl Strategy<Value = (serde_json::Value, Ecosystem, Vec<&'static str>)> {
    let eco = prop::sample::select(vec![Npm, CratesIo, Go, PyPI, RubyGems]);
    eco.prop_flat_map(|eco| {
        let pool: Vec<&'static str> = match eco {
            Npm | CratesIo => vec!["0", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2.0", "2.0.0-0", "2.0.0", "*"],
            Go => vec!["0", "0.0.0-20200101000000-abcdefabcdef", "1.0.0", "1.0.1", "2.0.0+incompatible", "*"],
            PyPI => vec!["0", "1.0.dev0", "1.0rc1", "1.0", "1.0.post1", "1.0.1", "2.0", "*"],
            RubyGems => vec!["0", "1.0.a", "1.0", "1.0.0.1", "1.0.1", "2.0.rc1", "2.0", "*"],
        };
        let kind = prop::sample::select(vec!["introduced", "introduced", "fixed", "last_affected", "limit"]);
        let event = (kind, prop::sample::select(pool.clone())).prop_map(|(k, v)| json!({ k: v }));
        let range_type = if eco == Go || eco == CratesIo { "SEMVER" } else { "ECOSYSTEM" };
        let range = prop::collection::vec(event, 1..6).prop_map(move |events| json!({"type": range_type, "events": events}));
        let entry = (prop::collection::vec(range, 0..3), prop::collection::vec(prop::sample::select(pool.clone()), 0..2))
            .prop_map(move |(ranges, versions)| {
                json!({"package": {"ecosystem": eco.as_str(), "name": "p"}, "ranges": ranges, "versions": versions})
            });
        let versions: Vec<&'static str> = pool.iter().copied().filter(|v| *v != "*" && *v != "0").collect();
        (prop::collection::vec(entry, 1..3), Just(eco), Just(versions)).prop_map(|(affected, eco, versions)| {
            (json!({"id": "M-1", "modified": "2024-01-01T00:00:00Z", "affected": affected}), eco, versions)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// The index (pre-parsed bounds, integer positions, early exits) agrees
    /// with the plain pseudo-code wherever the pseudo-code has an answer.
    #[test]
    fn index_agrees_with_the_pseudo_code((value, eco, versions) in pooled_case()) {
        let a = osv::from_json_bytes("model.json", value.to_string().as_bytes()).unwrap();
        let index = Index::new(vec![a.clone()]);
        for v in versions {
            let v = if eco == Go { format!("v{v}") } else { v.to_owned() };
            let package = Package::new(eco, "p", &v);
            let got = index.affecting(&package).map(|found| !found.is_empty());
            // Where the model has no answer (an unreadable event that cannot
            // matter, say), the index may still decide, or report it.
            if let Some(want) = reference(&a, &package) {
                prop_assert_eq!(got.clone().ok(), Some(want), "{} {:?}", v, got);
            }
        }
    }
}

/// npm advisories whose events are drawn from a pool plus an unreadable
/// `"bad"` (at most two of them).
fn unreadable_case() -> impl Strategy<Value = serde_json::Value> {
    let pool = vec!["0", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2.0", "2.0.0", "*", "bad", "bad"];
    let kind = prop::sample::select(vec!["introduced", "introduced", "fixed", "last_affected", "limit"]);
    let event = (kind, prop::sample::select(pool)).prop_map(|(k, v)| json!({ k: v }));
    let range =
        prop::collection::vec(event, 1..6).prop_map(|events| json!({"type": "ECOSYSTEM", "events": events}));
    prop::collection::vec(range, 1..3)
        .prop_map(|ranges| {
            json!({"id": "B-1", "modified": "2024-01-01T00:00:00Z",
                   "affected": [{"package": {"ecosystem": "npm", "name": "p"}, "ranges": ranges}]})
        })
        .prop_filter("at most two unreadable events", |v| v.to_string().matches("\"bad\"").count() <= 2)
}

/// Every pool and package version, one version between each two of them,
/// one below all and one above all.
const GRID: [&str; 15] = [
    "0.0.1",
    "1.0.0-rc.1",
    "1.0.0-rc.2",
    "1.0.0",
    "1.0.1-0",
    "1.0.1",
    "1.0.2",
    "1.1.0",
    "1.1.1",
    "1.2.0",
    "1.3.0",
    "2.0.0",
    "2.1.0",
    "2.5.0",
    "3.0.0",
];

/// Every advisory obtained by giving each `"bad"` a version from the grid.
fn substitutions(value: &serde_json::Value) -> Vec<Advisory> {
    let text = value.to_string();
    let mut out = vec![text];
    while out[0].contains("\"bad\"") {
        out = out
            .iter()
            .flat_map(|t| GRID.iter().map(move |g| t.replacen("\"bad\"", &format!("\"{g}\""), 1)))
            .collect();
    }
    out.iter().map(|t| osv::from_json_bytes("sub.json", t.as_bytes()).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With unreadable events, the index decides exactly when every version
    /// the unreadable events could have gives the same answer: never a
    /// decision that some reading contradicts, and no error when none could.
    #[test]
    fn unreadable_events_decide_only_what_they_cannot_change(value in unreadable_case()) {
        let index = Index::new(vec![osv::from_json_bytes("b.json", value.to_string().as_bytes()).unwrap()]);
        let readings = substitutions(&value);
        for v in ["1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "1.2.0", "2.0.0", "2.5.0"] {
            let package = Package::new(Npm, "p", v);
            // The model has no answer where a `*` or "0" sits where it has no
            // special meaning; those readings are left out.
            let answers: Vec<bool> = readings.iter().filter_map(|a| reference(a, &package)).collect();
            let all_read = answers.len() == readings.len();
            match index.affecting(&package) {
                Ok(found) => {
                    let affected = !found.is_empty();
                    prop_assert!(answers.iter().all(|x| *x == affected), "{v}: {answers:?}");
                }
                Err(e) if e.code == MatchErrorCode::InvalidEventVersion => {
                    let split = answers.iter().any(|x| *x) && answers.iter().any(|x| !*x);
                    prop_assert!(split || !all_read, "{v}: {e}, readings {answers:?}");
                }
                Err(_) => {}
            }
        }
    }
}

fn arbitrary_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z0-9._*-]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        let key = prop::sample::select(vec![
            "id",
            "modified",
            "affected",
            "package",
            "ecosystem",
            "name",
            "ranges",
            "type",
            "events",
            "introduced",
            "fixed",
            "limit",
            "versions",
            "withdrawn",
            "x",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(key.prop_map(str::to_owned), inner, 0..5)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Advisory-shaped JSON: the right keys, with values drawn from small sets
/// of good and bad ones, so that most samples load and reach the matcher.
fn osv_shaped() -> impl Strategy<Value = serde_json::Value> {
    let version = prop::sample::select(vec![
        "0",
        "1.0.0",
        "1.0",
        "2.0.0-rc.1",
        "1.0.a",
        "x",
        "",
        "*",
        "v1.0.0",
        "1!2.0",
    ]);
    let event =
        (prop::sample::select(vec!["introduced", "fixed", "last_affected", "limit"]), version.clone())
            .prop_map(|(k, v)| json!({ k: v }));
    let range = (
        prop::sample::select(vec!["SEMVER", "ECOSYSTEM", "GIT", "DATE"]),
        prop::collection::vec(event, 0..5),
    )
        .prop_map(|(t, events)| json!({"type": t, "events": events}));
    let affected = (
        prop::sample::select(vec!["npm", "PyPI", "Go", "crates.io", "RubyGems", "Debian:11"]),
        prop::sample::select(vec!["a", "A", "b"]),
        prop::collection::vec(range, 0..3),
        prop::collection::vec(version, 0..3),
    )
        .prop_map(|(e, n, ranges, versions)| {
            json!({"package": {"ecosystem": e, "name": n}, "ranges": ranges, "versions": versions})
        });
    (prop::collection::vec(affected, 0..3), prop::bool::weighted(0.1)).prop_map(|(affected, withdrawn)| {
        let mut a = json!({"id": "F-1", "modified": "2024-01-01T00:00:00Z", "affected": affected});
        if withdrawn {
            a["withdrawn"] = json!("2024-01-02T00:00:00Z");
        }
        a
    })
}

#[test]
fn long_versions_parse_in_linear_time() {
    // A hostile lockfile line must not make parsing quadratic.
    let zeros = "0.".repeat(200_000);
    let start = std::time::Instant::now();
    for s in [format!("1.{zeros}0"), format!("{zeros}0.b"), format!("1.{zeros}1")] {
        let _ = Scheme::RubyGems.parse(&s);
        let _ = Scheme::Pep440.parse(&s);
        let _ = Scheme::Npm.parse(&s);
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(5), "{:?}", start.elapsed());
}
