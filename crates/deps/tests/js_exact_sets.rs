//! The exact package sets of the real npm, yarn and pnpm fixtures.
//!
//! Every lockfile under `tests/fixtures/{npm,yarn,pnpm}/` is parsed and its
//! whole (ecosystem, name, version) set compared with
//! `tests/fixtures/expected/<format>/<case>.txt` (`ecosystem<TAB>name<TAB>version`,
//! and `<TAB>commit` for a git dependency, whose version may be empty when
//! the lockfile records none; one line per package, sorted byte-wise, unique; a fixture in a nested
//! folder such as `npm/pair-js-yaml-bump/base/` is the case
//! `pair-js-yaml-bump-base`).
//!
//! The expected files are not this parser's output: they were written by
//! `tests/derive/js_expected.py`, an independent reading of each fixture
//! (Python's `json`, PyYAML, and a line reader for yarn v1) that applies the
//! formats' documented rules. The test never runs Python; after a fixture is
//! added or changed a developer re-runs the script and commits its output.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gatehouse_deps::lockfile::parse;

/// Ecosystem, name, version, commit ("" for none).
type Entry = (String, String, String, String);

const SHOWN: usize = 20;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every lockfile named one of `names` under `dir`, recursively, sorted.
fn lockfiles(dir: &Path, names: &[&str], out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            lockfiles(&path, names, out);
        } else if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| names.contains(&n)) {
            out.push(path);
        }
    }
    out.sort();
}

/// The case name of a fixture: its folder below `tests/fixtures/<format>/`, `/` joined by `-`.
fn case_name(format_dir: &Path, lockfile: &Path) -> String {
    let folder = lockfile.parent().expect("lockfile in a folder");
    let rel = folder.strip_prefix(format_dir).expect("fixture under its format folder");
    rel.components().map(|c| c.as_os_str().to_str().expect("UTF-8 path")).collect::<Vec<_>>().join("-")
}

/// Reads an expected file, checking its own shape (three fields, sorted byte-wise, unique).
fn expected(path: &Path) -> BTreeSet<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{}: {e} (run `python3 crates/deps/tests/derive/js_expected.py`)", path.display())
    });
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty(), "{}: empty", path.display());
    assert!(
        lines.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
        "{}: lines not sorted byte-wise and unique",
        path.display()
    );
    lines
        .iter()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let own = |s: &&str| (*s).to_owned();
            match fields.as_slice() {
                [eco, name, version] if !name.is_empty() && !version.is_empty() => {
                    (own(eco), own(name), own(version), String::new())
                }
                // A git dependency: the version or the commit may be missing.
                [eco, name, version, commit] if !name.is_empty() => {
                    (own(eco), own(name), own(version), own(commit))
                }
                _ => panic!("{}: bad line {line:?}", path.display()),
            }
        })
        .collect()
}

fn show(out: &mut String, title: &str, entries: &[&Entry]) {
    if entries.is_empty() {
        return;
    }
    let _ = writeln!(out, "  {title} ({}):", entries.len());
    for (eco, name, version, commit) in entries.iter().take(SHOWN) {
        let _ = writeln!(out, "    {eco}\t{name}\t{version}\t{commit}");
    }
    if entries.len() > SHOWN {
        let _ = writeln!(out, "    ... and {} more", entries.len() - SHOWN);
    }
}

/// Parses every fixture of `format` and compares it with its expected file;
/// one report for all mismatches. Returns how many fixtures were checked.
fn check_format(format: &str, names: &[&str]) -> usize {
    let format_dir = root().join(format);
    let expected_dir = root().join("expected").join(format);
    let mut files = Vec::new();
    lockfiles(&format_dir, names, &mut files);
    assert!(!files.is_empty(), "no {format} fixtures under {}", format_dir.display());

    let mut report = String::new();
    let mut cases = BTreeSet::new();
    for file in &files {
        let case = case_name(&format_dir, file);
        let rel = file.strip_prefix(root()).expect("under fixtures").display().to_string();
        let want = expected(&expected_dir.join(format!("{case}.txt")));
        cases.insert(case);
        let name = file.to_str().expect("UTF-8 path");
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let parsed = match parse(name, &bytes) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(report, "{rel}: parse error: {e}");
                continue;
            }
        };
        let got: BTreeSet<Entry> = parsed
            .packages
            .iter()
            .map(|p| {
                let commit = p.commit.clone().unwrap_or_default();
                (p.ecosystem.as_str().to_owned(), p.name.clone(), p.version.clone(), commit)
            })
            .collect();
        assert_eq!(got.len(), parsed.packages.len(), "{rel}: duplicate packages in the parse");
        if got != want {
            let missing: Vec<&Entry> = want.difference(&got).collect();
            let unexpected: Vec<&Entry> = got.difference(&want).collect();
            let _ = writeln!(report, "{rel}: expected {} packages, parsed {}", want.len(), got.len());
            show(&mut report, "missing", &missing);
            show(&mut report, "unexpected", &unexpected);
        }
    }

    // An expected file whose fixture is gone is stale.
    for entry in std::fs::read_dir(&expected_dir).expect("expected folder") {
        let path = entry.expect("directory entry").path();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        if !cases.contains(&stem) {
            let _ = writeln!(report, "{}: no fixture for this expected file", path.display());
        }
    }

    assert!(report.is_empty(), "{format} fixtures differ from their expected sets:\n{report}");
    files.len()
}

#[test]
fn npm_fixtures_exact_sets() {
    assert_eq!(check_format("npm", &["package-lock.json", "npm-shrinkwrap.json"]), 10);
}

#[test]
fn yarn_fixtures_exact_sets() {
    assert_eq!(check_format("yarn", &["yarn.lock"]), 4);
}

#[test]
fn pnpm_fixtures_exact_sets() {
    assert_eq!(check_format("pnpm", &["pnpm-lock.yaml"]), 4);
}
