//! The fetch client against real loopback upstreams that answer badly.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]
#![allow(clippy::disallowed_methods, reason = "the egress crate's own tests probe loopback servers")]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::sync::Arc;

use gatehouse_egress::connect::tls_config;
use gatehouse_egress::fetch::{FetchRequest, Fetcher};
use gatehouse_egress::proxy::{Limits, Resolver};
use gatehouse_egress::{AddressGuard, Policy, Purpose};

/// An upstream that answers each request with `answer` (status line on).
fn upstream(answer: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

async fn fetch(
    port: u16,
) -> Result<gatehouse_egress::fetch::FetchResponse, gatehouse_egress::fetch::FetchRefusal> {
    let fetcher = Fetcher::new(
        AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]),
        Resolver::Static(Arc::default()),
        Limits::default(),
        tls_config(&[]).unwrap(),
    );
    let req = FetchRequest {
        method: http::Method::GET,
        url: format!("http://127.0.0.1:{port}/"),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
        purpose: Purpose::Request,
        scrub: Default::default(),
        last_check: None,
    };
    fetcher.fetch(Ok(&Policy::open()), req).await
}

#[tokio::test]
async fn ambiguous_framing_is_refused_and_a_length_is_never_passed_on() {
    for answer in [
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\nconnection: close\r\n\r\nhello!",
        "HTTP/1.1 200 OK\r\ncontent-length: +5\r\nconnection: close\r\n\r\nhello",
    ] {
        let refusal = fetch(upstream(answer)).await.unwrap_err();
        assert_eq!(refusal.reason.as_str(), "upstream_bad_response", "{answer:?}");
    }
    let fine = fetch(upstream("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"))
        .await
        .unwrap();
    assert_eq!(&fine.body[..], b"hello");
    assert!(fine.headers.get(http::header::CONTENT_LENGTH).is_none(), "{:?}", fine.headers);
}
