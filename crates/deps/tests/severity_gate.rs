//! Severity (CVSS scoring, advisory severity) and the dependency gate.
//!
//! Expected CVSS scores come from FIRST's published examples and from an independent
//! implementation (Red Hat's `cvss` 3.6, PyPI) over every Base vector of every version
//! (`tests/fixtures/severity/cvss_base_scores.txt`); expected advisory levels come from the real
//! advisories under `tests/fixtures/severity/` (see its `SOURCES.md`), never from gatehouse's own
//! output.

use std::path::{Path, PathBuf};

use gatehouse_deps::gate::{GateDecision, GateMode, GateReason, decide};
use gatehouse_deps::severity::{
    CvssErrorCode, CvssScore, CvssVersion, Level, MAX_VECTOR_LEN, Severity, SeveritySource,
    advisory_severity, cvss,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/severity")
}

fn score(vector: &str) -> CvssScore {
    cvss(vector).unwrap_or_else(|e| panic!("{vector}: {e}"))
}

fn code(vector: &str) -> CvssErrorCode {
    match cvss(vector) {
        Ok(s) => panic!("{vector}: expected an error, got {s:?}"),
        Err(e) => {
            assert!(e.message.chars().count() <= 160, "{vector}: message too long: {}", e.message);
            e.code
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CVSS: published examples

#[test]
fn first_v3_examples() {
    // (vector, base score, rating): FIRST's CVSS v3.1 specification and examples document.
    let cases = [
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8, Level::Critical),
        ("CVSS:3.0/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1, Level::Medium),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1, Level::Medium),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N", 7.5, Level::High),
        ("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8, Level::Critical),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0, Level::None),
    ];
    for (vector, base, rating) in cases {
        let s = score(vector);
        assert_eq!((s.base_score, s.severity), (base, rating), "{vector}");
    }
    assert_eq!(score(cases[0].0).version, CvssVersion::V3_1);
    assert_eq!(score(cases[1].0).version, CvssVersion::V3_0);
}

#[test]
fn v31_scope_changed_roundup_cases() {
    // Scope changed: PR weighs more (0.68/0.5), impact goes through the 7.52/3.25 curve, the sum is
    // multiplied by 1.08, capped at 10, then rounded up to a tenth. Scores from the oracle file.
    let cases = [
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0), // 1.08 × 10.9… capped at 10
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:L/A:L", 9.9),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H", 9.9),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 8.8), // same metrics, scope unchanged
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:H", 9.0),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:L", 8.9),
        ("CVSS:3.1/AV:A/AC:H/PR:N/UI:R/S:C/C:H/I:L/A:L", 7.0),
        ("CVSS:3.1/AV:N/AC:L/PR:H/UI:R/S:C/C:H/I:L/A:N", 6.9),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:C/C:L/I:N/A:N", 4.0),
        ("CVSS:3.1/AV:L/AC:L/PR:N/UI:R/S:C/C:H/I:H/A:N", 8.2),
    ];
    for (vector, base) in cases {
        assert_eq!(score(vector).base_score, base, "{vector}");
        // v3.0 rounds with a plain ceiling; no Base vector scores differently (see the oracle test).
        assert_eq!(score(&vector.replace("CVSS:3.1", "CVSS:3.0")).base_score, base, "{vector} as 3.0");
    }
}

#[test]
fn rating_boundaries_from_real_scores() {
    let cases = [
        ("CVSS:3.1/AV:N/AC:H/PR:H/UI:R/S:U/C:L/I:L/A:L", 3.9, Level::Low),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:C/C:L/I:N/A:N", 4.0, Level::Medium),
        ("CVSS:3.1/AV:N/AC:L/PR:H/UI:R/S:C/C:H/I:L/A:N", 6.9, Level::Medium),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:L/A:L", 7.0, Level::High),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:L", 8.9, Level::High),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:H", 9.0, Level::Critical),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0, Level::Critical),
    ];
    for (vector, base, rating) in cases {
        let s = score(vector);
        assert_eq!((s.base_score, s.severity), (base, rating), "{vector}");
    }
}

#[test]
fn rating_scale_boundaries() {
    let cases = [
        (0.0, Level::None),
        (0.1, Level::Low),
        (3.9, Level::Low),
        (4.0, Level::Medium),
        (6.9, Level::Medium),
        (7.0, Level::High),
        (8.9, Level::High),
        (9.0, Level::Critical),
        (10.0, Level::Critical),
        (-0.1, Level::Unknown),
        (10.1, Level::Unknown),
        (f64::NAN, Level::Unknown),
        (f64::INFINITY, Level::Unknown),
    ];
    for (s, level) in cases {
        assert_eq!(Level::from_cvss_score(s), level, "{s}");
    }
}

#[test]
fn v4_examples() {
    let cases = [
        // FIRST's calculator documentation: the v4 default-like network vector.
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N", 9.3, Level::Critical),
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:H/SI:H/SA:H", 10.0, Level::Critical),
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:N/VA:N/SC:N/SI:N/SA:N", 0.0, Level::None),
        // Real advisories (GHSA-qwcr-r2fm-qrc7, GHSA-4xqq-m2hx-25v8, GHSA-qw6h-vgh9-j6wx).
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:N/VA:H/SC:N/SI:N/SA:N", 8.7, Level::High),
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:N/VA:L/SC:N/SI:N/SA:N", 6.9, Level::Medium),
        ("CVSS:4.0/AV:N/AC:L/AT:P/PR:N/UI:P/VC:N/VI:N/VA:N/SC:L/SI:L/SA:L", 2.3, Level::Low),
    ];
    for (vector, base, rating) in cases {
        let s = score(vector);
        assert_eq!((s.version, s.base_score, s.severity), (CvssVersion::V4_0, base, rating), "{vector}");
    }
}

#[test]
fn v4_base_score_ignores_threat_environmental_and_supplemental_metrics() {
    let base = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N";
    // E:U makes CVSS-BT 8.1 (Red Hat's cvss); the Base score stays 9.3.
    assert_eq!(score(&format!("{base}/E:U")).base_score, 9.3);
    // Environmental MSI:S would make CVSS-BE 10.0.
    assert_eq!(score(&format!("{base}/MSI:S")).base_score, 9.3);
    // RUSTSEC-2025-0138: CVSS-BT 5.5, CVSS-B 6.9; RUSTSEC-2026-0066: CVSS-BT 1.7, CVSS-B 6.3.
    assert_eq!(score("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:L/VA:N/SC:N/SI:N/SA:N/E:P").base_score, 6.9);
    assert_eq!(score("CVSS:4.0/AV:N/AC:H/AT:P/PR:N/UI:N/VC:N/VI:L/VA:N/SC:N/SI:N/SA:N/E:U").base_score, 6.3);
    // Every optional metric, Not Defined, and every supplemental value.
    let full = format!(
        "{base}/E:X/CR:X/IR:X/AR:X/MAV:X/MAC:X/MAT:X/MPR:X/MUI:X/MVC:X/MVI:X/MVA:X/MSC:X/MSI:X/MSA:X\
         /S:X/AU:X/R:X/V:X/RE:X/U:X"
    );
    assert_eq!(score(&full).base_score, 9.3);
    for u in ["Clear", "Green", "Amber", "Red"] {
        assert_eq!(score(&format!("{base}/S:P/AU:Y/R:I/V:C/RE:H/U:{u}")).base_score, 9.3);
    }
    // v3 Temporal and Environmental metrics do not change the v3 Base score either.
    let v3 = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H";
    assert_eq!(score(&format!("{v3}/E:U/RL:O/RC:U/CR:L/MAV:P/MS:C/MC:N")).base_score, 9.8);
}

#[test]
fn metric_order_is_free() {
    // v3.1 allows any order; GitHub has published v4 vectors out of FIRST's order
    // (github/advisory-database#7448, GHSA-28g4-38q8-3cwc).
    assert_eq!(score("CVSS:3.1/A:H/I:H/C:H/S:U/UI:N/PR:N/AC:L/AV:N").base_score, 9.8);
    let ghsa = "CVSS:4.0/AV:N/AC:L/AT:N/PR:L/UI:N/VC:H/SC:N/VI:H/SI:N/VA:H/SA:N";
    let canonical = "CVSS:4.0/AV:N/AC:L/AT:N/PR:L/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N";
    assert_eq!(score(ghsa), score(canonical));
    assert_eq!(score(&format!("CVSS:4.0/E:P/{}", &canonical[9..])).base_score, score(canonical).base_score);
}

#[test]
fn cvss_json_shape() {
    let v = serde_json::to_value(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H")).unwrap();
    assert_eq!(v, json!({"version": "3.1", "base_score": 9.8, "severity": "critical"}));
    let v = serde_json::to_value(score("CVSS:3.0/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N")).unwrap();
    assert_eq!(v, json!({"version": "3.0", "base_score": 6.1, "severity": "medium"}));
    let v = serde_json::to_value(score("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"))
        .unwrap();
    assert_eq!(v, json!({"version": "4.0", "base_score": 9.3, "severity": "critical"}));
    assert_eq!(
        serde_json::to_string(&score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N").severity).unwrap(),
        "\"none\""
    );
}

// ---------------------------------------------------------------------------------------------
// CVSS: every Base vector against an independent implementation

const V3: [(&str, &[&str]); 8] = [
    ("AV", &["N", "A", "L", "P"]),
    ("AC", &["L", "H"]),
    ("PR", &["N", "L", "H"]),
    ("UI", &["N", "R"]),
    ("S", &["U", "C"]),
    ("C", &["H", "L", "N"]),
    ("I", &["H", "L", "N"]),
    ("A", &["H", "L", "N"]),
];
const HLN: &[&str] = &["H", "L", "N"];
const V4: [(&str, &[&str]); 11] = [
    ("AV", &["N", "A", "L", "P"]),
    ("AC", &["L", "H"]),
    ("AT", &["N", "P"]),
    ("PR", &["N", "L", "H"]),
    ("UI", &["N", "P", "A"]),
    ("VC", HLN),
    ("VI", HLN),
    ("VA", HLN),
    ("SC", HLN),
    ("SI", HLN),
    ("SA", HLN),
];

/// Every combination, first metric varying slowest (the order of `cvss_base_scores.txt`).
fn all_vectors(prefix: &str, metrics: &[(&str, &[&str])]) -> Vec<String> {
    let mut out = vec![prefix.to_owned()];
    for (name, values) in metrics {
        out = out.iter().flat_map(|p| values.iter().map(move |v| format!("{p}/{name}:{v}"))).collect();
    }
    out
}

fn oracle(version: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(fixtures().join("cvss_base_scores.txt")).expect("oracle file");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (v, hex) = line.split_once(' ').expect("version, space, scores");
        if v != version {
            continue;
        }
        for pair in hex.as_bytes().chunks(2) {
            let tenths = std::str::from_utf8(pair)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .expect("two hex digits");
            out.push(f64::from(tenths) / 10.0);
        }
    }
    out
}

fn check_against_oracle(version: &str, metrics: &[(&str, &[&str])]) {
    let vectors = all_vectors(&format!("CVSS:{version}"), metrics);
    let expected = oracle(version);
    assert_eq!(vectors.len(), expected.len(), "CVSS {version}: vector count");
    let mut mismatches = Vec::new();
    for (vector, &want) in vectors.iter().zip(&expected) {
        let got = score(vector);
        assert_eq!(got.version.as_str(), version);
        assert_eq!(got.severity, Level::from_cvss_score(want), "{vector}");
        if got.base_score != want {
            mismatches.push(format!("{vector}: {} (oracle {want})", got.base_score));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first: {:?}",
        mismatches.len(),
        &mismatches[..5.min(mismatches.len())]
    );
}

#[test]
fn every_v30_base_vector_matches_the_oracle() {
    check_against_oracle("3.0", &V3);
}

#[test]
fn every_v31_base_vector_matches_the_oracle() {
    check_against_oracle("3.1", &V3);
}

#[test]
fn every_v40_base_vector_matches_the_oracle() {
    check_against_oracle("4.0", &V4);
}

// ---------------------------------------------------------------------------------------------
// CVSS: malformed vectors

const V31: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H";
const V40: &str = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N";

#[test]
fn missing_metrics() {
    use CvssErrorCode::MissingMetric;
    assert_eq!(code("CVSS:3.1"), MissingMetric);
    assert_eq!(code("CVSS:4.0"), MissingMetric);
    // The library alone would score this 0.0.
    assert_eq!(code("CVSS:3.1/AV:N"), MissingMetric);
    assert_eq!(code("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H"), MissingMetric);
    assert_eq!(code("CVSS:3.0/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), MissingMetric);
    assert_eq!(code("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/C:H/I:H/A:H/E:X"), MissingMetric);
    assert_eq!(code("CVSS:4.0/AV:N/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"), MissingMetric);
    assert_eq!(code("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N"), MissingMetric);
    assert_eq!(code("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/E:A"), MissingMetric);
}

#[test]
fn duplicate_metrics() {
    use CvssErrorCode::DuplicateMetric;
    assert_eq!(code(&format!("{V31}/AV:N")), DuplicateMetric);
    assert_eq!(code(&format!("{V31}/A:L")), DuplicateMetric);
    assert_eq!(code(&format!("{V31}/E:X/E:X")), DuplicateMetric);
    assert_eq!(code(&format!("{V40}/SA:N")), DuplicateMetric);
    assert_eq!(code(&format!("{V40}/U:Red/U:Red")), DuplicateMetric);
    assert_eq!(code("CVSS:3.1/AV:N/av:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), DuplicateMetric);
}

#[test]
fn unknown_or_invalid_values() {
    use CvssErrorCode::{InvalidValue, UnknownMetric};
    assert_eq!(code(&V31.replace("AV:N", "AV:Q")), InvalidValue);
    // X (Not Defined) exists for optional metrics only.
    assert_eq!(code(&V31.replace("AV:N", "AV:X")), InvalidValue);
    assert_eq!(code(&V40.replace("AV:N", "AV:X")), InvalidValue);
    assert_eq!(code(&V31.replace("PR:N", "PR:U")), InvalidValue);
    assert_eq!(code(&V31.replace("S:U", "S:X")), InvalidValue);
    assert_eq!(code(&V40.replace("UI:N", "UI:R")), InvalidValue); // v3's value, not v4's
    assert_eq!(code(&V40.replace("SI:N", "SI:S")), InvalidValue); // S is for MSI only
    assert_eq!(code(&format!("{V40}/S:U")), InvalidValue); // v4 S is Safety
    assert_eq!(code(&format!("{V31}/E:A")), InvalidValue);
    assert_eq!(code(&V31.replace("A:H", "A:HH")), InvalidValue);
    assert_eq!(code(&V31.replace("A:H", "A:H ")), InvalidValue);
    assert_eq!(code(&V31.replace("AV:N", "AV:Ń")), InvalidValue);
    assert_eq!(code(&V31.replace("AV:N", "AV:\n\u{1b}[31m")), InvalidValue);
    // Case-sensitive, as FIRST's schemas are (the library would upper-case).
    assert_eq!(code(&V31.replace("AV:N", "AV:n")), InvalidValue);
    assert_eq!(code(&format!("{V40}/U:clear")), InvalidValue);
    assert_eq!(code(&format!("{V40}/U:RED")), InvalidValue);
    assert_eq!(code(&V31.replace("AV:N", "av:N")), UnknownMetric);
    assert_eq!(code(&V31.replace("AV:N", "Av:N")), UnknownMetric);
    // Metrics of another version, or of none.
    assert_eq!(code(&format!("{V31}/AT:N")), UnknownMetric);
    assert_eq!(code(&format!("{V31}/FOO:BAR")), UnknownMetric);
    assert_eq!(code(&format!("{V40}/C:H")), UnknownMetric);
    assert_eq!(code(&format!("{V40}/RL:O")), UnknownMetric);
    assert_eq!(code(&format!("{V31}/Au:N")), UnknownMetric);
}

#[test]
fn wrong_prefix_or_shape() {
    use CvssErrorCode::Malformed;
    for vector in [
        "",
        "/",
        "CVSS",
        "CVSS:",
        "CVSS:/AV:N",
        "CVSS:3/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:v3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "cvss:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "XCVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        " CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1 /AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1/",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/",
        "CVSS:3.1//AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/:H",
        "CVSS:3.1/AV:N:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1/AV=N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "(AV:N/AC:L/Au:N/C:P/I:P/A:P)",
        "9.8",
        "HIGH",
    ] {
        assert_eq!(code(vector), Malformed, "{vector:?}");
    }
    let long = format!("{V31}{}", "/E:X".repeat(MAX_VECTOR_LEN));
    assert_eq!(code(&long), Malformed);
}

#[test]
fn unsupported_versions() {
    use CvssErrorCode::UnsupportedVersion;
    // CVSS v2, as NVD and OSV's CVSS_V2 write it.
    assert_eq!(code("AV:N/AC:L/Au:N/C:P/I:P/A:P"), UnsupportedVersion);
    assert_eq!(code("AV:L/AC:H/Au:M/C:N/I:N/A:C/E:F/RL:OF/RC:C"), UnsupportedVersion);
    assert_eq!(code("CVSS:2.0/AV:N/AC:L/Au:N/C:P/I:P/A:P"), UnsupportedVersion);
    assert_eq!(code("CVSS:3.2/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), UnsupportedVersion);
    assert_eq!(code("CVSS:4.1/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"), UnsupportedVersion);
    assert_eq!(code("CVSS:5.0/AV:N"), UnsupportedVersion);
    // A v4 vector under a v3 prefix, and the reverse, is not silently rescored.
    assert_eq!(code(&V40.replace("CVSS:4.0", "CVSS:3.1")), CvssErrorCode::UnknownMetric);
    // (v4 reads `S:U` as Safety, which takes X, N or P.)
    assert_eq!(code(&V31.replace("CVSS:3.1", "CVSS:4.0")), CvssErrorCode::InvalidValue);
}

#[test]
fn error_codes_and_json() {
    let all = [
        (CvssErrorCode::Malformed, "cvss_malformed"),
        (CvssErrorCode::UnsupportedVersion, "cvss_unsupported_version"),
        (CvssErrorCode::UnknownMetric, "cvss_unknown_metric"),
        (CvssErrorCode::InvalidValue, "cvss_invalid_value"),
        (CvssErrorCode::DuplicateMetric, "cvss_duplicate_metric"),
        (CvssErrorCode::MissingMetric, "cvss_missing_metric"),
    ];
    for (c, s) in all {
        assert_eq!(c.as_str(), s);
        assert_eq!(serde_json::to_value(c).unwrap(), json!(s));
    }
    let e = cvss("CVSS:3.1/AV:N").unwrap_err();
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["code"], "cvss_missing_metric");
    assert!(v["message"].as_str().unwrap().contains("AC"), "{v}");
    assert!(e.to_string().ends_with("(cvss_missing_metric)"), "{e}");
    // Messages quote only an excerpt of what was given.
    let e = cvss(&format!("{V31}/{}:N", "Q".repeat(400))).unwrap_err();
    assert!(e.message.len() < 120, "{}", e.message);
}

// ---------------------------------------------------------------------------------------------
// Advisory severity

/// The inputs `advisory_severity` takes, read from an OSV advisory.
fn inputs(advisory: &Value) -> (Vec<(String, String)>, Option<&Value>, Vec<&Value>) {
    let severity = advisory["severity"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["type"].as_str().expect("type").to_owned(),
                        s["score"].as_str().expect("score").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let affected = advisory["affected"]
        .as_array()
        .expect("affected[]")
        .iter()
        .flat_map(|a| [a.get("database_specific"), a.get("ecosystem_specific")])
        .flatten()
        .collect();
    (severity, advisory.get("database_specific"), affected)
}

fn severity_of(advisory: &Value) -> Severity {
    let (severity, database_specific, affected) = inputs(advisory);
    advisory_severity(&severity, database_specific, &affected)
}

fn fixture_severity(rel: &str) -> Severity {
    let text = std::fs::read_to_string(fixtures().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    severity_of(&serde_json::from_str(&text).expect("advisory JSON"))
}

/// (fixture, level, source, CVSS score, RustSec informational kind)
type Expected<'a> = (&'a str, Level, SeveritySource, Option<f64>, Option<&'a str>);

#[test]
fn real_advisories() {
    use Level::{Critical, High, Low, Medium, Unknown};
    use SeveritySource as S;
    let cases: [Expected<'_>; 20] = [
        ("npm/GHSA-qw6h-vgh9-j6wx.json", Medium, S::Advisory, None, None),
        ("npm/GHSA-x5rq-j2xg-h7qm.json", Medium, S::Advisory, None, None),
        ("npm/GHSA-cf4h-3jhx-xvhq.json", Critical, S::Advisory, None, None),
        ("npm/GHSA-w7rc-rwvf-8q5r.json", Low, S::Advisory, None, None),
        ("RubyGems/GHSA-4xqq-m2hx-25v8.json", Medium, S::Advisory, None, None),
        ("RubyGems/GHSA-hq7p-j377-6v63.json", High, S::Advisory, None, None),
        ("PyPI/PYSEC-2017-105.json", High, S::CvssV3, Some(7.5), None),
        ("PyPI/PYSEC-2023-163.json", Critical, S::CvssV3, Some(9.8), None),
        ("PyPI/PYSEC-2023-248.json", Medium, S::CvssV3, Some(6.1), None),
        ("PyPI/PYSEC-2005-1.json", Unknown, S::None, None, None),
        ("Go/GO-2020-0001.json", Unknown, S::None, None, None),
        ("crates.io/RUSTSEC-2022-0013.json", High, S::CvssV3, Some(7.5), None),
        ("crates.io/RUSTSEC-2021-0078.json", Medium, S::CvssV3, Some(5.3), None),
        ("crates.io/RUSTSEC-2023-0001.json", Unknown, S::None, None, None),
        ("crates.io/RUSTSEC-2020-0016.json", Unknown, S::None, None, Some("unmaintained")),
        ("crates.io/RUSTSEC-2020-0025.json", Critical, S::CvssV3, Some(9.8), Some("unmaintained")),
        ("crates.io/RUSTSEC-2019-0011.json", High, S::CvssV3, Some(7.5), Some("unsound")),
        ("crates.io/RUSTSEC-2025-0138.json", Medium, S::CvssV4, Some(6.9), None),
        ("crates.io/RUSTSEC-2026-0066.json", Medium, S::CvssV4, Some(6.3), None),
        ("crates.io/RUSTSEC-2026-0023.json", Low, S::CvssV4, Some(0.0), None),
    ];
    for (rel, level, source, score, informational) in cases {
        let got = fixture_severity(rel);
        assert_eq!(
            (got.level, got.source, got.score, got.informational.as_deref()),
            (level, source, score, informational),
            "{rel}"
        );
    }
}

fn adv(severity: &[(&str, &str)], database_specific: Option<Value>) -> Severity {
    let severity: Vec<(String, String)> =
        severity.iter().map(|&(t, s)| (t.to_owned(), s.to_owned())).collect();
    advisory_severity(&severity, database_specific.as_ref(), &[])
}

const CRIT_V3: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"; // 9.8
const MED_V3: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:L"; // 5.3
const HIGH_V4: &str = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:N/VI:N/VA:H/SC:N/SI:N/SA:N"; // 8.7

#[test]
fn github_severity_words() {
    for (word, level) in [
        ("LOW", Level::Low),
        ("MODERATE", Level::Medium),
        ("moderate", Level::Medium),
        ("Moderate", Level::Medium),
        ("MEDIUM", Level::Medium),
        ("HIGH", Level::High),
        ("CRITICAL", Level::Critical),
    ] {
        let s = adv(&[], Some(json!({"severity": word})));
        assert_eq!((s.level, s.source), (level, SeveritySource::Advisory), "{word}");
    }
}

#[test]
fn the_advisory_wins_over_cvss() {
    // A lower advisory rating is still the advisory's word.
    let s = adv(&[("CVSS_V3", CRIT_V3)], Some(json!({"severity": "LOW"})));
    assert_eq!((s.level, s.source, s.score), (Level::Low, SeveritySource::Advisory, None));
    let s = adv(&[("CVSS_V3", MED_V3), ("CVSS_V4", HIGH_V4)], Some(json!({"severity": "CRITICAL"})));
    assert_eq!((s.level, s.source), (Level::Critical, SeveritySource::Advisory));
}

#[test]
fn unrecognized_advisory_ratings_fall_through() {
    for ds in [
        json!({"severity": "UNKNOWN"}),
        json!({"severity": ""}),
        json!({"severity": " HIGH"}),
        json!({"severity": 9.8}),
        json!({"severity": null}),
        json!({"severity": ["HIGH"]}),
        json!({"review_status": "REVIEWED"}),
        json!({"cwe_ids": [], "github_reviewed": true}),
        json!("HIGH"),
        json!(null),
    ] {
        let s = adv(&[("CVSS_V3", MED_V3)], Some(ds.clone()));
        assert_eq!((s.level, s.source, s.score), (Level::Medium, SeveritySource::CvssV3, Some(5.3)), "{ds}");
        let s = adv(&[], Some(ds.clone()));
        assert_eq!((s.level, s.source), (Level::Unknown, SeveritySource::None), "{ds}");
    }
}

#[test]
fn cvss_order_v3_then_v4() {
    // v3 is read first even when v4 rates higher.
    let s = adv(&[("CVSS_V4", HIGH_V4), ("CVSS_V3", MED_V3)], None);
    assert_eq!((s.level, s.source, s.score), (Level::Medium, SeveritySource::CvssV3, Some(5.3)));
    // v4 when it is all there is.
    let s = adv(&[("CVSS_V4", HIGH_V4)], None);
    assert_eq!((s.level, s.source, s.score), (Level::High, SeveritySource::CvssV4, Some(8.7)));
    // Several v3 vectors: the highest.
    let s = adv(&[("CVSS_V3", MED_V3), ("CVSS_V3", CRIT_V3), ("CVSS_V3", MED_V3)], None);
    assert_eq!((s.level, s.score), (Level::Critical, Some(9.8)));
}

#[test]
fn unusable_vectors_are_skipped() {
    // A malformed v3 vector is skipped for the next one, then for v4, then nothing.
    let broken = "CVSS:3.1/AV:N/AC:L";
    let s = adv(&[("CVSS_V3", broken), ("CVSS_V3", MED_V3)], None);
    assert_eq!((s.source, s.score), (SeveritySource::CvssV3, Some(5.3)));
    let s = adv(&[("CVSS_V3", broken), ("CVSS_V4", HIGH_V4)], None);
    assert_eq!((s.source, s.score), (SeveritySource::CvssV4, Some(8.7)));
    let s = adv(&[("CVSS_V3", broken), ("CVSS_V4", "CVSS:4.0/AV:N")], None);
    assert_eq!((s.level, s.source, s.score), (Level::Unknown, SeveritySource::None, None));
    // A vector whose version contradicts its type.
    let s = adv(&[("CVSS_V3", HIGH_V4)], None);
    assert_eq!((s.level, s.source), (Level::Unknown, SeveritySource::None));
    let s = adv(&[("CVSS_V4", CRIT_V3)], None);
    assert_eq!((s.level, s.source), (Level::Unknown, SeveritySource::None));
    // Types gatehouse does not score.
    let s = adv(&[("CVSS_V2", "AV:N/AC:L/Au:N/C:P/I:P/A:P"), ("Ubuntu", "high"), ("cvss_v3", CRIT_V3)], None);
    assert_eq!((s.level, s.source), (Level::Unknown, SeveritySource::None));
}

#[test]
fn a_zero_score_is_low_not_none() {
    let s = adv(&[("CVSS_V3", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N")], None);
    assert_eq!((s.level, s.source, s.score), (Level::Low, SeveritySource::CvssV3, Some(0.0)));
}

#[test]
fn informational_is_shown_not_rated() {
    let affected = [json!({"informational": "notice", "categories": []}), json!({"affects": {}})];
    let refs: Vec<&Value> = affected.iter().collect();
    let s = advisory_severity(&[], None, &refs);
    assert_eq!(
        (s.level, s.source, s.informational.as_deref()),
        (Level::Unknown, SeveritySource::None, Some("notice"))
    );
    let s = advisory_severity(&[("CVSS_V3".into(), MED_V3.into())], None, &refs);
    assert_eq!((s.level, s.informational.as_deref()), (Level::Medium, Some("notice")));
    let null = [json!({"informational": null})];
    let s = advisory_severity(&[], None, &[&null[0]]);
    assert_eq!(s.informational, None);
}

#[test]
fn severity_json_shape() {
    let s = adv(&[], Some(json!({"severity": "MODERATE"})));
    assert_eq!(serde_json::to_value(&s).unwrap(), json!({"level": "medium", "source": "advisory"}));
    let s = adv(&[("CVSS_V3", CRIT_V3)], None);
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        json!({"level": "critical", "source": "cvss_v3", "score": 9.8})
    );
    let s = adv(&[("CVSS_V4", HIGH_V4)], None);
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        json!({"level": "high", "source": "cvss_v4", "score": 8.7})
    );
    let s = fixture_severity("crates.io/RUSTSEC-2020-0016.json");
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        json!({"level": "unknown", "source": "none", "informational": "unmaintained"})
    );
    for (level, text) in [
        (Level::None, "none"),
        (Level::Low, "low"),
        (Level::Medium, "medium"),
        (Level::High, "high"),
        (Level::Critical, "critical"),
        (Level::Unknown, "unknown"),
    ] {
        assert_eq!(level.as_str(), text);
        assert_eq!(level.to_string(), text);
        assert_eq!(serde_json::to_value(level).unwrap(), json!(text));
    }
    for (source, text) in [
        (SeveritySource::Advisory, "advisory"),
        (SeveritySource::CvssV3, "cvss_v3"),
        (SeveritySource::CvssV4, "cvss_v4"),
        (SeveritySource::None, "none"),
    ] {
        assert_eq!(source.as_str(), text);
        assert_eq!(serde_json::to_value(source).unwrap(), json!(text));
    }
}

// ---------------------------------------------------------------------------------------------
// The gate

const NO_FINDINGS: &[Level] = &[];

#[test]
fn gate_modes_parse_strictly() {
    for (text, mode) in [("off", GateMode::Off), ("high", GateMode::High), ("critical", GateMode::Critical)] {
        assert_eq!(text.parse::<GateMode>().unwrap(), mode);
        assert_eq!(mode.to_string(), text);
        assert_eq!(serde_json::to_value(mode).unwrap(), json!(text));
    }
    for bad in
        ["", "HIGH", "High", " high", "high ", "medium", "low", "none", "on", "unknown", "crit", "off\n"]
    {
        let e = bad.parse::<GateMode>().unwrap_err();
        assert!(e.to_string().contains("invalid_gate_mode"), "{bad:?}: {e}");
    }
}

fn tripped(mode: GateMode, levels: &[Level], errored: bool) -> bool {
    decide(mode, levels, errored).tripped
}

#[test]
fn high_gate_thresholds() {
    use Level::{Critical, High, Low, Medium, Unknown};
    for (level, trips) in
        [(Level::None, false), (Low, false), (Medium, false), (High, true), (Critical, true), (Unknown, true)]
    {
        assert_eq!(tripped(GateMode::High, &[level], false), trips, "{level}");
    }
}

#[test]
fn critical_gate_thresholds_and_unknown_counts_as_high() {
    use Level::{Critical, High, Low, Medium, Unknown};
    for (level, trips) in [
        (Level::None, false),
        (Low, false),
        (Medium, false),
        (High, false),
        (Critical, true),
        (Unknown, false),
    ] {
        assert_eq!(tripped(GateMode::Critical, &[level], false), trips, "{level}");
    }
    assert_eq!(Unknown.for_gate(), High);
}

#[test]
fn off_never_trips() {
    use Level::{Critical, High, Unknown};
    for errored in [false, true] {
        let d = decide(GateMode::Off, &[Critical, Unknown, High], errored);
        assert_eq!(
            d,
            GateDecision {
                mode: GateMode::Off,
                tripped: false,
                reason: None,
                tripping: vec![],
                scan_errored: errored
            }
        );
    }
}

#[test]
fn an_errored_scan_blocks_high_and_critical() {
    use Level::{High, Low, Medium, Unknown};
    for mode in [GateMode::High, GateMode::Critical] {
        for findings in [NO_FINDINGS, &[Low], &[Low, Medium]] {
            let d = decide(mode, findings, true);
            assert!(d.tripped, "{mode} {findings:?}");
            assert_eq!(d.reason, Some(GateReason::ScanError));
            assert!(d.tripping.is_empty());
            assert!(d.scan_errored);
        }
    }
    // With tripping findings too, the reason is the severity; the scan error is still recorded.
    let d = decide(GateMode::High, &[Low, High], true);
    assert_eq!(
        (d.tripped, d.reason, d.tripping.as_slice(), d.scan_errored),
        (true, Some(GateReason::Severity), &[1][..], true)
    );
    // `high` on a complete scan with only a critical gate's worth of nothing.
    let d = decide(GateMode::Critical, &[High, Unknown], true);
    assert_eq!(d.reason, Some(GateReason::ScanError));
}

#[test]
fn a_clean_complete_scan_passes() {
    use Level::{Low, Medium};
    for mode in [GateMode::Off, GateMode::High, GateMode::Critical] {
        let d = decide(mode, NO_FINDINGS, false);
        assert_eq!((d.tripped, d.reason, d.tripping.len()), (false, None, 0), "{mode}");
        let d = decide(mode, &[Low, Medium, Low], false);
        assert!(!d.tripped, "{mode}");
    }
}

#[test]
fn tripping_lists_every_finding_at_the_threshold() {
    use Level::{Critical, High, Low, Medium, Unknown};
    let findings = [Low, Critical, Medium, Unknown, High, Low, Critical];
    let d = decide(GateMode::High, &findings, false);
    assert_eq!((d.tripped, d.reason, d.tripping), (true, Some(GateReason::Severity), vec![1, 3, 4, 6]));
    let d = decide(GateMode::Critical, &findings, false);
    assert_eq!(d.tripping, vec![1, 6]);
}

#[test]
fn gate_json_shape() {
    use Level::{Critical, Low, Unknown};
    let d = decide(GateMode::High, &[Low, Unknown], false);
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({"mode": "high", "tripped": true, "reason": "dependency_gate_severity", "tripping": [1], "scan_errored": false})
    );
    let d = decide(GateMode::Critical, NO_FINDINGS, true);
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({"mode": "critical", "tripped": true, "reason": "dependency_gate_scan_error", "tripping": [], "scan_errored": true})
    );
    let d = decide(GateMode::Off, &[Critical], true);
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({"mode": "off", "tripped": false, "reason": null, "tripping": [], "scan_errored": true})
    );
    assert_eq!(GateReason::Severity.as_str(), "dependency_gate_severity");
    assert_eq!(GateReason::ScanError.as_str(), "dependency_gate_scan_error");
    assert_eq!(GateReason::NoScan.as_str(), "dependency_gate_no_scan");
    assert_eq!(GateReason::ScanPending.as_str(), "dependency_gate_scan_pending");
    // The wire form serde writes is the code in gatehouse's closed list.
    for r in [GateReason::Severity, GateReason::ScanError, GateReason::NoScan, GateReason::ScanPending] {
        assert_eq!(serde_json::to_value(r).unwrap(), json!(r.reason().as_str()));
        assert_eq!(gatehouse_core::Reason::parse(r.as_str()), Some(r.reason()));
    }
}

#[test]
fn gate_over_scores_at_each_boundary() {
    // From a vector through the advisory severity to the gate.
    let gate = |vector: &str, mode: GateMode| {
        let s = adv(&[("CVSS_V3", vector)], None);
        decide(mode, &[s], false).tripped
    };
    let v69 = "CVSS:3.1/AV:N/AC:L/PR:H/UI:R/S:C/C:H/I:L/A:N";
    let v70 = "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:L/A:L";
    let v89 = "CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:L";
    let v90 = "CVSS:3.1/AV:N/AC:L/PR:L/UI:R/S:C/C:H/I:H/A:H";
    assert!(!gate(v69, GateMode::High));
    assert!(gate(v70, GateMode::High));
    assert!(gate(v89, GateMode::High));
    assert!(!gate(v89, GateMode::Critical));
    assert!(gate(v90, GateMode::Critical));
}

#[test]
fn gate_over_real_advisories() {
    let findings: Vec<Severity> = [
        "npm/GHSA-x5rq-j2xg-h7qm.json",     // medium, advisory
        "crates.io/RUSTSEC-2020-0016.json", // unknown (unmaintained, no vector)
        "PyPI/PYSEC-2023-163.json",         // critical, cvss_v3
        "crates.io/RUSTSEC-2026-0023.json", // low, cvss_v4 0.0
    ]
    .iter()
    .map(|rel| fixture_severity(rel))
    .collect();
    assert_eq!(decide(GateMode::High, &findings, false).tripping, vec![1, 2]);
    assert_eq!(decide(GateMode::Critical, &findings, false).tripping, vec![2]);
    assert!(!decide(GateMode::Critical, &findings[..2], false).tripped);
    assert!(decide(GateMode::Critical, &findings[..2], true).tripped);
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Strings that look like CVSS vectors, so the deeper paths are reached.
fn vectorish() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just("CVSS:3.1/".to_owned()),
        Just("CVSS:3.0/".to_owned()),
        Just("CVSS:4.0/".to_owned()),
        Just("CVSS:2.0/".to_owned()),
        Just(String::new()),
        "[A-Za-z0-9:./]{0,12}",
    ];
    let names = prop_oneof![
        prop::sample::select(vec![
            "AV", "AC", "AT", "PR", "UI", "S", "C", "I", "A", "VC", "VI", "VA", "SC", "SI", "SA", "E", "RL",
            "RC", "CR", "IR", "AR", "MAV", "MAC", "MAT", "MPR", "MUI", "MS", "MC", "MI", "MA", "MVC", "MVI",
            "MVA", "MSC", "MSI", "MSA", "AU", "R", "V", "RE", "U", "Au", "av", "",
        ])
        .prop_map(str::to_owned),
        "[A-Za-z]{1,4}",
    ];
    let values = prop_oneof![
        prop::sample::select(vec![
            "N", "A", "L", "P", "H", "R", "U", "C", "X", "F", "O", "T", "W", "M", "S", "Y", "I", "D",
            "Clear", "Green", "Amber", "Red", "n", "", "NN",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,3}",
    ];
    let component = (names, prop::sample::select(vec![":", ":", ":", "::", "", "="]), values)
        .prop_map(|(n, sep, v)| format!("{n}{sep}{v}"));
    (prefix, prop::collection::vec(component, 0..40)).prop_map(|(p, cs)| format!("{p}{}", cs.join("/")))
}

fn check_result(input: &str) {
    match cvss(input) {
        Ok(s) => {
            assert!((0.0..=10.0).contains(&s.base_score), "{input}: {s:?}");
            assert_eq!((s.base_score * 10.0).round() / 10.0, s.base_score, "{input}: {s:?}");
            assert_eq!(s.severity, Level::from_cvss_score(s.base_score));
            assert!(input.starts_with(&format!("CVSS:{}/", s.version.as_str())), "{input}");
        }
        Err(e) => {
            assert!(e.message.chars().count() <= 160, "{input}: {}", e.message);
            assert!(!e.message.chars().any(char::is_control), "{input}: {:?}", e.message);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn cvss_never_panics_on_any_string(s in any::<String>()) {
        check_result(&s);
    }

    #[test]
    fn cvss_never_panics_on_vector_like_strings(s in vectorish()) {
        check_result(&s);
    }

    #[test]
    fn gate_decision_is_consistent(
        levels in prop::collection::vec(
            prop::sample::select(vec![Level::None, Level::Low, Level::Medium, Level::High, Level::Critical, Level::Unknown]),
            0..12,
        ),
        errored in any::<bool>(),
        mode in prop::sample::select(vec![GateMode::Off, GateMode::High, GateMode::Critical]),
    ) {
        let d = decide(mode, &levels, errored);
        let trips: Vec<usize> = (0..levels.len()).filter(|&i| mode.trips_on(levels[i])).collect();
        prop_assert_eq!(&d.tripping, &trips);
        prop_assert_eq!(d.tripped, mode != GateMode::Off && (errored || !trips.is_empty()));
        prop_assert_eq!(d.tripped, d.reason.is_some());
        prop_assert_eq!(d.scan_errored, errored);
        if mode == GateMode::Off {
            prop_assert!(d.tripping.is_empty());
        }
        // Raising any finding never un-trips the gate.
        if d.tripped {
            let raised: Vec<Level> = levels.iter().map(|_| Level::Critical).collect();
            prop_assert!(decide(mode, &raised, errored).tripped);
        }
    }
}
