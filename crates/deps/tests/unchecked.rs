//! Issue 16, "nothing unchecked passes", the parser and matcher half: git
//! dependencies are packages with their commit, versions are read the way
//! the ecosystems' tools and osv.dev read them, empty lockfiles are empty,
//! unreadable entries fail the parse, requirements constraints only pin,
//! go.mod is read, and whatever cannot be checked makes the scan `error`.
//!
//! Inputs are osv-scalibr's and osv-scanner's own test fixtures
//! (`tests/fixtures/{npm,yarn,pnpm}-peer/`, `gomod/`, `*/peer-scalibr/`,
//! copied byte for byte from `shared/fixtures/peer/`), real lockfiles, and
//! real OSV advisories (`tests/fixtures/osv/`).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::BTreeSet;
use std::path::Path;

use gatehouse_deps::gate::GateMode;
use gatehouse_deps::lockfile::parse_with;
use gatehouse_deps::matching::Index;
use gatehouse_deps::osv::{Advisory, load_file};
use gatehouse_deps::scan::{self, ScanError};
use gatehouse_deps::{Ecosystem, Format, Package, ParseErrorCode, Parsed, parse};

fn fixture_bytes(rel: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A fixture parsed under the lockfile name its format has.
fn parse_as(name: &str, rel: &str) -> Parsed {
    parse(name, &fixture_bytes(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// (name, version, commit) of every package.
fn triples(p: &Parsed) -> BTreeSet<(String, String, Option<String>)> {
    p.packages.iter().map(|k| (k.name.clone(), k.version.clone(), k.commit.clone())).collect()
}

fn has(p: &Parsed, name: &str, version: &str, commit: Option<&str>) -> bool {
    triples(p).contains(&(name.to_owned(), version.to_owned(), commit.map(str::to_owned)))
}

fn advisory(rel: &str) -> Advisory {
    load_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)).unwrap()
}

fn codes(errors: &[ScanError]) -> Vec<&str> {
    errors.iter().map(|e| e.code.as_str()).collect()
}

// ------------------------------------------------------------- git packages

#[test]
fn git_dependencies_are_packages_with_their_commit() {
    // osv-scalibr's npm commits fixtures: v2 records the package's own
    // version beside the git `resolved`; v1 writes the git URL as the version.
    let v2 = parse_as("package-lock.json", "npm-peer/commits.v2.json");
    assert!(has(&v2, "is-number-1", "3.0.0", Some("af885e2e890b9ef0875edd2b117305119ee5bdc5")));
    assert!(has(&v2, "babel-preset-php", "1.1.1", Some("c5a7ba5e0ad98b8db1cb8ce105403dd4b768cced")));
    // `node_modules/raven-js` has a git `resolved` and no version.
    assert!(has(&v2, "raven-js", "", Some("c2b377e7a254264fd4a1fe328e4e3cfc9e245570")));
    let v1 = parse_as("package-lock.json", "npm-peer/commits.v1.json");
    assert!(has(&v1, "is-number-2", "", Some("d5ac0584ee9ae7bd9288220a39780f155b9ad4c8")));
    assert!(has(&v1, "ansi-styles", "1.0.0", None));
    assert!(v1.warnings.is_empty() && v2.warnings.is_empty());

    // yarn v1 and Berry: the recorded version, build metadata kept.
    let domino = Some("f2435fe1f9f7c91ade0bd472c4723e5eacd7d19a");
    for rel in ["yarn-peer/with-build-string.v1.lock", "yarn-peer/with-build-string.v2.lock"] {
        let p = parse_as("yarn.lock", rel);
        assert!(has(&p, "domino", "2.1.6+git", domino), "{rel}: {:?}", triples(&p));
        assert!(has(&p, "tslib", "2.6.2", None), "{rel}");
    }
    for rel in ["yarn-peer/commits.v1.lock", "yarn-peer/commits.v2.lock"] {
        let p = parse_as("yarn.lock", rel);
        let git = p.packages.iter().filter(|k| k.commit.is_some()).count();
        assert!(git >= 5, "{rel}: {git} git packages: {:?}", triples(&p));
    }

    // pnpm: `resolution: {commit}` and code-host tarballs.
    let p = parse_as("pnpm-lock.yaml", "pnpm-peer/commits.yaml");
    assert!(has(&p, "my-bitbucket-package", "1.0.0", Some("6104ae42cd32c3d724036d3964678f197b2c9cdb")));
    assert!(has(&p, "faker-parser", "0.0.1", Some("d2dc42a9351d4d89ec48c525e34f612b6d77993f")));
    let p = parse_as("pnpm-lock.yaml", "pnpm-peer/commits.v9.yaml");
    assert!(has(&p, "is-number", "7.0.0", Some("98e8ff1da1a89f93d1397a24d7413ed15421c139")));

    // Poetry's `resolved_reference`, Bundler's GIT `revision:`, Cargo's `#<sha>`.
    let p = parse_as("poetry.lock", "poetry/peer-scalibr/source-git.lock");
    assert!(has(&p, "ike", "0.2.0", Some("cd66602cd29f61a2d2e7fb995fef1e61708c034d")));
    let p = parse_as("Gemfile.lock", "gemfile/peer-scalibr/has-git-gem.lock");
    assert!(has(&p, "hanami-controller", "2.0.0.alpha1", Some("027dbe2e56397b534e859fc283990cad1b6addd6")));
    assert!(has(&p, "hanami-utils", "2.0.0.alpha1", Some("5904fc9a70683b8749aa2861257d0c8c01eae4aa")));
    let p = parse_as("Cargo.lock", "cargo/rustsec-v1-metadata/Cargo.lock");
    assert!(has(&p, "cargo-edit", "0.4.2", Some("82c091924cb9f5f2f94ba50d6884591d8e1736ba")));
}

#[test]
fn a_git_dependency_moved_to_another_commit_is_checked_again() {
    let base = parse_as("yarn.lock", "yarn-peer/with-build-string.v1.lock");
    let text = String::from_utf8(fixture_bytes("yarn-peer/with-build-string.v1.lock")).unwrap();
    let moved =
        text.replace("f2435fe1f9f7c91ade0bd472c4723e5eacd7d19a", "0123456789abcdef0123456789abcdef01234567");
    let head = parse("yarn.lock", moved.as_bytes()).unwrap();
    let check = gatehouse_deps::diff(Some(&base.packages), &head.packages).to_check();
    assert_eq!(check.len(), 1, "{check:?}");
    assert_eq!((check[0].name.as_str(), check[0].version.as_str()), ("domino", "2.1.6+git"));
    assert_eq!(check[0].commit.as_deref(), Some("0123456789abcdef0123456789abcdef01234567"));
}

// -------------------------------------------------- what the scan cannot check

#[test]
fn what_cannot_be_checked_makes_the_scan_incomplete() {
    // PYSEC-2021-150 (tensorflow): a GIT range fixed at 030af767..., and
    // ECOSYSTEM ranges by version.
    let index = Index::new(vec![advisory("osv/PyPI/PYSEC-2021-150.json")]);
    let fixed_at = "030af767d357d1b4088c4a25c72cb3906abac489";
    let tf = |version: &str, commit: Option<&str>| {
        Package::new(Ecosystem::PyPI, "tensorflow", version).at_commit(commit)
    };
    let packages = [
        tf("2.3.1", Some("0123456789abcdef0123456789abcdef01234567")), // by version: affected
        tf("", Some(fixed_at)),                                        // the advisory's own fix commit: clean
        tf("", Some("0123456789abcdef0123456789abcdef01234567")),      // no version, commit not listed
        tf("", None),                                                  // nothing to check it by
        tf("latest", None),                                            // not a PEP 440 version
        Package::new(Ecosystem::PyPI, "unrelated", "").at_commit(Some(fixed_at)), // no advisory names it
    ];
    let (findings, errors) = scan::findings_offline(&index, &packages);
    let found: Vec<(&str, &str)> =
        findings.iter().map(|f| (f.id.as_str(), f.package.version.as_str())).collect();
    assert_eq!(found, [("PYSEC-2021-150", "2.3.1")]);
    assert_eq!(
        codes(&errors),
        ["match_invalid_package_version", "package_no_version", "package_unreadable_version"],
        "{errors:?}"
    );
    // Each error names its package.
    assert!(errors.iter().all(|e| e.message.contains("tensorflow")), "{errors:?}");
    let report = scan::report(findings, errors, packages.len(), None, GateMode::Off);
    assert_eq!(report.status, "error");
    assert!(!report.gate.tripped, "gate off does not block");
    let report =
        scan::report(Vec::new(), codes_to_errors(&["package_no_version"]), 1, None, GateMode::Critical);
    assert!(report.gate.tripped, "an incomplete scan blocks");
}

/// Legacy (pre-PEP 440) PyPI versions such as paramiko's `0.9-eevee` cannot
/// be placed in a range, but OSV lists them in `affected[].versions`: the
/// advisories that list the exact version are findings, and the version is
/// still reported unreadable (the ranges were not checked), so the scan is
/// incomplete and blocks while saying what it found.
#[test]
fn a_legacy_pypi_version_finds_the_advisories_that_list_it() {
    // PYSEC-2008-8: paramiko, ECOSYSTEM [0, 1.7.2) and versions ["0.1-bulbasaur",
    // ..., "0.9-eevee", ...]. PYSEC-2015-24: ipython, GIT and ECOSYSTEM
    // [0, 3.2.2), versions [..., "0.7.4.svn.r2010", ...].
    let index =
        Index::new(vec![advisory("osv/PyPI/PYSEC-2008-8.json"), advisory("osv/PyPI/PYSEC-2015-24.json")]);
    let text = "paramiko==0.9-eevee\nipython==0.7.4.svn.r2010\nparamiko==0.9-notlisted\n";
    let parsed = parse("requirements.txt", text.as_bytes()).unwrap();
    assert!(has(&parsed, "paramiko", "0.9-eevee", None), "{:?}", triples(&parsed));
    assert!(has(&parsed, "ipython", "0.7.4.svn.r2010", None), "{:?}", triples(&parsed));
    let (findings, errors) = scan::findings_offline(&index, &parsed.packages);
    let mut found: Vec<(&str, &str, &str)> = findings
        .iter()
        .map(|f| (f.id.as_str(), f.package.name.as_str(), f.package.version.as_str()))
        .collect();
    found.sort_unstable();
    assert_eq!(
        found,
        [("PYSEC-2008-8", "paramiko", "0.9-eevee"), ("PYSEC-2015-24", "ipython", "0.7.4.svn.r2010")]
    );
    // Every legacy version is still unreadable, the listed ones too, and
    // nothing else is reported for them (no error per advisory).
    assert_eq!(codes(&errors), ["package_unreadable_version"; 3], "{errors:?}");
    for version in ["0.9-eevee", "0.7.4.svn.r2010", "0.9-notlisted"] {
        assert_eq!(errors.iter().filter(|e| e.message.contains(version)).count(), 1, "{version}: {errors:?}");
    }
    let report = scan::report(findings, errors, parsed.packages.len(), None, GateMode::Critical);
    assert_eq!(report.status, "error");
    assert!(report.gate.tripped, "the ranges were not checked: the scan blocks");
    assert_eq!(report.findings.len(), 2, "and says what it found");

    // String equality after trimming, nothing looser; withdrawn advisories never.
    let eevee = |v: &str| Package::new(Ecosystem::PyPI, "Paramiko", v);
    for (version, hits) in [(" 0.9-eevee\t", 1), ("0.9-EEVEE", 0), ("0.9-eevee.0", 0), ("0.9_eevee", 0)] {
        let (f, e) = scan::findings_offline(&index, &[eevee(version)]);
        assert_eq!((f.len(), codes(&e)), (hits, vec!["package_unreadable_version"]), "{version:?}");
    }
    let mut withdrawn = advisory("osv/PyPI/PYSEC-2008-8.json");
    withdrawn.withdrawn = Some("2024-01-01T00:00:00Z".to_owned());
    let (f, e) = scan::findings_offline(&Index::new(vec![withdrawn]), &[eevee("0.9-eevee")]);
    assert_eq!((f.len(), codes(&e)), (0, vec!["package_unreadable_version"]));
}

fn codes_to_errors(codes: &[&str]) -> Vec<ScanError> {
    codes.iter().map(|c| ScanError { code: (*c).to_owned(), message: String::new() }).collect()
}

#[test]
fn a_git_range_listing_the_commit_decides() {
    // The same advisory with its GIT range introduced at a listed commit.
    let mut a = advisory("osv/PyPI/PYSEC-2021-150.json");
    let introduced = "1111111111111111111111111111111111111111";
    let git =
        a.affected[0].ranges.iter_mut().find(|r| r.kind == gatehouse_deps::osv::RangeType::Git).unwrap();
    git.events[0] = gatehouse_deps::osv::Event::Introduced(introduced.to_owned());
    let index = Index::new(vec![a]);
    let at = |version: &str, commit: &str| {
        Package::new(Ecosystem::PyPI, "tensorflow", version).at_commit(Some(commit))
    };
    // Versionless, at the listed commit (or its 7-digit abbreviation): affected.
    for commit in [introduced, "1111111"] {
        let e = index.evaluate(&at("", commit));
        assert_eq!((e.affected.len(), e.errors.len()), (1, 0), "{commit}");
    }
    // With a version the range does not cover, the commit still makes it affected.
    assert_eq!(index.evaluate(&at("2.3.4", introduced)).affected.len(), 1);
    assert!(index.evaluate(&Package::new(Ecosystem::PyPI, "tensorflow", "2.3.4")).affected.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn online_a_git_dependency_without_a_version_is_asked_by_its_commit() {
    use gatehouse_deps::osv_client::{ClientConfig, OsvClient, Response, Transport, TransportFuture};
    /// Records each batch and answers it with no advisories.
    #[derive(Default)]
    struct Record(std::sync::Mutex<Vec<serde_json::Value>>);
    impl Transport for &Record {
        fn post_json<'a>(&'a self, _: &'a str, body: Vec<u8>) -> TransportFuture<'a> {
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let n = body["queries"].as_array().unwrap().len();
            self.0.lock().unwrap().push(body);
            let answer = serde_json::json!({"results": vec![serde_json::json!({}); n]});
            Box::pin(async move { Ok(Response { status: 200, body: serde_json::to_vec(&answer).unwrap() }) })
        }
        fn get<'a>(&'a self, _: &'a str) -> TransportFuture<'a> {
            Box::pin(async { Err("not asked".to_owned()) })
        }
    }
    let record = Record::default();
    let client = OsvClient::new(&record, ClientConfig { attempts: 1, ..ClientConfig::default() });
    let p = parse_as("package-lock.json", "npm-peer/commits.v2.json");
    let mut asked: Vec<Package> = p.packages.iter().filter(|k| k.version.is_empty()).cloned().collect();
    assert!(!asked.is_empty() && asked.iter().all(|k| k.commit.is_some()));
    let git_deps = asked.len();
    asked.push(Package::new(Ecosystem::Npm, "from-a-url", ""));
    let (findings, errors) = scan::findings_online(&client, &asked).await;
    assert!(findings.is_empty());
    assert_eq!(codes(&errors), vec!["package_no_version"], "only the one with neither version nor commit");
    assert!(errors[0].message.contains("from-a-url"), "{errors:?}");
    let batches = record.0.lock().unwrap();
    let queries = batches[0]["queries"].as_array().unwrap();
    assert_eq!(queries.len(), git_deps);
    for (q, k) in queries.iter().zip(&asked) {
        assert_eq!(
            *q,
            serde_json::json!({"commit": k.commit, "package": {"name": k.name, "ecosystem": "npm"}}),
            "a commit query, with its package and no version"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn online_a_legacy_pypi_version_finds_the_advisories_that_list_it() {
    use gatehouse_deps::osv_client::{ClientConfig, OsvClient, Response, Transport, TransportFuture};
    /// Answers every query with PYSEC-2008-8 (which lists paramiko 0.9-eevee)
    /// and PYSEC-2015-24 (ipython), and serves both advisories.
    struct Osv;
    impl Transport for &Osv {
        fn post_json<'a>(&'a self, _: &'a str, body: Vec<u8>) -> TransportFuture<'a> {
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let n = body["queries"].as_array().unwrap().len();
            let hit = serde_json::json!({"vulns": [{"id": "PYSEC-2008-8"}, {"id": "PYSEC-2015-24"}]});
            let answer = serde_json::json!({"results": vec![hit; n]});
            Box::pin(async move { Ok(Response { status: 200, body: serde_json::to_vec(&answer).unwrap() }) })
        }
        fn get<'a>(&'a self, url: &'a str) -> TransportFuture<'a> {
            let id = url.rsplit('/').next().unwrap().to_owned();
            Box::pin(async move {
                let body = fixture_bytes(&format!("osv/PyPI/{id}.json"));
                Ok(Response { status: 200, body })
            })
        }
    }
    let client = OsvClient::new(&Osv, ClientConfig { attempts: 1, ..ClientConfig::default() });
    let asked = [
        Package::new(Ecosystem::PyPI, "paramiko", "0.9-eevee"),
        Package::new(Ecosystem::PyPI, "paramiko", "0.9-notlisted"),
        Package::new(Ecosystem::PyPI, "paramiko", "1.7.1"),
    ];
    let (findings, errors) = scan::findings_online(&client, &asked).await;
    let found: BTreeSet<(&str, &str)> =
        findings.iter().map(|f| (f.id.as_str(), f.package.version.as_str())).collect();
    // The legacy version: only what lists it exactly (not ipython's advisory,
    // nor an answer for a version it does not list); a readable version: what
    // OSV answers, as before.
    assert_eq!(
        found,
        BTreeSet::from([
            ("PYSEC-2008-8", "0.9-eevee"),
            ("PYSEC-2008-8", "1.7.1"),
            ("PYSEC-2015-24", "1.7.1"),
        ])
    );
    assert_eq!(codes(&errors), ["package_unreadable_version"; 2], "{errors:?}");
}

// ------------------------------------------------------------------ versions

#[test]
fn versions_are_read_as_osv_dev_reads_them() {
    use gatehouse_deps::version::{Scheme, compare};
    use std::cmp::Ordering::*;
    // GO-2024-2730's own range, against Go versions of any length.
    let index = Index::new(vec![advisory("osv/Go/GO-2024-2730.json")]);
    let a = &index.advisories()[0];
    let name = &a.affected[0].package.as_ref().unwrap().name;
    let huge = Package::new(Ecosystem::Go, name, "v99999999999999999999999.0.0");
    let e = index.evaluate(&huge);
    assert!(e.errors.is_empty(), "a 77-bit major is a version: {:?}", e.errors);
    assert_eq!(
        compare(Ecosystem::Go, "v1.18446744073709551616.0", "v1.18446744073709551615.9").unwrap(),
        Greater
    );
    // npm and crates.io: a missing minor or patch is 0, a leading v tolerated.
    assert_eq!(compare(Ecosystem::Npm, "1.2", "1.2.0").unwrap(), Equal);
    assert_eq!(compare(Ecosystem::CratesIo, "v0.9.4", "0.9.4").unwrap(), Equal);
    // Build metadata: kept, ignored for ordering. PEP 440 local labels:
    // ordered as PEP 440 orders them, ignored by a bound that has none.
    assert_eq!(compare(Ecosystem::Npm, "2.1.6+git", "2.1.6").unwrap(), Equal);
    assert_eq!(compare(Ecosystem::PyPI, "2.3.1+cpu", "2.3.1").unwrap(), Greater);
    let tf = Package::new(Ecosystem::PyPI, "tensorflow", "2.3.1+cpu");
    let index = Index::new(vec![advisory("osv/PyPI/PYSEC-2021-150.json")]);
    assert_eq!(index.evaluate(&tf).affected.len(), 1, "2.3.1+cpu is 2.3.1 for the range");
    assert!(Scheme::Go.parse("v1.2-pre").is_err(), "x/mod/semver: no shorthand with a suffix");
}

// --------------------------------------------------------------- empty files

#[test]
fn empty_lockfiles_have_zero_packages() {
    for (name, rel) in [
        ("package-lock.json", "npm-peer/empty.v1.json"),
        ("package-lock.json", "npm-peer/empty.v2.json"),
        ("yarn.lock", "yarn-peer/empty.v1.lock"),
        ("yarn.lock", "yarn-peer/empty.v2.lock"),
        ("pnpm-lock.yaml", "pnpm-peer/empty.yaml"),
        ("pnpm-lock.yaml", "pnpm-peer/no-packages.yaml"),
        ("pnpm-lock.yaml", "pnpm-peer/missing-packages.yaml"),
        ("poetry.lock", "poetry/peer-scalibr/empty-file.lock"),
        ("poetry.lock", "poetry/peer-scalibr/empty.lock"),
        ("Cargo.lock", "cargo/peer-scalibr/empty.lock"),
        ("go.mod", "gomod/empty.mod"),
    ] {
        let p = parse_as(name, rel);
        assert!(p.packages.is_empty() && p.warnings.is_empty(), "{rel}: {p:?}");
    }
    // Zero bytes, a byte order mark and CRLF blank lines, under every name.
    let names = [
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "requirements.txt",
        "poetry.lock",
        "go.sum",
        "go.mod",
        "Cargo.lock",
        "Gemfile.lock",
    ];
    for name in names {
        for text in ["", "\u{feff}", "\r\n\r\n", "\u{feff}  \r\n"] {
            let p = parse(name, text.as_bytes()).unwrap_or_else(|e| panic!("{name} {text:?}: {e}"));
            assert!(p.packages.is_empty(), "{name}");
        }
    }
    // Comments count as empty only where the format has them.
    assert!(parse("pnpm-lock.yaml", b"# nothing yet\n").unwrap().packages.is_empty());
    assert_eq!(parse("package-lock.json", b"// x\n").unwrap_err().code, ParseErrorCode::FormatMismatch);
    assert_eq!(parse("Gemfile.lock", b"# x\n").unwrap_err().code, ParseErrorCode::FormatMismatch);
}

// ------------------------------------------------------- unreadable entries

#[test]
fn an_entry_the_parser_cannot_read_fails_the_parse_with_its_line() {
    // osv-scalibr's no-version.v1.lock: a descriptor without a range is read;
    // the same entry without its `version` line fails at its header's line.
    let text = String::from_utf8(fixture_bytes("yarn-peer/no-version.v1.lock")).unwrap();
    let p = parse("yarn.lock", text.as_bytes()).unwrap();
    assert!(has(&p, "balanced-match", "1.0.2", None));
    let header = text.lines().position(|l| l.starts_with("balanced-match")).unwrap() + 1;
    let without: String =
        text.lines().filter(|l| !l.trim_start().starts_with("version")).map(|l| format!("{l}\n")).collect();
    let e = parse("yarn.lock", without.as_bytes()).unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(header)), "{e}");
    // A pnpm key that names no package and version (osv-scalibr, osv-scanner).
    let e = parse("pnpm-lock.yaml", &fixture_bytes("pnpm-peer/invalid-path.yaml")).unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(17)));
    // A Gemfile spec line it cannot parse (osv-scalibr's invalid.lock has none
    // of the sections; a broken spec inside a real lockfile is at its line).
    let text = String::from_utf8(fixture_bytes("gemfile/peer-scalibr/one-gem.lock")).unwrap();
    let broken = text.replacen(" (", " ((", 1);
    let line = broken.lines().position(|l| l.contains("((")).unwrap() + 1;
    let e = parse("Gemfile.lock", broken.as_bytes()).unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(line)));
}

// -------------------------------------------------------- requirements -c

#[test]
fn constraints_pin_requirements_and_are_never_packages() {
    // osv-scalibr's example.txt: `-r other-requirements.txt` is read, and the
    // `-c constraints.txt` it names does not exist: a warning, not an error.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requirements/peer-scalibr");
    let path = dir.join("example.txt");
    let renamed = dir.join("requirements.txt");
    let bytes = std::fs::read(&path).unwrap();
    let p = gatehouse_deps::lockfile::parse_file(&renamed, &bytes, None).unwrap();
    let not_read: Vec<_> =
        p.warnings.iter().filter(|w| w.code == "constraints_not_read").map(|w| w.line).collect();
    assert_eq!(not_read, [Some(22)]);
    assert!(p.packages.iter().any(|k| k.name == "docopt" && k.version == "0.6.1"));

    let constraints = "flask==2.0.1\nonly-constrained==9.9.9\nRequests==2.31.0\nclick>=8\n";
    let mut read = |_: &str| -> Result<String, String> { Ok(constraints.to_owned()) };
    let text = "flask\nrequests[socks]>=2\nclick\nurllib3==1.26.0\n-c constraints.txt\n";
    let p = parse_with("requirements.txt", text.as_bytes(), Some(&mut read)).unwrap();
    let pairs: Vec<(&str, &str)> = p.packages.iter().map(|k| (k.name.as_str(), k.version.as_str())).collect();
    // Pins for the names required (before or after the -c line, any spelling);
    // a name only in constraints is not a package; `click>=8` pins nothing.
    assert_eq!(pairs, [("flask", "2.0.1"), ("requests", "2.31.0"), ("urllib3", "1.26.0")]);
    let unpinned: Vec<_> = p.warnings.iter().filter(|w| w.code == "unpinned").map(|w| w.line).collect();
    assert_eq!(unpinned, [Some(3)], "only click stays unpinned");
    // A pinned requirement given another pin, which pip would refuse: both checked.
    let mut read = |_: &str| -> Result<String, String> { Ok("a==2.0\n".to_owned()) };
    let p = parse_with("requirements.txt", b"-c c.txt\na==1.0\n", Some(&mut read)).unwrap();
    assert_eq!(p.packages.iter().map(|k| k.version.as_str()).collect::<Vec<_>>(), ["1.0", "2.0"]);
}

// --------------------------------------------------------------------- go.mod

#[test]
fn go_mod_is_read_when_no_go_sum_accompanies_it() {
    let read = |rel: &str| -> Vec<(String, String)> {
        let p = parse_as("go.mod", &format!("gomod/{rel}"));
        assert_eq!(p.format, Format::GoMod);
        assert!(p.packages.iter().all(|k| k.ecosystem == Ecosystem::Go));
        p.packages.iter().map(|k| (k.name.clone(), k.version.clone())).collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut v: Vec<_> = list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
        v.sort();
        v
    };
    let toml = ("github.com/BurntSushi/toml", "v1.0.0");
    assert_eq!(read("one-package.mod"), pairs(&[toml]));
    assert_eq!(read("two-packages.mod"), pairs(&[toml, ("gopkg.in/yaml.v2", "v2.4.0")]));
    assert_eq!(read("toolchain.mod"), pairs(&[toml]));
    assert_eq!(read("toolchain-with-suffix.mod"), pairs(&[toml]));
    // `// indirect` requirements are part of the build list.
    assert_eq!(
        read("indirect-packages.mod"),
        pairs(&[
            toml,
            ("gopkg.in/yaml.v2", "v2.4.0"),
            ("github.com/mattn/go-colorable", "v0.1.9"),
            ("github.com/mattn/go-isatty", "v0.0.14"),
            ("golang.org/x/sys", "v0.0.0-20210630005230-0f9fa26af87c"),
        ])
    );
    assert_eq!(
        read("indirect-1.23.mod"),
        pairs(&[
            ("github.com/sirupsen/logrus", "v1.9.3"),
            ("golang.org/x/sys", "v0.0.0-20220715151400-c0bba94af5f8")
        ])
    );
    // replace: what is built instead.
    assert_eq!(read("replace-one.mod"), pairs(&[("example.com/fork/net", "v1.4.5")]));
    assert_eq!(
        read("replace-different.mod"),
        pairs(&[("example.com/fork/foe", "v1.4.5"), ("example.com/fork/foe", "v1.4.2")])
    );
    assert_eq!(
        read("replace-mixed.mod"),
        pairs(&[("example.com/fork/net", "v1.4.5"), ("golang.org/x/net", "v0.5.6")])
    );
    assert_eq!(read("replace-no-version.mod"), pairs(&[("example.com/fork/net", "v1.4.5")]));
    assert_eq!(read("replace-not-required.mod"), pairs(&[("golang.org/x/net", "v0.5.6"), toml]));
    assert_eq!(read("replace-local.mod"), pairs(&[toml]), "a directory replacement is local code");
    let e = parse("go.mod", &fixture_bytes("gomod/not-go-mod.mod")).unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(1)));
    // Detected by its `module` line alone, too.
    let p = parse("x/unnamed", &fixture_bytes("gomod/two-packages.mod")).unwrap();
    assert_eq!(p.format, Format::GoMod);
    // exclude and retract are noted; an unclosed block is an error at its start.
    let p = parse(
        "go.mod",
        b"module m\r\n\r\nrequire (\r\n\ta v1.0.0\r\n)\r\nexclude a v1.0.0\r\nretract [v0.1.0, v0.2.0]\r\n",
    )
    .unwrap();
    let noted: Vec<_> = p.warnings.iter().map(|w| (w.code, w.line)).collect();
    assert_eq!(noted, [("retracted_versions", Some(7)), ("excluded_version", Some(4))]);
    assert_eq!(p.packages.len(), 1);
    let e = parse("go.mod", b"module m\nrequire (\n\ta v1.0.0\n").unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(2)));
    let e = parse("go.mod", b"module m\nrequires a v1.0.0\n").unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(2)));
}

// ----------------------------------------------------------------- bad input

/// Real lockfiles of the formats not covered by the npm/yarn/pnpm property tests.
const REAL: [(&str, &str); 6] = [
    ("Cargo.lock", "cargo/rustsec-v3/Cargo.lock"),
    ("poetry.lock", "poetry/poetry-2.x-lock-2.1/poetry.lock"),
    ("Gemfile.lock", "gemfile/rubygems-org/Gemfile.lock"),
    ("go.sum", "gosum/smokescreen/go.sum"),
    ("requirements.txt", "requirements/warehouse-main-hashes/requirements.txt"),
    ("go.mod", "gomod/indirect-packages.mod"),
];

#[test]
fn byte_order_marks_and_crlf_change_nothing() {
    for (name, rel) in REAL {
        let text = String::from_utf8(fixture_bytes(rel)).unwrap();
        let plain = parse(name, text.as_bytes()).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(!plain.packages.is_empty(), "{rel}");
        let crlf = format!("\u{feff}{}", text.replace("\r\n", "\n").replace('\n', "\r\n"));
        let other = parse(name, crlf.as_bytes()).unwrap_or_else(|e| panic!("{rel} (BOM, CRLF): {e}"));
        assert_eq!(other.packages, plain.packages, "{rel}");
    }
}

#[test]
fn nul_bytes_and_duplicate_keys_are_refused_at_their_line() {
    for (name, rel) in REAL {
        let mut bytes = fixture_bytes(rel);
        let at = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(2).map_or(0, |(i, _)| i + 1);
        bytes.insert(at, 0);
        let e = parse(name, &bytes).unwrap_err();
        assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(4)), "{rel}");
    }
    // TOML and YAML refuse a repeated key themselves; JSON through the parser.
    let e = parse("poetry.lock", b"[metadata]\ncontent-hash = \"x\"\ncontent-hash = \"y\"\n").unwrap_err();
    assert_eq!(e.code, ParseErrorCode::Syntax);
    let e = parse("pnpm-lock.yaml", b"lockfileVersion: '9.0'\npackages:\n  a@1.0.0: {}\n  a@1.0.0: {}\n")
        .unwrap_err();
    assert_eq!(e.code, ParseErrorCode::Syntax);
    let e = parse("package-lock.json", b"{\"lockfileVersion\": 3, \"packages\": {},\n\"packages\": {}}")
        .unwrap_err();
    assert_eq!(e.code, ParseErrorCode::Structure);
}
