//! One dependency scan: the versions a change adds, the advisories that
//! affect them, each finding's severity, and the gate's decision.
//!
//! The report's JSON is DESIGN.md's `deps scan --format json` shape:
//! `{"status", "findings": [{"id", "aliases", "package", "severity",
//! "severity_source", "url"}], "gate": {"mode", "tripped", "reason"}}`,
//! with more fields beside them. `status` is `error` whenever any part of
//! the scan could not be completed, and then the gate blocks (unless off).
//!
//! Nothing unchecked passes: a package whose version cannot be read in its
//! ecosystem's scheme (`package_unreadable_version`: its ranges cannot be
//! checked, but the advisories that list that exact version in
//! `affected[].versions` are still findings), or that has no version
//! and no commit to check it by (`package_no_version`), is an error naming
//! the package and why; so is a git dependency with a commit and no
//! version when asking the OSV API, which is asked by version only. Offline,
//! such a package is checked by its commit where an advisory's `GIT` range
//! lists that commit, and is clean when no advisory names it at all; any
//! other advisory naming it cannot be evaluated for it (`match_*`). One
//! advisory with an odd range is an error for the packages it names, never
//! for the whole scan.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::gate::{self, GateDecision, GateMode};
use crate::lockfile::{ParseError, Parsed};
use crate::matching::{Index, fixed_versions, lists_version};
use crate::osv::{self, Advisory};
use crate::osv_client::{OsvClient, Transport};
use crate::package::Package;
use crate::severity::{Level, Severity, SeveritySource, advisory_severity};

/// Where a finding's link points.
pub const OSV_VULNERABILITY_URL: &str = "https://osv.dev/vulnerability/";

/// One advisory affecting one package version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The advisory id.
    pub id: String,
    /// Its aliases (CVE ids and the like).
    pub aliases: Vec<String>,
    /// The affected package version.
    pub package: Package,
    /// `low`, `medium`, `high`, `critical` or `unknown`.
    pub severity: Level,
    /// `advisory`, `cvss_v3`, `cvss_v4` or `none`.
    pub severity_source: SeveritySource,
    /// The CVSS base score behind the level, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// `https://osv.dev/vulnerability/<id>`.
    pub url: String,
    /// The advisory's one-line summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Versions that fix it for this package, when the advisory says.
    pub fixed: Vec<String>,
}

impl AsRef<Level> for Finding {
    fn as_ref(&self) -> &Level {
        &self.severity
    }
}

/// A part of the scan that could not be completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScanError {
    /// A stable code (`lockfile_*`, `osv_*`, `match_*`, `database_*`).
    pub code: String,
    /// What, for a person (file names and advisory ids; never file content).
    pub message: String,
}

/// Why the base lockfile was not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum BaseAbsent {
    /// No base was given (a new lockfile).
    NotGiven,
    /// Larger than the limit: read as absent, so every head version is
    /// checked — over-reporting, never under-reporting.
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// It could not be parsed: every head version is checked.
    Unreadable {
        /// The parse error.
        error: String,
    },
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `ok`, or `error` when any part could not be completed.
    pub status: &'static str,
    /// Findings, ordered by package then advisory id.
    pub findings: Vec<Finding>,
    /// The gate's decision.
    pub gate: GateDecision,
    /// What could not be completed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ScanError>,
    /// How many package versions were checked.
    pub checked: usize,
    /// Present when the base was not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_absent: Option<BaseAbsent>,
}

/// One lockfile's part in a scan: what to check, and how the base was read.
pub struct LockfilePlan {
    /// Versions the head adds or changes.
    pub to_check: Vec<Package>,
    /// Why the head could not be read (the scan is then incomplete).
    pub error: Option<ScanError>,
    /// Present when the base was not used.
    pub base_absent: Option<BaseAbsent>,
    /// The head's format, when it was read.
    pub format: Option<crate::lockfile::Format>,
}

/// Plans one lockfile: the head, and the base unless it is absent. A base
/// that cannot be read widens the check to every head version, which keeps
/// the scan complete; a head that cannot be read makes it incomplete.
pub fn plan(head: Result<Parsed, ParseError>, base: Result<Parsed, BaseAbsent>) -> LockfilePlan {
    let (base, base_absent) = match base {
        Ok(parsed) => (Some(parsed), None),
        Err(absent) => (None, Some(absent)),
    };
    match head {
        Ok(head) => LockfilePlan {
            to_check: crate::diff(base.as_ref().map(|b| b.packages.as_slice()), &head.packages).to_check(),
            error: None,
            base_absent,
            format: Some(head.format),
        },
        Err(e) => LockfilePlan {
            to_check: Vec::new(),
            error: Some(ScanError { code: format!("lockfile_{}", e.code.as_str()), message: e.to_string() }),
            base_absent,
            format: None,
        },
    }
}

/// A base whose bytes are at hand, read as the scan reads it.
pub fn read_base(parsed: Result<Parsed, ParseError>) -> Result<Parsed, BaseAbsent> {
    parsed.map_err(|e| BaseAbsent::Unreadable { error: e.to_string() })
}

/// The finding for `advisory` on `package`.
pub fn finding(advisory: &Advisory, package: &Package) -> Finding {
    let entries: Vec<&osv::Affected> = advisory
        .affected
        .iter()
        .filter(|a| {
            a.package.as_ref().is_some_and(|p| {
                crate::matching::ecosystem_from_osv(&p.ecosystem) == Some(package.ecosystem)
                    && same_name(package, &p.name)
            })
        })
        .collect();
    let mut vectors: Vec<(String, String)> =
        advisory.severity.iter().map(|s| (s.kind.clone(), s.score.clone())).collect();
    vectors.extend(entries.iter().flat_map(|a| a.severity.iter().map(|s| (s.kind.clone(), s.score.clone()))));
    let specific: Vec<&serde_json::Value> = entries
        .iter()
        .flat_map(|a| [a.database_specific.as_ref(), a.ecosystem_specific.as_ref()])
        .flatten()
        .collect();
    let Severity { level, source, score, .. } =
        advisory_severity(&vectors, advisory.database_specific.as_ref(), &specific);
    Finding {
        id: advisory.id.clone(),
        aliases: advisory.aliases.clone(),
        package: package.clone(),
        severity: level,
        severity_source: source,
        score,
        url: format!("{OSV_VULNERABILITY_URL}{}", advisory.id),
        summary: advisory.summary.clone(),
        fixed: fixed_versions(advisory, package),
    }
}

fn same_name(package: &Package, osv_name: &str) -> bool {
    match package.ecosystem {
        crate::package::Ecosystem::PyPI => crate::package::normalize_pypi_name(osv_name) == package.name,
        _ => osv_name == package.name,
    }
}

/// The code of a version its ecosystem's scheme cannot read.
const UNREADABLE_VERSION: &str = "package_unreadable_version";

/// Why `package` cannot be checked by its version, if it cannot: no version
/// (a commit can still decide: `commit_ok`), or one its ecosystem's scheme
/// does not read ([`UNREADABLE_VERSION`]: only advisories that list the
/// exact version can be found for it).
fn uncheckable(package: &Package, commit_ok: bool) -> Option<ScanError> {
    let who = format!("{}/{}", package.ecosystem, crate::lockfile::short_text(&package.name));
    if package.version.is_empty() {
        if commit_ok && package.commit.is_some() {
            return None;
        }
        let why = match &package.commit {
            Some(c) => format!(
                "a git dependency at commit {} whose lockfile records no version; it cannot be checked",
                crate::lockfile::short_text(c)
            ),
            None => {
                "the lockfile records no version for it (a URL or a spec), so it cannot be checked".to_owned()
            }
        };
        return Some(ScanError { code: "package_no_version".into(), message: format!("{who}: {why}") });
    }
    let scheme = crate::version::Scheme::of(package.ecosystem);
    scheme.parse(&package.version).err().map(|e| ScanError {
        code: UNREADABLE_VERSION.into(),
        message: format!(
            "{who}: {e}; its version ranges cannot be checked (only advisories listing this exact version are reported)"
        ),
    })
}

/// Findings from an offline database.
pub fn findings_offline(index: &Index, packages: &[Package]) -> (Vec<Finding>, Vec<ScanError>) {
    let mut findings = Vec::new();
    let mut errors = Vec::new();
    for package in packages {
        if let Some(e) = uncheckable(package, true) {
            if e.code == UNREADABLE_VERSION {
                findings.extend(index.listing_version(package).into_iter().map(|a| finding(a, package)));
            }
            errors.push(e);
            continue;
        }
        let evaluation = index.evaluate(package);
        findings.extend(evaluation.affected.iter().map(|a| finding(a, package)));
        errors.extend(
            evaluation
                .errors
                .iter()
                .map(|e| ScanError { code: format!("match_{}", e.code.as_str()), message: e.to_string() }),
        );
    }
    (findings, errors)
}

/// Findings from the OSV API, and what could not be checked: each package
/// that can be asked neither by version nor by commit is an error of its
/// own, and any failure of the lookup itself fails it whole (no findings,
/// one error). A git dependency without a version is asked by its commit.
/// A version its scheme cannot read is an error too, and is still asked:
/// of OSV's answers for it, only the advisories that list that exact version
/// are findings (as offline).
pub async fn findings_online<T: Transport>(
    client: &OsvClient<T>,
    packages: &[Package],
) -> (Vec<Finding>, Vec<ScanError>) {
    let mut errors = Vec::new();
    // Beside each package asked: whether only advisories listing its exact
    // version count.
    let mut checkable: Vec<Package> = Vec::new();
    let mut exact_only: Vec<bool> = Vec::new();
    for p in packages {
        match uncheckable(p, true) {
            Some(e) => {
                let unreadable = e.code == UNREADABLE_VERSION;
                errors.push(e);
                if unreadable {
                    checkable.push(p.clone());
                    exact_only.push(true);
                }
            }
            None => {
                checkable.push(p.clone());
                exact_only.push(false);
            }
        }
    }
    if checkable.is_empty() {
        return (Vec::new(), errors);
    }
    match lookup(client, &checkable, &exact_only).await {
        Ok(findings) => (findings, errors),
        Err(e) => {
            errors.push(e);
            (Vec::new(), errors)
        }
    }
}

/// The ids OSV says affect each version, each advisory fetched once.
/// Where `exact_only[i]`, only advisories that list `packages[i]`'s exact
/// version are kept.
async fn lookup<T: Transport>(
    client: &OsvClient<T>,
    packages: &[Package],
    exact_only: &[bool],
) -> Result<Vec<Finding>, ScanError> {
    let osv_error =
        |e: crate::osv_client::OsvError| ScanError { code: e.code().to_owned(), message: e.to_string() };
    let ids = client.query_ids(packages).await.map_err(osv_error)?;
    let all: BTreeSet<String> = ids.iter().flatten().cloned().collect();
    let raw = client.fetch_vulns(&all).await.map_err(osv_error)?;
    let mut advisories = std::collections::BTreeMap::new();
    for (id, bytes) in raw {
        let advisory = osv::from_json_bytes(&id, &bytes).map_err(|e| ScanError {
            code: "osv_malformed".into(),
            message: format!("advisory {id}: {}", e.code.as_str()),
        })?;
        if advisory.id != id {
            return Err(ScanError {
                code: "osv_malformed".into(),
                message: format!("asked for {id}, got another id"),
            });
        }
        advisories.insert(id, advisory);
    }
    let mut findings = Vec::new();
    for ((package, ids), &exact_only) in packages.iter().zip(&ids).zip(exact_only) {
        for id in ids {
            let kept = |a: &&Advisory| !a.is_withdrawn() && (!exact_only || lists_version(a, package));
            if let Some(a) = advisories.get(id).filter(kept) {
                findings.push(finding(a, package));
            }
        }
    }
    Ok(findings)
}

/// Puts the report together and decides the gate.
pub fn report(
    mut findings: Vec<Finding>,
    errors: Vec<ScanError>,
    checked: usize,
    base_absent: Option<BaseAbsent>,
    mode: GateMode,
) -> Report {
    findings.sort_by(|a, b| (&a.package, &a.id).cmp(&(&b.package, &b.id)));
    findings.dedup_by(|a, b| a.package == b.package && a.id == b.id);
    let errored = !errors.is_empty();
    let gate = gate::decide(mode, &findings, errored);
    Report { status: if errored { "error" } else { "ok" }, findings, gate, errors, checked, base_absent }
}

fn fixed_text(f: &Finding) -> String {
    if f.fixed.is_empty() { "no fixed version".to_owned() } else { f.fixed.join(", ") }
}

fn gate_line(r: &Report) -> String {
    let mode = r.gate.mode.as_str();
    match (r.gate.tripped, r.gate.reason) {
        (true, Some(reason)) => format!("gate {mode}: tripped ({})", reason.as_str()),
        (true, None) => format!("gate {mode}: tripped"),
        (false, _) => format!("gate {mode}: passed"),
    }
}

/// A table for people.
pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    match &r.base_absent {
        Some(BaseAbsent::TooLarge { bytes, limit }) => out.push_str(&format!(
            "base lockfile is {bytes} bytes (over {limit}): read as absent, every head version checked\n"
        )),
        Some(BaseAbsent::Unreadable { error }) => {
            out.push_str(&format!("base lockfile unreadable ({error}): every head version checked\n"));
        }
        _ => {}
    }
    out.push_str(&format!("{} package version(s) checked, {} finding(s)\n", r.checked, r.findings.len()));
    if !r.findings.is_empty() {
        let rows: Vec<[String; 5]> = r
            .findings
            .iter()
            .map(|f| {
                [
                    f.severity.as_str().to_owned(),
                    f.id.clone(),
                    format!("{} {}", f.package.name, f.package.version),
                    f.package.ecosystem.to_string(),
                    fixed_text(f),
                ]
            })
            .collect();
        let header = ["SEVERITY", "ID", "PACKAGE", "ECOSYSTEM", "FIXED IN"].map(str::to_owned);
        let mut widths = header.clone().map(|h| h.len());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
    }
    for e in &r.errors {
        out.push_str(&format!("error: {} ({})\n", e.message, e.code));
    }
    out.push_str(&gate_line(r));
    out.push('\n');
    out
}

/// A short summary for an AI agent's tool output and a pull-request
/// comment: what was found, which versions fix it, links to osv.dev.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let verdict = if r.gate.tripped { "blocked" } else { "passed" };
    out.push_str(&format!("### Dependency gate ({}): {verdict}\n\n", r.gate.mode.as_str()));
    if r.status == "error" {
        out.push_str("**The scan did not complete**, so it cannot vouch for these dependencies:\n\n");
        for e in &r.errors {
            out.push_str(&format!("- `{}`: {}\n", e.code, escape_md(&e.message)));
        }
        out.push_str(
            "\nFix what is listed (a lockfile that does not parse, a version that cannot be read) and push \
             again; an unreachable advisory database is retried by the next scan. Until a complete scan \
             passes, the gate blocks unless it is off.\n\n",
        );
    }
    if let Some(BaseAbsent::TooLarge { bytes, limit }) = &r.base_absent {
        out.push_str(&format!(
            "The base branch's lockfile is {bytes} bytes (over {limit}), so every version in the head was checked.\n\n"
        ));
    }
    if r.findings.is_empty() {
        if r.status == "ok" {
            out.push_str(&format!(
                "No known vulnerabilities in the {} added or changed package version(s).\n",
                r.checked
            ));
        }
        return out;
    }
    out.push_str(&format!(
        "{} known vulnerabilit{} in {} added or changed package version(s):\n\n",
        r.findings.len(),
        if r.findings.len() == 1 { "y" } else { "ies" },
        r.checked
    ));
    out.push_str("| severity | advisory | package | fix |\n|---|---|---|---|\n");
    for f in &r.findings {
        let summary = f.summary.as_deref().map(|s| format!(" — {}", escape_md(s))).unwrap_or_default();
        let fix = if f.fixed.is_empty() {
            "none known".to_owned()
        } else {
            format!(
                "upgrade to {}",
                f.fixed.iter().map(|v| format!("`{}`", code_span(v))).collect::<Vec<_>>().join(" or ")
            )
        };
        out.push_str(&format!(
            "| {} | [{}]({}){summary} | `{}@{}` ({}) | {fix} |\n",
            f.severity.as_str(),
            f.id,
            f.url,
            code_span(&f.package.name),
            code_span(&f.package.version),
            f.package.ecosystem
        ));
    }
    if r.gate.tripped {
        out.push_str(&format!(
            "\nThe gate blocks at `{}` and above (unknown severity counts as high): upgrade or remove the packages above.\n",
            r.gate.mode.as_str()
        ));
    }
    out
}

/// Names and versions come from the pull request's own lockfile: inside a
/// code span, a backtick or a line break would let them out of it (and a
/// `|` out of the table cell).
fn code_span(s: &str) -> String {
    s.chars().map(|c| if c == '`' || c == '|' || c.is_control() { '?' } else { c }).take(200).collect()
}

/// Advisory text is third-party: keep it on one table line and out of markup.
fn escape_md(s: &str) -> String {
    let one_line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect();
    one_line
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('[', "\\[")
        .replace(']', "\\]")
}

/// SARIF 2.1.0 (OASIS): one rule per advisory, one result per finding,
/// located at the lockfile; `security-severity` carries the CVSS score (or
/// the level's lower bound) as code-scanning UIs expect; an incomplete scan
/// is a failed invocation with its errors as notifications.
///
/// The lockfile path and the advisory ids in links are percent-encoded, so
/// the output stays valid (`uri-reference`, `uri`) whatever characters they
/// hold; the ids themselves are kept as they are everywhere else.
pub fn render_sarif(r: &Report, lockfile: &str, version: &str) -> serde_json::Value {
    use serde_json::json;
    /// RFC 3986 percent-encoding of every byte but the unreserved ones and `keep`.
    fn percent_encode(s: &str, keep: &[u8]) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(s.len());
        for &b in s.as_bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
                out.push(char::from(b));
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
        out
    }
    // A relative reference whose first segment holds no `:` (which would read
    // as a scheme): `/` stays, everything else outside the unreserved set is encoded.
    let lockfile_uri = percent_encode(lockfile, b"/");
    let mut rules: Vec<serde_json::Value> = Vec::new();
    let mut rule_index: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let mut results = Vec::new();
    for f in &r.findings {
        let index = *rule_index.entry(&f.id).or_insert_with(|| {
            let security_severity = f.score.unwrap_or(match f.severity {
                Level::Critical => 9.0,
                Level::High | Level::Unknown => 7.0,
                Level::Medium => 4.0,
                Level::Low | Level::None => 0.1,
            });
            // One path segment: `:` and `@` may stay, `/`, `?`, `#`, `%` and the rest may not.
            let help_uri = format!("{OSV_VULNERABILITY_URL}{}", percent_encode(&f.id, b":@"));
            rules.push(json!({
                "id": f.id,
                "shortDescription": {"text": f.summary.clone().unwrap_or_else(|| f.id.clone())},
                "help": {"text": format!("See {help_uri}")},
                "helpUri": help_uri,
                "properties": {
                    "security-severity": format!("{security_severity:.1}"),
                    "tags": ["security", "vulnerability", "dependency"],
                },
            }));
            rules.len() - 1
        });
        let level = match f.severity {
            Level::Critical | Level::High | Level::Unknown => "error",
            Level::Medium => "warning",
            Level::Low | Level::None => "note",
        };
        let fix = if f.fixed.is_empty() {
            "no fixed version is known".to_owned()
        } else {
            format!("fixed in {}", f.fixed.join(", "))
        };
        results.push(json!({
            "ruleId": f.id,
            "ruleIndex": index,
            "level": level,
            "message": {"text": format!(
                "{} {} ({}) is affected by {} ({} severity); {fix}.",
                f.package.name, f.package.version, f.package.ecosystem, f.id, f.severity.as_str()
            )},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": lockfile_uri}}}],
            "partialFingerprints": {"packageVersionAdvisory": format!(
                "{}/{}@{}/{}", f.package.ecosystem, f.package.name, f.package.version, f.id
            )},
        }));
    }
    let notifications: Vec<serde_json::Value> = r
        .errors
        .iter()
        .map(|e| json!({"level": "error", "message": {"text": e.message}, "descriptor": {"id": e.code}}))
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "gatehouse",
                "version": version,
                "informationUri": "https://osv.dev",
                "rules": rules,
            }},
            "invocations": [{
                "executionSuccessful": r.status == "ok",
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::Ecosystem;

    #[test]
    fn a_lockfile_cannot_write_markup_into_the_agents_summary() {
        let package = Package::new(Ecosystem::Npm, "evil`](https://x.example)\n| a |", "1.0.0`\n# owned");
        let f = Finding {
            id: "GHSA-1".into(),
            aliases: vec![],
            package,
            severity: Level::High,
            severity_source: SeveritySource::Advisory,
            score: None,
            url: format!("{OSV_VULNERABILITY_URL}GHSA-1"),
            summary: Some("a [link](https://x.example) | and <b>".into()),
            fixed: vec!["2.0.0`x".into()],
        };
        let errors =
            vec![ScanError { code: "lockfile_syntax".into(), message: "a/[x](y).json:\n# line".into() }];
        let md = render_markdown(&report(vec![f], errors, 1, None, GateMode::High));
        let row = md.lines().find(|l| l.starts_with("| high |")).unwrap();
        assert_eq!(row.matches('`').count(), 4, "two code spans, none broken: {row}");
        assert_eq!(row.matches(" | ").count(), 3, "four cells: {row}");
        assert!(!md.lines().any(|l| l.starts_with('#') && !l.starts_with("### Dependency gate")), "{md}");
        assert!(!md.contains("[link]") && !md.contains("[x]"), "{md}");
    }
}
