//! The content verdict: sniffing first, then clamd for what sniffing accepted.

use std::path::Path;

use gatehouse_core::Reason;
use serde::Serialize;
use std::io::Read as _;

use crate::clamd::{Clamd, ClamdVerdict};
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

/// Content on its way to a [`ContentScanner`]: the sniffer, and the bytes
/// clamd will need once sniffing accepts them (kept only when clamd is
/// configured, and never beyond the cap).
#[derive(Debug)]
pub struct Intake {
    sniffer: Sniffer,
    kept: Vec<u8>,
    keep: bool,
}

impl Intake {
    /// Feeds the next chunk. Returns false once the verdict is decided:
    /// the caller need read no further.
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        self.sniffer.update(chunk);
        if self.sniffer.decided().is_some() {
            return false;
        }
        if self.keep {
            self.kept.extend_from_slice(chunk);
        }
        true
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
    pub fn intake(&self) -> Intake {
        Intake { sniffer: Sniffer::new(self.max_bytes), kept: Vec::new(), keep: self.clamd.is_some() }
    }

    /// The verdict on streamed content.
    pub async fn conclude(&self, intake: Intake) -> Verdict {
        self.judge(intake.sniffer, &intake.kept).await
    }

    /// Scans complete content.
    pub async fn scan_bytes(&self, content: &[u8]) -> Verdict {
        let mut sniffer = Sniffer::new(self.max_bytes);
        sniffer.update(content);
        self.judge(sniffer, content).await
    }

    /// Scans a file, streaming it: a file over the cap is refused after
    /// reading just past the cap, never loaded whole. When clamd is
    /// configured the accepted bytes are kept (at most the cap) so clamd
    /// scans exactly what was sniffed, not a second read of a file that may
    /// have changed.
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
            if !intake.push(&buf[..n]) {
                break;
            }
        }
        Ok(self.conclude(intake).await)
    }

    /// Sniffing's verdict, then clamd's for what sniffing accepted; `content`
    /// holds the sniffed bytes when clamd is configured.
    async fn judge(&self, sniffer: Sniffer, content: &[u8]) -> Verdict {
        let bytes = sniffer.len();
        let finding = sniffer.finish();
        if !finding.accepted() {
            return Verdict::from_finding(finding, bytes);
        }
        self.with_clamd(finding, bytes, content).await
    }

    async fn with_clamd(&self, finding: Finding, bytes: u64, content: &[u8]) -> Verdict {
        let mut verdict = Verdict::from_finding(finding, bytes);
        let Some(clamd) = &self.clamd else { return verdict };
        match clamd.scan_bytes(content).await {
            Ok(ClamdVerdict::Clean) => verdict.verdict = VerdictKind::Clean,
            Ok(ClamdVerdict::Infected(name)) => {
                verdict.verdict = VerdictKind::Infected;
                verdict.reason = Some(Reason::ContentMalware);
                verdict.signature = Some(name);
            }
            Err(e) => {
                verdict.verdict = VerdictKind::Refused;
                verdict.reason = Some(e.reason());
            }
        }
        verdict
    }
}
