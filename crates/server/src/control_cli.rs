//! `gatehouse migrate` and `gatehouse audit verify|checkpoint`: the durable
//! store from the command line, with nothing but its URL (no keys needed,
//! except the audit key for checkpoints).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use ed25519_dalek::{SigningKey, VerifyingKey};
use gatehouse_config::{MapSource, Source as _, embedded_files, names};
use gatehouse_core::{Clock as _, SystemClock};
use gatehouse_store::{Checkpoint, Store, StoreConfig};
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
        let (seq, hash) = store.audit_head().await.map_err(|e| format!("the store: {e}"))?;
        let verdict = store.verify_audit(Vec::new()).await.map_err(|e| format!("the store: {e}"))?;
        Ok::<_, String>(verdict.map(|_| (seq, hash)))
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
