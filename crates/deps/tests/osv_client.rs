//! The OSV client's protocol handling: batching, pagination, retries and the
//! failures that must fail the scan. The end-to-end path (client → egress
//! door → `gatehouse osv serve`) is tested in the server suite; this scripted
//! transport stands in only for answers a real server does not give on
//! demand (a 503 then a success, a short batch, garbage, a runaway page token).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use gatehouse_deps::osv_client::{ClientConfig, OsvClient, OsvError, Response, Transport, TransportFuture};
use gatehouse_deps::{Ecosystem, Package};
use serde_json::{Value, json};

/// Answers requests from a script, recording what was asked.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<Result<Response, String>>>,
    asked: Mutex<Vec<(String, Option<Value>)>>,
}

impl Scripted {
    fn new(answers: Vec<Result<(u16, Value), String>>) -> Self {
        let answers = answers
            .into_iter()
            .map(|a| a.map(|(status, body)| Response { status, body: serde_json::to_vec(&body).unwrap() }))
            .collect();
        Self { answers: Mutex::new(answers), asked: Mutex::default() }
    }

    fn next(&self, url: &str, body: Option<Value>) -> Result<Response, String> {
        self.asked.lock().unwrap().push((url.to_owned(), body));
        self.answers.lock().unwrap().pop_front().unwrap_or_else(|| Err("script exhausted".into()))
    }
}

impl Transport for &Scripted {
    fn post_json<'a>(&'a self, url: &'a str, body: Vec<u8>) -> TransportFuture<'a> {
        let body = serde_json::from_slice(&body).ok();
        Box::pin(async move { self.next(url, body) })
    }
    fn get<'a>(&'a self, url: &'a str) -> TransportFuture<'a> {
        Box::pin(async move { self.next(url, None) })
    }
}

fn config(batch_size: usize) -> ClientConfig {
    ClientConfig {
        base_url: "https://osv.example/".into(),
        attempts: 3,
        backoff: Duration::from_millis(1),
        batch_size,
        max_pages: 3,
    }
}

fn packages(n: usize) -> Vec<Package> {
    (0..n).map(|i| Package::new(Ecosystem::Npm, &format!("p{i}"), "1.0.0")).collect()
}

#[tokio::test]
async fn batches_follow_pages_and_map_ids_to_packages() {
    let script = Scripted::new(vec![
        Ok((200, json!({"results": [{"vulns": [{"id": "GHSA-1", "modified": "x"}]}, {}]}))),
        Ok((200, json!({"results": [{"vulns": [{"id": "GHSA-2"}], "next_page_token": "t1"}]}))),
        Ok((200, json!({"results": [{"vulns": [{"id": "GHSA-3"}]}]}))),
    ]);
    let client = OsvClient::new(&script, config(2));
    let ids = client.query_ids(&packages(3)).await.unwrap();
    let ids: Vec<Vec<&str>> = ids.iter().map(|s| s.iter().map(String::as_str).collect()).collect();
    assert_eq!(ids, vec![vec!["GHSA-1"], vec![], vec!["GHSA-2", "GHSA-3"]]);
    let asked = script.asked.lock().unwrap();
    assert_eq!(
        asked[0].0, "https://osv.example/v1/querybatch",
        "a trailing slash in the base URL is dropped"
    );
    assert_eq!(asked[0].1.as_ref().unwrap()["queries"].as_array().unwrap().len(), 2, "batches of two");
    let q = &asked[0].1.as_ref().unwrap()["queries"][0];
    assert_eq!(q, &json!({"package": {"name": "p0", "ecosystem": "npm"}, "version": "1.0.0"}));
    assert_eq!(asked[2].1.as_ref().unwrap()["queries"][0]["page_token"], "t1", "the next page is asked for");
}

#[tokio::test]
async fn transient_failures_are_retried_then_fail_the_scan() {
    let script = Scripted::new(vec![
        Ok((503, json!({}))),
        Err("upstream_timeout".into()),
        Ok((200, json!({"results": [{}]}))),
    ]);
    let client = OsvClient::new(&script, config(10));
    assert!(client.query_ids(&packages(1)).await.is_ok(), "the third attempt succeeds");

    let script = Scripted::new(vec![Ok((503, json!({}))), Ok((429, json!({}))), Ok((502, json!({})))]);
    let client = OsvClient::new(&script, config(10));
    assert_eq!(client.query_ids(&packages(1)).await, Err(OsvError::Status(502)));

    let script = Scripted::new(vec![Ok((400, json!({"message": "bad"})))]);
    let client = OsvClient::new(&script, config(10));
    assert_eq!(client.query_ids(&packages(1)).await, Err(OsvError::Status(400)), "a 4xx is not retried");
    assert_eq!(script.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn answers_that_do_not_add_up_fail_the_scan() {
    for (answer, why) in [
        (json!({"results": [{}]}), "one result for two queries: a partial batch"),
        (json!({"results": "nope"}), "not the documented shape"),
        (json!({"results": [{"vulns": [{"id": "../../etc/passwd"}]}, {}]}), "an id that is not an OSV id"),
    ] {
        let script = Scripted::new(vec![Ok((200, answer))]);
        let client = OsvClient::new(&script, config(10));
        let e = client.query_ids(&packages(2)).await.unwrap_err();
        assert_eq!(e.code(), "osv_malformed", "{why}");
    }
    // A page token that never ends.
    let page = || Ok((200, json!({"results": [{"next_page_token": "again"}]})));
    let script = Scripted::new(vec![page(), page(), page(), page(), page()]);
    let client = OsvClient::new(&script, config(10));
    assert_eq!(client.query_ids(&packages(1)).await.unwrap_err().code(), "osv_malformed");
}

#[tokio::test]
async fn each_advisory_is_fetched_once() {
    let script = Scripted::new(vec![Ok((200, json!({"id": "GHSA-1"}))), Ok((200, json!({"id": "GHSA-2"})))]);
    let client = OsvClient::new(&script, config(10));
    let ids = ["GHSA-1".to_owned(), "GHSA-2".to_owned()].into_iter().collect();
    let raw = client.fetch_vulns(&ids).await.unwrap();
    assert_eq!(raw.len(), 2);
    let asked: Vec<String> = script.asked.lock().unwrap().iter().map(|a| a.0.clone()).collect();
    assert_eq!(asked, ["https://osv.example/v1/vulns/GHSA-1", "https://osv.example/v1/vulns/GHSA-2"]);
}
