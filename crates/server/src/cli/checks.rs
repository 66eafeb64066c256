//! The checks the command line runs without a server: an egress decision,
//! content scans, lockfiles parsed and diffed, a CVSS vector.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gatehouse_egress::{AddressGuard, Policy, PolicyError, Purpose, decide};
use serde_json::{Value, json};

use super::{Fail, environment, problems};
use crate::files::read_text;

pub(super) fn egress_check(
    url: &str,
    policy: Option<PathBuf>,
    resolve: &[String],
    webhook: bool,
    method: &str,
    allow_ranges: Option<String>,
    json_out: bool,
) -> Result<ExitCode, Fail> {
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| Fail(format!("--method {method}: not an HTTP method")))?;
    // A policy that cannot be read is not bad input here: it is exactly the
    // case the door refuses (policy_unreadable), and the check says so.
    let policy = match policy {
        None => Ok(Policy::open()),
        Some(path) => match read_text("--policy", &path) {
            Ok(text) => Policy::from_json(text.as_bytes()),
            Err(e) => Err(PolicyError::unreadable(e)),
        },
    };
    let mut answers: std::collections::HashMap<String, Vec<IpAddr>> = std::collections::HashMap::new();
    for entry in resolve {
        let (host, ips) = entry
            .split_once('=')
            .ok_or_else(|| Fail(format!("--resolve {entry}: expected HOST=IP[,IP...]")))?;
        let Ok(gatehouse_egress::Host::Name(host)) = gatehouse_egress::target::parse_host(host.trim()) else {
            return Err(Fail(format!("--resolve {entry}: not a host name")));
        };
        let ips = ips
            .split(',')
            .map(|ip| ip.trim().trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Fail(format!("--resolve {entry}: not a list of IP addresses")))?;
        answers.entry(host).or_default().extend(ips);
    }
    let ranges = cidr_list(&allow_ranges.unwrap_or_default())
        .map_err(|()| Fail("--allow-ranges: not a list of CIDR ranges".into()))?;
    let purpose = if webhook { Purpose::Webhook } else { Purpose::Request };
    let now = gatehouse_core::Clock::now(&gatehouse_core::SystemClock);
    let guard = AddressGuard::new(ranges);
    let decision = decide(url, policy.as_ref(), &guard, purpose, now, |host| match answers.get(host) {
        Some(ips) => Ok(ips.clone()),
        None => system_resolve(host),
    })
    .with_request(policy.as_ref(), &method, now);
    if json_out {
        say!("{}", serde_json::to_string(&decision).unwrap_or_default());
    } else if decision.allowed() {
        let list: Vec<String> = decision.addresses.iter().map(ToString::to_string).collect();
        say!("allow {} ({})", decision.host.as_deref().unwrap_or(""), list.join(", "));
    } else {
        match (&decision.rule, &decision.rule_reason) {
            (Some(rule), Some(why)) => say!("refuse: {} ({rule}): {why}", decision.reason),
            (Some(rule), None) => say!("refuse: {} ({rule})", decision.reason),
            (None, _) => say!("refuse: {}", decision.reason),
        }
    }
    Ok(if decision.allowed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `HOST:PORT`, with IPv6 hosts in brackets.
pub(super) fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| Some((host.to_owned(), port.parse().ok()?)))?
}

pub(super) fn content_scan(
    files: &[PathBuf],
    clamd: Option<&str>,
    max_bytes: Option<u64>,
    json_out: bool,
) -> Result<ExitCode, Fail> {
    let settings = gatehouse_config::scanner_settings(&environment(None)).map_err(|p| Fail(problems(p)))?;
    let clamd = match clamd {
        Some(at) => Some(host_port(at).ok_or_else(|| Fail(format!("--clamd {at}: expected HOST:PORT")))?),
        None => settings.clamd,
    };
    let max_bytes = max_bytes.unwrap_or(settings.content_max_bytes);
    let scanner = crate::scanner::content_scanner(
        clamd.as_ref().map(|(h, p)| (h.as_str(), *p)),
        settings.clamd_timeout,
        max_bytes,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    let mut results = Vec::new();
    let mut unreadable = false;
    let mut refused = false;
    for file in files {
        match runtime.block_on(scanner.scan_file(file)) {
            Ok(verdict) => {
                refused |= !verdict.accepted();
                let mut entry = serde_json::to_value(&verdict).unwrap_or_default();
                if let Some(obj) = entry.as_object_mut() {
                    obj.insert("file".into(), Value::String(file.display().to_string()));
                }
                if !json_out {
                    let mut line =
                        format!("{}: {} {}", file.display(), verdict.verdict.as_str(), verdict.kind);
                    if let Some(reason) = verdict.reason {
                        line.push_str(&format!(" {reason}"));
                    }
                    if let Some(offset) = verdict.offset {
                        line.push_str(&format!(" at byte {offset}"));
                    }
                    if let Some(signature) = &verdict.signature {
                        line.push_str(&format!(" ({signature})"));
                    }
                    say!("{line}");
                }
                results.push(entry);
            }
            Err(e) => {
                unreadable = true;
                eprintln!("gatehouse: cannot read {}: {}", file.display(), e.kind());
            }
        }
    }
    if json_out {
        say!("{}", json!({"results": results}));
    }
    Ok(ExitCode::from(if unreadable {
        2
    } else if refused {
        1
    } else {
        0
    }))
}

/// Reads and parses a lockfile from disk; any failure is exit 2.
pub(super) fn read_lockfile(path: &Path) -> Result<gatehouse_deps::Parsed, Fail> {
    let name = path.display().to_string();
    let limit = gatehouse_deps::lockfile::MAX_LOCKFILE_BYTES as u64;
    let len = std::fs::metadata(path).map_err(|e| Fail(format!("cannot read {name}: {}", e.kind())))?.len();
    if len > limit {
        return Err(Fail(format!("{name}: {len} bytes; the limit is {limit} (too_large)")));
    }
    let bytes = std::fs::read(path).map_err(|e| Fail(format!("cannot read {name}: {}", e.kind())))?;
    parse_lockfile(path, &bytes).map_err(|e| Fail(e.to_string()))
}

pub(super) fn cvss(vector: &str, json_out: bool) -> Result<ExitCode, Fail> {
    let score = gatehouse_deps::severity::cvss(vector.trim())
        .map_err(|e| Fail(format!("not a CVSS vector: {} ({})", e.message, e.code)))?;
    if json_out {
        say!("{}", serde_json::to_string(&score).unwrap_or_default());
    } else {
        let version = serde_json::to_value(score.version).unwrap_or_default();
        let severity = serde_json::to_value(score.severity).unwrap_or_default();
        say!(
            "CVSS {} base score {:.1} ({})",
            version.as_str().unwrap_or_default(),
            score.base_score,
            severity.as_str().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn deps_parse(lockfile: &Path, json_out: bool) -> Result<ExitCode, Fail> {
    let parsed = read_lockfile(lockfile)?;
    if json_out {
        say!("{}", serde_json::to_string(&parsed).unwrap_or_default());
    } else {
        say!("{}: {} ({} packages)", lockfile.display(), parsed.format.as_str(), parsed.packages.len());
        for p in &parsed.packages {
            say!("{}\t{}\t{}", p.ecosystem, p.name, p.version);
        }
        for w in &parsed.warnings {
            match w.line {
                Some(line) => eprintln!("warning: {}:{line}: {} ({})", lockfile.display(), w.message, w.code),
                None => eprintln!("warning: {}: {} ({})", lockfile.display(), w.message, w.code),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn deps_diff(base: &Path, head: &Path, json_out: bool) -> Result<ExitCode, Fail> {
    let base = read_lockfile(base)?;
    let head = read_lockfile(head)?;
    let diff = gatehouse_deps::diff(Some(&base.packages), &head.packages);
    if json_out {
        say!("{}", serde_json::to_string(&diff).unwrap_or_default());
    } else {
        for p in &diff.added {
            say!("+ {} {} {}", p.ecosystem, p.name, p.version);
        }
        for c in &diff.changed {
            say!("~ {} {} {} -> {}", c.ecosystem, c.name, c.from.join(","), c.to.join(","));
        }
        for p in &diff.removed {
            say!("- {} {} {}", p.ecosystem, p.name, p.version);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A comma-separated list of CIDR ranges (empty entries ignored).
pub(super) fn cidr_list(list: &str) -> Result<Vec<ipnet::IpNet>, ()> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<ipnet::IpNet>().map_err(|_| ()))
        .collect()
}

/// DNS as the door resolves (GATEHOUSE_DNS_SERVERS, else the system's
/// configuration), for `egress check` without `--resolve`.
pub(super) fn system_resolve(host: &str) -> Result<Vec<IpAddr>, ()> {
    let servers = gatehouse_config::egress_settings(&environment(None)).map_err(|_| ())?.dns_servers;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|_| ())?;
    runtime.block_on(async {
        let dns = if servers.is_empty() {
            gatehouse_egress::resolve::DnsResolver::system()
        } else {
            gatehouse_egress::resolve::DnsResolver::with_servers(&servers)
        }
        .map_err(|_| ())?;
        dns.lookup(host).await
    })
}

/// Parses a lockfile's bytes. Requirements includes (`-r`, `-c`) resolve
/// relative to the including file, as pip resolves them.
fn parse_lockfile(path: &Path, bytes: &[u8]) -> Result<gatehouse_deps::Parsed, gatehouse_deps::ParseError> {
    // Includes stay inside the lockfile's own directory tree, symbolic
    // links resolved (see `gatehouse_deps::lockfile::files`).
    gatehouse_deps::lockfile::parse_file(path, bytes, None)
}
