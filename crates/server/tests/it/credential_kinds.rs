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

    let out = python(SANDBOX.into(), vec![s3.endpoint(), via, run_ca.to_str().unwrap().into()]).await;
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
