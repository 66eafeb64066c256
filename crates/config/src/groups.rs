//! Settings read as groups: egress (ranges, DNS, extra roots, the door's
//! limits), content scanning, and trusted proxies.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use gatehouse_core::metadata::METADATA_ADDRESSES;
use ipnet::IpNet;

use crate::config::{EgressLimits, EgressSettings, ScannerSettings};
use crate::names;
use crate::reader::Reader;

impl Reader<'_> {
    /// The egress settings (see [`EgressSettings`]).
    pub(crate) fn egress(&mut self) -> EgressSettings {
        // Egress ranges an operator opens.
        let mut egress_allow_ranges = Vec::new();
        if let Some(v) = self.get(names::EGRESS_ALLOW_RANGES).map(str::to_owned) {
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let net = part.parse::<IpNet>().or_else(|_| part.parse::<IpAddr>().map(IpNet::from));
                match net {
                    Ok(net)
                        if METADATA_ADDRESSES
                            .iter()
                            .filter_map(|(m, _)| m.parse::<IpAddr>().ok())
                            .any(|m| net.contains(&m)) =>
                    {
                        self.problem(
                            names::EGRESS_ALLOW_RANGES,
                            "insecure_combination",
                            format!("{part} contains a cloud metadata address, which can never be opened"),
                        );
                    }
                    Ok(net) => egress_allow_ranges.push(net),
                    Err(_) => self.problem(
                        names::EGRESS_ALLOW_RANGES,
                        "invalid_value",
                        format!("{part} is not an IP address or CIDR range"),
                    ),
                }
            }
        }

        let mut dns_servers = Vec::new();
        let servers = self.get(names::DNS_SERVERS).unwrap_or("").to_owned();
        for part in servers.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part
                .parse::<SocketAddr>()
                .or_else(|_| part.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
            {
                Ok(addr) => dns_servers.push(addr),
                Err(_) => self.problem(
                    names::DNS_SERVERS,
                    "invalid_value",
                    "must be a comma-separated list of IP or IP:port",
                ),
            }
        }

        let egress_extra_roots_pem = match self.get(names::EGRESS_EXTRA_CA_FILE).map(str::to_owned) {
            None => None,
            Some(path) => match self.source.read_file(Path::new(path.trim())) {
                Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => Some(text),
                Ok(_) => {
                    self.problem(names::EGRESS_EXTRA_CA_FILE, "invalid_value", "holds no PEM certificate");
                    None
                }
                Err(e) => {
                    self.problem(
                        names::EGRESS_EXTRA_CA_FILE,
                        "unreadable_file",
                        format!("cannot read {}: {}", path.trim(), e.kind()),
                    );
                    None
                }
            },
        };
        EgressSettings {
            allow_ranges: egress_allow_ranges,
            dns_servers,
            extra_roots_pem: egress_extra_roots_pem,
            limits: self.egress_limits(),
        }
    }

    /// `GATEHOUSE_TRUSTED_PROXIES`: comma-separated CIDR ranges or single
    /// addresses. A range of every address (`/0`) is refused: it would let
    /// any client name its own address.
    pub(crate) fn trusted_proxies(&mut self) -> Vec<IpNet> {
        let mut nets = Vec::new();
        let Some(v) = self.get(names::TRUSTED_PROXIES).map(str::to_owned) else { return nets };
        for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<IpNet>().or_else(|_| part.parse::<IpAddr>().map(IpNet::from)) {
                Ok(net) if net.prefix_len() == 0 => self.problem(
                    names::TRUSTED_PROXIES,
                    "insecure_combination",
                    format!("{part} trusts every address: any client could then choose the address it is counted as"),
                ),
                Ok(net) => nets.push(net.trunc()),
                Err(_) => self.problem(
                    names::TRUSTED_PROXIES,
                    "invalid_value",
                    format!("{part} is not an IP address or CIDR range (such as 10.0.0.0/8 or 2001:db8::/32)"),
                ),
            }
        }
        nets
    }

    /// The content-scanning settings (see [`ScannerSettings`]).
    pub(crate) fn scanner(&mut self) -> ScannerSettings {
        let clamd = self.get(names::CLAMD_HOST).map(|h| h.trim().to_owned());
        let clamd_port = self.int(names::CLAMD_PORT, 3310, 1..=65_535);
        let clamd = clamd.filter(|h| !h.is_empty()).map(|h| (h, u16::try_from(clamd_port).unwrap_or(3310)));
        let clamd_timeout_ms = self.int(names::CLAMD_TIMEOUT_MS, 30_000, 100..=600_000);
        let clamd_timeout =
            std::time::Duration::from_millis(u64::try_from(clamd_timeout_ms).unwrap_or(30_000));
        let content_max_bytes = self.int(names::CONTENT_MAX_BYTES, 32 << 20, 1..=1 << 30);
        let content_max_bytes = u64::try_from(content_max_bytes).unwrap_or(32 << 20);
        ScannerSettings { clamd, clamd_timeout, content_max_bytes }
    }

    fn egress_limits(&mut self) -> EgressLimits {
        let bytes = |r: &mut Self, name, default: u64| {
            u64::try_from(r.int(name, default as i64, 1..=1 << 40)).unwrap_or(default)
        };
        let millis = |r: &mut Self, name, default: u64, max: i64| {
            std::time::Duration::from_millis(
                u64::try_from(r.int(name, default as i64, 100..=max)).unwrap_or(default),
            )
        };
        EgressLimits {
            response_max_bytes: bytes(self, names::EGRESS_RESPONSE_MAX_BYTES, 64 << 20),
            request_max_bytes: bytes(self, names::EGRESS_REQUEST_MAX_BYTES, 64 << 20),
            connect_timeout: millis(self, names::EGRESS_CONNECT_TIMEOUT_MS, 10_000, 120_000),
            response_timeout: millis(self, names::EGRESS_RESPONSE_TIMEOUT_MS, 30_000, 600_000),
            request_timeout: millis(self, names::EGRESS_REQUEST_TIMEOUT_MS, 600_000, 86_400_000),
            tunnel_max_bytes: bytes(self, names::PROXY_TUNNEL_MAX_BYTES, 1 << 30),
            tunnel_timeout: millis(self, names::PROXY_TUNNEL_TIMEOUT_MS, 600_000, 86_400_000),
        }
    }
}
