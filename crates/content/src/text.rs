//! Is it text? Streaming validation over the whole content, not a prefix.
//!
//! Text is UTF-8 (with or without a byte-order mark) or UTF-16 with a
//! byte-order mark, valid from the first byte to the last. Legacy 8-bit
//! encodings (Latin-1, cp1252) are not text: their bytes cannot be told
//! from binary without guessing, and gatehouse does not guess.
//!
//! Control characters. Real text carries a few of them: tab, line feed,
//! vertical tab, form feed and carriage return; backspace (overstrike in
//! man pages, progress bars), bell and escape (terminal colour and title
//! sequences in captured logs). Those eight — exactly the set libmagic calls
//! text — are allowed. Every other C0 control, NUL and DEL make content not
//! text: they are how binary shows itself. C1 controls (U+0080–U+009F) are
//! valid Unicode scalars and allowed; in UTF-8 they cannot smuggle bytes.

/// Whether a character below U+0080 disqualifies text.
#[inline(always)]
pub const fn forbidden_ascii(b: u8) -> bool {
    // 0x00-0x06, 0x0E-0x1A, 0x1C-0x1F, 0x7F; written as range checks so the
    // block scan below compiles to vector compares.
    (b < 0x07) | (b.wrapping_sub(0x0e) < 13) | (b.wrapping_sub(0x1c) < 4) | (b == 0x7f)
}

/// The index of the first forbidden control byte in `b`.
fn first_forbidden(b: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let mut chunks = b.chunks_exact(BLOCK);
    let mut base = 0;
    for block in &mut chunks {
        // OR of 0/1 bytes over a fixed-size block: compiles to vector compares.
        let any = block.iter().fold(0u8, |acc, &c| acc | u8::from(forbidden_ascii(c)));
        if any != 0 {
            return block.iter().position(|&c| forbidden_ascii(c)).map(|i| base + i);
        }
        base += BLOCK;
    }
    chunks.remainder().iter().position(|&c| forbidden_ascii(c)).map(|i| base + i)
}

/// The text encoding, decided by the byte-order mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8; `bom` when it starts with EF BB BF.
    Utf8 {
        /// Whether a byte-order mark leads.
        bom: bool,
    },
    /// UTF-16 little-endian (FF FE).
    Utf16Le,
    /// UTF-16 big-endian (FE FF).
    Utf16Be,
}

/// Streaming text validation. Feed every byte through [`update`](Self::update);
/// [`finish`](Self::finish) says where text first broke, if it did.
#[derive(Debug)]
pub struct TextValidator {
    head: Vec<u8>,
    encoding: Option<Encoding>,
    /// Bytes validated so far (the offset of the next byte).
    offset: u64,
    /// An incomplete UTF-8 sequence, or an odd UTF-16 byte, and its offset.
    carry: Vec<u8>,
    carry_at: u64,
    high_surrogate: Option<u64>,
    first_bad: Option<u64>,
    out: Vec<u8>,
}

impl Default for TextValidator {
    fn default() -> Self {
        Self::new()
    }
}

/// The length of the UTF-8 sequence a lead byte starts (1 for invalid leads,
/// which `from_utf8` then reports).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

impl TextValidator {
    /// A validator at the start of content.
    pub fn new() -> Self {
        Self {
            head: Vec::with_capacity(3),
            encoding: None,
            offset: 0,
            carry: Vec::with_capacity(4),
            carry_at: 0,
            high_surrogate: None,
            first_bad: None,
            out: Vec::new(),
        }
    }

    /// The encoding, once the first three bytes (or the end) have been seen.
    pub fn encoding(&self) -> Option<Encoding> {
        self.encoding
    }

    /// The offset of the first byte that is not text, when one has been seen.
    pub fn first_bad(&self) -> Option<u64> {
        self.first_bad
    }

    /// Validates `chunk` and hands `feed` the characters the embedded-payload
    /// finder should see, in order: the bytes themselves for UTF-8; for
    /// UTF-16 one byte per code unit (the unit when below 0x80, else 0x80,
    /// which the finder treats as a separator). Only text is fed: it stops
    /// at the first byte that is not.
    pub fn update(&mut self, chunk: &[u8], feed: &mut dyn FnMut(&[u8])) {
        let mut chunk = chunk;
        if self.encoding.is_none() {
            let take = (3 - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.head.len() < 3 {
                return;
            }
            self.decide();
            let head = std::mem::take(&mut self.head);
            self.validate_and_feed(&head, feed);
        }
        self.validate_and_feed(chunk, feed);
    }

    fn validate_and_feed(&mut self, data: &[u8], feed: &mut dyn FnMut(&[u8])) {
        let base = self.offset;
        let was_text = self.first_bad.is_none();
        self.validate(data);
        if !was_text {
            return;
        }
        match self.encoding {
            Some(Encoding::Utf8 { .. }) => {
                let keep = self.first_bad.map_or(data.len() as u64, |bad| bad.saturating_sub(base));
                feed(&data[..(keep as usize).min(data.len())]);
            }
            _ => feed(&self.out),
        }
    }

    /// Ends the content, feeding whatever was held back; afterwards
    /// [`first_bad`](Self::first_bad) is the verdict.
    pub fn finish(&mut self, feed: &mut dyn FnMut(&[u8])) {
        if self.encoding.is_none() {
            self.decide();
            let head = std::mem::take(&mut self.head);
            self.validate_and_feed(&head, feed);
        }
        // A truncated sequence, an odd byte or an unpaired high surrogate at the end.
        if !self.carry.is_empty() {
            self.bad(self.carry_at);
        }
        if let Some(high) = self.high_surrogate {
            self.bad(high);
        }
    }

    fn decide(&mut self) {
        self.encoding = Some(match self.head.as_slice() {
            [0xef, 0xbb, 0xbf, ..] => Encoding::Utf8 { bom: true },
            [0xff, 0xfe, ..] => Encoding::Utf16Le,
            [0xfe, 0xff, ..] => Encoding::Utf16Be,
            _ => Encoding::Utf8 { bom: false },
        });
        if matches!(self.encoding, Some(Encoding::Utf16Le | Encoding::Utf16Be)) {
            // The byte-order mark itself: skip it.
            self.offset = 2;
            self.head.drain(..2);
        }
    }

    fn bad(&mut self, at: u64) {
        self.first_bad = Some(self.first_bad.map_or(at, |b| b.min(at)));
    }

    fn validate(&mut self, data: &[u8]) {
        self.out.clear();
        if self.first_bad.is_some() {
            self.offset += data.len() as u64;
            return;
        }
        match self.encoding {
            Some(Encoding::Utf8 { .. }) => self.validate_utf8(data),
            Some(Encoding::Utf16Le) => self.validate_utf16(data, u16::from_le_bytes),
            Some(Encoding::Utf16Be) => self.validate_utf16(data, u16::from_be_bytes),
            None => {}
        }
    }

    fn validate_utf8(&mut self, mut data: &[u8]) {
        let base = self.offset;
        self.offset += data.len() as u64;
        let mut at = base;
        if !self.carry.is_empty() {
            let need = utf8_len(self.carry[0]) - self.carry.len();
            let take = need.min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            at += take as u64;
            match simdutf8::compat::from_utf8(&self.carry) {
                Ok(_) => self.carry.clear(),
                // A valid beginning: wait for the rest.
                Err(e) if e.error_len().is_none() => return,
                // Broken already (say, a lead byte then ASCII): bad now, not
                // at the end, so the verdict does not depend on chunking.
                Err(_) => {
                    let carry_at = self.carry_at;
                    self.bad(carry_at);
                    return;
                }
            }
        }
        let valid = match simdutf8::compat::from_utf8(data) {
            Ok(_) => data.len(),
            Err(e) => {
                let valid = e.valid_up_to();
                if e.error_len().is_none() {
                    self.carry.extend_from_slice(&data[valid..]);
                    self.carry_at = at + valid as u64;
                } else {
                    self.bad(at + valid as u64);
                }
                valid
            }
        };
        if let Some(i) = first_forbidden(&data[..valid]) {
            self.bad(at + i as u64);
        }
    }

    fn validate_utf16(&mut self, data: &[u8], unit: fn([u8; 2]) -> u16) {
        let mut i = 0;
        let mut pos = self.offset;
        self.offset += data.len() as u64;
        if !self.carry.is_empty() {
            let Some(&second) = data.first() else { return };
            let u = unit([self.carry[0], second]);
            self.carry.clear();
            self.unit16(u, self.carry_at);
            i = 1;
            pos += 1;
        }
        while i + 1 < data.len() {
            let u = unit([data[i], data[i + 1]]);
            self.unit16(u, pos);
            if self.first_bad.is_some() {
                return;
            }
            i += 2;
            pos += 2;
        }
        if i < data.len() {
            self.carry.push(data[i]);
            self.carry_at = pos;
        }
    }

    fn unit16(&mut self, u: u16, at: u64) {
        match (self.high_surrogate.take(), u) {
            (Some(_), 0xdc00..=0xdfff) => {
                self.out.push(0x80);
                return;
            }
            (Some(high), _) => return self.bad(high),
            (None, 0xdc00..=0xdfff) => return self.bad(at),
            (None, 0xd800..=0xdbff) => {
                self.high_surrogate = Some(at);
                return;
            }
            (None, _) => {}
        }
        if u < 0x80 {
            let b = u as u8;
            if forbidden_ascii(b) {
                return self.bad(at);
            }
            self.out.push(b);
        } else {
            self.out.push(0x80);
        }
    }
}

/// Validates complete content in one call: the encoding and the offset of
/// the first byte that is not text.
pub fn validate(content: &[u8]) -> (Encoding, Option<u64>) {
    let mut v = TextValidator::new();
    v.update(content, &mut |_| {});
    v.finish(&mut |_| {});
    (v.encoding.unwrap_or(Encoding::Utf8 { bom: false }), v.first_bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(s: &str, le: bool) -> Vec<u8> {
        let mut out = if le { vec![0xff, 0xfe] } else { vec![0xfe, 0xff] };
        for u in s.encode_utf16() {
            out.extend_from_slice(&if le { u.to_le_bytes() } else { u.to_be_bytes() });
        }
        out
    }

    #[test]
    fn the_control_rule() {
        for ok in [b'\t', b'\n', 0x0b, 0x0c, b'\r', 0x1b, 0x07, 0x08] {
            assert_eq!(validate(&[b'a', ok, b'b']).1, None, "{ok:#x} is allowed");
        }
        for bad in (0u8..0x07).chain(0x0e..0x1b).chain(0x1c..0x20).chain([0x7f]) {
            assert_eq!(validate(&[b'a', b'b', bad, b'c']).1, Some(2), "{bad:#x} is not text");
        }
    }

    #[test]
    fn utf8_is_checked_to_the_last_byte() {
        assert_eq!(validate("héllo wörld ✓ 𝄞".as_bytes()), (Encoding::Utf8 { bom: false }, None));
        assert_eq!(validate(b"\xef\xbb\xbfbom").0, Encoding::Utf8 { bom: true });
        let mut latin1 = b"caf".to_vec();
        latin1.push(0xe9);
        latin1.extend_from_slice(b" au lait");
        assert_eq!(validate(&latin1).1, Some(3));
        assert_eq!(validate("ok ✓".as_bytes().split_last().unwrap().1).1, Some(3), "truncated at the end");
        assert_eq!(validate(b"\xed\xa0\x80").1, Some(0), "an encoded surrogate is not UTF-8");
    }

    #[test]
    fn utf16_needs_its_bom_and_pairs() {
        assert_eq!(validate(&utf16("hi ✓ 𝄞\r\n", true)), (Encoding::Utf16Le, None));
        assert_eq!(validate(&utf16("hi ✓ 𝄞\r\n", false)), (Encoding::Utf16Be, None));
        let mut lone = utf16("ab", true);
        lone.extend_from_slice(&0xd800u16.to_le_bytes());
        lone.extend_from_slice(b"c\0");
        assert_eq!(validate(&lone).1, Some(6));
        let mut odd = utf16("ab", true);
        odd.push(b'c');
        assert_eq!(validate(&odd).1, Some(6));
        assert_eq!(validate(&utf16("a\0b", true)).1, Some(4), "U+0000 is not text");
        // UTF-16 without a BOM is just bytes with NULs.
        assert_eq!(validate(b"a\0b\0").1, Some(1));
    }

    #[test]
    fn chunking_does_not_change_the_answer() {
        let samples: Vec<Vec<u8>> = vec![
            "naïve café ✓ 𝄞 text\n".repeat(5).into_bytes(),
            utf16("naïve café ✓ 𝄞 text\n", true),
            utf16("x𝄞y", false),
            b"abc\xf0\x9f\x98".to_vec(),
            b"abc\x00def".to_vec(),
        ];
        for s in samples {
            let whole = validate(&s);
            for size in 1..8 {
                let mut v = TextValidator::new();
                for c in s.chunks(size) {
                    v.update(c, &mut |_| {});
                }
                v.finish(&mut |_| {});
                assert_eq!((v.encoding.unwrap(), v.first_bad), whole, "chunk size {size}");
            }
        }
    }
}
