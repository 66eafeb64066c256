//! `render_sarif` against the OASIS SARIF 2.1.0 schema.
//!
//! The schema is the Committee Specification's, vendored byte for byte in
//! `tests/fixtures/sarif/` (see its SOURCES.md) and compiled offline: no `$ref`
//! leaves the document, and nothing is fetched. Formats (`uri`,
//! `uri-reference`) are checked too. Reports are built through the public
//! API; besides validity, the tests pin what code-scanning UIs rely on: one
//! rule per advisory, `ruleIndex` pointing at the result's rule, `level` by
//! severity, and `security-severity` as a string holding a number.

#![allow(missing_docs, clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use gatehouse_deps::gate::GateMode;
use gatehouse_deps::scan::{Finding, OSV_VULNERABILITY_URL, Report, ScanError, render_sarif, report};
use gatehouse_deps::severity::{Level, SeveritySource};
use gatehouse_deps::{Ecosystem, Package};
use serde_json::{Value, json};

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sarif/sarif-schema-2.1.0.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    })
}

fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .should_validate_formats(true)
            .build(schema())
            .unwrap()
    })
}

/// Every schema violation, one line each (empty when valid).
fn violations(sarif: &Value) -> Vec<String> {
    validator().iter_errors(sarif).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

fn assert_valid(sarif: &Value) {
    let problems = violations(sarif);
    assert!(
        problems.is_empty(),
        "not valid SARIF 2.1.0:\n{}\n{}",
        problems.join("\n"),
        serde_json::to_string_pretty(sarif).unwrap()
    );
}

fn finding(
    id: &str,
    package: (Ecosystem, &str, &str),
    severity: Level,
    source: SeveritySource,
    score: Option<f64>,
    fixed: &[&str],
) -> Finding {
    Finding {
        id: id.to_owned(),
        aliases: vec![format!("CVE-2024-{}", id.len())],
        package: Package::new(package.0, package.1, package.2),
        severity,
        severity_source: source,
        score,
        url: format!("{OSV_VULNERABILITY_URL}{id}"),
        summary: (!id.starts_with("PYSEC")).then(|| format!("{id}: a problem in {}", package.1)),
        fixed: fixed.iter().map(|v| (*v).to_owned()).collect(),
    }
}

/// Findings of every level, with and without scores, summaries and fixes;
/// one advisory on two packages.
fn findings() -> Vec<Finding> {
    vec![
        finding(
            "GHSA-aaaa-bbbb-cccc",
            (Ecosystem::Npm, "lodash", "4.17.20"),
            Level::High,
            SeveritySource::CvssV3,
            Some(7.5),
            &["4.17.21"],
        ),
        finding(
            "GHSA-aaaa-bbbb-cccc",
            (Ecosystem::Npm, "lodash-es", "4.17.20"),
            Level::High,
            SeveritySource::CvssV3,
            Some(7.5),
            &["4.17.21"],
        ),
        finding(
            "PYSEC-2021-1",
            (Ecosystem::PyPI, "Jinja2", "2.10"),
            Level::Medium,
            SeveritySource::Advisory,
            None,
            &[],
        ),
        finding(
            "RUSTSEC-2020-0001",
            (Ecosystem::CratesIo, "smallvec", "1.6.0"),
            Level::Low,
            SeveritySource::CvssV4,
            Some(2.3),
            &["0.6.14", "1.6.1"],
        ),
        finding(
            "GO-2024-0001",
            (Ecosystem::Go, "golang.org/x/net", "v0.0.0-20210428140749-89ef3d95e781"),
            Level::Critical,
            SeveritySource::CvssV3,
            Some(9.8),
            &["0.23.0"],
        ),
        finding(
            "GHSA-dddd-eeee-ffff",
            (Ecosystem::RubyGems, "rack", "2.2.3"),
            Level::Unknown,
            SeveritySource::None,
            None,
            &[],
        ),
        finding(
            "GHSA-gggg-hhhh-iiii",
            (Ecosystem::Npm, "minimist", "1.2.5"),
            Level::Medium,
            SeveritySource::Advisory,
            None,
            &["1.2.6"],
        ),
    ]
}

fn only_run(sarif: &Value) -> &Value {
    let runs = sarif["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    &runs[0]
}

fn sarif_of(r: &Report, lockfile: &str) -> Value {
    let sarif = render_sarif(r, lockfile, "0.1.0");
    assert_valid(&sarif);
    sarif
}

#[test]
fn the_vendored_schema_is_the_draft_07_oasis_schema() {
    assert_eq!(schema()["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema()["title"], "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema");
    // The validator is not vacuous: it rejects what SARIF forbids.
    let minimal = json!({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": []}]});
    assert_valid(&minimal);
    for (bad, why) in [
        (json!({"version": "2.1.0"}), "runs is required"),
        (json!({"version": "2.2.0", "runs": []}), "version is 2.1.0"),
        (
            json!({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}},
                   "results": [{"message": {"text": "m"}, "level": "critical"}]}]}),
            "level is none/note/warning/error",
        ),
        (
            json!({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}},
                   "results": [{"ruleId": "X"}]}]}),
            "a result needs a message",
        ),
        (
            json!({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t",
                   "rules": [{"id": "X", "helpUri": "not a uri"}]}}}]}),
            "helpUri is a URI",
        ),
        (
            json!({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": [
                   {"message": {"text": "m"}, "locations": [{"physicalLocation": {"artifactLocation":
                   {"uri": "a b/c d"}}}]}]}]}),
            "a location is a URI reference",
        ),
    ] {
        assert!(!violations(&bad).is_empty(), "accepted although {why}");
    }
}

#[test]
fn findings_render_as_valid_sarif() {
    let r = report(findings(), Vec::new(), 9, None, GateMode::High);
    assert_eq!(r.status, "ok");
    let sarif = sarif_of(&r, "package-lock.json");
    let run = only_run(&sarif);
    assert_eq!(run["tool"]["driver"]["name"], "gatehouse");
    assert_eq!(run["tool"]["driver"]["version"], "0.1.0");
    assert_eq!(run["invocations"][0]["executionSuccessful"], true);
    assert_eq!(run["invocations"][0]["toolExecutionNotifications"], json!([]));
    assert_eq!(run["results"].as_array().unwrap().len(), 7);
    for result in run["results"].as_array().unwrap() {
        assert_eq!(
            result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "package-lock.json"
        );
    }
}

#[test]
fn one_rule_per_advisory_and_rule_index_points_at_it() {
    let r = report(findings(), Vec::new(), 9, None, GateMode::High);
    let sarif = sarif_of(&r, "package-lock.json");
    let run = only_run(&sarif);
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    let results = run["results"].as_array().unwrap();

    let rule_ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let distinct: BTreeSet<&str> = rule_ids.iter().copied().collect();
    assert_eq!(rule_ids.len(), distinct.len(), "a rule per advisory, once: {rule_ids:?}");
    let finding_ids: BTreeSet<&str> = r.findings.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(distinct, finding_ids);
    assert_eq!(rules.len(), 6);

    for (result, f) in results.iter().zip(&r.findings) {
        let index = usize::try_from(result["ruleIndex"].as_u64().unwrap()).unwrap();
        assert_eq!(result["ruleId"], f.id.as_str());
        assert_eq!(rules[index]["id"], f.id.as_str(), "ruleIndex {index} of {}", f.id);
        assert_eq!(rules[index]["helpUri"], format!("{OSV_VULNERABILITY_URL}{}", f.id));
    }
    // The advisory on two packages: two results, one rule.
    let lodash: Vec<&Value> = results.iter().filter(|r| r["ruleId"] == "GHSA-aaaa-bbbb-cccc").collect();
    assert_eq!(lodash.len(), 2);
    assert_eq!(lodash[0]["ruleIndex"], lodash[1]["ruleIndex"]);
    assert_ne!(lodash[0]["partialFingerprints"], lodash[1]["partialFingerprints"]);
}

#[test]
fn level_and_security_severity_follow_the_finding() {
    let r = report(findings(), Vec::new(), 9, None, GateMode::High);
    let sarif = sarif_of(&r, "package-lock.json");
    let run = only_run(&sarif);
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    for (result, f) in run["results"].as_array().unwrap().iter().zip(&r.findings) {
        let expected_level = match f.severity {
            Level::Critical | Level::High | Level::Unknown => "error",
            Level::Medium => "warning",
            Level::Low | Level::None => "note",
        };
        assert_eq!(result["level"], expected_level, "{} ({})", f.id, f.severity.as_str());

        let rule = &rules[usize::try_from(result["ruleIndex"].as_u64().unwrap()).unwrap()];
        let text = rule["properties"]["security-severity"].as_str().unwrap_or_else(|| {
            panic!("security-severity of {} is not a string: {}", f.id, rule["properties"])
        });
        let value: f64 = text.parse().unwrap();
        assert!((0.0..=10.0).contains(&value), "{text}");
        let expected = match (f.score, f.severity) {
            (Some(score), _) => score,
            (None, Level::Critical) => 9.0,
            (None, Level::High | Level::Unknown) => 7.0,
            (None, Level::Medium) => 4.0,
            (None, Level::Low | Level::None) => 0.1,
        };
        assert_eq!(text, format!("{expected:.1}"), "{}", f.id);
        // The level GitHub derives from the number agrees with the finding's.
        let derived = Level::from_cvss_score(value);
        if f.severity != Level::Unknown {
            assert_eq!(derived, f.severity, "{} scored {text}", f.id);
        }
    }
}

#[test]
fn messages_say_the_fix_or_that_there_is_none() {
    let r = report(findings(), Vec::new(), 9, None, GateMode::High);
    let sarif = sarif_of(&r, "package-lock.json");
    for (result, f) in only_run(&sarif)["results"].as_array().unwrap().iter().zip(&r.findings) {
        let text = result["message"]["text"].as_str().unwrap();
        assert!(text.contains(&f.package.name) && text.contains(&f.package.version), "{text}");
        if f.fixed.is_empty() {
            assert!(text.contains("no fixed version is known"), "{text}");
        } else {
            assert!(text.contains(&format!("fixed in {}", f.fixed.join(", "))), "{text}");
        }
    }
}

#[test]
fn an_errored_scan_is_a_failed_invocation_with_notifications() {
    let errors = vec![
        ScanError { code: "osv_unreachable".into(), message: "OSV did not answer after 3 tries".into() },
        ScanError { code: "lockfile_syntax".into(), message: "poetry.lock: line 3: expected a table".into() },
    ];
    let r = report(findings()[..2].to_vec(), errors.clone(), 4, None, GateMode::Critical);
    assert_eq!(r.status, "error");
    let sarif = sarif_of(&r, "poetry.lock");
    let run = only_run(&sarif);
    let invocation = &run["invocations"][0];
    assert_eq!(invocation["executionSuccessful"], false);
    let notifications = invocation["toolExecutionNotifications"].as_array().unwrap();
    assert_eq!(notifications.len(), 2);
    for (n, e) in notifications.iter().zip(&errors) {
        assert_eq!(n["level"], "error");
        assert_eq!(n["message"]["text"], e.message.as_str());
        assert_eq!(n["descriptor"]["id"], e.code.as_str());
    }
    assert_eq!(run["results"].as_array().unwrap().len(), 2);

    // Errored with nothing found: still a failed invocation, still valid.
    let r = report(Vec::new(), errors, 0, None, GateMode::High);
    let sarif = sarif_of(&r, "poetry.lock");
    assert_eq!(only_run(&sarif)["invocations"][0]["executionSuccessful"], false);
    assert_eq!(only_run(&sarif)["results"], json!([]));
}

#[test]
fn an_empty_report_is_valid() {
    for mode in [GateMode::Off, GateMode::High, GateMode::Critical] {
        let r = report(Vec::new(), Vec::new(), 0, None, mode);
        let sarif = sarif_of(&r, "Cargo.lock");
        let run = only_run(&sarif);
        assert_eq!(run["tool"]["driver"]["rules"], json!([]));
        assert_eq!(run["results"], json!([]), "an actual scan keeps an empty results array");
        assert_eq!(run["invocations"][0]["executionSuccessful"], true);
    }
}

#[test]
fn awkward_paths_and_ids_stay_valid() {
    // A lockfile path with spaces, `%`, `#`, `?` and non-ASCII must still be
    // a URI reference; so must a link built from an advisory id that a local
    // database got wrong.
    let mut odd = findings()[..1].to_vec();
    odd.push(finding(
        "LOCAL 1/../#x?y",
        (Ecosystem::Npm, "left-pad", "1.0.0"),
        Level::High,
        SeveritySource::Advisory,
        None,
        &[],
    ));
    let r = report(odd, Vec::new(), 2, None, GateMode::High);
    for lockfile in [
        "my app/package-lock.json",
        "weird%20#name?.lock",
        "sous-dossier/é/yarn.lock",
        "C:\\repo\\package-lock.json",
    ] {
        let sarif = sarif_of(&r, lockfile);
        let run = only_run(&sarif);
        let uri = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            .as_str()
            .unwrap();
        let decoded = percent_decode(uri);
        assert_eq!(decoded, lockfile, "the URI {uri} names the lockfile");
        let ids: Vec<&Value> = run["results"].as_array().unwrap().iter().map(|r| &r["ruleId"]).collect();
        assert!(ids.contains(&&json!("LOCAL 1/../#x?y")), "the rule id keeps the advisory id as it is");
        let rule =
            run["tool"]["driver"]["rules"].as_array().unwrap().iter().find(|r| r["id"] == "LOCAL 1/../#x?y");
        assert_eq!(rule.unwrap()["helpUri"], format!("{OSV_VULNERABILITY_URL}LOCAL%201%2F..%2F%23x%3Fy"));
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
