//! A fleet as it runs in production: three `gatehouse serve` nodes on one
//! real PostgreSQL and one real Redis, behind a round-robin balancer on
//! loopback (a few lines below, like a Service's: a connection goes to the
//! next node that takes it). A run is driven through all three; one node is
//! SIGKILLed mid-run and another SIGTERMed; then every node is restarted in
//! turn under traffic.
//!
//! What must hold: no budget lost or spent twice (the requests answered
//! equal the ledger's count, and no more are answered than the budget);
//! every revocation (a grant, a lease, the kill switch) in force on every
//! survivor within 2 s; every refusal a client was answered is in the
//! store, except what a SIGKILLed node had not yet written: its record is
//! written off the request path, in batches gathered for 20 ms, so SIGKILL
//! can lose at most the refusals it answered in its last moments (the
//! batch in hand and the one gathering), which this test counts; SIGTERM
//! loses none (the listeners stop, the requests in hand are answered, the
//! queue is written, then the process exits).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_test_support::{RedisServer, TestDatabase};
use serde_json::json;

use crate::cli::http;
use crate::leases::Echo;
use crate::leases_cluster::{Node, create_credential, lease, refused_with, start_node, str_of};
use crate::plane::within;
use crate::proxy::api;
use crate::support::private_key_pem;

/// Round robin over the nodes' addresses; a node that refuses the
/// connection (dead, or stopping) is skipped, as a load balancer's health
/// checks would soon skip it.
struct Balancer {
    addr: String,
    backends: Arc<Mutex<Vec<String>>>,
}

impl Balancer {
    #[allow(
        clippy::disallowed_methods,
        reason = "a test balancer on loopback in front of the nodes under test"
    )]
    fn start(backends: Vec<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let backends = Arc::new(Mutex::new(backends));
        let shared = backends.clone();
        std::thread::spawn(move || {
            let next = AtomicUsize::new(0);
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let list = shared.lock().unwrap().clone();
                let upstream = (0..list.len()).find_map(|_| {
                    let at = &list[next.fetch_add(1, Ordering::Relaxed) % list.len()];
                    TcpStream::connect_timeout(&at.parse().unwrap(), Duration::from_secs(1)).ok()
                });
                // No node takes it: the client's connection is closed.
                let Some(upstream) = upstream else { continue };
                let (client_back, upstream_back) =
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || pipe(client, upstream_back));
                std::thread::spawn(move || pipe(upstream, client_back));
            }
        });
        Self { addr, backends }
    }

    fn replace(&self, old: &str, new: &str) {
        for at in self.backends.lock().unwrap().iter_mut().filter(|at| at.as_str() == old) {
            *at = new.to_owned();
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// The fleet: its nodes (None once killed or stopped) and its two doors.
struct Fleet {
    nodes: Vec<Option<Node>>,
    dirs: Vec<tempfile::TempDir>,
    settings: Vec<(String, String)>,
    manifest_key: String,
    api: Balancer,
    proxy: Balancer,
}

impl Fleet {
    fn start(settings: Vec<(String, String)>) -> Self {
        let manifest_key = private_key_pem();
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let pairs: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let nodes: Vec<Node> = dirs.iter().map(|d| start_node(d.path(), &manifest_key, &pairs)).collect();
        let api = Balancer::start(nodes.iter().map(|n| n.api.clone()).collect());
        let proxy = Balancer::start(nodes.iter().map(|n| n.proxy.clone()).collect());
        Self { nodes: nodes.into_iter().map(Some).collect(), dirs, settings, manifest_key, api, proxy }
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("a live node")
    }

    /// A new process in node `i`'s place (a new port, as a new pod gets a
    /// new address), put into both balancers.
    fn restart(&mut self, i: usize, old: (&str, &str)) {
        let pairs: Vec<(&str, &str)> = self.settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let node = start_node(self.dirs[i].path(), &self.manifest_key, &pairs);
        self.api.replace(old.0, &node.api);
        self.proxy.replace(old.1, &node.proxy);
        self.nodes[i] = Some(node);
    }

    /// SIGTERM node `i`; it must exit cleanly, having written its queue.
    fn terminate(&mut self, i: usize) -> (String, String) {
        let node = self.nodes[i].take().unwrap();
        let addrs = (node.api.clone(), node.proxy.clone());
        let (status, log) = node.terminate();
        assert!(status.success(), "node {i} exited with {status}: {log}");
        assert!(!log.contains("are lost"), "node {i} lost events: {log}");
        addrs
    }
}

/// What a sandbox's requests came to.
#[derive(Default, Debug)]
struct Tally {
    /// Answered 200 by the upstream.
    allowed: usize,
    /// Refused by the policy (after the spend), by the host asked for.
    refused_hosts: Vec<String>,
    /// Refused because the budget was spent.
    exhausted: usize,
}

impl Tally {
    /// Requests the ledger must have counted: everything answered but
    /// what the budget refused.
    fn spent(&self) -> usize {
        self.allowed + self.refused_hosts.len()
    }
}

/// One request as the sandbox makes it (curl, through `proxy`); a
/// connection closed without an answer (a node that stopped before
/// reading it) is tried again, as a client would.
fn sandbox(proxy: &str, grant: &str, url: &str, tally: &mut Tally) {
    for _ in 0..50 {
        let out = Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "-D", "-", "-o", "/dev/null", "-x"])
            .arg(format!("http://grant:{grant}@{proxy}"))
            .arg(url)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        if out.starts_with("HTTP/1.1 200") {
            tally.allowed += 1;
            return;
        }
        if refused_with(&out, "policy_denied") {
            tally.refused_hosts.push(url.split('/').nth(2).unwrap().to_owned());
            return;
        }
        if refused_with(&out, "budget_requests_exhausted") {
            tally.exhausted += 1;
            return;
        }
        assert!(out.is_empty(), "an answer the test does not expect: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no node answered {url}");
}

fn new_run(api_addr: &str, tenant: &str, max_requests: u64) -> (String, String) {
    let run = api(
        api_addr,
        "POST",
        "/v1/runs",
        &json!({"tenant_id": tenant, "user_id": "u1", "body": {"code": "print(1)"},
            "budgets": {"max_requests": max_requests, "max_egress_bytes": 100_000_000}}),
    );
    (str_of(&run, "run_id").to_owned(), str_of(&run, "grant").to_owned())
}

/// The ledger's count of a grant's requests, as `node` reads it.
fn ledger_requests(api_addr: &str, grant: &str) -> u64 {
    let opened = api(api_addr, "POST", "/v1/grants/open", &json!({"token": grant}));
    opened["ledger"]["request_count"].as_u64().unwrap_or_else(|| panic!("{opened}"))
}

/// The hosts of a run's policy refusals in the store, every page.
fn stored_refusal_hosts(api_addr: &str, run_id: &str) -> BTreeSet<String> {
    let mut hosts = BTreeSet::new();
    let mut cursor = String::new();
    loop {
        let page = api(
            api_addr,
            "GET",
            &format!("/v1/refusals?run_id={run_id}&reason=policy_denied&limit=500{cursor}"),
            &json!({}),
        );
        for item in page["items"].as_array().unwrap_or_else(|| panic!("{page}")) {
            hosts.insert(item["host"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return hosts,
        }
    }
}

/// Hosts refused and answered but not (yet) in the store.
fn missing(answered: &[String], api_addr: &str, run_id: &str) -> Vec<String> {
    let stored = stored_refusal_hosts(api_addr, run_id);
    answered.iter().filter(|h| !stored.contains(*h)).cloned().collect()
}

fn admin_password_hash(password: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .env_clear()
        .args(["admin", "hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The settings page's tenant page on `api_addr`, signed in as a person.
fn tenant_page(api_addr: &str, password: &str, tenant: &str) -> String {
    let form = format!("person=ops&password={password}");
    let signed_in = http(
        api_addr,
        &format!(
            "POST /admin/login HTTP/1.1\r\nhost: {api_addr}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    let cookie = signed_in
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no session: {signed_in}"))
        .to_owned();
    http(
        api_addr,
        &format!(
            "GET /admin/tenants/{tenant} HTTP/1.1\r\nhost: {api_addr}\r\ncookie: {cookie}\r\nconnection: close\r\n\r\n"
        ),
    )
}

#[test]
fn a_fleet_loses_no_budget_revocation_or_refusal_when_nodes_die_or_restart() {
    let db = TestDatabase::create();
    let redis = RedisServer::start();
    let upstream = Echo::start("127.0.0.1", 0);
    let password = "fleet-drill-password-7f3a9c";
    let settings: Vec<(String, String)> = [
        ("GATEHOUSE_DATABASE_URL", db.url().to_owned()),
        ("GATEHOUSE_REDIS_URL", redis.url()),
        ("GATEHOUSE_SHUTDOWN_DRAIN_SECS", "10".to_owned()),
        ("GATEHOUSE_ADMIN_PASSWORD_HASH", admin_password_hash(password)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut fleet = Fleet::start(settings);
    let allowed_url = format!("http://127.0.0.1:{}/ok", upstream.port);
    for tenant in ["t1", "t2"] {
        let policy = json!({"mode": "allowlist", "allow": ["127.0.0.1"], "deny": ["*.denied.test"]});
        let set = api(&fleet.api.addr, "PUT", &format!("/v1/tenants/{tenant}/egress-policy"), &policy);
        assert_eq!(set["version"], 1, "{set}");
    }
    // The policy, set on one node, is in force on every node within 2 s.
    let (_, probe) = new_run(&fleet.api.addr, "t2", 1000);
    for i in 0..3 {
        let proxy = fleet.node(i).proxy.clone();
        let took = within(Duration::from_secs(2), || {
            let out = Command::new("curl")
                .args(["-s", "-D", "-", "-o", "/dev/null", "-x"])
                .arg(format!("http://grant:{probe}@{proxy}"))
                .arg("http://probe.denied.test/")
                .output()
                .unwrap();
            refused_with(&String::from_utf8_lossy(&out.stdout), "policy_denied")
        });
        assert!(took.is_some(), "node {i} does not deny by the policy 2 s after it was set");
    }
    let denied = AtomicUsize::new(0);
    let denied_url = || format!("http://r{}.denied.test/", denied.fetch_add(1, Ordering::Relaxed));

    // A run with a budget of 60 requests, driven through all three nodes.
    let budget = 60;
    let (run1, grant1) = new_run(&fleet.api.addr, "t1", budget);
    let mut tally = Tally::default();
    for i in 0..15 {
        let url = if i % 3 == 2 { denied_url() } else { allowed_url.clone() };
        sandbox(&fleet.proxy.addr, &grant1, &url, &mut tally);
    }
    assert_eq!((tally.allowed, tally.refused_hosts.len()), (10, 5));
    assert!(upstream.count() >= 10);

    // Node 0 answers refusals; a second later, a burst, and SIGKILL at once.
    let node0_proxy = fleet.node(0).proxy.clone();
    for _ in 0..5 {
        sandbox(&node0_proxy, &grant1, &denied_url(), &mut tally);
    }
    let written_before_kill = tally.refused_hosts.clone();
    std::thread::sleep(Duration::from_secs(1));
    let mut burst = Tally::default();
    for _ in 0..10 {
        sandbox(&node0_proxy, &grant1, &denied_url(), &mut burst);
    }
    fleet.nodes[0].as_mut().unwrap().kill();
    fleet.nodes[0] = None;

    // The survivors finish the run's budget: exactly what is left, no more.
    let mut rest = Tally::default();
    while rest.exhausted == 0 {
        sandbox(&fleet.proxy.addr, &grant1, &allowed_url, &mut rest);
        assert!(rest.allowed <= budget as usize, "more answered than the budget");
    }
    let spent = tally.spent() + burst.spent() + rest.spent();
    assert_eq!(spent, budget as usize, "requests answered beside the budget: {tally:?} {burst:?} {rest:?}");
    for i in [1, 2] {
        assert_eq!(ledger_requests(&fleet.node(i).api, &grant1), budget, "node {i}'s ledger");
    }
    // Every refusal answered before the kill's last moments is in the
    // store; of the burst, what was lost is counted and bounded.
    let survivor = fleet.node(1).api.clone();
    let mut lost = Vec::new();
    let settled = within(Duration::from_secs(5), || {
        lost = missing(&written_before_kill, &survivor, &run1);
        lost.is_empty()
    });
    assert!(settled.is_some(), "refusals answered a second before the kill are gone: {lost:?}");
    let lost_in_burst = missing(&burst.refused_hosts, &survivor, &run1);
    eprintln!(
        "SIGKILL lost {} of the {} refusals answered in the node's last moments",
        lost_in_burst.len(),
        burst.refused_hosts.len()
    );
    // The node writes its queue in order, a whole batch per transaction,
    // so what it lost is the newest it answered and nothing before it.
    let newest = &burst.refused_hosts[burst.refused_hosts.len() - lost_in_burst.len()..];
    assert_eq!(lost_in_burst, newest, "a SIGKILL loses only the last unwritten refusals");

    // Revocations, each made on one survivor, in force on both within 2 s.
    let (b, c) = (fleet.node(1).api.clone(), fleet.node(2).api.clone());
    let (b_proxy, c_proxy) = (fleet.node(1).proxy.clone(), fleet.node(2).proxy.clone());
    let refused_on = |proxy: &str, grant: &str, url: &str, reasons: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "-D", "-", "-o", "/dev/null", "-x"])
            .arg(format!("http://grant:{grant}@{proxy}"))
            .arg(url)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        reasons.iter().any(|r| refused_with(&out, r))
    };
    // A grant revoked on B.
    let (run2, grant2) = new_run(&fleet.api.addr, "t1", 100);
    let revoked = api(&b, "POST", "/v1/grants/revoke", &json!({"exec_id": run2}));
    assert!(revoked["revoked"].as_u64().unwrap_or(0) >= 1, "{revoked}");
    for proxy in [&b_proxy, &c_proxy] {
        let took =
            within(Duration::from_secs(2), || refused_on(proxy, &grant2, &allowed_url, &["grant_revoked"]));
        assert!(took.is_some(), "a grant revoked on one node still spends on {proxy}");
    }
    // A lease revoked on C: its placeholder injects nothing anywhere.
    let credential = create_credential(&b, "fleet-secret-never-shown-8d1e");
    let (run3, grant3) = new_run(&fleet.api.addr, "t1", 100);
    let granted = lease(&c, &run3, str_of(&credential, "credential_id"));
    let lease_id = str_of(&granted, "lease_id").to_owned();
    let revoked = api(&c, "POST", &format!("/v1/leases/{lease_id}/revoke"), &json!({}));
    assert_eq!(revoked, json!({"revoked": 1}));
    for proxy in [&b_proxy, &c_proxy] {
        let took =
            within(Duration::from_secs(2), || refused_on(proxy, &grant3, &allowed_url, &["lease_revoked"]));
        assert!(took.is_some(), "a lease revoked on one node still injects on {proxy}");
    }
    for node in [&b, &c] {
        let listed = api(node, "GET", &format!("/v1/leases?run_id={run3}"), &json!({}));
        assert_eq!(listed["items"][0]["status"], "revoked", "{listed}");
    }
    // The kill switch thrown on C: B refuses the tenant's run and new runs.
    let (_run4, grant4) = new_run(&fleet.api.addr, "t1", 100);
    let killed =
        api(&c, "POST", "/v1/tenants/t1/kill-switch", &json!({"engaged": true, "reason": "fleet drill"}));
    assert!(killed["revoked"]["runs"].as_u64().unwrap_or(0) >= 2, "{killed}");
    for proxy in [&b_proxy, &c_proxy] {
        let took = within(Duration::from_secs(2), || {
            refused_on(proxy, &grant4, &allowed_url, &["grant_revoked", "tenant_kill_switch"])
        });
        assert!(took.is_some(), "a kill-switched tenant still spends on {proxy}");
    }
    for node in [&b, &c] {
        let refused = api(node, "POST", "/v1/runs", &json!({"tenant_id": "t1", "user_id": "u1", "body": {}}));
        assert_eq!(refused["error"]["reason"], "tenant_kill_switch", "{refused}");
    }

    // Node 1 answers a burst of refusals and is stopped at once (SIGTERM):
    // every one is in the store.
    let (run5, grant5) = new_run(&c, "t2", 1000);
    let mut before_stop = Tally::default();
    for _ in 0..20 {
        sandbox(&b_proxy, &grant5, &denied_url(), &mut before_stop);
    }
    let old1 = fleet.terminate(1);
    assert_eq!(missing(&before_stop.refused_hosts, &c, &run5), Vec::<String>::new(), "SIGTERM lost refusals");

    // The settings page on the survivor shows it all.
    let page = tenant_page(&c, password, "t1");
    assert!(page.starts_with("HTTP/1.1 200"), "{}", &page[..page.len().min(400)]);
    for shown in [
        "Release the kill switch",
        "fleet drill",
        run1.as_str(),
        "No run holds a live lease.",
        "policy_denied",
    ] {
        assert!(page.contains(shown), "the settings page on the survivor shows {shown}");
    }
    assert!(!page.contains(&lease_id), "the revoked lease is not shown live");
    assert!(!page.contains("fleet-secret-never-shown-8d1e"));

    // A rolling restart under traffic: both dead nodes come back, then each
    // node in turn is stopped (SIGTERM) and replaced while a sandbox keeps
    // going through the balancer. Nothing is lost, nothing spent twice.
    let old0 =
        (fleet.api.backends.lock().unwrap()[0].clone(), fleet.proxy.backends.lock().unwrap()[0].clone());
    fleet.restart(0, (&old0.0, &old0.1));
    fleet.restart(1, (&old1.0, &old1.1));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (proxy, grant, allowed_url, stop) =
            (fleet.proxy.addr.clone(), grant5.clone(), allowed_url.clone(), stop.clone());
        let start = denied.load(Ordering::Relaxed);
        std::thread::spawn(move || {
            let mut tally = Tally::default();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let url = if i % 2 == 0 {
                    allowed_url.clone()
                } else {
                    format!("http://roll{}.denied.test/", start + i)
                };
                sandbox(&proxy, &grant, &url, &mut tally);
                i += 1;
            }
            tally
        })
    };
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        let old = fleet.terminate(i);
        fleet.restart(i, (&old.0, &old.1));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let rolled = driver.join().unwrap();
    assert!(rolled.allowed >= 3 && rolled.refused_hosts.len() >= 3, "traffic flowed: {rolled:?}");
    let c = fleet.node(2).api.clone();
    assert_eq!(
        ledger_requests(&c, &grant5) as usize,
        before_stop.spent() + rolled.spent(),
        "the ledger counts exactly the requests answered"
    );
    let mut lost = Vec::new();
    let settled = within(Duration::from_secs(5), || {
        lost = missing(&rolled.refused_hosts, &c, &run5);
        lost.is_empty()
    });
    assert!(settled.is_some(), "a rolling restart lost refusals: {lost:?}");
}
