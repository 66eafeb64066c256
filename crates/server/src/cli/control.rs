//! `gatehouse migrate`, `gatehouse audit verify|checkpoint` and `gatehouse
//! credentials rewrap`: the durable store from the command line, with nothing
//! but its URL (no keys needed, except the audit key for checkpoints and the
//! gateway's credential sealing keys for a rewrap).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use ed25519_dalek::{SigningKey, VerifyingKey};
use gatehouse_capability::{CredentialError, SealedSecret, SealingKeys};
use gatehouse_config::{MapSource, Role, Source as _, embedded_files, names};
use gatehouse_core::{Clock as _, SystemClock};
use gatehouse_store::{Checkpoint, Credential, PageRequest, Resealed, Store, StoreConfig};
use serde_json::json;

use crate::files::{ensure_private_dir, read_text};

/// Where the store is: `--database-url`, else `GATEHOUSE_DATABASE_URL`, else
/// the SQLite file in the data directory (created, owner-only, if missing).
pub(crate) fn store_url(source: &MapSource, flag: Option<String>) -> Result<String, String> {
    if let Some(url) = flag.or_else(|| source.var(names::DATABASE_URL)) {
        return Ok(url.trim().to_owned());
    }
    let dir = data_dir(source);
    ensure_private_dir(&dir)?;
    Ok(gatehouse_config::default_store_url(&dir).expose().to_owned())
}

fn data_dir(source: &MapSource) -> PathBuf {
    PathBuf::from(
        source.var(names::DATA_DIR).unwrap_or_else(|| gatehouse_config::DEFAULT_DATA_DIR.to_owned()),
    )
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))
}

async fn connect(url: &str) -> Result<Store, String> {
    Store::connect(&StoreConfig::new(url)).await.map_err(|e| format!("the store: {e}"))
}

/// Appends one audit entry to the store (whose schema must be current).
pub(crate) fn audit_one(
    source: &MapSource,
    database_url: Option<String>,
    record: gatehouse_store::AuditRecord,
) -> Result<(), String> {
    let url = store_url(source, database_url)?;
    runtime()?.block_on(async {
        let store = connect(&url).await?;
        store.require_current_schema().await.map_err(|e| format!("the store: {e}"))?;
        store.audit(&[record]).await.map_err(|e| format!("the store: {e}"))
    })
}

/// Applies pending migrations. Exit 0, or 2 (a newer schema, an outage).
pub(crate) fn migrate(
    source: &MapSource,
    database_url: Option<String>,
    json_out: bool,
) -> Result<ExitCode, String> {
    let url = store_url(source, database_url)?;
    let applied = runtime()?.block_on(async {
        let store = connect(&url).await?;
        store.migrate().await.map_err(|e| format!("the store: {e}"))
    })?;
    if json_out {
        say!("{}", json!({"applied": applied}));
    } else if applied.is_empty() {
        say!("the schema is current");
    } else {
        say!("applied migrations {applied:?}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Walks the audit chain. Exit 0 intact, 1 broken, 2 unreadable input.
pub(crate) fn audit_verify(
    source: &MapSource,
    database_url: Option<String>,
    checkpoints: &[PathBuf],
    public_key: Option<PathBuf>,
    json_out: bool,
) -> Result<ExitCode, String> {
    let mut vouched = Vec::new();
    if !checkpoints.is_empty() {
        let key_path = public_key.unwrap_or_else(|| data_dir(source).join(embedded_files::AUDIT_PUBLIC_KEY));
        let key = VerifyingKey::from_public_key_pem(&read_text("--public-key", &key_path)?)
            .map_err(|_| "--public-key: not an Ed25519 SPKI PEM public key".to_owned())?;
        for path in checkpoints {
            let checkpoint: Checkpoint = serde_json::from_str(&read_text("--checkpoint", path)?)
                .map_err(|_| format!("--checkpoint {}: not a gatehouse audit checkpoint", path.display()))?;
            vouched.push(
                checkpoint
                    .verify(&key)
                    .ok_or_else(|| format!("--checkpoint {}: not signed by the audit key", path.display()))?,
            );
        }
    }
    let url = store_url(source, database_url)?;
    let verdict = runtime()?.block_on(async {
        let store = connect(&url).await?;
        store.require_current_schema().await.map_err(|e| format!("the store: {e}"))?;
        store.verify_audit(vouched).await.map_err(|e| format!("the store: {e}"))
    })?;
    match verdict {
        Ok(entries) => {
            if json_out {
                say!("{}", json!({"intact": true, "entries": entries}));
            } else {
                say!("audit log intact: {entries} entries");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) => {
            if json_out {
                say!(
                    "{}",
                    json!({"intact": false, "first_bad_seq": broken.first_bad_seq, "why": broken.why})
                );
            } else {
                say!("audit log broken at entry {}: {}", broken.first_bad_seq, broken.why);
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// Prints a signed statement of the chain's head, after checking the chain.
pub(crate) fn audit_checkpoint(
    source: &MapSource,
    database_url: Option<String>,
    key: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let key_path = match key {
        Some(path) => path,
        None => default_audit_key(source)?,
    };
    let signing = signing_key(&key_path)?;
    let url = store_url(source, database_url)?;
    let outcome = runtime()?.block_on(async {
        let store = connect(&url).await?;
        store.require_current_schema().await.map_err(|e| format!("the store: {e}"))?;
        // The head the walk began at and verified up to: entries appended
        // meanwhile are left to the next checkpoint.
        store.verify_audit_head(Vec::new()).await.map_err(|e| format!("the store: {e}"))
    })?;
    match outcome {
        Ok((seq, hash)) => {
            let checkpoint = Checkpoint::sign(&signing, seq, &hash, SystemClock.now());
            say!("{}", serde_json::to_string(&checkpoint).map_err(|_| "cannot encode the checkpoint")?);
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) => {
            eprintln!(
                "gatehouse: the audit log is broken at entry {} ({}); no checkpoint taken",
                broken.first_bad_seq, broken.why
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// The data directory's audit signing key, generated with its public key on
/// first use (owner-only, never overwritten), like the other embedded keys.
fn default_audit_key(source: &MapSource) -> Result<PathBuf, String> {
    let dir = data_dir(source);
    let path = dir.join(embedded_files::AUDIT_SIGNING_KEY);
    if !path.exists() {
        let keys = crate::files::KeySet::generate()?
            .only(&[embedded_files::AUDIT_SIGNING_KEY, embedded_files::AUDIT_PUBLIC_KEY]);
        keys.write_new(&dir)?;
        eprintln!(
            "gatehouse: generated {} and {} in {} (owner-only)",
            embedded_files::AUDIT_SIGNING_KEY,
            embedded_files::AUDIT_PUBLIC_KEY,
            dir.display()
        );
    }
    Ok(path)
}

fn signing_key(path: &Path) -> Result<SigningKey, String> {
    SigningKey::from_pkcs8_pem(&read_text("--key", path)?)
        .map_err(|_| "--key: not an Ed25519 PKCS#8 PEM private key".to_owned())
}

/// The actor the store's audit entries name for a rewrap.
const REWRAP_ACTOR: &str = "cli:rewrap";
/// Credentials read, and resealed in one transaction, at a time (the store's
/// page limit).
const REWRAP_BATCH: u32 = 500;

/// What a rewrap did.
#[derive(Default)]
struct Rewrapped {
    /// Sealed again to the current key.
    rewrapped: usize,
    /// Already on the current key: left alone.
    already_current: usize,
    /// Changed (rotated, rewrapped, deleted) between reading and writing:
    /// left as the other change made it.
    skipped: usize,
    /// Credentials that do not open (a key this node does not hold, an
    /// altered seal): their ids, and why.
    unreadable: Vec<(String, &'static str)>,
}

/// Seals every stored credential that is not on the current credential
/// sealing key again to it, opening it with whichever key (current or
/// previous) it names. Exit 0, 1 when some credential does not open (after
/// doing all the others), or 2 (no keys, bad configuration, an outage).
///
/// Never prints a secret or a sealed value: only counts, ids and codes.
pub(crate) fn credentials_rewrap(
    source: &MapSource,
    database_url: Option<String>,
    json_out: bool,
) -> Result<ExitCode, String> {
    let keys = rewrap_keys(source)?;
    let url = store_url(source, database_url)?;
    let done = runtime()?.block_on(async {
        let store = connect(&url).await?;
        store.require_current_schema().await.map_err(|e| format!("the store: {e}"))?;
        rewrap_all(&store, &keys).await
    })?;
    let kid = keys.current_public().kid();
    for (id, code) in &done.unreadable {
        eprintln!("gatehouse: {id}: {code}: left as it is");
    }
    if json_out {
        let unreadable: Vec<&str> = done.unreadable.iter().map(|(id, _)| id.as_str()).collect();
        say!(
            "{}",
            json!({
                "rewrapped": done.rewrapped,
                "already_current": done.already_current,
                "skipped": done.skipped,
                "unreadable": unreadable,
                "key_id": kid,
            })
        );
    } else {
        let mut line = format!(
            "rewrapped {} credential(s) to key {kid}; {} already current",
            done.rewrapped, done.already_current
        );
        if done.skipped > 0 {
            line.push_str(&format!("; {} changed meanwhile (run again to check them)", done.skipped));
        }
        if !done.unreadable.is_empty() {
            let ids: Vec<&str> = done.unreadable.iter().map(|(id, _)| id.as_str()).collect();
            line.push_str(&format!("; {} unreadable: {}", ids.len(), ids.join(", ")));
        }
        say!("{line}");
    }
    Ok(if done.unreadable.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The gateway's credential sealing keys, from the configuration loaded as
/// the gateway loads it (role `gateway`, or `all` when that is the role set).
fn rewrap_keys(source: &MapSource) -> Result<std::sync::Arc<SealingKeys>, String> {
    const NO_KEY: &str = "credentials rewrap runs where the gateway's keys are: set GATEHOUSE_CREDENTIAL_SEALING_KEY \
                          (or its _FILE form) to the current credential sealing key, and \
                          GATEHOUSE_CREDENTIAL_SEALING_PREVIOUS_KEY to the one being retired";
    let mut source = source.clone();
    if source.var(names::ROLE).and_then(|r| Role::parse(&r)) != Some(Role::All) {
        source.set(names::ROLE, Role::Gateway.as_str());
    }
    let config = gatehouse_config::load(&source, None).map_err(|problems| {
        let sealing_key_missing = problems
            .iter()
            .any(|p| p.setting == names::CREDENTIAL_SEALING_KEY && p.code == "missing_required");
        let list = problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        if sealing_key_missing {
            format!("{NO_KEY} ({list})")
        } else {
            format!("the gateway's configuration: {list}")
        }
    })?;
    config.credential_keys.ok_or_else(|| NO_KEY.to_owned())
}

/// Pages through every tenant's credentials and reseals, one transaction
/// per page, those not on the current key.
async fn rewrap_all(store: &Store, keys: &SealingKeys) -> Result<Rewrapped, String> {
    let current = keys.current_public().kid();
    let mut done = Rewrapped::default();
    let mut cursor = None;
    loop {
        let page = store
            .credentials(None, &PageRequest { limit: REWRAP_BATCH, cursor })
            .await
            .map_err(|e| format!("the store: {e}"))?;
        let mut batch = Vec::new();
        for credential in &page.items {
            if is_current(credential, current) {
                done.already_current += 1;
                continue;
            }
            match rewrap_one(keys, credential) {
                Ok(resealed) => batch.push(resealed),
                Err(CredentialError::Random) => return Err(CredentialError::Random.to_string()),
                Err(e) => done.unreadable.push((credential.credential_id.clone(), e.code())),
            }
        }
        if !batch.is_empty() {
            let changed = store
                .reseal_credentials(None, &batch, REWRAP_ACTOR, SystemClock.now())
                .await
                .map_err(|e| format!("the store: {e}"))?;
            done.rewrapped += changed.len();
            done.skipped += batch.len().saturating_sub(changed.len());
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(done),
        }
    }
}

/// On the current key: its row says so, and so does its seal.
fn is_current(credential: &Credential, current: &str) -> bool {
    credential.key_id == current
        && SealedSecret::parse(&credential.sealed)
            .is_ok_and(|sealed| sealed.kid() == current && !sealed.is_legacy())
}

/// The credential's secret sealed again to the current key, for the same row
/// and version; the secret itself never leaves `SealingKeys::rewrap`.
fn rewrap_one(keys: &SealingKeys, credential: &Credential) -> Result<Resealed, CredentialError> {
    let sealed = SealedSecret::parse(&credential.sealed)?;
    let resealed = keys.rewrap(&sealed, &credential.sealing_context())?;
    Ok(Resealed {
        credential_id: credential.credential_id.clone(),
        version: credential.version,
        previous_sealed: Some(credential.sealed.clone()),
        sealed: resealed.as_str().to_owned(),
        key_id: resealed.kid().to_owned(),
        fingerprint: credential.fingerprint.clone(),
    })
}
