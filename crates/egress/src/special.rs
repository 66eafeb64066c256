//! The address guard: which destination addresses a run may never reach.
//!
//! Built from the IANA registries, row by row, rather than from the standard
//! library's `is_private`-style helpers, which miss rows:
//!
//! - IANA IPv4 Special-Purpose Address Registry (RFC 6890 and updates),
//!   <https://www.iana.org/assignments/iana-ipv4-special-registry/>
//! - IANA IPv6 Special-Purpose Address Registry,
//!   <https://www.iana.org/assignments/iana-ipv6-special-registry/>
//! - IPv4 multicast (RFC 5771) and IPv6 multicast (RFC 4291 §2.7)
//!
//! Every row is refused, including rows the registry marks globally reachable
//! (anycast service addresses, AS112, AMT): a run has no business reaching
//! them. Beyond the rows, all IPv6 outside global unicast `2000::/3` is
//! refused. IPv6 forms that embed IPv4 — mapped, compatible, 6to4, Teredo —
//! are refused outright; NAT64 `64:ff9b::/96` is judged by the IPv4 it embeds.
//! Cloud metadata addresses are refused always, even when an operator opens a
//! range that contains them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use gatehouse_core::Reason;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Why an address is refused, and which row said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRefusal {
    /// `address_special_purpose`, `address_metadata` or `address_embedded_ipv4`.
    pub reason: Reason,
    /// The registry row or rule, e.g. `"192.168.0.0/16 Private-Use (RFC 1918)"`.
    pub rule: &'static str,
}

/// IPv4 rows: (prefix, "name (reference)").
const IPV4_ROWS: &[(&str, &str)] = &[
    ("0.0.0.0/8", "0.0.0.0/8 \"This network\" (RFC 791)"),
    ("10.0.0.0/8", "10.0.0.0/8 Private-Use (RFC 1918)"),
    ("100.64.0.0/10", "100.64.0.0/10 Shared Address Space (RFC 6598)"),
    ("127.0.0.0/8", "127.0.0.0/8 Loopback (RFC 1122)"),
    ("169.254.0.0/16", "169.254.0.0/16 Link Local (RFC 3927)"),
    ("172.16.0.0/12", "172.16.0.0/12 Private-Use (RFC 1918)"),
    ("192.0.0.0/24", "192.0.0.0/24 IETF Protocol Assignments (RFC 6890)"),
    ("192.0.0.0/29", "192.0.0.0/29 IPv4 Service Continuity Prefix (RFC 7335)"),
    ("192.0.0.8/32", "192.0.0.8/32 IPv4 dummy address (RFC 7600)"),
    ("192.0.0.9/32", "192.0.0.9/32 Port Control Protocol Anycast (RFC 7723)"),
    ("192.0.0.10/32", "192.0.0.10/32 Traversal Using Relays around NAT Anycast (RFC 8155)"),
    ("192.0.0.170/32", "192.0.0.170/32 NAT64/DNS64 Discovery (RFC 8880)"),
    ("192.0.0.171/32", "192.0.0.171/32 NAT64/DNS64 Discovery (RFC 8880)"),
    ("192.0.2.0/24", "192.0.2.0/24 Documentation TEST-NET-1 (RFC 5737)"),
    ("192.31.196.0/24", "192.31.196.0/24 AS112-v4 (RFC 7535)"),
    ("192.52.193.0/24", "192.52.193.0/24 AMT (RFC 7450)"),
    ("192.88.99.0/24", "192.88.99.0/24 Deprecated 6to4 Relay Anycast (RFC 7526)"),
    ("192.88.99.2/32", "192.88.99.2/32 6a44-relay anycast address (RFC 6751)"),
    ("192.168.0.0/16", "192.168.0.0/16 Private-Use (RFC 1918)"),
    ("192.175.48.0/24", "192.175.48.0/24 Direct Delegation AS112 Service (RFC 7534)"),
    ("198.18.0.0/15", "198.18.0.0/15 Benchmarking (RFC 2544)"),
    ("198.51.100.0/24", "198.51.100.0/24 Documentation TEST-NET-2 (RFC 5737)"),
    ("203.0.113.0/24", "203.0.113.0/24 Documentation TEST-NET-3 (RFC 5737)"),
    ("224.0.0.0/4", "224.0.0.0/4 Multicast (RFC 5771)"),
    ("240.0.0.0/4", "240.0.0.0/4 Reserved (RFC 1112)"),
    ("255.255.255.255/32", "255.255.255.255/32 Limited Broadcast (RFC 919)"),
];

/// IPv6 rows inside `2000::/3` (everything outside it is refused anyway,
/// but the named rows give a better `rule`).
const IPV6_ROWS: &[(&str, &str)] = &[
    ("::1/128", "::1/128 Loopback Address (RFC 4291)"),
    ("::/128", "::/128 Unspecified Address (RFC 4291)"),
    ("64:ff9b:1::/48", "64:ff9b:1::/48 IPv4-IPv6 Translat. local-use (RFC 8215)"),
    ("100::/64", "100::/64 Discard-Only Address Block (RFC 6666)"),
    ("100:0:0:1::/64", "100:0:0:1::/64 Dummy IPv6 Prefix (RFC 9780)"),
    ("2001::/23", "2001::/23 IETF Protocol Assignments (RFC 2928)"),
    ("2001:1::1/128", "2001:1::1/128 Port Control Protocol Anycast (RFC 7723)"),
    ("2001:1::2/128", "2001:1::2/128 TURN Anycast (RFC 8155)"),
    ("2001:1::3/128", "2001:1::3/128 DNS-SD Service Registration Protocol Anycast (RFC 9665)"),
    ("2001:2::/48", "2001:2::/48 Benchmarking (RFC 5180)"),
    ("2001:3::/32", "2001:3::/32 AMT (RFC 7450)"),
    ("2001:4:112::/48", "2001:4:112::/48 AS112-v6 (RFC 7535)"),
    ("2001:10::/28", "2001:10::/28 Deprecated (previously ORCHID) (RFC 4843)"),
    ("2001:20::/28", "2001:20::/28 ORCHIDv2 (RFC 7343)"),
    ("2001:30::/28", "2001:30::/28 Drone Remote ID Protocol Entity Tags (RFC 9374)"),
    ("2001:db8::/32", "2001:db8::/32 Documentation (RFC 3849)"),
    ("2620:4f:8000::/48", "2620:4f:8000::/48 Direct Delegation AS112 Service (RFC 7534)"),
    ("3fff::/20", "3fff::/20 Documentation (RFC 9637)"),
    ("5f00::/16", "5f00::/16 Segment Routing (SRv6) SIDs (RFC 9602)"),
    ("fc00::/7", "fc00::/7 Unique-Local (RFC 4193)"),
    ("fe80::/10", "fe80::/10 Link-Local Unicast (RFC 4291)"),
    ("ff00::/8", "ff00::/8 Multicast (RFC 4291)"),
];

pub use gatehouse_core::metadata::{METADATA_ADDRESSES, METADATA_HOST_NAMES};

/// Names that can only be local, private or invalid, refused by name before
/// any lookup, whatever a resolver would answer (a hostile or misconfigured
/// one may well answer a public address for `localhost`). Each entry covers
/// the name itself and every name under it. From the IANA Special-Use
/// Domain Names registry, plus two private-use names that no public host
/// carries. Deliberately absent: `test` and `example` (RFC 6761 §6.2, §6.5:
/// applications should not treat them specially; they are ordinary names
/// that public DNS does not resolve, so they fail as `dns_failed`).
pub const SPECIAL_USE_NAMES: &[(&str, &str)] = &[
    ("localhost", "localhost: loopback (RFC 6761 §6.3)"),
    ("invalid", "invalid: never resolves (RFC 6761 §6.4)"),
    ("local", "local: link-local multicast DNS (RFC 6762)"),
    ("onion", "onion: Tor hidden services (RFC 7686)"),
    ("alt", "alt: names outside the DNS (RFC 9476)"),
    // home.arpa (RFC 8375), service.arpa (RFC 9665), resolver.arpa (RFC
    // 9462), ipv4only.arpa (RFC 8880), the reverse trees: infrastructure and
    // local names only, never a public HTTP host.
    ("arpa", "arpa: infrastructure and local names (home.arpa, service.arpa, reverse DNS, ...)"),
    ("internal", "internal: private use (ICANN, 2024)"),
    ("localdomain", "localdomain: the local host's own domain by convention (/etc/hosts)"),
];

/// The special-use rule `host` (lowercase ASCII, no trailing dot) falls under.
pub fn special_use_name(host: &str) -> Option<&'static str> {
    SPECIAL_USE_NAMES.iter().find_map(|(name, rule)| {
        let under = host.len() > name.len()
            && host.ends_with(name)
            && host.as_bytes()[host.len() - name.len() - 1] == b'.';
        (host == *name || under).then_some(*rule)
    })
}

static V4: LazyLock<Vec<(Ipv4Net, &'static str)>> = LazyLock::new(|| {
    IPV4_ROWS.iter().filter_map(|(net, rule)| net.parse().ok().map(|n| (n, *rule))).collect()
});
static V6: LazyLock<Vec<(Ipv6Net, &'static str)>> = LazyLock::new(|| {
    IPV6_ROWS.iter().filter_map(|(net, rule)| net.parse().ok().map(|n| (n, *rule))).collect()
});
static METADATA: LazyLock<Vec<(IpAddr, &'static str)>> = LazyLock::new(|| {
    METADATA_ADDRESSES.iter().filter_map(|(ip, rule)| ip.parse().ok().map(|a| (a, *rule))).collect()
});

/// The address guard with the ranges an operator explicitly opened
/// (`GATEHOUSE_EGRESS_ALLOW_RANGES`, for named internal services).
#[derive(Debug, Clone, Default)]
pub struct AddressGuard {
    allow_ranges: Vec<IpNet>,
}

impl AddressGuard {
    /// A guard that opens `allow_ranges` (metadata addresses stay closed).
    pub fn new(allow_ranges: Vec<IpNet>) -> Self {
        Self { allow_ranges }
    }

    /// `Ok` if a run may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), AddressRefusal> {
        if let Some(rule) = metadata_rule(ip) {
            return Err(AddressRefusal { reason: Reason::AddressMetadata, rule });
        }
        if self.allow_ranges.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        match ip {
            IpAddr::V4(v4) => check_v4(v4),
            IpAddr::V6(v6) => self.check_v6(v6),
        }
    }

    fn check_v6(&self, ip: Ipv6Addr) -> Result<(), AddressRefusal> {
        let seg = ip.segments();
        // NAT64 well-known prefix: the destination is the embedded IPv4.
        if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
            let v4 = Ipv4Addr::from(u32::from(seg[6]) << 16 | u32::from(seg[7]));
            return self.check(IpAddr::V4(v4));
        }
        let embedded = |rule| Err(AddressRefusal { reason: Reason::AddressEmbeddedIpv4, rule });
        if seg[..5] == [0; 5] && seg[5] == 0xffff {
            return embedded("::ffff:0:0/96 IPv4-mapped Address (RFC 4291)");
        }
        if seg[..6] == [0; 6] && !(seg[6] == 0 && seg[7] <= 1) {
            return embedded("::/96 IPv4-compatible Address, deprecated (RFC 4291)");
        }
        if seg[0] == 0x2002 {
            return embedded("2002::/16 6to4 (RFC 3056)");
        }
        if seg[0] == 0x2001 && seg[1] == 0 {
            return embedded("2001::/32 TEREDO (RFC 4380)");
        }
        if let Some((_, rule)) = V6.iter().find(|(net, _)| net.contains(&ip)) {
            return Err(AddressRefusal { reason: Reason::AddressSpecialPurpose, rule });
        }
        if seg[0] & 0xe000 != 0x2000 {
            return Err(AddressRefusal {
                reason: Reason::AddressSpecialPurpose,
                rule: "outside 2000::/3 Global Unicast (RFC 4291)",
            });
        }
        Ok(())
    }
}

fn check_v4(ip: Ipv4Addr) -> Result<(), AddressRefusal> {
    match V4.iter().find(|(net, _)| net.contains(&ip)) {
        Some((_, rule)) => Err(AddressRefusal { reason: Reason::AddressSpecialPurpose, rule }),
        None => Ok(()),
    }
}

fn metadata_rule(ip: IpAddr) -> Option<&'static str> {
    // Compare IPv4-mapped forms too, so ::ffff:169.254.169.254 names the
    // metadata service rather than only "mapped".
    let canonical = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    METADATA.iter().find(|(addr, _)| *addr == canonical).map(|(_, rule)| *rule)
}

/// Whether `host` (lowercase ASCII, no trailing dot) names a metadata service.
pub fn is_metadata_host_name(host: &str) -> bool {
    METADATA_HOST_NAMES.contains(&host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> Option<Reason> {
        AddressGuard::default().check(ip.parse().unwrap()).err().map(|r| r.reason)
    }

    /// One address from inside each row of the IANA IPv4 and IPv6
    /// special-purpose address registries (and the other ranges the door
    /// refuses), written out here rather than read from the table, so that
    /// deleting or narrowing a row of the table fails this test.
    #[test]
    fn an_address_from_every_registry_row_is_refused() {
        let v4 = [
            "0.1.2.3",
            "10.20.30.40",
            "100.64.0.1",
            "100.127.255.254",
            "127.1.2.3",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.0.8",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.0.170",
            "192.0.0.171",
            "192.0.2.1",
            "192.31.196.1",
            "192.52.193.1",
            "192.88.99.1",
            "192.168.0.1",
            "192.175.48.1",
            "198.18.0.1",
            "198.19.255.1",
            "198.51.100.7",
            "203.0.113.9",
            "240.0.0.1",
            "255.255.255.254",
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
        ];
        let v6 = [
            "::",
            "::1",
            "::ffff:8.8.8.8",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:1::1",
            "2001:1::2",
            "2001:1::3",
            "2001:2::1",
            "2001:3::1",
            "2001:4:112::1",
            "2001:10::1",
            "2001:20::1",
            "2001:30::1",
            "2001:db8::1",
            "2002::1",
            "2620:4f:8000::1",
            "3fff::1",
            "3fff:fff::1",
            "5f00::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ];
        for ip in v4.iter().chain(&v6) {
            assert!(refused(ip).is_some(), "{ip} was let through");
        }
        // Their public neighbours are not.
        for ip in
            ["192.0.1.1", "198.20.0.1", "100.128.0.1", "2001:4860::8888", "2620:4f:8001::1", "2a00:1450::1"]
        {
            assert_eq!(refused(ip), None, "{ip}");
        }
    }

    #[test]
    fn every_table_row_parses() {
        assert_eq!(V4.len(), IPV4_ROWS.len());
        assert_eq!(V6.len(), IPV6_ROWS.len());
        assert_eq!(METADATA.len(), METADATA_ADDRESSES.len());
    }

    /// Each registry row is refused at its first and last address, and the
    /// neighbours just outside a row are not refused because of it.
    #[test]
    fn every_ipv4_row_is_refused_at_both_ends() {
        for (net, rule) in V4.iter() {
            for ip in [net.network(), net.broadcast()] {
                let r = AddressGuard::default().check(IpAddr::V4(ip)).unwrap_err();
                assert!(
                    matches!(r.reason, Reason::AddressSpecialPurpose | Reason::AddressMetadata),
                    "{ip} ({rule})"
                );
            }
        }
    }

    #[test]
    fn every_ipv6_row_is_refused() {
        for (net, rule) in V6.iter() {
            for ip in [net.network(), net.broadcast()] {
                assert!(refused(&ip.to_string()).is_some(), "{ip} ({rule})");
            }
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "140.82.112.3",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "2001:4860:4860::8888",
            "64:ff9b::808:808",
        ] {
            assert_eq!(refused(ip), None, "{ip}");
        }
    }

    #[test]
    fn well_known_internal_targets_are_refused() {
        for ip in [
            "127.0.0.1",
            "127.255.255.254",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            assert!(refused(ip).is_some(), "{ip}");
        }
    }

    #[test]
    fn ipv4_embedded_in_ipv6_is_refused_outright() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "::8.8.8.8",
            "2002:7f00:1::1",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            assert_eq!(refused(ip), Some(Reason::AddressEmbeddedIpv4), "{ip}");
        }
    }

    #[test]
    fn nat64_is_judged_by_the_embedded_ipv4() {
        assert_eq!(refused("64:ff9b::7f00:1"), Some(Reason::AddressSpecialPurpose));
        assert_eq!(refused("64:ff9b::a9fe:a9fe"), Some(Reason::AddressMetadata));
        assert_eq!(refused("64:ff9b::808:808"), None);
        assert_eq!(refused("64:ff9b:1::808:808"), Some(Reason::AddressSpecialPurpose), "local-use NAT64");
    }

    #[test]
    fn special_use_names_cover_themselves_and_their_subtrees_only() {
        for name in [
            "localhost",
            "a.localhost",
            "x.y.invalid",
            "printer.local",
            "abc.onion",
            "home.arpa",
            "nas.home.arpa",
            "1.0.0.127.in-addr.arpa",
            "db.internal",
            "localhost.localdomain",
            "x.alt",
        ] {
            assert!(special_use_name(name).is_some(), "{name}");
        }
        for name in [
            "localhost.example.com",
            "notlocalhost",
            "mylocal",
            "local.example",
            "example.com",
            "x.test",
            "api.example",
            "internal.example.com",
            "arpa.example",
        ] {
            assert_eq!(special_use_name(name), None, "{name}");
        }
    }

    #[test]
    fn metadata_addresses_are_refused_even_inside_opened_ranges() {
        let open = AddressGuard::new(vec!["169.254.0.0/16".parse().unwrap(), "10.0.0.0/8".parse().unwrap()]);
        assert_eq!(
            open.check("169.254.169.254".parse().unwrap()).unwrap_err().reason,
            Reason::AddressMetadata
        );
        assert_eq!(
            open.check("::ffff:169.254.169.254".parse().unwrap()).unwrap_err().reason,
            Reason::AddressMetadata
        );
        assert!(open.check("10.1.2.3".parse().unwrap()).is_ok(), "an opened range passes");
        assert!(open.check("169.254.1.1".parse().unwrap()).is_ok());
        for ip in ["168.63.129.16", "100.100.100.200", "fd00:ec2::254"] {
            assert_eq!(refused(ip), Some(Reason::AddressMetadata), "{ip}");
        }
        assert!(is_metadata_host_name("metadata.google.internal"));
    }

    proptest::proptest! {
        /// Whatever the address, the guard agrees with the standard library
        /// wherever the standard library is sure an address is internal.
        #[test]
        fn never_allows_what_std_knows_is_internal(bits in proptest::prelude::any::<u32>()) {
            let ip = Ipv4Addr::from(bits);
            if ip.is_private() || ip.is_loopback() || ip.is_link_local() || ip.is_broadcast()
                || ip.is_documentation() || ip.is_unspecified() || ip.is_multicast() {
                proptest::prop_assert!(AddressGuard::default().check(IpAddr::V4(ip)).is_err());
            }
            let mapped = ip.to_ipv6_mapped();
            proptest::prop_assert!(AddressGuard::default().check(IpAddr::V6(mapped)).is_err());
        }

        #[test]
        fn ipv6_outside_global_unicast_is_refused(bits in proptest::prelude::any::<u128>()) {
            let ip = Ipv6Addr::from(bits);
            if ip.segments()[0] & 0xe000 != 0x2000 && ip.segments()[..6] != [0x64, 0xff9b, 0, 0, 0, 0] {
                proptest::prop_assert!(AddressGuard::default().check(IpAddr::V6(ip)).is_err());
            }
        }
    }
}
