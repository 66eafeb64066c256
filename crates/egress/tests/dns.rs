//! Resolution through configured servers: a tiny authoritative responder on
//! a loopback UDP port, and the decision it leads to.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]
#![allow(clippy::disallowed_methods, reason = "the egress crate's own tests run loopback servers")]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use gatehouse_core::Reason;
use gatehouse_egress::resolve::DnsResolver;
use gatehouse_egress::{AddressGuard, Policy, Purpose, decide};

/// Answers every A query with `answer` and every other query with no records.
fn dns_server(answer: Ipv4Addr) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let q = &buf[..n];
            // Header (12 bytes), then the question: labels up to a zero byte, type, class.
            let mut i = 12;
            while i < n && q[i] != 0 {
                i += 1 + usize::from(q[i]);
            }
            let end = i + 5;
            if end > n {
                continue;
            }
            let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
            let mut r = Vec::from(&q[..2]);
            r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(qtype == 1), 0, 0, 0, 0]);
            r.extend_from_slice(&q[12..end]);
            if qtype == 1 {
                r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                r.extend_from_slice(&answer.octets());
            }
            let _ = socket.send_to(&r, peer);
        }
    });
    addr
}

#[tokio::test]
async fn configured_servers_answer_and_their_answers_are_checked() {
    let public = dns_server(Ipv4Addr::new(93, 184, 216, 34));
    let dns = DnsResolver::with_servers(&[public]).unwrap();
    assert_eq!(dns.lookup("example.test").await, Ok(vec!["93.184.216.34".parse().unwrap()]));

    let rebinding = dns_server(Ipv4Addr::new(127, 0, 0, 1));
    let dns = DnsResolver::with_servers(&[rebinding]).unwrap();
    let answer = dns.lookup("innocent.test").await;
    let d = decide(
        "https://innocent.test/",
        Ok(&Policy::open()),
        &AddressGuard::default(),
        Purpose::Request,
        1_800_000_000,
        |_| answer,
    );
    assert_eq!(d.refusal(), Some(Reason::AddressSpecialPurpose));
}

#[tokio::test]
async fn an_unreachable_server_is_a_failed_lookup() {
    // Nothing listens on this port: the lookup fails, it never succeeds empty-handed.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dns = DnsResolver::with_servers(&[silent]).unwrap();
    assert_eq!(dns.lookup("example.test").await, Err(()));
}
