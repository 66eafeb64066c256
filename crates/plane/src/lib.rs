//! The control plane as operations on plain types.
//!
//! Architecture invariant: nothing here knows HTTP, JSON wire shapes or
//! HTML. The server's two faces (the API and the settings page) translate
//! their requests into these operations and [`PlaneError`] into their own
//! answers; every rule of the plane is written once, at its operation:
//!
//! - **Ledger before store.** Revoking (ending or cancelling a run, a kill
//!   switch, an emergency revoke) revokes in the ledger first, then records
//!   it: a failure in between leaves a live-looking run with a dead grant
//!   (fail closed), and calling again finishes it. Creating a run registers
//!   its grant before recording it, and revokes the grant again when the
//!   run cannot be recorded.
//! - **Every change audited in its transaction.** The store writes the
//!   audit entry of each change in the transaction that makes it; a change
//!   outside the store (a ledger-only revocation, a minted grant) is
//!   audited as part of the call, and the call fails when it cannot be.
//! - **The kill switch in force for every way out.** A kill-switched tenant
//!   gets no new run, grant or lease, and engaging it kills its live runs
//!   and revokes their grants and leases (two ledger markers around the
//!   store's change, so a run registered meanwhile dies too).
//! - **Lease changes reach every door before the answer.** Each change to a
//!   run's leases bumps its grant's lease generation in the ledger.
//!
//! It depends on the domain crates below it and on nothing above it.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::sync::Arc;

use gatehouse_capability::ManifestVerifier;
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{FingerprintKey, GrantSealer, SealingPublicKey, SessionKeyDeriver};
use gatehouse_core::Clock;
use gatehouse_egress::proxy::Proxy;
use gatehouse_ledger::Ledger;
use gatehouse_store::Store;

mod caller;
pub mod credential_kinds;
pub mod credential_use;
pub mod credentials;
pub mod door;
mod error;
pub mod files;
pub mod grants;
pub mod manifests;
pub mod mcp;
pub mod mint;
mod osv;
pub mod policy;
pub mod proposals;
pub mod record;
pub mod runs;
pub mod scans;
pub mod tenancy;
pub mod tenants;

pub use caller::Caller;
pub use error::PlaneError;

/// The plane's result.
pub type Result<T, E = PlaneError> = std::result::Result<T, E>;

/// The control plane of one node. Cheap to clone.
#[derive(Clone)]
pub struct Plane(Arc<Parts>);

/// What a node's plane holds; each part present on the roles that use it.
pub struct Parts {
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Durable state (worker, gateway and all; a runner has none).
    pub store: Option<Store>,
    /// The grant ledger (roles that mint or open grants).
    pub ledger: Option<Ledger>,
    /// The refusal record (logs, counters, the durable queue).
    pub refusals: Arc<record::RefusalLog>,
    /// Tenants' egress policies, replicated from the store.
    pub policies: Arc<policy::PolicyCache>,
    /// Signs runs' manifests (minting roles).
    pub signer: Option<ManifestSigner>,
    /// Checks manifests (verifying roles).
    pub verifier: Option<ManifestVerifier>,
    /// Mints and opens grants.
    pub sealer: Option<GrantSealer>,
    /// Derives storage namespaces (minting roles).
    pub sessions: Option<SessionKeyDeriver>,
    /// Worker: the gateway's public key new credentials are sealed to.
    pub credential_public_key: Option<SealingPublicKey>,
    /// Worker: the keyed fingerprints credentials are shown by.
    pub fingerprints: Option<FingerprintKey>,
    /// Gateway: runs' leases as the door reads them.
    pub door_leases: Option<Arc<door::DoorLeases>>,
    /// This node's door, whose revoked tunnels and pooled connections are
    /// closed at once when runs stop being live.
    pub proxy: Option<Arc<Proxy>>,
    /// Where runs' egress proposals are recorded (roles with a store).
    pub asks: Option<Arc<proposals::Asks>>,
    /// Gateway: the door for requests made on a run's behalf (the fetch
    /// API) and for a person's own requests with a stored credential.
    pub fetch_door: Option<Arc<gatehouse_egress::run_fetch::FetchDoor>>,
    /// Where files through grants are kept (worker, gateway and all).
    pub storage: Option<gatehouse_files::Storage>,
    /// Where dependency scans find advisories (worker and all).
    pub osv: Option<Arc<scans::OsvSource>>,
    /// Dependency scans' turns and how long a submission waits for its scan.
    pub scan_limits: scans::ScanLimits,
    /// The rules' numbers.
    pub settings: Settings,
}

/// The numbers the plane's rules use.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Whether this node keeps credentials and grants leases (worker, all).
    pub keeps_credentials: bool,
    /// `CODEAPI_EGRESS_LEDGER_REQUIRED`: a grant without a live record is refused.
    pub ledger_required: bool,
    /// `CODEAPI_TENANT_ISOLATION_STRICT`: every manifest names a tenant.
    pub tenant_isolation_strict: bool,
    /// `SANDBOX_REQUIRE_EGRESS_MANIFEST`: an execute request without a manifest is refused.
    pub require_manifest: bool,
    /// Default manifest lifetime.
    pub manifest_ttl_secs: i64,
    /// Default run and grant lifetime.
    pub grant_ttl_secs: i64,
    /// Longest run and grant lifetime accepted.
    pub grant_max_lifetime_secs: i64,
    /// A live run without a heartbeat this long expires.
    pub run_heartbeat_timeout_secs: i64,
    /// Requests a minute a tenant's people may make with its stored
    /// credentials (the ledger counts them for the whole fleet).
    pub credential_use_per_minute: u64,
}

impl std::ops::Deref for Plane {
    type Target = Parts;
    fn deref(&self) -> &Parts {
        &self.0
    }
}

impl Plane {
    /// A plane over `parts`.
    pub fn new(parts: Parts) -> Self {
        Self(Arc::new(parts))
    }

    /// The store, on roles that have one.
    pub fn store(&self) -> Result<&Store> {
        self.store.as_ref().ok_or(PlaneError::NotServed)
    }

    /// The ledger, on roles that have one.
    pub fn ledger(&self) -> Result<&Ledger> {
        self.ledger.as_ref().ok_or(PlaneError::NotServed)
    }
}

/// Ids are 1-128 characters of `[A-Za-z0-9._:-]`, and not `.` or `..`.
pub const ID_RULE: &str = "ids are 1-128 characters of [A-Za-z0-9._:-], and not . or ..";

/// Whether `name` is one the audit log can carry as a person: 1-64
/// characters of letters, digits, `.`, `_`, `-`, `@`.
pub fn is_person_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// Free text a caller gives (a reason, an actor): stored and shown to
/// people, so bounded and free of control characters.
pub fn check_text(text: Option<&str>) -> Result<()> {
    match text {
        Some(t) if t.chars().count() > 500 || t.chars().any(char::is_control) => {
            Err(PlaneError::invalid("free text is at most 500 characters, without control characters"))
        }
        _ => Ok(()),
    }
}
