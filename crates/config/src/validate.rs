//! The whole configuration read and validated for the node's role: what
//! each role must hold and must never hold, insecure combinations, secrets
//! shared between settings.

use std::path::PathBuf;

use gatehouse_capability::{
    AdminPasswordHash, ManifestSigningKey, ManifestVerifyingKeys, Secret, ServiceToken,
};

use crate::config::{AuthProvider, Config, ConnectionLimits, EgressSettings, LogFormat, ScannerSettings};
use crate::defaults::{
    DEFAULT_DATA_DIR, DEFAULT_GRANT_MAX_LIFETIME_SECS, DEFAULT_LISTEN, DEFAULT_OSV_URL, DEFAULT_PROXY_LISTEN,
};
use crate::reader::Reader;
use crate::role::Role;
use crate::secretish::Secretish;
use crate::{embedded_files, names};

impl Reader<'_> {
    pub(crate) fn build(mut self) -> Option<Config> {
        let role = match self.get(names::ROLE) {
            None => Role::All,
            Some(v) => Role::parse(v).unwrap_or_else(|| {
                self.problem(names::ROLE, "invalid_value", "must be all, worker, runner or gateway");
                Role::All
            }),
        };
        let listen = self.addr(names::LISTEN, DEFAULT_LISTEN);
        let proxy_listen = self.addr(names::PROXY_LISTEN, DEFAULT_PROXY_LISTEN);
        let loopback_only = listen.ip().is_loopback() && proxy_listen.ip().is_loopback();
        let data_dir = PathBuf::from(self.get(names::DATA_DIR).unwrap_or(DEFAULT_DATA_DIR));
        let embedded = role == Role::All && loopback_only;
        let in_data_dir = |f: &str| embedded.then(|| data_dir.join(f));

        let local_mode = self.bool(names::LOCAL_MODE, false);
        let require_manifest = self.bool(names::REQUIRE_MANIFEST, true);
        let ledger_required = self.bool(names::LEDGER_REQUIRED, true);
        let tenant_isolation_strict = self.bool(names::TENANT_ISOLATION_STRICT, true);
        let allow_none = self.bool(names::ALLOW_AUTH_PROVIDER_NONE, false);
        let sandbox_execution = self.bool(names::SANDBOX_EXECUTION, true);
        let dev_no_token = self.bool(names::DEV_ALLOW_NO_SERVICE_TOKEN, false);
        let auth_provider = match self.get(names::AUTH_PROVIDER).map(|v| v.trim().to_ascii_lowercase()) {
            None => AuthProvider::ServiceToken,
            Some(v) if v == "service_token" => AuthProvider::ServiceToken,
            Some(v) if v == "none" => AuthProvider::None,
            Some(_) => {
                self.problem(names::AUTH_PROVIDER, "invalid_value", "must be service_token or none");
                AuthProvider::ServiceToken
            }
        };
        let log_format = match self.get(names::LOG_FORMAT).map(|v| v.trim().to_ascii_lowercase()) {
            None => LogFormat::Text,
            Some(v) if v == "text" => LogFormat::Text,
            Some(v) if v == "json" => LogFormat::Json,
            Some(_) => {
                self.problem(names::LOG_FORMAT, "invalid_value", "must be text or json");
                LogFormat::Text
            }
        };
        let manifest_clock_skew_secs = self.int(names::MANIFEST_CLOCK_SKEW_SECS, 30, 0..=600);
        let manifest_max_lifetime_secs = self.int(names::MANIFEST_MAX_LIFETIME_SECS, 86_400, 1..=7 * 86_400);
        let manifest_ttl_secs = self.int(names::MANIFEST_TTL_SECS, 300, 1..=86_400);
        let grant_ttl_secs = self.int(names::GRANT_TTL_SECS, 900, 1..=7 * 86_400);
        if manifest_ttl_secs > manifest_max_lifetime_secs {
            self.problem(
                names::MANIFEST_TTL_SECS,
                "invalid_value",
                format!("must not exceed {}", names::MANIFEST_MAX_LIFETIME_SECS),
            );
        }

        // Secrets and keys.
        let private_text = self.secret_text(
            names::MANIFEST_PRIVATE_KEY,
            in_data_dir(embedded_files::MANIFEST_PRIVATE_KEY).as_deref(),
        );
        let manifest_signing_key = private_text.and_then(|t| {
            ManifestSigningKey::from_ed25519_text(&t)
                .map_err(|e| self.key_problem(names::MANIFEST_PRIVATE_KEY, &e))
                .ok()
        });
        let public_text = self.setting_text(names::MANIFEST_PUBLIC_KEY, None);
        let mut manifest_verifying_keys = public_text.and_then(|t| {
            ManifestVerifyingKeys::from_public_keys_text(&t)
                .map_err(|e| self.key_problem(names::MANIFEST_PUBLIC_KEY, &e))
                .ok()
        });
        let hmac_secret = self.strong_secret(names::MANIFEST_HMAC_SECRET, None);
        let grant_secret =
            self.strong_secret(names::GRANT_SECRET, in_data_dir(embedded_files::GRANT_SECRET).as_deref());
        let grant_previous_secret = self.strong_secret(names::GRANT_PREVIOUS_SECRET, None);
        let service_token_text =
            self.secret_text(names::SERVICE_TOKEN, in_data_dir(embedded_files::SERVICE_TOKEN).as_deref());
        let session_key_secret = self.strong_secret(
            names::SESSION_KEY_SECRET,
            in_data_dir(embedded_files::SESSION_KEY_SECRET).as_deref(),
        );
        let metrics_token_text = self.secret_text(names::METRICS_TOKEN, None);
        let (credential_keys, credential_public_key) = self.credential_keys(role, &in_data_dir);
        let (intercept_ca_key_pem, intercept_ca_cert_pem) = self.intercept_ca(role, &in_data_dir);
        let admin_password_hash = if role.mints() {
            self.secret_text(
                names::ADMIN_PASSWORD_HASH,
                in_data_dir(embedded_files::ADMIN_PASSWORD_HASH).as_deref(),
            )
            .and_then(|text| {
                AdminPasswordHash::parse(&text)
                    .map_err(|e| {
                        let code = e.code();
                        self.problem(
                            names::ADMIN_PASSWORD_HASH,
                            code,
                            format!("{e} (run `gatehouse admin hash-password`)"),
                        )
                    })
                    .ok()
            })
        } else {
            None
        };
        self.refuse_shared_secrets(&[
            (names::SERVICE_TOKEN, service_token_text.as_deref().map(|t| t.trim().as_bytes())),
            (names::GRANT_SECRET, grant_secret.as_ref().map(Secret::expose)),
            (names::GRANT_PREVIOUS_SECRET, grant_previous_secret.as_ref().map(Secret::expose)),
            (names::MANIFEST_HMAC_SECRET, hmac_secret.as_ref().map(Secret::expose)),
            (names::SESSION_KEY_SECRET, session_key_secret.as_ref().map(Secret::expose)),
            (names::METRICS_TOKEN, metrics_token_text.as_deref().map(|t| t.trim().as_bytes())),
        ]);
        let metrics_token = metrics_token_text.as_deref().and_then(|t| {
            ServiceToken::new(t)
                .map_err(|_| {
                    self.problem(
                        names::METRICS_TOKEN,
                        "weak_secret",
                        "must be at least 32 bytes of random text",
                    )
                })
                .ok()
        });
        let service_token = service_token_text.as_deref().and_then(|t| {
            ServiceToken::new(t)
                .map_err(|_| {
                    self.problem(
                        names::SERVICE_TOKEN,
                        "weak_secret",
                        "must be at least 32 bytes of random text",
                    )
                })
                .ok()
        });

        // Role rules: what each role must hold, and must never hold.
        if role == Role::Runner {
            if manifest_signing_key.is_some() || self.is_set(names::MANIFEST_PRIVATE_KEY) {
                self.problem(
                    names::MANIFEST_PRIVATE_KEY,
                    "forbidden_for_role",
                    "a runner must never hold the manifest private key: runner compromise would create a minting capability",
                );
            }
            if hmac_secret.is_some() || self.is_set(names::MANIFEST_HMAC_SECRET) {
                self.problem(
                    names::MANIFEST_HMAC_SECRET,
                    "forbidden_for_role",
                    "a runner must never hold the HMAC manifest secret: it can both verify and mint",
                );
            }
            for name in [names::GRANT_SECRET, names::GRANT_PREVIOUS_SECRET] {
                if self.is_set(name) {
                    self.problem(
                        name,
                        "forbidden_for_role",
                        "a runner must not hold an egress grant secret: it could mint grants",
                    );
                }
            }
        }
        if role == Role::Gateway {
            if manifest_signing_key.is_some() || self.is_set(names::MANIFEST_PRIVATE_KEY) {
                self.problem(
                    names::MANIFEST_PRIVATE_KEY,
                    "forbidden_for_role",
                    "the gateway must never hold the manifest private key",
                );
            }
            if hmac_secret.is_some() || self.is_set(names::MANIFEST_HMAC_SECRET) {
                self.problem(
                    names::MANIFEST_HMAC_SECRET,
                    "forbidden_for_role",
                    "the gateway must never hold the HMAC manifest secret: it can mint manifests",
                );
            }
        }
        if role.mints()
            && sandbox_execution
            && manifest_signing_key.is_none()
            && hmac_secret.is_none()
            && !self.is_set(names::MANIFEST_PRIVATE_KEY)
        {
            self.problem(
                names::MANIFEST_PRIVATE_KEY,
                "missing_required",
                "sandbox execution is enabled but no manifest signing key is set (run `gatehouse keygen`)",
            );
        }
        if role == Role::Runner
            && sandbox_execution
            && manifest_verifying_keys.is_none()
            && !self.is_set(names::MANIFEST_PUBLIC_KEY)
        {
            self.problem(
                names::MANIFEST_PUBLIC_KEY,
                "missing_required",
                "sandbox execution is enabled but the runner has no manifest public key",
            );
        }
        if role.mints() && session_key_secret.is_none() && !self.is_set(names::SESSION_KEY_SECRET) {
            self.problem(
                names::SESSION_KEY_SECRET,
                "missing_required",
                "the session key secret (32+ bytes, its own: not the grant secret) is required to derive storage namespaces (run `gatehouse keygen`)",
            );
        }
        if matches!(role, Role::All | Role::Worker | Role::Gateway)
            && grant_secret.is_none()
            && !self.is_set(names::GRANT_SECRET)
        {
            self.problem(
                names::GRANT_SECRET,
                "missing_required",
                "the egress grant secret (32+ bytes) is required",
            );
        }

        // A worker verifies what it signs (and, while HMAC is enabled, legacy
        // HMAC manifests still in flight). A runner never gets the HMAC secret.
        if role != Role::Runner {
            let own = [
                manifest_signing_key.as_ref().map(ManifestSigningKey::verifying_keys),
                hmac_secret.clone().map(|s| ManifestSigningKey::from_hmac_secret(s).verifying_keys()),
            ];
            for keys in own.into_iter().flatten() {
                manifest_verifying_keys.get_or_insert_with(Default::default).merge(keys);
            }
        }
        let manifest_signing_key =
            manifest_signing_key.or_else(|| hmac_secret.map(ManifestSigningKey::from_hmac_secret));

        // Authentication.
        if auth_provider == AuthProvider::None && !allow_none {
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                format!("CODEAPI_AUTH_PROVIDER=none requires {}=true", names::ALLOW_AUTH_PROVIDER_NONE),
            );
        }
        if auth_provider == AuthProvider::None && !loopback_only {
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                "CODEAPI_AUTH_PROVIDER=none disables authentication and is refused on a non-loopback listen address",
            );
        }
        if auth_provider == AuthProvider::None
            && (service_token_text.is_some() || self.is_set(names::CALLERS_FILE))
        {
            // It would silently ignore the token: say which one is meant.
            self.problem(
                names::AUTH_PROVIDER,
                "insecure_combination",
                "CODEAPI_AUTH_PROVIDER=none would ignore the configured service token or caller file; remove one",
            );
        }
        if local_mode && !loopback_only {
            self.problem(
                names::LOCAL_MODE,
                "insecure_combination",
                "LOCAL_MODE=true disables all authentication and is refused on a non-loopback listen address",
            );
        }
        if dev_no_token && !loopback_only {
            self.problem(
                names::DEV_ALLOW_NO_SERVICE_TOKEN,
                "insecure_combination",
                "running without a service token is allowed on loopback addresses only",
            );
        }
        self.refuse_unacknowledged_insecure(
            loopback_only,
            &[
                (names::REQUIRE_MANIFEST, !require_manifest, "unsigned requests would pass"),
                (
                    names::LEDGER_REQUIRED,
                    !ledger_required,
                    "grants without a ledger record would not be refused",
                ),
                (
                    names::TENANT_ISOLATION_STRICT,
                    !tenant_isolation_strict,
                    "requests without a tenant would share a legacy namespace",
                ),
            ],
        );
        let callers = self.callers();
        if let Some(token) = service_token_text.as_deref()
            && let Some(caller) = callers.identify(token)
        {
            let message = format!(
                "caller {}'s token_sha256 is the service token's; a named caller needs a token of its own",
                caller.name()
            );
            self.problem(names::CALLERS_FILE, "secret_reused", message);
        }
        let auth_off = local_mode || auth_provider == AuthProvider::None || dev_no_token;
        if service_token.is_none() && service_token_text.is_none() && callers.is_empty() && !auth_off {
            self.problem(
                names::SERVICE_TOKEN,
                "missing_required",
                "internal routes would be open; set a 32+ byte token (or, on loopback for development only, GATEHOUSE_DEV_ALLOW_NO_SERVICE_TOKEN=true)",
            );
        }

        // Stores.
        let database_url = self.get(names::DATABASE_URL).map(|u| Secretish(u.trim().to_owned()));
        if let Some(u) = &database_url {
            let u = u.expose();
            if !(u.starts_with("sqlite:") || u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                self.problem(names::DATABASE_URL, "invalid_value", "must be a sqlite:// or postgres:// URL");
            }
        }
        let redis_url = self.get(names::REDIS_URL).map(|u| Secretish(u.trim().to_owned()));
        if let Some(u) = &redis_url {
            let u = u.expose();
            if u.starts_with("rediss://") {
                self.problem(
                    names::REDIS_URL,
                    "invalid_value",
                    "TLS to Redis (rediss://) is not supported yet; use redis:// on a private network or redis+unix://",
                );
            } else if !["redis://", "redis+unix://", "unix://"].iter().any(|s| u.starts_with(s)) {
                self.problem(names::REDIS_URL, "invalid_value", "must be a redis:// or redis+unix:// URL");
            }
        }

        let ledger_key_prefix = self.get(names::LEDGER_KEY_PREFIX).unwrap_or("gatehouse:ledger:").to_owned();
        if ledger_key_prefix.contains(['{', '}']) || ledger_key_prefix.chars().any(char::is_whitespace) {
            self.problem(
                names::LEDGER_KEY_PREFIX,
                "invalid_value",
                "must not contain braces (they would break the per-grant hash tag) or whitespace",
            );
        }
        let store_timeout_ms = self.int(names::STORE_TIMEOUT_MS, 5000, 10..=60_000);
        let store_timeout = std::time::Duration::from_millis(u64::try_from(store_timeout_ms).unwrap_or(5000));
        let run_heartbeat_timeout_secs = self.int(names::RUN_HEARTBEAT_TIMEOUT_SECS, 120, 5..=86_400);
        let event_retention_days = self.int(names::EVENT_RETENTION_DAYS, 30, 1..=3650);
        let shutdown_drain = std::time::Duration::from_secs(
            u64::try_from(self.int(names::SHUTDOWN_DRAIN_SECS, 10, 0..=600)).unwrap_or(10),
        );
        let grant_max_lifetime_secs =
            self.int(names::GRANT_MAX_LIFETIME_SECS, DEFAULT_GRANT_MAX_LIFETIME_SECS, 60..=7 * 86_400);
        if grant_ttl_secs > grant_max_lifetime_secs {
            self.problem(
                names::GRANT_TTL_SECS,
                "invalid_value",
                "must not exceed GATEHOUSE_GRANT_MAX_LIFETIME_SECS",
            );
        }
        let millis = |n: i64| std::time::Duration::from_millis(u64::try_from(n).unwrap_or(0));
        let connections = ConnectionLimits {
            header_read_timeout: millis(self.int(names::HEADER_READ_TIMEOUT_MS, 10_000, 100..=300_000)),
            idle_timeout: millis(self.int(names::IDLE_TIMEOUT_MS, 60_000, 100..=3_600_000)),
            max_connections: usize::try_from(self.int(names::MAX_CONNECTIONS, 4096, 1..=1_000_000))
                .unwrap_or(4096),
            max_connections_per_client: usize::try_from(self.int(
                names::MAX_CONNECTIONS_PER_CLIENT,
                512,
                1..=1_000_000,
            ))
            .unwrap_or(512),
        };
        if connections.max_connections_per_client > connections.max_connections {
            self.problem(
                names::MAX_CONNECTIONS_PER_CLIENT,
                "invalid_value",
                "must not exceed GATEHOUSE_MAX_CONNECTIONS",
            );
        }
        let proxy_public_url = self.http_url(names::PROXY_PUBLIC_URL, &format!("http://{proxy_listen}"));
        let osv_db = self.get(names::OSV_DB).map(|p| PathBuf::from(p.trim()));
        let osv_url = self.http_url(names::OSV_URL, DEFAULT_OSV_URL);
        let deps_scan_concurrency =
            usize::try_from(self.int(names::DEPS_SCAN_CONCURRENCY, 2, 1..=64)).unwrap_or(2);
        // Under the API's 30 s request timeout, with room to record and answer.
        let deps_scan_wait = std::time::Duration::from_millis(
            u64::try_from(self.int(names::DEPS_SCAN_WAIT_MS, 20_000, 0..=25_000)).unwrap_or(20_000),
        );
        let object_store_url = self.get(names::OBJECT_STORE_URL).map(|u| u.trim().to_owned());
        if object_store_url.as_deref().is_some_and(|u| !u.starts_with("s3://") || u.contains(['@', '?', '#']))
        {
            self.problem(
                names::OBJECT_STORE_URL,
                "invalid_value",
                "must be s3://bucket[/prefix], credentials in the AWS_* settings, not the URL",
            );
        }
        let session_ttl_days = self.int(names::SESSION_TTL_DAYS, 30, 1..=3650);
        let credential_use_per_minute = self.int(names::CREDENTIAL_USE_PER_MINUTE, 60, 1..=100_000);
        let trusted_proxies = self.trusted_proxies();
        let ledger_timeout_ms = self.int(names::LEDGER_TIMEOUT_MS, 1000, 10..=60_000);
        let ledger_timeout =
            std::time::Duration::from_millis(u64::try_from(ledger_timeout_ms).unwrap_or(1000));

        let mut proxy_connect_ports = Vec::new();
        let ports = self.get(names::PROXY_CONNECT_PORTS).unwrap_or("443").to_owned();
        for part in ports.split(',') {
            match part.trim().parse::<u16>() {
                Ok(p) if p > 0 => proxy_connect_ports.push(p),
                _ => self.problem(
                    names::PROXY_CONNECT_PORTS,
                    "invalid_value",
                    "must be a comma-separated list of ports",
                ),
            }
        }

        let EgressSettings {
            allow_ranges: egress_allow_ranges,
            dns_servers,
            extra_roots_pem: egress_extra_roots_pem,
            limits: egress_limits,
        } = self.egress();
        let ScannerSettings { clamd, clamd_timeout, content_max_bytes } = self.scanner();

        let mut warnings = Vec::new();
        if local_mode {
            warnings.push("LOCAL_MODE=true: authentication is disabled entirely (development only)".into());
        }
        if auth_provider == AuthProvider::None {
            warnings.push("CODEAPI_AUTH_PROVIDER=none: principals are not authenticated".into());
        }
        if dev_no_token && service_token.is_none() {
            warnings.push(
                "GATEHOUSE_DEV_ALLOW_NO_SERVICE_TOKEN=true: internal routes are open (development only)"
                    .into(),
            );
        }
        if database_url.is_none() && matches!(role, Role::Worker | Role::Gateway) {
            warnings.push(format!(
                "role {} keeps its durable state in the data directory's SQLite file, which no other node \
                 shares: set {} to a postgres:// URL when workers and gateways run apart",
                role.as_str(),
                names::DATABASE_URL
            ));
        }
        if !require_manifest {
            warnings.push(
                "SANDBOX_REQUIRE_EGRESS_MANIFEST=false: unsigned requests pass and are recorded as unsigned"
                    .into(),
            );
        }
        if !ledger_required {
            warnings.push(
                "CODEAPI_EGRESS_LEDGER_REQUIRED=false: grants without a ledger record are not refused".into(),
            );
        }
        if !tenant_isolation_strict {
            warnings.push(
                "CODEAPI_TENANT_ISOLATION_STRICT=false: requests without a tenant share a legacy namespace"
                    .into(),
            );
        }
        if self.is_set(names::MANIFEST_HMAC_SECRET) {
            warnings.push("legacy HMAC manifests are enabled: weaker than the keypair; never mount this secret into a runner".into());
        }
        if !egress_allow_ranges.is_empty() {
            let list: Vec<String> = egress_allow_ranges.iter().map(ToString::to_string).collect();
            warnings.push(format!(
                "GATEHOUSE_EGRESS_ALLOW_RANGES opens internal ranges to egress: {}",
                list.join(", ")
            ));
        }

        Some(Config {
            role,
            listen,
            proxy_listen,
            data_dir,
            embedded,
            database_url,
            store_timeout,
            run_heartbeat_timeout_secs,
            event_retention_days,
            shutdown_drain,
            object_store_url,
            session_ttl_days,
            credential_use_per_minute: u64::try_from(credential_use_per_minute).unwrap_or(60),
            osv_db,
            osv_url,
            deps_scan_concurrency,
            deps_scan_wait,
            grant_max_lifetime_secs,
            connections,
            proxy_public_url,
            redis_url,
            ledger_key_prefix,
            ledger_timeout,
            egress_allow_ranges,
            proxy_connect_ports,
            egress_limits,
            dns_servers,
            egress_extra_roots_pem,
            manifest_signing_key: if role.mints() { manifest_signing_key } else { None },
            manifest_verifying_keys: if role.verifies_manifests() { manifest_verifying_keys } else { None },
            require_manifest,
            grant_secret: if role.opens_grants() { grant_secret } else { None },
            grant_previous_secret: if role.opens_grants() { grant_previous_secret } else { None },
            ledger_required,
            service_token,
            session_key_secret: if role.mints() { session_key_secret } else { None },
            credential_keys,
            credential_public_key,
            intercept_ca_key_pem,
            intercept_ca_cert_pem,
            admin_password_hash,
            trusted_proxies,
            metrics_token,
            callers,
            tenant_isolation_strict,
            auth_provider,
            local_mode,
            sandbox_execution,
            clamd,
            clamd_timeout,
            content_max_bytes,
            manifest_clock_skew_secs,
            manifest_max_lifetime_secs,
            manifest_ttl_secs,
            grant_ttl_secs,
            log_format,
            warnings,
        })
    }

    /// Off loopback, refuses each insecure setting in `insecure` (name,
    /// whether it is set insecurely, what that would do) that
    /// `GATEHOUSE_ACCEPT_INSECURE` does not name; an entry there that is
    /// not such a setting is refused too. One problem per setting.
    fn refuse_unacknowledged_insecure(&mut self, loopback_only: bool, insecure: &[(&str, bool, &str)]) {
        let accepted: Vec<String> = self
            .get(names::ACCEPT_INSECURE)
            .map(|v| v.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        let unknown: Vec<&str> = accepted
            .iter()
            .map(String::as_str)
            .filter(|n| !names::INSECURE_WITH_ACKNOWLEDGEMENT.contains(n))
            .collect();
        if !unknown.is_empty() {
            let message = format!(
                "names settings that need no acknowledgement ({}); it takes a comma-separated list of {}",
                unknown.join(", "),
                names::INSECURE_WITH_ACKNOWLEDGEMENT.join(", ")
            );
            self.problem(names::ACCEPT_INSECURE, "invalid_value", message);
        }
        if loopback_only {
            return;
        }
        for (name, set_insecurely, effect) in insecure {
            if *set_insecurely && !accepted.iter().any(|a| a == name) {
                let message = format!(
                    "{name}=false on a non-loopback listen address: {effect}; refused unless {} names {name}",
                    names::ACCEPT_INSECURE
                );
                self.problem(name, "insecure_combination", message);
            }
        }
    }

    /// Refuses secrets that equal one another: a service token that is also
    /// the grant secret lets anyone who holds one forge with the other.
    fn refuse_shared_secrets(&mut self, secrets: &[(&str, Option<&[u8]>)]) {
        for (i, (name, value)) in secrets.iter().enumerate() {
            let Some(value) = value else { continue };
            if let Some((other, _)) = secrets[..i].iter().find(|(_, v)| v.is_some_and(|v| v == *value)) {
                self.problem(
                    name,
                    "secret_reused",
                    format!("must differ from {other}: every secret has its own value"),
                );
            }
        }
    }
}
