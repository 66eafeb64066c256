//! The listener against real sockets on loopback: slow and silent clients,
//! idle keep-alive connections, the caps, shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods, reason = "test clients talking to the listener under test on loopback")]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use gatehouse_listener::{Limits, Listener};
use http_body_util::Full;
use hyper::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

const LIMITS: Limits = Limits {
    header_read_timeout: Duration::from_millis(300),
    idle_timeout: Duration::from_millis(500),
    max_connections: 8,
    max_connections_per_client: 3,
};

/// Set once a `/slow-in-hand` request has reached the handler.
static IN_HAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits (at most 5 s) until `condition` holds.
async fn until(mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < deadline, "the condition never held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `/slow` answers after 1.2 s (longer than the idle timeout), and so does
/// `/slow-in-hand`, which says it arrived (`IN_HAND`); anything else at once.
async fn handler(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == "/slow-in-hand" {
        IN_HAND.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    if req.uri().path().starts_with("/slow") {
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

async fn start(
    limits: Limits,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = Listener::new(tcp, limits);
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(listener.serve_http1(handler, async move {
        let _ = stopped.await;
    }));
    (addr, stop, served)
}

/// A client connection from `from` (any 127/8 address).
async fn connect(addr: SocketAddr, from: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Reads until the server closes the connection; returns what came and when it closed.
async fn read_to_close(stream: &mut TcpStream) -> (String, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), Instant::now()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection open for 5 s"),
        }
    }
}

/// Sends one request and reads one whole response (the body is "ok").
async fn round_trip(stream: &mut TcpStream, path: &str) -> String {
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before the response: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_client_that_sends_nothing_is_closed_after_the_header_timeout() {
    let (addr, _stop, _served) = start(LIMITS).await;
    let started = Instant::now();
    let mut silent = connect(addr, [127, 0, 0, 1]).await;
    let (_, closed) = read_to_close(&mut silent).await;
    let held = closed - started;
    assert!(held >= Duration::from_millis(250) && held < Duration::from_secs(2), "held {held:?}");
}

#[tokio::test]
async fn a_header_sent_slowly_is_cut_off_even_while_bytes_trickle_in() {
    let (addr, _stop, _served) = start(LIMITS).await;
    let started = Instant::now();
    let mut slow = connect(addr, [127, 0, 0, 1]).await;
    // One header byte every 50 ms: the connection is never idle, but the
    // header is never finished within 300 ms.
    let trickle = async {
        for b in b"GET / HTTP/1.1\r\nHost: example\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if slow.write_all(&[*b]).await.is_err() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the whole slow header was accepted");
    };
    let cut = trickle.await;
    let held = cut - started;
    assert!(held < Duration::from_secs(2), "held {held:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_but_a_slow_handler_is_not_idle() {
    let (addr, _stop, _served) = start(LIMITS).await;
    let mut client = connect(addr, [127, 0, 0, 1]).await;
    // The handler takes 1.2 s, more than twice the idle timeout: the
    // connection is busy, not idle, and the answer arrives.
    let answer = round_trip(&mut client, "/slow").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Keep-alive works while the client is active...
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(round_trip(&mut client, "/").await.starts_with("HTTP/1.1 200"));
    // ...and an idle connection is closed after the idle timeout.
    let idle_from = Instant::now();
    let (rest, closed) = read_to_close(&mut client).await;
    assert_eq!(rest, "");
    let idle = closed - idle_from;
    assert!(idle >= Duration::from_millis(400) && idle < Duration::from_secs(3), "closed after {idle:?}");
}

#[tokio::test]
async fn connections_over_a_clients_cap_are_closed_at_once_and_others_are_served() {
    let (addr, _stop, _served) = start(LIMITS).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = connect(addr, [127, 0, 0, 2]).await;
        assert!(round_trip(&mut c, "/").await.starts_with("HTTP/1.1 200"));
        held.push(c);
    }
    // The fourth from the same address is closed before it is read.
    let mut over = connect(addr, [127, 0, 0, 2]).await;
    let _ = over.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (answer, _) = read_to_close(&mut over).await;
    assert_eq!(answer, "", "a connection over the cap got an answer");
    // Another address is not affected.
    let mut other = connect(addr, [127, 0, 0, 3]).await;
    assert!(round_trip(&mut other, "/").await.starts_with("HTTP/1.1 200"));
    // A slot given back is usable again, once the listener has seen the
    // connection close (until then a new one is still over the cap).
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect(addr, [127, 0, 0, 2]).await;
        let _ = again.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        let (answer, _) = read_to_close(&mut again).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert_eq!(answer, "", "over the cap is closed unanswered");
        assert!(Instant::now() < deadline, "the slot given back never became usable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn connections_over_the_listeners_cap_are_closed_at_once() {
    let limits = Limits { max_connections: 4, max_connections_per_client: 4, ..LIMITS };
    let (addr, _stop, _served) = start(limits).await;
    let mut held = Vec::new();
    for i in 0..4u8 {
        let mut c = connect(addr, [127, 0, 1, i]).await;
        assert!(round_trip(&mut c, "/").await.starts_with("HTTP/1.1 200"));
        held.push(c);
    }
    let mut over = connect(addr, [127, 0, 1, 9]).await;
    let _ = over.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(read_to_close(&mut over).await.0, "");
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_hand_then_returns() {
    let (addr, stop, served) = start(LIMITS).await;
    let mut client = connect(addr, [127, 0, 0, 1]).await;
    client.write_all(b"GET /slow-in-hand HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    // Shut down once the request is in the handler's hands.
    until(|| IN_HAND.load(std::sync::atomic::Ordering::SeqCst)).await;
    stop.send(()).unwrap();
    let (answer, _) = read_to_close(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
    tokio::time::timeout(Duration::from_secs(3), served).await.unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting after shutdown");
}

#[tokio::test]
async fn a_later_requests_header_is_on_the_clock_from_its_first_byte() {
    let (addr, _stop, _served) = start(Limits { idle_timeout: Duration::from_secs(3), ..LIMITS }).await;
    let mut client = connect(addr, [127, 0, 0, 1]).await;
    assert!(round_trip(&mut client, "/").await.starts_with("HTTP/1.1 200"));
    // Idle longer than the header timeout, then start a header and stall.
    tokio::time::sleep(Duration::from_millis(600)).await;
    client.write_all(b"GET / HTTP/1.1\r\nHost").await.unwrap();
    let started = Instant::now();
    let (rest, closed) = read_to_close(&mut client).await;
    assert_eq!(rest, "");
    let held = closed - started;
    // The header timeout (300 ms), not the idle timeout (3 s).
    assert!(held >= Duration::from_millis(250) && held < Duration::from_secs(2), "held {held:?}");
}

/// A handler that answers with the client address it was given, if any.
async fn who(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let peer = req.extensions().get::<gatehouse_listener::PeerAddr>().map(|p| p.0.ip().to_string());
    Ok(Response::new(Full::new(Bytes::from(format!("{} ok", peer.unwrap_or_else(|| "none".into()))))))
}

#[tokio::test]
async fn the_client_address_is_given_to_handlers_only_when_asked_for() {
    for asked in [false, true] {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listener = Listener::new(tcp, LIMITS);
        let listener = if asked { listener.with_peer_addresses() } else { listener };
        let addr = listener.local_addr().unwrap();
        tokio::spawn(listener.serve_http1(who, std::future::pending()));
        let mut stream = connect(addr, [127, 0, 0, 7]).await;
        let answer = round_trip(&mut stream, "/").await;
        let expected = if asked { "127.0.0.7 ok" } else { "none ok" };
        assert!(answer.ends_with(expected), "{answer}");
    }
}
