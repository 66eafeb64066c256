//! One node's plane on real components that need no socket.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_capability::credential::{SealingKey, SealingKeys};
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::{
    FingerprintKey, GrantSealer, ManifestSigningKey, ManifestVerifier, Secret, SessionKeyDeriver,
};
use gatehouse_core::ManualClock;
use gatehouse_ledger::{Ledger, MemoryLedger};
use gatehouse_plane::door::DoorLeases;
use gatehouse_plane::policy::PolicyCache;
use gatehouse_plane::record::{EventQueue, RefusalLog};
use gatehouse_plane::runs::{CreatedRun, NewRunRequest};
use gatehouse_plane::scans::ScanLimits;
use gatehouse_plane::{Caller, Parts, Plane, Settings};
use gatehouse_store::{AuditEntry, Store, StoreConfig};
use serde_json::json;

/// The start of every test's time.
pub const T0: i64 = 1_700_000_000;

/// A plane, the parts a test looks behind it at, and its directory.
pub struct Node {
    pub plane: Plane,
    pub clock: ManualClock,
    pub store: Store,
    pub ledger: Ledger,
    _dir: tempfile::TempDir,
}

/// The platform's own caller: every tenant, every scope.
pub fn platform() -> Caller {
    Caller::unbound("platform")
}

/// A caller bound to `tenants`, without scope `admin`.
pub fn bound(name: &str, tenants: &[&str]) -> Caller {
    Caller {
        name: name.to_owned(),
        tenants: Some(tenants.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>().into()),
        admin: false,
        run_id: None,
    }
}

pub async fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&StoreConfig::sqlite_file(&dir.path().join("plane.db"))).await.unwrap();
    store.migrate().await.unwrap();
    let clock = ManualClock::new(T0);
    let shared_clock: Arc<dyn gatehouse_core::Clock> = Arc::new(clock.clone());
    let ledger = Ledger::Memory(MemoryLedger::new());
    let queue = Arc::new(EventQueue::default());
    tokio::spawn(queue.clone().write_to(store.clone()));
    let refusals = Arc::new(RefusalLog::new(shared_clock.clone(), Some(queue)));
    let signing = ManifestSigningKey::generate().unwrap();
    let verifier = ManifestVerifier::new(signing.verifying_keys());
    let sealing = SealingKey::generate().unwrap();
    let public = sealing.public_key();
    let keys = Arc::new(SealingKeys::new(sealing, None).unwrap());
    let door =
        DoorLeases::new(store.clone(), keys, ledger.clone(), refusals.clone(), shared_clock.clone()).unwrap();
    let plane = Plane::new(Parts {
        clock: shared_clock,
        store: Some(store.clone()),
        ledger: Some(ledger.clone()),
        refusals,
        policies: Arc::new(PolicyCache::default()),
        signer: Some(ManifestSigner::new(signing)),
        verifier: Some(verifier),
        sealer: Some(GrantSealer::new(&Secret::generate().unwrap())),
        sessions: Some(SessionKeyDeriver::new(&Secret::generate().unwrap(), false)),
        credential_public_key: Some(public),
        fingerprints: Some(FingerprintKey::new(&Secret::generate().unwrap())),
        door_leases: Some(Arc::new(door)),
        proxy: None,
        asks: None,
        fetch_door: None,
        storage: Some(gatehouse_files::Storage::from_setting(None, &dir.path().join("objects")).unwrap()),
        osv: Some(Arc::new(gatehouse_plane::scans::OsvSource::Offline(Arc::new(
            gatehouse_deps::matching::Index::new(Vec::new()),
        )))),
        scan_limits: ScanLimits::new(1, Duration::from_secs(5)),
        settings: Settings {
            keeps_credentials: true,
            ledger_required: true,
            tenant_isolation_strict: false,
            require_manifest: true,
            manifest_ttl_secs: 300,
            grant_ttl_secs: 600,
            grant_max_lifetime_secs: 3600,
            run_heartbeat_timeout_secs: 120,
            credential_use_per_minute: 60,
        },
    });
    Node { plane, clock, store, ledger, _dir: dir }
}

/// A run of `tenant` as the platform would ask for one.
pub fn run_of(tenant: &str) -> NewRunRequest {
    NewRunRequest {
        tenant_id: tenant.to_owned(),
        user_id: "u1".to_owned(),
        body: json!({"code": "print(1)"}),
        claims: serde_json::Map::new(),
        input_files: Vec::new(),
        read_sessions: Vec::new(),
        output_session_id: None,
        conversation_id: None,
        budgets: Default::default(),
        ttl_secs: None,
    }
}

impl Node {
    /// A live run of `tenant`.
    pub async fn run(&self, tenant: &str) -> CreatedRun {
        self.plane.create_run("req", &platform(), run_of(tenant)).await.unwrap()
    }

    /// The whole audit log, each entry's action and subject.
    pub async fn audit(&self) -> Vec<AuditEntry> {
        self.store.audit_entries(0, 10_000).await.unwrap()
    }

    /// The actions of the audit log, in order.
    pub async fn actions(&self) -> Vec<String> {
        self.audit().await.into_iter().map(|e| e.record.action).collect()
    }
}
