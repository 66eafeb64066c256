//! Files across processes: two `gatehouse serve` nodes on one PostgreSQL,
//! one Redis and one S3-compatible server. A file stored through one node
//! is read through the other, a run's budget is one budget whichever node
//! its sandbox calls, and a deletion on one is seen at once by the other.

use gatehouse_test_support::{RedisServer, S3Server, TestDatabase};
use serde_json::Value;

use crate::files::{curl, served_run};
use crate::leases_cluster::start_node;
use crate::support::{TOKEN, private_key_pem};

const BUCKET: &str = "gatehouse-cluster";

/// A run of t1/u1 created on `node` (100 upload bytes): its grant as an
/// `Authorization` header.
fn run_on(node: &str, inputs: &[&str], reads: &[&str], output: &str) -> String {
    format!("authorization: Bearer {}", served_run(node, inputs, reads, output, 100))
}

/// Sends `content` to `url` with `auth`: the status and the JSON answer.
fn send(method: &str, auth: &str, content: &str, url: &str) -> (u16, Value) {
    let (status, body) = curl(&["-X", method, "-H", auth, "--data-binary", content, url]);
    (status, serde_json::from_str(&body).unwrap_or_else(|_| panic!("{status} {body}")))
}

fn reason(answer: &Value) -> &str {
    answer["error"]["reason"].as_str().unwrap_or_default()
}

#[test]
fn two_nodes_share_files_records_and_budgets() {
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    let redis_url = redis.url();
    let s3_env = s3.env();
    let mut settings = vec![
        ("GATEHOUSE_DATABASE_URL", db.url()),
        ("GATEHOUSE_REDIS_URL", redis_url.as_str()),
        ("GATEHOUSE_OBJECT_STORE_URL", "s3://gatehouse-cluster/files"),
    ];
    settings.extend(s3_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let manifest_key = private_key_pem();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start_node(dir_a.path(), &manifest_key, &settings);
    let b = start_node(dir_b.path(), &manifest_key, &settings);
    let service = format!("authorization: Bearer {TOKEN}");

    // The platform stores an input through A; a run created on B reads it
    // through B and through A.
    let (status, stored) = send(
        "POST",
        &service,
        "the brief",
        &format!("http://{}/v1/files?tenant_id=t1&user_id=u1&resource=r1&name=brief.txt", a.api),
    );
    assert_eq!(status, 201, "{stored}");
    let input = stored["file_id"].as_str().unwrap().to_owned();
    let writer = run_on(&b.api, &[&input], &[], "out-1");
    for node in [&a.api, &b.api] {
        let (status, body) = curl(&["-H", &writer, &format!("http://{node}/v1/files/{input}")]);
        assert_eq!((status, body.as_str()), (200, "the brief"), "through {node}");
    }

    // One budget (100 bytes) whichever node the sandbox calls: 60 through
    // A, then 60 more through B is refused before a byte is kept.
    let sixty = "x".repeat(60);
    let (status, kept) =
        send("PUT", &writer, &sixty, &format!("http://{}/v1/sessions/out-1/files/a.txt", a.api));
    assert_eq!(status, 201, "{kept}");
    let (status, refused) =
        send("PUT", &writer, &sixty, &format!("http://{}/v1/sessions/out-1/files/b.txt", b.api));
    assert_eq!((status, reason(&refused)), (403, "budget_upload_bytes_exhausted"), "{refused}");

    // The session written through A is read through B by a run created on
    // A, and holds exactly what was kept.
    let reader = run_on(&a.api, &[], &["out-1"], "out-2");
    let (status, listing) = send("GET", &reader, "", &format!("http://{}/v1/sessions/out-1/files", b.api));
    assert_eq!(status, 200, "{listing}");
    let names: Vec<&str> =
        listing["items"].as_array().unwrap().iter().filter_map(|f| f["name"].as_str()).collect();
    assert_eq!(names, ["a.txt"]);
    let (status, body) = curl(&["-H", &reader, &format!("http://{}/v1/sessions/out-1/files/a.txt", b.api)]);
    assert_eq!((status, body), (200, sixty.clone()));

    // The platform deletes the input through B: A no longer serves it,
    // and its object is gone from the bucket.
    let (status, _) = send("DELETE", &service, "", &format!("http://{}/v1/tenants/t1/files/{input}", b.api));
    assert_eq!(status, 200);
    let (status, gone) = send("GET", &writer, "", &format!("http://{}/v1/files/{input}", a.api));
    assert_eq!((status, reason(&gone)), (404, "file_unknown"), "{gone}");
    let keys = s3.keys(BUCKET);
    assert_eq!(keys.len(), 1, "only a.txt is left: {keys:?}");
    assert!(keys[0].starts_with("files/ns/sk1_"), "{keys:?}");
}
