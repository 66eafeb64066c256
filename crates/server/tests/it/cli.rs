//! The `gatehouse` binary: the command-line contract (exit codes, `--json`
//! shapes) and the embedded first start, run as a user would run them.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_gatehouse");

/// A command with an empty environment (plus PATH), so the developer's own
/// settings never leak into a test.
pub(crate) fn gatehouse(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = c.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.to_str().unwrap().to_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Panics if `output` carries any of the secrets written in `dir` (its
/// owner-only files: private keys, `grant-secret`, `service-token`, ...),
/// whole or in part, in any form (PEM, DER, base64, hex: see
/// `gatehouse_test_support::leaks`). Returns how many were checked.
fn assert_no_secret_from(dir: &Path, output: &str, what: &str) -> usize {
    use gatehouse_test_support::leaks::{find_key_material, pem_der};
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !path.is_file() || mode(&path) & 0o077 != 0 {
            continue;
        }
        let Ok(content) = std::fs::read_to_string(&path) else { continue };
        let secret = if content.contains("PRIVATE KEY-----") {
            let der = pem_der(&content);
            assert!(
                find_key_material(&der, content.as_bytes()).is_some(),
                "the check cannot see {name} itself"
            );
            der
        } else if content.len() > 4096 || content.trim().len() < 16 {
            continue;
        } else {
            content.trim().as_bytes().to_vec()
        };
        gatehouse_test_support::assert_no_key_material(&secret, output, &format!("{what} ({name})"));
        checked += 1;
    }
    checked
}

#[test]
fn keygen_writes_owner_only_files_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("keys");
    let (code, stdout, stderr) = run(gatehouse(tmp.path()).args(["keygen", "--out"]).arg(&out));
    assert_eq!(code, 0);
    for (name, want) in [
        ("manifest-private.pem", 0o600),
        ("grant-secret", 0o600),
        ("service-token", 0o600),
        ("manifest-public.pem", 0o644),
    ] {
        assert_eq!(mode(&out.join(name)), want, "{name}");
    }
    assert_eq!(mode(&out), 0o700);
    let grant = std::fs::read_to_string(out.join("grant-secret")).unwrap();
    assert!(grant.trim().len() >= 32);
    // Every secret keygen writes: the manifest, audit, credential sealing
    // and interception CA keys, the grant, session key and service secrets,
    // the settings page password's hash, one token per role.
    assert_eq!(assert_no_secret_from(&out, &format!("{stdout}{stderr}"), "keygen's output"), 11);
    // The password itself is shown once and kept only as its hash.
    let password =
        stdout.lines().find_map(|l| l.split("(shown once, only its hash is kept): ").nth(1)).unwrap();
    let hash = std::fs::read_to_string(out.join("admin-password-hash")).unwrap();
    assert!(gatehouse_capability::AdminPasswordHash::parse(&hash).unwrap().verify(password.trim()));
    assert!(!hash.contains(password.trim()));
    assert!(
        std::fs::read_to_string(out.join("manifest-private.pem"))
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    assert!(
        std::fs::read_to_string(out.join("manifest-public.pem"))
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----")
    );

    let (code, stdout, stderr) = run(gatehouse(tmp.path()).args(["keygen", "--out"]).arg(&out));
    assert_eq!(code, 2);
    assert!(stderr.contains("refusing to overwrite"), "{stderr}");
    assert_no_secret_from(&out, &format!("{stdout}{stderr}"), "keygen's refusal");
    assert_eq!(std::fs::read_to_string(out.join("grant-secret")).unwrap(), grant, "nothing was overwritten");
}

#[test]
fn manifest_sign_and_verify_follow_the_cli_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(gatehouse(dir).args(["keygen", "--out", "k"]));
    let claims = write(
        dir,
        "claims.json",
        r#"{"exec_id":"exec-9","tenant_id":"t","user_id":"u","input_files":["in.txt"]}"#,
    );
    let body = write(dir, "body.json", r#"{"b": [1, 2], "a": "x"}"#);
    let same_body = write(dir, "same.json", "{\"a\":\"x\",\n \"b\":[1,2]}");
    let other_body = write(dir, "other.json", r#"{"a": "y", "b": [1, 2]}"#);

    let (code, token, stderr) = run(gatehouse(dir).args([
        "manifest",
        "sign",
        "--key",
        "k/manifest-private.pem",
        "--claims",
        &claims,
        "--body",
        &body,
    ]));
    assert_eq!(code, 0, "{stderr}");
    let token = token.trim().to_owned();
    assert_eq!(token.split('.').count(), 3, "the token alone on stdout");
    assert_no_secret_from(&dir.join("k"), &format!("{token}{stderr}"), "manifest sign");

    let (code, out, _) = run(gatehouse(dir).args([
        "manifest",
        "verify",
        "--public-key",
        "k/manifest-public.pem",
        "--body",
        &same_body,
        &token,
        "--json",
    ]));
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["claims"]["exec_id"], "exec-9");
    assert!(v["claims"]["exp"].as_i64().unwrap() - v["claims"]["iat"].as_i64().unwrap() == 300);

    let (code, out, _) = run(gatehouse(dir).args([
        "manifest",
        "verify",
        "--public-key",
        "k/manifest-public.pem",
        "--body",
        &other_body,
        &token,
        "--json",
    ]));
    assert_eq!(code, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"valid": false, "reason": "manifest_body_mismatch"})
    );

    // The token can come from stdin, out of sight of `ps`.
    let mut child = gatehouse(dir)
        .args(["manifest", "verify", "--public-key", "k/manifest-public.pem", "--body", &body, "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(token.as_bytes()).unwrap();
    assert!(child.wait_with_output().unwrap().status.success());

    // Bad input is exit 2 with one line on stderr: a private key where the
    // public key belongs, an unreadable key, a body that is not JSON.
    let (code, _, stderr) = run(gatehouse(dir).args([
        "manifest",
        "verify",
        "--public-key",
        "k/manifest-private.pem",
        "--body",
        &body,
        &token,
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("key_wrong_type"), "{stderr}");
    assert_no_secret_from(&dir.join("k"), &stderr, "a private key refused as a public key");
    let (code, _, _) = run(gatehouse(dir).args([
        "manifest",
        "verify",
        "--public-key",
        "missing.pem",
        "--body",
        &body,
        &token,
    ]));
    assert_eq!(code, 2);
    let not_json = write(dir, "bad.json", "{\"a\":1,\"a\":2}");
    let (code, _, _) = run(gatehouse(dir).args([
        "manifest",
        "sign",
        "--key",
        "k/manifest-private.pem",
        "--claims",
        &claims,
        "--body",
        &not_json,
    ]));
    assert_eq!(code, 2);
}

#[test]
fn grant_mint_and_open_follow_the_cli_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(gatehouse(dir).args(["keygen", "--out", "k"]));
    let claims = write(
        dir,
        "claims.json",
        r#"{"grant_id":"g-1","exec_id":"e","tenant_id":"t","user_id":"u","max_requests":7}"#,
    );
    let (code, token, stderr) =
        run(gatehouse(dir).args(["grant", "mint", "--secret-file", "k/grant-secret", "--claims", &claims]));
    assert_eq!(code, 0, "{stderr}");
    let token = token.trim().to_owned();
    assert!(token.starts_with("ceg1."));

    let (code, out, _) =
        run(gatehouse(dir).args(["grant", "open", "--secret-file", "k/grant-secret", &token, "--json"]));
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["valid"].clone(), v["claims"]["grant_id"].clone(), v["claims"]["max_requests"].clone()),
        (json!(true), json!("g-1"), json!(7))
    );

    let mut tampered = token.clone().into_bytes();
    let i = tampered.len() - 3;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let (code, out, _) =
        run(gatehouse(dir).args(["grant", "open", "--secret-file", "k/grant-secret", &tampered, "--json"]));
    assert_eq!(code, 1);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["reason"], "grant_tampered");

    let weak = write(dir, "weak", "short-secret\n");
    let (code, _, stderr) =
        run(gatehouse(dir).args(["grant", "open", "--secret-file", &weak, &token, "--json"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("weak_secret") && !stderr.contains("short-secret"), "{stderr}");

    let forged = write(
        dir,
        "forged.json",
        r#"{"exec_id":"e","tenant_id":"t","user_id":"u","session_key":"sk1_mine"}"#,
    );
    let (code, _, stderr) =
        run(gatehouse(dir).args(["grant", "mint", "--secret-file", "k/grant-secret", "--claims", &forged]));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn rotating_the_grant_secret_leaves_storage_namespaces_where_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(gatehouse(dir).args(["keygen", "--out", "k"]));
    let claims = write(dir, "claims.json", r#"{"exec_id":"e","tenant_id":"t","user_id":"u"}"#);
    let session_key = |grant_secret: &str, extra: &[&str]| {
        let (code, token, stderr) = run(gatehouse(dir)
            .args(["grant", "mint", "--secret-file", grant_secret, "--claims", &claims])
            .args(extra));
        assert_eq!(code, 0, "{stderr}");
        let (_, out, _) = run(gatehouse(dir).args([
            "grant",
            "open",
            "--secret-file",
            grant_secret,
            token.trim(),
            "--json",
        ]));
        serde_json::from_str::<Value>(&out).unwrap()["claims"]["session_key"].as_str().unwrap().to_owned()
    };
    let before = session_key("k/grant-secret", &[]);
    let rotated = write(dir, "rotated-grant-secret", "rotated-0123456789abcdefghijklmnopqrstuvwxyz\n");
    let after = session_key(&rotated, &["--session-key-file", "k/session-key-secret"]);
    assert_eq!(before, after, "the namespace derives from its own key, not the grant secret");
    let other = write(dir, "other-sessions", "other-sessions-0123456789abcdefghijklmnopqrstuvwxyz\n");
    assert_ne!(session_key("k/grant-secret", &["--session-key-file", &other]), before);

    // Without a session key secret beside it or named, nothing is minted;
    // nor with the grant secret standing in for one.
    let (code, _, stderr) =
        run(gatehouse(dir).args(["grant", "mint", "--secret-file", &rotated, "--claims", &claims]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--session-key-file"), "{stderr}");
    let (code, _, stderr) = run(gatehouse(dir).args([
        "grant",
        "mint",
        "--secret-file",
        "k/grant-secret",
        "--session-key-file",
        "k/grant-secret",
        "--claims",
        &claims,
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("secret_reused"), "{stderr}");
}

#[test]
fn config_check_lists_every_problem_and_serve_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(gatehouse(dir).args(["keygen", "--out", "k"]));
    let insecure = |c: &mut Command| {
        c.env("GATEHOUSE_ROLE", "runner")
            .env("GATEHOUSE_LISTEN", "0.0.0.0:8700")
            .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY_FILE", "k/manifest-private.pem")
            .env("CODEAPI_AUTH_PROVIDER", "none")
            .env("LOCAL_MODE", "true");
    };
    let mut c = gatehouse(dir);
    insecure(&mut c);
    let (code, out, stderr) = run(c.args(["config", "check", "--json"]));
    assert_eq!(code, 2);
    assert_no_secret_from(&dir.join("k"), &format!("{out}{stderr}"), "config check");
    let v: Value = serde_json::from_str(&out).unwrap();
    let codes: Vec<(String, String)> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["setting"].as_str().unwrap().to_owned(), p["code"].as_str().unwrap().to_owned()))
        .collect();
    for want in [
        ("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY", "forbidden_for_role"),
        ("CODEAPI_AUTH_PROVIDER", "insecure_combination"),
        ("LOCAL_MODE", "insecure_combination"),
        ("SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY", "missing_required"),
    ] {
        assert!(codes.iter().any(|(s, c)| s == want.0 && c == want.1), "missing {want:?} in {codes:?}");
    }

    let mut c = gatehouse(dir);
    insecure(&mut c);
    let (code, _, stderr) = run(c.arg("serve"));
    assert_eq!(code, 2, "serve must refuse to start");
    assert!(stderr.contains("refusing to start") && stderr.contains("forbidden_for_role"), "{stderr}");
    assert!(!stderr.contains("PRIVATE KEY"), "{stderr}");
    assert_no_secret_from(&dir.join("k"), &stderr, "serve's refusal");

    // A secure runner passes.
    let (code, out, stderr) = run(gatehouse(dir)
        .env("SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY_FILE", "k/manifest-public.pem")
        .env("CODEAPI_INTERNAL_SERVICE_TOKEN_FILE", "k/service-token")
        .args(["config", "check", "--role", "runner"]));
    assert_eq!(code, 0, "{out}{stderr}");

    // An embedded first start with a bad setting refuses before it writes
    // anything: no data directory, no keys.
    let fresh = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(gatehouse(fresh.path())
        .env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_IDLE_TIMEOUT_MS", "soon")
        .arg("serve"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("GATEHOUSE_IDLE_TIMEOUT_MS"), "{stderr}");
    assert!(!fresh.path().join("gatehouse-data").exists(), "keys were written before the start was refused");
}

pub(crate) struct Server(Child);

impl Server {
    /// SIGKILL: the node dies with whatever it held in memory.
    pub(crate) fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    /// Sends SIGTERM, as an orchestrator does, and waits for the exit.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        self.0.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[allow(clippy::disallowed_methods, reason = "a test client talking to the server under test on loopback")]
pub(crate) fn http(addr: &str, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// Starts `gatehouse serve` and waits for its "listening on" line. Returns the
/// process guard, the address, what it printed up to then, and a thread
/// collecting its stderr until it exits.
pub(crate) fn spawn_server(
    mut command: Command,
) -> (Server, String, String, std::thread::JoinHandle<String>) {
    let mut child = command.arg("serve").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Server(child);
    let stderr_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    let mut printed = String::new();
    let mut addr = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = BufReader::new(stdout).lines();
    while addr.is_none() && Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        printed.push_str(&line);
        printed.push('\n');
        // The API's line ends with the role; the proxy prints its own line.
        if let Some(rest) = line.split("listening on http://").nth(1).filter(|_| line.contains("(role ")) {
            addr = rest.split_whitespace().next().map(str::to_owned);
        }
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let Some(addr) = addr else {
        drop(server);
        panic!("no listening line in: {printed}\nstderr: {}", stderr_thread.join().unwrap_or_default());
    };
    (server, addr, printed, stderr_thread)
}

#[test]
fn the_embedded_first_start_works_with_no_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut command = gatehouse(dir);
    command.env("GATEHOUSE_LISTEN", "127.0.0.1:0").env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0");
    let (server, addr, printed, stderr_thread) = spawn_server(command);
    assert!(addr.starts_with("127.0.0.1:"), "binds loopback only");

    let data = dir.join("gatehouse-data");
    assert_eq!(mode(&data), 0o700);
    for f in ["manifest-private.pem", "grant-secret", "service-token"] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    assert!(printed.contains("generated") && printed.contains("service-token"), "{printed}");
    let token = std::fs::read_to_string(data.join("service-token")).unwrap().trim().to_owned();
    let grant_secret = std::fs::read_to_string(data.join("grant-secret")).unwrap().trim().to_owned();
    assert!(!printed.contains(&token) && !printed.contains(&grant_secret), "secrets printed: {printed}");
    // The manifest, credential sealing and interception CA keys, the
    // grant, session key and service secrets, and the password's hash.
    assert_eq!(assert_no_secret_from(&data, &printed, "the first start's output"), 7);
    let password = printed.lines().find_map(|l| l.split("(only its hash is kept): ").nth(1)).unwrap();
    let hash = std::fs::read_to_string(data.join("admin-password-hash")).unwrap();
    assert!(gatehouse_capability::AdminPasswordHash::parse(&hash).unwrap().verify(password.trim()));
    assert_eq!(mode(&data.join("admin-password-hash")), 0o600);

    let health = http(&addr, "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    let body = json!({"claims": {"exec_id": "e1", "tenant_id": "t1", "user_id": "u1"}, "body": {"code": "print(1)"}}).to_string();
    let sign = http(
        &addr,
        &format!(
            "POST /v1/manifests/sign HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(sign.starts_with("HTTP/1.1 200"), "{sign}");
    assert!(sign.contains("\"token\":\"ey"), "{sign}");

    drop(server);
    let logs = stderr_thread.join().unwrap();
    assert!(!logs.contains(&token) && !logs.contains(&grant_secret), "secrets logged: {logs}");
    assert!(!logs.contains(password.trim()), "the password is printed once, never logged");
    assert_eq!(assert_no_secret_from(&data, &logs, "the first start's logs"), 7);

    // A second start reuses the keys instead of generating new ones.
    let (code, out, _) = run(gatehouse(dir).args(["config", "check"]));
    assert_eq!(code, 0, "{out}");
    assert_eq!(std::fs::read_to_string(data.join("service-token")).unwrap().trim(), token);
}

#[test]
fn egress_check_follows_the_cli_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let check = |args: &[&str]| {
        let (code, out, err) = run(gatehouse(dir).args(["egress", "check", "--json"]).args(args));
        let json = if code == 2 {
            Value::Null
        } else {
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"))
        };
        (code, json)
    };
    let (code, v) = check(&[
        "https://example.com/x?key=secret",
        "--resolve",
        "example.com=93.184.216.34,2606:2800:220:1::1",
    ]);
    assert_eq!(code, 0);
    assert_eq!(v["decision"], "allow");
    assert_eq!(v["addresses"], json!(["93.184.216.34", "2606:2800:220:1::1"]));
    assert!(!v.to_string().contains("secret"));

    for (url, reason) in [
        ("http://2130706433/", "host_noncanonical_ip"),
        ("http://[::ffff:127.0.0.1]/", "address_embedded_ipv4"),
        ("http://169.254.169.254/latest/meta-data/", "address_metadata"),
        ("http://user:pw@example.com/", "userinfo_present"),
        ("gopher://example.com/", "scheme_not_allowed"),
        ("http://localhost:8080/", "host_special_use_name"),
        ("http://127.0.0.1:8080/", "address_special_purpose"),
    ] {
        let (code, v) = check(&[url]);
        assert_eq!(
            (code, v["decision"].as_str(), v["reason"].as_str()),
            (1, Some("refuse"), Some(reason)),
            "{url}"
        );
    }
    let (code, v) = check(&["https://rebind.example/", "--resolve", "rebind.example=93.184.216.34,10.0.0.5"]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("address_special_purpose")));

    let policy = write(
        dir,
        "policy.json",
        r#"{"mode":"allowlist","allow":["api.github.com"],"deny":["93.184.216.0/24"]}"#,
    );
    let (code, v) = check(&["https://example.com/", "--policy", &policy, "--resolve", "example.com=1.1.1.1"]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("policy_not_allowed")));
    let (code, v) =
        check(&["https://api.github.com/", "--policy", &policy, "--resolve", "api.github.com=93.184.216.9"]);
    assert_eq!(
        (code, v["reason"].as_str(), v["rule"].as_str()),
        (1, Some("policy_denied"), Some("93.184.216.0/24"))
    );
    let broken = write(dir, "broken.json", r#"{"mode":"allowlist","allow":["*"]}"#);
    let (code, v) =
        check(&["https://api.github.com/", "--policy", &broken, "--resolve", "api.github.com=1.1.1.1"]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("policy_unreadable")));

    // Operator-opened ranges, never the metadata addresses.
    let (code, _) = check(&["http://10.1.2.3/", "--allow-ranges", "10.0.0.0/8"]);
    assert_eq!(code, 0);
    let (code, v) = check(&["http://169.254.169.254/", "--allow-ranges", "169.254.0.0/16"]);
    assert_eq!((code, v["reason"].as_str()), (1, Some("address_metadata")));

    let (code, v) = check(&["https://hooks.example/", "--webhook", "--resolve", "hooks.example=1.1.1.1"]);
    assert_eq!((code, v["max_redirects"].as_u64()), (0, Some(0)));
    assert_eq!(check(&["https://x.example/", "--resolve", "x.example"]).0, 2);
    assert_eq!(check(&["https://x.example/", "--resolve", "x.example=not-an-ip"]).0, 2);
}

#[test]
fn only_the_gateway_and_all_roles_run_the_proxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(gatehouse(dir).args(["keygen", "--out", "k"]));
    let base = |role: &str| {
        let mut c = gatehouse(dir);
        c.env("GATEHOUSE_ROLE", role)
            .env("GATEHOUSE_LISTEN", "127.0.0.1:0")
            .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
            .env("CODEAPI_INTERNAL_SERVICE_TOKEN_FILE", "k/service-token");
        c
    };
    let mut gateway = base("gateway");
    gateway
        .env("CODEAPI_EGRESS_GRANT_SECRET_FILE", "k/grant-secret")
        .env("GATEHOUSE_CREDENTIAL_SEALING_KEY_FILE", "k/credential-sealing-key")
        .env("GATEHOUSE_INTERCEPT_CA_KEY_FILE", "k/intercept-ca-key.pem")
        .env("GATEHOUSE_INTERCEPT_CA_CERT_FILE", "k/intercept-ca.pem");
    let (_g, _, printed, _) = spawn_server(gateway);
    assert!(printed.contains("egress proxy listening"), "{printed}");
    let mut worker = base("worker");
    worker
        .env("CODEAPI_EGRESS_GRANT_SECRET_FILE", "k/grant-secret")
        .env("GATEHOUSE_SESSION_KEY_SECRET_FILE", "k/session-key-secret")
        .env("CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY_FILE", "k/manifest-private.pem")
        .env("GATEHOUSE_CREDENTIAL_SEALING_PUBLIC_KEY_FILE", "k/credential-sealing-public-key")
        .env("GATEHOUSE_INTERCEPT_CA_CERT_FILE", "k/intercept-ca.pem");
    let (_w, _, printed, _) = spawn_server(worker);
    assert!(!printed.contains("egress proxy"), "{printed}");
    let mut runner = base("runner");
    runner.env("SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY_FILE", "k/manifest-public.pem");
    let (_r, _, printed, _) = spawn_server(runner);
    assert!(!printed.contains("egress proxy"), "{printed}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "test clients talking to the server under test on loopback")]
fn both_listeners_cut_slow_headers_and_cap_connections_per_client() {
    let tmp = tempfile::tempdir().unwrap();
    let mut command = gatehouse(tmp.path());
    command
        .env("GATEHOUSE_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_PROXY_LISTEN", "127.0.0.1:0")
        .env("GATEHOUSE_HEADER_READ_TIMEOUT_MS", "400")
        .env("GATEHOUSE_MAX_CONNECTIONS_PER_CLIENT", "2");
    let (_server, api, printed, _) = spawn_server(command);
    let proxy = crate::proxy::proxy_address(&printed);
    // Reads until the server closes; returns what came and how long it took.
    let held_open = |stream: &mut std::net::TcpStream| {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let started = Instant::now();
        let mut got = Vec::new();
        // A socket closed with unread bytes in it is reset, not ended.
        match stream.read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the server kept a connection open ({e})"),
        }
        (String::from_utf8_lossy(&got).into_owned(), started.elapsed())
    };
    for addr in [&api, &proxy] {
        // A header that never ends is cut at the header timeout.
        let mut slow = std::net::TcpStream::connect(addr.as_str()).unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a").unwrap();
        let (answer, held) = held_open(&mut slow);
        assert_eq!(answer, "", "{addr}");
        assert!(held >= Duration::from_millis(300) && held < Duration::from_secs(3), "{addr}: held {held:?}");
        // Two connections from this address are served; a third is closed unread.
        let a = std::net::TcpStream::connect(addr.as_str()).unwrap();
        let b = std::net::TcpStream::connect(addr.as_str()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = std::net::TcpStream::connect(addr.as_str()).unwrap();
        let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        let (answer, held) = held_open(&mut third);
        assert_eq!(answer, "", "{addr}: a connection over the cap was answered");
        assert!(held < Duration::from_millis(300), "{addr}: held {held:?}");
        drop((a, b));
    }
    std::thread::sleep(Duration::from_millis(600));
    let metrics = http(&api, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    for line in [
        "gatehouse_connections_total{listener=\"api\",outcome=\"closed_header_timeout\"} 1",
        "gatehouse_connections_total{listener=\"proxy\",outcome=\"closed_header_timeout\"} 1",
        "gatehouse_connections_total{listener=\"api\",outcome=\"refused_client_full\"} 1",
        "gatehouse_connections_total{listener=\"proxy\",outcome=\"refused_client_full\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line} in {metrics}");
    }
}

#[test]
fn a_command_whose_reader_goes_away_exits_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = (0..5000).map(|i| format!("pkg{i}==1.0.{i}\n")).collect::<String>();
    std::fs::write(tmp.path().join("requirements.txt"), lock).unwrap();
    let mut child = gatehouse(tmp.path())
        .args(["deps", "parse", "requirements.txt", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader takes a few bytes and leaves, as `| head -c 10` does.
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

#[test]
fn admin_hash_password_reads_stdin_and_prints_only_the_hash() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().unwrap();
    let hash = |input: &str| {
        let mut child = gatehouse(tmp.path())
            .args(["admin", "hash-password"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = hash("s3cret pass phrase\n");
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("s3cret") && !err.contains("s3cret"));
    let parsed = gatehouse_capability::AdminPasswordHash::parse(out.trim()).unwrap();
    assert!(parsed.verify("s3cret pass phrase") && !parsed.verify("s3cret pass phrase\n"));
    // The hash it prints is one the configuration accepts; a weak one is refused.
    let (code, stdout, stderr) =
        run(gatehouse(tmp.path()).args(["config", "check", "--role", "worker"]).env(
            "GATEHOUSE_ADMIN_PASSWORD_HASH",
            "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
        ));
    let out = format!("{stdout}{stderr}");
    assert_eq!(code, 2, "a bad configuration: {out}");
    assert!(out.contains("admin_password_hash_weak"), "{out}");
    let (code, _, err) = hash("\n");
    assert_eq!(code, Some(2), "an empty password is refused: {err}");
}
