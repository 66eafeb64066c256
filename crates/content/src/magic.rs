//! Magic-byte signatures, from each format's own specification.
//!
//! Two questions are asked of them:
//!
//! - [`sniff`]: what is this content, judged by its first bytes? Used on the
//!   content itself. A few signatures consist only of text characters (`MZ`,
//!   `BZh`, `GIF89a`, `!<arch>\n`, zip's `PK\x07\x08`, ISO 9660's `CD001`,
//!   ...); text may hold those bytes by chance, so such a match decides only
//!   when the content turns out not to be text — except where the format's
//!   own structure is checked too and holds (tar's header checksum, cpio's
//!   all-digit header, `ar`'s first member header, ISO 9660's descriptor
//!   type, a local header after zip's spanning marker, PDF's `%PDF-`), which
//!   text does not produce by chance. A match whose structure does not hold
//!   still names the format when the content is not text (fail closed): only
//!   valid text escapes it.
//! - [`payload_prefix`]: does a decoded base64 payload (or the bytes glued
//!   after a text) begin an executable or an archive? Only formats that can
//!   hide code count, and only signatures long enough that random bytes match
//!   them less than once in 2^27 tries; two-byte magics (binary cpio, ARJ,
//!   Unix compress) are left out, and `MZ` is confirmed by its PE header
//!   (see `embedded`).

//!
//! Why not the `infer` crate: it answers "which type does this prefix start
//! with" by first match, which is the right question for labelling files but
//! not for refusing them. gatehouse must know whether a match still stands
//! when every byte is valid text (`MZ`, `BZh`), whether a signature is strong
//! enough to trust inside random base64, and must check structure infer does
//! not (tar's header checksum, cpio's digit header, PE behind `MZ`). The table
//! is small and each row follows its format's specification.

use crate::kind::Kind;

/// Bytes of content [`sniff`] looks at: enough for ISO 9660's third
/// volume-descriptor slot (`CD001` at 0x9001).
pub const SNIFF_LEN: usize = 0x9001 + 5;

/// The tar header block size; `ustar` sits at offset 257 inside it.
const TAR_BLOCK: usize = 512;

/// A signature match on the content itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sniffed {
    /// The format.
    pub kind: Kind,
    /// Whether the match decides even when every byte is valid text. False for
    /// signatures made only of text characters that text may start with by chance.
    pub decisive: bool,
}

fn at(b: &[u8], off: usize, sig: &[u8]) -> bool {
    b.get(off..off + sig.len()) == Some(sig)
}

fn u16_be(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_be(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u32_le(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// What a payload's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadPrefix {
    /// An executable or archive signature.
    Kind(Kind),
    /// `MZ`: an executable only if its header is confirmed (see [`mz_new_header_offset`]).
    Mz,
}

/// Executable and archive signatures at the start of `b` (the first bytes of
/// a payload; 12 are enough for every signature here). Strict forms only:
/// each needs at least 4 fixed bytes (or 3 plus reserved bits that must be 0).
pub fn payload_prefix(b: &[u8]) -> Option<PayloadPrefix> {
    use PayloadPrefix::Kind as K;
    let k = |kind| Some(K(kind));
    match b {
        [0x7f, b'E', b'L', b'F', 1 | 2, ..] => k(Kind::Elf),
        [b'M', b'Z', ..] => Some(PayloadPrefix::Mz),
        [0xfe, 0xed, 0xfa, 0xce | 0xcf, ..] | [0xce | 0xcf, 0xfa, 0xed, 0xfe, ..] => k(Kind::MachO),
        [0xca, 0xfe, 0xba, 0xbe | 0xbf, ..] => cafebabe(b),
        [0x00, b'a', b's', b'm', 0x01, 0x00, 0x00, 0x00, ..] => k(Kind::Wasm),
        [b'd', b'e', b'x', b'\n', d1, d2, d3, 0x00, ..]
            if d1.is_ascii_digit() && d2.is_ascii_digit() && d3.is_ascii_digit() =>
        {
            k(Kind::Dex)
        }
        [b'P', b'K', 3, 4, ..] | [b'P', b'K', 5, 6, ..] | [b'P', b'K', 7, 8, ..] => k(Kind::Zip),
        [0x1f, 0x8b, 0x08, flags, ..] if flags & 0xe0 == 0 => k(Kind::Gzip),
        [b'B', b'Z', b'h', b'1'..=b'9', rest @ ..]
            if rest.starts_with(b"1AY&SY") || rest.starts_with(&[0x17, 0x72, 0x45, 0x38, 0x50, 0x90]) =>
        {
            k(Kind::Bzip2)
        }
        [0xfd, b'7', b'z', b'X', b'Z', 0x00, ..] => k(Kind::Xz),
        [0x28, 0xb5, 0x2f, 0xfd, ..] | [0x50..=0x5f, 0x2a, 0x4d, 0x18, ..] => k(Kind::Zstd),
        [0x04, 0x22, 0x4d, 0x18, ..] | [0x02, 0x21, 0x4c, 0x18, ..] => k(Kind::Lz4),
        [b'7', b'z', 0xbc, 0xaf, 0x27, 0x1c, ..] => k(Kind::SevenZip),
        [b'R', b'a', b'r', b'!', 0x1a, 0x07, 0x00, ..]
        | [b'R', b'a', b'r', b'!', 0x1a, 0x07, 0x01, 0x00, ..] => k(Kind::Rar),
        [b'M', b'S', b'C', b'F', 0, 0, 0, 0, ..] | [b'I', b'S', b'c', b'(', ..] => k(Kind::Cab),
        [b'!', b'<', b'a', b'r', b'c', b'h', b'>', b'\n', ..] => k(Kind::Ar),
        [0xed, 0xab, 0xee, 0xdb, ..] => k(Kind::Rpm),
        [b'0', b'7', b'0', b'7', b'0', b'7' | b'1' | b'2', ..] if cpio_ascii_header(b, 12) => k(Kind::Cpio),
        [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1, ..] => k(Kind::Cfb),
        [b'L', b'Z', b'I', b'P', 0 | 1, ..] => k(Kind::Lzip),
        [b'x', b'a', b'r', b'!', 0x00, 0x1c, ..] => k(Kind::Xar),
        [b'h', b's', b'q', b's', ..] | [b's', b'q', b's', b'h', ..] => k(Kind::Squashfs),
        [b'M', b'S', b'W', b'I', b'M', 0, 0, 0, ..] => k(Kind::Wim),
        _ => None,
    }
}

/// Whether a signature of [`payload_prefix`] can begin with these two
/// bytes: the first two bytes of each of its arms, and nothing more. The
/// payload finder looks at this (through the first two base64 characters,
/// which spell the first byte and the high half of the second) before it
/// decodes anything, so most places in text cost one table lookup. An arm
/// added to `payload_prefix` must be added here too (the tests check every
/// signature).
pub const fn payload_lead(b0: u8, b1: u8) -> bool {
    matches!(
        (b0, b1),
        (0x7f, b'E')
            | (b'M', b'Z' | b'S')
            | (0xfe, 0xed)
            | (0xce | 0xcf, 0xfa)
            | (0xca, 0xfe)
            | (0x00, b'a')
            | (b'd', b'e')
            | (b'P', b'K')
            | (0x1f, 0x8b)
            | (b'B', b'Z')
            | (0xfd, b'7')
            | (0x28, 0xb5)
            | (0x50..=0x5f, 0x2a)
            | (0x04, 0x22)
            | (0x02, 0x21)
            | (b'7', b'z')
            | (b'R', b'a')
            | (b'I', b'S')
            | (b'!', b'<')
            | (0xed, 0xab)
            | (b'0', b'7')
            | (0xd0, 0xcf)
            | (b'L', b'Z')
            | (b'x', b'a')
            | (b'h', b's')
            | (b's', b'q')
    )
}

/// `CA FE BA BE` is both the Mach-O universal header (followed by a small
/// architecture count) and the Java class header (followed by minor and
/// major versions, major 45 and up).
fn cafebabe(b: &[u8]) -> Option<PayloadPrefix> {
    let word = u32_be(b, 4)?;
    if b[3] == 0xbf || (1..=44).contains(&word) {
        return (1..=64).contains(&word).then_some(PayloadPrefix::Kind(Kind::MachOFat));
    }
    let major = u16_be(b, 6)?;
    (45..=100).contains(&major).then_some(PayloadPrefix::Kind(Kind::JavaClass))
}

/// cpio's portable headers are all digits: odc is 76 octal digits, newc and
/// crc are `07070x` plus 104 hex digits. Checks the first `want` bytes (or
/// all of the header, whichever is shorter) that are present.
fn cpio_ascii_header(b: &[u8], want: usize) -> bool {
    let (len, digit): (usize, fn(&u8) -> bool) = if b.get(5) == Some(&b'7') {
        (76, |c: &u8| (b'0'..=b'7').contains(c))
    } else {
        (110, u8::is_ascii_hexdigit)
    };
    let n = len.min(want);
    n >= 12 && b.len() >= n && b[6..n].iter().all(digit)
}

/// What an `MZ` header says, given its first 64 bytes or more: the offset of
/// the new-executable header, when it is plausible. Real PE files put it
/// within the first KiB; random bytes beginning `MZ` almost never put it
/// below 64 KiB, so a payload is judged an executable only then.
pub fn mz_new_header_offset(b: &[u8]) -> Option<usize> {
    let e = u32_le(b, 0x3c)? as usize;
    (0x40..0x1_0000).contains(&e).then_some(e)
}

/// Whether `sig` (the 4 bytes at `e_lfanew`) names a new-executable header:
/// PE, or the older NE, LE and LX formats.
pub fn is_new_exe_signature(sig: &[u8]) -> bool {
    sig == b"PE\0\0" || matches!(sig, [b'N', b'E', ..] | [b'L', b'E', ..] | [b'L', b'X', ..])
}

/// `MZ` content: PE when the header it points to is present and says so.
fn mz_kind(b: &[u8]) -> Kind {
    match mz_new_header_offset(b) {
        Some(e) if b.get(e..e + 4) == Some(b"PE\0\0") => Kind::Pe,
        _ => Kind::MsDos,
    }
}

/// Whether `b` holds a POSIX or GNU tar header: `ustar` at 257 and a header
/// checksum that adds up (tar itself rejects a header whose checksum fails).
pub fn is_tar_header(b: &[u8]) -> bool {
    if !(at(b, 257, b"ustar\0") || at(b, 257, b"ustar ")) || b.len() < TAR_BLOCK {
        return false;
    }
    let field = &b[148..156];
    let digits = field.iter().skip_while(|c| **c == b' ').take_while(|c| (b'0'..=b'7').contains(*c));
    let mut stored: u32 = 0;
    let mut count = 0;
    for d in digits {
        stored = stored.saturating_mul(8).saturating_add(u32::from(d - b'0'));
        count += 1;
    }
    if count == 0 {
        return false;
    }
    let unsigned: u32 = b[..TAR_BLOCK]
        .iter()
        .enumerate()
        .map(|(i, &c)| if (148..156).contains(&i) { u32::from(b' ') } else { u32::from(c) })
        .sum();
    // Some old tars summed signed chars; accept either, as GNU tar does.
    let signed: i64 = b[..TAR_BLOCK]
        .iter()
        .enumerate()
        .map(|(i, &c)| if (148..156).contains(&i) { i64::from(b' ') } else { i64::from(c as i8) })
        .sum();
    i64::from(stored) == signed || stored == unsigned
}

/// Where ISO 9660's volume descriptors sit: the set starts at logical
/// sector 16, right after the 32 KiB system area (ECMA-119 6.2.1, 8.1), and
/// the first three sectors of it are looked at.
const ISO9660_DESCRIPTORS: [usize; 3] = [0x8000, 0x8800, 0x9000];

/// ISO 9660 (ECMA-119 8): each volume descriptor opens with its type (0 boot
/// record, 1 primary, 2 supplementary or enhanced, 3 partition, 255 set
/// terminator), the identifier `CD001` and a version.
///
/// Decisive when a slot holds `CD001` behind one of those type bytes. UTF-8
/// text never holds one (0x00–0x03 are forbidden controls, 0xFF is never
/// UTF-8), so that byte alone tells text that happens to carry `CD001` at
/// 0x8001 from an image. The rest of the descriptor is deliberately not
/// required (the version, the primary's zero byte at +7 and file-structure
/// version at +881, both-endian fields such as the volume space size at +80
/// and the block size at +128 agreeing, the block size being 2048): readers
/// such as Linux's isofs check the type and the identifier, read only the
/// little-endian halves and skip the unused bytes, so an image that gets the
/// rest wrong still mounts — a descriptor that is only partly right is
/// refused as ISO 9660 (fail closed).
///
/// `CD001` behind any other byte is weak: ISO 9660 when the content is not
/// text, nothing when it is.
fn iso9660(b: &[u8]) -> Option<Sniffed> {
    let mut identifier = false;
    for slot in ISO9660_DESCRIPTORS {
        if !at(b, slot + 1, b"CD001") {
            continue;
        }
        if matches!(b[slot], 0..=3 | 0xff) {
            return Some(Sniffed { kind: Kind::Iso9660, decisive: true });
        }
        identifier = true;
    }
    identifier.then_some(Sniffed { kind: Kind::Iso9660, decisive: false })
}

/// `ar`: the global header `!<arch>\n`, then each member behind a 60-byte
/// header (name, date, uid, gid, mode, size, all text) that ends in
/// `` `\n `` (binutils and libarchive refuse a member header that does not).
/// Decisive when the first member header ends so, or when the content is the
/// global header alone (an empty archive). Anything else after the global
/// header (text that starts with it by chance, or an archive cut off inside
/// its first member header, which no reader opens) leaves the match weak.
fn ar_structure(b: &[u8]) -> bool {
    const GLOBAL: usize = 8;
    const MEMBER: usize = 60;
    b.len() == GLOBAL || at(b, GLOBAL + MEMBER - 2, b"`\n")
}

/// Zip: `PK\x07\x08`, the marker a spanned (split) archive starts with, is
/// spelled in text characters (BEL, BS); decisive only when the first local
/// header (`PK\x03\x04`) follows it. Every zip holds bytes that are not text
/// (its header signatures), so a weak match still refuses a real one.
fn zip_structure(b: &[u8]) -> bool {
    !b.starts_with(b"PK\x07\x08") || at(b, 4, b"PK\x03\x04")
}

/// What the content is, judged by its first bytes.
///
/// `b` is the content's first [`SNIFF_LEN`] bytes, or all of it when it is
/// shorter: a shorter `b` is taken to be the whole content (an empty `ar`
/// archive is its global header alone), so call it once the prefix is
/// complete or the content has ended, not on a prefix still growing.
///
/// A decisive match wins over a weak one wherever each sits, so a weak
/// coincidence at the start cannot hide a checked structure further in.
pub fn sniff(b: &[u8]) -> Option<Sniffed> {
    let first = at_start(b);
    if first.is_some_and(|s| s.decisive) {
        return first;
    }
    if is_tar_header(b) {
        return Some(Sniffed { kind: Kind::Tar, decisive: true });
    }
    let iso = iso9660(b);
    if iso.is_some_and(|s| s.decisive) {
        return iso;
    }
    first.or(iso)
}

/// The signatures at offset 0.
fn at_start(b: &[u8]) -> Option<Sniffed> {
    let decisive = |kind| Some(Sniffed { kind, decisive: true });
    let weak = |kind| Some(Sniffed { kind, decisive: false });
    let checked = |kind, holds| Some(Sniffed { kind, decisive: holds });
    match payload_prefix(b) {
        Some(PayloadPrefix::Mz) => return weak(mz_kind(b)),
        // Signatures spelled only in text characters: decisive only where the
        // structure is checked too and holds.
        Some(PayloadPrefix::Kind(Kind::Ar)) => return checked(Kind::Ar, ar_structure(b)),
        Some(PayloadPrefix::Kind(Kind::Cpio)) => {
            return checked(Kind::Cpio, cpio_ascii_header(b, usize::MAX));
        }
        Some(PayloadPrefix::Kind(Kind::Zip)) => return checked(Kind::Zip, zip_structure(b)),
        Some(PayloadPrefix::Kind(kind @ (Kind::Bzip2 | Kind::Cab | Kind::Squashfs))) => return weak(kind),
        Some(PayloadPrefix::Kind(kind)) => return decisive(kind),
        None => {}
    }
    match b {
        [b'%', b'P', b'D', b'F', b'-', ..] => decisive(Kind::Pdf),
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', ..] => decisive(Kind::Png),
        [0xff, 0xd8, 0xff, ..] => decisive(Kind::Jpeg),
        [b'S', b'Q', b'L', b'i', b't', b'e', b' ', b'f', b'o', b'r', b'm', b'a', b't', b' ', b'3', 0, ..] => {
            decisive(Kind::Sqlite)
        }
        [0x1a, 0x45, 0xdf, 0xa3, ..] => decisive(Kind::Matroska),
        [b'I', b'I', b'*', 0, ..] | [b'M', b'M', 0, b'*', ..] => decisive(Kind::Tiff),
        [0, 0, 1 | 2, 0, ..] => weak(Kind::Ico),
        [0, 1, 0, 0, ..] => weak(Kind::TrueType),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => weak(Kind::Gif),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => weak(Kind::Webp),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'A', b'V', b'E', ..] => weak(Kind::Wav),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'A', b'V', b'I', b' ', ..] => weak(Kind::Avi),
        [_, _, _, _, b'f', b't', b'y', b'p', ..] => weak(Kind::Mp4),
        [b'B', b'M', ..] => weak(Kind::Bmp),
        [b'f', b'L', b'a', b'C', ..] => weak(Kind::Flac),
        [b'O', b'g', b'g', b'S', ..] => weak(Kind::Ogg),
        [b'I', b'D', b'3', ..] | [0xff, 0xfb | 0xf3 | 0xf2, ..] => weak(Kind::Mp3),
        [b'M', b'T', b'h', b'd', ..] => weak(Kind::Midi),
        [b'w', b'O', b'F', b'F', ..] => weak(Kind::Woff),
        [b'w', b'O', b'F', b'2', ..] => weak(Kind::Woff2),
        [b'O', b'T', b'T', b'O', ..] => weak(Kind::OpenType),
        [0xc7, 0x71, ..] | [0x71, 0xc7, ..] => weak(Kind::Cpio),
        [0x60, 0xea, ..] => weak(Kind::Arj),
        [0x1f, 0x8b, ..] => decisive(Kind::Gzip),
        // Unix compress: two magic bytes and a flags byte, too weak to look
        // for inside random base64, decisive as content (0x1F is not text).
        [0x1f, 0x9d, ..] => decisive(Kind::Compress),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_header(magic: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..9].copy_from_slice(b"hello.txt");
        h[100..108].copy_from_slice(b"0000644\0");
        h[124..136].copy_from_slice(b"00000000005\0");
        h[156] = b'0';
        h[257..257 + magic.len()].copy_from_slice(magic);
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&c| u32::from(c)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    #[test]
    fn tar_needs_magic_and_checksum() {
        let posix = tar_header(b"ustar\x0000");
        assert!(is_tar_header(&posix));
        assert!(is_tar_header(&tar_header(b"ustar  \0")));
        let mut bad = posix.clone();
        bad[0] = b'j';
        assert!(!is_tar_header(&bad), "checksum no longer adds up");
        let mut text = vec![b'a'; 600];
        text[257..263].copy_from_slice(b"ustar ");
        assert!(!is_tar_header(&text), "text with 'ustar' at 257 is not tar");
    }

    #[test]
    fn text_lookalikes_are_not_decisive() {
        for t in [&b"MZ is a monogram"[..], b"BZh91AY&SY is not bzip2 here", b"GIF89a, said the log", b"BM"] {
            let s = sniff(t).unwrap();
            assert!(!s.decisive, "{s:?}");
        }
        assert_eq!(sniff(b"PK is text"), None);
        assert!(!sniff(b"!<arch>\nfile.txt/").unwrap().decisive, "cut off inside the member header");
        assert!(!sniff(b"PK\x07\x08 rings and backs up").unwrap().decisive);
        assert!(sniff(b"%PDF-1.7\n").unwrap().decisive);
    }

    #[test]
    fn ar_is_decisive_with_its_member_header() {
        let member = format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", "a.txt/", 0, 0, 0, 644, 1);
        assert_eq!(
            sniff(format!("!<arch>\n{member}x\n").as_bytes()),
            Some(Sniffed { kind: Kind::Ar, decisive: true })
        );
        assert!(sniff(b"!<arch>\n").unwrap().decisive, "an empty archive");
        let prose = format!("!<arch>\n{}", "is how it starts, said the manual page. ".repeat(3));
        assert_eq!(sniff(prose.as_bytes()), Some(Sniffed { kind: Kind::Ar, decisive: false }));
    }

    #[test]
    fn iso9660_is_decisive_with_a_descriptor_type() {
        let mut b = vec![b'x'; SNIFF_LEN];
        b[0x8001..0x8006].copy_from_slice(b"CD001");
        assert_eq!(sniff(&b), Some(Sniffed { kind: Kind::Iso9660, decisive: false }));
        for ty in [0, 1, 2, 3, 0xff] {
            for slot in ISO9660_DESCRIPTORS {
                let mut image = b.clone();
                image[slot..slot + 6].copy_from_slice(&[ty, b'C', b'D', b'0', b'0', b'1']);
                assert_eq!(
                    sniff(&image),
                    Some(Sniffed { kind: Kind::Iso9660, decisive: true }),
                    "{ty} at {slot:#x}"
                );
            }
        }
        b[0x8000] = 4;
        assert!(!sniff(&b).unwrap().decisive, "type 4 is not a volume descriptor");
        // A weak match at the start does not hide a descriptor further in.
        let mut mz = b.clone();
        mz[..2].copy_from_slice(b"MZ");
        mz[0x8000] = 1;
        assert_eq!(sniff(&mz), Some(Sniffed { kind: Kind::Iso9660, decisive: true }));
    }

    #[test]
    fn cafebabe_is_split_by_the_word_after_it() {
        assert_eq!(sniff(&[0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2]).unwrap().kind, Kind::MachOFat);
        assert_eq!(sniff(&[0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 61]).unwrap().kind, Kind::JavaClass);
        assert_eq!(payload_prefix(&[0xca, 0xfe, 0xba, 0xbe, 0x12, 0x34, 0x56, 0x78]), None);
    }

    #[test]
    fn payload_signatures_need_their_strict_form() {
        assert_eq!(payload_prefix(&[0x1f, 0x8b, 0x08, 0x00]), Some(PayloadPrefix::Kind(Kind::Gzip)));
        assert_eq!(payload_prefix(&[0x1f, 0x8b, 0x07, 0x00]), None, "method 7 does not exist");
        assert_eq!(payload_prefix(&[0x1f, 0x8b, 0x08, 0xff]), None, "reserved flag bits set");
        assert_eq!(payload_prefix(b"BZh9"), None, "too short to be sure");
        assert_eq!(payload_prefix(b"BZh91AY&SY"), Some(PayloadPrefix::Kind(Kind::Bzip2)));
        assert_eq!(payload_prefix(b"070707012345"), Some(PayloadPrefix::Kind(Kind::Cpio)));
        assert_eq!(payload_prefix(b"070707 is a date"), None);
    }

    /// One example of every arm of `payload_prefix` (each alternative of an
    /// arm that has several).
    const SIGNATURES: &[&[u8]] = &[
        b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00",
        b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00",
        b"\xfe\xed\xfa\xcf\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\xcf\xfa\xed\xfe\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\xce\xfa\xed\xfe\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\xca\xfe\xba\xbe\x00\x00\x00\x02\x00\x00\x00\x00",
        b"\xca\xfe\xba\xbe\x00\x00\x00\x3d\x00\x00\x00\x00",
        b"\x00asm\x01\x00\x00\x00\x00\x00\x00\x00",
        b"dex\n035\x00\x00\x00\x00\x00",
        b"PK\x03\x04\x00\x00\x00\x00\x00\x00\x00\x00",
        b"PK\x05\x06\x00\x00\x00\x00\x00\x00\x00\x00",
        b"PK\x07\x08\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        b"BZh91AY&SY\x00\x00",
        b"BZh9\x17\x72\x45\x38\x50\x90\x00\x00",
        b"\xfd7zXZ\x00\x00\x00\x00\x00\x00\x00",
        b"\x28\xb5\x2f\xfd\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x5a\x2a\x4d\x18\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x04\x22\x4d\x18\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x02\x21\x4c\x18\x00\x00\x00\x00\x00\x00\x00\x00",
        b"7z\xbc\xaf\x27\x1c\x00\x00\x00\x00\x00\x00",
        b"Rar!\x1a\x07\x00\x00\x00\x00\x00\x00",
        b"Rar!\x1a\x07\x01\x00\x00\x00\x00\x00",
        b"MSCF\x00\x00\x00\x00\x00\x00\x00\x00",
        b"ISc(\x00\x00\x00\x00\x00\x00\x00\x00",
        b"!<arch>\n\x00\x00\x00\x00",
        b"\xed\xab\xee\xdb\x00\x00\x00\x00\x00\x00\x00\x00",
        b"070701000000",
        b"070707000000",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00\x00\x00\x00",
        b"LZIP\x01\x00\x00\x00\x00\x00\x00\x00",
        b"xar!\x00\x1c\x00\x00\x00\x00\x00\x00",
        b"hsqs\x00\x00\x00\x00\x00\x00\x00\x00",
        b"sqsh\x00\x00\x00\x00\x00\x00\x00\x00",
        b"MSWIM\x00\x00\x00\x00\x00\x00\x00",
    ];

    #[test]
    fn every_signature_begins_with_a_payload_lead() {
        for sig in SIGNATURES {
            assert!(payload_prefix(sig).is_some(), "not a signature: {sig:02x?}");
            assert!(payload_lead(sig[0], sig[1]), "{sig:02x?}");
        }
        // No other first two bytes begin a signature: every pair that is not
        // a lead, followed by the rest of every signature above.
        for b0 in 0..=255u8 {
            for b1 in 0..=255u8 {
                if payload_lead(b0, b1) {
                    continue;
                }
                for sig in SIGNATURES {
                    let mut b = sig.to_vec();
                    b[0] = b0;
                    b[1] = b1;
                    assert_eq!(payload_prefix(&b), None, "{b:02x?} is a signature, {b0:#x} {b1:#x} no lead");
                }
            }
        }
    }

    #[test]
    fn mz_is_pe_only_with_its_header() {
        let mut pe = vec![0u8; 0x100];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c] = 0x80;
        pe[0x80..0x84].copy_from_slice(b"PE\0\0");
        assert_eq!(sniff(&pe).unwrap().kind, Kind::Pe);
        pe[0x80] = b'X';
        assert_eq!(sniff(&pe).unwrap().kind, Kind::MsDos);
    }
}
