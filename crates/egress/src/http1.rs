//! The rules of an HTTP/1 exchange that every door shares: which headers
//! belong to one hop or to gatehouse alone, when an answer's framing is
//! sound, and the limits on one request and tunnel. Below the proxy, the
//! fetch client and the lease door alike, so none of them reaches into
//! another for them.

use std::time::Duration;

use gatehouse_core::Reason;
use http::{HeaderMap, HeaderName, header};

/// Limits applied to every request and tunnel.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Ports `CONNECT` may reach [443]. Plain HTTP goes absolute-form,
    /// where every request is checked; a tunnel to port 80 carries requests
    /// for any virtual host unseen.
    pub connect_ports: Vec<u16>,
    /// How long a new tunnel's client may take to send its opening (the TLS
    /// ClientHello the tunnel is held to).
    pub hello_timeout: Duration,
    /// Bytes a tunnel may carry, both directions together.
    pub tunnel_bytes: u64,
    /// How long a tunnel may stay open.
    pub tunnel_duration: Duration,
    /// Response body cap for forwarded requests.
    pub response_bytes: usize,
    /// Request body cap for forwarded requests (uploads).
    pub request_bytes: usize,
    /// How long one TCP connect to an upstream may take.
    pub connect_timeout: Duration,
    /// Time to the upstream's response headers.
    pub response_timeout: Duration,
    /// How long a forwarded request may take in all, its response body
    /// included: an upstream that trickles a body cannot hold the proxy.
    pub request_duration: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_ports: vec![443],
            hello_timeout: Duration::from_secs(10),
            tunnel_bytes: 1 << 30,
            tunnel_duration: Duration::from_secs(600),
            response_bytes: 64 << 20,
            request_bytes: 64 << 20,
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(30),
            request_duration: Duration::from_secs(600),
        }
    }
}

/// Refuses an upstream answer whose framing is ambiguous (RFC 9112 §6.3):
/// `Transfer-Encoding` beside `Content-Length`, or a `Content-Length` that
/// is not one plain number. Passing either on would hand the client a
/// length that does not describe the body (request smuggling's raw material).
pub(crate) fn framing_is_sound(headers: &HeaderMap) -> Result<(), Reason> {
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    let length = lengths.next();
    let sound = match length {
        None => true,
        Some(_) if headers.contains_key(header::TRANSFER_ENCODING) || lengths.next().is_some() => false,
        Some(v) => !v.is_empty() && v.as_bytes().iter().all(u8::is_ascii_digit),
    };
    if sound { Ok(()) } else { Err(Reason::UpstreamBadResponse) }
}

/// The hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own
/// credentials: never passed from one side to the other.
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// Removes [`HOP_BY_HOP`] headers and the ones `Connection` names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// Headers only gatehouse sets on a fetch beyond the hop-by-hop ones
/// ([`HOP_BY_HOP`]): the message's length (which a caller could
/// set to hang the upstream or cut the body), `Host` (which would name
/// another virtual host behind the checked address) and `Expect` (a
/// `100-continue` the fetch does not wait for).
const GATEHOUSE_ONLY_HEADERS: &[&str] = &["content-length", "host", "expect"];

/// Whether only gatehouse may set `name` (lowercase): hop-by-hop, framing,
/// `Host`, `Expect`. Fetch callers and credential rules alike are held to it.
pub(crate) fn gatehouse_only(name: &str) -> bool {
    GATEHOUSE_ONLY_HEADERS.contains(&name) || HOP_BY_HOP.contains(&name)
}

/// Refuses a caller's header that only gatehouse may set
/// (`header_not_allowed`), instead of dropping it unseen or passing it on.
pub fn caller_headers_are_allowed(headers: &HeaderMap) -> Result<(), Reason> {
    if headers.keys().any(|name| gatehouse_only(name.as_str())) {
        return Err(Reason::HeaderNotAllowed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn framing_and_connection_headers_are_gatehouse_s_own() {
        for name in GATEHOUSE_ONLY_HEADERS.iter().chain(HOP_BY_HOP) {
            let mut headers = HeaderMap::new();
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static("1"));
            assert_eq!(caller_headers_are_allowed(&headers), Err(Reason::HeaderNotAllowed), "{name}");
        }
        let mut ordinary = HeaderMap::new();
        ordinary.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        ordinary.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert_eq!(caller_headers_are_allowed(&ordinary), Ok(()));
    }
}
