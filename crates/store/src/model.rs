//! What the store holds, as the rest of gatehouse sees it.

use gatehouse_core::{Reason, Refusal, RefusalKind, UnixTime};
use serde::Serialize;

/// A tenant's current settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantSettings {
    /// The tenant.
    pub tenant_id: String,
    /// The settings version of this tenant's last change.
    pub settings_version: i64,
    /// The current egress policy, if the tenant ever set one.
    pub policy: Option<PolicyVersion>,
    /// The tenant has policy versions but its current one does not read:
    /// the row the tenant names is gone, or is not its newest, or the
    /// tenant's own row is gone. Its requests are refused
    /// (`policy_unreadable`), never read as `open`.
    pub policy_missing: bool,
    /// `off`, `high` or `critical`.
    pub gate_mode: String,
    /// While engaged, no run of the tenant may start.
    pub kill_switch: bool,
    /// Why it was engaged.
    pub kill_switch_reason: Option<String>,
    /// The current declaration of its MCP servers, if it ever made one.
    pub mcp_servers: Option<PolicyVersion>,
    /// The tenant names a declaration that does not read (its row is gone):
    /// requests to its MCP servers cannot be told apart, so its requests
    /// are refused, as with a missing policy.
    pub mcp_servers_missing: bool,
}

/// One version of one of a tenant's versioned documents: its egress policy,
/// or the declaration of its MCP servers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyVersion {
    /// The tenant.
    pub tenant_id: String,
    /// 1 for the first policy, then one more per change.
    pub version: i64,
    /// The policy document as JSON text.
    pub document: String,
    /// Who set it.
    pub actor: String,
    /// When.
    pub created_at: UnixTime,
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Running; its grant and leases are live.
    Live,
    /// Ended by its dispatcher.
    Ended,
    /// Cancelled by a caller or a person.
    Cancelled,
    /// Killed by the kill switch or an emergency revoke.
    Killed,
    /// Heartbeat lost or lifetime over.
    Expired,
}

impl RunStatus {
    /// Every status.
    pub const ALL: [RunStatus; 5] = [Self::Live, Self::Ended, Self::Cancelled, Self::Killed, Self::Expired];

    /// The stable wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Ended => "ended",
            Self::Cancelled => "cancelled",
            Self::Killed => "killed",
            Self::Expired => "expired",
        }
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

/// What creating a run records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    /// The run.
    pub run_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The user it runs for.
    pub user_id: String,
    /// Its grant.
    pub grant_id: String,
    /// The SHA-256 of its canonical execute body (hex).
    pub execute_body_sha256: String,
    /// When it started.
    pub created_at: UnixTime,
    /// When its lifetime ends.
    pub expires_at: UnixTime,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    /// The run.
    pub run_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The user it runs for.
    pub user_id: String,
    /// Where it is in its life.
    pub status: RunStatus,
    /// Its grant.
    pub grant_id: String,
    /// The SHA-256 of its canonical execute body (hex).
    pub execute_body_sha256: String,
    /// When it started.
    pub created_at: UnixTime,
    /// Its last heartbeat (its start, before the first).
    pub heartbeat_at: UnixTime,
    /// When its lifetime ends.
    pub expires_at: UnixTime,
    /// When it stopped being live.
    pub ended_at: Option<UnixTime>,
    /// Why: an outcome (`succeeded`, `failed`), `cancelled`, `kill_switch`,
    /// `emergency_revoke`, `heartbeat_lost`, `lifetime_over`.
    pub end_reason: Option<String>,
    /// Who ended it.
    pub ended_by: Option<String>,
}

/// One event to record: a refusal, or a run event such as `run_ended`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewEvent {
    /// When.
    pub at: UnixTime,
    /// A refusal kind (`egress_refused`, ...) or a run event kind
    /// (`run_ended`, `lease_granted`, ...).
    pub kind: String,
    /// The reason code.
    pub reason: Option<String>,
    /// The tenant.
    pub tenant_id: Option<String>,
    /// The run.
    pub run_id: Option<String>,
    /// The destination host, for egress (never a URL: its path or query may hold secrets).
    pub host: Option<String>,
    /// The rule or signature that fired.
    pub rule: Option<String>,
    /// The request, to join with logs.
    pub request_id: Option<String>,
    /// The lease, for lease events.
    pub lease_id: Option<String>,
    /// Who acted, for a refusal of a person's action outside any run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// For a refused upload: the file's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Recorded, not enforced (a dry-run policy).
    pub dry_run: bool,
    /// A security refusal (listed by `GET /v1/refusals` and audited).
    pub refusal: bool,
}

impl NewEvent {
    /// The event for a refusal.
    pub fn refusal(r: &Refusal) -> Self {
        Self::from_refusal(r.clone())
    }

    /// The event for a refusal, taking its strings instead of copying them
    /// (the door records one per refused request).
    pub fn from_refusal(r: Refusal) -> Self {
        Self {
            at: r.at,
            kind: r.kind.as_str().to_owned(),
            reason: Some(r.reason.as_str().to_owned()),
            tenant_id: r.tenant_id,
            run_id: r.run_id,
            host: r.host,
            rule: r.rule,
            request_id: r.request_id,
            lease_id: r.lease_id,
            actor: r.actor,
            file_name: r.file_name,
            dry_run: r.dry_run,
            refusal: true,
        }
    }

    /// An event of `run_id` of `tenant_id` that is not a refusal: a run's
    /// own (`run_ended`), a lease's, a proposal's.
    pub fn of_run(tenant_id: &str, run_id: &str, kind: &str, reason: Option<&str>, at: UnixTime) -> Self {
        Self {
            at,
            kind: kind.to_owned(),
            reason: reason.map(str::to_owned),
            tenant_id: Some(tenant_id.to_owned()),
            run_id: Some(run_id.to_owned()),
            host: None,
            rule: None,
            request_id: None,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            refusal: false,
        }
    }

    /// A lease's event (`lease_granted`, `lease_revoked`): not a refusal.
    pub fn lease_event(lease: &Lease, kind: &str, reason: Option<&str>, at: UnixTime) -> Self {
        Self {
            host: Some(lease.host.clone()),
            lease_id: Some(lease.lease_id.clone()),
            ..Self::of_run(&lease.tenant_id, &lease.run_id, kind, reason, at)
        }
    }

    /// A run event of `kind` (not a refusal).
    pub fn run_event(run: &Run, kind: &str, reason: Option<&str>, at: UnixTime) -> Self {
        Self::of_run(&run.tenant_id, &run.run_id, kind, reason, at)
    }
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Its sequence number (grows with time on one store).
    pub seq: i64,
    /// What was recorded.
    #[serde(flatten)]
    pub event: NewEvent,
    /// How many refusals the row stands for: 1, but for an aggregate of
    /// refusals from callers who proved nothing ([`RefusalCount`]).
    pub count: i64,
    /// An aggregate's listener (`api`, `proxy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// An aggregate's client address (none: not known, or folded in with
    /// others once too many addresses were counted at once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// Refusals from callers who proved nothing (a missing or bad token or
/// grant), counted instead of itemized: one row per minute, listener,
/// client address, kind and reason, whose count every node adds to.
/// Never audited; pruned with the other events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalCount {
    /// The start of the minute (Unix seconds, a multiple of 60).
    pub minute: UnixTime,
    /// `api` or `proxy`.
    pub listener: String,
    /// The client's address, when known.
    pub client: Option<String>,
    /// The refusal kind.
    pub kind: String,
    /// The reason code.
    pub reason: String,
    /// How many.
    pub count: i64,
}

impl RefusalCount {
    /// The row's key: equal for the same minute, listener, client, kind and
    /// reason, on any node.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}",
            self.minute,
            self.listener,
            self.client.as_deref().unwrap_or("-"),
            self.kind,
            self.reason
        )
    }
}

impl Event {
    /// The refusal this event records, if it is one with known codes.
    pub fn as_refusal(&self) -> Option<Refusal> {
        let e = &self.event;
        Some(Refusal {
            kind: RefusalKind::parse(&e.kind)?,
            reason: Reason::parse(e.reason.as_deref()?)?,
            tenant_id: e.tenant_id.clone(),
            run_id: e.run_id.clone(),
            request_id: e.request_id.clone(),
            host: e.host.clone(),
            rule: e.rule.clone(),
            lease_id: e.lease_id.clone(),
            actor: e.actor.clone(),
            file_name: e.file_name.clone(),
            dry_run: e.dry_run,
            at: e.at,
        })
    }
}

/// What `GET /v1/refusals` narrows by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefusalFilter {
    /// One tenant.
    pub tenant_id: Option<String>,
    /// One run.
    pub run_id: Option<String>,
    /// One kind.
    pub kind: Option<String>,
    /// One reason.
    pub reason: Option<String>,
    /// At or after this time.
    pub since: Option<UnixTime>,
    /// One host.
    pub host: Option<String>,
}

/// A page request: at most `limit` items after the opaque `cursor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// 1..=500.
    pub limit: u32,
    /// Where the previous page stopped (a sort key), if any.
    pub cursor: Option<String>,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: 50, cursor: None }
    }
}

/// One page of a list, and where the next begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// A pull request's dependency scan as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DependencyScan {
    /// `scan_` + UUIDv7.
    pub scan_id: String,
    /// Submission order ([`Store::next_scan_number`](crate::Store::next_scan_number)): of a pull
    /// request's scans, the one submitted last counts.
    pub submitted: i64,
    /// The tenant.
    pub tenant_id: String,
    /// The repository (`owner/name`).
    pub repository: String,
    /// The pull request's number.
    pub pull_request: i64,
    /// The head commit scanned.
    pub head_sha: String,
    /// When it was submitted.
    pub created_at: UnixTime,
    /// `pending` (submitted, not finished), `ok`, or `error` (the scan did not complete).
    pub status: String,
    /// When it finished (or was marked errored); `None` while pending.
    pub finished_at: Option<UnixTime>,
    /// The levels of its findings, as the gate reads them (`high`, `unknown`, ...).
    pub levels: Vec<String>,
    /// The scan as the API answered it (JSON text); empty while pending, and
    /// for a scan marked errored because its node stopped.
    pub report: String,
}

/// A scan submission, recorded as `pending` when it takes its number
/// ([`Store::submit_scan`](crate::Store::submit_scan)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewScan {
    /// `scan_` + UUIDv7.
    pub scan_id: String,
    /// The tenant.
    pub tenant_id: String,
    /// The repository (`owner/name`).
    pub repository: String,
    /// The pull request's number.
    pub pull_request: i64,
    /// The head commit scanned.
    pub head_sha: String,
    /// When it was submitted.
    pub created_at: UnixTime,
}

/// What a finished scan found ([`Store::finish_scan`](crate::Store::finish_scan)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// `ok` or `error`.
    pub status: String,
    /// The levels of its findings, as the gate reads them.
    pub levels: Vec<String>,
    /// The scan as the API answers it (JSON text).
    pub report: String,
}

/// How long a lease lives without its run's heartbeat renewing it.
pub const LEASE_LIFETIME_SECS: i64 = 120;

/// A credential as stored: its secret only sealed to the gateway role's key.
///
/// Not `Serialize`: callers choose what leaves (never `sealed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// `cred_` + UUIDv7.
    pub credential_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Unique within the tenant.
    pub name: String,
    /// `git_provider`, `mcp_server`, `runtime_secret` or `webhook_signing`.
    pub purpose: String,
    /// The host it may be sent to (normalized); a kind serving several
    /// hosts keeps them joined by `,`, which no host holds ([`Self::hosts`]).
    pub host: String,
    /// How it is sent, as JSON text: the injection rule (`header` and
    /// `format`, or `basic_username`) and, when set, `allow_plain_http`.
    pub inject: String,
    /// The sealed secret (`ghc1.…`), bound to tenant, id and version.
    pub sealed: String,
    /// The key it is sealed to.
    pub key_id: String,
    /// 1, then one more per rotation.
    pub version: i64,
    /// A keyed fingerprint of the secret (never the secret).
    pub fingerprint: String,
    /// When it was created.
    pub created_at: UnixTime,
    /// When its secret last changed (or was re-sealed).
    pub updated_at: UnixTime,
}

/// Tokens minted from a credential that every node shares: the OAuth
/// access token and the refresh token its provider rotated in, each sealed
/// to the gateway's key for this `rotation`.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MintedTokens {
    /// The credential.
    pub credential_id: String,
    /// How many refreshes were written; bound into each seal.
    pub rotation: i64,
    /// The refresh token to present next (`None`: the credential's own).
    pub sealed_refresh: Option<String>,
    /// The access token in force.
    pub sealed_access: Option<String>,
    /// When it expires.
    pub access_expires_at: Option<UnixTime>,
    /// When the row was last written (the access token's minting).
    pub updated_at: UnixTime,
}

impl std::fmt::Debug for MintedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MintedTokens")
            .field("credential_id", &self.credential_id)
            .field("rotation", &self.rotation)
            .field("access_expires_at", &self.access_expires_at)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The hosts it may be sent to.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.host.split(',')
    }

    /// What its sealed secret is bound to: the row (tenant, id, version) and
    /// the facts that steer the secret (purpose, host, how it is sent). A
    /// row edited behind the API's back no longer opens.
    pub fn sealing_context(&self) -> gatehouse_capability::credential::CredentialContext<'_> {
        gatehouse_capability::credential::CredentialContext {
            tenant_id: &self.tenant_id,
            credential_id: &self.credential_id,
            version: self.version,
            purpose: &self.purpose,
            host: &self.host,
            delivery: &self.inject,
        }
    }
}

/// A new sealing of a credential's secret: by a rotation (a new secret, one
/// version up) or a rewrap (the same secret, sealed to the current key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resealed {
    /// The credential.
    pub credential_id: String,
    /// The row's version when it was read. A rotation applies only if the
    /// row is still at it (and moves it one up); a rewrap only if the row is
    /// still at it and still holds `previous_sealed`.
    pub version: i64,
    /// The sealed value this replaces, for a rewrap (`None`: a rotation).
    pub previous_sealed: Option<String>,
    /// The new sealed value.
    pub sealed: String,
    /// The key it is sealed to.
    pub key_id: String,
    /// The new fingerprint.
    pub fingerprint: String,
}

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Injectable until `expires_at`.
    Live,
    /// Its two minutes ran out without a renewal (stored as live).
    Expired,
    /// Revoked; `revoke_reason` says why.
    Revoked,
}

impl LeaseStatus {
    /// The stable wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
        }
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Live, Self::Expired, Self::Revoked].into_iter().find(|status| status.as_str() == s)
    }
}

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// `lease_` + UUIDv7.
    pub lease_id: String,
    /// Its run's tenant.
    pub tenant_id: String,
    /// The run holding it.
    pub run_id: String,
    /// The credential it injects.
    pub credential_id: String,
    /// The credential's purpose.
    pub purpose: String,
    /// The one host it is for.
    pub host: String,
    /// `live`, `expired` (as of the read) or `revoked`.
    pub status: LeaseStatus,
    /// When it was granted.
    pub created_at: UnixTime,
    /// When it expires unless renewed.
    pub expires_at: UnixTime,
    /// When it was revoked.
    pub revoked_at: Option<UnixTime>,
    /// Why: `run_ended`, `revoked`, `leaked`, `credential_deleted`.
    pub revoke_reason: Option<String>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
}

/// What granting a lease asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLease {
    /// `lease_` + UUIDv7.
    pub lease_id: String,
    /// The run, which must be live and never have had a lease revoked.
    pub run_id: String,
    /// The credential, which must be of the run's tenant.
    pub credential_id: String,
    /// Must be the credential's purpose.
    pub purpose: String,
    /// Must be the credential's host (normalized by the caller).
    pub host: String,
}

/// A lease with what the door needs of its credential (absent once the
/// credential is deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorLease {
    /// The lease.
    pub lease: Lease,
    /// Its credential, if it still exists.
    pub credential: Option<Credential>,
}

/// What ending runs did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// The runs that stopped being live.
    pub runs: Vec<Run>,
    /// Their leases revoked with them.
    pub leases: u64,
}

/// What `GET /v1/leases` narrows by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseFilter {
    /// One tenant.
    pub tenant_id: Option<String>,
    /// One run.
    pub run_id: Option<String>,
    /// One status (as of `now`).
    pub status: Option<LeaseStatus>,
    /// One credential's.
    pub credential_id: Option<String>,
}

/// A person signed in to the settings page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSession {
    /// Who, as the audit log names them (`person:NAME`).
    pub person: String,
    /// When they signed in.
    pub created_at: UnixTime,
    /// The last request the session made (within a minute: it is written
    /// at most once a minute).
    pub last_seen: UnixTime,
    /// The end of its absolute lifetime.
    pub expires_at: UnixTime,
}
