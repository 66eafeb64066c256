//! Properties of sniffing over generated input:
//! (a) streaming in arbitrary chunks gives the verdict of the whole;
//! (b) every input, arbitrary or built from signatures, text and binary
//!     parts, gets a verdict that holds together (see [`check_verdict`]): a
//!     reason from the closed list that agrees with the kind and the offset,
//!     the cap applied as documented, a decisive signature winning, a
//!     decision once taken never changing;
//! (c) text without a base64 run of 24 characters is accepted;
//! (d) a base64 ELF inserted anywhere in prose, on a word boundary, is found
//!     where its base64 begins;
//! (e) base64 of an executable or archive with whitespace of any kind and
//!     length between arbitrary characters is found;
//! (f) ordinary prose and code, whatever whitespace joins its words, is not
//!     a payload;
//! (g) the payload finder's skim changes no answer: the finder gives what
//!     its reference (run mode everywhere) gives, around a piece boundary too.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::PathBuf;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use gatehouse_content::embedded::{self, PayloadFinder};
use gatehouse_content::magic::{self, SNIFF_LEN};
use gatehouse_content::{Class, Finding, Kind, Sniffer, sniff_bytes};
use gatehouse_core::Reason;
use proptest::prelude::*;
use proptest::sample::Index;

const CAP: u64 = 1 << 30;

fn sample(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Samples whose prefixes go into generated texts: executables and archives
/// (payloads) and media (harmless), at most their first 1,500 bytes.
static SAMPLES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    [
        "elf-x86_64",
        "pe-w32.exe",
        "macho-arm64.so",
        "macho-fat-universal2.so",
        "java-Hello.class",
        "dex-classes.dex",
        "wasm-module.wasm",
        "zip-text.zip",
        "gzip-text.gz",
        "xz-text.xz",
        "zstd-text.zst",
        "lz4-frame-text.lz4",
        "7z-text.7z",
        "rar5-rarfile-rar5-subdirs.rar",
        "tar-ustar.tar",
        "cab-gcab.cab",
        "ar-static-lib.a",
        "rpm-noarch.rpm",
        "cfb-wixl.msi",
        "png-16x16.png",
        "jpeg-16x16.jpg",
        "pdf-fpdf2.pdf",
        "sqlite-db.sqlite",
    ]
    .iter()
    .map(|name| {
        let mut b = sample(name);
        b.truncate(1500);
        b
    })
    .collect()
});

static ELF_B64: LazyLock<String> = LazyLock::new(|| STANDARD.encode(sample("elf-x86_64")));

fn streamed(content: &[u8], chunks: &[usize]) -> Finding {
    let mut s = Sniffer::new(CAP);
    let mut rest = content;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (c, r) = rest.split_at(size.min(rest.len()));
        s.update(c);
        rest = r;
    }
    s.finish()
}

fn finder_streamed(content: &[u8], chunks: &[usize]) -> Option<embedded::Payload> {
    let mut f = PayloadFinder::new();
    let mut rest = content;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (c, r) = rest.split_at(size.min(rest.len()));
        f.update(c);
        rest = r;
    }
    f.finish()
}

fn reference_streamed(content: &[u8], chunks: &[usize]) -> Option<embedded::Payload> {
    let mut f = PayloadFinder::reference();
    let mut rest = content;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (c, r) = rest.split_at(size.min(rest.len()));
        f.update(c);
        rest = r;
    }
    f.finish()
}

fn wrap(s: &str, width: usize, eol: &str) -> String {
    s.as_bytes().chunks(width).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(eol)
}

fn utf16le(s: &str) -> Vec<u8> {
    let mut out = vec![0xff, 0xfe];
    for u in s.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..64, 1..8)
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,9}",
        1 => "[A-Z][a-z]{0,11}",
        1 => "[0-9]{1,4}",
        1 => "(café|naïve|Zürich|größer|日本語|—|🙂)",
    ]
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        " ", " ", " ", " ", ", ", ". ", "\n", "\n", ".\n\n", "; ", " (", ") ", ": ", "\n  ", "\r\n", " - ",
        "\t", "!\n", "? ", " = ", "\"", "' ",
    ])
}

/// Prose: words and separators.
fn prose() -> impl Strategy<Value = String> {
    prop::collection::vec((word(), separator()), 0..80)
        .prop_map(|v| v.into_iter().map(|(w, s)| format!("{w}{s}")).collect())
}

/// Base64 of a sample prefix, encoded and wrapped one of the ways text carries it.
fn base64_piece() -> impl Strategy<Value = String> {
    (
        any::<Index>(),
        0usize..1500,
        0u8..4,
        prop::option::of((0usize..4, 0usize..5)),
        any::<bool>(),
        "[a-zA-Z0-9+/]{0,3}",
    )
        .prop_map(|(which, len, alphabet, wrapping, escape_slashes, junk)| {
            let bin = &SAMPLES[which.index(SAMPLES.len())];
            let bin = &bin[..len.min(bin.len())];
            let mut b64 = match alphabet {
                0 => STANDARD.encode(bin),
                1 => STANDARD_NO_PAD.encode(bin),
                2 => URL_SAFE.encode(bin),
                _ => URL_SAFE_NO_PAD.encode(bin),
            };
            if let Some((width, eol)) = wrapping {
                let width = [15, 16, 64, 76][width];
                let eol = ["\n", "\r\n", "\\n", "\\r\\n", "\n    "][eol];
                b64 = wrap(&b64, width, eol);
            }
            if escape_slashes {
                b64 = b64.replace('/', "\\/");
            }
            format!("{junk}{b64}")
        })
}

/// Text mixing prose, line breaks, JSON escapes and base64 of sample prefixes.
fn mixed_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => prose(),
        2 => base64_piece(),
        1 => prop::sample::select(vec!["\n", "\r\n", "\\n", "\\r\\n", "\\/", "\n\n", "{\"f\": \"", "\"}", " ", "=", "\\"])
            .prop_map(str::to_owned),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')
}

/// An upper bound on the longest base64 run the finder can see in `text`
/// (see `embedded.rs`): segments of base64 characters (`\/` counts as one),
/// joined across any whitespace (space, tab, LF, VT, FF, CR and the `\n`,
/// `\r`, `\t`, `\f` escapes).
fn max_run_bound(text: &[u8]) -> usize {
    let (mut max, mut cur) = (0, 0);
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        match b {
            b'\\' => match text.get(i + 1) {
                Some(b'n' | b'r' | b't' | b'f') => i += 1,
                Some(b'/') => {
                    cur += 1;
                    i += 1;
                }
                _ => cur = 0,
            },
            b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' => {}
            _ if is_b64(b) => cur += 1,
            _ => cur = 0,
        }
        max = max.max(cur);
        i += 1;
    }
    max
}

fn forbidden(c: char) -> bool {
    matches!(c, '\0'..='\u{6}' | '\u{e}'..='\u{1a}' | '\u{1c}'..='\u{1f}' | '\u{7f}')
}

/// Text that starts with a signature whose structure is checked too is
/// refused however textual it is (`%PDF-`, `!<arch>\n`, an all-digit cpio
/// header): not what property (c) is about.
fn starts_with_a_textual_signature(s: &str) -> bool {
    s.starts_with("%PDF-") || s.starts_with("!<arch>\n") || s.starts_with("07070")
}

/// The reasons sniffing answers from.
const CONTENT_REASONS: &[Reason] = &[
    Reason::ContentExecutable,
    Reason::ContentArchive,
    Reason::ContentNotText,
    Reason::ContentEmbeddedExecutable,
    Reason::ContentEmbeddedArchive,
    Reason::ContentTooLarge,
];

/// The reason a refusal of `kind` by its signature carries.
fn reason_of(kind: Kind) -> Reason {
    match kind.class() {
        Class::Executable => Reason::ContentExecutable,
        Class::Archive => Reason::ContentArchive,
        Class::NotText | Class::Text => Reason::ContentNotText,
    }
}

/// Streams `content` in `chunks` under `cap`, checking that a decision,
/// once [`Sniffer::decided`] gives one, never changes and is the verdict.
fn streamed_capped(content: &[u8], chunks: &[usize], cap: u64) -> Result<Finding, TestCaseError> {
    let mut s = Sniffer::new(cap);
    let mut decided = None;
    let mut rest = content;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (c, r) = rest.split_at(size.min(rest.len()));
        s.update(c);
        if decided.is_some() {
            prop_assert_eq!(s.decided(), decided, "a decision changed");
        }
        decided = s.decided();
        rest = r;
    }
    let verdict = s.finish();
    if let Some(d) = decided {
        prop_assert_eq!(verdict, d, "finish contradicts the decision");
    }
    Ok(verdict)
}

/// What every verdict on `content` under `cap` must be, whatever the bytes:
/// - the same streamed in `chunks` as whole, and a decision never revised;
/// - accepted only as text (`empty` exactly when there are no bytes), with
///   no offset, and never over the cap;
/// - refused with a reason from the closed list that matches the class of
///   the kind, at an offset inside the content (and inside the cap: nothing
///   past it is judged), `content_too_large` only over the cap;
/// - within the cap, what it would be with no cap at all;
/// - refused by its class at offset 0 when the bytes judged for the
///   signature (the first `SNIFF_LEN`, within the cap) match a decisive one.
fn check_verdict(content: &[u8], chunks: &[usize], cap: u64) -> Result<Finding, TestCaseError> {
    let f = sniff_bytes(content, cap);
    prop_assert_eq!(streamed_capped(content, chunks, cap)?, f);
    let len = content.len() as u64;
    match f.reason {
        None => {
            prop_assert!(len <= cap, "accepted over the cap: {:?}", f);
            prop_assert_eq!(f.kind.class(), Class::Text, "{:?}", f);
            prop_assert_eq!(f.offset, None);
            prop_assert_eq!(f.kind == Kind::Empty, content.is_empty(), "{:?}", f);
        }
        Some(reason) => {
            prop_assert!(CONTENT_REASONS.contains(&reason), "{:?}", f);
            prop_assert!(
                f.offset.is_none_or(|o| o < len.min(cap)),
                "offset outside what was judged: {:?}",
                f
            );
            match reason {
                Reason::ContentTooLarge => {
                    prop_assert!(len > cap, "{:?}", f);
                    prop_assert_eq!(f.offset, None);
                    prop_assert_ne!(f.kind.class(), Class::Text, "{:?}", f);
                }
                Reason::ContentEmbeddedExecutable => {
                    prop_assert_eq!(f.kind.class(), Class::Executable, "{:?}", f)
                }
                Reason::ContentEmbeddedArchive => prop_assert_eq!(f.kind.class(), Class::Archive, "{:?}", f),
                _ => {
                    prop_assert_ne!(f.kind.class(), Class::Text, "{:?}", f);
                    prop_assert_eq!(reason, reason_of(f.kind), "{:?}", f);
                }
            }
            prop_assert!(f.offset.is_some() || reason == Reason::ContentTooLarge, "{:?}", f);
        }
    }
    if len <= cap {
        prop_assert_eq!(f, sniff_bytes(content, CAP), "the cap changed a verdict within it");
    }
    let judged = &content[..content.len().min(SNIFF_LEN).min(usize::try_from(cap).unwrap_or(usize::MAX))];
    if let Some(s) = magic::sniff(judged).filter(|s| s.decisive) {
        prop_assert_eq!(f, Finding { kind: s.kind, reason: Some(reason_of(s.kind)), offset: Some(0) });
    }
    Ok(f)
}

/// Bytes that mean something to one of the checks: byte-order marks,
/// broken UTF-8, forbidden controls, line breaks, signatures spelled in
/// text characters, and the starts of binary ones.
fn special_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        &b"\xef\xbb\xbf"[..],
        b"\xff\xfe",
        b"\xfe\xff",
        b"\x80",
        b"\xe2\x82",
        b"\xf0\x9f\x99",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\0",
        b"\x1b",
        b"\x7f",
        b"\r\n",
        b"\n",
        b"\\n",
        b"CD001",
        b"ustar",
        b"ustar\x0000",
        b"%PDF-",
        b"!<arch>\n",
        b"07070",
        b"070701",
        b"MZ",
        b"PK\x03\x04",
        b"PK\x07\x08",
        b"BZh",
        b"GIF89a",
        b"\x7fELF",
        b"\x1f\x8b",
        b"7z\xbc\xaf\x27\x1c",
        b"TVqQAAMAAAAEAAAA",
        b"f0VMRgIBAQ",
        b"UEsDBA",
    ])
    .prop_map(<[u8]>::to_vec)
}

/// A sample's first bytes (all of them, or a cut).
fn sample_part() -> impl Strategy<Value = Vec<u8>> {
    (any::<Index>(), prop_oneof![Just(usize::MAX), 0usize..1500]).prop_map(|(which, len)| {
        let s = &SAMPLES[which.index(SAMPLES.len())];
        s[..len.min(s.len())].to_vec()
    })
}

/// Content built from parts: sample prefixes, text that mixes prose and
/// base64 payloads (UTF-8 or UTF-16), bytes that mean something to a check,
/// random bytes; sometimes a byte damaged, sometimes pushed out to where
/// ISO 9660 and tar look.
fn structured_content() -> impl Strategy<Value = Vec<u8>> {
    let part = prop_oneof![
        2 => sample_part(),
        3 => mixed_text().prop_map(String::into_bytes),
        1 => mixed_text().prop_map(|t| utf16le(&t)),
        2 => special_bytes(),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    (
        prop::collection::vec(part, 0..6),
        prop::collection::vec((any::<Index>(), any::<u8>()), 0..2),
        prop_oneof![4 => Just(None), 1 => prop::sample::select(vec![257usize, 0x8001, 0x8801, 0x9001]).prop_map(Some)],
    )
        .prop_map(|(parts, damage, at)| {
            let mut content = parts.concat();
            for (i, byte) in damage {
                if !content.is_empty() {
                    let i = i.index(content.len());
                    content[i] = byte;
                }
            }
            // A signature placed where the structure-checked ones are looked for.
            if let Some(at) = at {
                let sig = if at == 257 { &b"ustar"[..] } else { b"\x01CD001\x01" };
                let text: Vec<u8> = b"lorem ipsum ".iter().copied().cycle().take(at.saturating_sub(1)).collect();
                content = [&text[..], sig, &content].concat();
            }
            content
        })
}

fn cap() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(CAP),
        2 => 0u64..64,
        2 => 0u64..5000,
        1 => (SNIFF_LEN as u64 - 2)..(SNIFF_LEN as u64 + 2),
    ]
}

/// Executable and archive samples whose signature is not spelled in text
/// characters: glued onto text, they are what the text stops at.
const GLUED: &[&str] = &[
    "elf-x86_64",
    "macho-arm64.so",
    "macho-fat-universal2.so",
    "java-Hello.class",
    "dex-classes.dex",
    "wasm-module.wasm",
    "zip-text.zip",
    "gzip-text.gz",
    "xz-text.xz",
    "zstd-text.zst",
    "lz4-frame-text.lz4",
    "7z-text.7z",
    "rar5-rarfile-rar5-subdirs.rar",
    "rpm-noarch.rpm",
    "cfb-wixl.msi",
];

static GLUED_SAMPLES: LazyLock<Vec<(Kind, Vec<u8>)>> = LazyLock::new(|| {
    GLUED
        .iter()
        .map(|name| {
            let bytes = sample(name);
            (sniff_bytes(&bytes, CAP).kind, bytes)
        })
        .collect()
});

/// Executables and archives whose base64 the whitespace property splits.
static SPLIT_SAMPLES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    [
        "elf-x86_64",
        "pe-w32.exe",
        "zip-text.zip",
        "macho-arm64.so",
        "java-Hello.class",
        "gzip-text.gz",
        "tar-ustar.tar",
    ]
    .iter()
    .map(|name| {
        let mut b = sample(name);
        b.truncate(3000);
        b
    })
    .collect()
});

/// A run of whitespace of the kinds the finder skips.
fn whitespace() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec![' ', '\t', '\n', '\r', '\x0b', '\x0c']), 1..8)
        .prop_map(String::from_iter)
}

/// Base64 of an executable or archive, in either alphabet, padded or not,
/// with runs of whitespace of random length between arbitrary characters
/// (and sometimes before every character).
fn split_payload() -> impl Strategy<Value = (String, String)> {
    (
        any::<Index>(),
        0u8..4,
        prop::collection::vec((any::<Index>(), whitespace()), 0..300),
        prop::option::of(whitespace()),
    )
        .prop_map(|(which, alphabet, cuts, everywhere)| {
            let bin = &SPLIT_SAMPLES[which.index(SPLIT_SAMPLES.len())];
            let b64 = match alphabet {
                0 => STANDARD.encode(bin),
                1 => STANDARD_NO_PAD.encode(bin),
                2 => URL_SAFE.encode(bin),
                _ => URL_SAFE_NO_PAD.encode(bin),
            };
            let mut at: Vec<(usize, String)> =
                cuts.into_iter().map(|(i, ws)| (1 + i.index(b64.len() - 1), ws)).collect();
            at.sort_by_key(|(i, _)| *i);
            let mut split = String::new();
            let mut next = at.iter().peekable();
            for (k, c) in b64.chars().enumerate() {
                while let Some((_, ws)) = next.next_if(|(i, _)| *i == k) {
                    split.push_str(ws);
                }
                if let Some(ws) = &everywhere
                    && k > 0
                {
                    split.push_str(ws);
                }
                split.push(c);
            }
            (b64, split)
        })
}

/// Words of ordinary prose and code: English, identifiers in every case,
/// numbers, keywords and operators.
fn ordinary_word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
            "with", "his", "they", "I", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
            "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which",
            "She", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these",
            "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write",
            "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call",
            "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part",
            "With", "Victor", "Vienna", "Wiki", "Quality", "Umbrella", "UNIX", "HTTP", "TCP", "JSON", "README",
            "fn", "let", "mut", "self", "pub", "struct", "impl", "return", "match", "u64", "Vec", "String", "Option",
            "Some", "None", "Ok", "Err", "usize", "i32", "true", "false", "while", "for", "loop", "const", "static",
            "def", "class", "import", "yield", "lambda", "function", "var", "null", "void", "int", "char", "else",
        ]).prop_map(str::to_owned),
        2 => "[a-z]{1,10}",
        1 => "[A-Z][a-z]{1,9}",
        1 => "[A-Z]{2,6}",
        1 => "[0-9]{1,8}",
        1 => "[a-z]{2,8}(_[a-z]{2,8}){1,3}",
        1 => "[a-z]{2,8}([A-Z][a-z]{1,8}){1,3}",
        1 => "0x[0-9a-f]{2,16}",
        1 => prop::sample::select(vec!["{", "}", "(", ")", "=>", "->", "==", "+=", "&&", "::", ";", ",", ".", "//", "/*", "*/", "#", "<", ">", "-", "+", "/", "*"]).prop_map(str::to_owned),
    ]
}

/// Ordinary prose and code: words separated by runs of whitespace of every
/// kind (indentation, blank lines, CRLF, tabs).
fn ordinary_text() -> impl Strategy<Value = String> {
    prop::collection::vec((ordinary_word(), whitespace()), 0..400)
        .prop_map(|v| v.into_iter().map(|(w, s)| format!("{w}{s}")).collect())
}

/// Pieces of text the skim must hand to run mode, or may skip: the leads of
/// signatures (and pairs that are not), `c3Rh` whole or split, escapes,
/// padding, quotes and short base64 words.
fn skim_token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "c3Rh", "c", "3", "Rh", "R", "h", "c3", "yv", "zv", "z/", "z_", "aH", "eG", "f0", "TV", "TVqQ", "UE",
            "UEsD", "f0VM", "H4sI", "N3q8", "/Td6", "_Td6", "/u3", "0M", "7a", "Ai", "AG", "Ql", "QlpoOTFBWSZT",
            "Um", "Uy", "Vi", "IT", "KL", "MD", "SV", "TF", "Xy", "ZG", "C", "v", "V", "\\n", "\\/", "\\t",
            "\\r\\n", "\\", "\\x", "=", "==", "\"", ",", ":", ";", "-", "+", "/", "_", "é", "—",
        ]).prop_map(str::to_owned),
        2 => "[A-Za-z0-9+/_-]{1,8}",
        1 => "[A-Z0-9]{1,6}",
    ]
}

/// Text for property (g): generated prose and code, payloads split by
/// whitespace inside prose, and the skim's tokens joined by whitespace.
fn skim_text() -> impl Strategy<Value = String> {
    prop_oneof![
        mixed_text(),
        ordinary_text(),
        (prose(), split_payload(), prose()).prop_map(|(a, (_, split), b)| format!("{a} {split} {b}")),
        prop::collection::vec((skim_token(), prop_oneof![Just(String::new()), whitespace()]), 0..200)
            .prop_map(|v| v.into_iter().map(|(t, s)| format!("{t}{s}")).collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 8192,
        // Property (c) filters out texts with long base64 runs.
        max_global_rejects: 1 << 20,
        // Failures are turned into plain tests (see tests/embedded.rs), not
        // kept in a regressions file.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (a) Arbitrary bytes: chunked equals whole.
    #[test]
    fn chunks_of_arbitrary_bytes_agree_with_the_whole(
        content in prop::collection::vec(any::<u8>(), 0..2048),
        chunks in chunk_sizes(),
    ) {
        prop_assert_eq!(streamed(&content, &chunks), sniff_bytes(&content, CAP));
    }

    /// (a) Mostly-text bytes (a little binary sprinkled in): chunked equals whole.
    #[test]
    fn chunks_of_almost_text_agree_with_the_whole(
        text in mixed_text(),
        damage in prop::collection::vec((any::<Index>(), any::<u8>()), 0..2),
        chunks in chunk_sizes(),
    ) {
        let mut content = text.into_bytes();
        for (at, byte) in damage {
            if !content.is_empty() {
                let i = at.index(content.len());
                content[i] = byte;
            }
        }
        prop_assert_eq!(streamed(&content, &chunks), sniff_bytes(&content, CAP));
    }

    /// (a) Generated texts mixing prose, line breaks, `\n` escapes and base64
    /// of sample prefixes, in UTF-8 and UTF-16: chunked equals whole, for the
    /// sniffer and for the payload finder alone.
    #[test]
    fn chunks_of_mixed_text_agree_with_the_whole(text in mixed_text(), chunks in chunk_sizes(), utf16 in any::<bool>()) {
        let content = if utf16 { utf16le(&text) } else { text.clone().into_bytes() };
        prop_assert_eq!(streamed(&content, &chunks), sniff_bytes(&content, CAP));
        prop_assert_eq!(finder_streamed(text.as_bytes(), &chunks), embedded::find(text.as_bytes()));
    }

    /// (b) Arbitrary bytes, chunks and caps: a verdict that holds together.
    #[test]
    fn arbitrary_bytes_get_a_consistent_verdict(content in prop::collection::vec(any::<u8>(), 0..4096), chunks in chunk_sizes(), cap in cap()) {
        check_verdict(&content, &chunks, cap)?;
        // The finder alone: chunked equals whole, and a payload is inside.
        let found = embedded::find(&content);
        prop_assert_eq!(finder_streamed(&content, &chunks), found);
        prop_assert!(found.is_none_or(|p| p.offset < content.len() as u64));
    }

    /// (b) Content built from signatures, text, payloads and binary parts,
    /// which gets past the first checks: a verdict that holds together.
    #[test]
    fn structured_content_gets_a_consistent_verdict(content in structured_content(), chunks in chunk_sizes(), cap in cap()) {
        check_verdict(&content, &chunks, cap)?;
    }

    /// (b) Text made to look like payloads and escapes: a verdict that holds
    /// together, and a payload the finder reports is what the sniffer says.
    #[test]
    fn mixed_text_gets_a_consistent_verdict(text in mixed_text(), chunks in chunk_sizes(), cap in cap()) {
        let f = check_verdict(text.as_bytes(), &chunks, cap)?;
        let found = embedded::find(text.as_bytes());
        prop_assert_eq!(finder_streamed(text.as_bytes(), &chunks), found);
        if let (Some(p), true) = (found, cap == CAP && magic::sniff(text.as_bytes()).is_none_or(|s| !s.decisive)) {
            let reason = if p.kind.class() == Class::Executable { Reason::ContentEmbeddedExecutable } else { Reason::ContentEmbeddedArchive };
            prop_assert_eq!(f, Finding { kind: p.kind, reason: Some(reason), offset: Some(p.offset) });
        }
    }

    /// (b) Text over the cap, with no signature and no payload: too large,
    /// and nothing else.
    #[test]
    fn text_over_the_cap_is_too_large(text in prose(), chunks in chunk_sizes(), cut in any::<Index>()) {
        prop_assume!(!text.is_empty());
        prop_assume!(max_run_bound(text.as_bytes()) < embedded::MIN_PAYLOAD_CHARS as usize);
        prop_assume!(magic::sniff(text.as_bytes()).is_none());
        let cap = cut.index(text.len()) as u64;
        let f = check_verdict(text.as_bytes(), &chunks, cap)?;
        prop_assert_eq!(f, Finding { kind: Kind::Binary, reason: Some(Reason::ContentTooLarge), offset: None });
    }

    /// (b) An executable or archive glued onto text: named by its kind,
    /// where the text stops.
    #[test]
    fn a_payload_glued_onto_text_is_named_where_it_begins(text in prose(), which in any::<Index>(), chunks in chunk_sizes()) {
        prop_assume!(max_run_bound(text.as_bytes()) < embedded::MIN_PAYLOAD_CHARS as usize);
        prop_assume!(!starts_with_a_textual_signature(&text));
        let (kind, bytes) = &GLUED_SAMPLES[which.index(GLUED_SAMPLES.len())];
        let content = [text.as_bytes(), bytes].concat();
        let f = check_verdict(&content, &chunks, CAP)?;
        let want = if text.is_empty() { 0 } else { text.len() as u64 };
        prop_assert_eq!(f, Finding { kind: *kind, reason: Some(reason_of(*kind)), offset: Some(want) }, "{:?}", text);
    }

    /// (c) Valid UTF-8 without forbidden controls and without a base64 run of
    /// 24 characters is accepted as UTF-8 text (or empty).
    #[test]
    fn text_without_long_base64_is_accepted(
        raw in prop_oneof![any::<String>(), "[ -~\n\t\r]{0,400}", prose(), mixed_text()],
    ) {
        let text: String = raw.chars().map(|c| if forbidden(c) { ' ' } else { c }).collect();
        prop_assume!(max_run_bound(text.as_bytes()) < embedded::MIN_PAYLOAD_CHARS as usize);
        prop_assume!(!starts_with_a_textual_signature(&text));
        let expected = if text.is_empty() { Kind::Empty } else { Kind::Utf8Text };
        prop_assert_eq!(sniff_bytes(text.as_bytes(), CAP), Finding { kind: expected, reason: None, offset: None });
    }

    /// (e) Base64 of an executable or archive with runs of whitespace of
    /// random length between arbitrary characters, after prose: found, as
    /// what the unbroken base64 is found to be, where its first character
    /// stands; chunked as whole.
    #[test]
    fn a_payload_split_by_whitespace_anywhere_is_found(
        (b64, split) in split_payload(),
        before in prose(),
        after in prose(),
        chunks in chunk_sizes(),
    ) {
        let unbroken = embedded::find(b64.as_bytes()).map(|p| p.kind);
        prop_assert!(unbroken.is_some());
        let text = format!("{before}\n{split}\n{after}");
        let found = embedded::find(text.as_bytes());
        prop_assert_eq!(found.map(|p| (p.kind, p.offset)), unbroken.map(|k| (k, before.len() as u64 + 1)));
        prop_assert_eq!(finder_streamed(text.as_bytes(), &chunks), found);
    }

    /// (f) Ordinary prose and code, whatever whitespace separates its words
    /// (and however long the runs that whitespace joins): not a payload.
    #[test]
    fn ordinary_text_with_whitespace_is_not_a_payload(text in prop_oneof![ordinary_text(), prose()], chunks in chunk_sizes()) {
        prop_assert_eq!(embedded::find(text.as_bytes()), None, "{:?}", text);
        prop_assert_eq!(finder_streamed(text.as_bytes(), &chunks), None);
        let expected = if text.is_empty() { Kind::Empty } else { Kind::Utf8Text };
        prop_assert_eq!(sniff_bytes(text.as_bytes(), CAP), Finding { kind: expected, reason: None, offset: None });
    }

    /// (g) The skim is an optimization: whatever the text, and wherever
    /// a piece of the finder ends in it, the finder answers what its
    /// reference answers (the same payload at the same offset, or none).
    #[test]
    fn the_skim_changes_no_answer(
        parts in prop::collection::vec(skim_text(), 1..4),
        piece_end in prop::option::of(0usize..1200),
        chunks in chunk_sizes(),
    ) {
        let text = parts.concat();
        let mut content = Vec::new();
        if let Some(back) = piece_end {
            // Filler the skim reads quickly, so the text straddles the end of
            // the first piece.
            content.extend(b"on a ".iter().cycle().take(embedded::PIECE.saturating_sub(back)));
        }
        content.extend_from_slice(text.as_bytes());
        let expected = reference_streamed(&content, &[usize::MAX]);
        prop_assert_eq!(embedded::find(&content), expected, "{:?}", text);
        prop_assert_eq!(finder_streamed(&content, &chunks), expected);
        prop_assert_eq!(reference_streamed(&content, &chunks), expected);
    }

    /// (d) The ELF sample's base64 inserted into prose at a word boundary is
    /// found, with the offset where its base64 begins.
    #[test]
    fn an_elf_inserted_into_prose_is_found(text in prose(), at in any::<Index>(), wrapping in 0usize..4) {
        let boundaries: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i) && (i == 0 || !is_b64(text.as_bytes()[i - 1])))
            .collect();
        let i = boundaries[at.index(boundaries.len())];
        let b64 = match wrapping {
            0 => ELF_B64.clone(),
            1 => wrap(&ELF_B64, 64, "\n"),
            2 => wrap(&ELF_B64, 76, "\r\n"),
            _ => wrap(&ELF_B64, 76, "\\n"),
        };
        let content = format!("{}{b64}{}", &text[..i], &text[i..]);
        let expected = Finding { kind: Kind::Elf, reason: Some(Reason::ContentEmbeddedExecutable), offset: Some(i as u64) };
        prop_assert_eq!(sniff_bytes(content.as_bytes(), CAP), expected, "inserted at {} of {:?}", i, text);
    }
}

#[test]
fn the_run_bound_counts_what_the_finder_joins() {
    assert_eq!(max_run_bound(b"abc def"), 6);
    assert_eq!(max_run_bound(b"a\tb\x0bc\x0cd \n\n e"), 5);
    assert_eq!(max_run_bound(b"abc\ndef"), 6);
    assert_eq!(max_run_bound(b"abc \r\n  def"), 6);
    assert_eq!(max_run_bound(b"abc\\ndef"), 6);
    assert_eq!(max_run_bound(b"ab\\/cd"), 5);
    assert_eq!(max_run_bound(b"abc=def"), 3);
    assert_eq!(max_run_bound(b"abc.def"), 3);
    assert_eq!(max_run_bound(b"a-b_c+d/e"), 9);
}
