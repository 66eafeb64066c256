//! The sniffing verdict: one streaming pass over the content that decides
//! whether it is acceptable text, from its bytes alone.
//!
//! The signature is judged once, on the first [`SNIFF_LEN`] bytes (or on all
//! of the content when it ends sooner, or on what the cap lets in), never on
//! a prefix still growing, so that a structure it checks is seen whole;
//! nothing is decided before. Order of judgement, the same however the
//! content is chunked:
//! 1. larger than the cap: refused (`content_too_large`), unless the bytes
//!    within the cap already decided otherwise;
//! 2. a decisive signature at the start (ELF, zip, tar, PDF, ...): refused
//!    by its class;
//! 3. a base64 payload inside the text: refused (`content_embedded_*`), with
//!    the offset where its base64 begins;
//! 4. not text: refused — by the signature at the start when one matches
//!    (`MZ`, `BZh`, ...), else by a signature glued on where the text stops
//!    (a polyglot: text with an archive appended), else as `binary`; the
//!    offset is where it stops being text;
//! 5. otherwise text: accepted.

use gatehouse_core::Reason;
use serde::Serialize;

use crate::embedded::PayloadFinder;
use crate::kind::{Class, Kind};
use crate::magic::{self, SNIFF_LEN};
use crate::text::{Encoding, TextValidator};

/// Bytes kept after the first non-text byte, to name what was glued on.
const BOUNDARY_AFTER: usize = 1024;
/// Bytes kept before it: the longest signature that starts in text
/// (`!<arch>\n` is 8; `PK` of `PK\x03\x04` is 2).
const BOUNDARY_BEFORE: usize = 8;

/// The result of sniffing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What the content is (or, for an embedded payload, what the payload is).
    pub kind: Kind,
    /// Why it is refused; `None` when accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Where the refused part begins: the embedded payload's base64, or the
    /// first byte that is not text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

impl Finding {
    /// Whether sniffing accepts the content.
    pub fn accepted(&self) -> bool {
        self.reason.is_none()
    }

    fn refused(kind: Kind, reason: Reason, offset: Option<u64>) -> Self {
        Self { kind, reason: Some(reason), offset }
    }

    fn by_class(kind: Kind, offset: Option<u64>) -> Self {
        let reason = match kind.class() {
            Class::Executable => Reason::ContentExecutable,
            Class::Archive => Reason::ContentArchive,
            Class::NotText | Class::Text => Reason::ContentNotText,
        };
        Self::refused(kind, reason, offset)
    }
}

/// Streaming sniffer. Feed the content through [`update`](Self::update)
/// (stop early once [`decided`](Self::decided) answers) and call
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct Sniffer {
    max_bytes: u64,
    total: u64,
    prefix: Vec<u8>,
    /// The signature match, fixed once the prefix is complete (or the cap
    /// reached): judged once, not again for every chunk that follows. Until
    /// then nothing is decided.
    prefix_magic: Option<Option<magic::Sniffed>>,
    text: TextValidator,
    finder: PayloadFinder,
    /// The last bytes before the current chunk, for the boundary window.
    tail: Vec<u8>,
    /// Bytes around the first non-text byte, and the offset of their first.
    boundary: Option<(u64, Vec<u8>, usize)>,
    decided: Option<Finding>,
}

impl Sniffer {
    /// A sniffer that refuses content longer than `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        Self {
            max_bytes,
            total: 0,
            prefix: Vec::with_capacity(1024),
            prefix_magic: None,
            text: TextValidator::new(),
            finder: PayloadFinder::new(),
            tail: Vec::with_capacity(BOUNDARY_BEFORE),
            boundary: None,
            decided: None,
        }
    }

    /// The verdict, once no further byte can change it.
    pub fn decided(&self) -> Option<Finding> {
        self.decided
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing has been fed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Feeds the next chunk of content.
    pub fn update(&mut self, chunk: &[u8]) {
        if self.decided.is_some() || chunk.is_empty() {
            return;
        }
        // Judge the bytes up to the cap as any others, so the verdict does
        // not depend on how the content was chunked: what the first
        // `max_bytes` bytes decide stands; otherwise it is too large.
        let room = self.max_bytes.saturating_sub(self.total);
        if (chunk.len() as u64) > room {
            let (within, _) = chunk.split_at(room as usize);
            self.update(within);
            if self.decided.is_none() {
                // Nothing past the cap is judged: the prefix is what there is.
                self.prefix_magic.get_or_insert_with(|| magic::sniff(&self.prefix));
                self.decided = self.early();
            }
            if self.decided.is_none() {
                self.total = self.max_bytes + 1;
                self.decided = Some(self.too_large());
            }
            return;
        }
        let base = self.total;
        self.total += chunk.len() as u64;
        if self.prefix.len() < SNIFF_LEN {
            let take = (SNIFF_LEN - self.prefix.len()).min(chunk.len());
            self.prefix.extend_from_slice(&chunk[..take]);
            if self.prefix.len() == SNIFF_LEN {
                self.prefix_magic = Some(magic::sniff(&self.prefix));
            }
        }

        if self.text.first_bad().is_none() {
            // Only text is searched for payloads; `update` stops where it stops.
            let finder = &mut self.finder;
            self.text.update(chunk, &mut |text| finder.update(text));
            self.capture_boundary(base, chunk);
        } else if let Some((_, window, before)) = &mut self.boundary {
            let room = (*before + BOUNDARY_AFTER).saturating_sub(window.len());
            window.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        // The first bad byte can sit up to 3 bytes before the chunk (a UTF-8
        // sequence or UTF-16 unit that began there): keep that much more.
        const TAIL: usize = BOUNDARY_BEFORE + 4;
        if chunk.len() >= TAIL {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - TAIL..]);
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(TAIL);
            self.tail.drain(..excess);
        }
        self.decided = self.early();
    }

    /// What the first bytes say: the fixed match, or (at the end of content
    /// shorter than the prefix) the match on all of it.
    fn magic(&self) -> Option<magic::Sniffed> {
        self.prefix_magic.unwrap_or_else(|| magic::sniff(&self.prefix))
    }

    /// Keeps the bytes around the first byte that is not text, once there
    /// is one: the tail and `chunk` (which starts at `base`) seen as one,
    /// since that byte may sit in a sequence that began before the chunk.
    fn capture_boundary(&mut self, base: u64, chunk: &[u8]) {
        let Some(bad) = self.text.first_bad() else { return };
        if self.boundary.is_some() {
            return;
        }
        let virtual_start = base - self.tail.len() as u64;
        let at = bad.saturating_sub(virtual_start) as usize;
        let from = at.saturating_sub(BOUNDARY_BEFORE);
        let before = at - from;
        let end = (at + BOUNDARY_AFTER).min(self.tail.len() + chunk.len());
        let window: Vec<u8> =
            self.tail.iter().chain(chunk.iter()).skip(from).take(end.saturating_sub(from)).copied().collect();
        self.boundary = Some((bad - before as u64, window, before));
    }

    /// What can be decided before the end: nothing until the signature is judged.
    fn early(&self) -> Option<Finding> {
        let magic = self.prefix_magic?;
        if let Some(s) = magic
            && s.decisive
        {
            return Some(Finding::by_class(s.kind, Some(0)));
        }
        if let Some(p) = self.finder.found() {
            return Some(self.embedded(p.kind, p.offset));
        }
        let boundary_full =
            self.boundary.as_ref().is_some_and(|(_, w, before)| w.len() >= before + BOUNDARY_AFTER);
        if self.text.first_bad().is_some() && self.prefix.len() >= SNIFF_LEN && boundary_full {
            return Some(self.not_text());
        }
        None
    }

    fn embedded(&self, kind: Kind, offset: u64) -> Finding {
        let offset = match self.text.encoding() {
            Some(Encoding::Utf16Le | Encoding::Utf16Be) => 2 + 2 * offset,
            _ => offset,
        };
        let reason = match kind.class() {
            Class::Executable => Reason::ContentEmbeddedExecutable,
            _ => Reason::ContentEmbeddedArchive,
        };
        Finding::refused(kind, reason, Some(offset))
    }

    fn not_text(&self) -> Finding {
        if let Some(s) = self.magic() {
            return Finding::by_class(s.kind, Some(0));
        }
        if let Some((start, window, before)) = &self.boundary {
            // A signature that begins in the last text bytes or at the first
            // binary one: something was glued onto text.
            for p in 0..=*before {
                if let Some(s) = magic::sniff(&window[p..])
                    && matches!(s.kind.class(), Class::Executable | Class::Archive)
                {
                    return Finding::by_class(s.kind, Some(start + p as u64));
                }
            }
        }
        Finding::by_class(Kind::Binary, self.text.first_bad())
    }

    fn too_large(&self) -> Finding {
        let kind = self.magic().map_or(Kind::Binary, |s| s.kind);
        Finding::refused(kind, Reason::ContentTooLarge, None)
    }

    /// Ends the content and returns the verdict.
    pub fn finish(mut self) -> Finding {
        if let Some(d) = self.decided {
            return d;
        }
        let finder = &mut self.finder;
        self.text.finish(&mut |text| finder.update(text));
        // Text that breaks only at its very end (a truncated sequence).
        self.capture_boundary(self.total, &[]);
        let payload = self.finder.finish();
        if let Some(s) = self.magic()
            && s.decisive
        {
            return Finding::by_class(s.kind, Some(0));
        }
        if let Some(p) = payload {
            return self.embedded(p.kind, p.offset);
        }
        if self.text.first_bad().is_some() {
            return self.not_text();
        }
        let kind = match self.text.encoding() {
            _ if self.total == 0 => Kind::Empty,
            Some(Encoding::Utf16Le) => Kind::Utf16LeText,
            Some(Encoding::Utf16Be) => Kind::Utf16BeText,
            _ => Kind::Utf8Text,
        };
        Finding { kind, reason: None, offset: None }
    }
}

/// Sniffs complete content in one call.
pub fn sniff_bytes(content: &[u8], max_bytes: u64) -> Finding {
    let mut s = Sniffer::new(max_bytes);
    s.update(content);
    s.finish()
}
