//! The content verdict: sniffing first, then clamd for what sniffing accepted.

use std::path::Path;

use gatehouse_core::Reason;
use serde::Serialize;
use std::io::Read as _;

use crate::clamd::{Clamd, ClamdError, ClamdVerdict, InStream};
use crate::kind::Kind;
use crate::sniff::{Finding, Sniffer};

/// The default cap on content size: 32 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Bytes read from a file at a time.
const READ_CHUNK: usize = 64 * 1024;

/// The four verdicts. `clean` only ever comes from a scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Sniffing accepted it and the malware scanner found nothing.
    Clean,
    /// Sniffing accepted it; no malware scanner is configured.
    NotScanned,
    /// Refused: by sniffing, by size, or because the scanner could not answer.
    Refused,
    /// The malware scanner detected a signature.
    Infected,
}

impl VerdictKind {
    /// The stable wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::NotScanned => "not_scanned",
            Self::Refused => "refused",
            Self::Infected => "infected",
        }
    }
}

/// A verdict on one piece of content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The verdict.
    pub verdict: VerdictKind,
    /// The detected kind (for an embedded payload, the payload's kind).
    pub kind: Kind,
    /// The reason code, for `refused` and `infected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Where the refused part begins (embedded payloads, non-text bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The scanner's signature name, for `infected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Bytes examined.
    pub bytes: u64,
}

impl Verdict {
    /// Whether the content is accepted (`clean` or `not_scanned`).
    pub fn accepted(&self) -> bool {
        matches!(self.verdict, VerdictKind::Clean | VerdictKind::NotScanned)
    }

    fn from_finding(f: Finding, bytes: u64) -> Self {
        let verdict = if f.accepted() { VerdictKind::NotScanned } else { VerdictKind::Refused };
        Self { verdict, kind: f.kind, reason: f.reason, offset: f.offset, signature: None, bytes }
    }
}

/// Content on its way to a [`ContentScanner`]: the sniffer, and, when clamd
/// is configured, a `zINSTREAM` scan fed the same bytes as they arrive, so
/// memory stays at one chunk whatever the size, and clamd scans exactly
/// what was sniffed.
#[derive(Debug)]
pub struct Intake<'a> {
    sniffer: Sniffer,
    clamd: Feed<'a>,
}

#[derive(Debug)]
enum Feed<'a> {
    /// No clamd is configured.
    Off,
    /// Not connected yet (nothing has been pushed).
    Idle(&'a Clamd),
    /// Streaming to clamd.
    Open(InStream<'a>),
    /// clamd could not be reached: the content is refused.
    Failed(ClamdError),
}

impl Intake<'_> {
    /// Feeds the next chunk. Returns false once the verdict is decided (a
    /// refusal, by the sniffer or by clamd): the caller need read no further.
    pub async fn push(&mut self, chunk: &[u8]) -> bool {
        self.sniffer.update(chunk);
        if self.sniffer.decided().is_some() {
            return false;
        }
        if let Feed::Idle(clamd) = self.clamd {
            self.clamd = match clamd.begin().await {
                Ok(stream) => Feed::Open(stream),
                Err(e) => Feed::Failed(e),
            };
        }
        match &mut self.clamd {
            Feed::Off => true,
            Feed::Open(stream) => stream.send(chunk).await,
            Feed::Idle(_) | Feed::Failed(_) => false,
        }
    }
}

impl Feed<'_> {
    /// clamd's verdict on what was pushed, when clamd is configured.
    async fn verdict(self) -> Option<Result<ClamdVerdict, ClamdError>> {
        Some(match self {
            Feed::Off => return None,
            Feed::Idle(clamd) => match clamd.begin().await {
                Ok(stream) => stream.finish().await,
                Err(e) => Err(e),
            },
            Feed::Open(stream) => stream.finish().await,
            Feed::Failed(e) => Err(e),
        })
    }
}

/// Sniffing plus an optional clamd.
#[derive(Debug)]
pub struct ContentScanner {
    max_bytes: u64,
    clamd: Option<Clamd>,
}

impl ContentScanner {
    /// A scanner that refuses content over `max_bytes` and, when `clamd` is
    /// given, sends accepted content to it.
    pub fn new(max_bytes: u64, clamd: Option<Clamd>) -> Self {
        Self { max_bytes, clamd }
    }

    /// The configured clamd, if any.
    pub fn clamd(&self) -> Option<&Clamd> {
        self.clamd.as_ref()
    }

    /// The size cap.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Starts streamed content: [`Intake::push`] each chunk, then [`conclude`](Self::conclude).
    pub fn intake(&self) -> Intake<'_> {
        let clamd = self.clamd.as_ref().map_or(Feed::Off, Feed::Idle);
        Intake { sniffer: Sniffer::new(self.max_bytes), clamd }
    }

    /// The verdict on streamed content: sniffing's, then clamd's for what
    /// sniffing accepted.
    pub async fn conclude(&self, intake: Intake<'_>) -> Verdict {
        let Intake { sniffer, clamd } = intake;
        let bytes = sniffer.len();
        let finding = sniffer.finish();
        let mut verdict = Verdict::from_finding(finding, bytes);
        if !verdict.accepted() {
            // The clamd connection, if any, is dropped unfinished.
            return verdict;
        }
        match clamd.verdict().await {
            None => {}
            Some(Ok(ClamdVerdict::Clean)) => verdict.verdict = VerdictKind::Clean,
            Some(Ok(ClamdVerdict::Infected(name))) => {
                verdict.verdict = VerdictKind::Infected;
                verdict.reason = Some(Reason::ContentMalware);
                verdict.signature = Some(name);
            }
            Some(Err(e)) => {
                verdict.verdict = VerdictKind::Refused;
                verdict.reason = Some(e.reason());
            }
        }
        verdict
    }

    /// Scans complete content.
    pub async fn scan_bytes(&self, content: &[u8]) -> Verdict {
        let mut intake = self.intake();
        intake.push(content).await;
        self.conclude(intake).await
    }

    /// Scans a file, streaming it: a file over the cap is refused after
    /// reading just past the cap, never loaded whole; clamd, when
    /// configured, is fed the same bytes as the sniffer, not a second read
    /// of a file that may have changed.
    ///
    /// Reads with blocking I/O — one file after another is what the command
    /// line does, and a thread-pool hop per read would cost more than the
    /// read — so do not call it on a server's request path.
    pub async fn scan_file(&self, path: &Path) -> std::io::Result<Verdict> {
        let mut file = std::fs::File::open(path)?;
        let mut intake = self.intake();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if !intake.push(&buf[..n]).await {
                break;
            }
        }
        Ok(self.conclude(intake).await)
    }
}
