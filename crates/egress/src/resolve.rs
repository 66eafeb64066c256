//! Name resolution, with hickory. Lives here because resolving is talking to
//! the network.
//!
//! Each request resolves once; the answer is checked and is the only thing
//! the connector may dial (see `connect`). Servers come from
//! `/etc/resolv.conf`, or from the operator (`GATEHOUSE_DNS_SERVERS`).
//! An error, a timeout or an empty answer is a refusal: fail closed.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

/// How long one lookup may take before it counts as failed.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A DNS resolver.
#[derive(Clone)]
pub struct DnsResolver(TokioResolver);

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DnsResolver")
    }
}

impl DnsResolver {
    /// The system's configuration (`/etc/resolv.conf`).
    pub fn system() -> Result<Self, String> {
        let builder = TokioResolver::builder_tokio()
            .map_err(|e| format!("cannot read the system DNS configuration: {e}"))?;
        builder.build().map(Self).map_err(|e| format!("cannot build the DNS resolver: {e}"))
    }

    /// Explicit name servers, each over UDP and TCP at its port.
    pub fn with_servers(servers: &[SocketAddr]) -> Result<Self, String> {
        let name_servers = servers
            .iter()
            .map(|addr| {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
            })
            .collect();
        let config = ResolverConfig::from_parts(None, Vec::new(), name_servers);
        TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .build()
            .map(Self)
            .map_err(|e| format!("cannot build the DNS resolver: {e}"))
    }

    /// Every address of `host`, de-duplicated and sorted.
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ()> {
        // A fully qualified name: search domains must not turn `internal`
        // into `internal.corp.example`.
        let fqdn = format!("{}.", host.trim_end_matches('.'));
        let answer = tokio::time::timeout(LOOKUP_TIMEOUT, self.0.lookup_ip(fqdn))
            .await
            .map_err(|_| ())?
            .map_err(|_| ())?;
        let mut ips: Vec<IpAddr> = answer.iter().collect();
        ips.sort();
        ips.dedup();
        if ips.is_empty() { Err(()) } else { Ok(ips) }
    }
}
/// A resolver supplied by the embedder (tests: answers that change between
/// queries, to prove nothing resolves twice).
pub type ResolveFn = dyn Fn(&str) -> Result<Vec<IpAddr>, ()> + Send + Sync;

/// How names are resolved. Resolution happens once per request; the answer
/// is what gets checked and what gets dialled.
#[derive(Clone)]
pub enum Resolver {
    /// DNS (hickory).
    Dns(Arc<DnsResolver>),
    /// Fixed answers; unknown names fail.
    Static(Arc<HashMap<String, Vec<IpAddr>>>),
    /// Any function.
    Custom(Arc<ResolveFn>),
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resolver::Dns(_) => "Resolver::Dns",
            Resolver::Static(_) => "Resolver::Static",
            Resolver::Custom(_) => "Resolver::Custom",
        })
    }
}

impl Resolver {
    /// Resolves `host`; an error or empty answer refuses (fail closed).
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ()> {
        match self {
            Resolver::Dns(dns) => dns.lookup(host).await,
            Resolver::Static(map) => map.get(host).cloned().ok_or(()),
            Resolver::Custom(f) => f(host),
        }
    }
}
