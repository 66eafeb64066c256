//! The content verdict: sniffing first, then clamd for what sniffing accepted.

use std::path::Path;

use gatehouse_core::Reason;
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::clamd::{Clamd, ClamdVerdict};
use crate::kind::Kind;
use crate::sniff::{Finding, Sniffer};

/// The default cap on content size: 32 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Bytes read from a file at a time.
const READ_CHUNK: usize = 256 * 1024;

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

    /// Scans complete content.
    pub async fn scan_bytes(&self, content: &[u8]) -> Verdict {
        let mut sniffer = Sniffer::new(self.max_bytes);
        sniffer.update(content);
        let finding = sniffer.finish();
        self.with_clamd(finding, content).await
    }

    /// Scans a file, streaming it: a file over the cap is refused after
    /// reading just past the cap, never loaded whole. When clamd is
    /// configured the accepted bytes are kept (at most the cap) so clamd
    /// scans exactly what was sniffed, not a second read of a file that may
    /// have changed.
    pub async fn scan_file(&self, path: &Path) -> std::io::Result<Verdict> {
        let mut file = tokio::fs::File::open(path).await?;
        let mut sniffer = Sniffer::new(self.max_bytes);
        let mut kept = Vec::new();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            sniffer.update(&buf[..n]);
            if sniffer.decided().is_some() {
                break;
            }
            if self.clamd.is_some() {
                kept.extend_from_slice(&buf[..n]);
            }
        }
        let bytes = sniffer.len();
        let finding = sniffer.finish();
        if !finding.accepted() {
            return Ok(Verdict::from_finding(finding, bytes));
        }
        Ok(self.with_clamd(finding, &kept).await)
    }

    async fn with_clamd(&self, finding: Finding, content: &[u8]) -> Verdict {
        let bytes = content.len() as u64;
        let mut verdict = Verdict::from_finding(finding, bytes);
        let Some(clamd) = &self.clamd else { return verdict };
        if !finding.accepted() {
            return verdict;
        }
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
