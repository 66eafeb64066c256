//! Exact package sets of the real requirements.txt, poetry.lock, go.sum,
//! Cargo.lock and Gemfile.lock fixtures.
//!
//! Every real fixture `tests/fixtures/<format>/<case>/` (not the `peer-*`
//! folders) is parsed and its full package set compared with
//! `tests/fixtures/expected/<format>/<case>.txt`: one
//! `ecosystem<TAB>name<TAB>version` line per package, sorted byte-wise.
//!
//! The expected files are the committed output of
//! `tests/derive/other_expected.py`, an independent derivation from each
//! format's own documentation (pip's requirements file format and PEP 508 /
//! PEP 503, go.sum, Cargo.lock, Bundler's lockfile), never from the parsers.
//! The tests do not run Python. To refresh after adding a fixture:
//! `python3 crates/deps/tests/derive/other_expected.py`, then review the diff.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gatehouse_deps::lockfile::{Format, parse_with};

/// How many missing / unexpected packages a failure lists, each.
const SHOWN: usize = 20;

type Triple = (String, String, String);

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The real fixtures of `folder`: its case folders, `peer-*` excluded, sorted.
fn cases(folder: &str) -> Vec<String> {
    let dir = fixtures().join(folder);
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with("peer-"))
        .collect();
    out.sort();
    out
}

/// The committed expected set, checked to be sorted, unique and well-formed.
fn expected(folder: &str, case: &str) -> BTreeSet<Triple> {
    let path = fixtures().join("expected").join(folder).join(format!("{case}.txt"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
        "{}: not sorted byte-wise and unique",
        path.display()
    );
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split('\t').collect();
            let [ecosystem, name, version] = fields[..] else {
                panic!("{}:{}: not `ecosystem<TAB>name<TAB>version`", path.display(), i + 1);
            };
            assert!(
                !ecosystem.is_empty() && !name.is_empty() && !version.is_empty(),
                "{}:{}: an empty field",
                path.display(),
                i + 1
            );
            (ecosystem.to_owned(), name.to_owned(), version.to_owned())
        })
        .collect()
}

/// Parses one fixture; `-r`/`-c` includes are read relative to its folder.
fn parsed(folder: &str, case: &str, lockfile: &str, want: Format) -> BTreeSet<Triple> {
    let dir = fixtures().join(folder).join(case);
    let path = dir.join(lockfile);
    let path_string = path.to_string_lossy().into_owned();
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path_string}: {e}"));
    let mut includes = |name: &str| -> Result<String, String> {
        std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string())
    };
    let p = parse_with(&path_string, &bytes, Some(&mut includes)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.format, want, "{path_string}");
    p.packages.into_iter().map(|pkg| (pkg.ecosystem.as_str().to_owned(), pkg.name, pkg.version)).collect()
}

/// A readable difference, or `None` when the sets are equal.
fn difference(label: &str, want: &BTreeSet<Triple>, got: &BTreeSet<Triple>) -> Option<String> {
    if want == got {
        return None;
    }
    let missing: Vec<&Triple> = want.difference(got).collect();
    let unexpected: Vec<&Triple> = got.difference(want).collect();
    let mut out = format!(
        "{label}: expected {} packages, parsed {}; {} missing, {} unexpected\n",
        want.len(),
        got.len(),
        missing.len(),
        unexpected.len()
    );
    for (what, list) in [("missing", &missing), ("unexpected", &unexpected)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  {what} (first {} of {}):", SHOWN.min(list.len()), list.len());
        for (e, n, v) in list.iter().take(SHOWN) {
            let _ = writeln!(out, "    {e}\t{n}\t{v}");
        }
    }
    Some(out)
}

/// Compares every real fixture of `folder` with its expected file; reports
/// every case that differs, not just the first.
fn check_format(folder: &str, lockfile: &str, format: Format) {
    let cases = cases(folder);
    assert!(!cases.is_empty(), "no fixtures under {folder}/");
    // Every expected file has its fixture: a renamed or deleted fixture must not leave a stale one.
    let expected_dir = fixtures().join("expected").join(folder);
    let mut files: Vec<String> = std::fs::read_dir(&expected_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", expected_dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.strip_suffix(".txt").map(str::to_owned))
        .collect();
    files.sort();
    assert_eq!(files, cases, "expected/{folder}/*.txt and the fixtures under {folder}/ differ");

    let ecosystem = format.ecosystem().as_str();
    let mut failures = Vec::new();
    for case in &cases {
        let want = expected(folder, case);
        assert!(!want.is_empty(), "expected/{folder}/{case}.txt is empty");
        assert!(
            want.iter().all(|(e, _, _)| e == ecosystem),
            "expected/{folder}/{case}.txt: a line outside the {ecosystem} ecosystem"
        );
        let got = parsed(folder, case, lockfile, format);
        failures.extend(difference(&format!("{folder}/{case}/{lockfile}"), &want, &got));
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn requirements_exact_sets() {
    check_format("requirements", "requirements.txt", Format::Requirements);
}

#[test]
fn poetry_exact_sets() {
    check_format("poetry", "poetry.lock", Format::Poetry);
}

#[test]
fn gosum_exact_sets() {
    check_format("gosum", "go.sum", Format::GoSum);
}

#[test]
fn cargo_exact_sets() {
    check_format("cargo", "Cargo.lock", Format::CargoLock);
}

#[test]
fn gemfile_exact_sets() {
    check_format("gemfile", "Gemfile.lock", Format::GemfileLock);
}
