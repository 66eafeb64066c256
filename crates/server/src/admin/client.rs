//! The address a sign-in comes from.
//!
//! Behind an HTTPS front (a reverse proxy or load balancer) every
//! connection comes from the front's address; the front says who its
//! client was in `X-Forwarded-For`, appending the address it was connected
//! from to whatever the client sent. So the header is believed only from a
//! peer in `GATEHOUSE_TRUSTED_PROXIES`, and it is read from the right: each
//! trusted proxy's entry is skipped, and the right-most address that is not
//! a trusted proxy is the client (what the client wrote further left is
//! never reached). An entry that is not an address stops the walk: the
//! trusted proxy that passed it on is then taken as the client. When every
//! entry is a trusted proxy, the left-most is the client.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// The header.
const FORWARDED_FOR: &str = "x-forwarded-for";
/// Entries read from the right at most: no client makes the walk long.
const MAX_HOPS: usize = 32;

/// The client's address: the TCP peer's, or, when the peer is a trusted
/// proxy, the one its `X-Forwarded-For` names. No peer at all (a request
/// that did not come through the listener) is the unspecified address.
pub fn client_address(peer: Option<SocketAddr>, headers: &http::HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let Some(peer) = peer else { return IpAddr::from([0, 0, 0, 0]) };
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut client = canonical(peer.ip());
    if !is_trusted(&client) {
        return client;
    }
    let mut hops: Vec<Option<IpAddr>> = Vec::new();
    for value in headers.get_all(FORWARDED_FOR) {
        match value.to_str() {
            Ok(text) => hops.extend(text.split(',').map(parse_hop)),
            Err(_) => hops.push(None),
        }
    }
    for hop in hops.into_iter().rev().take(MAX_HOPS) {
        let Some(ip) = hop else { return client };
        client = canonical(ip);
        if !is_trusted(&client) {
            return client;
        }
    }
    client
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// One `X-Forwarded-For` entry: an address, with or without a port
/// (`192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`), or nothing.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry.parse::<IpAddr>().ok().or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip())).or_else(|| {
        let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
        inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(peer: &str, xff: &[&str]) -> String {
        let trusted: Vec<IpNet> =
            ["10.0.0.0/8", "2001:db8:ffff::/48"].iter().map(|n| n.parse().unwrap()).collect();
        let mut headers = http::HeaderMap::new();
        for v in xff {
            headers.append(FORWARDED_FOR, http::HeaderValue::from_str(v).unwrap());
        }
        client_address(Some(peer.parse().unwrap()), &headers, &trusted).to_string()
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer() {
        assert_eq!(from("198.51.100.1:5000", &["192.0.2.1"]), "198.51.100.1");
        assert_eq!(from("10.0.0.2:5000", &["192.0.2.1"]), "192.0.2.1");
        assert_eq!(from("10.0.0.2:5000", &[]), "10.0.0.2", "no header: the proxy itself");
        assert_eq!(from("[::ffff:10.0.0.2]:5000", &["192.0.2.1"]), "192.0.2.1", "a mapped peer is IPv4");
        assert_eq!(from("[2001:db8:ffff::9]:5000", &["2001:db8:1::5"]), "2001:db8:1::5");
        assert_eq!(client_address(None, &http::HeaderMap::new(), &[]).to_string(), "0.0.0.0");
    }

    #[test]
    fn the_right_most_address_that_is_not_a_trusted_proxy_is_the_client() {
        // What a client writes itself sits left of what the proxy appended.
        assert_eq!(from("10.0.0.2:1", &["6.6.6.6, 192.0.2.1"]), "192.0.2.1");
        assert_eq!(from("10.0.0.2:1", &["6.6.6.6, 192.0.2.1, 10.1.1.1"]), "192.0.2.1", "a chain of proxies");
        assert_eq!(
            from("10.0.0.2:1", &["6.6.6.6", "192.0.2.1, 10.1.1.1"]),
            "192.0.2.1",
            "several headers, in order"
        );
        assert_eq!(from("10.0.0.2:1", &["10.3.3.3, 10.1.1.1"]), "10.3.3.3", "all proxies: the left-most");
        assert_eq!(from("10.0.0.2:1", &["192.0.2.1:4711"]), "192.0.2.1");
        assert_eq!(from("10.0.0.2:1", &["[2001:db8::1]:4711"]), "2001:db8::1");
        assert_eq!(from("10.0.0.2:1", &["[2001:db8::1]"]), "2001:db8::1");
        assert_eq!(from("10.0.0.2:1", &["::ffff:192.0.2.1"]), "192.0.2.1");
        // Garbage stops the walk at the trusted proxy that passed it on.
        assert_eq!(from("10.0.0.2:1", &["192.0.2.1, unknown"]), "10.0.0.2");
        assert_eq!(from("10.0.0.2:1", &["nonsense, 10.1.1.1"]), "10.1.1.1");
        assert_eq!(from("10.0.0.2:1", &[""]), "10.0.0.2");
    }
}
