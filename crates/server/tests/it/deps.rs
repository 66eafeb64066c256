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
    let has =
        |name: &str, version: &str| packages.iter().any(|p| p["name"] == name && p["version"] == version);
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

#[test]
fn cvss_follows_the_cli_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatehouse(dir.path())
        .args(["cvss", "--json", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"version": "3.1", "base_score": 9.8, "severity": "critical"}));

    let out = gatehouse(dir.path())
        .args(["cvss", "--json", "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["version"].as_str(), v["base_score"].as_f64()), (Some("4.0"), Some(9.3)));

    let out = gatehouse(dir.path())
        .args(["cvss", "CVSS:3.0/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "CVSS 3.0 base score 6.1 (medium)");

    for bad in
        ["CVSS:3.1/AV:N", "AV:N/AC:L/Au:N/C:P/I:P/A:P", "CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", ""]
    {
        let out = gatehouse(dir.path()).args(["cvss", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("cvss_"), "a reason code for {bad}");
    }
}

fn lock(packages: &[(&str, &str)]) -> String {
    let mut entries = serde_json::Map::new();
    entries.insert("".into(), serde_json::json!({"name": "app", "version": "1.0.0"}));
    for (name, version) in packages {
        entries.insert(
            format!("node_modules/{name}"),
            serde_json::json!({"version": version, "resolved": format!("https://registry.npmjs.org/{name}/-/{name}-{version}.tgz")}),
        );
    }
    serde_json::json!({"name": "app", "lockfileVersion": 3, "requires": true, "packages": entries})
        .to_string()
}

/// A base with lodash fixed, a head that goes back to a vulnerable lodash
/// and adds left-pad; two real GitHub advisories (HIGH and MODERATE) for it.
fn scan_fixture() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("base")).unwrap();
    std::fs::create_dir_all(dir.path().join("head")).unwrap();
    let base = dir.path().join("base/package-lock.json");
    let head = dir.path().join("head/package-lock.json");
    std::fs::write(&base, lock(&[("lodash", "4.17.21")])).unwrap();
    std::fs::write(&head, lock(&[("lodash", "4.17.20"), ("left-pad", "1.3.0")])).unwrap();
    let db = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/osv-mini");
    (dir, base, head, db)
}

fn scan(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = gatehouse(dir);
    c.args(["deps", "scan"]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn an_offline_scan_finds_what_the_change_adds_and_the_gate_decides() {
    let (dir, base, head, db) = scan_fixture();
    let (b, h, d) = (base.to_str().unwrap(), head.to_str().unwrap(), db.to_str().unwrap());
    let (code, out) = scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "json"], &[]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["checked"], 2, "lodash 4.17.20 and left-pad 1.3.0");
    let findings = v["findings"].as_array().unwrap();
    let ids: Vec<&str> = findings.iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["GHSA-29mw-wpgm-hmr9", "GHSA-35jh-r3h4-6jhm"]);
    let high = &findings[1];
    assert_eq!(high["severity"], "high");
    assert_eq!(high["severity_source"], "advisory");
    assert_eq!(
        high["package"],
        serde_json::json!({"ecosystem": "npm", "name": "lodash", "version": "4.17.20"})
    );
    assert_eq!(high["url"], "https://osv.dev/vulnerability/GHSA-35jh-r3h4-6jhm");
    assert_eq!(high["fixed"], serde_json::json!(["4.17.21"]));
    assert!(high["aliases"].as_array().unwrap().iter().any(|a| a == "CVE-2021-23337"));
    assert_eq!(findings[0]["severity"], "medium", "MODERATE reads as medium");
    assert_eq!(v["gate"]["mode"], "high");
    assert_eq!(v["gate"]["tripped"], true);
    assert_eq!(v["gate"]["reason"], "dependency_gate_severity");

    let (code, out) =
        scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "json", "--gate", "critical"], &[]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["gate"]["tripped"], false);

    // Nothing changed: nothing checked, gate passes.
    let (code, out) = scan(dir.path(), &["--base", h, h, "--osv-db", d, "--format", "json"], &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["checked"], 0);

    // A base over the limit is read as absent: every head version is checked.
    let (_, out) =
        scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "json", "--base-max-bytes", "10"], &[]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["base_absent"]["reason"], "too_large");
    assert_eq!(v["checked"], 2);
}

#[test]
fn scan_outputs_for_people_agents_and_code_scanning() {
    let (dir, base, head, db) = scan_fixture();
    let (b, h, d) = (base.to_str().unwrap(), head.to_str().unwrap(), db.to_str().unwrap());
    let (_, md) = scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "markdown"], &[]);
    assert!(md.contains("### Dependency gate (high): blocked"), "{md}");
    assert!(md.contains("[GHSA-35jh-r3h4-6jhm](https://osv.dev/vulnerability/GHSA-35jh-r3h4-6jhm)"), "{md}");
    assert!(md.contains("upgrade to `4.17.21`"), "{md}");

    let (_, text) = scan(dir.path(), &["--base", b, h, "--osv-db", d], &[]);
    assert!(
        text.contains("SEVERITY")
            && text.contains("GHSA-35jh-r3h4-6jhm")
            && text.contains("gate high: tripped")
    );

    let (_, sarif) = scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "sarif"], &[]);
    let s: Value = serde_json::from_str(&sarif).unwrap();
    assert_eq!(s["version"], "2.1.0");
    let run = &s["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "gatehouse");
    assert_eq!(run["tool"]["driver"]["rules"].as_array().unwrap().len(), 2);
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let levels: Vec<&str> = results.iter().map(|r| r["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["warning", "error"]);
    assert_eq!(results[1]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], h);
    assert_eq!(run["invocations"][0]["executionSuccessful"], true);
}

#[test]
fn an_incomplete_scan_never_passes_the_gate() {
    let (dir, base, head, _) = scan_fixture();
    let (b, h) = (base.to_str().unwrap(), head.to_str().unwrap());
    // A database with a file that is not OSV.
    let bad_db = dir.path().join("bad-db");
    std::fs::create_dir(&bad_db).unwrap();
    std::fs::write(bad_db.join("x.json"), "{\"not\": \"osv\"}").unwrap();
    let (code, out) =
        scan(dir.path(), &["--base", b, h, "--osv-db", bad_db.to_str().unwrap(), "--format", "json"], &[]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "error");
    assert_eq!(v["gate"]["reason"], "dependency_gate_scan_error");
    // Gate off does not block, but an incomplete scan is not a clean pass: exit 2.
    let (code, _) =
        scan(dir.path(), &["--base", b, h, "--osv-db", bad_db.to_str().unwrap(), "--gate", "off"], &[]);
    assert_eq!(code, 2);

    // An unparseable head lockfile.
    let broken = dir.path().join("head/package-lock.json");
    std::fs::write(&broken, "{\"lockfileVersion\": 3, \"packages\": ").unwrap();
    let (code, out) = scan(
        dir.path(),
        &[broken.to_str().unwrap(), "--osv-db", bad_db.to_str().unwrap(), "--format", "json"],
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["status"], "error");
}

pub struct Mirror(std::process::Child);

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gatehouse osv serve` on a free port; returns its URL.
pub fn mirror(db: &std::path::Path) -> (Mirror, String) {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = gatehouse(dir.path())
        .args(["osv", "serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the mirror prints its address")
        .to_owned();
    (Mirror(child), url)
}

#[test]
fn the_online_client_and_the_mirror_work_together_through_the_door() {
    let (dir, base, head, db) = scan_fixture();
    let (b, h, d) = (base.to_str().unwrap(), head.to_str().unwrap(), db.to_str().unwrap());
    let (_mirror, url) = mirror(&db);
    let allow = [("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.1/32")];
    let (code, online) = scan(dir.path(), &["--base", b, h, "--osv-url", &url, "--format", "json"], &allow);
    assert_eq!(code, 1, "{online}");
    let (_, offline) = scan(dir.path(), &["--base", b, h, "--osv-db", d, "--format", "json"], &[]);
    assert_eq!(
        serde_json::from_str::<Value>(&online).unwrap(),
        serde_json::from_str::<Value>(&offline).unwrap()
    );

    // Without the operator opening loopback, the door refuses the mirror's
    // address: the scan is incomplete and the gate blocks.
    let (code, out) = scan(dir.path(), &["--base", b, h, "--osv-url", &url, "--format", "json"], &[]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "error");
    assert_eq!(v["errors"][0]["code"], "osv_unreachable");
    assert!(v["errors"][0]["message"].as_str().unwrap().contains("address_special_purpose"), "{v}");

    // That scan took seconds (retries with backoff), but stderr is not a
    // terminal here: no progress drawing.
    let out = gatehouse(dir.path())
        .args(["deps", "scan", "--base", b, h, "--osv-url", &url, "--format", "json"])
        .output()
        .unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A git dependency without a version is asked by its commit, and the
/// mirror answers as the offline database reads GIT ranges: the advisory's
/// own fix commit is not affected, a commit no range lists cannot be
/// evaluated for a package with advisories (an error, never "clean").
#[test]
fn commit_queries_through_the_mirror_read_git_ranges_and_fail_closed() {
    let db = tempfile::tempdir().unwrap();
    let advisory =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deps/tests/fixtures/osv/PyPI/PYSEC-2021-150.json");
    std::fs::copy(advisory, db.path().join("PYSEC-2021-150.json")).unwrap();
    let (_mirror, url) = mirror(db.path());
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let post = |body: &str| {
        crate::cli::http(
            &addr,
            &format!(
                "POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let fix = "030af767d357d1b4088c4a25c72cb3906abac489";
    let tf = r#""package": {"name": "tensorflow", "ecosystem": "PyPI"}"#;
    let r = post(&format!(r#"{{"commit": "{fix}", {tf}}}"#));
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("{}"), "the fix commit is clean: {r}");
    let r = post(&format!(r#"{{"commit": "0123456789abcdef0123456789abcdef01234567", {tf}}}"#));
    assert!(r.starts_with("HTTP/1.1 500"), "an unlisted commit cannot be evaluated: {r}");
    let r = post(r#"{"commit": "0123456789abcdef0123456789abcdef01234567"}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "no package: only what lists the commit: {r}");

    // End to end: a pull request taking lodash (which has advisories, none
    // with a GIT range) from git at a commit, where npm v1 records no version.
    let (_lodash_mirror, url) =
        mirror(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/osv-mini"));
    let work = tempfile::tempdir().unwrap();
    let lock = work.path().join("package-lock.json");
    let git = "git+https://github.com/lodash/lodash.git#0123456789abcdef0123456789abcdef01234567";
    let v1 = serde_json::json!({"name": "app", "version": "1.0.0", "lockfileVersion": 1,
        "dependencies": {"lodash": {"version": git, "from": "git+https://github.com/lodash/lodash.git"}}});
    std::fs::write(&lock, v1.to_string()).unwrap();
    let allow = [("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.1/32")];
    let (code, out) =
        scan(work.path(), &[lock.to_str().unwrap(), "--osv-url", &url, "--format", "json"], &allow);
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    assert_eq!((code, v["status"].as_str()), (1, Some("error")), "{out}");
    assert_eq!(v["errors"][0]["code"], "osv_error_status", "{out}");
}

#[test]
fn the_mirror_speaks_the_osv_api() {
    let (_dir, _, _, db) = scan_fixture();
    let (_mirror, url) = mirror(&db);
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let post = |path: &str, body: &str| {
        crate::cli::http(
            addr,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let body_of = |response: &str| -> Value {
        serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap_or(Value::Null)
    };

    let r = post("/v1/query", r#"{"package": {"name": "lodash", "ecosystem": "npm"}, "version": "4.17.20"}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let ids: Vec<String> = body_of(&r)["vulns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["GHSA-29mw-wpgm-hmr9", "GHSA-35jh-r3h4-6jhm"]);

    let r = post("/v1/query", r#"{"package": {"name": "lodash", "ecosystem": "npm"}, "version": "4.17.21"}"#);
    assert_eq!(body_of(&r), serde_json::json!({}), "the fixed version is not affected");

    let r = post(
        "/v1/querybatch",
        r#"{"queries": [{"package": {"name": "lodash", "ecosystem": "npm"}, "version": "4.17.20"},
                        {"package": {"name": "left-pad", "ecosystem": "npm"}, "version": "1.3.0"}]}"#,
    );
    let results = body_of(&r)["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["vulns"].as_array().unwrap().len(), 2);
    assert!(results[0]["vulns"][0]["modified"].is_string());
    assert_eq!(results[1], serde_json::json!({}));

    let r = crate::cli::http(
        addr,
        "GET /v1/vulns/GHSA-35jh-r3h4-6jhm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(body_of(&r)["id"], "GHSA-35jh-r3h4-6jhm");
    let r =
        crate::cli::http(addr, "GET /v1/vulns/GHSA-nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");

    // A commit with a version is no OSV query.
    let r = post(
        "/v1/query",
        r#"{"commit": "6879efc2c1596d11a6a6ad296f80063b558d5e0f", "version": "1.0.0", "package": {"name": "lodash", "ecosystem": "npm"}}"#,
    );
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let too_many = format!(
        r#"{{"queries": [{}]}}"#,
        vec![r#"{"package": {"name": "a", "ecosystem": "npm"}, "version": "1.0.0"}"#; 1001].join(",")
    );
    assert!(post("/v1/querybatch", &too_many).starts_with("HTTP/1.1 400"));
}
