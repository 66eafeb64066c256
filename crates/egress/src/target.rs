//! Strict URL parsing: one parser, whose result is exactly what the
//! connecting code uses.
//!
//! URL parsers disagree on edge cases, and every disagreement between the
//! component that checks a URL and the one that connects is an SSRF. So this
//! parser refuses whatever two reasonable readers could read differently,
//! instead of guessing:
//!
//! - schemes other than `http`/`https`; any userinfo, even an empty `@`;
//! - whitespace, control characters and backslashes anywhere;
//! - IPv4 written any way but canonical dotted-quad (`2130706433`, `0x7f.1`,
//!   `0177.0.0.1`, `127.1`, `127.000.0.1`): WHATWG parsers silently rewrite
//!   them (the `url` crate turns `0x7f.1` into `127.0.0.1`), others treat them
//!   as names; a host whose last label is numeric is an IPv4 address or an
//!   error, never a name;
//! - percent-encoded hosts, IPv6 zone ids, malformed or out-of-range ports,
//!   ports with leading zeros.
//!
//! Host names go through IDNA (UTS #46) to their ASCII form; a trailing dot
//! names the same host and is removed. The fragment is dropped. Non-ASCII
//! bytes in the path or query are percent-encoded.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use gatehouse_core::Reason;

/// The longest URL accepted.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl Scheme {
    /// The default port.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A destination host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A domain name: lowercase ASCII (IDNA applied), no trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A parsed, checked destination. Only its parts are ever used to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The scheme.
    pub scheme: Scheme,
    /// The host.
    pub host: Host,
    /// The port (the scheme's default when the URL gives none).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
}

impl Target {
    /// `scheme://host[:port]`, the origin redirects are compared against.
    pub fn origin(&self) -> String {
        if self.port == self.scheme.default_port() {
            format!("{}://{}", self.scheme.as_str(), self.host)
        } else {
            format!("{}://{}:{}", self.scheme.as_str(), self.host, self.port)
        }
    }

    /// The canonical URL (no fragment, no userinfo).
    pub fn url(&self) -> String {
        format!("{}{}", self.origin(), self.path_and_query)
    }
}

/// Parses and checks `raw`.
pub fn parse_url(raw: &str) -> Result<Target, Reason> {
    if raw.len() > MAX_URL_BYTES {
        return Err(Reason::UrlMalformed);
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
        return Err(Reason::UrlForbiddenCharacter);
    }
    let (scheme, rest) = raw.split_once("://").ok_or(Reason::UrlMalformed)?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        s if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) => {
            return Err(Reason::SchemeNotAllowed);
        }
        _ => return Err(Reason::UrlMalformed),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (host, port) = parse_authority(authority)?;
    let port = port.unwrap_or(scheme.default_port());
    let without_fragment = tail.split('#').next().unwrap_or("");
    let path_and_query = match without_fragment {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{}", encode_non_ascii(p)),
        p => encode_non_ascii(p),
    };
    Ok(Target { scheme, host, port, path_and_query })
}

/// Parses `host[:port]` as it appears in a URL authority or a `CONNECT`
/// request target. The port is `None` when absent.
pub fn parse_authority(authority: &str) -> Result<(Host, Option<u16>), Reason> {
    if authority.contains('@') {
        return Err(Reason::UserinfoPresent);
    }
    if authority.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
        return Err(Reason::UrlForbiddenCharacter);
    }
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (inside, after) = bracketed.split_once(']').ok_or(Reason::UrlMalformed)?;
        if inside.contains('%') {
            return Err(Reason::HostZoneId);
        }
        let ip: Ipv6Addr = inside.parse().map_err(|_| Reason::HostInvalid)?;
        let port = match after {
            // An empty port is the scheme's default (RFC 3986 §3.2.3, §6.2.3).
            "" | ":" => None,
            p => Some(parse_port(p.strip_prefix(':').ok_or(Reason::UrlMalformed)?)?),
        };
        return Ok((Host::Ip(IpAddr::V6(ip)), port));
    }
    let (host, port) = match authority.rsplit_once(':') {
        // An empty port is the scheme's default (RFC 3986 §3.2.3, §6.2.3).
        Some((h, "")) => (h, None),
        Some((h, p)) => (h, Some(parse_port(p)?)),
        None => (authority, None),
    };
    Ok((parse_host(host)?, port))
}

fn parse_port(p: &str) -> Result<u16, Reason> {
    let canonical =
        !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0');
    if !canonical {
        return Err(Reason::PortInvalid);
    }
    p.parse::<u16>().map_err(|_| Reason::PortInvalid)
}

/// Parses a host that is not bracketed: a canonical dotted-quad, or a name.
pub fn parse_host(host: &str) -> Result<Host, Reason> {
    if host.is_empty() {
        return Err(Reason::HostInvalid);
    }
    if host.contains('%') {
        return Err(Reason::HostPercentEncoded);
    }
    if host.contains(':') || host.contains(['[', ']']) {
        return Err(Reason::HostInvalid);
    }
    // WHATWG: a host whose last label is numeric is an IPv4 address.
    let last = host.strip_suffix('.').unwrap_or(host).rsplit('.').next().unwrap_or("");
    if is_numeric_label(last) {
        return canonical_ipv4(host).map(|ip| Host::Ip(IpAddr::V4(ip))).ok_or(Reason::HostNoncanonicalIp);
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let ascii = idna::domain_to_ascii_cow(name.as_bytes(), idna::AsciiDenyList::URL)
        .map_err(|_| Reason::HostInvalid)?
        .into_owned();
    if !is_dns_name(&ascii) {
        return Err(Reason::HostInvalid);
    }
    // IDNA can map full-width digits and dots to ASCII ones: check again.
    if is_numeric_label(ascii.rsplit('.').next().unwrap_or("")) {
        return Err(Reason::HostNoncanonicalIp);
    }
    Ok(Host::Name(ascii))
}

/// A label URL parsers read as a number: decimal digits, or `0x` hex.
fn is_numeric_label(label: &str) -> bool {
    let b = label.as_bytes();
    let hex = b.len() >= 2 && b[..2].eq_ignore_ascii_case(b"0x") && b[2..].iter().all(u8::is_ascii_hexdigit);
    !b.is_empty() && (b.iter().all(u8::is_ascii_digit) || hex)
}

/// Exactly four decimal octets, each 0-255, no leading zeros, no trailing dot.
fn canonical_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if part.len() > 1 && part.starts_with('0') {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then(|| Ipv4Addr::from(octets))
}

/// Labels of 1-63 characters from `[a-z0-9-_]`, not starting or ending with
/// `-`, at most 253 characters in all. (Underscores occur in real host names.)
fn is_dns_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn encode_non_ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> Reason {
        parse_url(url).unwrap_err()
    }

    #[test]
    fn ordinary_urls_parse_to_their_parts() {
        let t = parse_url("https://API.GitHub.com./repos/x?y=1#frag").unwrap();
        assert_eq!(t.host, Host::Name("api.github.com".into()));
        assert_eq!((t.scheme, t.port, t.path_and_query.as_str()), (Scheme::Https, 443, "/repos/x?y=1"));
        assert_eq!(t.url(), "https://api.github.com/repos/x?y=1");
        let t = parse_url("http://example.com:8080").unwrap();
        assert_eq!((t.port, t.path_and_query.as_str()), (8080, "/"));
        assert_eq!(t.origin(), "http://example.com:8080");
        let t = parse_url("http://[2606:4700::1111]:80/a").unwrap();
        assert_eq!(t.host, Host::Ip("2606:4700::1111".parse().unwrap()));
        assert_eq!(t.origin(), "http://[2606:4700::1111]");
        assert_eq!(parse_url("http://1.2.3.4/").unwrap().host, Host::Ip("1.2.3.4".parse().unwrap()));
        assert_eq!(parse_url("http://x.test?q").unwrap().path_and_query, "/?q");
    }

    #[test]
    fn unicode_hosts_become_their_ascii_form() {
        assert_eq!(
            parse_url("https://bücher.example/").unwrap().host,
            Host::Name("xn--bcher-kva.example".into())
        );
        assert_eq!(parse_url("https://ＥＸＡＭＰＬＥ.com/").unwrap().host, Host::Name("example.com".into()));
    }

    #[test]
    fn schemes_and_userinfo() {
        for url in ["ftp://x.com/", "file:///etc/passwd", "gopher://x.com/", "javascript://x.com/"] {
            assert_eq!(reason(url), Reason::SchemeNotAllowed, "{url}");
        }
        for url in [
            "http://user:pass@x.com/",
            "http://@x.com/",
            "http://user@x.com/",
            "http://:@x.com/",
            "http://a@127.0.0.1@x.com/",
        ] {
            assert_eq!(reason(url), Reason::UserinfoPresent, "{url}");
        }
        assert_eq!(reason("x.com/path"), Reason::UrlMalformed);
        assert_eq!(reason("//x.com/"), Reason::UrlMalformed);
    }

    #[test]
    fn non_canonical_ipv4_is_refused_even_when_public() {
        for url in [
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.1/",
            "http://127.000.000.001/",
            "http://010.0.0.1/",
            "http://8.8.8.010/",
            "http://134744072/",
            "http://1.2.3.4./",
            "http://1.2.3.4.5/",
            "http://256.1.1.1/",
            "http://foo.0x10/",
            "http://foo.123/",
            "http://１２７.０.０.１/",
        ] {
            assert_eq!(reason(url), Reason::HostNoncanonicalIp, "{url}");
        }
    }

    #[test]
    fn ambiguous_spellings_are_refused() {
        assert_eq!(reason("http://127.0.0.1%2e/"), Reason::HostPercentEncoded);
        assert_eq!(reason("http://%31%32%37.0.0.1/"), Reason::HostPercentEncoded);
        assert_eq!(reason("http://[fe80::1%25eth0]/"), Reason::HostZoneId);
        assert_eq!(reason("http://[fe80::1%eth0]/"), Reason::HostZoneId);
        for url in [
            "http://x.com\\@evil.com/",
            "http://x.com/a b",
            "http://x.com/\t",
            "http://x.com\n/",
            "http://x.com/\u{7f}",
        ] {
            assert_eq!(reason(url), Reason::UrlForbiddenCharacter, "{url:?}");
        }
        // An empty port is the scheme's default, not an error.
        for (url, port) in [("http://x.com:/", 80), ("https://x.com:/a", 443), ("http://[::1]:/", 80)] {
            assert_eq!(parse_url(url).map(|t| t.port), Ok(port), "{url}");
        }
        for url in [
            "http://x.com:65536/",
            "http://x.com:0/",
            "http://x.com:080/",
            "http://x.com:+80/",
            "http://x.com:8o/",
            "http://[::1]:99999/",
        ] {
            assert_eq!(reason(url), Reason::PortInvalid, "{url}");
        }
        for url in [
            "http:///",
            "http://:80/",
            "http://a..b/",
            "http://-a.com/",
            "http://a_b<.com/",
            "http://[::1/",
            "http://[1.2.3.4]/",
        ] {
            assert!(parse_url(url).is_err(), "{url}");
        }
    }

    #[test]
    fn connect_authorities_parse_alike() {
        assert_eq!(
            parse_authority("example.com:443").unwrap(),
            (Host::Name("example.com".into()), Some(443))
        );
        assert_eq!(parse_authority("[::1]:8443").unwrap(), (Host::Ip("::1".parse().unwrap()), Some(8443)));
        assert_eq!(parse_authority("u@example.com:443").unwrap_err(), Reason::UserinfoPresent);
    }

    proptest::proptest! {
        /// The parser never panics, and whatever it accepts re-parses to itself.
        #[test]
        fn accepted_urls_are_a_fixed_point(s in "\\PC{0,80}") {
            if let Ok(t) = parse_url(&s) {
                proptest::prop_assert_eq!(parse_url(&t.url()), Ok(t));
            }
        }

        #[test]
        fn http_urls_with_arbitrary_hosts_never_panic(host in "[a-zA-Z0-9.:%@\\[\\]x_-]{0,40}", port in proptest::option::of(0u32..70000)) {
            let url = match port {
                Some(p) => format!("http://{host}:{p}/"),
                None => format!("http://{host}/"),
            };
            if let Ok(t) = parse_url(&url) {
                proptest::prop_assert_eq!(parse_url(&t.url()), Ok(t.clone()));
                if let Host::Ip(IpAddr::V4(ip)) = t.host {
                    proptest::prop_assert!(url.contains(&ip.to_string()), "IPv4 only in canonical form");
                }
            }
        }
    }
}
