//! `gatehouse deps parse` and `deps diff`: the command-line contract on real
//! lockfiles (the parsers' own suites live in crates/deps/tests).

use std::path::PathBuf;

use serde_json::Value;

use crate::cli::gatehouse;

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deps/tests/fixtures").join(path)
}

fn run_json(args: &[&str], files: &[PathBuf]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = gatehouse(dir.path()).args(args).args(files).output().unwrap();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn deps_parse_prints_the_contract_shape() {
    let (code, v, _) = run_json(&["deps", "parse", "--json"], &[fixture("cargo/rustls-v4/Cargo.lock")]);
    assert_eq!(code, 0);
    assert_eq!(v["format"], "cargo-lock");
    let packages = v["packages"].as_array().unwrap();
    assert!(!packages.is_empty());
    for p in packages {
        assert_eq!(p["ecosystem"], "crates.io");
        assert!(p["name"].is_string() && p["version"].is_string(), "{p}");
    }
    let has = |name: &str, version: &str| packages.iter().any(|p| p["name"] == name && p["version"] == version);
    assert!(has("rustls", "0.23.43"), "the registry rustls a member depends on is a package");
    assert!(!has("rustls", "0.24.0-dev.1"), "the workspace member itself is not");

    let (code, v, _) = run_json(
        &["deps", "parse", "--json"],
        &[fixture("requirements/warehouse-deploy-2017/requirements.txt")],
    );
    assert_eq!(code, 0);
    assert!(v["packages"].as_array().unwrap().iter().any(|p| p["name"] == "zope-interface"), "PEP 503 names");
}

#[test]
fn deps_parse_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("package-lock.json");
    std::fs::write(&bad, "{\"lockfileVersion\": 3, \"packages\": {").unwrap();
    let out = gatehouse(dir.path()).args(["deps", "parse", "--json"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("package-lock.json") && stderr.contains("syntax"), "{stderr}");
    assert!(out.stdout.is_empty(), "no partial answer on stdout");

    let wrong = dir.path().join("Cargo.lock");
    std::fs::write(&wrong, "{\"lockfileVersion\": 3}").unwrap();
    let out = gatehouse(dir.path()).args(["deps", "parse"]).arg(&wrong).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("format_mismatch"));
}

#[test]
fn requirements_includes_resolve_next_to_the_including_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("reqs")).unwrap();
    std::fs::write(dir.path().join("requirements.txt"), "-r reqs/base.txt\nDjango==4.2.1\nrequests>=2\n")
        .unwrap();
    std::fs::write(dir.path().join("reqs/base.txt"), "Flask==2.3.2\n").unwrap();
    let out = gatehouse(dir.path())
        .args(["deps", "parse", "--json"])
        .arg(dir.path().join("requirements.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        v["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["django", "flask"]);
    assert!(v["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "unpinned"), "{v}");
}

#[test]
fn deps_diff_reports_the_js_yaml_bump() {
    let (code, v, stderr) = run_json(
        &["deps", "diff", "--json"],
        &[
            fixture("npm/pair-js-yaml-bump/base/package-lock.json"),
            fixture("npm/pair-js-yaml-bump/head/package-lock.json"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let changed = v["changed"].as_array().unwrap();
    let js_yaml = changed.iter().find(|c| c["name"] == "js-yaml").expect("js-yaml changed");
    assert_eq!(js_yaml["ecosystem"], "npm");
    assert_eq!(js_yaml["from"], serde_json::json!(["3.14.1", "4.1.0"]));
    assert_eq!(js_yaml["to"], serde_json::json!(["3.14.2", "4.1.1"]));
    assert_eq!(changed.len(), 1, "only js-yaml changed: {changed:?}");
    assert_eq!(v["added"], serde_json::json!([]));
    assert_eq!(v["removed"], serde_json::json!([]));
}
