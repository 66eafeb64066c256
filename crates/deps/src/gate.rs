//! The dependency gate: does a pull request's scan block the worker's pass?
//!
//! A tenant's gate is `off`, `high` or `critical` ([`GateMode`]). [`decide`] reads the levels of
//! a scan's findings and whether the scan completed:
//!
//! - `high` trips on any finding that is high or critical — or `unknown`, which counts as high;
//! - `critical` trips on critical findings only. `unknown` counts as high, so it does **not**
//!   trip a `critical` gate: an operator who chose `critical` asked to be stopped by nothing less;
//! - a scan that errored (a lockfile that could not be parsed, OSV unreachable, a partial batch,
//!   an advisory that could not be matched) trips `high` and `critical` whatever it found: the
//!   gate never passes on an incomplete scan;
//! - `off` never trips, not even on an errored scan: off means the gate does not block. The scan
//!   itself still says `"status": "error"`, so the failure stays visible; only the gate is silent.
//!
//! When an errored scan also has findings at the threshold, the reason is
//! `dependency_gate_severity` — the concrete, actionable one — and `scan_errored` says the scan
//! was incomplete as well. Both block.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::severity::Level;

/// A tenant's dependency-gate setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateMode {
    /// The gate never blocks.
    Off,
    /// Block on high, critical and unknown findings, and on an errored scan.
    High,
    /// Block on critical findings, and on an errored scan.
    Critical,
}

impl GateMode {
    /// The stable wire form: `off`, `high`, `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }

    /// Whether a finding of `level` trips this gate (`unknown` counts as high).
    pub fn trips_on(self, level: Level) -> bool {
        match self {
            Self::Off => false,
            Self::High => level.gate_rank() >= Level::High.gate_rank(),
            Self::Critical => level.gate_rank() >= Level::Critical.gate_rank(),
        }
    }
}

impl fmt::Display for GateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A gate setting that is not `off`, `high` or `critical`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("dependency gate must be off, high or critical, not {value} ({})", Self::CODE)]
pub struct GateModeError {
    /// A short, quoted excerpt of what was given.
    pub value: String,
}

impl GateModeError {
    /// The stable reason code.
    pub const CODE: &'static str = "invalid_gate_mode";
}

impl FromStr for GateMode {
    type Err = GateModeError;

    /// Exactly `off`, `high` or `critical` (lower case, no surrounding space).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "high" => Ok(Self::High),
            "critical" => Ok(Self::Critical),
            other => {
                let mut value: String = other.chars().take(24).collect();
                if other.chars().nth(24).is_some() {
                    value.push('…');
                }
                Err(GateModeError { value: format!("{value:?}") })
            }
        }
    }
}

/// Why the gate tripped: the policy failure code a blocked pass is recorded with. Stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum GateReason {
    /// A finding at or above the gate's threshold (`unknown` counting as high).
    #[serde(rename = "dependency_gate_severity")]
    Severity,
    /// The scan did not complete, so it cannot vouch for the pull request.
    #[serde(rename = "dependency_gate_scan_error")]
    ScanError,
    /// An agent's pull request with the gate on and no scan of the head checked: nothing vouches for it.
    #[serde(rename = "dependency_gate_no_scan")]
    NoScan,
    /// The head's newest scan has not finished: nothing vouches for the head yet.
    #[serde(rename = "dependency_gate_scan_pending")]
    ScanPending,
}

impl GateReason {
    /// The reason code in gatehouse's closed list ([`gatehouse_core::Reason`]).
    pub fn reason(self) -> gatehouse_core::Reason {
        use gatehouse_core::Reason;
        match self {
            Self::Severity => Reason::DependencyGateSeverity,
            Self::ScanError => Reason::DependencyGateScanError,
            Self::NoScan => Reason::DependencyGateNoScan,
            Self::ScanPending => Reason::DependencyGateScanPending,
        }
    }

    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        self.reason().as_str()
    }
}

impl fmt::Display for GateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gate's verdict on one scan:
/// `{"mode": "high", "tripped": true, "reason": "dependency_gate_severity", "tripping": [0, 2],
/// "scan_errored": false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateDecision {
    /// The mode decided under.
    pub mode: GateMode,
    /// True when the worker's pass is to be blocked.
    pub tripped: bool,
    /// The policy failure code when tripped; `null` otherwise.
    pub reason: Option<GateReason>,
    /// Indexes (into the findings given) of the findings that trip the gate, ascending.
    /// Empty in mode `off`.
    pub tripping: Vec<usize>,
    /// The scan did not complete (as given to [`decide`]).
    pub scan_errored: bool,
}

/// Decides the gate for one scan. `findings` are the levels of the scan's findings (a slice of
/// [`Level`] or of [`Severity`](crate::severity::Severity)); `scan_errored` is true when the scan
/// did not complete.
pub fn decide<F: AsRef<Level>>(mode: GateMode, findings: &[F], scan_errored: bool) -> GateDecision {
    let tripping: Vec<usize> =
        findings.iter().enumerate().filter(|(_, f)| mode.trips_on(*f.as_ref())).map(|(i, _)| i).collect();
    let reason = match mode {
        GateMode::Off => None,
        _ if !tripping.is_empty() => Some(GateReason::Severity),
        _ if scan_errored => Some(GateReason::ScanError),
        _ => None,
    };
    GateDecision { mode, tripped: reason.is_some(), reason, tripping, scan_errored }
}
