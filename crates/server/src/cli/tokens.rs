//! `gatehouse manifest` and `gatehouse grant`: signing, verifying, minting,
//! opening and revoking offline, with the keys the operator hands the command.

use std::path::Path;
use std::process::ExitCode;

use gatehouse_capability::canonical::{BodyDigest, parse_strict};
use gatehouse_capability::grant::{GrantLifetime, GrantRequest};
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_capability::{
    GrantSealer, ManifestSigningKey, ManifestVerifier, ManifestVerifyingKeys, Secret, SessionKeyDeriver,
};
use gatehouse_config::{DEFAULT_GRANT_MAX_LIFETIME_SECS, Source, names};
use gatehouse_core::{Clock, SystemClock};
use gatehouse_ledger::{LedgerBackend as _, RedisLedger, RedisLedgerConfig, Registration, RevokeScope};
use serde_json::{Value, json};

use super::{Fail, GrantCommand, ManifestCommand, RevokeTarget, environment, first_clause, report};
use crate::files::read_text;

pub(super) fn read_json(flag: &str, path: &Path) -> Result<Value, Fail> {
    let text = read_text(flag, path)?;
    parse_strict(text.as_bytes())
        .map_err(|e| Fail(format!("{flag}: {} is not valid JSON: {e}", path.display())))
}

pub(super) fn read_token(token: &str) -> Result<String, Fail> {
    if token == "-" {
        return Ok(read_text("TOKEN", Path::new("-"))?.trim().to_owned());
    }
    Ok(token.trim().to_owned())
}

pub(super) fn read_secret(flag: &str, path: &Path) -> Result<Secret, Fail> {
    let text = read_text(flag, path)?;
    Secret::new(&text).map_err(|_| {
        Fail(format!("{flag}: weak_secret: the secret must be at least 32 bytes of random text"))
    })
}

pub(super) fn manifest(command: ManifestCommand) -> Result<ExitCode, Fail> {
    let now = SystemClock.now();
    match command {
        ManifestCommand::Sign { key, claims, body, ttl } => {
            let key_text = read_text("--key", &key)?;
            let key =
                ManifestSigningKey::from_ed25519_text(&key_text).map_err(|e| Fail(format!("--key: {e}")))?;
            let Value::Object(claims) = read_json("--claims", &claims)? else {
                return Err(Fail("--claims: must be a JSON object".into()));
            };
            let body = BodyDigest::of_value(&read_json("--body", &body)?)
                .map_err(|e| Fail(format!("--body: {e}")))?;
            if ttl <= 0 {
                return Err(Fail("--ttl must be positive".into()));
            }
            let (token, _) = ManifestSigner::new(key)
                .sign_for_body(claims, &body, now, ttl)
                .map_err(|e| Fail(e.to_string()))?;
            say!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        ManifestCommand::Verify { public_key, body, token, out } => {
            let key_text = read_text("--public-key", &public_key)?;
            let keys = ManifestVerifyingKeys::from_public_keys_text(&key_text)
                .map_err(|e| Fail(format!("--public-key: {e}")))?;
            let body = BodyDigest::of_value(&read_json("--body", &body)?)
                .map_err(|e| Fail(format!("--body: {e}")))?;
            let token = read_token(&token)?;
            let verdict = ManifestVerifier::new(keys).verify(&token, &body, now);
            Ok(report(verdict.map(|m| serde_json::to_value(m.claims).unwrap_or(Value::Null)), out.json))
        }
    }
}

pub(super) fn grant(command: GrantCommand) -> Result<ExitCode, Fail> {
    let now = SystemClock.now();
    match command {
        GrantCommand::Revoke { scope, redis_url, database_url, actor, out } => {
            revoke(scope, redis_url, database_url, actor, out.json)
        }
        GrantCommand::Mint { secret_file, claims, session_key_file, ttl, redis_url } => {
            let secret = read_secret("--secret-file", &secret_file)?;
            let session_key_file = session_key_file.unwrap_or_else(|| {
                secret_file.with_file_name(gatehouse_config::embedded_files::SESSION_KEY_SECRET)
            });
            let session_secret = read_secret("--session-key-file", &session_key_file)?;
            if session_secret.expose() == secret.expose() {
                return Err(Fail(
                    "--session-key-file: secret_reused: must differ from the grant secret".into(),
                ));
            }
            let request: GrantRequest =
                serde_json::from_value(read_json("--claims", &claims)?).map_err(|e| {
                    Fail(format!(
                        "--claims: not a valid grant request ({}); session_key is derived, never supplied",
                        first_clause(&e)
                    ))
                })?;
            if ttl <= 0 {
                return Err(Fail("--ttl must be positive".into()));
            }
            let principal =
                Principal { tenant_id: request.tenant_id.clone(), user_id: request.user_id.clone() };
            let session_key = SessionKeyDeriver::new(&session_secret, true)
                .derive(&principal, &Namespace::Output)
                .map_err(|r| {
                    Fail(format!("--claims: {r}: tenant_id is required (strict tenant isolation)"))
                })?;
            // The serving side's default cap: a longer grant would be
            // refused there anyway.
            let lifetime = GrantLifetime { default_secs: ttl, max_secs: DEFAULT_GRANT_MAX_LIFETIME_SECS };
            let claims = request.into_claims(session_key, now, lifetime).map_err(|e| Fail(e.to_string()))?;
            let token = GrantSealer::new(&secret).mint(&claims).map_err(|e| Fail(e.to_string()))?;
            match redis_url.or_else(|| environment(None).var(names::REDIS_URL)) {
                Some(url) => with_shared_ledger(url, |ledger| async move {
                    ledger.register(&Registration::from(&claims)).await.map(|_| ()).map_err(|r| {
                        Fail(format!("{r}: the grant was not registered, so no token is printed"))
                    })
                })?,
                None => eprintln!(
                    "warning: no ledger given (--redis-url or GATEHOUSE_REDIS_URL): the grant is not registered, \
                     and a gateway that requires the ledger (CODEAPI_EGRESS_LEDGER_REQUIRED=true, the default) \
                     refuses it as grant_unknown"
                ),
            }
            say!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        GrantCommand::Open { secret_file, previous_secret_file, token, out } => {
            let secret = read_secret("--secret-file", &secret_file)?;
            let mut sealer = GrantSealer::new(&secret);
            if let Some(previous) = previous_secret_file {
                sealer = sealer.with_previous(&read_secret("--previous-secret-file", &previous)?);
            }
            let token = read_token(&token)?;
            let verdict = sealer.open(&token, now);
            Ok(report(verdict.map(|c| serde_json::to_value(c).unwrap_or(Value::Null)), out.json))
        }
    }
}

/// Runs `op` against the shared Redis ledger at `url` (key prefix from
/// `GATEHOUSE_LEDGER_KEY_PREFIX`, as the serving nodes read it).
pub(super) fn with_shared_ledger<T, Fut>(url: String, op: impl FnOnce(RedisLedger) -> Fut) -> Result<T, Fail>
where
    Fut: Future<Output = Result<T, Fail>>,
{
    let mut config = RedisLedgerConfig::new(url);
    if let Some(prefix) = environment(None).var(names::LEDGER_KEY_PREFIX) {
        config.prefix = prefix;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    runtime.block_on(async {
        let ledger = RedisLedger::new(&config).map_err(|r| Fail(format!("{r}: not a usable Redis URL")))?;
        op(ledger).await
    })
}

/// Revokes in the shared ledger, then audits the revocation (`grants.revoke`
/// by `cli` or `cli:NAME`) in the store. The revocation stands whatever
/// the store does; one that could not be audited exits 2 saying so, and
/// running the command again (which revokes nothing more) audits it.
pub(super) fn revoke(
    target: RevokeTarget,
    redis_url: Option<String>,
    database_url: Option<String>,
    actor: Option<String>,
    json_out: bool,
) -> Result<ExitCode, Fail> {
    let env = environment(None);
    let actor = match actor {
        None => "cli".to_owned(),
        Some(name) if gatehouse_core::is_valid_id(&name) && !name.contains(':') => format!("cli:{name}"),
        Some(_) => return Err(Fail("--actor is 1-128 characters of [A-Za-z0-9._-]".into())),
    };
    let url = redis_url
        .or_else(|| env.var(names::REDIS_URL))
        .ok_or("no ledger to revoke in: give --redis-url or set GATEHOUSE_REDIS_URL")?;
    let scope = match target {
        RevokeTarget { grant_id: Some(id), .. } => RevokeScope::Grant(id),
        RevokeTarget { exec_id: Some(id), .. } => RevokeScope::Exec(id),
        RevokeTarget { tenant_id: Some(id), .. } => RevokeScope::Tenant(id),
        RevokeTarget { all: true, .. } => RevokeScope::All,
        _ => return Err(Fail("give one of --grant-id, --exec-id, --tenant-id or --all".into())),
    };
    if let RevokeScope::Grant(id) | RevokeScope::Exec(id) | RevokeScope::Tenant(id) = &scope
        && !gatehouse_core::is_valid_id(id)
    {
        return Err(Fail("ids are 1-128 characters of [A-Za-z0-9._:-]".into()));
    }
    let revoked = with_shared_ledger(url, |ledger| {
        let scope = scope.clone();
        async move { ledger.revoke(&scope).await.map_err(|r| Fail(format!("{r}: the ledger did not answer"))) }
    })?;
    let record = gatehouse_plane::tenants::revocation_record(&actor, SystemClock.now(), &scope, revoked);
    super::control::audit_one(&env, database_url, record).map_err(|e| {
        Fail(format!(
            "revoked {revoked} grant(s), but the revocation is not audited ({e}): run the command again"
        ))
    })?;
    if json_out {
        say!("{}", json!({"revoked": revoked}));
    } else {
        say!("revoked {revoked} grant(s)");
    }
    Ok(ExitCode::SUCCESS)
}
