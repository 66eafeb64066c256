//! Embedded payloads: base64 inside text that decodes to an executable or
//! an archive.
//!
//! # What counts as a payload
//!
//! Text is cut into *segments*: maximal stretches of base64 characters (both
//! alphabets, `A-Z a-z 0-9 + / - _`; in JSON strings `\/` counts as `/`). A
//! *run* is a segment followed by further segments that each begin a new line
//! — a line break (LF, CRLF, or the JSON escapes `\n` and `\r\n`) with only
//! blanks around it. That is how PEM (64 columns), MIME (76 columns), YAML
//! block scalars and JSON-escaped blobs wrap base64. Padding (`=`) ends a
//! run, as does a blank line or any other character.
//!
//! A payload may begin at the start of a run, or at the start of any of its
//! lines. At a run's start the decoder also tries the next three characters,
//! so junk glued in front cannot shift the 4-character groups out of
//! alignment; the run itself may start at any byte offset of the text. A
//! signature counts only at the start of a payload: random bytes that
//! contain `PK` or `MZ` somewhere inside stay harmless.
//!
//! # Bounded work
//!
//! Each start is judged from at most a few hundred characters: the first 16
//! (every signature in [`magic::payload_prefix`]), characters 340..356 (tar's
//! `ustar` at decoded offset 257) and, for `MZ`, the header it points to.
//! Only those slices are decoded. Text outside long segments is skipped
//! eight bytes at a time, so the finder is linear in the input, with a small
//! constant, whatever the input does.
//!
//! Limits, on purpose: a payload must be at least [`MIN_PAYLOAD_CHARS`]
//! characters long (an 18-byte "executable" runs nothing); lines narrower
//! than 15 characters are not followed; ISO images (signature at 32 KiB),
//! binary cpio and ARJ (two-byte magics) are not looked for inside text;
//! base64 nested inside base64 is not decoded twice.

use std::collections::VecDeque;

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
/// Characters that hold an `MZ` header's first 66 bytes.
const MZ_HEADER_CHARS: u64 = 88;
/// Farthest any check reads; beyond it an `MZ` payload is judged unconfirmed.
const MAX_NEED: u64 = 1400;
/// Bytes of earlier input kept to find a short first line of a wrapped block.
const LOOKBACK: usize = 64;
/// The text is judged in pieces of this many bytes, cut at fixed offsets.
pub const PIECE: usize = 64 * 1024;
/// The block size of the skip loop: every segment of 15 or more characters
/// contains a whole block.
const BLOCK: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Other,
    Alpha,
    Pad,
    Lf,
    Cr,
    Blank,
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
            b'\n' => Class::Lf,
            b'\r' => Class::Cr,
            b' ' | b'\t' => Class::Blank,
            b'\\' => Class::Backslash,
            _ => Class::Other,
        };
        b += 1;
    }
    t
};

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

/// The end of the stretch of base64 characters starting at `i`, 32 bytes
/// at a time where it can.
fn alpha_run_end(data: &[u8], mut i: usize) -> usize {
    // Words are short: look at the first bytes one by one.
    let near = (i + 16).min(data.len());
    if let Some(n) = data[i..near].iter().position(|&b| !is_alpha(b)) {
        return i + n;
    }
    i = near;
    while let Some(block) = data.get(i..i + 32) {
        if !all_alpha_32(block) {
            break;
        }
        i += 32;
    }
    data[i..].iter().position(|&b| !is_alpha(b)).map_or(data.len(), |n| i + n)
}

/// Where the segment ending before `end` begins, not before `from`; a JSON
/// escaped slash (`\/`) belongs to the segment.
fn walk_back(data: &[u8], end: usize, from: usize) -> usize {
    let mut s = end;
    while s > from {
        let escaped_slash = data[s - 1] == b'\\' && data.get(s) == Some(&b'/');
        if CLASS[data[s - 1] as usize] != Class::Alpha && !escaped_slash {
            break;
        }
        s -= 1;
    }
    s
}

/// 0/1 flags for 32 bytes: a fixed-size map that compiles to vector compares.
#[inline(always)]
fn alpha_flags(block: &[u8]) -> [u8; 32] {
    let mut flags = [0u8; 32];
    for (f, &b) in flags.iter_mut().zip(block) {
        *f = u8::from(is_alpha(b));
    }
    flags
}

/// Whether 32 bytes are all base64 characters.
#[inline(always)]
fn all_alpha_32(block: &[u8]) -> bool {
    let flags = alpha_flags(block);
    let words = flags.chunks_exact(8).map(|w| <[u8; 8]>::try_from(w).map_or(0, u64::from_le_bytes));
    words.fold(u64::MAX, |acc, w| acc & w) == 0x0101_0101_0101_0101
}

/// The start of the first 8-byte block at `from + 8k` made only of base64
/// characters. Works 32 bytes at a time on 0/1 flags, which compiles to
/// vector compares; every segment of 15 or more characters after `from`
/// contains such a block.
fn next_alpha_block(data: &[u8], mut from: usize) -> Option<usize> {
    const ALL: u64 = 0x0101_0101_0101_0101;
    while let Some(block) = data.get(from..from + 32) {
        let flags = alpha_flags(block);
        for (k, word) in flags.chunks_exact(8).enumerate() {
            if <[u8; 8]>::try_from(word).map(u64::from_le_bytes).ok() == Some(ALL) {
                return Some(from + 8 * k);
            }
        }
        from += 32;
    }
    while let Some(block) = data.get(from..from + BLOCK) {
        if block.iter().all(|&b| is_alpha(b)) {
            return Some(from);
        }
        from += BLOCK;
    }
    None
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

#[derive(Debug, Clone, Copy)]
struct Candidate {
    /// Index into the run's characters.
    index: u64,
    stage: Stage,
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
                None => judge(chars, complete, Stage::Tar, scratch),
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
    /// Outside any run: skip ahead block by block.
    Scan,
    /// Inside a segment of the current run.
    Segment,
    /// After a segment: blanks, then a line break, may lead to the next line.
    Gap { newline: bool },
    /// After padding: the run is over once the padding ends.
    Pad,
    /// A backslash ended the previous input; its meaning depends on the next byte.
    Escape { in_gap: bool, newline: bool },
}

#[derive(Debug)]
struct Run {
    len: u64,
    /// Where recent segments begin: (run index, input position). A
    /// candidate's offset is found through it, since line breaks sit between
    /// run characters.
    segments: VecDeque<(u64, u64)>,
    /// Normalized characters of the run from index `base` on, kept while a
    /// candidate still needs them.
    window: Vec<u8>,
    base: u64,
    pending: VecDeque<Candidate>,
    /// The run length at which the first pending candidate can be judged.
    next_due: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            len: 0,
            segments: VecDeque::new(),
            window: Vec::new(),
            base: 0,
            pending: VecDeque::new(),
            next_due: u64::MAX,
        }
    }
}

impl Run {
    fn clear(&mut self) {
        self.len = 0;
        self.base = 0;
        self.segments.clear();
        self.window.clear();
        self.pending.clear();
        self.next_due = u64::MAX;
    }

    fn add_pending(&mut self, candidate: Candidate) {
        self.next_due = self.next_due.min(candidate.due());
        self.pending.push_back(candidate);
    }
}

impl Candidate {
    /// The run length at which this candidate can be judged at its stage.
    fn due(&self) -> u64 {
        let needed = match self.stage {
            Stage::Prefix => MIN_PAYLOAD_CHARS,
            Stage::Tar => TAR_CHARS.end as u64,
            Stage::MzHeader => MZ_HEADER_CHARS,
            Stage::MzSignature { to, .. } => to,
        };
        self.index + needed
    }
}

/// Streaming search for base64 payloads in text.
#[derive(Debug)]
pub struct PayloadFinder {
    /// Input not yet judged: less than one [`PIECE`].
    pending_input: Vec<u8>,
    pos: u64,
    mode: Mode,
    run: Run,
    recent: Vec<u8>,
    found: Option<Payload>,
    scratch: Vec<u8>,
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
            recent: Vec::with_capacity(LOOKBACK),
            found: None,
            scratch: Vec::with_capacity(16),
        }
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
                Mode::Scan => self.scan(data, i),
                Mode::Segment => self.segment(data, i),
                Mode::Gap { newline } => self.gap(data, i, newline),
                Mode::Pad => self.pad(data, i),
                Mode::Escape { in_gap, newline } => {
                    self.mode = if in_gap { Mode::Gap { newline } } else { Mode::Segment };
                    self.escape(data, i, in_gap, newline)
                }
            };
        }
        self.pos += data.len() as u64;
        // Keep the tail for the short-first-line lookback.
        if data.len() >= LOOKBACK {
            self.recent.clear();
            self.recent.extend_from_slice(&data[data.len() - LOOKBACK..]);
        } else {
            self.recent.extend_from_slice(data);
            let excess = self.recent.len().saturating_sub(LOOKBACK);
            self.recent.drain(..excess);
        }
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

    /// Byte `i` of the input seen so far, relative to the current chunk
    /// (negative indexes reach into the previous chunk's tail).
    fn byte_at(&self, data: &[u8], i: isize) -> Option<u8> {
        if i >= 0 {
            data.get(i as usize).copied()
        } else {
            let back = (-i) as usize;
            self.recent.len().checked_sub(back).map(|j| self.recent[j])
        }
    }

    fn escaped(&self, data: &[u8], i: isize) -> bool {
        self.byte_at(data, i - 1) == Some(b'\\')
    }

    /// Outside a run: find the next stretch of base64 long enough to matter.
    fn scan(&mut self, data: &[u8], mut from: usize) -> usize {
        loop {
            let Some(block) = next_alpha_block(data, from) else {
                // No whole block left: look at the tail byte by byte, so a
                // segment that continues into the next chunk is not lost.
                let end = if data.last() == Some(&b'\\') { data.len() - 1 } else { data.len() };
                let s = walk_back(data, end, from);
                if s == end {
                    return data.len();
                }
                return self.begin(data, s);
            };
            let s = walk_back(data, block, from);
            let e = alpha_run_end(data, block);
            // A word too short to be a payload, not followed by a line break
            // that could continue it: skip without starting a run. This is
            // what keeps prose fast.
            if e < data.len()
                && e - s < MIN_PAYLOAD_CHARS as usize
                && !matches!(data[e], b'\n' | b'\r' | b'\\')
            {
                from = e;
                continue;
            }
            return self.begin(data, s);
        }
    }

    /// Starts a run at the segment beginning at `s` (after an escape letter
    /// such as the `n` of `\n`, which is not part of it).
    fn begin(&mut self, data: &[u8], mut s: usize) -> usize {
        if s == 0 && data.first() == Some(&b'/') && self.escaped(data, 0) {
            // The `\` of `\/` ended the previous chunk.
            self.start_run_at(data, 0, self.pos - 1);
            return 0;
        }
        while s < data.len() && matches!(data[s], b'n' | b'r' | b't') && self.escaped(data, s as isize) {
            s += 1;
        }
        let escaped_slash = data.get(s..s + 2) == Some(b"\\/");
        if s >= data.len() || (CLASS[data[s] as usize] != Class::Alpha && !escaped_slash) {
            return s.min(data.len());
        }
        self.start_run(data, s);
        s
    }

    /// Starts a run at `s`, reaching back for a short first line that the
    /// skip loop passed over.
    fn start_run(&mut self, data: &[u8], s: usize) {
        self.start_run_at(data, s, self.pos + s as u64);
    }

    /// Starts a run at `s`, whose first character sits at input position `at`.
    fn start_run_at(&mut self, data: &[u8], s: usize, at: u64) {
        // Cleared, not replaced: text whose lines end in a long word starts
        // a run per line, and must not allocate per line.
        self.run.clear();
        self.mode = Mode::Segment;
        let first = self.short_first_line(data, s as isize);
        self.run.segments.push_back((0, first.as_ref().map_or(at, |(first_at, _)| *first_at)));
        for shift in 0..4 {
            self.run.add_pending(Candidate { index: shift, stage: Stage::Prefix });
        }
        if let Some((_, chars)) = first {
            self.push(&chars);
            self.add_candidate(at);
        }
    }

    /// The input position of run character `index`.
    fn position(&self, index: u64) -> u64 {
        let seg = self.run.segments.iter().rev().find(|(i, _)| *i <= index);
        seg.map_or(0, |(i, at)| at + (index - i))
    }

    /// The previous line's trailing segment, when the line at `s` continues it.
    fn short_first_line(&self, data: &[u8], s: isize) -> Option<(u64, Vec<u8>)> {
        let mut i = s - 1;
        let lo = s - LOOKBACK as isize;
        let blank = |c: Option<u8>| matches!(c, Some(b' ' | b'\t' | b'\r'));
        while i > lo && blank(self.byte_at(data, i)) {
            i -= 1;
        }
        match self.byte_at(data, i)? {
            b'\n' => i -= 1,
            b'n' if self.escaped(data, i) => i -= 2,
            _ => return None,
        }
        while i > lo {
            match self.byte_at(data, i) {
                Some(b' ' | b'\t' | b'\r') => i -= 1,
                Some(b'r') if self.escaped(data, i) => i -= 2,
                _ => break,
            }
        }
        let end = i;
        let mut chars = Vec::new();
        while i > lo {
            match self.byte_at(data, i) {
                Some(b'/') if self.escaped(data, i) => {
                    chars.push(b'/');
                    i -= 2;
                }
                Some(c) if CLASS[c as usize] == Class::Alpha => {
                    chars.push(normalize(c));
                    i -= 1;
                }
                _ => break,
            }
        }
        if chars.is_empty() || i <= lo || end - i >= BLOCK as isize * 2 {
            return None;
        }
        // An escape letter (`\n`) is not part of the segment.
        if let Some(&last) = chars.last()
            && matches!(last, b'n' | b'r' | b't')
            && self.escaped(data, i + 1)
        {
            chars.pop();
            i += 1;
        }
        if chars.is_empty() {
            return None;
        }
        chars.reverse();
        let first = self.pos as i64 + i as i64 + 1;
        Some((u64::try_from(first).ok()?, chars))
    }

    /// A new line of the run begins at input position `at`: a candidate.
    fn add_candidate(&mut self, at: u64) {
        if self.run.pending.is_empty() {
            self.run.window.clear();
            self.run.base = self.run.len;
            self.run.segments.clear();
        }
        self.run.segments.push_back((self.run.len, at));
        self.run.add_pending(Candidate { index: self.run.len, stage: Stage::Prefix });
    }

    /// Appends the `/` of a JSON `\/` whose slash is at `i`: one character
    /// from two bytes, so the position map gets a new entry on each side.
    fn push_escaped_slash(&mut self, i: usize) {
        let slash = self.pos + i as u64;
        if !self.run.pending.is_empty() {
            if self.run.segments.back().map(|s| s.0) != Some(self.run.len) {
                self.run.segments.push_back((self.run.len, slash - 1));
            }
            self.run.segments.push_back((self.run.len + 1, slash + 1));
        }
        self.push(b"/");
    }

    /// Appends characters to the run and judges the candidates that now have enough.
    fn push(&mut self, chars: &[u8]) {
        if let Some(last) = self.run.pending.back() {
            // No candidate reads past MAX_NEED characters: keep no more.
            let room = (last.index + MAX_NEED).saturating_sub(self.run.len) as usize;
            self.run.window.extend(chars[..room.min(chars.len())].iter().map(|&c| normalize(c)));
        }
        self.run.len += chars.len() as u64;
        self.judge_ready(false);
    }

    fn judge_ready(&mut self, complete: bool) {
        // Most pushes (the words of short lines) leave every candidate short
        // of what it needs: nothing to look at.
        if self.run.len < self.run.next_due {
            if !complete {
                return;
            }
            // The run ends with every candidate still short of its first
            // check: each is harmless (a candidate past its first check may
            // still be judged a payload on what it has).
            if self.run.pending.iter().all(|c| matches!(c.stage, Stage::Prefix)) {
                self.run.pending.clear();
            }
        }
        self.run.next_due = u64::MAX;
        let mut k = 0;
        while k < self.run.pending.len() {
            let c = self.run.pending[k];
            let due = c.due();
            if self.run.len < due && !complete {
                self.run.next_due = self.run.next_due.min(due);
                k += 1;
                continue;
            }
            let start = (c.index - self.run.base) as usize;
            let chars = self.run.window.get(start..).unwrap_or_default();
            match judge(chars, complete, c.stage, &mut self.scratch) {
                Judged::Payload(kind) => {
                    self.found = Some(Payload { kind, offset: self.position(c.index) });
                    return;
                }
                Judged::Harmless => {
                    self.run.pending.remove(k);
                }
                Judged::Need(stage) => {
                    self.run.pending[k].stage = stage;
                    self.run.next_due = self.run.next_due.min(self.run.pending[k].due());
                    k += 1;
                }
            }
        }
        match self.run.pending.front() {
            None => {
                self.run.window.clear();
                self.run.base = self.run.len;
            }
            Some(front) if front.index - self.run.base > 4096 => {
                let drop = (front.index - self.run.base) as usize;
                self.run.window.drain(..drop);
                self.run.base = front.index;
                while self.run.segments.len() > 1 && self.run.segments[1].0 <= front.index {
                    self.run.segments.pop_front();
                }
            }
            Some(_) => {}
        }
    }

    fn end_run(&mut self) {
        self.judge_ready(true);
        self.run.clear();
        self.mode = Mode::Scan;
    }

    fn segment(&mut self, data: &[u8], i: usize) -> usize {
        match CLASS[data[i] as usize] {
            Class::Alpha => {
                let end = alpha_run_end(data, i);
                self.push(&data[i..end]);
                end
            }
            Class::Pad => {
                self.mode = Mode::Pad;
                i + 1
            }
            Class::Lf => {
                self.mode = Mode::Gap { newline: true };
                i + 1
            }
            Class::Cr | Class::Blank => {
                self.mode = Mode::Gap { newline: false };
                i + 1
            }
            Class::Backslash => self.escape(data, i + 1, false, false),
            Class::Other => {
                self.end_run();
                i
            }
        }
    }

    /// After a backslash at `i - 1`.
    fn escape(&mut self, data: &[u8], i: usize, in_gap: bool, newline: bool) -> usize {
        let Some(&next) = data.get(i) else {
            self.mode = Mode::Escape { in_gap, newline };
            return i;
        };
        match next {
            b'n' if newline => {
                self.end_run();
                i + 1
            }
            b'n' => {
                self.mode = Mode::Gap { newline: true };
                i + 1
            }
            b'r' | b't' => {
                self.mode = Mode::Gap { newline };
                i + 1
            }
            b'/' if !in_gap => {
                self.mode = Mode::Segment;
                self.push_escaped_slash(i);
                i + 1
            }
            b'/' if newline => {
                self.add_candidate((self.pos + i as u64) - 1);
                self.mode = Mode::Segment;
                self.push_escaped_slash(i);
                i + 1
            }
            _ => {
                self.end_run();
                i
            }
        }
    }

    fn gap(&mut self, data: &[u8], i: usize, newline: bool) -> usize {
        match CLASS[data[i] as usize] {
            Class::Blank | Class::Cr => i + 1,
            Class::Lf if newline => {
                // A blank line ends the block.
                self.end_run();
                i + 1
            }
            Class::Lf => {
                self.mode = Mode::Gap { newline: true };
                i + 1
            }
            Class::Backslash => self.escape(data, i + 1, true, newline),
            Class::Alpha if newline => {
                self.add_candidate(self.pos + i as u64);
                self.mode = Mode::Segment;
                i
            }
            Class::Alpha => {
                // "word word": not a continuation. Back to the skip loop,
                // which starts a run here only if this word can matter.
                self.end_run();
                i
            }
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
