//! ClamAV's clamd, over its TCP protocol: `zINSTREAM` to scan, `zPING` and
//! `zVERSION` for status (see clamd(8), "COMMANDS").
//!
//! The client never opens a socket itself: a [`Dialer`] hands it a
//! connection. gatehouse's dialer lives in `gatehouse-egress`, the only crate
//! that may connect anywhere.
//!
//! Why not the `clamav-client` crate: it opens its own sockets from a host
//! and port, and only `gatehouse-egress` may do that (the one-door rule,
//! enforced by lints). The protocol is four commands and a reply line, so
//! this client speaks it over whatever stream the dialer returns.
//!
//! Every failure fails closed with its own reason: unreachable, too slow,
//! over clamd's `StreamMaxLength`, an `ERROR` reply, or a reply this client
//! cannot parse.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use gatehouse_core::Reason;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// clamd's default port.
pub const DEFAULT_PORT: u16 = 3310;
/// Bytes per `zINSTREAM` chunk.
const CHUNK: usize = 64 * 1024;
/// The longest reply read; clamd's are one short line.
const MAX_REPLY: usize = 4096;
/// The longest signature name reported.
const MAX_SIGNATURE: usize = 200;

/// A connection to clamd.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A boxed connection future.
pub type DialFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send + 'a>>;

/// Opens connections to clamd.
pub trait Dialer: Send + Sync {
    /// A new connection.
    fn dial(&self) -> DialFuture<'_>;
    /// Where it connects, for status pages and logs.
    fn describe(&self) -> String;
}

/// Why clamd gave no verdict. Each is a refusal: the content is not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClamdError {
    /// Connecting failed.
    #[error("clamd is unreachable ({0:?})")]
    Unavailable(io::ErrorKind),
    /// No answer within the timeout.
    #[error("clamd did not answer in time")]
    Timeout,
    /// The content exceeds clamd's `StreamMaxLength`.
    #[error("the content exceeds clamd's stream size limit")]
    SizeLimit,
    /// clamd answered with an error, or the connection broke mid-scan.
    #[error("clamd reported an error: {0}")]
    Error(String),
    /// clamd answered something that is not a clamd reply.
    #[error("clamd's reply is not understood")]
    InvalidReply,
}

impl ClamdError {
    /// The stable reason code.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Unavailable(_) => Reason::ScannerUnavailable,
            Self::Timeout => Reason::ScannerTimeout,
            Self::SizeLimit => Reason::ScannerSizeLimit,
            Self::Error(_) => Reason::ScannerError,
            Self::InvalidReply => Reason::ScannerReplyInvalid,
        }
    }
}

/// What clamd said about content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClamdVerdict {
    /// No signature matched.
    Clean,
    /// A signature matched; its name.
    Infected(String),
}

/// A clamd client.
pub struct Clamd {
    dialer: Box<dyn Dialer>,
    timeout: Duration,
}

impl std::fmt::Debug for Clamd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clamd").field("at", &self.dialer.describe()).field("timeout", &self.timeout).finish()
    }
}

impl Clamd {
    /// A client that gives each step of an exchange (connecting, each chunk
    /// sent, the reply) `timeout`.
    pub fn new(dialer: Box<dyn Dialer>, timeout: Duration) -> Self {
        Self { dialer, timeout }
    }

    /// Where it connects.
    pub fn describe(&self) -> String {
        self.dialer.describe()
    }

    async fn connect(&self) -> Result<Box<dyn Stream>, ClamdError> {
        self.dialer.dial().await.map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => ClamdError::Timeout,
            kind => ClamdError::Unavailable(kind),
        })
    }

    async fn bounded<T>(&self, work: impl Future<Output = Result<T, ClamdError>>) -> Result<T, ClamdError> {
        tokio::time::timeout(self.timeout, work).await.unwrap_or(Err(ClamdError::Timeout))
    }

    /// `zPING`: clamd answers `PONG` when it can scan.
    pub async fn ping(&self) -> Result<(), ClamdError> {
        let reply = self.bounded(self.command(b"zPING\0")).await?;
        if reply == "PONG" { Ok(()) } else { Err(ClamdError::InvalidReply) }
    }

    /// `zVERSION`: engine and signature versions, e.g. `ClamAV 1.4.6/27475/...`.
    pub async fn version(&self) -> Result<String, ClamdError> {
        let reply = self.bounded(self.command(b"zVERSION\0")).await?;
        if reply.starts_with("ClamAV ") && reply.len() <= MAX_SIGNATURE && printable(&reply) {
            Ok(reply)
        } else {
            Err(ClamdError::InvalidReply)
        }
    }

    async fn command(&self, command: &[u8]) -> Result<String, ClamdError> {
        let mut conn = self.connect().await?;
        conn.write_all(command).await.map_err(broken)?;
        read_reply(&mut conn).await
    }

    /// Scans complete content.
    pub async fn scan_bytes(&self, content: &[u8]) -> Result<ClamdVerdict, ClamdError> {
        let mut stream = self.begin().await?;
        stream.send(content).await;
        stream.finish().await
    }

    /// Streams content to clamd with `zINSTREAM` and parses the verdict.
    pub async fn scan<R: AsyncRead + Unpin>(&self, mut content: R) -> Result<ClamdVerdict, ClamdError> {
        let mut stream = self.begin().await?;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match self.bounded(async { content.read(&mut buf).await.map_err(broken) }).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            if !stream.send(&buf[..n]).await {
                break;
            }
        }
        stream.finish().await
    }

    /// Opens a `zINSTREAM` scan to be fed as content arrives (an upload's
    /// bytes, while they are stored): clamd holds the stream, gatehouse
    /// holds one chunk, whatever the size. Each step (connecting, each
    /// chunk clamd must take, the reply) is given the timeout on its own,
    /// so a long upload is not cut off while a stalled clamd still is.
    pub async fn begin(&self) -> Result<InStream<'_>, ClamdError> {
        let mut conn = self.bounded(self.connect()).await?;
        self.bounded(async { conn.write_all(b"zINSTREAM\0").await.map_err(broken) }).await?;
        Ok(InStream { clamd: self, conn, failed: None, frame: Vec::with_capacity(CHUNK + 4) })
    }
}

/// A `zINSTREAM` scan in progress ([`Clamd::begin`]).
pub struct InStream<'a> {
    clamd: &'a Clamd,
    conn: Box<dyn Stream>,
    /// Why a chunk could not be sent: clamd stopped reading (past its
    /// `StreamMaxLength` it answers and closes), broke, or stalled.
    failed: Option<ClamdError>,
    /// One `zINSTREAM` chunk as sent: its length, then its bytes.
    frame: Vec<u8>,
}

impl std::fmt::Debug for InStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InStream").field("clamd", self.clamd).field("failed", &self.failed).finish()
    }
}

impl InStream<'_> {
    /// Sends `content` in `zINSTREAM` chunks. Returns false once clamd no
    /// longer takes content: its verdict (a refusal) is decided, and
    /// [`finish`](Self::finish) reads it.
    pub async fn send(&mut self, content: &[u8]) -> bool {
        if self.failed.is_some() {
            return false;
        }
        for chunk in content.chunks(CHUNK) {
            // The length and the bytes in one write: two would leave a
            // small segment for Nagle's algorithm to hold back.
            // Nonempty and at most CHUNK bytes: the length fits.
            let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes();
            self.frame.clear();
            self.frame.extend_from_slice(&len);
            self.frame.extend_from_slice(chunk);
            let (conn, frame) = (&mut self.conn, &self.frame);
            let sent = async { conn.write_all(frame).await.map_err(broken) };
            if let Err(e) = self.clamd.bounded(sent).await {
                self.failed = Some(e);
                return false;
            }
        }
        true
    }

    /// Ends the stream and reads clamd's verdict. After a failed send the
    /// reply is still read: clamd answers as soon as the stream passes its
    /// limit, so it says why.
    pub async fn finish(mut self) -> Result<ClamdVerdict, ClamdError> {
        let conn = &mut self.conn;
        if self.failed.is_none() {
            let end = async {
                conn.write_all(&[0; 4]).await.map_err(broken)?;
                conn.flush().await.map_err(broken)
            };
            self.failed = self.clamd.bounded(end).await.err();
        }
        if self.failed == Some(ClamdError::Timeout) {
            return Err(ClamdError::Timeout);
        }
        let reply = self.clamd.bounded(read_reply(&mut self.conn)).await;
        match (reply, self.failed) {
            (Ok(reply), _) => parse_scan_reply(&reply),
            (Err(_), Some(sent)) => Err(sent),
            (Err(e), None) => Err(e),
        }
    }
}

fn broken(e: io::Error) -> ClamdError {
    ClamdError::Error(format!("connection failed mid-exchange ({:?})", e.kind()))
}

fn printable(s: &str) -> bool {
    s.chars().all(|c| !c.is_control())
}

/// Reads one reply: up to a NUL (the `z` commands' terminator) or EOF.
async fn read_reply(conn: &mut Box<dyn Stream>) -> Result<String, ClamdError> {
    let mut reply = Vec::with_capacity(64);
    let mut received = 0;
    let mut buf = [0u8; 512];
    loop {
        let n = conn.read(&mut buf).await.map_err(broken)?;
        if n == 0 {
            break;
        }
        received += n;
        reply.extend_from_slice(&buf[..n]);
        if let Some(end) = reply.iter().position(|&b| b == 0) {
            reply.truncate(end);
            break;
        }
        if reply.len() > MAX_REPLY {
            return Err(ClamdError::InvalidReply);
        }
    }
    if reply.is_empty() {
        return Err(if received == 0 {
            ClamdError::Error("connection closed without a reply".into())
        } else {
            ClamdError::InvalidReply
        });
    }
    let reply = String::from_utf8(reply).map_err(|_| ClamdError::InvalidReply)?;
    let reply = reply.trim_end_matches(['\n', '\r']).to_owned();
    Ok(reply)
}

/// Parses a `zINSTREAM` reply: `stream: OK`, `stream: <name> FOUND`, or
/// `<message> ERROR`.
pub fn parse_scan_reply(reply: &str) -> Result<ClamdVerdict, ClamdError> {
    if let Some(message) = reply.strip_suffix(" ERROR") {
        if !printable(message) || message.len() > MAX_REPLY {
            return Err(ClamdError::InvalidReply);
        }
        if message.contains("size limit exceeded") {
            return Err(ClamdError::SizeLimit);
        }
        return Err(ClamdError::Error(message.chars().take(MAX_SIGNATURE).collect()));
    }
    let Some(result) = reply.strip_prefix("stream: ") else {
        return Err(ClamdError::InvalidReply);
    };
    if result == "OK" {
        return Ok(ClamdVerdict::Clean);
    }
    match result.strip_suffix(" FOUND") {
        Some(name)
            if !name.is_empty()
                && name.len() <= MAX_SIGNATURE
                && name.bytes().all(|b| b.is_ascii_graphic() || b == b' ') =>
        {
            Ok(ClamdVerdict::Infected(name.to_owned()))
        }
        _ => Err(ClamdError::InvalidReply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        assert_eq!(parse_scan_reply("stream: OK"), Ok(ClamdVerdict::Clean));
        assert_eq!(
            parse_scan_reply("stream: Eicar-Test-Signature FOUND"),
            Ok(ClamdVerdict::Infected("Eicar-Test-Signature".into()))
        );
        assert_eq!(parse_scan_reply("INSTREAM size limit exceeded. ERROR"), Err(ClamdError::SizeLimit));
        assert!(matches!(parse_scan_reply("Can't allocate memory ERROR"), Err(ClamdError::Error(_))));
        for garbage in ["", "OK", "stream:OK", "stream: FOUND", "stream: \u{1b}[31m FOUND", "HTTP/1.1 200 OK"]
        {
            assert_eq!(parse_scan_reply(garbage), Err(ClamdError::InvalidReply), "{garbage:?}");
        }
    }
}
