//! `gatehouse credentials rewrap`: the real binary moves stored credentials
//! from the previous sealing key to the current one, run as an operator runs
//! it during a key rotation, and never prints what it handles.

use std::process::{Command, Output};

use gatehouse_capability::{SealedSecret, SealingKey, SealingKeys};
use gatehouse_config::names;
use gatehouse_store::{Credential, PageRequest, Store, StoreConfig};
use serde_json::{Value, json};

use crate::cli::gatehouse;
use crate::support::{GRANT_SECRET, SEALING_KEY, TOKEN, call, intercept_ca, node_with};

const SECRETS: [(&str, &str); 2] =
    [("github", "rewrap-canary-5d1e9b27c4a8-one"), ("gitlab", "rewrap-canary-0f3a6c81e2d7-two")];

/// The binary as a gateway runs it, on `url`, with these sealing keys.
fn rewrap(dir: &std::path::Path, url: &str, current: Option<&str>, previous: Option<&str>) -> (i32, String) {
    let mut c: Command = gatehouse(dir);
    c.args(["credentials", "rewrap", "--json", "--database-url", url])
        .env(names::ROLE, "gateway")
        .env(names::GRANT_SECRET, GRANT_SECRET)
        .env(names::SERVICE_TOKEN, TOKEN)
        .env(names::INTERCEPT_CA_KEY, &intercept_ca().0)
        .env(names::INTERCEPT_CA_CERT, &intercept_ca().1);
    if let Some(key) = current {
        c.env(names::CREDENTIAL_SEALING_KEY, key);
    }
    if let Some(key) = previous {
        c.env(names::CREDENTIAL_SEALING_PREVIOUS_KEY, key);
    }
    let Output { status, stdout, stderr } = c.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    (status.code().unwrap_or(-1), format!("{stdout}\n{stderr}"))
}

fn json_of(output: &str) -> Value {
    let line = output.lines().next().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {output}"))
}

async fn rows(url: &str) -> Vec<Credential> {
    let store = Store::connect(&StoreConfig::new(url)).await.unwrap();
    let mut items = store.credentials(None, &PageRequest { limit: 500, cursor: None }).await.unwrap().items;
    items.sort_by(|a, b| a.name.cmp(&b.name));
    items
}

fn opened(keys: &SealingKeys, c: &Credential) -> Result<String, String> {
    let sealed = SealedSecret::parse(&c.sealed).map_err(|e| e.to_string())?;
    let secret = keys.open(&sealed, &c.sealing_context()).map_err(|e| e.code().to_owned())?;
    Ok(String::from_utf8(secret.expose().to_vec()).unwrap())
}

/// Nothing the command handled appears in what it printed.
fn assert_quiet(output: &str, sealed: &[String], keys: &[&str]) {
    for (_, secret) in SECRETS {
        assert!(!output.contains(secret), "a secret was printed: {output}");
    }
    for value in sealed {
        assert!(!output.contains(value.as_str()), "a sealed value was printed: {output}");
        let body = value.trim_start_matches("ghc2.");
        assert!(!output.contains(&body[..24]), "part of a sealed value was printed: {output}");
    }
    for key in keys {
        assert!(!output.contains(key), "a sealing key was printed: {output}");
    }
}

#[tokio::test]
async fn rewrap_moves_every_credential_to_the_current_key_and_prints_nothing_secret() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", db.path().join("gatehouse.db").display());
    let node = node_with("all", &[(names::DATABASE_URL, &url)]).await;
    let key_a = SealingKey::from_text(SEALING_KEY).unwrap();
    let key_b = SealingKey::generate().unwrap();
    let key_b_text = key_b.to_text().to_string();
    let key_c_text = SealingKey::generate().unwrap().to_text().to_string();
    let all_keys = [SEALING_KEY, key_b_text.as_str(), key_c_text.as_str()];

    for (name, secret) in SECRETS {
        let created = call(
            &node,
            "/v1/tenants/t1/credentials",
            json!({"name": name, "purpose": "git_provider", "host": "example.com",
                "inject": {"header": "Authorization", "format": "Bearer {secret}"}, "secret": secret}),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.text);
    }
    let before = rows(&url).await;
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|c| c.key_id == key_a.kid()), "sealed to key A first");
    let mut sealed: Vec<String> = before.iter().map(|c| c.sealed.clone()).collect();
    let cwd = tempfile::tempdir().unwrap();

    // Keys that open none of them: each is reported by id, none is changed.
    let (code, output) = rewrap(cwd.path(), &url, Some(&key_b_text), Some(&key_c_text));
    assert_eq!(code, 1, "{output}");
    let report = json_of(&output);
    assert_eq!(report["rewrapped"], 0, "{output}");
    assert_eq!(report["already_current"], 0, "{output}");
    let mut unreadable: Vec<&str> =
        report["unreadable"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    unreadable.sort_unstable();
    let mut ids: Vec<&str> = before.iter().map(|c| c.credential_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(unreadable, ids, "{output}");
    assert!(output.contains("credential_key_unknown"), "{output}");
    assert_quiet(&output, &sealed, &all_keys);
    assert_eq!(rows(&url).await, before, "nothing changed");

    // B current, A previous: both move to B.
    let (code, output) = rewrap(cwd.path(), &url, Some(&key_b_text), Some(SEALING_KEY));
    assert_eq!(code, 0, "{output}");
    let report = json_of(&output);
    assert_eq!(
        report,
        json!({"rewrapped": 2, "already_current": 0, "skipped": 0, "unreadable": [], "key_id": key_b.kid()}),
        "{output}"
    );
    let after = rows(&url).await;
    sealed.extend(after.iter().map(|c| c.sealed.clone()));
    assert_quiet(&output, &sealed, &all_keys);

    // Again: nothing left to do.
    let (code, output) = rewrap(cwd.path(), &url, Some(&key_b_text), Some(SEALING_KEY));
    assert_eq!(code, 0, "{output}");
    let report = json_of(&output);
    assert_eq!(report["rewrapped"], 0, "{output}");
    assert_eq!(report["already_current"], 2, "{output}");
    assert_eq!(report["unreadable"], json!([]), "{output}");
    assert_quiet(&output, &sealed, &all_keys);
    assert_eq!(rows(&url).await, after, "a second run changes nothing");

    // The rows carry B's key id and open with B alone, same secret, same
    // version and fingerprint; A alone no longer opens them.
    let only_b = SealingKeys::new(SealingKey::from_text(&key_b_text).unwrap(), None).unwrap();
    let only_a = SealingKeys::new(SealingKey::from_text(SEALING_KEY).unwrap(), None).unwrap();
    for ((c, old), (name, secret)) in after.iter().zip(&before).zip(SECRETS) {
        assert_eq!(c.name, name);
        assert_eq!(c.key_id, key_b.kid());
        assert_eq!(opened(&only_b, c).as_deref(), Ok(secret));
        assert_eq!(opened(&only_a, c), Err("credential_key_unknown".to_owned()));
        assert_eq!((c.version, &c.fingerprint), (old.version, &old.fingerprint));
        assert_ne!(c.sealed, old.sealed);
    }
    // One audit entry per rewrapped credential, by the command, and the
    // chain still holds.
    let store = Store::connect(&StoreConfig::new(&url)).await.unwrap();
    let entries = store.audit_entries(0, 500).await.unwrap();
    let mut rewrapped: Vec<&str> = entries
        .iter()
        .filter(|e| e.record.action == "credential.rewrap")
        .map(|e| {
            assert_eq!(e.record.actor, "cli:rewrap");
            assert_eq!(e.record.detail["key_id"], key_b.kid());
            e.record.subject.as_str()
        })
        .collect();
    rewrapped.sort_unstable();
    assert_eq!(rewrapped, ids);
    assert_quiet(&serde_json::to_string(&entries).unwrap(), &sealed, &all_keys);
    assert!(store.verify_audit(Vec::new()).await.unwrap().is_ok(), "the audit chain holds");
    drop(node);
}

#[test]
fn rewrap_without_a_sealing_key_names_the_setting() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", db.path().join("gatehouse.db").display());
    let (code, output) = rewrap(db.path(), &url, None, None);
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("GATEHOUSE_CREDENTIAL_SEALING_KEY"), "{output}");
    assert!(!db.path().join("gatehouse.db").exists(), "nothing was opened without keys");
}
