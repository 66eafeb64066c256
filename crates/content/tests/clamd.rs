//! The clamd client against a real clamd and, for replies a real clamd
//! never gives, a small fake on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]
#![allow(clippy::disallowed_methods, reason = "the test dials its own loopback servers")]

use std::net::SocketAddr;
use std::time::Duration;

use gatehouse_content::clamd::{Clamd, ClamdError, ClamdVerdict, DialFuture, Dialer, Stream};
use gatehouse_content::{ContentScanner, VerdictKind};
use gatehouse_core::Reason;
use gatehouse_test_support::{ClamdServer, EICAR, TEST_MARKER, TEST_MARKER_SIGNATURE, UNOFFICIAL_SUFFIX};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Loopback(SocketAddr);

impl Dialer for Loopback {
    fn dial(&self) -> DialFuture<'_> {
        Box::pin(async move { Ok(Box::new(TcpStream::connect(self.0).await?) as Box<dyn Stream>) })
    }
    fn describe(&self) -> String {
        self.0.to_string()
    }
}

fn client(addr: SocketAddr, timeout_ms: u64) -> Clamd {
    Clamd::new(Box::new(Loopback(addr)), Duration::from_millis(timeout_ms))
}

/// A fake clamd that reads the command and answers `reply` (then closes).
async fn fake(reply: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                // Read until the zero-length terminator or the command's NUL.
                let mut seen = Vec::new();
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if seen.ends_with(&[0, 0, 0, 0]) || (seen.starts_with(b"zP") && seen.ends_with(&[0])) {
                        break;
                    }
                }
                let _ = conn.write_all(reply).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_real_clamd_answers_ping_version_and_scans() {
    let server = ClamdServer::start();
    let clamd = client(server.addr(), 5000);
    clamd.ping().await.unwrap();
    assert!(clamd.version().await.unwrap().starts_with("ClamAV "));
    assert_eq!(clamd.scan_bytes(b"plain text").await, Ok(ClamdVerdict::Clean));
    assert_eq!(
        clamd.scan_bytes(TEST_MARKER).await,
        Ok(ClamdVerdict::Infected(format!("{TEST_MARKER_SIGNATURE}{UNOFFICIAL_SUFFIX}")))
    );
    // Streamed in many zINSTREAM chunks: EICAR at the end of 300 KB of text.
    let mut big = "lorem ipsum dolor sit amet\n".repeat(12_000).into_bytes();
    big.extend_from_slice(b"\n");
    assert_eq!(clamd.scan_bytes(&big).await, Ok(ClamdVerdict::Clean));
    assert!(matches!(clamd.scan_bytes(EICAR).await, Ok(ClamdVerdict::Infected(_))));
}

#[tokio::test]
async fn failures_each_have_their_reason() {
    // Nothing listening.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let e = client(closed, 2000).scan_bytes(b"x").await.unwrap_err();
    assert_eq!(e.reason(), Reason::ScannerUnavailable);

    for (reply, reason) in [
        (&b"stream: OK but not really\0"[..], Reason::ScannerReplyInvalid),
        (b"\x00\x01\x02garbage", Reason::ScannerReplyInvalid),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", Reason::ScannerReplyInvalid),
        (b"stream: \xff\xfe FOUND\0", Reason::ScannerReplyInvalid),
        (b"", Reason::ScannerError),
        (b"Can't allocate memory ERROR\0", Reason::ScannerError),
        (b"INSTREAM size limit exceeded. ERROR\0", Reason::ScannerSizeLimit),
    ] {
        let addr = fake(reply).await;
        let e = client(addr, 2000).scan_bytes(b"some text").await.unwrap_err();
        assert_eq!(e.reason(), reason, "reply {reply:?}: {e:?}");
    }
    let endless: &'static [u8] = Box::leak(vec![b'a'; 10_000].into_boxed_slice());
    let e = client(fake(endless).await, 2000).scan_bytes(b"x").await.unwrap_err();
    assert_eq!(e, ClamdError::InvalidReply, "a reply without end is cut off");
    assert_eq!(client(fake(b"PING\0").await, 2000).ping().await, Err(ClamdError::InvalidReply));
}

#[tokio::test]
async fn a_stalled_scanner_times_out() {
    let server = ClamdServer::start();
    server.pause();
    let clamd = client(server.addr(), 300);
    assert_eq!(clamd.scan_bytes(b"text").await, Err(ClamdError::Timeout));
    assert_eq!(clamd.ping().await, Err(ClamdError::Timeout));
    server.resume();
}

#[tokio::test]
async fn the_scanner_never_calls_text_clean_without_clamd() {
    let scanner = ContentScanner::new(1 << 20, None);
    let v = scanner.scan_bytes(b"plain text").await;
    assert_eq!(v.verdict, VerdictKind::NotScanned);
    let server = ClamdServer::start();
    let scanner = ContentScanner::new(1 << 20, Some(client(server.addr(), 5000)));
    assert_eq!(scanner.scan_bytes(b"plain text").await.verdict, VerdictKind::Clean);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eicar.txt");
    std::fs::write(&path, EICAR).unwrap();
    let v = scanner.scan_file(&path).await.unwrap();
    assert_eq!((v.verdict, v.reason), (VerdictKind::Infected, Some(Reason::ContentMalware)));
}

/// Streamed content reaches clamd as it arrives, not gathered first: a
/// signature split across many small pushes is found; a stream past clamd's
/// limit is refused, and the caller is told to stop reading long before the
/// end (gatehouse keeps no copy of the content for clamd).
#[tokio::test]
async fn an_intake_feeds_clamd_as_the_content_arrives() {
    let server = ClamdServer::start();
    let scanner = ContentScanner::new(1 << 30, Some(client(server.addr(), 5000)));
    let mut intake = scanner.intake();
    for piece in TEST_MARKER.chunks(7) {
        assert!(intake.push(piece).await);
    }
    let v = scanner.conclude(intake).await;
    assert_eq!(
        (v.verdict, v.signature),
        (VerdictKind::Infected, Some(format!("{TEST_MARKER_SIGNATURE}{UNOFFICIAL_SUFFIX}")))
    );

    // Nothing pushed: clamd still scans the empty stream.
    assert_eq!(scanner.conclude(scanner.intake()).await.verdict, VerdictKind::Clean);

    // 64 MiB offered against a 1 MiB StreamMaxLength.
    let line = b"lorem ipsum dolor sit amet, consectetur adipiscing elit\n";
    let piece: Vec<u8> = line.iter().copied().cycle().take(64 * 1024).collect();
    let mut intake = scanner.intake();
    let mut taken = 0;
    while taken < 1024 && intake.push(&piece).await {
        taken += 1;
    }
    assert!(taken < 512, "clamd stopped taking the stream, and the caller was told: {taken} pieces");
    let v = scanner.conclude(intake).await;
    assert_eq!((v.verdict, v.reason), (VerdictKind::Refused, Some(Reason::ScannerSizeLimit)));

    // A scanner that cannot be reached refuses at the first push.
    drop(server);
    let mut intake = scanner.intake();
    assert!(!intake.push(b"text").await);
    let v = scanner.conclude(intake).await;
    assert_eq!((v.verdict, v.reason), (VerdictKind::Refused, Some(Reason::ScannerUnavailable)));
}
