//! How severe a finding is: CVSS base scores and the order severity sources are read in.
//!
//! # CVSS
//!
//! [`cvss()`] scores a CVSS v3.0, v3.1 or v4.0 vector string. The arithmetic is the RustSec
//! [`cvss`](https://crates.io/crates/cvss) crate's (v3 equations with each version's own Roundup;
//! v4 macro-vector lookup and interpolation); this module adds the checks that crate leaves out,
//! so that a vector the specification does not allow is an error rather than a score:
//!
//! - every Base metric must be present (the crate scores `CVSS:3.1/AV:N` as 0.0);
//! - metric names and values are case-sensitive, as in FIRST's JSON schemas for both versions
//!   (the crate upper-cases what it reads, so `av:n` would pass);
//! - a vector is at most [`MAX_VECTOR_LEN`] bytes and each component is exactly `NAME:VALUE`.
//!
//! Metric order is not enforced. CVSS v3.x allows any order. FIRST's v4.0 schema prescribes one,
//! but published advisories do not always follow it (github/advisory-database#7448), and the
//! score does not depend on it.
//!
//! `base_score` is always the Base score: for v3.x the Base equation, whatever Temporal or
//! Environmental metrics the vector also carries; for v4.0 the CVSS-B score from the eleven Base
//! metrics, with Threat, Environmental and Supplemental metrics set aside. Threat metrics such as
//! `E:U` can only lower a v4 score, so the gate reads the higher Base score.
//!
//! CVSS v2 vectors (no `CVSS:` prefix) are refused with `cvss_unsupported_version`: they have no
//! qualitative rating scale in their specification and the seed reads v3 only.
//!
//! # Advisory severity
//!
//! [`advisory_severity`] picks a finding's level, first match wins:
//!
//! 1. **`advisory`** — the advisory's own rating: `database_specific.severity` as GitHub writes it
//!    (`LOW`, `MODERATE`, `HIGH`, `CRITICAL`, any case; `MODERATE` reads as medium, `MEDIUM` is
//!    accepted too). In the OSV exports of the five ecosystems gatehouse reads, this is the only
//!    field that rates an advisory: PyPI advisories carry no `database_specific`, Go's carries
//!    `url` and `review_status` (a review state, not a rating), and RustSec's carries `license`
//!    plus, per affected package, `cvss` (the same vector as `severity[]`), `categories` and
//!    `informational`.
//! 2. **`cvss_v3`** — the Base score of a `CVSS_V3` entry of `severity[]`; if several score, the
//!    highest.
//! 3. **`cvss_v4`** — likewise for `CVSS_V4`, read only when no v3 vector scores.
//! 4. **`none`** — level `unknown`.
//!
//! RustSec's `informational` (`unmaintained`, `unsound`, `notice`) says what kind of advisory it
//! is, not how severe: it is not read as a level. An informational advisory with no CVSS vector
//! is `unknown` (which the gate counts as high); the kind is kept in [`Severity::informational`]
//! so a report can show it.
//!
//! A finding's level is never `none`: a vector that scores 0.0 (RustSec has v4 vectors with no
//! impact at all, e.g. RUSTSEC-2026-0023) still marks a known vulnerable version, and is `low`.
//! A vector that does not score, or whose version contradicts its `type`, is skipped; entries of
//! other types (`CVSS_V2`, `Ubuntu`) are ignored.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

/// The longest vector string read. A complete v4.0 vector with every optional metric is under
/// 200 bytes; anything longer is refused (`cvss_malformed`) before it is parsed.
pub const MAX_VECTOR_LEN: usize = 512;

/// A qualitative severity level.
///
/// CVSS's rating scale (`none`…`critical`) plus `unknown` for a finding nothing rates.
/// A [`CvssScore`] is never `unknown`; a [`Severity`] is never `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// CVSS 0.0.
    None,
    /// CVSS 0.1–3.9; GitHub `LOW`.
    Low,
    /// CVSS 4.0–6.9; GitHub `MODERATE`.
    Medium,
    /// CVSS 7.0–8.9; GitHub `HIGH`.
    High,
    /// CVSS 9.0–10.0; GitHub `CRITICAL`.
    Critical,
    /// Nothing in the advisory rates it. The gate counts it as [`Level::High`].
    Unknown,
}

impl Level {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Critical => "critical",
            Self::Unknown => "unknown",
        }
    }

    /// Every level.
    pub const ALL: [Level; 6] =
        [Self::None, Self::Low, Self::Medium, Self::High, Self::Critical, Self::Unknown];

    /// Reads the wire form back ([`Level::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The rating of a CVSS score on the specification's scale (the same for v3.x and v4.0):
    /// 0.0 none, 0.1–3.9 low, 4.0–6.9 medium, 7.0–8.9 high, 9.0–10.0 critical.
    /// A score outside 0.0–10.0 (or NaN) is no CVSS score: `Unknown`.
    pub fn from_cvss_score(score: f64) -> Self {
        if !(0.0..=10.0).contains(&score) {
            Self::Unknown
        } else if score < 0.1 {
            Self::None
        } else if score < 4.0 {
            Self::Low
        } else if score < 7.0 {
            Self::Medium
        } else if score < 9.0 {
            Self::High
        } else {
            Self::Critical
        }
    }

    /// The level the gate compares: `Unknown` counts as `High`.
    pub fn for_gate(self) -> Self {
        match self {
            Self::Unknown => Self::High,
            other => other,
        }
    }

    /// Rank for comparisons after [`Level::for_gate`]; `Unknown` ranks as `High`.
    pub(crate) fn gate_rank(self) -> u8 {
        match self.for_gate() {
            Self::None => 0,
            Self::Low => 1,
            Self::Medium => 2,
            Self::High | Self::Unknown => 3,
            Self::Critical => 4,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AsRef<Level> for Level {
    fn as_ref(&self) -> &Level {
        self
    }
}

/// A CVSS specification version gatehouse scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CvssVersion {
    /// CVSS v3.0.
    #[serde(rename = "3.0")]
    V3_0,
    /// CVSS v3.1.
    #[serde(rename = "3.1")]
    V3_1,
    /// CVSS v4.0.
    #[serde(rename = "4.0")]
    V4_0,
}

impl CvssVersion {
    /// `"3.0"`, `"3.1"` or `"4.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V3_0 => "3.0",
            Self::V3_1 => "3.1",
            Self::V4_0 => "4.0",
        }
    }

    /// True for 3.0 and 3.1.
    pub fn is_v3(self) -> bool {
        matches!(self, Self::V3_0 | Self::V3_1)
    }
}

impl fmt::Display for CvssVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scored CVSS vector: `{"version": "3.1", "base_score": 9.8, "severity": "critical"}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CvssScore {
    /// The specification version the vector names.
    pub version: CvssVersion,
    /// The Base score, 0.0–10.0 with one decimal, rounded as the version's specification rounds.
    pub base_score: f64,
    /// The rating of `base_score` ([`Level::from_cvss_score`]); never `Unknown`.
    pub severity: Level,
}

/// Why a vector string could not be scored. The codes are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CvssErrorCode {
    /// Not `CVSS:<version>/NAME:VALUE/...`: wrong or missing prefix, an empty component,
    /// a component that is not exactly `NAME:VALUE`, or longer than [`MAX_VECTOR_LEN`].
    #[serde(rename = "cvss_malformed")]
    Malformed,
    /// A well-formed version other than 3.0, 3.1 and 4.0, or a CVSS v2 vector.
    #[serde(rename = "cvss_unsupported_version")]
    UnsupportedVersion,
    /// A metric name the version does not define (names are case-sensitive).
    #[serde(rename = "cvss_unknown_metric")]
    UnknownMetric,
    /// A value the metric does not take (values are case-sensitive).
    #[serde(rename = "cvss_invalid_value")]
    InvalidValue,
    /// The same metric twice.
    #[serde(rename = "cvss_duplicate_metric")]
    DuplicateMetric,
    /// A Base metric is absent.
    #[serde(rename = "cvss_missing_metric")]
    MissingMetric,
}

impl CvssErrorCode {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "cvss_malformed",
            Self::UnsupportedVersion => "cvss_unsupported_version",
            Self::UnknownMetric => "cvss_unknown_metric",
            Self::InvalidValue => "cvss_invalid_value",
            Self::DuplicateMetric => "cvss_duplicate_metric",
            Self::MissingMetric => "cvss_missing_metric",
        }
    }
}

impl fmt::Display for CvssErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A vector string that could not be scored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct CvssError {
    /// Why, as a stable code.
    pub code: CvssErrorCode,
    /// What is wrong, for a person. Quotes at most a short excerpt of the input.
    pub message: String,
}

impl CvssError {
    fn new(code: CvssErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

/// At most 24 characters of untrusted text, for an error message.
fn excerpt(s: &str) -> String {
    const MAX: usize = 24;
    let mut out: String = s.chars().take(MAX).collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    format!("{out:?}")
}

/// The Base metrics of each version, in the specification's order.
const V3_BASE: [&str; 8] = ["AV", "AC", "PR", "UI", "S", "C", "I", "A"];
const V4_BASE: [&str; 11] = ["AV", "AC", "AT", "PR", "UI", "VC", "VI", "VA", "SC", "SI", "SA"];

/// Scores a CVSS v3.0, v3.1 or v4.0 vector string (see the [module docs](self) for what is
/// checked). Never panics, whatever the input.
pub fn cvss(vector: &str) -> Result<CvssScore, CvssError> {
    use CvssErrorCode as C;

    if vector.len() > MAX_VECTOR_LEN {
        return Err(CvssError::new(
            C::Malformed,
            format!("longer than {MAX_VECTOR_LEN} bytes ({} bytes)", vector.len()),
        ));
    }
    let (head, rest) = match vector.split_once('/') {
        Some((head, rest)) => (head, Some(rest)),
        None => (vector, None),
    };
    let Some(version_text) = head.strip_prefix("CVSS:") else {
        // CVSS v2 vectors carry no prefix at all.
        if cvss::v2::Vector::from_str(vector).is_ok() {
            return Err(CvssError::new(
                C::UnsupportedVersion,
                "a CVSS v2 vector; only v3.0, v3.1 and v4.0 are scored",
            ));
        }
        return Err(CvssError::new(
            C::Malformed,
            format!("does not start with \"CVSS:<version>/\": {}", excerpt(vector)),
        ));
    };
    let version = match version_text {
        "3.0" => CvssVersion::V3_0,
        "3.1" => CvssVersion::V3_1,
        "4.0" => CvssVersion::V4_0,
        other if is_dotted_number(other) => {
            return Err(CvssError::new(
                C::UnsupportedVersion,
                format!("CVSS version {other} is not scored; only 3.0, 3.1 and 4.0 are"),
            ));
        }
        other => {
            return Err(CvssError::new(C::Malformed, format!("not a CVSS version: {}", excerpt(other))));
        }
    };
    let Some(rest) = rest else {
        let first = if version.is_v3() { V3_BASE[0] } else { V4_BASE[0] };
        return Err(CvssError::new(C::MissingMetric, format!("no metrics; Base metric {first} is missing")));
    };

    // Components exactly as written.
    let mut components: Vec<(&str, &str)> = Vec::new();
    for component in rest.split('/') {
        let Some((name, value)) = component.split_once(':') else {
            return Err(CvssError::new(C::Malformed, format!("not NAME:VALUE: {}", excerpt(component))));
        };
        if name.is_empty() || value.is_empty() || value.contains(':') {
            return Err(CvssError::new(C::Malformed, format!("not NAME:VALUE: {}", excerpt(component))));
        }
        if components.iter().any(|&(seen, _)| seen == name) {
            return Err(CvssError::new(
                C::DuplicateMetric,
                format!("metric {} appears twice", excerpt(name)),
            ));
        }
        components.push((name, value));
    }

    let parsed = cvss::Cvss::from_str(vector).map_err(|e| map_library_error(&e))?;
    let base_names: &[&str] = if version.is_v3() { &V3_BASE } else { &V4_BASE };

    // The library's own rendering is canonical (upper-case names, spec-cased values) and lists
    // exactly the metrics it read. Every component must appear there exactly as written.
    let canonical = parsed.to_string();
    let canonical: Vec<(&str, &str)> =
        canonical.split('/').skip(1).filter_map(|c| c.split_once(':')).collect();
    for &(name, value) in &components {
        match canonical.iter().find(|&&(n, _)| n == name) {
            None => {
                return Err(CvssError::new(
                    C::UnknownMetric,
                    format!("CVSS {version} has no metric {}", excerpt(name)),
                ));
            }
            Some(&(_, v)) if v != value => {
                return Err(CvssError::new(
                    C::InvalidValue,
                    format!("{} is not a value of CVSS {version} metric {name}", excerpt(value)),
                ));
            }
            Some(_) => {}
        }
    }
    if canonical.len() != components.len() {
        // Two spellings of one metric (`AV:N/av:N`) were merged by the library.
        return Err(CvssError::new(C::DuplicateMetric, "a metric appears twice"));
    }
    if let Some(missing) = base_names.iter().find(|&&b| !components.iter().any(|&(n, _)| n == b)) {
        return Err(CvssError::new(C::MissingMetric, format!("Base metric {missing} is missing")));
    }

    let raw = match parsed {
        cvss::Cvss::CvssV30(v) | cvss::Cvss::CvssV31(v) => v.base_score().value(),
        cvss::Cvss::CvssV40(_) => {
            // CVSS-B: score the Base metrics alone.
            let mut base = String::from("CVSS:4.0");
            for name in V4_BASE {
                if let Some(&(_, value)) = components.iter().find(|&&(n, _)| n == name) {
                    base.push('/');
                    base.push_str(name);
                    base.push(':');
                    base.push_str(value);
                }
            }
            cvss::v4::Vector::from_str(&base).map_err(|e| map_library_error(&e))?.score().value()
        }
        _ => {
            return Err(CvssError::new(
                C::UnsupportedVersion,
                format!("CVSS version {version} is not scored"),
            ));
        }
    };
    // The library's scores are already one-decimal values; rounding again only removes any
    // representation noise, never changes a tenth.
    let base_score = (raw * 10.0).round() / 10.0;
    Ok(CvssScore { version, base_score, severity: Level::from_cvss_score(base_score) })
}

/// `digits.digits`, e.g. `2.0`, `3.2`, `5.0`.
fn is_dotted_number(s: &str) -> bool {
    match s.split_once('.') {
        Some((major, minor)) => {
            !major.is_empty()
                && !minor.is_empty()
                && major.bytes().all(|b| b.is_ascii_digit())
                && minor.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

fn map_library_error(e: &cvss::Error) -> CvssError {
    use CvssErrorCode as C;
    let code = match e {
        cvss::Error::UnknownMetric { .. } => C::UnknownMetric,
        cvss::Error::InvalidMetricV3 { .. } | cvss::Error::InvalidMetricV4 { .. } => C::InvalidValue,
        cvss::Error::DuplicateMetricV3 { .. } | cvss::Error::DuplicateMetricV4 { .. } => C::DuplicateMetric,
        cvss::Error::MissingMandatoryMetricV4 { .. } => C::MissingMetric,
        cvss::Error::UnsupportedVersion { .. } => C::UnsupportedVersion,
        _ => C::Malformed,
    };
    // The library's messages quote whole components: keep ours short and on one line.
    let full = e.to_string();
    let mut message: String =
        full.chars().take(80).map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
    if full.chars().nth(80).is_some() {
        message.push('…');
    }
    CvssError::new(code, message)
}

/// Where a finding's level came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SeveritySource {
    /// The advisory's own rating (GitHub's `database_specific.severity`).
    #[serde(rename = "advisory")]
    Advisory,
    /// The Base score of a CVSS v3.x vector in `severity[]`.
    #[serde(rename = "cvss_v3")]
    CvssV3,
    /// The Base score of a CVSS v4.0 vector in `severity[]` (only when no v3 vector scores).
    #[serde(rename = "cvss_v4")]
    CvssV4,
    /// Nothing rates the advisory; the level is `unknown`.
    #[serde(rename = "none")]
    None,
}

impl SeveritySource {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Advisory => "advisory",
            Self::CvssV3 => "cvss_v3",
            Self::CvssV4 => "cvss_v4",
            Self::None => "none",
        }
    }
}

impl fmt::Display for SeveritySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A finding's severity: `{"level": "high", "source": "cvss_v3", "score": 7.5}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Severity {
    /// `low`, `medium`, `high`, `critical` or `unknown` — never `none`.
    pub level: Level,
    /// Where `level` came from.
    pub source: SeveritySource,
    /// The CVSS Base score, when `source` is `cvss_v3` or `cvss_v4`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// RustSec's advisory kind (`unmaintained`, `unsound`, `notice`), when the advisory has one.
    /// Shown, never read as a level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub informational: Option<String>,
}

impl AsRef<Level> for Severity {
    fn as_ref(&self) -> &Level {
        &self.level
    }
}

/// GitHub's rating words, any case.
fn advisory_level(label: &str) -> Option<Level> {
    match label.to_ascii_uppercase().as_str() {
        "LOW" => Some(Level::Low),
        "MODERATE" | "MEDIUM" => Some(Level::Medium),
        "HIGH" => Some(Level::High),
        "CRITICAL" => Some(Level::Critical),
        _ => None,
    }
}

/// The highest Base score among `severity[]` entries of `kind` whose vectors score and whose
/// version matches the type.
fn best_cvss(severity: &[(String, String)], kind: &str, want_v3: bool) -> Option<f64> {
    severity
        .iter()
        .filter(|(t, _)| t == kind)
        .filter_map(|(_, vector)| cvss(vector).ok())
        .filter(|s| s.version.is_v3() == want_v3)
        .map(|s| s.base_score)
        .reduce(f64::max)
}

/// A finding's level from its advisory (see the [module docs](self) for the order).
///
/// - `severity`: the advisory's `severity[]` as `(type, score)` pairs;
/// - `database_specific`: the advisory's top-level `database_specific`;
/// - `affected_specific`: the `database_specific` and `ecosystem_specific` objects of the
///   `affected[]` entries that matched, in any order.
pub fn advisory_severity(
    severity: &[(String, String)],
    database_specific: Option<&Value>,
    affected_specific: &[&Value],
) -> Severity {
    let informational = affected_specific
        .iter()
        .find_map(|v| v.get("informational").and_then(Value::as_str))
        .map(str::to_owned);

    if let Some(level) =
        database_specific.and_then(|d| d.get("severity")).and_then(Value::as_str).and_then(advisory_level)
    {
        return Severity { level, source: SeveritySource::Advisory, score: None, informational };
    }
    for (kind, want_v3, source) in
        [("CVSS_V3", true, SeveritySource::CvssV3), ("CVSS_V4", false, SeveritySource::CvssV4)]
    {
        if let Some(score) = best_cvss(severity, kind, want_v3) {
            let level = match Level::from_cvss_score(score) {
                Level::None => Level::Low,
                level => level,
            };
            return Severity { level, source, score: Some(score), informational };
        }
    }
    Severity { level: Level::Unknown, source: SeveritySource::None, score: None, informational }
}
