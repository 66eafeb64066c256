//! Key and secret files: written owner-only, never overwritten.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use gatehouse_capability::{ManifestSigningKey, Secret};
use gatehouse_config::embedded_files;
use zeroize::Zeroizing;

/// A key set as `keygen` writes it.
pub(crate) struct KeySet {
    /// (file name, content — wiped on drop, mode)
    files: Vec<(&'static str, Zeroizing<String>, u32)>,
    /// The settings page's first password, whose hash is among the files:
    /// shown once to whoever made the set, never written.
    admin_password: Zeroizing<String>,
}

impl KeySet {
    /// Fresh keys: the manifest keypair (Ed25519), grant secret, service
    /// token, the audit checkpoint keypair (Ed25519, its own key), and the
    /// credential sealing keypair (X25519: the private half for gateways,
    /// the public half for workers), and the interception CA (its key for
    /// gateways, its certificate for workers and sandboxes).
    pub(crate) fn generate() -> Result<Self, String> {
        let keypair = || -> Result<(Zeroizing<String>, String), String> {
            let key =
                ManifestSigningKey::generate().map_err(|_| "the OS random generator failed".to_owned())?;
            let private = key.to_pkcs8_pem().ok_or("could not encode the private key")?;
            let public = key.public_key_pem().ok_or("could not encode the public key")?;
            Ok((private, public))
        };
        let (private, public) = keypair()?;
        let (audit_private, audit_public) = keypair()?;
        let sealing = gatehouse_capability::SealingKey::generate()
            .map_err(|_| "the OS random generator failed".to_owned())?;
        let sealing_private = Zeroizing::new(format!("{}\n", sealing.to_text().as_str()));
        let sealing_public = format!("{}\n", sealing.public_key().to_text());
        let ca = gatehouse_egress::intercept::InterceptCa::generate()
            .map_err(|e| format!("the interception CA could not be made: {e}"))?;
        let admin_password = gatehouse_capability::admin_password::generate_password()
            .map_err(|_| "the OS random generator failed".to_owned())?;
        let admin_hash = gatehouse_capability::AdminPasswordHash::hash(&admin_password)
            .map_err(|e| format!("the settings page password could not be hashed: {e}"))?;
        let secret_line = || -> Result<Zeroizing<String>, String> {
            let s = Secret::generate().map_err(|_| "the OS random generator failed".to_owned())?;
            let text = std::str::from_utf8(s.expose()).map_err(|_| "bad secret encoding".to_owned())?;
            Ok(Zeroizing::new(format!("{text}\n")))
        };
        // One token per role and the caller file that names them (digests
        // only), so every node can share the file while each caller holds
        // its own token. The service token stays, with every scope.
        let roles: [(&'static str, &str, &[&str]); 3] = [
            (
                "token-worker",
                "worker",
                &[
                    "runs",
                    "manifests:sign",
                    "manifests:verify",
                    "grants",
                    "ledger",
                    "policies",
                    "credentials",
                    "admin",
                ],
            ),
            ("token-runner", "runner", &["manifests:verify"]),
            ("token-gateway", "gateway", &["ledger", "egress"]),
        ];
        let mut callers = String::from(
            "# gatehouse callers: GATEHOUSE_CALLERS_FILE. Digests only; each caller holds its own token file.\n",
        );
        let mut role_tokens = Vec::new();
        for (file, name, scopes) in roles {
            let token = secret_line()?;
            let digest = gatehouse_capability::CallerToken::digest_hex(token.trim());
            let scopes: Vec<String> = scopes.iter().map(|s| format!("\"{s}\"")).collect();
            callers.push_str(&format!(
                "\n[[caller]]\nname = \"{name}\"\nscopes = [{}]\ntoken_sha256 = \"{digest}\"\n",
                scopes.join(", ")
            ));
            role_tokens.push((file, token, 0o600));
        }
        let mut files = vec![
            (embedded_files::MANIFEST_PRIVATE_KEY, private, 0o600),
            (embedded_files::MANIFEST_PUBLIC_KEY, Zeroizing::new(public), 0o644),
            (embedded_files::GRANT_SECRET, secret_line()?, 0o600),
            (embedded_files::SERVICE_TOKEN, secret_line()?, 0o600),
            (embedded_files::SESSION_KEY_SECRET, secret_line()?, 0o600),
            (embedded_files::AUDIT_SIGNING_KEY, audit_private, 0o600),
            (embedded_files::AUDIT_PUBLIC_KEY, Zeroizing::new(audit_public), 0o644),
            (embedded_files::CREDENTIAL_SEALING_KEY, sealing_private, 0o600),
            (embedded_files::CREDENTIAL_SEALING_PUBLIC_KEY, Zeroizing::new(sealing_public), 0o644),
            (embedded_files::INTERCEPT_CA_KEY, ca.key_pem(), 0o600),
            (embedded_files::INTERCEPT_CA_CERT, Zeroizing::new(ca.cert_pem().to_owned()), 0o644),
            (
                embedded_files::ADMIN_PASSWORD_HASH,
                Zeroizing::new(format!("{}\n", admin_hash.as_str())),
                0o600,
            ),
        ];
        files.extend(role_tokens);
        files.push(("callers.toml", Zeroizing::new(callers), 0o644));
        Ok(Self { files, admin_password })
    }

    /// The settings page's first password, if this set still holds its hash.
    pub(crate) fn admin_password(&self) -> Option<&str> {
        self.content(embedded_files::ADMIN_PASSWORD_HASH).map(|_| self.admin_password.as_str())
    }

    /// Keeps only the named files.
    pub(crate) fn only(mut self, names: &[&str]) -> Self {
        self.files.retain(|(n, _, _)| names.contains(n));
        self
    }

    /// The file names.
    /// One file's content.
    pub(crate) fn content(&self, name: &str) -> Option<&str> {
        self.files.iter().find(|(n, _, _)| *n == name).map(|(_, c, _)| c.as_str())
    }

    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.files.iter().map(|(n, _, _)| *n).collect()
    }

    /// Writes every file into `dir` (created owner-only if missing). Refuses,
    /// writing nothing, if any of the files already exists.
    pub(crate) fn write_new(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        ensure_private_dir(dir)?;
        for (name, _, _) in &self.files {
            let path = dir.join(name);
            if path.symlink_metadata().is_ok() {
                return Err(format!("{} already exists; refusing to overwrite", path.display()));
            }
        }
        let mut written = Vec::new();
        for (name, content, mode) in &self.files {
            let path = dir.join(name);
            // create_new: O_CREAT|O_EXCL, which also refuses to follow a
            // symlink planted at the path.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(*mode)
                .open(&path)
                .map_err(|e| format!("cannot create {}: {}", path.display(), e.kind()))?;
            f.write_all(content.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("cannot write {}: {}", path.display(), e.kind()))?;
            written.push(path);
        }
        Ok(written)
    }
}

/// Creates `dir` with mode 0700 if missing; tightens an existing data dir
/// that others can read.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {}", dir.display(), e.kind()))?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read {}: {}", dir.display(), e.kind()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(())
}

/// Makes `dir` owner-only (the embedded data dir holds keys).
pub(crate) fn restrict_dir(dir: &Path) -> Result<(), String> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot restrict {}: {}", dir.display(), e.kind()))
}

/// Reads a file a CLI flag names, with an error that names the flag.
pub(crate) fn read_text(flag: &str, path: &Path) -> Result<String, String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("{flag}: cannot read stdin: {}", e.kind()))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("{flag}: cannot read {}: {}", path.display(), e.kind()))
}
