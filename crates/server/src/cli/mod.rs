//! The command line. Exit codes everywhere: `0` allowed / valid, `1` refused /
//! invalid, `2` bad input, bad configuration or internal error, with a
//! one-line reason on stderr. `--json` prints exactly one JSON document.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gatehouse_config::{MapSource, Source, load, names};

use serde_json::{Value, json};

use crate::files::KeySet;

mod checks;
mod control;
mod deps;
mod tokens;

use checks::{content_scan, cvss, deps_diff, deps_parse, egress_check};
use tokens::{grant, manifest};

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
        format: deps::ScanFormat,
        /// A larger base lockfile is read as absent (over-report, never under-report).
        #[arg(long = "base-max-bytes", default_value_t = deps::DEFAULT_BASE_MAX_BYTES)]
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
        /// The request's method, judged by the policy's method and path rules.
        #[arg(long, default_value = "GET")]
        method: String,
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
            command: EgressCommand::Check { url, policy, resolve, webhook, method, allow_ranges, out },
        } => egress_check(&url, policy, &resolve, webhook, &method, allow_ranges, out.json),
        Command::Content { command: ContentCommand::Scan { files, clamd, max_bytes, out } } => {
            content_scan(&files, clamd.as_deref(), max_bytes, out.json)
        }
        Command::Cvss { vector, out } => cvss(&vector, out.json),
        Command::Migrate { database_url, out } => {
            control::migrate(&environment(None), database_url, out.json).map_err(Fail)
        }
        Command::Audit { command: AuditCommand::Verify { database_url, checkpoint, public_key, out } } => {
            control::audit_verify(&environment(None), database_url, &checkpoint, public_key, out.json)
                .map_err(Fail)
        }
        Command::Audit { command: AuditCommand::Checkpoint { database_url, key } } => {
            control::audit_checkpoint(&environment(None), database_url, key).map_err(Fail)
        }
        Command::Admin { command: AdminCommand::HashPassword } => admin_hash_password(),
        Command::Credentials { command: CredentialsCommand::Rewrap { database_url, out } } => {
            control::credentials_rewrap(&environment(None), database_url, out.json).map_err(Fail)
        }
        Command::Deps { command: DepsCommand::Parse { lockfile, out } } => deps_parse(&lockfile, out.json),
        Command::Deps {
            command: DepsCommand::Scan { base, head, osv_db, osv_url, gate, format, base_max_bytes },
        } => deps::deps_scan(
            deps::ScanArgs { base, head, osv_db, osv_url, gate, format, base_max_bytes },
            cli_fetcher,
        )
        .map_err(Fail),
        Command::Osv { command: OsvCommand::Serve { db, listen } } => {
            deps::osv_serve(&db, listen).map_err(Fail)
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
