//! Secure startup: every insecure combination refuses, all problems at once.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use gatehouse_capability::ManifestSigningKey;
use gatehouse_config::{MapSource, Problem, Role, embedded_files, load, names};

const TOKEN: &str = "svc-0123456789abcdefghijklmnopqrstuvwxyz";
const GRANT: &str = "grant-0123456789abcdefghijklmnopqrstuvwxyz";
const SESSIONS: &str = "sessions-0123456789abcdefghijklmnopqrstuvwxyz";
/// A credential sealing key (X25519, base64url of 32 bytes).
const SEALING: &str = "c2VhbGluZy1rZXktMDEyMzQ1Njc4OWFiY2RlZmdoaWo";

/// The interception CA's files (their contents are checked at startup, not by the loader).
const CA_KEY: &str = "-----BEGIN PRIVATE KEY-----\nintercept-ca-key-0123456789abcdefghijklmnopqrstuvwxyz\n-----END PRIVATE KEY-----\n";
const CA_CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn sealing_public() -> String {
    gatehouse_capability::SealingKey::from_text(SEALING).unwrap().public_key().to_text()
}

struct Keys {
    private: String,
    public: String,
}

fn keys() -> Keys {
    let k = ManifestSigningKey::generate().unwrap();
    Keys { private: k.to_pkcs8_pem().unwrap().to_string(), public: k.public_key_pem().unwrap() }
}

/// A complete, secure worker configuration on a public address.
fn worker() -> MapSource {
    MapSource::new()
        .with(names::ROLE, "worker")
        .with(names::LISTEN, "0.0.0.0:8700")
        .with(names::PROXY_LISTEN, "0.0.0.0:8701")
        .with(names::MANIFEST_PRIVATE_KEY, keys().private)
        .with(names::GRANT_SECRET, GRANT)
        .with(names::SESSION_KEY_SECRET, SESSIONS)
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::CREDENTIAL_SEALING_PUBLIC_KEY, sealing_public())
        .with(names::INTERCEPT_CA_CERT, CA_CERT)
}

fn problems(src: &MapSource) -> Vec<Problem> {
    match load(src, None) {
        Ok(_) => Vec::new(),
        Err(p) => p,
    }
}

fn has(problems: &[Problem], setting: &str, code: &str) -> bool {
    problems.iter().any(|p| p.setting == setting && p.code == code)
}

#[test]
fn a_secure_worker_loads() {
    let c = load(&worker(), None).unwrap();
    assert_eq!(c.role, Role::Worker);
    assert!(c.manifest_signing_key.is_some());
    assert!(c.manifest_verifying_keys.is_some(), "a worker verifies what it signs");
    assert!(c.require_manifest && c.ledger_required && c.tenant_isolation_strict, "secure defaults");
    assert!(c.service_auth_required());
    assert!(!c.embedded);
}

#[test]
fn the_doors_limits_have_defaults_and_refuse_nonsense() {
    use std::time::Duration;
    let c = load(&worker(), None).unwrap();
    assert_eq!(c.proxy_connect_ports, [443], "CONNECT reaches TLS on the web's port only, by default");
    let l = &c.egress_limits;
    assert_eq!(
        (l.response_max_bytes, l.request_max_bytes, l.tunnel_max_bytes),
        (64 << 20, 64 << 20, 1 << 30)
    );
    assert_eq!((l.connect_timeout, l.response_timeout), (Duration::from_secs(10), Duration::from_secs(30)));
    assert_eq!((l.request_timeout, l.tunnel_timeout), (Duration::from_secs(600), Duration::from_secs(600)));

    let src = worker()
        .with(names::EGRESS_RESPONSE_MAX_BYTES, "1048576")
        .with(names::PROXY_TUNNEL_TIMEOUT_MS, "60000");
    let c = load(&src, None).unwrap();
    assert_eq!(c.egress_limits.response_max_bytes, 1 << 20);
    assert_eq!(c.egress_limits.tunnel_timeout, Duration::from_secs(60));
    // Command-line tools that need no keys read the same limits.
    assert_eq!(gatehouse_config::egress_settings(&src).unwrap().limits, c.egress_limits);

    let src = worker()
        .with(names::EGRESS_REQUEST_MAX_BYTES, "0")
        .with(names::EGRESS_RESPONSE_TIMEOUT_MS, "ten")
        .with(names::EGRESS_REQUEST_TIMEOUT_MS, "-5")
        .with(names::PROXY_TUNNEL_MAX_BYTES, "99999999999999999999");
    let p = problems(&src);
    for setting in [
        names::EGRESS_REQUEST_MAX_BYTES,
        names::EGRESS_RESPONSE_TIMEOUT_MS,
        names::EGRESS_REQUEST_TIMEOUT_MS,
        names::PROXY_TUNNEL_MAX_BYTES,
    ] {
        assert!(has(&p, setting, "invalid_value"), "missing {setting} in {p:?}");
    }
}

#[test]
fn auth_provider_none_needs_the_explicit_allow_loopback_and_no_token() {
    let p = problems(&worker().with(names::AUTH_PROVIDER, "none"));
    assert!(has(&p, names::AUTH_PROVIDER, "insecure_combination"), "{p:?}");
    let mut local = worker()
        .with(names::AUTH_PROVIDER, "none")
        .with(names::ALLOW_AUTH_PROVIDER_NONE, "true")
        .with(names::LISTEN, "127.0.0.1:0")
        .with(names::PROXY_LISTEN, "127.0.0.1:0");
    // With a service token configured, which of the two is meant?
    let p = problems(&local);
    assert!(has(&p, names::AUTH_PROVIDER, "insecure_combination"), "{p:?}");
    local.set(names::SERVICE_TOKEN, "");
    let c = load(&local, None).unwrap();
    assert!(!c.service_auth_required());
    // Off loopback, even with the allow flag and no token.
    local.set(names::LISTEN, "0.0.0.0:8700");
    let p = problems(&local);
    assert!(has(&p, names::AUTH_PROVIDER, "insecure_combination"), "{p:?}");
}

#[test]
fn secrets_that_equal_one_another_are_refused() {
    let p = problems(&worker().with(names::SERVICE_TOKEN, GRANT));
    assert!(has(&p, names::GRANT_SECRET, "secret_reused"), "{p:?}");
    let p = problems(&worker().with(names::GRANT_PREVIOUS_SECRET, GRANT));
    assert!(has(&p, names::GRANT_PREVIOUS_SECRET, "secret_reused"), "{p:?}");
    let p = problems(&worker().with(names::MANIFEST_HMAC_SECRET, format!("{TOKEN}\n")));
    assert!(has(&p, names::MANIFEST_HMAC_SECRET, "secret_reused"), "{p:?}");
    // Session keys derive from a key of their own, never the grant secret:
    // rotating grants must not move users' files.
    let p = problems(&worker().with(names::SESSION_KEY_SECRET, GRANT));
    assert!(has(&p, names::SESSION_KEY_SECRET, "secret_reused"), "{p:?}");
    let p = problems(&worker().with(names::METRICS_TOKEN, TOKEN));
    assert!(has(&p, names::METRICS_TOKEN, "secret_reused"), "{p:?}");
    let text: String = p.iter().map(|p| format!("{p}\n")).collect();
    assert!(!text.contains(TOKEN), "{text}");
    assert!(load(&worker().with(names::GRANT_PREVIOUS_SECRET, format!("{GRANT}-old")), None).is_ok());
}

#[test]
fn minting_roles_need_their_own_session_key_secret_and_the_metrics_token_is_strong() {
    let p = problems(&worker().without(names::SESSION_KEY_SECRET));
    assert!(has(&p, names::SESSION_KEY_SECRET, "missing_required"), "{p:?}");
    let gateway = MapSource::new()
        .with(names::ROLE, "gateway")
        .with(names::CREDENTIAL_SEALING_KEY, SEALING)
        .with(names::INTERCEPT_CA_KEY, CA_KEY)
        .with(names::INTERCEPT_CA_CERT, CA_CERT)
        .with(names::LISTEN, "0.0.0.0:8700")
        .with(names::PROXY_LISTEN, "0.0.0.0:8701")
        .with(names::GRANT_SECRET, GRANT)
        .with(names::SERVICE_TOKEN, TOKEN);
    assert!(load(&gateway, None).unwrap().session_key_secret.is_none(), "a gateway derives no namespace");
    let p = problems(&worker().with(names::METRICS_TOKEN, "short"));
    assert!(has(&p, names::METRICS_TOKEN, "weak_secret"), "{p:?}");
    let c = load(&worker().with(names::METRICS_TOKEN, "metrics-0123456789abcdefghijklmnopqrstuvwxyz"), None);
    assert!(c.unwrap().metrics_token.is_some());
}

#[test]
fn debug_output_never_holds_a_secret() {
    let k = keys();
    let src = worker()
        .with(names::MANIFEST_PRIVATE_KEY, &k.private)
        .with(names::GRANT_PREVIOUS_SECRET, format!("{GRANT}-previous"))
        .with(names::DATABASE_URL, "postgres://gh:db-password-123@db.internal/gatehouse")
        .with(names::REDIS_URL, "redis://:redis-password-456@redis.internal:6379/0");
    let config = load(&src, None).unwrap();
    let key_body: String = k.private.lines().filter(|l| !l.starts_with("-----")).collect();
    for text in [format!("{src:?}"), format!("{config:?}"), format!("{config:#?}")] {
        for secret in [&key_body[..], GRANT, TOKEN, "db-password-123", "redis-password-456"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
}

#[test]
fn a_short_grant_secret_is_weak() {
    let p = problems(&worker().with(names::GRANT_SECRET, "0123456789abcdefghijklmnopqrstu"));
    assert!(has(&p, names::GRANT_SECRET, "weak_secret"), "{p:?}");
}

#[test]
fn missing_manifest_keys_refuse_when_sandbox_execution_is_on() {
    let mut src = worker();
    src.set(names::MANIFEST_PRIVATE_KEY, "");
    let p = problems(&src);
    assert!(has(&p, names::MANIFEST_PRIVATE_KEY, "missing_required"), "{p:?}");
    src.set(names::SANDBOX_EXECUTION, "false");
    assert!(load(&src, None).is_ok());

    let runner = MapSource::new().with(names::ROLE, "runner").with(names::SERVICE_TOKEN, TOKEN);
    assert!(has(&problems(&runner), names::MANIFEST_PUBLIC_KEY, "missing_required"));
}

#[test]
fn a_runner_refuses_the_private_key_and_the_hmac_secret() {
    let k = keys();
    let runner = MapSource::new()
        .with(names::ROLE, "runner")
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::MANIFEST_PUBLIC_KEY, &k.public);
    let c = load(&runner, None).unwrap();
    assert!(c.manifest_signing_key.is_none() && c.grant_secret.is_none());

    let p = problems(&runner.clone().with(names::MANIFEST_PRIVATE_KEY, &k.private));
    assert!(has(&p, names::MANIFEST_PRIVATE_KEY, "forbidden_for_role"), "{p:?}");
    let p = problems(&runner.clone().with(names::MANIFEST_HMAC_SECRET, GRANT));
    assert!(has(&p, names::MANIFEST_HMAC_SECRET, "forbidden_for_role"), "{p:?}");
    for secret in [names::GRANT_SECRET, names::GRANT_PREVIOUS_SECRET] {
        let p = problems(&runner.clone().with(secret, GRANT));
        assert!(has(&p, secret, "forbidden_for_role"), "{p:?}");
    }
    // Even a malformed private key is refused for the role, not just as malformed.
    let p = problems(&runner.clone().with(names::MANIFEST_PRIVATE_KEY, "garbage"));
    assert!(has(&p, names::MANIFEST_PRIVATE_KEY, "forbidden_for_role"), "{p:?}");
    // The private key smuggled in where the public key belongs.
    let p = problems(&runner.with(names::MANIFEST_PUBLIC_KEY, &k.private));
    assert!(has(&p, names::MANIFEST_PUBLIC_KEY, "key_wrong_type"), "{p:?}");
}

#[test]
fn a_gateway_refuses_minting_keys() {
    let gateway = MapSource::new()
        .with(names::ROLE, "gateway")
        .with(names::CREDENTIAL_SEALING_KEY, SEALING)
        .with(names::INTERCEPT_CA_KEY, CA_KEY)
        .with(names::INTERCEPT_CA_CERT, CA_CERT)
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::GRANT_SECRET, GRANT);
    assert!(load(&gateway, None).is_ok());
    let p = problems(&gateway.clone().with(names::MANIFEST_PRIVATE_KEY, keys().private));
    assert!(has(&p, names::MANIFEST_PRIVATE_KEY, "forbidden_for_role"), "{p:?}");
    let p = problems(&gateway.with(names::MANIFEST_HMAC_SECRET, GRANT));
    assert!(has(&p, names::MANIFEST_HMAC_SECRET, "forbidden_for_role"), "{p:?}");
}

#[test]
fn local_mode_is_refused_off_loopback() {
    let p = problems(&worker().with(names::LOCAL_MODE, "true"));
    assert!(has(&p, names::LOCAL_MODE, "insecure_combination"), "{p:?}");
    let local = worker()
        .with(names::LOCAL_MODE, "true")
        .with(names::LISTEN, "127.0.0.1:0")
        .with(names::PROXY_LISTEN, "127.0.0.1:0");
    let c = load(&local, None).unwrap();
    assert!(!c.service_auth_required());
}

#[test]
fn the_service_token_is_required_unless_a_loopback_dev_flag_says_otherwise() {
    let mut src = worker();
    src.set(names::SERVICE_TOKEN, "");
    assert!(has(&problems(&src), names::SERVICE_TOKEN, "missing_required"));
    src.set(names::SERVICE_TOKEN, "too-short");
    assert!(has(&problems(&src), names::SERVICE_TOKEN, "weak_secret"));
    src.set(names::SERVICE_TOKEN, "");
    src.set(names::DEV_ALLOW_NO_SERVICE_TOKEN, "true");
    assert!(
        has(&problems(&src), names::DEV_ALLOW_NO_SERVICE_TOKEN, "insecure_combination"),
        "public address"
    );
    src.set(names::LISTEN, "127.0.0.1:8700");
    src.set(names::PROXY_LISTEN, "[::1]:8701");
    let c = load(&src, None).unwrap();
    assert!(!c.service_auth_required());
    assert!(!c.warnings.is_empty());
}

#[test]
fn every_problem_is_reported_at_once() {
    let src = MapSource::new()
        .with(names::ROLE, "worker")
        .with(names::LISTEN, "0.0.0.0:1")
        .with(names::AUTH_PROVIDER, "none")
        .with(names::LOCAL_MODE, "true")
        .with(names::GRANT_SECRET, "short")
        .with(names::REQUIRE_MANIFEST, "maybe");
    let p = problems(&src);
    for (setting, code) in [
        (names::AUTH_PROVIDER, "insecure_combination"),
        (names::LOCAL_MODE, "insecure_combination"),
        (names::GRANT_SECRET, "weak_secret"),
        (names::MANIFEST_PRIVATE_KEY, "missing_required"),
        (names::REQUIRE_MANIFEST, "invalid_value"),
    ] {
        assert!(has(&p, setting, code), "missing {setting}/{code} in {p:?}");
    }
}

#[test]
fn problems_never_contain_secret_values() {
    let k = keys();
    let src = MapSource::new()
        .with(names::ROLE, "runner")
        .with(names::MANIFEST_PRIVATE_KEY, &k.private)
        .with(names::MANIFEST_PUBLIC_KEY, &k.private)
        .with(names::GRANT_SECRET, "weak-but-secret-value")
        .with(names::SERVICE_TOKEN, "tiny-secret-token")
        .with(names::MANIFEST_HMAC_SECRET, GRANT);
    let text: String = problems(&src).iter().map(|p| format!("{p}\n")).collect();
    gatehouse_test_support::assert_no_pem_key(&k.private, &text, "a configuration problem");
    for secret in ["weak-but-secret-value", "tiny-secret-token", GRANT] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[test]
fn secrets_can_come_from_files_but_not_from_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grant");
    std::fs::write(&path, format!("{GRANT}\n")).unwrap();
    let mut src = worker();
    src.set(names::GRANT_SECRET, "");
    src.set("CODEAPI_EGRESS_GRANT_SECRET_FILE", path.to_str().unwrap());
    // Readable by others, as ssh would refuse a private key: refused.
    use std::os::unix::fs::PermissionsExt as _;
    for mode in [0o644, 0o640, 0o604, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let p = problems(&src);
        assert!(has(&p, "CODEAPI_EGRESS_GRANT_SECRET_FILE", "file_permissions"), "{mode:o}: {p:?}");
        assert!(!p.iter().any(|p| p.to_string().contains(GRANT)), "{p:?}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(load(&src, None).unwrap().grant_secret.is_some());
    // A public key file is not a secret: any mode.
    let public = dir.path().join("public.pem");
    std::fs::write(&public, keys().public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let runner = MapSource::new()
        .with(names::ROLE, "runner")
        .with("SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY_FILE", public.to_str().unwrap())
        .with(names::SERVICE_TOKEN, TOKEN);
    assert!(load(&runner, None).is_ok(), "{:?}", problems(&runner));
    src.set(names::GRANT_SECRET, GRANT);
    assert!(has(&problems(&src), names::GRANT_SECRET, "ambiguous_source"));
    src.set(names::GRANT_SECRET, "");
    src.set("CODEAPI_EGRESS_GRANT_SECRET_FILE", dir.path().join("nope").to_str().unwrap());
    assert!(has(&problems(&src), "CODEAPI_EGRESS_GRANT_SECRET_FILE", "unreadable_file"));
}

#[test]
fn a_toml_file_sets_the_same_keys_and_the_environment_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!("GATEHOUSE_ROLE = \"gateway\"\nCODEAPI_EGRESS_GRANT_SECRET = \"{GRANT}\"\nCODEAPI_INTERNAL_SERVICE_TOKEN = \"{TOKEN}\"\nGATEHOUSE_CREDENTIAL_SEALING_KEY = \"{SEALING}\"\nGATEHOUSE_INTERCEPT_CA_KEY = {CA_KEY:?}\nGATEHOUSE_INTERCEPT_CA_CERT = {CA_CERT:?}\nGATEHOUSE_MANIFEST_CLOCK_SKEW_SECS = 5\nSANDBOX_REQUIRE_EGRESS_MANIFEST = true\n"),
    )
    .unwrap();
    let c = load(&MapSource::new(), Some(&path)).unwrap();
    assert_eq!(c.role, Role::Gateway);
    assert_eq!(c.manifest_clock_skew_secs, 5);
    let c = load(&MapSource::new().with(names::MANIFEST_CLOCK_SKEW_SECS, "7"), Some(&path)).unwrap();
    assert_eq!(c.manifest_clock_skew_secs, 7);

    std::fs::write(&path, "GATEHOUSE_LISTN = \"0.0.0.0:1\"\n").unwrap();
    assert!(has(&load(&MapSource::new(), Some(&path)).unwrap_err(), "GATEHOUSE_LISTN", "unknown_setting"));
    std::fs::write(&path, "not toml [").unwrap();
    assert!(has(&load(&MapSource::new(), Some(&path)).unwrap_err(), "--config", "invalid_file"));
}

#[test]
fn misspelled_gatehouse_variables_are_refused() {
    let p = problems(&worker().with("GATEHOUSE_REDIS_URI", "redis://x"));
    assert!(has(&p, "GATEHOUSE_REDIS_URI", "unknown_setting"), "{p:?}");
    // Every documented name is known, including the non-config ones.
    assert!(load(&worker().with("GATEHOUSE_LOG", "debug").with("GATEHOUSE_CONFIG", ""), None).is_ok());
}

#[test]
fn metadata_addresses_can_never_be_opened() {
    let p = problems(&worker().with(names::EGRESS_ALLOW_RANGES, "10.0.0.0/8, 169.254.0.0/16"));
    assert!(has(&p, names::EGRESS_ALLOW_RANGES, "insecure_combination"), "{p:?}");
    let p = problems(&worker().with(names::EGRESS_ALLOW_RANGES, "fd00:ec2::/32"));
    assert!(has(&p, names::EGRESS_ALLOW_RANGES, "insecure_combination"), "{p:?}");
    let c = load(&worker().with(names::EGRESS_ALLOW_RANGES, "10.1.0.0/16,192.168.5.7"), None).unwrap();
    assert_eq!(c.egress_allow_ranges.len(), 2);
    assert!(c.warnings.iter().any(|w| w.contains("10.1.0.0/16")));
}

#[test]
fn store_urls_are_checked_and_never_printed() {
    let p = problems(&worker().with(names::DATABASE_URL, "mysql://root:pw@db/x"));
    assert!(has(&p, names::DATABASE_URL, "invalid_value"));
    let c = load(&worker().with(names::DATABASE_URL, "postgres://u:hunter2@db/x"), None).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn embedded_mode_reads_keys_from_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let k = keys();
    std::fs::write(dir.path().join(embedded_files::MANIFEST_PRIVATE_KEY), &k.private).unwrap();
    std::fs::write(dir.path().join(embedded_files::GRANT_SECRET), GRANT).unwrap();
    std::fs::write(dir.path().join(embedded_files::SERVICE_TOKEN), TOKEN).unwrap();
    std::fs::write(dir.path().join(embedded_files::SESSION_KEY_SECRET), SESSIONS).unwrap();
    std::fs::write(dir.path().join(embedded_files::CREDENTIAL_SEALING_KEY), SEALING).unwrap();
    std::fs::write(dir.path().join(embedded_files::INTERCEPT_CA_KEY), CA_KEY).unwrap();
    std::fs::write(dir.path().join(embedded_files::INTERCEPT_CA_CERT), CA_CERT).unwrap();
    let src = MapSource::new().with(names::DATA_DIR, dir.path().to_str().unwrap());
    // Keys in the data dir are held to the same rule as ssh's: owner only.
    let p = problems(&src);
    assert!(has(&p, names::GRANT_SECRET, "file_permissions"), "{p:?}");
    use std::os::unix::fs::PermissionsExt as _;
    for f in [
        embedded_files::MANIFEST_PRIVATE_KEY,
        embedded_files::GRANT_SECRET,
        embedded_files::SERVICE_TOKEN,
        embedded_files::SESSION_KEY_SECRET,
        embedded_files::CREDENTIAL_SEALING_KEY,
        embedded_files::INTERCEPT_CA_KEY,
    ] {
        std::fs::set_permissions(dir.path().join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert_eq!(gatehouse_config::embedded_data_dir(&src, None).as_deref(), Some(dir.path()));
    let c = load(&src, None).unwrap();
    assert!(
        c.embedded
            && c.manifest_signing_key.is_some()
            && c.grant_secret.is_some()
            && c.session_key_secret.is_some()
            && c.service_auth_required()
    );

    // Off loopback, the data dir is not a key source: configuration must be explicit.
    let public = src.clone().with(names::LISTEN, "0.0.0.0:8700");
    assert_eq!(gatehouse_config::embedded_data_dir(&public, None), None);
    assert!(has(&problems(&public), names::GRANT_SECRET, "missing_required"));
}

#[test]
fn a_caller_file_replaces_the_shared_token_and_every_bad_entry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let digest =
        gatehouse_capability::CallerToken::digest_hex("runner-token-0123456789abcdefghijklmnopqrstuvwxyz");
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "[[caller]]\nname = \"runner\"\nscopes = [\"manifests:verify\"]\ntoken_sha256 = \"{digest}\"\n"
        ),
    )
    .unwrap();
    let src = MapSource::new()
        .with(names::ROLE, "worker")
        .with(names::LISTEN, "0.0.0.0:8700")
        .with(names::PROXY_LISTEN, "0.0.0.0:8701")
        .with(names::MANIFEST_PRIVATE_KEY, keys().private)
        .with(names::GRANT_SECRET, GRANT)
        .with(names::SESSION_KEY_SECRET, SESSIONS)
        .with(names::CREDENTIAL_SEALING_PUBLIC_KEY, sealing_public())
        .with(names::INTERCEPT_CA_CERT, CA_CERT)
        .with(names::CALLERS_FILE, good.to_str().unwrap());
    let c = load(&src, None).unwrap();
    assert!(c.service_token.is_none() && !c.callers.is_empty() && c.service_auth_required());
    let runner = c.callers.identify("runner-token-0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
    assert_eq!(runner.tenants(), None, "a caller without tenants acts on every tenant");

    // `tenants` binds a caller; an empty, repeated or malformed list is refused.
    let bound = dir.path().join("bound.toml");
    std::fs::write(
        &bound,
        format!(
            "[[caller]]\nname = \"platform-b\"\nscopes = [\"runs\"]\ntenants = [\"t1\", \"t2\"]\ntoken_sha256 = \"{digest}\"\n"
        ),
    )
    .unwrap();
    let c = load(&worker().with(names::CALLERS_FILE, bound.to_str().unwrap()), None).unwrap();
    let b = c.callers.identify("runner-token-0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
    assert_eq!(b.tenants(), Some(&["t1".to_owned(), "t2".to_owned()][..]));
    for tenants in ["[]", "[\"t1\", \"t1\"]", "[\"a b\"]", "\"t1\"", "[1]"] {
        let file = dir.path().join("tenants.toml");
        std::fs::write(
            &file,
            format!(
                "[[caller]]\nname = \"b\"\nscopes = [\"runs\"]\ntenants = {tenants}\ntoken_sha256 = \"{digest}\"\n"
            ),
        )
        .unwrap();
        let p = problems(&worker().with(names::CALLERS_FILE, file.to_str().unwrap()));
        assert!(has(&p, names::CALLERS_FILE, "invalid_value"), "tenants = {tenants}: {p:?}");
    }

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[caller]]\nname = \"a\"\nscopes = [\"everything\"]\ntoken_sha256 = \"{digest}\"\n\
             [[caller]]\nname = \"b\"\nscopes = [\"ledger\"]\ntoken_sha256 = \"{}\"\n\
             [[caller]]\nname = \"service\"\nscopes = []\ntoken_sha256 = \"{digest}\"\n\
             [[caller]]\nname = \"c\"\nscopes = []\ntoken_sha256 = \"{digest}\"\ntoken = \"plain\"\n",
            digest.to_uppercase()
        ),
    )
    .unwrap();
    let p = problems(&worker().with(names::CALLERS_FILE, bad.to_str().unwrap()));
    let named: Vec<&str> =
        p.iter().filter(|p| p.setting == names::CALLERS_FILE).map(|p| p.message.as_str()).collect();
    assert_eq!(named.len(), 4, "{named:?}");
    for (i, message) in named.iter().enumerate() {
        assert!(message.starts_with(&format!("caller {}:", i + 1)), "{message}");
        assert!(!message.contains(&digest), "{message}");
    }
    let missing = problems(&worker().with(names::CALLERS_FILE, "/nonexistent/callers.toml"));
    assert!(has(&missing, names::CALLERS_FILE, "unreadable_file"));
}

#[test]
fn caller_names_that_pass_for_gatehouse_or_a_person_and_shared_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |n: usize| {
        gatehouse_capability::CallerToken::digest_hex(&format!(
            "caller-token-{n:02}-0123456789abcdefghijklmnopqrstuvwxyz"
        ))
    };
    let file = |entries: &[(&str, String)]| {
        let path = dir.path().join(format!("callers-{}.toml", entries.len()));
        let text: String = entries
            .iter()
            .map(|(name, digest)| {
                format!("[[caller]]\nname = \"{name}\"\nscopes = [\"runs\"]\ntoken_sha256 = \"{digest}\"\n")
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    // Names gatehouse writes as actors itself, or writes before a `:`.
    let reserved = [
        "person",
        "gatehouse",
        "service",
        "system",
        "cli",
        "Person",
        "GATEHOUSE",
        "person:ada",
        "cli:rewrap",
    ];
    let entries: Vec<(&str, String)> = reserved.iter().enumerate().map(|(i, n)| (*n, digest(i))).collect();
    let p = problems(&worker().with(names::CALLERS_FILE, file(&entries).to_str().unwrap()));
    let named: Vec<&str> =
        p.iter().filter(|p| p.setting == names::CALLERS_FILE).map(|p| p.message.as_str()).collect();
    assert_eq!(named.len(), reserved.len(), "{named:?}");
    // Names that only contain one are fine.
    let fine: Vec<(&str, String)> =
        ["personnel", "gatehouse-ci", "platform"].iter().enumerate().map(|(i, n)| (*n, digest(i))).collect();
    load(&worker().with(names::CALLERS_FILE, file(&fine).to_str().unwrap()), None).unwrap();

    // Two callers with one token, listed with every other problem.
    let shared = vec![("a", digest(1)), ("b", digest(2)), ("c", digest(1)), ("d", digest(2))];
    let p = problems(
        &worker()
            .with(names::CALLERS_FILE, file(&shared).to_str().unwrap())
            .with(names::GRANT_SECRET, "short"),
    );
    let reused: Vec<&str> = p
        .iter()
        .filter(|p| p.setting == names::CALLERS_FILE && p.code == "secret_reused")
        .map(|p| p.message.as_str())
        .collect();
    assert_eq!(reused.len(), 2, "{p:?}");
    assert!(reused[0].starts_with("caller 3:") && reused[0].contains("caller 1"), "{reused:?}");
    assert!(reused[1].starts_with("caller 4:") && reused[1].contains("caller 2"), "{reused:?}");
    assert!(has(&p, names::GRANT_SECRET, "weak_secret"), "every problem at once: {p:?}");
    assert!(!p.iter().any(|p| p.message.contains(&digest(1))), "no digest in a message");

    // A caller whose token is the service token's.
    let token_digest = gatehouse_capability::CallerToken::digest_hex(TOKEN);
    let p = problems(
        &worker()
            .with(names::SERVICE_TOKEN, TOKEN)
            .with(names::CALLERS_FILE, file(&[("platform", token_digest)]).to_str().unwrap()),
    );
    assert!(has(&p, names::CALLERS_FILE, "secret_reused"), "{p:?}");
}

#[test]
fn only_the_gateway_holds_the_credential_sealing_key() {
    let gateway = MapSource::new()
        .with(names::ROLE, "gateway")
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::GRANT_SECRET, GRANT)
        .with(names::INTERCEPT_CA_KEY, CA_KEY)
        .with(names::INTERCEPT_CA_CERT, CA_CERT);
    let p = problems(&gateway);
    assert!(
        has(&p, names::CREDENTIAL_SEALING_KEY, "missing_required"),
        "a gateway refuses to start without it: {p:?}"
    );
    let c = load(&gateway.clone().with(names::CREDENTIAL_SEALING_KEY, SEALING), None).unwrap();
    assert!(c.credential_keys.is_some() && c.credential_public_key.is_none());
    assert!(!format!("{c:?}").contains(SEALING), "debug output never holds the key");
    let p = problems(&gateway.clone().with(names::CREDENTIAL_SEALING_KEY, "not-a-key"));
    assert!(has(&p, names::CREDENTIAL_SEALING_KEY, "key_malformed"), "{p:?}");
    let p = problems(
        &gateway
            .with(names::CREDENTIAL_SEALING_KEY, SEALING)
            .with(names::CREDENTIAL_SEALING_PREVIOUS_KEY, SEALING),
    );
    assert!(has(&p, names::CREDENTIAL_SEALING_PREVIOUS_KEY, "invalid_value"), "previous must differ: {p:?}");

    // The worker seals to the public key and must not be able to read back.
    let c = load(&worker(), None).unwrap();
    assert_eq!(c.credential_public_key.map(|k| k.to_text()), Some(sealing_public()));
    assert!(c.credential_keys.is_none());
    let p = problems(&worker().with(names::CREDENTIAL_SEALING_KEY, SEALING));
    assert!(has(&p, names::CREDENTIAL_SEALING_KEY, "forbidden_for_role"), "{p:?}");
    let p = problems(&worker().without(names::CREDENTIAL_SEALING_PUBLIC_KEY));
    assert!(has(&p, names::CREDENTIAL_SEALING_PUBLIC_KEY, "missing_required"), "{p:?}");
    let runner = MapSource::new()
        .with(names::ROLE, "runner")
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::MANIFEST_PUBLIC_KEY, keys().public)
        .with(names::CREDENTIAL_SEALING_KEY, SEALING);
    assert!(has(&problems(&runner), names::CREDENTIAL_SEALING_KEY, "forbidden_for_role"));

    // `all` derives the public half; a given one must match it.
    let other = gatehouse_capability::SealingKey::generate().unwrap().public_key().to_text();
    let all = worker()
        .with(names::ROLE, "all")
        .with(names::CREDENTIAL_SEALING_KEY, SEALING)
        .with(names::INTERCEPT_CA_KEY, CA_KEY);
    assert!(load(&all, None).unwrap().credential_keys.is_some());
    let p = problems(&all.with(names::CREDENTIAL_SEALING_PUBLIC_KEY, other));
    assert!(has(&p, names::CREDENTIAL_SEALING_PUBLIC_KEY, "key_mismatch"), "{p:?}");
}

#[test]
fn only_the_gateway_holds_the_interception_ca_key() {
    let gateway = MapSource::new()
        .with(names::ROLE, "gateway")
        .with(names::SERVICE_TOKEN, TOKEN)
        .with(names::GRANT_SECRET, GRANT)
        .with(names::CREDENTIAL_SEALING_KEY, SEALING);
    let p = problems(&gateway);
    assert!(has(&p, names::INTERCEPT_CA_KEY, "missing_required"), "{p:?}");
    assert!(has(&p, names::INTERCEPT_CA_CERT, "missing_required"), "{p:?}");
    let c =
        load(&gateway.with(names::INTERCEPT_CA_KEY, CA_KEY).with(names::INTERCEPT_CA_CERT, CA_CERT), None)
            .unwrap();
    assert!(!format!("{c:?}").contains("intercept-ca-key-0123"), "debug output never holds the key");
    assert_eq!(c.intercept_ca_cert_pem.as_deref(), Some(CA_CERT));
    let p = problems(&worker().with(names::INTERCEPT_CA_KEY, CA_KEY));
    assert!(has(&p, names::INTERCEPT_CA_KEY, "forbidden_for_role"), "{p:?}");
    let p = problems(&worker().without(names::INTERCEPT_CA_CERT));
    assert!(has(&p, names::INTERCEPT_CA_CERT, "missing_required"), "the worker hands it to sandboxes: {p:?}");
    assert!(load(&worker(), None).unwrap().intercept_ca_key_pem.is_none());
}

#[test]
fn the_settings_page_password_is_an_argon2id_hash_of_real_cost() {
    let hash = gatehouse_capability::AdminPasswordHash::hash("a person's password").unwrap();
    let c = load(&worker().with(names::ADMIN_PASSWORD_HASH, hash.as_str()), None).unwrap();
    assert!(c.admin_password_hash.is_some_and(|h| h.verify("a person's password")));
    assert!(load(&worker(), None).unwrap().admin_password_hash.is_none(), "none set: no sign-in");
    let weak = "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA";
    let p = problems(&worker().with(names::ADMIN_PASSWORD_HASH, weak));
    assert!(has(&p, names::ADMIN_PASSWORD_HASH, "admin_password_hash_weak"), "{p:?}");
    let p = problems(&worker().with(names::ADMIN_PASSWORD_HASH, "hunter2"));
    assert!(has(&p, names::ADMIN_PASSWORD_HASH, "admin_password_hash_invalid"), "{p:?}");
    assert!(!format!("{p:?}").contains("hunter2"), "a problem never quotes the value");
}

#[test]
fn trusted_proxies_are_addresses_or_ranges_and_a_bad_one_is_listed_with_the_others() {
    assert!(load(&worker(), None).unwrap().trusted_proxies.is_empty(), "none by default");
    let c =
        load(&worker().with(names::TRUSTED_PROXIES, " 10.0.0.0/8, 192.0.2.7 ,2001:db8::/48,"), None).unwrap();
    let shown: Vec<String> = c.trusted_proxies.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/48"]);
    let p = problems(
        &worker()
            .with(names::TRUSTED_PROXIES, "10.0.0.0/8, 10.0.0.0/33, proxy.internal")
            .with(names::MAX_CONNECTIONS, "zero"),
    );
    let ours: Vec<&Problem> = p.iter().filter(|x| x.setting == names::TRUSTED_PROXIES).collect();
    assert_eq!(ours.len(), 2, "each bad entry named: {p:?}");
    assert!(ours.iter().all(|x| x.code == "invalid_value"), "{p:?}");
    assert!(ours[0].message.contains("10.0.0.0/33") && ours[1].message.contains("proxy.internal"), "{p:?}");
    assert!(has(&p, names::MAX_CONNECTIONS, "invalid_value"), "listed with the other problems: {p:?}");
    for everyone in ["0.0.0.0/0", "::/0"] {
        let p = problems(&worker().with(names::TRUSTED_PROXIES, everyone));
        assert!(has(&p, names::TRUSTED_PROXIES, "insecure_combination"), "{everyone}: {p:?}");
    }
}

#[test]
fn insecure_flags_off_loopback_need_their_own_acknowledgement() {
    let insecure = [names::REQUIRE_MANIFEST, names::LEDGER_REQUIRED, names::TENANT_ISOLATION_STRICT];
    // Each one alone off loopback is refused, naming the acknowledgement.
    for name in insecure {
        let p = problems(&worker().with(name, "false"));
        assert!(has(&p, name, "insecure_combination"), "{name}: {p:?}");
        assert!(p.iter().any(|p| p.message.contains(names::ACCEPT_INSECURE)), "{p:?}");
        // Its own acknowledgement lets it start, still warning.
        let c = load(&worker().with(name, "false").with(names::ACCEPT_INSECURE, name), None).unwrap();
        assert!(c.warnings.iter().any(|w| w.contains(name)), "{:?}", c.warnings);
    }
    // All three, one acknowledged, and another problem: every one listed.
    let mut src = worker().with(names::ACCEPT_INSECURE, format!(" {} ", names::LEDGER_REQUIRED));
    for name in insecure {
        src = src.with(name, "false");
    }
    let p = problems(&src.with(names::GRANT_SECRET, "short"));
    assert!(has(&p, names::REQUIRE_MANIFEST, "insecure_combination"), "{p:?}");
    assert!(has(&p, names::TENANT_ISOLATION_STRICT, "insecure_combination"), "{p:?}");
    assert!(!has(&p, names::LEDGER_REQUIRED, "insecure_combination"), "{p:?}");
    assert!(has(&p, names::GRANT_SECRET, "weak_secret"), "{p:?}");
    // All three acknowledged.
    let mut src = worker().with(names::ACCEPT_INSECURE, insecure.join(","));
    for name in insecure {
        src = src.with(name, "false");
    }
    load(&src, None).unwrap();
    // A name that needs no acknowledgement is a mistake, said so.
    let p = problems(&worker().with(names::ACCEPT_INSECURE, "LOCAL_MODE"));
    assert!(has(&p, names::ACCEPT_INSECURE, "invalid_value"), "{p:?}");
    // On loopback they only warn, as before.
    let mut local =
        worker().with(names::LISTEN, "127.0.0.1:8700").with(names::PROXY_LISTEN, "127.0.0.1:8701");
    for name in insecure {
        local = local.with(name, "false");
    }
    let c = load(&local, None).unwrap();
    assert_eq!(c.warnings.iter().filter(|w| w.contains("=false")).count(), 3, "{:?}", c.warnings);
}
