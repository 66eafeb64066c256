//! The command line. Exit codes everywhere: `0` allowed / valid, `1` refused /
//! invalid, `2` bad input, bad configuration or internal error, with a
//! one-line reason on stderr. `--json` prints exactly one JSON document.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gatehouse_capability::canonical::{BodyDigest, parse_strict};
use gatehouse_capability::grant::{GrantLifetime, GrantRequest};
use gatehouse_capability::manifest::ManifestSigner;
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_capability::{
    GrantSealer, ManifestSigningKey, ManifestVerifier, ManifestVerifyingKeys, Secret, SessionKeyDeriver,
};
use gatehouse_config::{DEFAULT_GRANT_MAX_LIFETIME_SECS, MapSource, Source, load, names};
use std::net::IpAddr;

use gatehouse_core::{Clock, SystemClock};
use gatehouse_egress::{AddressGuard, Policy, PolicyError, Purpose, decide};
use gatehouse_ledger::{LedgerBackend as _, RedisLedger, RedisLedgerConfig, Registration, RevokeScope};
use serde_json::{Value, json};

use crate::files::{KeySet, read_text};

/// gatehouse: the security plane for platforms that run untrusted code and AI agents.
#[derive(Parser)]
#[command(name = "gatehouse", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start gatehouse (embedded defaults when nothing is configured).
    Serve {
        /// all, worker, runner or gateway (overrides GATEHOUSE_ROLE).
        #[arg(long)]
        role: Option<String>,
        /// A TOML file with the same keys as the environment.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate configuration exactly as startup would.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Generate an Ed25519 keypair, a grant secret and a service token.
    Keygen {
        /// Directory to write into (created owner-only) [the data directory].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Sign or verify execution manifests.
    Manifest {
        #[command(subcommand)]
        command: ManifestCommand,
    },
    /// Mint or open egress grants.
    Grant {
        #[command(subcommand)]
        command: GrantCommand,
    },
    /// The outbound door's decisions.
    Egress {
        #[command(subcommand)]
        command: EgressCommand,
    },
    /// Content scanning.
    Content {
        #[command(subcommand)]
        command: ContentCommand,
    },
    /// Dependency lockfiles.
    Deps {
        #[command(subcommand)]
        command: DepsCommand,
    },
    /// An OSV-API-compatible mirror of an offline database.
    Osv {
        #[command(subcommand)]
        command: OsvCommand,
    },
    /// Apply the durable store's pending migrations (`serve` does too);
    /// refuses a database migrated by a newer gatehouse.
    Migrate {
        /// `sqlite://PATH` or `postgres://...` [GATEHOUSE_DATABASE_URL, else the data dir's SQLite file].
        #[arg(long = "database-url")]
        database_url: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// The hash-chained audit log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The settings page (`/admin`).
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Stored credentials (run where the gateway's sealing keys are).
    Credentials {
        #[command(subcommand)]
        command: CredentialsCommand,
    },
    /// Score a CVSS v3.0, v3.1 or v4.0 vector: version, base score, rating.
    Cvss {
        /// The vector, e.g. CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H.
        vector: String,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Read a password from stdin (one line) and print its Argon2id PHC
    /// string for GATEHOUSE_ADMIN_PASSWORD_HASH. The password itself is
    /// never printed or kept.
    HashPassword,
}

#[derive(Subcommand)]
enum CredentialsCommand {
    /// Seal every stored credential not on the current sealing key
    /// (GATEHOUSE_CREDENTIAL_SEALING_KEY) again to it, opening it with the
    /// previous key (GATEHOUSE_CREDENTIAL_SEALING_PREVIOUS_KEY). Exit 0, or 1
    /// when some credential does not open (reported by id; the others are done).
    Rewrap {
        /// `sqlite://PATH` or `postgres://...` [GATEHOUSE_DATABASE_URL, else the data dir's SQLite file].
        #[arg(long = "database-url")]
        database_url: Option<String>,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Walk the chain: exit 0 intact, 1 broken (naming the first bad entry).
    Verify {
        /// `sqlite://PATH` or `postgres://...` [GATEHOUSE_DATABASE_URL, else the data dir's SQLite file].
        #[arg(long = "database-url")]
        database_url: Option<String>,
        /// A checkpoint `audit checkpoint` printed; the chain must still hold
        /// its entry (so removing entries from the end is caught). Repeatable.
        #[arg(long)]
        checkpoint: Vec<PathBuf>,
        /// The audit public key (SPKI PEM) checkpoints are signed with [DATA_DIR/audit-public.pem].
        #[arg(long = "public-key")]
        public_key: Option<PathBuf>,
        #[command(flatten)]
        out: Output,
    },
    /// Print an Ed25519-signed statement of the chain's head (after
    /// verifying the chain).
    Checkpoint {
        /// `sqlite://PATH` or `postgres://...` [GATEHOUSE_DATABASE_URL, else the data dir's SQLite file].
        #[arg(long = "database-url")]
        database_url: Option<String>,
        /// The audit signing key (PKCS#8 PEM) [DATA_DIR/audit-signing.pem].
        #[arg(long)]
        key: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum OsvCommand {
    /// Serve /v1/query, /v1/querybatch and /v1/vulns/{id} from an offline
    /// database (OSV JSON files and/or `all.zip` exports).
    Serve {
        /// The database: a directory (JSON files, `all.zip` exports) or one `all.zip`.
        #[arg(long)]
        db: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8702")]
        listen: std::net::SocketAddr,
    },
}

#[derive(Subcommand)]
enum DepsCommand {
    /// Read a lockfile: every (ecosystem, name, version) once. Exit 2 when
    /// it cannot be read.
    Parse {
        /// The lockfile; its name picks the format, its content confirms it.
        lockfile: PathBuf,
        #[command(flatten)]
        out: Output,
    },
    /// Check what a change adds to its dependencies against OSV and apply
    /// the gate. Exit 0 gate passed, 1 gate tripped, 2 bad input (or an
    /// incomplete scan under gate off).
    Scan {
        /// The base branch's lockfile (absent: every head version is checked).
        #[arg(long)]
        base: Option<PathBuf>,
        /// The head's lockfile.
        head: PathBuf,
        /// An offline OSV database: a directory of OSV JSON files and/or OSV
        /// `all.zip` exports, or one `all.zip`.
        #[arg(long = "osv-db", conflicts_with = "osv_url")]
        osv_db: Option<PathBuf>,
        /// The OSV API root [https://api.osv.dev], reached through the egress door.
        #[arg(long = "osv-url")]
        osv_url: Option<String>,
        /// off, high or critical; unknown severity counts as high.
        #[arg(long, default_value = "high")]
        gate: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: crate::deps_cli::ScanFormat,
        /// A larger base lockfile is read as absent (over-report, never under-report).
        #[arg(long = "base-max-bytes", default_value_t = crate::deps_cli::DEFAULT_BASE_MAX_BYTES)]
        base_max_bytes: u64,
    },
    /// Compare two lockfiles: added, changed and removed packages.
    Diff {
        /// The base branch's lockfile.
        base: PathBuf,
        /// The head's lockfile.
        head: PathBuf,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum ContentCommand {
    /// Judge files by their bytes (and clamd, when configured). Exit 0 when
    /// every file is clean or not_scanned, 1 when any is refused or
    /// infected, 2 when a file cannot be read.
    Scan {
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// clamd address [CLAMD_HOST and CLAMD_PORT].
        #[arg(long, value_name = "HOST:PORT")]
        clamd: Option<String>,
        /// Size cap per file [GATEHOUSE_CONTENT_MAX_BYTES, else 32 MiB].
        #[arg(long = "max-bytes")]
        max_bytes: Option<u64>,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum EgressCommand {
    /// Decide whether a run may fetch URL, exactly as the door would, without
    /// connecting. Exit 0 allow, 1 refuse, 2 bad input.
    Check {
        /// The URL.
        url: String,
        /// A policy document (JSON) [a tenant with no policy: open].
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Answer for HOST instead of DNS (as curl's --resolve): HOST=IP[,IP...].
        #[arg(long = "resolve", value_name = "HOST=IP[,IP...]")]
        resolve: Vec<String>,
        /// Check as a webhook delivery (no redirects).
        #[arg(long)]
        webhook: bool,
        /// Ranges an operator opens (as GATEHOUSE_EGRESS_ALLOW_RANGES).
        #[arg(long = "allow-ranges", value_name = "CIDR[,CIDR...]")]
        allow_ranges: Option<String>,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// List every configuration problem; exit 2 if there is any.
    Check {
        /// A TOML file with the same keys as the environment.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also check as this role.
        #[arg(long)]
        role: Option<String>,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ManifestCommand {
    /// Sign claims for a body; prints the token.
    Sign {
        /// PKCS#8 Ed25519 private key (PEM or base64 DER).
        #[arg(long)]
        key: PathBuf,
        /// JSON claims; iat and exp are filled in when absent.
        #[arg(long)]
        claims: PathBuf,
        /// The execute request body (JSON) the manifest is bound to.
        #[arg(long)]
        body: PathBuf,
        /// Lifetime when exp is absent.
        #[arg(long, default_value_t = 300)]
        ttl: i64,
    },
    /// Verify a token against a body.
    Verify {
        /// SPKI public key(s) (PEM blocks or base64 DER).
        #[arg(long = "public-key")]
        public_key: PathBuf,
        /// The execute request body (JSON).
        #[arg(long)]
        body: PathBuf,
        /// The token, or `-` to read it from stdin (keeps it out of `ps`).
        token: String,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
enum GrantCommand {
    /// Seal claims into a `ceg1.` token; prints the token.
    Mint {
        /// File holding CODEAPI_EGRESS_GRANT_SECRET (32+ bytes).
        #[arg(long = "secret-file")]
        secret_file: PathBuf,
        /// JSON claims (grant_id, exec_id, tenant_id, user_id, input_files, …).
        #[arg(long)]
        claims: PathBuf,
        /// File holding GATEHOUSE_SESSION_KEY_SECRET, which the grant's
        /// storage namespace derives from [session-key-secret beside the
        /// grant secret, as keygen writes them].
        #[arg(long = "session-key-file")]
        session_key_file: Option<PathBuf>,
        /// Lifetime when exp is absent.
        #[arg(long, default_value_t = 300)]
        ttl: i64,
        /// The shared Redis ledger to register the grant in (or
        /// GATEHOUSE_REDIS_URL); without one, a gateway that requires the
        /// ledger (the default) refuses the token.
        #[arg(long = "redis-url")]
        redis_url: Option<String>,
    },
    /// Open a token; prints its claims.
    Open {
        /// File holding the grant secret.
        #[arg(long = "secret-file")]
        secret_file: PathBuf,
        /// File holding the previous grant secret (rotation).
        #[arg(long = "previous-secret-file")]
        previous_secret_file: Option<PathBuf>,
        /// The token, or `-` to read it from stdin.
        token: String,
        #[command(flatten)]
        out: Output,
    },
    /// Revoke grants in the shared Redis ledger, even with every gatehouse
    /// node down. (The embedded in-process ledger lives inside the running
    /// server: use its `POST /v1/grants/{id}/revoke` instead.)
    Revoke {
        #[command(flatten)]
        scope: RevokeTarget,
        /// The ledger's Redis [GATEHOUSE_REDIS_URL].
        #[arg(long = "redis-url")]
        redis_url: Option<String>,
        /// The store the revocation is audited in [GATEHOUSE_DATABASE_URL, else
        /// the data directory's SQLite file].
        #[arg(long = "database-url")]
        database_url: Option<String>,
        /// Who revokes, for the audit entry (`cli:NAME`) [cli].
        #[arg(long)]
        actor: Option<String>,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct RevokeTarget {
    /// One grant.
    #[arg(long = "grant-id")]
    grant_id: Option<String>,
    /// Every grant of one run.
    #[arg(long = "exec-id")]
    exec_id: Option<String>,
    /// Every grant of one tenant (kill switch).
    #[arg(long = "tenant-id")]
    tenant_id: Option<String>,
    /// Every grant (emergency revoke).
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
struct Output {
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// A failed command: exit code 2 and one line on stderr.
struct Fail(String);

impl<T: Into<String>> From<T> for Fail {
    fn from(s: T) -> Self {
        Fail(s.into())
    }
}

/// Runs the command line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { role, config } => serve(role, config),
        Command::Config { command: ConfigCommand::Check { config, role, json } } => {
            config_check(config, role, json)
        }
        Command::Keygen { out } => keygen(out),
        Command::Manifest { command } => manifest(command),
        Command::Grant { command } => grant(command),
        Command::Egress {
            command: EgressCommand::Check { url, policy, resolve, webhook, allow_ranges, out },
        } => egress_check(&url, policy, &resolve, webhook, allow_ranges, out.json),
        Command::Content { command: ContentCommand::Scan { files, clamd, max_bytes, out } } => {
            content_scan(&files, clamd.as_deref(), max_bytes, out.json)
        }
        Command::Cvss { vector, out } => cvss(&vector, out.json),
        Command::Migrate { database_url, out } => {
            crate::control_cli::migrate(&environment(None), database_url, out.json).map_err(Fail)
        }
        Command::Audit { command: AuditCommand::Verify { database_url, checkpoint, public_key, out } } => {
            crate::control_cli::audit_verify(
                &environment(None),
                database_url,
                &checkpoint,
                public_key,
                out.json,
            )
            .map_err(Fail)
        }
        Command::Audit { command: AuditCommand::Checkpoint { database_url, key } } => {
            crate::control_cli::audit_checkpoint(&environment(None), database_url, key).map_err(Fail)
        }
        Command::Admin { command: AdminCommand::HashPassword } => admin_hash_password(),
        Command::Credentials { command: CredentialsCommand::Rewrap { database_url, out } } => {
            crate::control_cli::credentials_rewrap(&environment(None), database_url, out.json).map_err(Fail)
        }
        Command::Deps { command: DepsCommand::Parse { lockfile, out } } => deps_parse(&lockfile, out.json),
        Command::Deps {
            command: DepsCommand::Scan { base, head, osv_db, osv_url, gate, format, base_max_bytes },
        } => crate::deps_cli::deps_scan(
            crate::deps_cli::ScanArgs { base, head, osv_db, osv_url, gate, format, base_max_bytes },
            cli_fetcher,
        )
        .map_err(Fail),
        Command::Osv { command: OsvCommand::Serve { db, listen } } => {
            crate::deps_cli::osv_serve(&db, listen).map_err(Fail)
        }
        Command::Deps { command: DepsCommand::Diff { base, head, out } } => deps_diff(&base, &head, out.json),
    };
    match result {
        Ok(code) => code,
        Err(Fail(msg)) => {
            eprintln!("gatehouse: {msg}");
            ExitCode::from(2)
        }
    }
}

fn environment(role: Option<String>) -> MapSource {
    let mut source = MapSource::new();
    for (k, v) in
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
    {
        source.set(&k, v);
    }
    if let Some(role) = role {
        source.set(names::ROLE, role);
    }
    source
}

fn serve(role: Option<String>, config: Option<PathBuf>) -> Result<ExitCode, Fail> {
    let source = environment(role);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    runtime.block_on(crate::serve::serve(&source, config.as_deref()))?;
    Ok(ExitCode::SUCCESS)
}

fn config_check(config: Option<PathBuf>, role: Option<String>, json_out: bool) -> Result<ExitCode, Fail> {
    let source = environment(role);
    // `config check` reports what `serve` would do, but never writes: in
    // embedded mode missing key files are reported as "would be generated".
    let embedded = gatehouse_config::embedded_data_dir(&source, config.as_deref());
    match load(&source, config.as_deref()) {
        Ok(c) => {
            if json_out {
                say!(
                    "{}",
                    json!({"ok": true, "role": c.role.as_str(), "embedded": c.embedded, "warnings": c.warnings})
                );
            } else {
                say!("configuration ok (role {})", c.role.as_str());
                for w in &c.warnings {
                    say!("warning: {w}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            let problems: Vec<_> = problems
                .into_iter()
                .filter(|p| {
                    embedded.is_none() || !(p.code == "missing_required" && embedded_generates(&p.setting))
                })
                .collect();
            if problems.is_empty() {
                if json_out {
                    say!(
                        "{}",
                        json!({"ok": true, "embedded": true, "warnings": ["missing keys will be generated on first start"]})
                    );
                } else {
                    say!("configuration ok (embedded mode: missing keys will be generated on first start)");
                }
                return Ok(ExitCode::SUCCESS);
            }
            if json_out {
                let list: Vec<Value> = problems
                    .iter()
                    .map(|p| json!({"setting": p.setting, "code": p.code, "message": p.message}))
                    .collect();
                say!("{}", json!({"ok": false, "problems": list}));
            } else {
                eprintln!("gatehouse: {} configuration problem(s):", problems.len());
                for p in &problems {
                    eprintln!("  - {p}");
                }
            }
            Ok(ExitCode::from(2))
        }
    }
}

fn embedded_generates(setting: &str) -> bool {
    [names::MANIFEST_PRIVATE_KEY, names::GRANT_SECRET, names::SERVICE_TOKEN].contains(&setting)
}

fn keygen(out: Option<PathBuf>) -> Result<ExitCode, Fail> {
    let dir = match out {
        Some(dir) => dir,
        None => {
            PathBuf::from(environment(None).var(names::DATA_DIR).unwrap_or_else(|| "./gatehouse-data".into()))
        }
    };
    let keys = KeySet::generate()?;
    let written = keys.write_new(&dir)?;
    for path in written {
        say!("wrote {}", path.display());
    }
    if let Some(password) = keys.admin_password() {
        say!("the settings page's password (shown once, only its hash is kept): {password}");
    }
    Ok(ExitCode::SUCCESS)
}

fn admin_hash_password() -> Result<ExitCode, Fail> {
    let mut line = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| Fail(format!("cannot read the password from stdin: {}", e.kind())))?;
    let password = line.trim_end_matches(['\n', '\r']);
    let hash = gatehouse_capability::AdminPasswordHash::hash(password).map_err(|e| Fail(e.to_string()))?;
    println!("{}", hash.as_str());
    Ok(ExitCode::SUCCESS)
}

fn read_json(flag: &str, path: &Path) -> Result<Value, Fail> {
    let text = read_text(flag, path)?;
    parse_strict(text.as_bytes())
        .map_err(|e| Fail(format!("{flag}: {} is not valid JSON: {e}", path.display())))
}

fn read_token(token: &str) -> Result<String, Fail> {
    if token == "-" {
        return Ok(read_text("TOKEN", Path::new("-"))?.trim().to_owned());
    }
    Ok(token.trim().to_owned())
}

fn read_secret(flag: &str, path: &Path) -> Result<Secret, Fail> {
    let text = read_text(flag, path)?;
    Secret::new(&text).map_err(|_| {
        Fail(format!("{flag}: weak_secret: the secret must be at least 32 bytes of random text"))
    })
}

fn manifest(command: ManifestCommand) -> Result<ExitCode, Fail> {
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

fn grant(command: GrantCommand) -> Result<ExitCode, Fail> {
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
fn with_shared_ledger<T, Fut>(url: String, op: impl FnOnce(RedisLedger) -> Fut) -> Result<T, Fail>
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
fn revoke(
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
    crate::control_cli::audit_one(&env, database_url, record).map_err(|e| {
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

fn egress_check(
    url: &str,
    policy: Option<PathBuf>,
    resolve: &[String],
    webhook: bool,
    allow_ranges: Option<String>,
    json_out: bool,
) -> Result<ExitCode, Fail> {
    // A policy that cannot be read is not bad input here: it is exactly the
    // case the door refuses (policy_unreadable), and the check says so.
    let policy = match policy {
        None => Ok(Policy::open()),
        Some(path) => match read_text("--policy", &path) {
            Ok(text) => Policy::from_json(text.as_bytes()),
            Err(e) => Err(PolicyError::unreadable(e)),
        },
    };
    let mut answers: std::collections::HashMap<String, Vec<IpAddr>> = std::collections::HashMap::new();
    for entry in resolve {
        let (host, ips) = entry
            .split_once('=')
            .ok_or_else(|| Fail(format!("--resolve {entry}: expected HOST=IP[,IP...]")))?;
        let Ok(gatehouse_egress::Host::Name(host)) = gatehouse_egress::target::parse_host(host.trim()) else {
            return Err(Fail(format!("--resolve {entry}: not a host name")));
        };
        let ips = ips
            .split(',')
            .map(|ip| ip.trim().trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Fail(format!("--resolve {entry}: not a list of IP addresses")))?;
        answers.entry(host).or_default().extend(ips);
    }
    let ranges = cidr_list(&allow_ranges.unwrap_or_default())
        .map_err(|()| Fail("--allow-ranges: not a list of CIDR ranges".into()))?;
    let purpose = if webhook { Purpose::Webhook } else { Purpose::Request };
    let decision =
        decide(url, policy.as_ref(), &AddressGuard::new(ranges), purpose, |host| match answers.get(host) {
            Some(ips) => Ok(ips.clone()),
            None => system_resolve(host),
        });
    if json_out {
        say!("{}", serde_json::to_string(&decision).unwrap_or_default());
    } else if decision.allowed() {
        let list: Vec<String> = decision.addresses.iter().map(ToString::to_string).collect();
        say!("allow {} ({})", decision.host.as_deref().unwrap_or(""), list.join(", "));
    } else {
        match &decision.rule {
            Some(rule) => say!("refuse: {} ({rule})", decision.reason),
            None => say!("refuse: {}", decision.reason),
        }
    }
    Ok(if decision.allowed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `HOST:PORT`, with IPv6 hosts in brackets.
fn host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| Some((host.to_owned(), port.parse().ok()?)))?
}

fn content_scan(
    files: &[PathBuf],
    clamd: Option<&str>,
    max_bytes: Option<u64>,
    json_out: bool,
) -> Result<ExitCode, Fail> {
    let settings = gatehouse_config::scanner_settings(&environment(None)).map_err(|p| Fail(problems(p)))?;
    let clamd = match clamd {
        Some(at) => Some(host_port(at).ok_or_else(|| Fail(format!("--clamd {at}: expected HOST:PORT")))?),
        None => settings.clamd,
    };
    let max_bytes = max_bytes.unwrap_or(settings.content_max_bytes);
    let scanner = crate::scanner::content_scanner(
        clamd.as_ref().map(|(h, p)| (h.as_str(), *p)),
        settings.clamd_timeout,
        max_bytes,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {}", e.kind()))?;
    let mut results = Vec::new();
    let mut unreadable = false;
    let mut refused = false;
    for file in files {
        match runtime.block_on(scanner.scan_file(file)) {
            Ok(verdict) => {
                refused |= !verdict.accepted();
                let mut entry = serde_json::to_value(&verdict).unwrap_or_default();
                if let Some(obj) = entry.as_object_mut() {
                    obj.insert("file".into(), Value::String(file.display().to_string()));
                }
                if !json_out {
                    let mut line =
                        format!("{}: {} {}", file.display(), verdict.verdict.as_str(), verdict.kind);
                    if let Some(reason) = verdict.reason {
                        line.push_str(&format!(" {reason}"));
                    }
                    if let Some(offset) = verdict.offset {
                        line.push_str(&format!(" at byte {offset}"));
                    }
                    if let Some(signature) = &verdict.signature {
                        line.push_str(&format!(" ({signature})"));
                    }
                    say!("{line}");
                }
                results.push(entry);
            }
            Err(e) => {
                unreadable = true;
                eprintln!("gatehouse: cannot read {}: {}", file.display(), e.kind());
            }
        }
    }
    if json_out {
        say!("{}", json!({"results": results}));
    }
    Ok(ExitCode::from(if unreadable {
        2
    } else if refused {
        1
    } else {
        0
    }))
}

/// Parses a lockfile's bytes. Requirements includes (`-r`, `-c`) resolve
/// relative to the including file, as pip resolves them.
pub(crate) fn parse_lockfile(
    path: &Path,
    bytes: &[u8],
) -> Result<gatehouse_deps::Parsed, gatehouse_deps::ParseError> {
    // Includes stay inside the lockfile's own directory tree, symbolic
    // links resolved (see `gatehouse_deps::lockfile::files`).
    gatehouse_deps::lockfile::parse_file(path, bytes, None)
}

/// Reads and parses a lockfile from disk; any failure is exit 2.
fn read_lockfile(path: &Path) -> Result<gatehouse_deps::Parsed, Fail> {
    let name = path.display().to_string();
    let limit = gatehouse_deps::lockfile::MAX_LOCKFILE_BYTES as u64;
    let len = std::fs::metadata(path).map_err(|e| Fail(format!("cannot read {name}: {}", e.kind())))?.len();
    if len > limit {
        return Err(Fail(format!("{name}: {len} bytes; the limit is {limit} (too_large)")));
    }
    let bytes = std::fs::read(path).map_err(|e| Fail(format!("cannot read {name}: {}", e.kind())))?;
    parse_lockfile(path, &bytes).map_err(|e| Fail(e.to_string()))
}

/// The egress fetch client for gatehouse's own calls from the command line,
/// configured as the server's (GATEHOUSE_EGRESS_ALLOW_RANGES,
/// GATEHOUSE_DNS_SERVERS, GATEHOUSE_EGRESS_EXTRA_CA_FILE and the door's
/// limits, read by the config crate).
fn cli_fetcher() -> Result<gatehouse_egress::fetch::Fetcher, String> {
    let egress = gatehouse_config::egress_settings(&environment(None)).map_err(problems)?;
    crate::state::egress_fetcher(
        &egress.allow_ranges,
        egress.extra_roots_pem.as_deref(),
        crate::state::dns_resolver(&egress.dns_servers),
        crate::state::egress_limits(&egress.limits, &[]),
    )
}

/// Configuration problems as one line.
fn problems(list: Vec<gatehouse_config::Problem>) -> String {
    list.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

fn cvss(vector: &str, json_out: bool) -> Result<ExitCode, Fail> {
    let score = gatehouse_deps::severity::cvss(vector.trim())
        .map_err(|e| Fail(format!("not a CVSS vector: {} ({})", e.message, e.code)))?;
    if json_out {
        say!("{}", serde_json::to_string(&score).unwrap_or_default());
    } else {
        let version = serde_json::to_value(score.version).unwrap_or_default();
        let severity = serde_json::to_value(score.severity).unwrap_or_default();
        say!(
            "CVSS {} base score {:.1} ({})",
            version.as_str().unwrap_or_default(),
            score.base_score,
            severity.as_str().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn deps_parse(lockfile: &Path, json_out: bool) -> Result<ExitCode, Fail> {
    let parsed = read_lockfile(lockfile)?;
    if json_out {
        say!("{}", serde_json::to_string(&parsed).unwrap_or_default());
    } else {
        say!("{}: {} ({} packages)", lockfile.display(), parsed.format.as_str(), parsed.packages.len());
        for p in &parsed.packages {
            say!("{}\t{}\t{}", p.ecosystem, p.name, p.version);
        }
        for w in &parsed.warnings {
            match w.line {
                Some(line) => eprintln!("warning: {}:{line}: {} ({})", lockfile.display(), w.message, w.code),
                None => eprintln!("warning: {}: {} ({})", lockfile.display(), w.message, w.code),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn deps_diff(base: &Path, head: &Path, json_out: bool) -> Result<ExitCode, Fail> {
    let base = read_lockfile(base)?;
    let head = read_lockfile(head)?;
    let diff = gatehouse_deps::diff(Some(&base.packages), &head.packages);
    if json_out {
        say!("{}", serde_json::to_string(&diff).unwrap_or_default());
    } else {
        for p in &diff.added {
            say!("+ {} {} {}", p.ecosystem, p.name, p.version);
        }
        for c in &diff.changed {
            say!("~ {} {} {} -> {}", c.ecosystem, c.name, c.from.join(","), c.to.join(","));
        }
        for p in &diff.removed {
            say!("- {} {} {}", p.ecosystem, p.name, p.version);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A comma-separated list of CIDR ranges (empty entries ignored).
fn cidr_list(list: &str) -> Result<Vec<ipnet::IpNet>, ()> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<ipnet::IpNet>().map_err(|_| ()))
        .collect()
}

/// DNS as the door resolves (GATEHOUSE_DNS_SERVERS, else the system's
/// configuration), for `egress check` without `--resolve`.
fn system_resolve(host: &str) -> Result<Vec<IpAddr>, ()> {
    let servers = gatehouse_config::egress_settings(&environment(None)).map_err(|_| ())?.dns_servers;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|_| ())?;
    runtime.block_on(async {
        let dns = if servers.is_empty() {
            gatehouse_egress::resolve::DnsResolver::system()
        } else {
            gatehouse_egress::resolve::DnsResolver::with_servers(&servers)
        }
        .map_err(|_| ())?;
        dns.lookup(host).await
    })
}

/// serde's message up to the first quote: names the field, never echoes a value.
fn first_clause(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    msg.split(['"', '`']).next().unwrap_or("").trim_end_matches([' ', ':']).to_owned()
}

fn report(verdict: Result<Value, gatehouse_core::Reason>, json_out: bool) -> ExitCode {
    match verdict {
        Ok(claims) => {
            if json_out {
                say!("{}", json!({"valid": true, "claims": claims}));
            } else {
                say!("valid");
                say!("{}", serde_json::to_string_pretty(&claims).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Err(reason) => {
            if json_out {
                say!("{}", json!({"valid": false, "reason": reason}));
            } else {
                say!("invalid: {reason}");
            }
            ExitCode::from(1)
        }
    }
}
