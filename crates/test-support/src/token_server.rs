//! Token endpoints over TLS on loopback (`upstreams/token_server.py`,
//! Python with PyPI's `cryptography`, which `moto[server]` brings): GitHub's
//! installation-token and revoke endpoints verifying the app's RS256 JWT,
//! git over HTTPS with the minted token (`git http-backend`), and an OAuth
//! token endpoint rotating refresh tokens and refusing a reused one.
//! Stopped on drop.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

pub struct TokenServer {
    child: Child,
    /// One port per address asked for, in order.
    pub ports: Vec<u16>,
    addresses: Vec<String>,
    ca: PathBuf,
}

impl TokenServer {
    /// Starts one on each of `addresses` (the first answers `/stats`),
    /// with the certificate `cert` and its `key`, checked against `ca`, and
    /// `config`: `app_id`, `installation_id`, `app_public_key` (PEM),
    /// `git_root`; `client_id`, `client_secret`, `refresh_token`,
    /// `expires_in`.
    pub fn start(addresses: &[&str], key: &Path, cert: &Path, ca: &Path, mut config: Value) -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("upstreams/token_server.py");
        config["addresses"] = json!(addresses);
        config["cert"] = json!(cert);
        config["key"] = json!(key);
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(config.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 is installed");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut line).expect("the token server prints its ports");
        let ports: Vec<u16> = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("token server did not start ({e}): {line}"));
        let addresses = addresses.iter().map(|a| (*a).to_owned()).collect();
        Self { child, ports, addresses, ca: ca.to_owned() }
    }

    /// `https://ADDRESS:PORT` of the `i`th address.
    pub fn origin(&self, i: usize) -> String {
        format!("https://{}:{}", self.addresses[i], self.ports[i])
    }

    /// What happened so far: mints, refusals, refreshes, reuses, git requests.
    pub fn stats(&self) -> Value {
        serde_json::from_slice(&self.curl(&["/stats"])).unwrap()
    }

    /// Makes mints misbehave: `normal`, `garbage`, `no_expiry`, `expired`,
    /// `slow`, `refuse`.
    pub fn set_mode(&self, mode: &str) {
        let body = json!({"mode": mode}).to_string();
        self.curl(&["/control", "-X", "POST", "--data", &body]);
    }

    fn curl(&self, args: &[&str]) -> Vec<u8> {
        let (path, rest) = args.split_first().expect("a path");
        let out = Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "--cacert"])
            .arg(&self.ca)
            .arg(format!("{}{path}", self.origin(0)))
            .args(rest)
            .output()
            .expect("curl is installed");
        assert!(out.status.success(), "token server {path}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
