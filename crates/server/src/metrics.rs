//! The node's counters and their Prometheus text: responses by class,
//! content verdicts, fetches by purpose, connections by listener, and the
//! plane's refusal record.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gatehouse_egress::proxy::ProxyStats;
use gatehouse_plane::door::DoorLeases;
use gatehouse_plane::record::{RefusalLog, counter_family};
use serde::Deserialize;

/// Why the platform fetches. Each is counted on its own
/// (`gatehouse_egress_fetch_total{purpose}`) and logged with the request, so
/// an operator sees what kind of traffic runs send; `webhook` also follows
/// no redirect (a delivery goes exactly where it was addressed).
#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum FetchPurpose {
    /// A git host's API or repository.
    GitProvider,
    /// An MCP server.
    Mcp,
    /// A webhook delivery.
    Webhook,
    /// The run's own runtime traffic.
    Runtime,
    /// Delivering events to the platform's consumers.
    EventDelivery,
    /// A vulnerability database (OSV).
    VulnerabilityDb,
}

impl FetchPurpose {
    /// Every purpose, in the order metrics list them.
    pub const ALL: [FetchPurpose; 6] = [
        FetchPurpose::GitProvider,
        FetchPurpose::Mcp,
        FetchPurpose::Webhook,
        FetchPurpose::Runtime,
        FetchPurpose::EventDelivery,
        FetchPurpose::VulnerabilityDb,
    ];

    /// The name in requests, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchPurpose::GitProvider => "git_provider",
            FetchPurpose::Mcp => "mcp",
            FetchPurpose::Webhook => "webhook",
            FetchPurpose::Runtime => "runtime",
            FetchPurpose::EventDelivery => "event_delivery",
            FetchPurpose::VulnerabilityDb => "vulnerability_db",
        }
    }
}

/// Response counters by status class. Labels come from closed sets only, so
/// no request data can reach a metric label.
#[derive(Default)]
pub struct Metrics {
    by_class: [AtomicU64; 5],
    unsigned_passed: AtomicU64,
    content_verdicts: [AtomicU64; 4],
    egress_fetched: [AtomicU64; FetchPurpose::ALL.len()],
    listeners: std::sync::Mutex<Vec<(&'static str, Arc<gatehouse_listener::ConnectionStats>)>>,
}

const VERDICTS: [gatehouse_content::VerdictKind; 4] = [
    gatehouse_content::VerdictKind::Clean,
    gatehouse_content::VerdictKind::NotScanned,
    gatehouse_content::VerdictKind::Refused,
    gatehouse_content::VerdictKind::Infected,
];

impl Metrics {
    /// Counts one response.
    pub fn record_response(&self, status: u16) {
        let class = usize::from(status / 100).saturating_sub(1).min(4);
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an execute request that passed without a manifest because
    /// `SANDBOX_REQUIRE_EGRESS_MANIFEST=false`.
    pub fn record_unsigned(&self) {
        self.unsigned_passed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request the fetch API made on a run's behalf.
    pub fn record_fetch(&self, purpose: FetchPurpose) {
        if let Some(i) = FetchPurpose::ALL.iter().position(|p| *p == purpose) {
            self.egress_fetched[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one content verdict.
    pub fn record_content(&self, verdict: gatehouse_content::VerdictKind) {
        if let Some(i) = VERDICTS.iter().position(|v| *v == verdict) {
            self.content_verdicts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reports a listener's connection counters under `listener="name"`.
    pub fn watch_listener(&self, name: &'static str, stats: Arc<gatehouse_listener::ConnectionStats>) {
        self.listeners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((name, stats));
    }

    /// Prometheus text exposition of every counter.
    pub fn render(
        &self,
        refusals: &RefusalLog,
        proxy: Option<&ProxyStats>,
        door_leases: Option<&DoorLeases>,
    ) -> String {
        let mut out = String::new();
        let classes = self
            .by_class
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("{{class=\"{}xx\"}}", i + 1), c.load(Ordering::Relaxed)));
        counter_family(
            &mut out,
            "gatehouse_http_responses_total",
            "HTTP responses by status class.",
            classes,
        );
        counter_family(
            &mut out,
            "gatehouse_unsigned_requests_total",
            "Execute requests passed without a manifest (SANDBOX_REQUIRE_EGRESS_MANIFEST=false).",
            [(String::new(), self.unsigned_passed.load(Ordering::Relaxed))],
        );
        let verdicts = VERDICTS
            .iter()
            .zip(&self.content_verdicts)
            .map(|(v, c)| (format!("{{verdict=\"{}\"}}", v.as_str()), c.load(Ordering::Relaxed)));
        counter_family(&mut out, "gatehouse_content_scans_total", "Content verdicts.", verdicts);
        let by_purpose = FetchPurpose::ALL
            .iter()
            .zip(&self.egress_fetched)
            .map(|(p, c)| (format!("{{purpose=\"{}\"}}", p.as_str()), c.load(Ordering::Relaxed)));
        counter_family(
            &mut out,
            "gatehouse_egress_fetch_total",
            "Fetch API requests made, by purpose.",
            by_purpose,
        );
        let all_fetched = self.egress_fetched.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let fetched = [("{kind=\"fetch\"}".to_owned(), all_fetched)];
        let proxied = proxy.into_iter().flat_map(|stats| {
            [
                ("{kind=\"request\"}".to_owned(), stats.forwarded.load(Ordering::Relaxed)),
                ("{kind=\"tunnel\"}".to_owned(), stats.tunnels.load(Ordering::Relaxed)),
            ]
        });
        counter_family(
            &mut out,
            "gatehouse_egress_allowed_total",
            "Egress requests (proxied or fetched) and tunnels let through.",
            proxied.chain(fetched),
        );
        let listeners = self.listeners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let connections = listeners.iter().flat_map(|(name, c)| {
            [
                ("accepted", c.accepted.load(Ordering::Relaxed)),
                ("refused_listener_full", c.refused_listener_full.load(Ordering::Relaxed)),
                ("refused_client_full", c.refused_client_full.load(Ordering::Relaxed)),
                ("closed_idle", c.closed_idle.load(Ordering::Relaxed)),
                ("closed_header_timeout", c.closed_header_timeout.load(Ordering::Relaxed)),
            ]
            .map(|(outcome, n)| (format!("{{listener=\"{name}\",outcome=\"{outcome}\"}}"), n))
        });
        counter_family(
            &mut out,
            "gatehouse_connections_total",
            "Client connections by listener: accepted, closed at once over a cap, closed for idling or a slow header.",
            connections,
        );
        let _ =
            writeln!(out, "# HELP gatehouse_connections_open Client connections open now, tunnels included.");
        let _ = writeln!(out, "# TYPE gatehouse_connections_open gauge");
        for (name, c) in &listeners {
            let _ = writeln!(
                out,
                "gatehouse_connections_open{{listener=\"{name}\"}} {}",
                c.open.load(Ordering::Relaxed)
            );
        }
        counter_family(
            &mut out,
            "gatehouse_credential_tampering_total",
            "Lease or credential rows found not to match their credential's sealed facts (the store was written behind the API's back); each such lease is refused.",
            [(String::new(), door_leases.map_or(0, DoorLeases::tampered))],
        );
        let mints = door_leases.and_then(DoorLeases::minter).map(|m| m.counts()).unwrap_or_default();
        counter_family(
            &mut out,
            "gatehouse_credential_mints_total",
            "Tokens of github_app and oauth2_refresh credentials asked for at the door, by kind and outcome (ok, revoked, or why a mint failed: each such request is refused lease_unavailable).",
            mints
                .into_iter()
                .map(|((kind, outcome), n)| (format!("{{kind=\"{kind}\",outcome=\"{outcome}\"}}"), n)),
        );
        refusals.render(&mut out);
        out
    }
}
