//! The clamd harness against a real clamd: the test database's signatures and
//! the exact replies, the stream limit, and pause/resume.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::io::{self, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gatehouse_test_support::{
    ClamdServer, DEFAULT_STREAM_MAX_LENGTH, EICAR, EICAR_SIGNATURE, TEST_MARKER, TEST_MARKER_SIGNATURE,
    UNOFFICIAL_SUFFIX,
};

#[allow(clippy::disallowed_methods, reason = "a test client talking to the clamd under test on loopback")]
fn connect(server: &ClamdServer, timeout: Duration) -> TcpStream {
    let stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    stream.set_write_timeout(Some(timeout)).unwrap();
    stream
}

/// One NUL-terminated reply, without the NUL.
fn read_reply(stream: &mut TcpStream) -> io::Result<String> {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte)? {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{reply:?} then EOF"))),
            _ if byte[0] == 0 => return Ok(String::from_utf8(reply).unwrap()),
            _ => reply.push(byte[0]),
        }
    }
}

fn ping(server: &ClamdServer) -> String {
    let mut stream = connect(server, Duration::from_secs(5));
    stream.write_all(b"zPING\0").unwrap();
    read_reply(&mut stream).unwrap()
}

/// `zINSTREAM`: 4-byte big-endian length, chunk, ..., then a zero length.
fn instream(server: &ClamdServer, data: &[u8]) -> String {
    let mut stream = connect(server, Duration::from_secs(10));
    stream.write_all(b"zINSTREAM\0").unwrap();
    let sent = (|| {
        for chunk in data.chunks(64 * 1024) {
            stream.write_all(&u32::try_from(chunk.len()).unwrap().to_be_bytes())?;
            stream.write_all(chunk)?;
        }
        stream.write_all(&0u32.to_be_bytes())
    })();
    // Over the limit, clamd answers and closes while we may still be writing.
    read_reply(&mut stream).unwrap_or_else(|e| panic!("no reply ({e}; sending: {sent:?})\n{}", server.logs()))
}

#[test]
fn scans_streams_with_the_test_signatures() {
    let started = Instant::now();
    let server = ClamdServer::start();
    eprintln!("clamd answered PING {:?} after start", started.elapsed());

    assert_eq!(UNOFFICIAL_SUFFIX, ".UNOFFICIAL");
    assert_eq!(instream(&server, EICAR), "stream: Eicar-Test-Signature.UNOFFICIAL FOUND");
    assert_eq!(instream(&server, EICAR), format!("stream: {EICAR_SIGNATURE}{UNOFFICIAL_SUFFIX} FOUND"));
    assert_eq!(
        instream(&server, TEST_MARKER),
        format!("stream: {TEST_MARKER_SIGNATURE}{UNOFFICIAL_SUFFIX} FOUND")
    );
    assert_eq!(instream(&server, b"plain, clean text"), "stream: OK");
    assert_eq!(instream(&server, b""), "stream: OK");
    // Whole-content signatures: the marker inside other text is not a match.
    assert_eq!(instream(&server, &[TEST_MARKER, b"\n"].concat()), "stream: OK");
}

#[test]
fn streams_longer_than_stream_max_length_are_refused() {
    let server = ClamdServer::start();
    let limit = usize::try_from(DEFAULT_STREAM_MAX_LENGTH).unwrap();
    assert_eq!(instream(&server, &vec![b'a'; limit]), "stream: OK");
    assert_eq!(instream(&server, &vec![b'a'; limit + 1]), "INSTREAM size limit exceeded. ERROR");

    let small = ClamdServer::with_stream_max_length(1000);
    assert_eq!(instream(&small, &[b'a'; 1000]), "stream: OK");
    assert_eq!(instream(&small, &[b'a'; 1001]), "INSTREAM size limit exceeded. ERROR");
    assert_eq!(instream(&small, EICAR), "stream: Eicar-Test-Signature.UNOFFICIAL FOUND");
}

#[test]
fn a_paused_clamd_accepts_but_does_not_answer_until_resumed() {
    let server = ClamdServer::start();
    assert_eq!(ping(&server), "PONG");

    server.pause();
    let mut stream = connect(&server, Duration::from_millis(500));
    stream.write_all(b"zPING\0").unwrap();
    let err = read_reply(&mut stream).unwrap_err();
    assert!(matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{err}");

    server.resume();
    // The request made while paused is answered late, and new ones promptly.
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(read_reply(&mut stream).unwrap(), "PONG");
    assert_eq!(ping(&server), "PONG");
}

#[test]
fn stop_and_restart_on_the_same_port() {
    let mut server = ClamdServer::start();
    let addr = server.addr();
    server.stop();
    server.restart();
    assert_eq!(server.addr(), addr);
    assert_eq!(ping(&server), "PONG");
}
