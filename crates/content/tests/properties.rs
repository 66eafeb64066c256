//! Properties of sniffing over generated input:
//! (a) streaming in arbitrary chunks gives the verdict of the whole;
//! (b) no input makes it panic;
//! (c) text without a base64 run of 24 characters is accepted;
//! (d) a base64 ELF inserted anywhere in prose, on a word boundary, is found
//!     where its base64 begins.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::PathBuf;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use gatehouse_content::embedded::{self, PayloadFinder};
use gatehouse_content::{Finding, Kind, Sniffer, sniff_bytes};
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
/// joined across gaps of blanks that hold a line break (LF or the `\n`
/// escape). Over-counts (blank lines, `\r` and `\t` escapes), never under.
fn max_run_bound(text: &[u8]) -> usize {
    let (mut max, mut cur) = (0, 0);
    let (mut in_gap, mut gap_newline) = (false, false);
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        let mut letter = |cur: &mut usize, in_gap: &mut bool, gap_newline: &mut bool| {
            if *in_gap && !*gap_newline {
                *cur = 0;
            }
            *in_gap = false;
            *gap_newline = false;
            *cur += 1;
            max = max.max(*cur);
        };
        match b {
            b'\\' => match text.get(i + 1) {
                Some(b'n') => {
                    in_gap = true;
                    gap_newline = true;
                    i += 1;
                }
                Some(b'r' | b't') => {
                    in_gap = true;
                    i += 1;
                }
                Some(b'/') => {
                    letter(&mut cur, &mut in_gap, &mut gap_newline);
                    i += 1;
                }
                _ => {
                    cur = 0;
                    in_gap = false;
                    gap_newline = false;
                }
            },
            b' ' | b'\t' | b'\r' => in_gap = true,
            b'\n' => {
                in_gap = true;
                gap_newline = true;
            }
            _ if is_b64(b) => letter(&mut cur, &mut in_gap, &mut gap_newline),
            _ => {
                cur = 0;
                in_gap = false;
                gap_newline = false;
            }
        }
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

    /// (b) Never panics, whatever the bytes, the chunks and the cap.
    #[test]
    fn never_panics(content in prop::collection::vec(any::<u8>(), 0..4096), chunks in chunk_sizes(), cap in 0u64..5000) {
        let _ = sniff_bytes(&content, cap);
        let mut s = Sniffer::new(cap);
        for c in content.chunks(chunks[0]) {
            s.update(c);
            let _ = s.decided();
        }
        let _ = s.finish();
        let _ = embedded::find(&content);
        let _ = finder_streamed(&content, &chunks);
    }

    /// (b) Never panics on text made to look like payloads and escapes.
    #[test]
    fn never_panics_on_mixed_text(text in mixed_text(), chunks in chunk_sizes(), cap in 0u64..100_000) {
        let _ = sniff_bytes(text.as_bytes(), cap);
        let _ = streamed(text.as_bytes(), &chunks);
        let _ = finder_streamed(text.as_bytes(), &chunks);
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
    assert_eq!(max_run_bound(b"abc def"), 3);
    assert_eq!(max_run_bound(b"abc\ndef"), 6);
    assert_eq!(max_run_bound(b"abc \r\n  def"), 6);
    assert_eq!(max_run_bound(b"abc\\ndef"), 6);
    assert_eq!(max_run_bound(b"ab\\/cd"), 5);
    assert_eq!(max_run_bound(b"abc=def"), 3);
    assert_eq!(max_run_bound(b"abc.def"), 3);
    assert_eq!(max_run_bound(b"a-b_c+d/e"), 9);
}
