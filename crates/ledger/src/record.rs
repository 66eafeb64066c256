//! The ledger record and the pure rule that spends from it.
//!
//! Both backends apply exactly this rule — the in-process one by calling
//! [`GrantRecord::consume`], the Redis one in a Lua script written to match it
//! — and one conformance suite runs against both to hold them equal.

use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, UnixTime};
use serde::{Deserialize, Serialize};

/// How long a record is kept after its grant expires, for the admin view.
pub const RETENTION_SECS: i64 = 3600;

/// What registering a grant records: the scope and budgets from its claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The grant.
    pub grant_id: String,
    /// Its run.
    pub exec_id: String,
    /// Its tenant.
    pub tenant_id: Option<String>,
    /// Expiry (Unix seconds).
    pub exp: UnixTime,
    /// Files that may be read.
    pub input_files: Vec<String>,
    /// Sessions that may be read.
    pub read_sessions: Vec<String>,
    /// The one session that may be written.
    pub output_session_id: Option<String>,
    /// Upload budget in bytes.
    pub max_upload_bytes: u64,
    /// Output file budget.
    pub max_output_files: u64,
    /// Request budget (every operation but egress bytes is a request).
    pub max_requests: u64,
    /// Egress byte budget: request and response bodies and tunnel bytes,
    /// both directions.
    pub max_egress_bytes: u64,
    /// MCP tool-call budget (each tool call is also a request).
    #[serde(default = "unlimited_tool_calls")]
    pub max_tool_calls: u64,
}

/// Records registered before grants had a tool-call budget have none
/// beyond their requests.
fn unlimited_tool_calls() -> u64 {
    gatehouse_capability::UNLIMITED_TOOL_CALLS
}

impl From<&GrantClaims> for Registration {
    fn from(c: &GrantClaims) -> Self {
        Self {
            grant_id: c.grant_id.clone(),
            exec_id: c.exec_id.clone(),
            tenant_id: c.tenant_id.clone(),
            exp: c.exp,
            input_files: c.input_files.clone(),
            read_sessions: c.read_sessions.clone(),
            output_session_id: c.output_session_id.clone(),
            max_upload_bytes: c.max_upload_bytes,
            max_output_files: c.max_output_files,
            max_requests: c.max_requests,
            max_egress_bytes: c.max_egress_bytes,
            max_tool_calls: c.max_tool_calls,
        }
    }
}

/// `active` or `revoked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Spendable until `exp`.
    Active,
    /// Killed; every later operation is refused.
    Revoked,
}

/// One grant's server-side state (seed: "one record per grant").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// Scope and budgets.
    #[serde(flatten)]
    pub registration: Registration,
    /// `active` or `revoked`.
    pub status: Status,
    /// Operations of every kind.
    pub request_count: u64,
    /// Reads of files or sessions.
    pub read_count: u64,
    /// Uploads.
    pub upload_count: u64,
    /// Tool calls.
    pub tool_call_count: u64,
    /// Bytes uploaded.
    pub uploaded_bytes: u64,
    /// Distinct output files created.
    pub output_file_ids: Vec<String>,
    /// Bytes carried to and from the outside (bodies and tunnels).
    #[serde(default)]
    pub egress_bytes: u64,
    /// Registration order, for tenant-wide and global revocation markers
    /// (see `epoch`).
    #[serde(default)]
    pub seq: u64,
    /// Bumped by every change to the run's credential leases (granted,
    /// renewed, revoked). Every spend answers with it, so a node sees a
    /// lease change on any other node at the next request, with no round
    /// trip of its own, and re-reads the leases only when it moved.
    #[serde(default)]
    pub lease_generation: u64,
}

/// One thing a run does with its grant. Every operation but
/// [`Operation::Egress`] counts as one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Operation {
    /// An outbound request.
    Request,
    /// Reading one of the grant's input files.
    ReadFile {
        /// The file id.
        file: String,
    },
    /// Reading from one of the grant's read sessions.
    ReadSession {
        /// The session id.
        session: String,
    },
    /// Writing `bytes` into the output session as `output_file_id`. Writing an
    /// id already written again spends bytes but not another output file.
    Upload {
        /// Must be the grant's output session.
        session: String,
        /// Size of this upload.
        bytes: u64,
        /// The file created or extended.
        output_file_id: String,
    },
    /// A tool call.
    ToolCall,
    /// `bytes` carried through the door for a request already spent (a
    /// body's next chunk, a tunnel's next read), paid before they move.
    Egress {
        /// How many.
        bytes: u64,
    },
}

/// What is left after an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    /// Requests left.
    pub requests: u64,
    /// Upload bytes left.
    pub upload_bytes: u64,
    /// Output files left.
    pub output_files: u64,
    /// Egress bytes left.
    pub egress_bytes: u64,
    /// MCP tool calls left.
    pub tool_calls: u64,
    /// The run's lease generation (see [`GrantRecord::lease_generation`]).
    pub lease_generation: u64,
}

impl GrantRecord {
    /// A fresh, active record, registered as `seq`.
    pub fn new(registration: Registration, seq: u64) -> Self {
        Self {
            registration,
            status: Status::Active,
            request_count: 0,
            read_count: 0,
            upload_count: 0,
            tool_call_count: 0,
            uploaded_bytes: 0,
            output_file_ids: Vec::new(),
            egress_bytes: 0,
            seq,
            lease_generation: 0,
        }
    }

    /// What is left.
    pub fn remaining(&self) -> Remaining {
        let r = &self.registration;
        Remaining {
            requests: r.max_requests.saturating_sub(self.request_count),
            upload_bytes: r.max_upload_bytes.saturating_sub(self.uploaded_bytes),
            output_files: r.max_output_files.saturating_sub(self.output_file_ids.len() as u64),
            egress_bytes: r.max_egress_bytes.saturating_sub(self.egress_bytes),
            tool_calls: r.max_tool_calls.saturating_sub(self.tool_call_count),
            lease_generation: self.lease_generation,
        }
    }

    /// Checks `op` at `now` and, only if every check passes, applies all of
    /// its counter changes. Order: status, expiry, scope, then budgets.
    pub fn consume(&mut self, op: &Operation, now: UnixTime) -> Result<Remaining, Reason> {
        let r = &self.registration;
        if self.status == Status::Revoked {
            return Err(Reason::GrantRevoked);
        }
        if now >= r.exp {
            return Err(Reason::GrantExpired);
        }
        match op {
            Operation::ReadFile { file } if !r.input_files.contains(file) => {
                return Err(Reason::ScopeFileNotGranted);
            }
            Operation::ReadSession { session } if !r.read_sessions.contains(session) => {
                return Err(Reason::ScopeSessionNotGranted);
            }
            Operation::Upload { session, .. } if r.output_session_id.as_deref() != Some(session.as_str()) => {
                return Err(Reason::ScopeOutputSessionMismatch);
            }
            _ => {}
        }
        if let Operation::Egress { bytes } = op {
            // Bytes of a request already paid for: not another request.
            if self.egress_bytes.checked_add(*bytes).is_none_or(|total| total > r.max_egress_bytes) {
                return Err(Reason::BudgetEgressBytesExhausted);
            }
            self.egress_bytes += bytes;
            return Ok(self.remaining());
        }
        if self.request_count >= r.max_requests {
            return Err(Reason::BudgetRequestsExhausted);
        }
        if matches!(op, Operation::ToolCall) && self.tool_call_count >= r.max_tool_calls {
            return Err(Reason::BudgetToolCallsExhausted);
        }
        let mut new_file = false;
        if let Operation::Upload { bytes, output_file_id, .. } = op {
            if self.uploaded_bytes.checked_add(*bytes).is_none_or(|total| total > r.max_upload_bytes) {
                return Err(Reason::BudgetUploadBytesExhausted);
            }
            new_file = !self.output_file_ids.contains(output_file_id);
            if new_file && self.output_file_ids.len() as u64 >= r.max_output_files {
                return Err(Reason::BudgetOutputFilesExhausted);
            }
        }
        // Every check passed: apply all changes.
        self.request_count += 1;
        match op {
            Operation::Request | Operation::Egress { .. } => {}
            Operation::ReadFile { .. } | Operation::ReadSession { .. } => self.read_count += 1,
            Operation::ToolCall => self.tool_call_count += 1,
            Operation::Upload { bytes, output_file_id, .. } => {
                self.upload_count += 1;
                self.uploaded_bytes += bytes;
                if new_file {
                    self.output_file_ids.push(output_file_id.clone());
                }
            }
        }
        Ok(self.remaining())
    }
}
