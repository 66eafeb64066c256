//! Credentials gatehouse mints or signs with at the door, against the real
//! services' verifiers: AWS Signature Version 4 with boto3 in the sandbox
//! (dummy keys) against moto verifying every signature.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gatehouse_test_support::S3Server;
use serde_json::{Value, json};

use crate::support::{LogBuffer, Node, call, node_with, serve_proxy};

/// Runs `script` with python3 off the runtime's threads: its stdout, or a
/// panic with its stderr.
async fn python(script: String, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(&script)
            .args(&args)
            .output()
            .expect("python3 is installed");
        assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// IAM, through moto's unsigned first actions: a user allowed every S3
/// action, and its access key (id, secret). The bucket `runs` is created
/// with the key, signed.
async fn aws_user(endpoint: &str, ca: &Path) -> (String, String) {
    let script = r#"
import boto3, json, sys
ep, ca = sys.argv[1], sys.argv[2]
iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1", verify=ca,
                   aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="unused")
iam.create_user(UserName="run")
iam.put_user_policy(UserName="run", PolicyName="s3", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="run")["AccessKey"]
s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1", verify=ca,
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket="runs")
print(json.dumps([key["AccessKeyId"], key["SecretAccessKey"]]))
"#;
    let out = python(script.into(), vec![endpoint.into(), ca.to_str().unwrap().into()]).await;
    let keys: (String, String) = serde_json::from_str(out.trim()).unwrap();
    keys
}

/// The sandbox: boto3 with dummy keys, through the proxy, trusting the
/// run's CA. Puts, gets and lists; then asks for a presigned URL (made with
/// the dummy keys) and fetches it through the proxy. Prints what it saw.
const SANDBOX: &str = r#"
import boto3, json, sys, urllib.request
from botocore.config import Config
ep, proxy, ca = sys.argv[1], sys.argv[2], sys.argv[3]
s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1", verify=ca,
                  aws_access_key_id="AKIADUMMYDUMMYDUMMY0", aws_secret_access_key="dummy-secret",
                  config=Config(proxies={"https": proxy}, s3={"addressing_style": "path"},
                                retries={"max_attempts": 1}))
seen = {}
def attempt(name, f):
    try:
        seen[name] = f()
    except Exception as e:
        seen[name] = {"error": str(e)}
attempt("put", lambda: s3.put_object(Bucket="runs", Key="out/result.txt", Body=b"made in the sandbox")["ResponseMetadata"]["HTTPStatusCode"])
attempt("get", lambda: s3.get_object(Bucket="runs", Key="out/result.txt")["Body"].read().decode())
attempt("list", lambda: [o["Key"] for o in s3.list_objects_v2(Bucket="runs")["Contents"]])
import ssl
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}),
                                     urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca)))
for version in ["s3", "s3v4"]:
    signer = boto3.client("s3", endpoint_url=ep, region_name="us-east-1", aws_access_key_id="AKIADUMMYDUMMYDUMMY0",
                          aws_secret_access_key="dummy-secret", config=Config(signature_version=version))
    url = signer.generate_presigned_url("get_object", Params={"Bucket": "runs", "Key": "out/result.txt"})
    try:
        opener.open(url)
        seen["presigned " + version] = {"status": 200}
    except urllib.error.HTTPError as e:
        seen["presigned " + version] = {"status": e.code, "body": e.read().decode()}
print(json.dumps(seen))
"#;

async fn node_for(upstream_ca: &Path, port: u16) -> Node {
    let ports = format!("443,{port}");
    let node = node_with(
        "all",
        &[
            ("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.1/32"),
            ("GATEHOUSE_PROXY_CONNECT_PORTS", &ports),
            ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", upstream_ca.to_str().unwrap()),
        ],
    )
    .await;
    // A signature carries the time, which the verifier holds to its own.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    node.clock.set(i64::try_from(now).unwrap());
    node
}

/// A live run of `t1` and a lease on `credential_id` for `host`: the run.
async fn leased_run(node: &Node, credential_id: &str, host: &str) -> Value {
    let run = call(node, "/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}})).await.json();
    let run_id = run["run_id"].as_str().unwrap();
    let lease = call(
        node,
        &format!("/v1/runs/{run_id}/leases"),
        json!({"credential_id": credential_id, "purpose": "runtime_secret", "host": host}),
    )
    .await;
    assert_eq!(lease.status, 201, "{}", lease.text);
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_with_dummy_keys_works_through_the_door_against_a_verifying_s3() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let pki = tempfile::tempdir().unwrap();
    let (key, cert, ca) = crate::mcp::upstream_pki(pki.path());
    let s3 = S3Server::verifying_signatures(&key, &cert, &ca, 3);
    let (access_key_id, secret_access_key) = aws_user(&s3.endpoint(), &ca).await;
    let node = node_for(&ca, s3.port()).await;

    let created = call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "s3", "purpose": "runtime_secret", "kind": "aws_sigv4",
            "access_key_id": access_key_id, "secret_access_key": secret_access_key,
            "region": "us-east-1", "service": "s3", "hosts": ["127.0.0.1"]}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let credential = created.json();
    assert_eq!(credential["kind"], "aws_sigv4");
    assert_eq!(credential["params"], json!({"region": "us-east-1", "service": "s3"}));
    assert_eq!(credential["hosts"], json!(["127.0.0.1"]));
    let run = leased_run(&node, credential["credential_id"].as_str().unwrap(), "127.0.0.1").await;
    let run_ca = pki.path().join("run-ca.pem");
    std::fs::write(&run_ca, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
    let proxy = serve_proxy(&node).await;
    let via = format!("http://grant:{}@{proxy}", run["grant"].as_str().unwrap());

    let out = python(SANDBOX.into(), vec![s3.endpoint(), via.clone(), run_ca.to_str().unwrap().into()]).await;
    let seen: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(seen["put"], 200, "{seen}");
    assert_eq!(seen["get"], "made in the sandbox", "{seen}");
    assert_eq!(seen["list"], json!(["out/result.txt"]), "{seen}");
    // A presigned URL (version 2 or 4) is the run signing; it never goes out.
    for version in ["s3", "s3v4"] {
        let presigned = &seen[format!("presigned {version}")];
        assert_eq!(presigned["status"], 403, "{seen}");
        assert!(presigned["body"].as_str().unwrap().contains("sigv4_presigned_url"), "{seen}");
    }

    // A chunk-signed body only the key's holder could sign: refused, not sent.
    let url = format!("{}/runs/streamed.txt", s3.endpoint());
    let chunked =
        ["-X", "PUT", "-H", "x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "--data", "x", &url];
    let (status, body) = through_with(&via, &run_ca, &chunked).await;
    assert!(status == 403 && body.contains("sigv4_streaming_signed"), "{status} {body}");

    // The fetch API, on the run's behalf, signs the same way.
    let fetched = call(
        &node,
        "/v1/egress/fetch",
        json!({"grant": run["grant"], "purpose": "runtime", "method": "GET",
            "url": format!("{}/runs?list-type=2", s3.endpoint())}),
    )
    .await;
    assert_eq!(fetched.json()["status"], 200, "{}", fetched.text);

    // A person's own request with the credential is signed the same way.
    let listed = call(
        &node,
        &format!("/v1/tenants/t1/credentials/{}/fetch", credential["credential_id"].as_str().unwrap()),
        json!({"actor": "person:ada", "method": "GET", "url": format!("{}/runs?list-type=2", s3.endpoint())}),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(listed.json()["status"], 200, "{}", listed.text);

    // The verifier is real: the sandbox's own dummy signature is refused.
    let direct = r#"
import boto3, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", verify=sys.argv[2],
                  aws_access_key_id=sys.argv[3], aws_secret_access_key="not-the-secret")
try:
    s3.list_objects_v2(Bucket="runs"); print("accepted")
except Exception as e:
    print(type(e).__name__, e)
"#;
    let refused =
        python(direct.into(), vec![s3.endpoint(), ca.to_str().unwrap().into(), access_key_id.clone()]).await;
    assert!(refused.contains("SignatureDoesNotMatch"), "{refused}");

    // The secret never shows: not in the answers, the logs, the metrics or
    // the store's files.
    let metrics = crate::support::get(&node, "/metrics").await.text;
    let listed = crate::support::get(&node, "/v1/tenants/t1/credentials").await.text;
    let printed = logs.since(mark);
    let database = database_bytes(&node);
    assert!(database.len() > 4096, "no database under {}", node.data.path().display());
    for (what, text) in [
        ("the sandbox", out.as_bytes()),
        ("the logs", printed.as_bytes()),
        ("the metrics", metrics.as_bytes()),
        ("the answers", format!("{}{listed}", created.text).as_bytes()),
        ("the database", &database),
    ] {
        let found = text.windows(secret_access_key.len()).any(|w| w == secret_access_key.as_bytes());
        assert!(!found, "the secret access key in {what}");
    }
}

/// The bytes of the node's SQLite files (the database and its WAL).
fn database_bytes(node: &Node) -> Vec<u8> {
    let mut database = Vec::new();
    for entry in std::fs::read_dir(node.data.path()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("gatehouse.db") {
            database.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    database
}

/// Runs `program` with `args` and `env` off the runtime's threads, in
/// `dir`: stdout and stderr together, and whether it succeeded.
async fn sandbox(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let (dir, program) = (dir.to_owned(), program.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&program)
            .args(&args)
            .envs(env)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("{program} is installed: {e}"));
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

/// A GitHub App's key pair as GitHub hands it out: the PKCS#1 private key
/// PEM and the public key PEM.
fn app_key_pair(dir: &Path) -> (String, String) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["genrsa", "-traditional", "-out", "app.pem", "2048"]);
    run(&["rsa", "-in", "app.pem", "-pubout", "-out", "app.pub"]);
    (
        std::fs::read_to_string(dir.join("app.pem")).unwrap(),
        std::fs::read_to_string(dir.join("app.pub")).unwrap(),
    )
}

/// A bare repository `repo.git` under `root` with one commit, which
/// `git http-backend` serves and takes pushes into.
fn bare_repository(root: &Path) {
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.test")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.test")
            .output()
            .expect("git is installed");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    std::fs::create_dir_all(root).unwrap();
    git(root, &["init", "-q", "--bare", "-b", "main", "repo.git"]);
    git(&root.join("repo.git"), &["config", "http.receivepack", "true"]);
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README"), "from the seed\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-q", "-m", "seed"]);
    git(&seed, &["push", "-q", root.join("repo.git").to_str().unwrap(), "main"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_token_is_minted_once_used_by_git_and_the_api_and_revoked_when_unused() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = crate::mcp::upstream_pki_for(tmp.path(), &["127.0.0.1", "127.0.0.2"]);
    let (private_pem, public_pem) = app_key_pair(tmp.path());
    let git_root = tmp.path().join("repos");
    bare_repository(&git_root);
    let github = gatehouse_test_support::TokenServer::start(
        &["127.0.0.1", "127.0.0.2"],
        &key,
        &cert,
        &ca,
        json!({"app_id": 4242, "installation_id": 77, "app_public_key": public_pem, "git_root": git_root}),
    );
    let ports = format!("443,{},{}", github.ports[0], github.ports[1]);
    let node = node_with(
        "all",
        &[
            ("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8"),
            ("GATEHOUSE_PROXY_CONNECT_PORTS", &ports),
            ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", ca.to_str().unwrap()),
            (gatehouse_config::names::ADMIN_PASSWORD_HASH, crate::admin::password_hash()),
        ],
    )
    .await;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap();
    node.clock.set(now);

    // A key that does not parse is refused when given, naming the field.
    let mut body = json!({"name": "app", "purpose": "git_provider", "kind": "github_app", "app_id": 4242,
        "installation_id": 77, "private_key": "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        "api_url": github.origin(0), "hosts": ["127.0.0.1", "127.0.0.2"],
        "repositories": ["repo"], "permissions": {"contents": "write"}});
    let refused = call(&node, "/v1/tenants/t1/credentials", body.clone()).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("private_key"), "{}", refused.text);
    body["private_key"] = json!(private_pem);
    let created = call(&node, "/v1/tenants/t1/credentials", body).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let credential = created.json();
    assert_eq!(credential["kind"], "github_app");
    assert_eq!(credential["params"]["api_url"], github.origin(0));
    let credential_id = credential["credential_id"].as_str().unwrap().to_owned();

    let run = call(&node, "/v1/runs", json!({"tenant_id": "t1", "user_id": "u1", "body": {}})).await.json();
    let run_id = run["run_id"].as_str().unwrap();
    let mut placeholders = Vec::new();
    let mut lease_ids = Vec::new();
    for host in ["127.0.0.1", "127.0.0.2"] {
        let lease = call(
            &node,
            &format!("/v1/runs/{run_id}/leases"),
            json!({"credential_id": credential_id, "purpose": "git_provider", "host": host}),
        )
        .await;
        assert_eq!(lease.status, 201, "{}", lease.text);
        placeholders.push(lease.json()["placeholder"].as_str().unwrap().to_owned());
        lease_ids.push(lease.json()["lease_id"].as_str().unwrap().to_owned());
    }
    let run_ca = tmp.path().join("run-ca.pem");
    std::fs::write(&run_ca, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
    let proxy = format!("http://grant:{}@{}", run["grant"].as_str().unwrap(), serve_proxy(&node).await);
    let run_ca_path = run_ca.to_str().unwrap();
    let work = tmp.path().join("sandbox");
    std::fs::create_dir_all(&work).unwrap();
    let curl = |path: String| {
        let (proxy, work) = (proxy.clone(), work.clone());
        async move {
            sandbox(
                &work,
                "curl",
                &["-s", "-S", "--max-time", "20", "--proxy", &proxy, "--cacert", run_ca_path, &path],
                &[],
            )
            .await
        }
    };

    // The API host: the token as a Bearer, injected without the run naming it.
    let (ok, listed) = curl(format!("{}/installation/repositories", github.origin(0))).await;
    assert!(ok && listed.contains("\"repo\""), "{listed}");
    // An echo of the header comes back as the placeholder.
    let (_, echoed) = curl(format!("{}/echo", github.origin(0))).await;
    assert!(echoed.contains(&format!("Bearer {}", placeholders[0])), "{echoed}");

    // The git host: a real clone and push, the sandbox holding only a placeholder.
    let git_env = [
        ("HTTPS_PROXY", proxy.as_str()),
        ("GIT_SSL_CAINFO", run_ca_path),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_AUTHOR_NAME", "agent"),
        ("GIT_AUTHOR_EMAIL", "agent@example.test"),
        ("GIT_COMMITTER_NAME", "agent"),
        ("GIT_COMMITTER_EMAIL", "agent@example.test"),
    ];
    let remote = format!("https://x-access-token:{}@127.0.0.2:{}/repo.git", placeholders[1], github.ports[1]);
    let (ok, cloned) = sandbox(&work, "git", &["clone", "-q", &remote, "repo"], &git_env).await;
    assert!(ok, "git clone: {cloned}");
    assert_eq!(std::fs::read_to_string(work.join("repo/README")).unwrap(), "from the seed\n");
    std::fs::write(work.join("repo/RESULT"), "made by the agent\n").unwrap();
    let repo = work.join("repo");
    assert!(sandbox(&repo, "git", &["add", "RESULT"], &git_env).await.0);
    assert!(sandbox(&repo, "git", &["commit", "-q", "-m", "agent"], &git_env).await.0);
    let (ok, pushed) = sandbox(&repo, "git", &["push", "-q", "origin", "main"], &git_env).await;
    assert!(ok, "git push: {pushed}");
    let (_, log) = sandbox(&git_root.join("repo.git"), "git", &["log", "--format=%s", "main"], &[]).await;
    assert_eq!(log.lines().collect::<Vec<_>>(), ["agent", "seed"]);

    // Minted once for all of it, narrowed as the credential says.
    let stats = github.stats();
    assert_eq!(stats["mints"], 1, "{stats}");
    assert_eq!(stats["jwt_refused"], 0, "{stats}");
    assert_eq!(
        stats["mint_bodies"][0],
        json!({"repositories": ["repo"], "permissions": {"contents": "write"}})
    );
    assert!(stats["git"].as_u64().unwrap() >= 4, "{stats}");
    let minter = node.state.plane.door_leases.as_ref().unwrap().minter().unwrap().clone();
    assert_eq!(minter.mint_count(), 1);
    // The page shows the kind and when the current token expires.
    let expires =
        gatehouse_plane::mint::Minter::expires_at(node.state.plane.store.as_ref().unwrap(), &credential_id)
            .await;
    assert!(expires.is_some_and(|e| e > now + 3000), "{expires:?}");

    // The settings page shows the kind and when the token expires, not the token.
    let mut person = crate::admin::Visitor::new(&node);
    person.sign_in("ada", crate::admin::PASSWORD).await;
    let page = person.get("/admin/tenants/t1").await.text;
    assert!(page.contains("github_app") && page.contains("token expires: 20"), "{page}");
    assert!(!holds_token(&page, "ghs_", 36));

    // Unused: revoked at GitHub and forgotten.
    for lease_id in &lease_ids {
        assert_eq!(call(&node, &format!("/v1/leases/{lease_id}/revoke"), json!({})).await.status, 200);
    }
    minter.sweep().await;
    let stats = github.stats();
    assert_eq!((stats["revoked"].as_u64(), stats["live_tokens"].as_u64()), (Some(1), Some(0)), "{stats}");

    // Nothing of the token or the key anywhere the run or an operator reads.
    let metrics = crate::support::get(&node, "/metrics").await.text;
    assert!(
        metrics.contains(r#"gatehouse_credential_mints_total{kind="github_app",outcome="ok"}"#),
        "{metrics}"
    );
    let printed = logs.since(mark);
    let database = String::from_utf8_lossy(&database_bytes(&node)).into_owned();
    let key_pieces = rsa_key_pieces(&private_pem);
    for (what, text) in [
        ("the sandbox", format!("{listed}{echoed}{cloned}{pushed}")),
        ("the logs", printed),
        ("the metrics", metrics),
        ("the database", database),
    ] {
        assert!(!holds_token(&text, "ghs_", 36), "a minted token in {what}");
        assert!(!key_pieces.iter().any(|piece| text.contains(piece.as_str())), "the app's key in {what}");
    }
}

/// Pieces of an RSA key to look for in what gatehouse writes: each line of
/// its PEM, and of the PKCS#8 form it is sealed in (a 2048-bit key is too
/// long for every-window searches).
fn rsa_key_pieces(pem: &str) -> Vec<String> {
    let key = gatehouse_capability::github_app::AppKey::from_pem(pem).unwrap();
    let material = key.to_material().unwrap();
    let sealed_form = std::str::from_utf8(material.expose()).unwrap().trim_start_matches("pkcs8:").to_owned();
    let mut pieces: Vec<String> =
        pem.lines().filter(|l| !l.starts_with("-----")).map(str::to_owned).collect();
    pieces.extend(sealed_form.as_bytes().chunks(48).map(|c| String::from_utf8_lossy(c).into_owned()));
    pieces
}

/// A node of role `all` reaching loopback upstreams on `ports` over TLS
/// checked against `ca`, its clock the real one (tokens and signatures
/// carry real times).
async fn node_reaching(ca: &Path, ports: &[u16]) -> Node {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let ports = format!("443,{}", ports.join(","));
    let node = node_with(
        "all",
        &[
            ("GATEHOUSE_EGRESS_ALLOW_RANGES", "127.0.0.0/8"),
            ("GATEHOUSE_PROXY_CONNECT_PORTS", &ports),
            ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", ca.to_str().unwrap()),
        ],
    )
    .await;
    node.clock.set(unix_now());
    node
}

fn unix_now() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

/// curl through `proxy` trusting `ca`: the status line's code and the body.
async fn through(proxy: &str, ca: &Path, url: &str) -> (u16, String) {
    through_with(proxy, ca, &[url]).await
}

/// [`through`] with more of curl's arguments (the URL among them).
async fn through_with(proxy: &str, ca: &Path, args: &[&str]) -> (u16, String) {
    let dir = ca.parent().unwrap();
    let ca = ca.to_str().unwrap();
    let mut all =
        vec!["-s", "-S", "--max-time", "40", "-w", "\n%{http_code}", "--proxy", proxy, "--cacert", ca];
    all.extend_from_slice(args);
    let (_, out) = sandbox(dir, "curl", &all, &[]).await;
    let (body, code) = out.rsplit_once('\n').unwrap_or((&out, "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_access_tokens_are_refreshed_with_each_rotated_refresh_token_and_a_failing_refresh_refuses() {
    let logs = LogBuffer::global();
    let mark = logs.mark();
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = crate::mcp::upstream_pki(tmp.path());
    const CLIENT_SECRET: &str = "cs_9f8e7d6c5b4a39281706f5e4d3c2b1a0";
    const FIRST_REFRESH: &str = "rt_first_0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let oauth = gatehouse_test_support::TokenServer::start(
        &["127.0.0.1"],
        &key,
        &cert,
        &ca,
        json!({"client_id": "gatehouse client", "client_secret": CLIENT_SECRET,
            "refresh_token": FIRST_REFRESH, "expires_in": 20}),
    );
    let node = node_reaching(&ca, &oauth.ports).await;
    let created = call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "provider", "purpose": "runtime_secret", "kind": "oauth2_refresh",
            "token_url": format!("{}/oauth/token", oauth.origin(0)), "client_id": "gatehouse client",
            "client_secret": CLIENT_SECRET, "refresh_token": FIRST_REFRESH, "scope": "read write",
            "host": "127.0.0.1"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let credential_id = created.json()["credential_id"].as_str().unwrap().to_owned();
    let run = leased_run(&node, &credential_id, "127.0.0.1").await;
    let run_ca = tmp.path().join("run-ca.pem");
    std::fs::write(&run_ca, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
    let proxy = format!("http://grant:{}@{}", run["grant"].as_str().unwrap(), serve_proxy(&node).await);
    let resource = format!("{}/oauth/resource", oauth.origin(0));

    // Refreshed once, then reused with no round trip.
    for _ in 0..3 {
        assert_eq!(through(&proxy, &run_ca, &resource).await.0, 200);
    }
    assert_eq!(oauth.stats()["refreshes"], 1);
    let (_, echoed) = through(&proxy, &run_ca, &format!("{}/echo", oauth.origin(0))).await;
    assert!(echoed.contains("Bearer gatehouse_lease_"), "the token echoed back as the placeholder: {echoed}");
    // Half-way through the token's twenty seconds, the rotated refresh token.
    let run_id = run["run_id"].as_str().unwrap();
    let heartbeat = format!("/v1/runs/{run_id}/heartbeat");
    let advance = |secs: i64| {
        node.clock.advance(secs);
        call(&node, &heartbeat, json!({}))
    };
    assert_eq!(advance(11).await.status, 200);
    assert_eq!(through(&proxy, &run_ca, &resource).await.0, 200);
    let stats = oauth.stats();
    assert_eq!((stats["refreshes"].as_u64(), stats["reused"].as_u64()), (Some(2), Some(0)), "{stats}");
    // A person's own request uses the same token, minted once for both.
    let used = call(
        &node,
        &format!("/v1/tenants/t1/credentials/{credential_id}/fetch"),
        json!({"actor": "person:ada", "method": "GET", "url": resource}),
    )
    .await;
    assert_eq!(used.json()["status"], 200, "{}", used.text);
    assert_eq!(oauth.stats()["refreshes"], 2);

    // A refresh that fails refuses, retryable, never with the old token.
    for mode in ["garbage", "expired", "refuse", "slow"] {
        oauth.set_mode(mode);
        assert_eq!(advance(21).await.status, 200);
        let (status, body) = through(&proxy, &run_ca, &resource).await;
        assert_eq!(status, 503, "{mode}: {body}");
        assert!(body.contains("lease_unavailable"), "{mode}: {body}");
    }
    let stats = oauth.stats();
    assert_eq!(stats["resource_refused"], 0, "no stale token ever reached the resource: {stats}");
    let metrics = crate::support::get(&node, "/metrics").await.text;
    for outcome in ["mint_answer_invalid", "mint_token_expired", "mint_refused", "mint_timeout"] {
        let sample =
            format!(r#"gatehouse_credential_mints_total{{kind="oauth2_refresh",outcome="{outcome}"}} 1"#);
        assert!(metrics.contains(&sample), "{sample} in {metrics}");
    }
    let printed = logs.since(mark);
    let database = String::from_utf8_lossy(&database_bytes(&node)).into_owned();
    for (what, text) in [
        ("the logs", &printed),
        ("the metrics", &metrics),
        ("the database", &database),
        ("the sandbox", &echoed),
    ] {
        for secret in [CLIENT_SECRET, FIRST_REFRESH] {
            assert!(!text.contains(secret), "{secret} in {what}");
        }
        for prefix in ["rt_", "at_"] {
            assert!(!holds_token(text, prefix, 32), "a minted {prefix} token in {what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_mint_that_goes_wrong_refuses_with_nothing_injected() {
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = crate::mcp::upstream_pki(tmp.path());
    let (private_pem, public_pem) = app_key_pair(tmp.path());
    let github = gatehouse_test_support::TokenServer::start(
        &["127.0.0.1"],
        &key,
        &cert,
        &ca,
        json!({"app_id": 99, "installation_id": 5, "app_public_key": public_pem, "git_root": tmp.path()}),
    );
    let node = node_reaching(&ca, &github.ports).await;
    let credential = call(
        &node,
        "/v1/tenants/t1/credentials",
        json!({"name": "app", "purpose": "runtime_secret", "kind": "github_app", "app_id": 99,
            "installation_id": 5, "private_key": private_pem, "api_url": github.origin(0), "hosts": ["127.0.0.1"]}),
    )
    .await
    .json();
    let credential_id = credential["credential_id"].as_str().unwrap();
    let proxy_addr = serve_proxy(&node).await;
    let run_ca = tmp.path().join("run-ca.pem");
    // A new run holding a lease on the app, at the node's time: its proxy URL.
    let new_run = || async {
        let run = leased_run(&node, credential_id, "127.0.0.1").await;
        std::fs::write(&run_ca, run["ca_certificate_pem"].as_str().unwrap()).unwrap();
        format!("http://grant:{}@{proxy_addr}", run["grant"].as_str().unwrap())
    };
    let echo = format!("{}/echo", github.origin(0));
    let refused = |what: &'static str, proxy: String| {
        let (run_ca, echo, node) = (run_ca.clone(), echo.clone(), &node);
        async move {
            let (status, body) = through(&proxy, &run_ca, &echo).await;
            if status != 503 {
                let refusals = crate::support::refusals(node).await;
                panic!("{what}: {status} {body} {refusals:?}");
            }
            assert!(body.contains("lease_unavailable") && !holds_token(&body, "ghs_", 36), "{what}: {body}");
        }
    };
    let proxy = new_run().await;
    for mode in ["garbage", "no_expiry", "expired", "refuse"] {
        github.set_mode(mode);
        refused(mode, proxy.clone()).await;
    }
    // A clock skewed past the JWT's window: GitHub refuses the JWT itself.
    github.set_mode("normal");
    node.clock.set(unix_now() - 700);
    refused("a clock twelve minutes slow", new_run().await).await;
    assert_eq!(github.stats()["jwt_refused"], 1);
    node.clock.set(unix_now());
    let (status, body) = through(&new_run().await, &run_ca, &echo).await;
    assert_eq!(status, 200, "{body}");
    let stats = github.stats();
    // Tokens issued: the one answered without an expiry, the expired one,
    // and the good one (the garbage and the refusals issued none).
    assert_eq!(stats["mints"], 3, "{stats}");
    let metrics = crate::support::get(&node, "/metrics").await.text;
    for (outcome, n) in
        [("mint_answer_invalid", 2), ("mint_token_expired", 1), ("mint_refused", 2), ("ok", 1)]
    {
        let sample =
            format!(r#"gatehouse_credential_mints_total{{kind="github_app",outcome="{outcome}"}} {n}"#);
        assert!(metrics.contains(&sample), "{sample} in {metrics}");
    }
}

/// Whether `text` holds `prefix` followed by `hex` hex digits: a token the
/// test servers mint.
fn holds_token(text: &str, prefix: &str, hex: usize) -> bool {
    text.match_indices(prefix).any(|(at, _)| {
        let rest = &text.as_bytes()[at + prefix.len()..];
        rest.len() >= hex && rest[..hex].iter().all(u8::is_ascii_hexdigit)
    })
}

/// A run of `t1` created on the node at `api_addr`, holding a lease on
/// `credential_id` for each of `hosts`: its grant.
fn cluster_run(api_addr: &str, credential_id: &str, purpose: &str, hosts: &[&str]) -> String {
    use crate::proxy::api;
    let run = api(api_addr, "POST", "/v1/runs", &json!({"tenant_id": "t1", "user_id": "u1", "body": {}}));
    let run_id = run["run_id"].as_str().unwrap_or_else(|| panic!("{run}"));
    for host in hosts {
        let lease = api(
            api_addr,
            "POST",
            &format!("/v1/runs/{run_id}/leases"),
            &json!({"credential_id": credential_id, "purpose": purpose, "host": host}),
        );
        assert!(lease["lease_id"].is_string(), "{lease}");
    }
    run["grant"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_works_through_two_nodes_on_postgres_and_redis_and_racing_refreshes_never_reuse_a_token() {
    use crate::leases_cluster::start_node;
    use crate::proxy::api;
    let db = gatehouse_test_support::TestDatabase::create();
    let redis = gatehouse_test_support::RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = crate::mcp::upstream_pki_for(tmp.path(), &["127.0.0.1", "127.0.0.2"]);
    let (private_pem, public_pem) = app_key_pair(tmp.path());
    let git_root = tmp.path().join("repos");
    bare_repository(&git_root);
    const CLIENT_SECRET: &str = "cs_cluster_5f4e3d2c1b0a99887766554433221100";
    let upstream = gatehouse_test_support::TokenServer::start(
        &["127.0.0.1", "127.0.0.2"],
        &key,
        &cert,
        &ca,
        json!({"app_id": 7, "installation_id": 8, "app_public_key": public_pem, "git_root": git_root,
            "client_id": "fleet", "client_secret": CLIENT_SECRET, "refresh_token": "rt_initial_cluster",
            "expires_in": 4}),
    );
    let s3 = S3Server::verifying_signatures(&key, &cert, &ca, 3);
    let (access_key_id, secret_access_key) = aws_user(&s3.endpoint(), &ca).await;

    let (ca_key, ca_cert) = crate::support::intercept_ca();
    let run_ca = tmp.path().join("run-ca.pem");
    std::fs::write(&run_ca, ca_cert).unwrap();
    let (redis_url, ports) =
        (redis.url(), format!("443,{},{},{}", upstream.ports[0], upstream.ports[1], s3.port()));
    let settings = [
        ("GATEHOUSE_DATABASE_URL", db.url()),
        ("GATEHOUSE_REDIS_URL", redis_url.as_str()),
        ("GATEHOUSE_PROXY_CONNECT_PORTS", ports.as_str()),
        ("GATEHOUSE_EGRESS_EXTRA_CA_FILE", ca.to_str().unwrap()),
        ("GATEHOUSE_INTERCEPT_CA_KEY", ca_key.as_str()),
        ("GATEHOUSE_INTERCEPT_CA_CERT", ca_cert.as_str()),
    ];
    let manifest_key = crate::support::private_key_pem();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start_node(dir_a.path(), &manifest_key, &settings);
    let b = start_node(dir_b.path(), &manifest_key, &settings);
    let create = |body: Value| {
        let created = api(&a.api, "POST", "/v1/tenants/t1/credentials", &body);
        created["credential_id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
    };
    let github = create(json!({"name": "app", "purpose": "git_provider", "kind": "github_app", "app_id": 7,
        "installation_id": 8, "private_key": private_pem, "api_url": upstream.origin(0),
        "hosts": ["127.0.0.1", "127.0.0.2"]}));
    let oauth = create(json!({"name": "provider", "purpose": "runtime_secret", "kind": "oauth2_refresh",
        "token_url": format!("{}/oauth/token", upstream.origin(0)), "client_id": "fleet",
        "client_secret": CLIENT_SECRET, "refresh_token": "rt_initial_cluster", "host": "127.0.0.2"}));
    let aws = create(json!({"name": "s3", "purpose": "runtime_secret", "kind": "aws_sigv4",
        "access_key_id": access_key_id, "secret_access_key": secret_access_key, "region": "us-east-1",
        "service": "s3", "hosts": ["127.0.0.1"]}));
    let via =
        |node: &crate::leases_cluster::Node, grant: &str| format!("http://grant:{grant}@{}", node.proxy);

    // GitHub: the API through A, git through B, one mint for the fleet.
    let grant = cluster_run(&a.api, &github, "git_provider", &["127.0.0.1", "127.0.0.2"]);
    let (status, listed) =
        through(&via(&a, &grant), &run_ca, &format!("{}/installation/repositories", upstream.origin(0)))
            .await;
    assert_eq!(status, 200, "{listed}");
    let work = tmp.path().join("sandbox");
    std::fs::create_dir_all(&work).unwrap();
    let proxy_b = via(&b, &grant);
    let git_env = [
        ("HTTPS_PROXY", proxy_b.as_str()),
        ("GIT_SSL_CAINFO", run_ca.to_str().unwrap()),
        ("GIT_TERMINAL_PROMPT", "0"),
    ];
    let remote = format!("https://127.0.0.2:{}/repo.git", upstream.ports[1]);
    let (ok, cloned) = sandbox(&work, "git", &["clone", "-q", &remote, "repo"], &git_env).await;
    assert!(ok, "git clone through B: {cloned}");
    assert_eq!(upstream.stats()["mints"], 1, "B used the token A minted");

    // SigV4: boto3 through each node.
    let grant = cluster_run(&a.api, &aws, "runtime_secret", &["127.0.0.1"]);
    for node in [&a, &b] {
        let out =
            python(SANDBOX.into(), vec![s3.endpoint(), via(node, &grant), run_ca.to_str().unwrap().into()])
                .await;
        let seen: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(
            (seen["put"].as_u64(), seen["get"].as_str()),
            (Some(200), Some("made in the sandbox")),
            "{seen}"
        );
    }

    // OAuth: tokens of four seconds, refreshed half-way, requests racing on
    // both nodes for twelve seconds. Every refresh presents the refresh
    // token in force; none is ever presented twice.
    let grant = cluster_run(&a.api, &oauth, "runtime_secret", &["127.0.0.2"]);
    let resource = format!("{}/oauth/resource", upstream.origin(1));
    let (via_a, via_b) = (via(&a, &grant), via(&b, &grant));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(12);
    let mut answered = 0;
    while std::time::Instant::now() < until {
        let (first, second) =
            tokio::join!(through(&via_a, &run_ca, &resource), through(&via_b, &run_ca, &resource));
        assert_eq!((first.0, second.0), (200, 200), "{first:?} {second:?}");
        answered += 2;
    }
    let stats = upstream.stats();
    assert_eq!(stats["reused"], 0, "a refresh token presented twice: {stats}");
    assert_eq!(stats["resource_refused"], 0, "{stats}");
    let refreshes = stats["refreshes"].as_u64().unwrap();
    assert!(
        (4..=13).contains(&refreshes),
        "about one refresh each two seconds, not one per request ({answered} answered): {stats}"
    );

    // Nothing secret in the database the fleet shares.
    let dump = std::process::Command::new(crate::leases_cluster::pg_dump())
        .args(["--no-owner", "--dbname", db.url()])
        .output()
        .unwrap();
    assert!(dump.status.success(), "pg_dump: {}", String::from_utf8_lossy(&dump.stderr));
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(dump.contains("credential_tokens"), "the dump holds the shared tokens' table");
    for secret in [CLIENT_SECRET, "rt_initial_cluster", secret_access_key.as_str()] {
        assert!(!dump.contains(secret), "a secret in the database");
    }
    for (prefix, hex) in [("ghs_", 36), ("at_", 32), ("rt_", 32)] {
        assert!(!holds_token(&dump, prefix, hex), "a minted {prefix} token in the database");
    }
    // Nor in the ledger's Redis.
    let ledger = String::from_utf8_lossy(&redis.snapshot()).into_owned();
    assert!(!ledger.is_empty(), "the snapshot holds the ledger");
    for secret in [CLIENT_SECRET, "rt_initial_cluster", secret_access_key.as_str()] {
        assert!(!ledger.contains(secret), "a secret in Redis");
    }
    for (prefix, hex) in [("ghs_", 36), ("at_", 32), ("rt_", 32)] {
        assert!(!holds_token(&ledger, prefix, hex), "a minted {prefix} token in Redis");
    }
    let _ = (a.terminate(), b.terminate());
}
