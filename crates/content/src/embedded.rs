//! Embedded payloads: base64 inside text that decodes to an executable or
//! an archive.
//!
//! # What counts as a payload
//!
//! Text is cut into *segments*: maximal stretches of base64 characters (both
//! alphabets, `A-Z a-z 0-9 + / - _`; in JSON strings `\/` counts as `/`). A
//! *run* is a segment followed by further segments with only whitespace
//! between them, of any kind and length: ASCII space, tab, LF, CR, VT and
//! FF (the whitespace bytes the text rules accept) and the JSON escapes
//! `\n`, `\r`, `\t` and `\f`. Whitespace is skipped, not read: a payload
//! wrapped at 64 or 76 columns (PEM, MIME), at 1 to 7 characters a line, in
//! groups of 4 split by spaces or 8 split by tabs, indented as a YAML block
//! scalar, with CRLF or blank lines, or with any mix of these, is the same
//! run as the unbroken base64. Padding (`=`) ends a run, as does any other
//! byte: punctuation, quote markers such as `>`, commas, non-ASCII
//! characters (a no-break space included), and other backslash escapes.
//! Those separators are out of scope: each would also join the words of
//! ordinary text into runs that only look longer.
//!
//! A payload may begin at any of the first four characters of a segment:
//! at the segment's start, or behind up to three characters of junk glued
//! in front, which would otherwise shift the 4-character groups out of
//! alignment. The run itself may start at any byte offset of the text. A
//! signature counts only at such a start: random bytes that contain `PK` or
//! `MZ` somewhere inside stay harmless, and so does ordinary text, whose
//! words form runs too (see below).
//!
//! # Bounded work
//!
//! Each start is judged from at most a few hundred characters: the first 16
//! (every signature in [`magic::payload_prefix`]), characters 344..348
//! (`c3Rh`, the `sta` of tar's `ustar` at decoded offset 257; then 340..356)
//! and, for `MZ`, the header it points to. A start is decoded only if its
//! first two characters can begin a signature ([`magic::payload_lead`], one
//! table lookup), and is looked at for tar only where `c3Rh` stands 344
//! characters after it. Starts waiting for characters sit in queues ordered
//! by when they are due, so every start costs a constant amount of work.
//!
//! Two modes read the text. *Run mode* keeps a run's characters (at most a
//! few KiB, reused from run to run), marks its starts, tests and queues
//! them, and searches the kept characters for `c3Rh` a block at a time.
//! The *skim* reads everything else 64 bytes at a time and keeps nothing:
//! a lead whose first character is a lowercase letter has one of seven
//! second characters (`H 3 G 0 v / _`), any other one of 19 first
//! characters, so it looks one by one only at those bytes (a vector compare
//! finds them; ordinary text has few: a `3` or a `v` counts only after a
//! `c`, `y`, `z` or whitespace, and `C`..=`F` are no first) and at
//! backslashes. It
//! hands over to run mode, with the run's last 352 characters and which of
//! them are starts (for a `c3Rh` still to come), at the segment of a start
//! whose pair may be a lead, of a `3` that may be part of `c3Rh`, of an
//! escape, or of a block dense with such characters (base64 itself). Run
//! mode hands back at a gap between short segments once nothing waits. The
//! finder is linear in the input whatever the input does.
//!
//! Limits, on purpose: a payload must be at least [`MIN_PAYLOAD_CHARS`]
//! characters long (an 18-byte "executable" runs nothing); ISO images
//! (signature at 32 KiB), binary cpio and ARJ (two-byte magics) are not
//! looked for inside text; base64 nested inside base64 is not decoded
//! twice; a separator other than whitespace (above) ends a run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::kind::Kind;
use crate::magic::{self, PayloadPrefix};

/// The shortest run judged a payload: 24 characters, 18 bytes.
pub const MIN_PAYLOAD_CHARS: u64 = 24;
/// Characters needed for every prefix signature (12 bytes; bzip2's is 10).
const PREFIX_CHARS: u64 = 16;
/// Characters that hold decoded bytes 255..267, where tar's magic lives.
const TAR_CHARS: std::ops::Range<usize> = 340..356;
/// Where the characters of decoded bytes 258..261 begin: `sta` of `ustar`,
/// always spelled `c3Rh`.
const TAR_STA_AT: u64 = 344;
const TAR_STA: &[u8; 4] = b"c3Rh";
/// Characters that hold an `MZ` header's first 66 bytes.
const MZ_HEADER_CHARS: u64 = 88;
/// Farthest any check reads; beyond it an `MZ` payload is judged unconfirmed.
const MAX_NEED: u64 = 1400;
/// The text is judged in pieces of this many bytes, cut at fixed offsets.
pub const PIECE: usize = 64 * 1024;
/// How many characters at the start of a segment may begin a payload.
const HEAD: u8 = 4;
/// Starts remembered for the tar search, as bits by run index: more than
/// the 344 characters it looks back, plus a batch.
const RING_WORDS: usize = 32;
const RING_BITS: u64 = RING_WORDS as u64 * 64;
/// The kept characters are searched for `c3Rh` once this many wait, and at
/// the end of a run.
const TAR_BATCH: u64 = 256;
/// Run mode goes on for at least this many characters once it takes over,
/// and hands back to the skim only after a segment shorter than
/// `LONG_SEGMENT` (prose, not a line of base64).
const STAY: u64 = 128;
const LONG_SEGMENT: u64 = 16;
/// Kept characters that no start needs any more are dropped once there are
/// this many.
const TRIM: u64 = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Other,
    Alpha,
    Pad,
    Space,
    Backslash,
}

static CLASS: [Class; 256] = {
    let mut t = [Class::Other; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'-' | b'_' => Class::Alpha,
            b'=' => Class::Pad,
            b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' => Class::Space,
            b'\\' => Class::Backslash,
            _ => Class::Other,
        };
        b += 1;
    }
    t
};

/// The 6-bit value of a base64 character of either alphabet.
static VALUE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut v = 0;
    while v < 64 {
        let c = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[v];
        t[c as usize] = v as u8;
        v += 1;
    }
    t[b'-' as usize] = 62;
    t[b'_' as usize] = 63;
    t
};

/// Bit `v1` of `LEAD[v0]`: characters of values `v0 v1` can begin a
/// signature (see [`magic::payload_lead`]); they spell the first byte and
/// the high half of the second.
static LEAD: [u64; 64] = {
    let mut t = [0u64; 64];
    let mut v0 = 0;
    while v0 < 64 {
        let mut v1 = 0;
        while v1 < 64 {
            let b0 = ((v0 << 2) | (v1 >> 4)) as u8;
            let mut low = 0;
            while low < 16 {
                let b1 = (((v1 & 15) << 4) | low) as u8;
                if magic::payload_lead(b0, b1) {
                    t[v0] |= 1 << v1;
                }
                low += 1;
            }
            v1 += 1;
        }
        v0 += 1;
    }
    t
};

/// Why the skim must look at a byte (flags of [`NEED`]): it may be the
/// first character of a lead and is not a lowercase letter.
const NEED_FIRST: u8 = 1;
/// It may be the second character of a lead whose first is a lowercase
/// letter (`aH`, `c3`, `eG`, `f0`, `yv`, `zv`, `z/`).
const NEED_AFTER_LOWER: u8 = 2;
/// It is the `3` of `c3Rh`.
const NEED_THREE: u8 = 4;
/// It is a backslash: an escape.
const NEED_ESCAPE: u8 = 8;

/// What the skim must check at each byte, by flag; 0 for the bytes it
/// passes over. A lead whose first character is not a lowercase letter is
/// caught at its first character, any other at its second, so each lead
/// is looked at once and most capitals and digits of ordinary text (`C`,
/// `E`, `1`, `2`, ...) not at all.
static NEED: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let alpha = matches!(c, b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'-' | b'_');
        if alpha {
            let v = VALUE[b] as usize;
            if LEAD[v] != 0 && !c.is_ascii_lowercase() {
                t[b] |= NEED_FIRST;
            }
            let mut c0 = b'a';
            while c0 <= b'z' {
                if LEAD[VALUE[c0 as usize] as usize] >> v & 1 == 1 {
                    t[b] |= NEED_AFTER_LOWER;
                }
                c0 += 1;
            }
        }
        b += 1;
    }
    t[b'3' as usize] |= NEED_THREE;
    t[b'\\' as usize] |= NEED_ESCAPE;
    t
};

/// Whether two base64 characters can begin a signature.
#[inline(always)]
fn lead(c0: u8, c1: u8) -> bool {
    LEAD[usize::from(VALUE[usize::from(c0)])] >> VALUE[usize::from(c1)] & 1 == 1
}

#[inline(always)]
fn is_alpha(b: u8) -> bool {
    // Letters, digits, `_`, and `+ - /` (the odd bytes of 0x2B..=0x2F), as
    // compares only, so block scans vectorize.
    let l = b | 0x20;
    (l.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | ((b.wrapping_sub(0x2b) < 5) & (b & 1 == 1))
        | (b == b'_')
}

/// Space, and tab through CR (tab, LF, VT, FF, CR), as compares only.
#[inline(always)]
fn is_space(b: u8) -> bool {
    (b == b' ') | (b.wrapping_sub(b'\t') < 5)
}

/// The end of the stretch of base64 characters starting at `i`, 32 bytes
/// at a time where it can: a line of base64 ends inside its last block,
/// which a mask of that block finds without reading it again byte by byte.
fn alpha_run_end(data: &[u8], mut i: usize) -> usize {
    while let Some(block) = data.get(i..i + 32).and_then(|b| <&[u8; 32]>::try_from(b).ok()) {
        let ends = not_alpha_mask(block);
        if ends != 0 {
            return i + ends.trailing_zeros() as usize;
        }
        i += 32;
    }
    data[i..].iter().position(|&b| !is_alpha(b)).map_or(data.len(), |n| i + n)
}

/// The bytes of 32 that are not base64 characters, as bits: 0/1 flags in a
/// fixed-size map, which compiles to vector compares, then packed.
#[inline(always)]
fn not_alpha_mask(block: &[u8; 32]) -> u32 {
    let mut flags = [0u8; 32];
    for (f, &b) in flags.iter_mut().zip(block) {
        *f = u8::from(!is_alpha(b));
    }
    pack(&flags)
}

/// Packs 8 0/1 flags, the bytes of `w` (little-endian), into the bits of a
/// byte, flag `k` at bit `k`.
#[inline(always)]
fn pack8(w: u64) -> u64 {
    // Gathers bit 0 of each byte into the top byte (no carries: every
    // product lands on a bit of its own).
    w.wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Packs 32 0/1 flags into the bits of a word, flag `k` at bit `k`.
#[inline(always)]
fn pack(flags: &[u8; 32]) -> u32 {
    let (words, _) = flags.as_chunks::<8>();
    words.iter().enumerate().fold(0, |out, (k, w)| out | (pack8(u64::from_le_bytes(*w)) as u32) << (8 * k))
}

/// Where `c3Rh` begins in `hay`, in order: blocks of 32 bytes are searched
/// for its `3`, which is rare.
fn find_tar_sta(hay: &[u8], mut found: impl FnMut(usize)) {
    let mut k = 0;
    while k + 1 < hay.len() {
        let block = &hay[k..(k + 32).min(hay.len())];
        let mut flags = [0u8; 32];
        for (f, &b) in flags.iter_mut().zip(block) {
            *f = u8::from(b == b'3');
        }
        let mut threes = pack(&flags);
        while threes != 0 {
            let j = k + threes.trailing_zeros() as usize;
            threes &= threes - 1;
            if j >= 1 && hay.get(j - 1..j + 3) == Some(&TAR_STA[..]) {
                found(j - 1);
            }
        }
        k += 32;
    }
}

/// Maps the URL-safe alphabet onto the standard one.
#[inline(always)]
fn normalize(b: u8) -> u8 {
    match b {
        b'-' => b'+',
        b'_' => b'/',
        other => other,
    }
}

const DECODER: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// Decodes `chars` (standard alphabet, no padding; a trailing lone character
/// is dropped) into `out`.
fn decode_into(chars: &[u8], out: &mut Vec<u8>) {
    let usable = if chars.len() % 4 == 1 { chars.len() - 1 } else { chars.len() };
    out.clear();
    // Every byte is in the alphabet by construction, so this cannot fail;
    // if it did, the candidate would simply decode to nothing.
    let _ = DECODER.decode_vec(&chars[..usable], out);
}

/// A payload found inside text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    /// What it decodes to.
    pub kind: Kind,
    /// Where its base64 begins, in the finder's input.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    Prefix,
    Tar,
    MzHeader,
    MzSignature { from: u64, to: u64, at: usize },
}

enum Judged {
    Payload(Kind),
    Harmless,
    Need(Stage),
}

/// Judges a candidate from the characters available after it.
fn judge(chars: &[u8], complete: bool, stage: Stage, scratch: &mut Vec<u8>) -> Judged {
    let have = chars.len() as u64;
    let need = |stage| if complete { Judged::Harmless } else { Judged::Need(stage) };
    match stage {
        Stage::Prefix => {
            if have < MIN_PAYLOAD_CHARS {
                return need(stage);
            }
            decode_into(&chars[..PREFIX_CHARS as usize], scratch);
            match magic::payload_prefix(scratch) {
                Some(PayloadPrefix::Kind(kind)) => Judged::Payload(kind),
                Some(PayloadPrefix::Mz) => judge(chars, complete, Stage::MzHeader, scratch),
                // Tar has no signature at the start: it is looked for by
                // the `c3Rh` search.
                None => Judged::Harmless,
            }
        }
        Stage::Tar => {
            if have < TAR_CHARS.end as u64 {
                return need(stage);
            }
            decode_into(&chars[TAR_CHARS], scratch);
            // Decoded offset 255 is scratch[0]; the magic is at 257.
            let magic = &scratch[2..10];
            if magic == b"ustar\x0000" || magic == b"ustar  \0" {
                Judged::Payload(Kind::Tar)
            } else {
                Judged::Harmless
            }
        }
        Stage::MzHeader => {
            if have < MZ_HEADER_CHARS {
                return need(stage);
            }
            decode_into(&chars[..MZ_HEADER_CHARS as usize], scratch);
            let Some(e) = magic::mz_new_header_offset(scratch) else {
                return Judged::Harmless;
            };
            // Groups of 4 characters decode to 3 bytes independently.
            let from = (e as u64 / 3) * 4;
            let to = (e as u64 + 4).div_ceil(3) * 4;
            let at = e - (from as usize / 4) * 3;
            if to > MAX_NEED {
                // A plausible header pointer too far out to confirm cheaply:
                // the safer reading is an executable.
                return Judged::Payload(Kind::MsDos);
            }
            judge(chars, complete, Stage::MzSignature { from, to, at }, scratch)
        }
        Stage::MzSignature { from, to, at } => {
            if have < to {
                // Truncated before its PE header: refuse rather than guess.
                return if complete { Judged::Payload(Kind::MsDos) } else { Judged::Need(stage) };
            }
            decode_into(&chars[from as usize..to as usize], scratch);
            let sig = scratch.get(at..at + 4).unwrap_or_default();
            if sig == b"PE\0\0" {
                Judged::Payload(Kind::Pe)
            } else if magic::is_new_exe_signature(sig) {
                Judged::Payload(Kind::MsDos)
            } else {
                Judged::Harmless
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Skimming: nothing kept, nothing waiting (see `skim`).
    Scan,
    /// Inside a segment of the current run.
    Segment,
    /// Inside a run, between segments: whitespace.
    Gap,
    /// After padding: the run is over once the padding ends.
    Pad,
    /// A backslash ended the previous input; its meaning depends on the next byte.
    Escape { in_gap: bool },
}

/// A start waiting for the character that decides its `MZ` header:
/// (due, run index, first and end character to decode, byte offset).
type MzWait = Reverse<(u64, u64, u64, u64, usize)>;

#[derive(Debug)]
struct Run {
    /// Characters in the run so far.
    len: u64,
    /// Characters of the current segment so far, up to [`HEAD`]; 0 between
    /// segments.
    seg: u8,
    /// Where segments begin: (run index, input position). A start's offset
    /// is found through it, since whitespace sits between run characters.
    segments: VecDeque<(u64, u64)>,
    /// Normalized characters of the run from index `base` on, kept while a
    /// start may still need them.
    window: Vec<u8>,
    base: u64,
    /// Characters from this index on are not kept: no start reads them.
    keep_until: u64,
    /// Which run indexes are starts, as bits (index modulo [`RING_BITS`]);
    /// valid below `ring_next`, for the last [`RING_BITS`] indexes.
    ring: [u64; RING_WORDS],
    ring_next: u64,
    /// Starts below this index have been through the lead test.
    filtered_to: u64,
    /// Places below this index have been searched for `c3Rh`.
    tar_from: u64,
    /// Starts that passed the lead test, waiting for their first characters.
    prefix: VecDeque<u64>,
    /// `MZ` starts waiting for their header.
    mz_header: VecDeque<u64>,
    /// `MZ` starts waiting for the signature their header points to, by due.
    mz_signature: BinaryHeap<MzWait>,
    /// Starts with `c3Rh` at 344, waiting for characters 340..356.
    tar: VecDeque<u64>,
    /// The run length when run mode took over: it keeps going a while.
    entered: u64,
    /// Characters of the current segment (0 between segments).
    seg_len: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            len: 0,
            seg: 0,
            segments: VecDeque::new(),
            window: Vec::new(),
            base: 0,
            keep_until: 0,
            ring: [0; RING_WORDS],
            ring_next: 0,
            filtered_to: 0,
            tar_from: 0,
            prefix: VecDeque::new(),
            mz_header: VecDeque::new(),
            mz_signature: BinaryHeap::new(),
            tar: VecDeque::new(),
            entered: 0,
            seg_len: 0,
        }
    }
}

impl Run {
    /// Ready for a new run. Cleared, not replaced: text whose words form
    /// many short runs must not allocate per run.
    fn clear(&mut self) {
        self.len = 0;
        self.seg = 0;
        self.segments.clear();
        self.window.clear();
        self.base = 0;
        self.keep_until = 0;
        // The ring is cleared as `ring_next` moves (see `mark`).
        self.ring_next = 0;
        self.filtered_to = 0;
        self.tar_from = 0;
        self.prefix.clear();
        self.mz_header.clear();
        self.mz_signature.clear();
        self.tar.clear();
        self.entered = 0;
        self.seg_len = 0;
    }

    /// Marks run index `x` as a start; starts come in increasing order.
    fn mark(&mut self, x: u64) {
        if x >= self.ring_next {
            if x - self.ring_next >= RING_BITS {
                self.ring = [0; RING_WORDS];
            } else {
                // Clears the bits of `ring_next..x`, a word at a time.
                let mut k = self.ring_next;
                while k < x {
                    let low = k % 64;
                    let width = (64 - low).min(x - k);
                    let bits = if width == 64 { u64::MAX } else { ((1u64 << width) - 1) << low };
                    self.ring[(k / 64 % RING_WORDS as u64) as usize] &= !bits;
                    k += width;
                }
            }
            self.ring_next = x + 1;
        }
        self.ring[(x / 64 % RING_WORDS as u64) as usize] |= 1 << (x % 64);
    }

    fn is_start(&self, x: u64) -> bool {
        x < self.ring_next
            && x + RING_BITS >= self.ring_next
            && self.ring[(x / 64 % RING_WORDS as u64) as usize] >> (x % 64) & 1 == 1
    }

    /// The kept characters from run index `x` on.
    fn chars_from(&self, x: u64) -> &[u8] {
        x.checked_sub(self.base).and_then(|k| self.window.get(k as usize..)).unwrap_or_default()
    }

    /// The input position of run character `index`.
    fn position(&self, index: u64) -> u64 {
        let seg = self.segments.iter().rev().find(|(i, _)| *i <= index);
        seg.map_or(0, |(i, at)| at + (index - i))
    }

    /// Searches the kept characters not yet searched for `c3Rh` 344
    /// characters after a start.
    fn search_tar(&mut self) {
        let end = self.base + self.window.len() as u64;
        let from = self.tar_from.max(self.base).max(TAR_STA_AT);
        if end < from + TAR_STA.len() as u64 {
            return;
        }
        let mut hits = std::mem::take(&mut self.tar);
        let hay = &self.window[(from - self.base) as usize..];
        find_tar_sta(hay, |k| {
            let start = from + k as u64 - TAR_STA_AT;
            if self.is_start(start) {
                hits.push_back(start);
            }
        });
        self.tar = hits;
        // A `c3Rh` may begin in the last three characters, not all here yet.
        self.tar_from = end + 1 - TAR_STA.len() as u64;
    }

    /// The lowest run index any waiting start, or the tar search, still reads.
    fn needed_from(&self) -> u64 {
        let queued = [self.prefix.front(), self.mz_header.front(), self.tar.front()];
        // The last characters stay for a hand-back to skimming (see `History`).
        let mut from = self.filtered_to.min(self.tar_from.saturating_sub(HISTORY as u64 + 8));
        for x in queued.into_iter().flatten() {
            from = from.min(*x);
        }
        for Reverse((_, x, ..)) in &self.mz_signature {
            from = from.min(*x);
        }
        from
    }

    /// Drops kept characters, and entries of the position map, that no
    /// start needs any more.
    fn trim(&mut self) {
        let from = self.needed_from();
        if from.saturating_sub(self.base) > TRIM {
            self.window.drain(..(from - self.base) as usize);
            self.base = from;
            while self.segments.len() > 1 && self.segments[1].0 <= from {
                self.segments.pop_front();
            }
        }
    }
}

/// The last characters of a stretch before input position `at`, kept so
/// that run mode can take over there: each character, whether it is a
/// start, and its input position.
#[derive(Debug, Default)]
struct History {
    chars: Vec<u8>,
    starts: Vec<bool>,
    pos: Vec<u64>,
    /// Characters of the segment open at `at`, up to [`HEAD`]; 0 after whitespace.
    open: u8,
    at: u64,
    valid: bool,
}

/// Characters a hand-over keeps: a start 344 characters back may still meet
/// its `c3Rh`.
const HISTORY: usize = TAR_STA_AT as usize + 8;

/// Where the segment holding position `q` begins, not before `floor`.
fn segment_start(data: &[u8], mut q: usize, floor: usize) -> usize {
    while q > floor && is_alpha(data[q - 1]) {
        q -= 1;
    }
    q
}

/// Whether the base64 character at `q` is among the first [`HEAD`] of its
/// segment; `open` characters of it came before `floor`.
fn start_at(data: &[u8], q: usize, floor: usize, open: u8) -> bool {
    let mut k = q;
    let mut before = 0u8;
    while before < HEAD && k > floor && is_alpha(data[k - 1]) {
        k -= 1;
        before += 1;
    }
    if k == floor && before < HEAD {
        before = before.saturating_add(open);
    }
    before < HEAD
}

/// Whether the start at `p` and the next character may be a lead (or the
/// next character is not in this piece, or is escaped).
fn may_lead(data: &[u8], p: usize) -> bool {
    let mut k = p + 1;
    loop {
        match data.get(k) {
            None => return true,
            Some(&b) if is_space(b) => k += 1,
            Some(&b) if is_alpha(b) => return lead(data[p], b),
            Some(&b) => return b == b'\\',
        }
    }
}

/// Bytes the skim reads at once.
const SKIM_BLOCK: usize = 64;

/// Whether the skim must look at byte `b`, which follows `prev`: a superset
/// of the bytes [`NEED`] flags, in compares that vectorize. `/`, `0`, `7`,
/// `A`, `B`, `G`..=`_` (most capitals, `[\\]^_`); a `3` or a `v` only after
/// the lowercase letter that makes it a lead or `c3Rh` (`c`; `y`, `z`) or
/// after whitespace (or a control byte) that may join it to one. The table
/// then sorts out the few extra bytes one by one; prose's lowercase
/// letters, punctuation, most digits and the capitals `C`..=`F` are never
/// looked at.
#[inline(always)]
fn is_candidate(b: u8, prev: u8) -> bool {
    let after_space = prev <= b' ';
    (b.wrapping_sub(b'/') < 2)
        | (b == b'7')
        | (b.wrapping_sub(b'A') < 2)
        | (b.wrapping_sub(b'G') < 25)
        | ((b == b'3') & ((prev == b'c') | after_space))
        | ((b == b'v') & ((prev.wrapping_sub(b'y') < 2) | after_space))
}

/// More candidates than this in a block make the skim hand over to run
/// mode: base64 itself (about 25 of 64 of its characters are candidates),
/// which run mode reads a segment at a time.
const DENSE: u32 = 16;

/// The candidates of a block, as bits, given the byte before each:
/// 0/1 flags (vector compares), packed a word at a time unless there are
/// none (a block of lowercase prose).
#[inline(always)]
fn candidate_mask(block: &[u8; SKIM_BLOCK], prev: &[u8; SKIM_BLOCK]) -> u64 {
    let mut flags = [0u8; SKIM_BLOCK];
    for ((f, &b), &p) in flags.iter_mut().zip(block).zip(prev) {
        *f = u8::from(is_candidate(b, p));
    }
    let (words, _) = flags.as_chunks::<8>();
    if words.iter().fold(0, |acc, w| acc | u64::from_ne_bytes(*w)) == 0 {
        return 0;
    }
    words.iter().enumerate().fold(0, |out, (k, w)| out | pack8(u64::from_le_bytes(*w)) << (8 * k))
}

/// Streaming search for base64 payloads in text.
#[derive(Debug)]
pub struct PayloadFinder {
    /// Input not yet judged: less than one [`PIECE`].
    pending_input: Vec<u8>,
    pos: u64,
    mode: Mode,
    run: Run,
    found: Option<Payload>,
    scratch: Vec<u8>,
    /// Skimming: characters of the segment open at the current position,
    /// up to [`HEAD`] (0 after anything else), and whether the last byte
    /// skimmed may go on into a run.
    skim_seg: u8,
    skim_in: bool,
    /// The stretch's last characters before a hand-over, the end of a piece
    /// or the end of run mode.
    hist: History,
    /// Whether the skim may read what run mode would otherwise: off only
    /// in [`reference`](Self::reference), the slow mode the skim's answers
    /// are checked against.
    skim: bool,
}

impl Default for PayloadFinder {
    fn default() -> Self {
        Self::new()
    }
}

impl PayloadFinder {
    /// A finder at the start of the text.
    pub fn new() -> Self {
        Self {
            pending_input: Vec::new(),
            pos: 0,
            mode: Mode::Scan,
            run: Run::default(),
            found: None,
            scratch: Vec::with_capacity(MZ_HEADER_CHARS as usize),
            skim_seg: 0,
            skim_in: false,
            hist: History::default(),
            skim: true,
        }
    }

    /// A finder that reads every run in run mode and never skims: the same
    /// answers as [`new`](Self::new), several times slower. The skim is an
    /// optimization that must not change any answer; tests and fuzzing
    /// compare the two.
    pub fn reference() -> Self {
        Self { skim: false, ..Self::new() }
    }

    /// The first payload found, if any.
    pub fn found(&self) -> Option<Payload> {
        self.found
    }

    /// Feeds the next bytes of text.
    ///
    /// The text is judged in pieces of exactly [`PIECE`] bytes (the last one
    /// shorter), cut at the same offsets however the caller chunks it, so the
    /// answer never depends on how the bytes arrived: bytes are gathered
    /// until a piece is full, and whole pieces of a large chunk are judged
    /// in place, without a copy.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.found.is_none() {
            if self.pending_input.is_empty() && data.len() >= PIECE {
                self.process(&data[..PIECE]);
                data = &data[PIECE..];
                continue;
            }
            let take = (PIECE - self.pending_input.len()).min(data.len());
            self.pending_input.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending_input.len() == PIECE {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        let piece = std::mem::take(&mut self.pending_input);
        self.process(&piece);
        self.pending_input = piece;
        self.pending_input.clear();
    }

    fn process(&mut self, data: &[u8]) {
        if self.found.is_some() {
            return;
        }
        let mut i = 0;
        while i < data.len() && self.found.is_none() {
            i = match self.mode {
                Mode::Scan => self.skim(data, i),
                Mode::Segment => self.segment(data, i),
                Mode::Gap => self.gap(data, i),
                Mode::Pad => self.pad(data, i),
                Mode::Escape { in_gap } => {
                    self.mode = if in_gap { Mode::Gap } else { Mode::Segment };
                    self.escape(data, i, in_gap)
                }
            };
        }
        if self.found.is_none() && self.mode == Mode::Scan && self.skim_in {
            // The stretch goes on into the next piece.
            self.hist = self.history(data, data.len());
        }
        self.pos += data.len() as u64;
    }

    /// Ends the text and returns the first payload found, if any.
    pub fn finish(&mut self) -> Option<Payload> {
        if !self.pending_input.is_empty() {
            self.flush();
        }
        if self.found.is_none() && self.mode != Mode::Scan {
            self.end_run();
        }
        self.found
    }

    /// Outside run mode: proves, 64 bytes at a time, that no start can be
    /// judged a payload, and hands the run over to run mode (which keeps
    /// characters and judges them) where that proof fails.
    ///
    /// The proof rests on [`lead`]: a lead whose first character is a
    /// lowercase letter has one of seven second characters (`H 3 G 0 v / _`),
    /// and any other lead has one of 19 first characters (capitals, `/ _ 0
    /// 7`). So only those bytes, the `3` of `c3Rh` and backslashes are looked
    /// at one by one ([`NEED`]), found by a vector compare over the block
    /// ([`candidate_mask`]). Run mode takes over at such a byte's segment
    /// when it is a start whose pair may be a lead, or the second character
    /// of a pair whose lowercase first is a start; at a `3` that may be the
    /// `3` of `c3Rh` (tar, 344 characters after a start); at a backslash (an
    /// escape); and at a block dense with candidates (base64 itself), which
    /// run mode reads faster. A lead whose first character comes before
    /// the skim's `from` is no exception: the skim hands over at a start
    /// whose pair the piece cuts, and run mode leaves only after testing
    /// every start it read.
    fn skim(&mut self, data: &[u8], from: usize) -> usize {
        let entry_seg = self.skim_seg;
        let mut i = from;
        if !self.skim {
            // The reference: run mode at the first segment or escape.
            if let Some(n) = data[from..].iter().position(|&b| is_alpha(b) || b == b'\\') {
                return self.hand_over(data, segment_start(data, from + n, from));
            }
            i = data.len();
        }
        while i < data.len() {
            let end = (i + SKIM_BLOCK).min(data.len());
            let block = data.get(i..end).and_then(|b| <&[u8; SKIM_BLOCK]>::try_from(b).ok());
            let prev =
                data.get(i.wrapping_sub(1)..end - 1).and_then(|b| <&[u8; SKIM_BLOCK]>::try_from(b).ok());
            let mut candidates = match (block, prev) {
                (Some(block), Some(prev)) if i > from => candidate_mask(block, prev),
                _ => {
                    // The first or last block: `a` is no candidate, and a
                    // space before `from` makes its byte one whatever came
                    // before (run mode's, or the previous piece's).
                    let mut block = [b'a'; SKIM_BLOCK];
                    let mut prev = [b' '; SKIM_BLOCK];
                    block[..end - i].copy_from_slice(&data[i..end]);
                    let known = usize::from(i == from);
                    prev[known..end - i].copy_from_slice(&data[i + known - 1..end - 1]);
                    candidate_mask(&block, &prev)
                }
            };
            let mut seen = 0;
            while candidates != 0 {
                let q = i + candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                seen += 1;
                // Every candidate before this one has been looked at: a
                // block this dense is base64 (or as dense as it), which run
                // mode reads faster.
                if (seen > DENSE && (is_alpha(data[q]) || data[q] == b'\\'))
                    || self.needs_run_mode(data, q, from, entry_seg)
                {
                    return self.hand_over(data, segment_start(data, q, from));
                }
            }
            i = end;
        }
        // Where the piece leaves off, for the next one.
        let mut k = data.len();
        let mut open = 0u8;
        while open < HEAD && k > from && is_alpha(data[k - 1]) {
            k -= 1;
            open += 1;
        }
        if k == from && open < HEAD {
            open = (open + entry_seg).min(HEAD);
        }
        self.skim_seg = open;
        self.skim_in =
            data.last().is_some_and(|&b| is_alpha(b) || is_space(b)) || (from == data.len() && self.skim_in);
        data.len()
    }

    /// Whether the candidate at `q` (see [`skim`](Self::skim)) needs run mode.
    fn needs_run_mode(&self, data: &[u8], q: usize, from: usize, entry_seg: u8) -> bool {
        let b = data[q];
        let need = NEED[usize::from(b)];
        if need == 0 {
            return false;
        }
        if need & NEED_ESCAPE != 0 {
            return true;
        }
        if need & NEED_THREE != 0 && self.tar_sta_at(data, q, from) {
            return true;
        }
        // As the first character of a pair.
        if need & NEED_FIRST != 0 && start_at(data, q, from, entry_seg) && may_lead(data, q) {
            return true;
        }
        if need & NEED_AFTER_LOWER == 0 {
            return false;
        }
        // As the second: the character before it, if that is a start.
        let mut k = q;
        while k > from && is_space(data[k - 1]) {
            k -= 1;
        }
        if k == from {
            // Before `from`: the previous piece (its history says), or run
            // mode, which leaves only after testing every start it read.
            let continued = self.hist.valid && self.hist.at == self.pos + from as u64;
            return continued
                && self.hist.starts.last() == Some(&true)
                && self.hist.chars.last().is_some_and(|&c| lead(c, b));
        }
        let p = k - 1;
        is_alpha(data[p]) && lead(data[p], b) && start_at(data, p, from, entry_seg)
    }

    /// Whether the `3` at `q` may be the `3` of `c3Rh` (whitespace between
    /// allowed); a `c3Rh` cut by the end of the piece may be.
    fn tar_sta_at(&self, data: &[u8], q: usize, floor: usize) -> bool {
        let mut k = q;
        let before = loop {
            if k == floor {
                break if self.hist.valid && self.hist.at == self.pos + floor as u64 {
                    self.hist.chars.last().copied()
                } else {
                    None
                };
            }
            match data[k - 1] {
                b if is_space(b) => k -= 1,
                b => break Some(b),
            }
        };
        if before != Some(b'c') {
            return false;
        }
        let mut k = q + 1;
        for want in [b'R', b'h'] {
            loop {
                match data.get(k) {
                    None => return true,
                    Some(&b) if is_space(b) => k += 1,
                    Some(&b) if b == want => {
                        k += 1;
                        break;
                    }
                    Some(_) => return false,
                }
            }
        }
        true
    }

    /// The stretch's characters before position `h` of this piece, with
    /// which of them are starts and where each stands: the bytes this piece
    /// holds back to the saved history's end, then the saved history (when
    /// the stretch goes on into it), at most [`HISTORY`] characters.
    fn history(&self, data: &[u8], h: usize) -> History {
        let floor = if self.hist.valid && self.hist.at >= self.pos {
            ((self.hist.at - self.pos) as usize).min(h)
        } else {
            0
        };
        let mut rev: Vec<(u8, u64, bool)> = Vec::new();
        let mut k = h;
        let mut reached_floor = false;
        while rev.len() < HISTORY + usize::from(HEAD) {
            if k == floor {
                reached_floor = true;
                break;
            }
            let b = data[k - 1];
            if is_alpha(b) {
                // Whether it begins a segment is known from the byte before.
                let first = if k - 1 == floor {
                    !(self.hist.valid && self.hist.at == self.pos + floor as u64 && self.hist.open > 0)
                } else {
                    !is_alpha(data[k - 2])
                };
                rev.push((b, self.pos + (k - 1) as u64, first));
            } else if !is_space(b) {
                break;
            }
            k -= 1;
        }
        let continued = reached_floor && self.hist.valid && self.hist.at == self.pos + floor as u64;
        let mut out = History { valid: true, at: self.pos + h as u64, ..History::default() };
        if continued {
            out.chars.extend_from_slice(&self.hist.chars);
            out.starts.extend_from_slice(&self.hist.starts);
            out.pos.extend_from_slice(&self.hist.pos);
        }
        // Offsets within segments, forward. A segment cut off by the limit
        // is too far back for its starts to matter.
        let mut count: u8 = if continued { self.hist.open } else { HEAD };
        for &(c, at, first) in rev.iter().rev() {
            if first {
                count = 0;
            }
            out.chars.push(c);
            out.starts.push(count < HEAD);
            out.pos.push(at);
            count = count.saturating_add(1).min(HEAD);
        }
        let after_space = h > floor && !is_alpha(data[h - 1]);
        out.open = if after_space || (rev.is_empty() && !continued) { 0 } else { count };
        let excess = out.chars.len().saturating_sub(HISTORY);
        out.chars.drain(..excess);
        out.starts.drain(..excess);
        out.pos.drain(..excess);
        out
    }

    /// Hands the run over to run mode at position `h` of this piece (a
    /// segment's start or a backslash), with the characters before it kept
    /// as if run mode had read them: their starts have been through the
    /// lead test, and the tar search looks at them again.
    fn hand_over(&mut self, data: &[u8], h: usize) -> usize {
        let hist = self.history(data, h);
        self.run.clear();
        let run = &mut self.run;
        for (k, ((&c, &start), &at)) in hist.chars.iter().zip(&hist.starts).zip(&hist.pos).enumerate() {
            let x = k as u64;
            if k == 0 || hist.pos[k - 1] + 1 != at {
                run.segments.push_back((x, at));
            }
            if start {
                run.mark(x);
                run.keep_until = x + MAX_NEED;
            }
            run.window.push(normalize(c));
        }
        run.len = hist.chars.len() as u64;
        // Every kept start has been through the lead test but the last
        // character's, whose pair is still to come.
        run.filtered_to = run.len.saturating_sub(1);
        run.entered = run.len;
        run.seg = hist.open;
        self.mode = if hist.open > 0 { Mode::Segment } else { Mode::Gap };
        self.hist = hist;
        h
    }

    /// Whether run mode has nothing left to judge, so skimming can go on at
    /// this gap: every start tested, no start waiting, the tar search
    /// caught up and no `c3Rh` under way at the end.
    fn idle(&mut self) -> bool {
        if !self.skim {
            return false;
        }
        let run = &mut self.run;
        // Not on the lines of a base64 block (skimming them would hand
        // them straight back), nor right after taking over.
        if run.seg_len >= LONG_SEGMENT
            || run.len < run.entered + STAY
            || run.filtered_to < run.ring_next
            || !run.prefix.is_empty()
            || !run.mz_header.is_empty()
            || !run.mz_signature.is_empty()
            || !run.tar.is_empty()
        {
            return false;
        }
        run.search_tar();
        run.tar.is_empty() && ![&b"c"[..], b"c3", b"c3R"].iter().any(|t| run.window.ends_with(t))
    }

    /// Leaves run mode at the gap at position `i` of this piece, keeping
    /// the run's last characters for the tar search of the skim.
    fn leave_run(&mut self, i: usize, open: u8) -> usize {
        let run = &self.run;
        let mut hist = History { valid: true, at: self.pos + i as u64, open, ..History::default() };
        let stored = run.base + run.window.len() as u64;
        if stored == run.len {
            let first = run.len.saturating_sub(HISTORY as u64).max(run.base);
            hist.chars.extend_from_slice(run.chars_from(first));
            let mut e = run.segments.iter().rposition(|s| s.0 <= first).unwrap_or(0);
            for x in first..run.len {
                while run.segments.get(e + 1).is_some_and(|s| s.0 <= x) {
                    e += 1;
                }
                let (ix, at) = run.segments.get(e).copied().unwrap_or((x, 0));
                hist.pos.push(at + (x - ix));
                hist.starts.push(run.is_start(x));
            }
        }
        // Characters not kept lie far past the last start: none is needed.
        self.hist = hist;
        self.run.clear();
        self.mode = Mode::Scan;
        self.skim_seg = 0;
        self.skim_in = true;
        i
    }

    /// Appends characters of the current segment, the first of which is at
    /// input position `at`, and judges what they make ready.
    fn push(&mut self, chars: &[u8], at: u64) {
        let run = &mut self.run;
        let n = chars.len() as u64;
        if run.seg == 0 {
            // A new segment (an entry for this index left by a `\/` before
            // the gap is replaced).
            if run.segments.back().is_some_and(|s| s.0 == run.len) {
                run.segments.pop_back();
            }
            run.segments.push_back((run.len, at));
        }
        if run.seg == 0 {
            run.seg_len = 0;
        }
        run.seg_len += n;
        let head = u64::from(HEAD - run.seg).min(n);
        if head > 0 {
            if run.len > run.base + run.window.len() as u64 {
                // Characters went unkept since the last start, which has
                // been judged: keep afresh from here.
                run.search_tar();
                run.window.clear();
                run.base = run.len;
                run.filtered_to = run.filtered_to.max(run.len);
                run.tar_from = run.tar_from.max(run.len);
            }
            for k in 0..head {
                run.mark(run.len + k);
            }
            run.keep_until = run.len + head - 1 + MAX_NEED;
            run.seg += head as u8;
        }
        let room = run.keep_until.saturating_sub(run.len).min(n) as usize;
        run.window.extend(chars[..room].iter().map(|&c| normalize(c)));
        run.len += n;
        self.advance(false);
    }

    /// Judges every start whose characters are in (all of them at the end
    /// of a run, `complete`).
    fn advance(&mut self, complete: bool) {
        let run = &mut self.run;
        // The lead test, for starts with two characters.
        let upto = run.ring_next.min(run.len.saturating_sub(1));
        while run.filtered_to < upto {
            let x = run.filtered_to;
            // The next start at or after `x`, a ring word at a time.
            let bits = run.ring[(x / 64 % RING_WORDS as u64) as usize] >> (x % 64);
            if bits == 0 {
                run.filtered_to = ((x | 63) + 1).min(upto);
                continue;
            }
            let y = x + u64::from(bits.trailing_zeros());
            if y >= upto {
                run.filtered_to = upto;
                break;
            }
            run.filtered_to = y + 1;
            if let [c0, c1, ..] = run.chars_from(y)
                && lead(*c0, *c1)
            {
                run.prefix.push_back(y);
            }
        }
        while let Some(&x) = self.run.prefix.front() {
            if self.run.len < x + MIN_PAYLOAD_CHARS && !complete {
                break;
            }
            self.run.prefix.pop_front();
            self.judge_start(x, Stage::Prefix, complete);
            if self.found.is_some() {
                return;
            }
        }
        while let Some(&x) = self.run.mz_header.front() {
            if self.run.len < x + MZ_HEADER_CHARS && !complete {
                break;
            }
            self.run.mz_header.pop_front();
            self.judge_start(x, Stage::MzHeader, complete);
            if self.found.is_some() {
                return;
            }
        }
        while let Some(&Reverse((due, x, from, to, at))) = self.run.mz_signature.peek() {
            if self.run.len < due && !complete {
                break;
            }
            self.run.mz_signature.pop();
            self.judge_start(x, Stage::MzSignature { from, to, at }, complete);
            if self.found.is_some() {
                return;
            }
        }
        if complete || self.run.len >= self.run.tar_from + TAR_BATCH {
            self.run.search_tar();
        }
        while let Some(&x) = self.run.tar.front() {
            if self.run.len < x + TAR_CHARS.end as u64 && !complete {
                break;
            }
            self.run.tar.pop_front();
            self.judge_start(x, Stage::Tar, complete);
            if self.found.is_some() {
                return;
            }
        }
        if self.run.window.len() as u64 > 2 * TRIM {
            self.run.trim();
        }
    }

    /// Judges the start at run index `x` at `stage`, and queues it for the
    /// next stage if it needs more characters.
    fn judge_start(&mut self, x: u64, stage: Stage, complete: bool) {
        let chars = self.run.chars_from(x);
        match judge(chars, complete, stage, &mut self.scratch) {
            Judged::Payload(kind) => self.found = Some(Payload { kind, offset: self.run.position(x) }),
            Judged::Harmless => {}
            Judged::Need(Stage::MzHeader) => self.run.mz_header.push_back(x),
            Judged::Need(Stage::MzSignature { from, to, at }) => {
                self.run.mz_signature.push(Reverse((x + to, x, from, to, at)));
            }
            Judged::Need(Stage::Tar) => self.run.tar.push_back(x),
            // Queued only once its first characters are in.
            Judged::Need(Stage::Prefix) => {}
        }
    }

    fn end_run(&mut self) {
        self.advance(true);
        self.run.clear();
        self.mode = Mode::Scan;
        self.skim_seg = 0;
        self.skim_in = false;
        self.hist.valid = false;
    }

    fn segment(&mut self, data: &[u8], i: usize) -> usize {
        match CLASS[data[i] as usize] {
            Class::Alpha => {
                let end = alpha_run_end(data, i);
                self.push(&data[i..end], self.pos + i as u64);
                end
            }
            Class::Pad => {
                self.mode = Mode::Pad;
                i + 1
            }
            Class::Space => {
                let open = self.run.seg;
                self.mode = Mode::Gap;
                self.run.seg = 0;
                if self.idle() {
                    return self.leave_run(i, open);
                }
                i + 1
            }
            Class::Backslash => self.escape(data, i + 1, false),
            Class::Other => {
                self.end_run();
                i
            }
        }
    }

    /// After a backslash at `i - 1`.
    fn escape(&mut self, data: &[u8], i: usize, in_gap: bool) -> usize {
        let Some(&next) = data.get(i) else {
            self.mode = Mode::Escape { in_gap };
            return i;
        };
        match next {
            b'n' | b'r' | b't' | b'f' => {
                self.mode = Mode::Gap;
                self.run.seg = 0;
                i + 1
            }
            b'/' => {
                // One character from two bytes: the position map gets an
                // entry on each side of it.
                let slash = self.pos + i as u64;
                if self.run.seg > 0 && self.run.segments.back().map(|s| s.0) != Some(self.run.len) {
                    self.run.segments.push_back((self.run.len, slash - 1));
                }
                self.mode = Mode::Segment;
                self.push(b"/", slash - 1);
                if self.found.is_none() {
                    self.run.segments.push_back((self.run.len, slash + 1));
                }
                i + 1
            }
            _ => {
                self.end_run();
                i
            }
        }
    }

    fn gap(&mut self, data: &[u8], i: usize) -> usize {
        match CLASS[data[i] as usize] {
            Class::Space => data[i..].iter().position(|&b| !is_space(b)).map_or(data.len(), |n| i + n),
            Class::Alpha => {
                self.mode = Mode::Segment;
                i
            }
            Class::Backslash => self.escape(data, i + 1, true),
            Class::Pad | Class::Other => {
                self.end_run();
                i
            }
        }
    }

    fn pad(&mut self, data: &[u8], i: usize) -> usize {
        if CLASS[data[i] as usize] == Class::Pad {
            return i + 1;
        }
        self.end_run();
        i
    }
}

/// Searches complete text in one call.
pub fn find(text: &[u8]) -> Option<Payload> {
    let mut f = PayloadFinder::new();
    f.update(text);
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    fn elf() -> Vec<u8> {
        let mut b = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        b.extend((0u8..120).map(|i| i.wrapping_mul(37)));
        b
    }

    fn wrap(s: &str, width: usize, eol: &str) -> String {
        s.as_bytes().chunks(width).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(eol)
    }

    #[test]
    fn a_lead_needs_a_character_the_skim_looks_at() {
        // Every lead is caught at its first character, unless that is a
        // lowercase letter: then at its second.
        let alphabet: Vec<u8> = (0..=255u8).filter(|&b| CLASS[usize::from(b)] == Class::Alpha).collect();
        for &c0 in &alphabet {
            for &c1 in &alphabet {
                if lead(c0, c1) {
                    let caught = if c0.is_ascii_lowercase() {
                        NEED[usize::from(c1)] & NEED_AFTER_LOWER != 0
                    } else {
                        NEED[usize::from(c0)] & NEED_FIRST != 0
                    };
                    assert!(caught, "{}{}", c0 as char, c1 as char);
                }
            }
        }
        assert!(lead(b'f', b'0') && lead(b'T', b'V') && lead(b'U', b'E') && lead(b'y', b'v'));
        assert!(!lead(b'T', b'h') && !lead(b'A', b'n'));
        // Common capitals and digits of prose are passed over.
        for b in *b"CDEFJLOPRY1245689:;-+" {
            assert_eq!(NEED[usize::from(b)], 0, "{}", b as char);
        }
    }

    #[test]
    fn the_block_scan_finds_every_byte_the_skim_needs() {
        for b in 0..=255u8 {
            for p in 0..=255u8 {
                if NEED[usize::from(b)] == 0 || is_candidate(b, p) {
                    continue;
                }
                // Passed over: a `3` or a `v` after a byte that makes it
                // neither a lead's second (after a lowercase first) nor the
                // `3` of `c3Rh`, nor joins it to one across whitespace.
                assert!(matches!(b, b'3' | b'v'), "{b:#x} after {p:#x}");
                assert!(!is_space(p), "{b:#x} after {p:#x}");
                assert!(!(p.is_ascii_lowercase() && lead(p, b)), "{b:#x} after {p:#x}");
                assert!(!(b == b'3' && p == b'c'), "c3");
            }
        }
        let prev = [b'x'; SKIM_BLOCK];
        for b in 0..=255u8 {
            let mut block = [b'a'; SKIM_BLOCK];
            let at = [0, 1, 7, 8, 15, 16, 31, 32, 47, 48, 63];
            for k in at {
                block[k] = b;
            }
            let want = if is_candidate(b, b'x') { at.iter().fold(0u64, |m, k| m | 1 << k) } else { 0 };
            assert_eq!(candidate_mask(&block, &prev), want, "{b:#x}");
        }
        let mut block = [0u8; SKIM_BLOCK];
        let mut prev = [0u8; SKIM_BLOCK];
        for k in 0..SKIM_BLOCK {
            block[k] = (k as u8).wrapping_mul(97).wrapping_add(13);
            prev[k] = (k as u8).wrapping_mul(59).wrapping_add(3);
        }
        let expected =
            (0..SKIM_BLOCK).filter(|&k| is_candidate(block[k], prev[k])).fold(0u64, |m, k| m | 1 << k);
        assert_eq!(candidate_mask(&block, &prev), expected);
    }

    #[test]
    fn a_stretch_of_base64_ends_where_a_byte_by_byte_look_ends_it() {
        let mut data: Vec<u8> = b"ab+/-_09XYZ".iter().copied().cycle().take(200).collect();
        for stop in [0usize, 1, 15, 16, 31, 32, 33, 63, 64, 100, 199] {
            let mut d = data.clone();
            d[stop] = b'=';
            for from in [0usize, 1, 5, 31, 32, 40] {
                let want = d[from..].iter().position(|&b| !is_alpha(b)).map_or(d.len(), |n| from + n);
                assert_eq!(alpha_run_end(&d, from), want, "stop {stop} from {from}");
            }
        }
        data.truncate(45);
        assert_eq!(alpha_run_end(&data, 3), 45);
    }

    #[test]
    fn finds_a_raw_block_at_any_offset() {
        let b64 = STANDARD.encode(elf());
        for pad in 0..8 {
            let text = format!("{}here: {b64}\nbye\n", "x ".repeat(pad));
            let found = find(text.as_bytes()).unwrap_or_else(|| panic!("pad {pad}"));
            assert_eq!(found.kind, Kind::Elf);
            assert_eq!(found.offset as usize, text.find(&b64).unwrap());
        }
    }

    #[test]
    fn finds_it_behind_glued_junk_and_wrapped() {
        let b64 = STANDARD.encode(elf());
        for junk in ["", "a", "ab", "abc"] {
            assert!(find(format!("x {junk}{b64} y").as_bytes()).is_some(), "junk {junk:?}");
        }
        for width in [64, 76, 16] {
            for eol in ["\n", "\r\n", "\\n", "\\r\\n"] {
                let text = format!("-----BEGIN X-----{eol}{}{eol}-----END X-----", wrap(&b64, width, eol));
                assert_eq!(find(text.as_bytes()).map(|p| p.kind), Some(Kind::Elf), "{width} {eol:?}");
            }
        }
        let text = format!("k: |\n  {}\n", wrap(&URL_SAFE_NO_PAD.encode(elf()), 60, "\n  "));
        assert_eq!(find(text.as_bytes()).map(|p| p.kind), Some(Kind::Elf));
        let short_first = format!("data: {}\n{}", &b64[..10], wrap(&b64[10..], 64, "\n"));
        assert_eq!(find(short_first.as_bytes()).map(|p| p.kind), Some(Kind::Elf));
    }

    #[test]
    fn harmless_base64_is_harmless() {
        let random: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut mid = random.clone();
        mid[300..304].copy_from_slice(b"PK\x03\x04");
        for blob in [random, mid] {
            let text = format!("{{\"img\": \"{}\"}}", STANDARD.encode(&blob));
            assert_eq!(find(text.as_bytes()), None);
        }
        assert_eq!(find(b"short f0VMRgIBAQAAAAAA ok"), None, "too short to run");
    }

    #[test]
    fn chunking_does_not_change_the_answer() {
        let b64 = STANDARD.encode(elf());
        let text = format!("{{\"a\": \"x\", \"f\": \"{}\"}}", wrap(&b64, 20, "\\n"));
        let whole = find(text.as_bytes());
        assert!(whole.is_some());
        for size in 1..40 {
            let mut f = PayloadFinder::new();
            for c in text.as_bytes().chunks(size) {
                f.update(c);
            }
            assert_eq!(f.finish(), whole, "chunk size {size}");
        }
    }
}
