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
        format!("{}://{}", self.scheme.as_str(), self.authority())
    }

    /// `host[:port]`, the port only when it is not the scheme's default:
    /// the `Host` header every door sends.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
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
    let target = Target { scheme, host, port, path_and_query };
    // The cap is on what gatehouse sends: percent-encoding and IDNA can make
    // the canonical URL longer than the raw one (only for non-ASCII input,
    // or by the `/` added to an empty path at the cap), and a URL accepted
    // once must parse again to itself.
    if (!raw.is_ascii() || raw.len() == MAX_URL_BYTES) && target.url().len() > MAX_URL_BYTES {
        return Err(Reason::UrlMalformed);
    }
    Ok(target)
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

    #[test]
    fn the_length_cap_is_exact() {
        let base = "http://x.example/";
        let at_cap = format!("{base}{}", "a".repeat(MAX_URL_BYTES - base.len()));
        assert_eq!(parse_url(&at_cap).map(|t| t.path_and_query.len()), Ok(MAX_URL_BYTES - base.len() + 1));
        assert_eq!(parse_url(&format!("{at_cap}a")), Err(Reason::UrlMalformed));
        // Under the cap as sent, over it once percent-encoded: refused, so
        // nothing longer than the cap is ever forwarded (found by fuzzing).
        let grows = format!("{base}{}", "\u{fffd}".repeat((MAX_URL_BYTES - base.len()) / 3));
        assert!(grows.len() <= MAX_URL_BYTES);
        assert_eq!(parse_url(&grows), Err(Reason::UrlMalformed));
    }

    /// Generated URLs: every part drawn from its own grammar, at most one of
    /// them spoiled, with the answer the parser owes for what was generated.
    mod generated {
        use super::*;
        use proptest::prelude::*;
        use proptest::sample::Index;

        /// The closed list `parse_url` answers from.
        pub(super) const URL_REASONS: &[Reason] = &[
            Reason::UrlMalformed,
            Reason::UrlForbiddenCharacter,
            Reason::SchemeNotAllowed,
            Reason::UserinfoPresent,
            Reason::HostInvalid,
            Reason::HostNoncanonicalIp,
            Reason::HostPercentEncoded,
            Reason::HostZoneId,
            Reason::PortInvalid,
        ];

        /// Unicode labels and their IDNA ASCII form.
        const UNICODE_LABELS: &[(&str, &str)] = &[
            ("bücher", "xn--bcher-kva"),
            ("BÜCHER", "xn--bcher-kva"),
            ("münchen", "xn--mnchen-3ya"),
            ("日本", "xn--wgv71a"),
            ("ＥＸＡＭＰＬＥ", "example"),
            ("ｘ１", "x1"),
        ];

        /// A host as written in the URL, and what it must parse to.
        #[derive(Debug, Clone)]
        pub(super) struct HostCase {
            pub(super) text: String,
            pub(super) host: Host,
        }

        /// A URL and the parser's due answer.
        #[derive(Debug, Clone)]
        pub(super) struct Case {
            pub(super) url: String,
            pub(super) expected: Result<Target, Reason>,
        }

        fn label() -> impl Strategy<Value = (String, String)> {
            prop_oneof![
                4 => "[a-zA-Z0-9_]{1,8}(-[a-zA-Z0-9_]{1,8})?".prop_map(|l| (l.clone(), l.to_ascii_lowercase())),
                1 => prop::sample::select(UNICODE_LABELS).prop_map(|(u, a)| (u.to_owned(), a.to_owned())),
            ]
        }

        /// A last label: never numeric, though it may start like a number.
        fn last_label() -> impl Strategy<Value = (String, String)> {
            prop_oneof![
                4 => "[a-zA-Z][a-zA-Z0-9_]{0,8}(-[a-zA-Z0-9_]{1,8})?",
                1 => "[0-9]{1,3}[a-zA-Z_][a-zA-Z0-9]{0,3}",
                1 => "0[xX][g-zG-Z][a-fA-F0-9]{0,3}",
            ]
            .prop_map(|l| (l.clone(), l.to_ascii_lowercase()))
            .boxed()
            .prop_union(
                prop::sample::select(UNICODE_LABELS).prop_map(|(u, a)| (u.to_owned(), a.to_owned())).boxed(),
            )
            // Shrinking can take a label down to `0x`, which URL parsers
            // read as the number 0: an IPv4 address, not a name.
            .prop_filter("a numeric last label is an IPv4 address", |(_, ascii)| !is_numeric_label(ascii))
        }

        pub(super) fn name_host() -> impl Strategy<Value = HostCase> {
            (prop::collection::vec(label(), 0..4), last_label(), any::<bool>()).prop_map(
                |(labels, last, dot)| {
                    let (mut text, mut ascii): (Vec<String>, Vec<String>) = labels.into_iter().unzip();
                    text.push(last.0);
                    ascii.push(last.1);
                    let mut text = text.join(".");
                    if dot {
                        text.push('.');
                    }
                    HostCase { text, host: Host::Name(ascii.join(".")) }
                },
            )
        }

        fn ascii_name_host() -> impl Strategy<Value = HostCase> {
            name_host().prop_filter("ASCII", |h| h.text.is_ascii())
        }

        fn ipv4_host() -> impl Strategy<Value = HostCase> {
            any::<[u8; 4]>().prop_map(|o| {
                let ip = Ipv4Addr::from(o);
                HostCase { text: ip.to_string(), host: Host::Ip(IpAddr::V4(ip)) }
            })
        }

        fn ipv6_segments() -> impl Strategy<Value = [u16; 8]> {
            prop::array::uniform8(prop_oneof![Just(0u16), Just(0xffff), any::<u16>()])
        }

        /// An IPv6 address in one of its legitimate spellings (unbracketed).
        fn ipv6_text() -> impl Strategy<Value = (String, Ipv6Addr)> {
            (ipv6_segments(), 0u8..4).prop_map(|(seg, form)| {
                let ip = Ipv6Addr::from(seg);
                let text = match form {
                    0 => ip.to_string(),
                    1 => seg.iter().map(|s| format!("{s:x}")).collect::<Vec<_>>().join(":"),
                    2 => seg.iter().map(|s| format!("{s:04X}")).collect::<Vec<_>>().join(":"),
                    _ => {
                        let head = seg[..6].iter().map(|s| format!("{s:x}")).collect::<Vec<_>>().join(":");
                        let [a, b] = seg[6].to_be_bytes();
                        let [c, d] = seg[7].to_be_bytes();
                        format!("{head}:{a}.{b}.{c}.{d}")
                    }
                };
                (text, ip)
            })
        }

        fn ipv6_host() -> impl Strategy<Value = HostCase> {
            ipv6_text()
                .prop_map(|(text, ip)| HostCase { text: format!("[{text}]"), host: Host::Ip(IpAddr::V6(ip)) })
        }

        pub(super) fn host() -> impl Strategy<Value = HostCase> {
            prop_oneof![3 => name_host(), 1 => ipv4_host(), 1 => ipv6_host()]
        }

        /// `(text, port)`: absent, empty (the default) or canonical decimal.
        pub(super) fn port() -> impl Strategy<Value = (String, Option<u16>)> {
            prop_oneof![
                2 => Just((String::new(), None)),
                1 => Just((":".to_owned(), None)),
                3 => (1u16..=u16::MAX).prop_map(|p| (format!(":{p}"), Some(p))),
            ]
        }

        fn path() -> impl Strategy<Value = String> {
            prop_oneof![
                1 => Just(String::new()),
                4 => prop::collection::vec("([A-Za-z0-9._~!$&'()*+,;=:@%-]|%2[fF]|%41|é|日|🙂){0,8}", 1..4)
                    .prop_map(|segs| segs.iter().map(|s| format!("/{s}")).collect()),
            ]
        }

        fn query() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(String::new()),
                "([A-Za-z0-9._~!$&'()*+,;=:@%/?-]|://|é|日){0,12}".prop_map(|q| format!("?{q}")),
            ]
        }

        fn fragment() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(String::new()),
                "([A-Za-z0-9._~!$&'()*+,;=:@%/?#-]|é|://){0,8}".prop_map(|f| format!("#{f}")),
            ]
        }

        fn scheme() -> impl Strategy<Value = (String, Scheme)> {
            (prop::sample::select(&["http", "https"][..]), any::<u8>()).prop_map(|(s, case)| {
                let text: String = s
                    .chars()
                    .enumerate()
                    .map(|(i, c)| if case >> (i % 8) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                    .collect();
                (text, if s == "http" { Scheme::Http } else { Scheme::Https })
            })
        }

        /// Spellings of an IPv4 address that are not canonical dotted-quad.
        fn noncanonical_ipv4() -> impl Strategy<Value = String> {
            (any::<u32>(), 0u8..11, 0usize..4, 256u32..1000, name_host()).prop_map(
                |(n, form, i, big, name)| {
                    let o = n.to_be_bytes();
                    let quad = |o: [String; 4]| o.join(".");
                    let dec = o.map(|b| b.to_string());
                    match form {
                        0 => n.to_string(),
                        1 => format!("0x{n:x}"),
                        2 => {
                            let mut d = dec.clone();
                            d[i] = format!("0{:o}", o[i]);
                            quad(d)
                        }
                        3 => format!("{}.{}", o[0], n & 0x00ff_ffff),
                        4 => format!("{}.{}.{}", o[0], o[1], n & 0xffff),
                        5 => {
                            let mut d = dec.clone();
                            d[i] = format!("00{}", o[i]);
                            quad(d)
                        }
                        6 => format!("{}.", quad(dec)),
                        7 => format!("{}.{}", quad(dec), o[i]),
                        8 => {
                            let mut d = dec.clone();
                            d[i] = big.to_string();
                            quad(d)
                        }
                        9 => {
                            let name = name.text.trim_end_matches('.');
                            if i % 2 == 0 { format!("{name}.{n}") } else { format!("{name}.0x{n:X}") }
                        }
                        // Full-width digits and dots, which IDNA maps to ASCII.
                        _ => quad(dec)
                            .chars()
                            .map(|c| match c {
                                '.' if i % 2 == 0 => '。',
                                '.' => '．',
                                d => char::from_u32(0xff10 + d.to_digit(10).unwrap()).unwrap(),
                            })
                            .collect(),
                    }
                },
            )
        }

        fn percent_encode_one(text: &str, at: Index) -> String {
            let chars: Vec<char> = text.chars().collect();
            let i = at.index(chars.len());
            let mut buf = [0u8; 4];
            let encoded: String =
                chars[i].encode_utf8(&mut buf).bytes().map(|b| format!("%{b:02x}")).collect();
            chars[..i]
                .iter()
                .chain(encoded.chars().collect::<Vec<_>>().iter())
                .chain(&chars[i + 1..])
                .collect()
        }

        /// Hosts that are refused, with the reason.
        fn bad_host() -> impl Strategy<Value = (String, Reason)> {
            let bad_char = prop::sample::select(
                &[
                    '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', '<', '>', '^', '|', '"', '{',
                    '}', '`', '~',
                ][..],
            );
            prop_oneof![
                noncanonical_ipv4().prop_map(|h| (h, Reason::HostNoncanonicalIp)),
                (name_host(), any::<Index>())
                    .prop_map(|(h, at)| (percent_encode_one(&h.text, at), Reason::HostPercentEncoded)),
                (ipv4_host(), any::<Index>())
                    .prop_map(|(h, at)| (percent_encode_one(&h.text, at), Reason::HostPercentEncoded)),
                (ipv6_text(), "(25)?[a-zA-Z0-9]{1,6}")
                    .prop_map(|((t, _), z)| (format!("[{t}%{z}]"), Reason::HostZoneId)),
                prop::sample::select(
                    &[
                        "[1.2.3.4]",
                        "[]",
                        "[::1::2]",
                        "[12345::]",
                        "[g::1]",
                        "[1:2:3:4:5:6:7:8:9]",
                        "[1:2:3:4:5:6:7]",
                        "[::1.2.3]",
                        "[::ffff:1.2.3.256]",
                        "[v1.x]",
                    ][..]
                )
                .prop_map(|h| (h.to_owned(), Reason::HostInvalid)),
                ipv6_text().prop_map(|(t, _)| (format!("[{t}"), Reason::UrlMalformed)),
                (ipv6_text(), "[a-zA-Z0-9.]{1,4}")
                    .prop_map(|((t, _), junk)| (format!("[{t}]{junk}"), Reason::UrlMalformed)),
                Just((String::new(), Reason::HostInvalid)),
                (label(), last_label()).prop_map(|(a, b)| (format!("{}..{}", a.0, b.0), Reason::HostInvalid)),
                (label(), last_label()).prop_map(|(a, b)| (format!(".{}.{}", a.0, b.0), Reason::HostInvalid)),
                (last_label(), 64usize..70)
                    .prop_map(|(b, n)| (format!("{}.{}", "a".repeat(n), b.0), Reason::HostInvalid)),
                (last_label(), 4usize..6).prop_map(|(b, n)| (
                    format!("{}{}", "abcdefghi.".repeat(25 + n), b.0),
                    Reason::HostInvalid
                )),
                // ASCII names: a Unicode label with a hyphen at its edge is
                // a valid IDNA label (`xn--` and the hyphen inside).
                (ascii_name_host(), any::<bool>()).prop_map(|(h, lead)| {
                    let name = h.text.trim_end_matches('.');
                    (if lead { format!("-{name}") } else { format!("{name}-") }, Reason::HostInvalid)
                }),
                (ascii_name_host(), any::<Index>(), bad_char).prop_map(|(h, at, c)| {
                    let mut chars: Vec<char> = h.text.chars().collect();
                    chars.insert(at.index(chars.len() + 1), c);
                    (chars.into_iter().collect(), Reason::HostInvalid)
                }),
            ]
        }

        fn bad_port() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("0".to_owned()),
                (65_536u32..1_000_000).prop_map(|p| p.to_string()),
                (0u16..=u16::MAX).prop_map(|p| format!("0{p}")),
                (1u16..=u16::MAX, prop::sample::select(&["+", "-", " ", "0x"][..]))
                    .prop_map(|(p, s)| format!("{s}{p}")),
                (1u16..=u16::MAX, "[a-zA-Z.%_]{1,3}").prop_map(|(p, s)| format!("{p}{s}")),
                Just("８０".to_owned()),
                Just("1000000000000000000000".to_owned()),
            ]
            .prop_filter("no whitespace (another fault)", |p| !p.contains(' '))
        }

        #[derive(Debug, Clone)]
        enum Fault {
            None,
            Forbidden(Index, char),
            Scheme(String, Reason),
            Separator(&'static str),
            Userinfo(String),
            Host(String, Reason),
            Port(String),
            TooLong,
        }

        fn fault() -> impl Strategy<Value = Fault> {
            let forbidden = prop::sample::select(
                &[
                    ' ', '\t', '\n', '\r', '\0', '\u{1b}', '\u{7f}', '\\', '\u{85}', '\u{a0}', '\u{2028}',
                    '\u{3000}', '\u{1680}', '\u{0b}', '\u{0c}',
                ][..],
            );
            let other_scheme = "[a-zA-Z][a-zA-Z0-9+.-]{0,8}".prop_filter("not http(s)", |s| {
                !["http", "https"].contains(&s.to_ascii_lowercase().as_str())
            });
            prop_oneof![
                6 => Just(Fault::None),
                1 => (any::<Index>(), forbidden).prop_map(|(at, c)| Fault::Forbidden(at, c)),
                1 => other_scheme.prop_map(|s| Fault::Scheme(s, Reason::SchemeNotAllowed)),
                1 => prop_oneof![Just(String::new()), "[a-z]{0,3}[_%!~*'é\\[][a-z]{0,3}", "[0-9+.-][a-z]{0,3}:"]
                    .prop_filter("a malformed scheme", |s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
                    .prop_map(|s| Fault::Scheme(s, Reason::UrlMalformed)),
                1 => prop::sample::select(&[":/", ":", "//", "", ":\u{2f}\u{2044}"][..]).prop_map(Fault::Separator),
                1 => "[a-zA-Z0-9._~!$&'()*+,;=:%-]{0,8}(@[a-zA-Z0-9]{0,3})?@".prop_map(Fault::Userinfo),
                4 => bad_host().prop_map(|(h, r)| Fault::Host(h, r)),
                1 => bad_port().prop_map(Fault::Port),
                1 => Just(Fault::TooLong),
            ]
        }

        /// What the parser makes of the path and query: non-ASCII
        /// percent-encoded, `/` when both are empty.
        fn expected_path_and_query(path: &str, query: &str) -> String {
            let mut out = String::new();
            if path.is_empty() {
                out.push('/');
            }
            for c in path.chars().chain(query.chars()) {
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

        pub(super) fn case() -> impl Strategy<Value = Case> {
            (scheme(), host(), port(), path(), query(), fragment(), fault()).prop_map(
                |((scheme_text, scheme), host, (port_text, port), path, query, fragment, fault)| {
                    let target = Target {
                        scheme,
                        host: host.host.clone(),
                        port: port.unwrap_or(scheme.default_port()),
                        path_and_query: expected_path_and_query(&path, &query),
                    };
                    let (mut scheme_text, mut sep, mut userinfo, mut host_text, mut port_text, mut path) =
                        (scheme_text, "://", String::new(), host.text, port_text, path);
                    let expected = match &fault {
                        Fault::None | Fault::Forbidden(..) => Ok(target),
                        Fault::Scheme(s, r) => {
                            scheme_text = s.clone();
                            Err(*r)
                        }
                        Fault::Separator(s) => {
                            sep = *s;
                            Err(Reason::UrlMalformed)
                        }
                        Fault::Userinfo(u) => {
                            userinfo = u.clone();
                            Err(Reason::UserinfoPresent)
                        }
                        Fault::Host(h, r) => {
                            host_text = h.clone();
                            Err(*r)
                        }
                        Fault::Port(p) => {
                            port_text = format!(":{p}");
                            Err(Reason::PortInvalid)
                        }
                        Fault::TooLong => {
                            path = format!("/{}", "a".repeat(MAX_URL_BYTES));
                            Err(Reason::UrlMalformed)
                        }
                    };
                    let mut url =
                        format!("{scheme_text}{sep}{userinfo}{host_text}{port_text}{path}{query}{fragment}");
                    let expected = match fault {
                        // The separator left out, a later "://" (in the path,
                        // say) makes everything before it the scheme: a
                        // scheme-shaped one is some other scheme.
                        Fault::Separator(_)
                            if url.split_once("://").is_some_and(|(before, _)| {
                                !before.is_empty()
                                    && before
                                        .bytes()
                                        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
                            }) =>
                        {
                            Err(Reason::SchemeNotAllowed)
                        }
                        Fault::Forbidden(at, c) => {
                            let boundaries: Vec<usize> =
                                (0..=url.len()).filter(|&i| url.is_char_boundary(i)).collect();
                            url.insert(boundaries[at.index(boundaries.len())], c);
                            Err(Reason::UrlForbiddenCharacter)
                        }
                        _ => expected,
                    };
                    Case { url, expected }
                },
            )
        }

        /// Small edits: what a hostile or sloppy writer does to a URL.
        pub(super) fn edited() -> impl Strategy<Value = String> {
            let piece = prop::sample::select(
                &[
                    "/", ":", "@", "%", "%2e", "%00", ".", "[", "]", "?", "#", "0", "0x", "1", "://", "é",
                    "。", "１", "-", "_", "\\", " ", "\u{200b}", "\u{ad}", "%25", "..", ":0", "::", "A",
                ][..],
            );
            (case(), prop::collection::vec((any::<Index>(), piece, 0u8..3), 1..4)).prop_map(|(c, edits)| {
                let mut url = c.url;
                for (at, piece, op) in edits {
                    let boundaries: Vec<usize> =
                        (0..=url.len()).filter(|&i| url.is_char_boundary(i)).collect();
                    let i = boundaries[at.index(boundaries.len())];
                    match op {
                        0 => url.insert_str(i, piece),
                        1 => {
                            if let Some(c) = url[i..].chars().next() {
                                url.replace_range(i..i + c.len_utf8(), piece);
                            }
                        }
                        _ => {
                            if let Some(c) = url[i..].chars().next() {
                                url.replace_range(i..i + c.len_utf8(), "");
                            }
                        }
                    }
                }
                url
            })
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Every generated URL gets exactly the answer owed to what was
        /// generated: its parts, or the reason for the one spoiled part.
        #[test]
        fn generated_urls_parse_to_their_parts_or_their_reason(c in generated::case()) {
            let got = parse_url(&c.url);
            proptest::prop_assert_eq!(&got, &c.expected, "{:?}", c.url);
            if let Ok(t) = got {
                proptest::prop_assert_eq!(parse_url(&t.url()), Ok(t.clone()), "not a fixed point: {:?}", c.url);
                proptest::prop_assert_eq!(t.url(), format!("{}{}", t.origin(), t.path_and_query));
            }
        }

        /// `CONNECT` authorities read hosts and ports as URLs do.
        #[test]
        fn authorities_parse_as_urls_do(host in generated::host(), (port_text, port) in generated::port()) {
            let authority = format!("{}{port_text}", host.text);
            proptest::prop_assert_eq!(parse_authority(&authority), Ok((host.host, port)), "{:?}", authority);
        }

        /// Edited URLs: an answer from the closed list, or a target that is a
        /// fixed point and whose IPv4 address was written canonically.
        #[test]
        fn edited_urls_are_refused_from_the_list_or_a_fixed_point(url in generated::edited()) {
            match parse_url(&url) {
                Ok(t) => {
                    proptest::prop_assert_eq!(parse_url(&t.url()), Ok(t.clone()), "not a fixed point: {:?}", url);
                    if let Host::Ip(IpAddr::V4(ip)) = t.host {
                        let after_scheme = url.split_once("://").map_or("", |(_, r)| r);
                        proptest::prop_assert!(after_scheme.starts_with(&ip.to_string()), "IPv4 only canonical: {:?}", url);
                    }
                    if let Host::Name(n) = &t.host {
                        proptest::prop_assert!(is_dns_name(n), "{:?} -> {:?}", url, n);
                    }
                }
                Err(r) => proptest::prop_assert!(generated::URL_REASONS.contains(&r), "{:?}: {:?}", url, r),
            }
        }
    }
}
