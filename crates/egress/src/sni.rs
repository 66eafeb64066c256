//! What a `CONNECT` tunnel's first bytes say about where they are going.
//!
//! The door checks the tunnel's host and dials an address it vetted, but one
//! address serves many virtual hosts: a run allowed `a.example` could ask
//! the server at that address for `b.example`. For TLS the name it asks for
//! is the ClientHello's `server_name` (RFC 6066 §3), sent in the clear before
//! anything else, so the tunnel reads the ClientHello (parsed by rustls, not
//! by hand) and holds it to the checked host before a byte is passed on.
//!
//! The rule, decided by [`judge`]:
//! - a tunnel to a host name must begin with a ClientHello whose SNI is that
//!   name (`tunnel_not_tls`, `tunnel_sni_missing`, `tunnel_sni_mismatch`);
//! - a tunnel to an IP address was checked as that address: a ClientHello
//!   may come without SNI (clients send none for an address, RFC 6066 §3),
//!   but one that names a host is refused as a mismatch, since that host was
//!   never checked; a stream that is not TLS is the address's business.
//!
//! With Encrypted Client Hello the outer SNI is the client-facing server's
//! public name, and that is what is held to the host: a client using ECH
//! must open its tunnel to that public name.

use gatehouse_core::Reason;
use rustls::server::Acceptor;

use crate::target::Host;

/// The most of a ClientHello the tunnel waits for. Real ones, post-quantum
/// key shares included, are under 2 KiB; the TLS record layer allows a
/// handshake message up to 2^24 bytes, which no tunnel is made to buffer.
pub const MAX_CLIENT_HELLO: usize = 64 << 10;

/// What the first bytes of a tunnel are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstBytes {
    /// Not yet enough to tell: read more.
    Incomplete,
    /// Not a TLS handshake record (or a malformed one).
    NotTls,
    /// A complete ClientHello, with the name it asks for, if any.
    ClientHello(Option<String>),
}

/// Reads `buf`, everything the client has sent so far.
pub fn read_first_bytes(buf: &[u8]) -> FirstBytes {
    match buf.first() {
        None => return FirstBytes::Incomplete,
        // A TLS record of content type handshake (RFC 8446 §5.1).
        Some(0x16) => {}
        Some(_) => return FirstBytes::NotTls,
    }
    if buf.len() > MAX_CLIENT_HELLO {
        return FirstBytes::NotTls;
    }
    let mut acceptor = Acceptor::default();
    let mut rest = buf;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return FirstBytes::NotTls,
        }
    }
    match acceptor.accept() {
        Ok(None) => FirstBytes::Incomplete,
        Ok(Some(accepted)) => {
            FirstBytes::ClientHello(accepted.client_hello().server_name().map(str::to_owned))
        }
        Err(_) => FirstBytes::NotTls,
    }
}

/// Whether a tunnel opened to `host` may carry a stream that began so.
/// `Incomplete` is not judged here: the caller reads more first.
pub fn judge(host: &Host, first: &FirstBytes) -> Result<(), Reason> {
    match (host, first) {
        (Host::Name(name), FirstBytes::ClientHello(Some(sni))) => {
            // Both sides as DNS compares names: ASCII case-insensitive, no
            // trailing dot (the host was normalised by the URL parser).
            if sni.trim_end_matches('.').eq_ignore_ascii_case(name) {
                Ok(())
            } else {
                Err(Reason::TunnelSniMismatch)
            }
        }
        (Host::Name(_), FirstBytes::ClientHello(None)) => Err(Reason::TunnelSniMissing),
        (Host::Name(_), FirstBytes::NotTls | FirstBytes::Incomplete) => Err(Reason::TunnelNotTls),
        (Host::Ip(_), FirstBytes::ClientHello(Some(_))) => Err(Reason::TunnelSniMismatch),
        (Host::Ip(_), _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_test_support::tls_client_hello as client_hello;

    fn name(n: &str) -> Host {
        Host::Name(n.into())
    }

    #[test]
    fn the_client_hello_names_its_server() {
        let hello = client_hello("a.example");
        assert_eq!(read_first_bytes(&hello), FirstBytes::ClientHello(Some("a.example".into())));
        assert_eq!(read_first_bytes(&client_hello("10.0.0.1")), FirstBytes::ClientHello(None));
        // Every proper prefix is incomplete, never a verdict.
        for cut in 1..hello.len() {
            assert_eq!(read_first_bytes(&hello[..cut]), FirstBytes::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn anything_else_is_not_tls() {
        assert_eq!(read_first_bytes(b""), FirstBytes::Incomplete);
        assert_eq!(read_first_bytes(b"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n"), FirstBytes::NotTls);
        assert_eq!(read_first_bytes(b"SSH-2.0-OpenSSH_9.6\r\n"), FirstBytes::NotTls);
        // A handshake record holding something other than a ClientHello.
        assert_eq!(read_first_bytes(&[0x16, 3, 3, 0, 4, 2, 0, 0, 0]), FirstBytes::NotTls);
        // A record claiming more than the tunnel will wait for.
        let mut huge = vec![0x16, 3, 1, 0xff, 0xff];
        huge.resize(MAX_CLIENT_HELLO + 1, 0);
        assert_eq!(read_first_bytes(&huge), FirstBytes::NotTls);
    }

    #[test]
    fn a_host_name_tunnel_must_carry_tls_for_that_name() {
        let hello = |n: &str| FirstBytes::ClientHello(Some(n.into()));
        assert_eq!(judge(&name("a.example"), &hello("a.example")), Ok(()));
        assert_eq!(judge(&name("a.example"), &hello("A.Example.")), Ok(()));
        assert_eq!(judge(&name("a.example"), &hello("b.example")), Err(Reason::TunnelSniMismatch));
        assert_eq!(judge(&name("a.example"), &hello("a.example.evil")), Err(Reason::TunnelSniMismatch));
        assert_eq!(judge(&name("a.example"), &FirstBytes::ClientHello(None)), Err(Reason::TunnelSniMissing));
        assert_eq!(judge(&name("a.example"), &FirstBytes::NotTls), Err(Reason::TunnelNotTls));
    }

    #[test]
    fn an_address_tunnel_may_not_name_a_host() {
        let ip = Host::Ip("192.0.2.7".parse().unwrap());
        assert_eq!(judge(&ip, &FirstBytes::ClientHello(None)), Ok(()));
        assert_eq!(judge(&ip, &FirstBytes::NotTls), Ok(()));
        assert_eq!(
            judge(&ip, &FirstBytes::ClientHello(Some("b.example".into()))),
            Err(Reason::TunnelSniMismatch)
        );
    }
}
