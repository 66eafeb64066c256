//! Name resolution. Lives here because resolving is talking to the network.

use std::net::IpAddr;
use std::time::Duration;

/// How long one lookup may take before it counts as failed (fail closed).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The operating system's resolver (`getaddrinfo`, honouring `/etc/hosts`).
/// Every address of the answer is returned, de-duplicated, so the address
/// guard sees all of them.
pub async fn system(host: &str) -> Result<Vec<IpAddr>, ()> {
    let lookup = tokio::net::lookup_host((host, 0));
    let addrs = tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await.map_err(|_| ())?.map_err(|_| ())?;
    let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}
