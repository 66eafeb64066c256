//! Base64 payloads inside text, built from the real samples in
//! `tests/samples/`: every executable and archive sample is found (with its
//! kind and the offset where its base64 begins) however the base64 is
//! wrapped; base64 of media, documents and random bytes stays harmless; and
//! inputs built to make a naive finder quadratic still get an answer.
//!
//! Whitespace of any kind between base64 characters does not hide a
//! payload (issue #27), and does not make ordinary text one.
//!
//! Known limits, not tested as must-detect (see `embedded.rs`): binary cpio,
//! ISO images, payloads shorter than 24 base64 characters, separators other
//! than whitespace.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use gatehouse_content::{Class, Finding, Kind, Sniffer, sniff_bytes};
use gatehouse_core::Reason;

const CAP: u64 = 1 << 30;

fn sample(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every executable and archive sample the finder must find, with the kind it
/// must name. (Binary cpio and ISO are documented limits.)
const PAYLOADS: &[(&str, Kind)] = &[
    ("elf-x86_64", Kind::Elf),
    ("elf-x86_64-shared.so", Kind::Elf),
    ("pe-w32.exe", Kind::Pe),
    ("macho-arm64.so", Kind::MachO),
    ("macho-fat-universal2.so", Kind::MachOFat),
    ("wasm-module.wasm", Kind::Wasm),
    ("java-Hello.class", Kind::JavaClass),
    ("dex-classes.dex", Kind::Dex),
    ("zip-text.zip", Kind::Zip),
    ("zip-empty.zip", Kind::Zip),
    ("jar-hello.jar", Kind::Zip),
    ("docx-python-docx.docx", Kind::Zip),
    ("xlsx-openpyxl.xlsx", Kind::Zip),
    ("odt-odfpy.odt", Kind::Zip),
    ("gzip-text.gz", Kind::Gzip),
    ("tar-gz.tar.gz", Kind::Gzip),
    ("bzip2-text.bz2", Kind::Bzip2),
    ("xz-text.xz", Kind::Xz),
    ("zstd-text.zst", Kind::Zstd),
    ("lz4-frame-text.lz4", Kind::Lz4),
    ("7z-text.7z", Kind::SevenZip),
    ("rar4-rarfile-rar3-subdirs.rar", Kind::Rar),
    ("rar5-rarfile-rar5-subdirs.rar", Kind::Rar),
    ("tar-ustar.tar", Kind::Tar),
    ("tar-gnu.tar", Kind::Tar),
    ("tar-text-only.tar", Kind::Tar),
    ("cab-gcab.cab", Kind::Cab),
    ("ar-text-only.a", Kind::Ar),
    ("ar-static-lib.a", Kind::Ar),
    ("deb-trivial.deb", Kind::Ar),
    ("rpm-noarch.rpm", Kind::Rpm),
    ("cpio-newc.cpio", Kind::Cpio),
    ("cpio-odc.cpio", Kind::Cpio),
    ("cfb-wixl.msi", Kind::Cfb),
];

/// Samples that are not text but hide no code: their base64 is harmless.
const HARMLESS: &[&str] = &[
    "png-16x16.png",
    "jpeg-16x16.jpg",
    "gif-16x16.gif",
    "webp-16x16.webp",
    "bmp-16x16.bmp",
    "tiff-16x16.tif",
    "ico-16x16.ico",
    "pdf-fpdf2.pdf",
    "wav-sine.wav",
    "flac-sine.flac",
    "ogg-vorbis-sine.ogg",
    "webm-vorbis-sine.webm",
    "mp4-mpeg4-16x16.mp4",
    "sqlite-db.sqlite",
    "font-dejavusans-subset.ttf",
    "font-dejavusans-subset.woff",
    "font-dejavusans-subset.woff2",
];

/// Text samples that carry base64 of their own (keys, certificates, tokens,
/// source maps, data URIs): all harmless.
const TEXT_WITH_BASE64: &[&str] = &[
    "pem-ed25519-cert.pem",
    "pem-ed25519-key.pem",
    "openssh-ed25519",
    "openssh-ed25519.pub",
    "jwt-request.txt",
    "js-inline-sourcemap.js",
    "svg-embedded-png.svg",
    "json-base64-png.json",
];

/// Cuts `s` into lines of `width` characters joined by `eol`.
fn wrap(s: &str, width: usize, eol: &str) -> String {
    s.as_bytes().chunks(width).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(eol)
}

/// A text carrying a payload, and the byte offset where its base64 begins.
struct Wrapped {
    name: String,
    text: String,
    offset: usize,
}

fn wrapped(name: impl Into<String>, before: &str, body: &str, after: &str) -> Wrapped {
    Wrapped { name: name.into(), text: format!("{before}{body}{after}"), offset: before.len() }
}

/// `bin` base64-encoded and wrapped every way text carries base64.
fn wrappings(bin: &[u8]) -> Vec<Wrapped> {
    let b64 = STANDARD.encode(bin);
    let escaped_slashes = b64.replace('/', "\\/");
    let mut out = vec![
        wrapped(
            "raw block inside prose",
            "Here is the build you asked for: ",
            &b64,
            " -- let me know if it runs.\n",
        ),
        wrapped(
            "raw paragraph between paragraphs",
            "Here is the build you asked for.\n\n",
            &b64,
            "\n\nLet me know if it runs.\n",
        ),
        wrapped(
            "data URI in HTML",
            "<!doctype html>\n<p>Download <a href=\"data:application/octet-stream;base64,",
            &b64,
            "\">the tool</a>.</p>\n",
        ),
        wrapped("JSON string", "{\"name\": \"tool\", \"file\": \"", &b64, "\"}\n"),
        wrapped("JSON string with \\n every 76", "{\"file\": \"", &wrap(&b64, 76, "\\n"), "\"}"),
        wrapped("JSON string with \\r\\n every 76", "{\"file\": \"", &wrap(&b64, 76, "\\r\\n"), "\"}"),
        wrapped("JSON string with \\/", "{\"file\": \"", &escaped_slashes, "\", \"n\": 1}"),
        wrapped(
            "JSON string with \\/ and \\n every 76",
            "[\"",
            &wrap(&b64, 76, "\\n").replace('/', "\\/"),
            "\"]",
        ),
        wrapped(
            "PEM block",
            "Key material follows.\n-----BEGIN X-----\n",
            &wrap(&b64, 64, "\n"),
            "\n-----END X-----\n",
        ),
        wrapped(
            "MIME part, 76 columns, CRLF",
            "--b1\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\
             Content-Disposition: attachment; filename=\"tool.bin\"\r\n\r\n",
            &wrap(&b64, 76, "\r\n"),
            "\r\n--b1--\r\n",
        ),
        wrapped(
            "YAML block scalar",
            "files:\n  - name: tool\n    data: |\n      ",
            &wrap(&b64, 60, "\n      "),
            "\n  - name: readme\n    data: hello\n",
        ),
        wrapped("URL-safe alphabet", "blob ", &URL_SAFE.encode(bin), " end\n"),
        wrapped(
            "URL-safe, unpadded, in a query",
            "https://example.com/up?blob=",
            &URL_SAFE_NO_PAD.encode(bin),
            "&x=1",
        ),
        wrapped("unpadded", "blob ", &STANDARD_NO_PAD.encode(bin), " end\n"),
        wrapped(
            "unpadded, 64 columns",
            "blob:\n",
            &wrap(&STANDARD_NO_PAD.encode(bin), 64, "\n"),
            "\n\nend\n",
        ),
    ];
    // The payload at byte offsets 0, 1, 2, 3 and 5 of the text.
    for before in ["", "\t", "> ", "x: ", "data="] {
        out.push(wrapped(format!("at offset {}", before.len()), before, &b64, " end\n"));
    }
    // Junk base64 letters glued on in front.
    for junk in ["x", "xy", "xyz", "+", "0/", "Q+9"] {
        let w = wrapped(format!("after glued junk {junk:?}"), &format!("file: {junk}"), &b64, "\n");
        out.push(w);
    }
    out
}

/// `b64` with whitespace between its characters, as issue #27 asks: wrapped
/// at 1 to 7 and 76 characters a line (LF and CRLF), in groups of 4 split
/// by spaces and of 8 split by tabs, with blank lines, VT and FF, JSON `\n`
/// escapes, and runs of mixed whitespace at random places.
fn spaced_wrappings(b64: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for width in (1..=7).chain([76]) {
        for eol in ["\n", "\r\n"] {
            out.push((format!("{width} a line, {eol:?}"), wrap(b64, width, eol)));
        }
    }
    out.push(("groups of 4 split by spaces".into(), wrap(b64, 4, " ")));
    out.push(("groups of 8 split by tabs".into(), wrap(b64, 8, "\t")));
    out.push(("3 a line, blank lines between".into(), wrap(b64, 3, "\n\n")));
    out.push(("5 a line, VT and FF".into(), wrap(b64, 5, "\x0b\x0c")));
    out.push(("2 a line, JSON \\n escapes".into(), wrap(b64, 2, "\\n")));
    let r = random_bytes(2 * b64.len(), 27);
    let mut mixed = String::new();
    for (k, c) in b64.chars().enumerate() {
        if k > 0 && r[2 * k].is_multiple_of(3) {
            for j in 0..=usize::from(r[2 * k + 1] % 6) {
                mixed.push(
                    [' ', '\t', '\n', '\r', ' ', '\x0b', '\x0c'][(usize::from(r[2 * k + 1] / 6) + j) % 7],
                );
            }
        }
        mixed.push(c);
    }
    out.push(("runs of mixed whitespace at random places".into(), mixed));
    out
}

fn reason_for(kind: Kind) -> Reason {
    match kind.class() {
        Class::Executable => Reason::ContentEmbeddedExecutable,
        _ => Reason::ContentEmbeddedArchive,
    }
}

fn streamed(content: &[u8], chunk: usize) -> Finding {
    let mut s = Sniffer::new(CAP);
    for c in content.chunks(chunk) {
        s.update(c);
    }
    s.finish()
}

fn utf16(s: &str, le: bool) -> Vec<u8> {
    let mut out = if le { vec![0xff, 0xfe] } else { vec![0xfe, 0xff] };
    for u in s.encode_utf16() {
        out.extend_from_slice(&if le { u.to_le_bytes() } else { u.to_be_bytes() });
    }
    out
}

/// Checks that `text` is refused for a payload of `kind` at `offset`, whole
/// and streamed; a description of what went wrong otherwise.
fn expect_payload(what: &str, text: &[u8], kind: Kind, offset: usize) -> Option<String> {
    let expected = Finding { kind, reason: Some(reason_for(kind)), offset: Some(offset as u64) };
    let got = sniff_bytes(text, CAP);
    if got != expected {
        return Some(format!("{what}: expected {kind} at {offset}, got {got:?}"));
    }
    for chunk in [1, 3, 7, 64, 4096] {
        let s = streamed(text, chunk);
        if s != got {
            return Some(format!("{what}: chunks of {chunk} gave {s:?}, whole gave {got:?}"));
        }
    }
    None
}

/// Checks that `text` is accepted as `kind`, whole and streamed.
fn expect_accepted(what: &str, text: &[u8], kind: Kind) -> Option<String> {
    let got = sniff_bytes(text, CAP);
    if got != (Finding { kind, reason: None, offset: None }) {
        return Some(format!("{what}: expected accepted {kind}, got {got:?}"));
    }
    for chunk in [7, 4096] {
        let s = streamed(text, chunk);
        if s != got {
            return Some(format!("{what}: chunks of {chunk} gave {s:?}, whole gave {got:?}"));
        }
    }
    None
}

fn assert_none_wrong(wrong: &[String]) {
    assert!(wrong.is_empty(), "{} wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn every_payload_sample_is_found_in_every_wrapping() {
    let mut wrong = Vec::new();
    for &(name, kind) in PAYLOADS {
        for w in wrappings(&sample(name)) {
            wrong.extend(expect_payload(&format!("{name} / {}", w.name), w.text.as_bytes(), kind, w.offset));
        }
    }
    assert_none_wrong(&wrong);
}

#[test]
fn a_payload_split_by_any_whitespace_is_found() {
    // Issue #27: base64 wrapped at 1 to 7 characters a line, or in groups
    // split by spaces or tabs, passed as text.
    let mut wrong = Vec::new();
    for (name, kind) in [
        ("elf-x86_64", Kind::Elf),
        ("pe-w32.exe", Kind::Pe),
        ("zip-text.zip", Kind::Zip),
        ("tar-ustar.tar", Kind::Tar),
    ] {
        let b64 = STANDARD.encode(sample(name));
        for (how, body) in spaced_wrappings(&b64) {
            for before in ["Here is the build:\n", "see the attached file\n  ", "x "] {
                let w = wrapped(format!("{name} / {how} / after {before:?}"), before, &body, "\nThanks.\n");
                wrong.extend(expect_payload(&w.name, w.text.as_bytes(), kind, w.offset));
            }
        }
    }
    assert_none_wrong(&wrong);
}

#[test]
fn whitespace_split_base64_of_harmless_files_is_harmless() {
    let mut wrong = Vec::new();
    for name in ["png-16x16.png", "pdf-fpdf2.pdf", "sqlite-db.sqlite"] {
        let b64 = STANDARD.encode(sample(name));
        for (how, body) in spaced_wrappings(&b64) {
            wrong.extend(expect_accepted(&format!("{name} / {how}"), body.as_bytes(), Kind::Utf8Text));
        }
    }
    let random = STANDARD.encode(random_bytes(1 << 18, 28));
    for (how, body) in spaced_wrappings(&random) {
        wrong.extend(expect_accepted(&format!("random / {how}"), body.as_bytes(), Kind::Utf8Text));
    }
    assert_none_wrong(&wrong);
}

#[test]
fn this_repository_s_prose_and_code_are_text() {
    // Whitespace joins the words of ordinary text into long runs: the
    // finder must still not call them a payload.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = ["../../README.md", "../../ARCHITECTURE.md", "../../docs/benchmarks.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    // (Not `tests/`: its sources spell payloads on purpose.)
    for dir in ["src", "benches", "../core/src", "../egress/src"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut wrong = Vec::new();
    for path in files {
        let text = std::fs::read(&path).unwrap();
        wrong.extend(expect_accepted(&path.display().to_string(), &text, Kind::Utf8Text));
    }
    assert_none_wrong(&wrong);
}

#[test]
fn a_payload_in_utf16_text_is_found_at_its_utf16_offset() {
    let mut wrong = Vec::new();
    for &(name, kind) in PAYLOADS {
        let bin = sample(name);
        // One wrapping of each shape: inline, wrapped lines, JSON escapes.
        let all = wrappings(&bin);
        for w in all.iter().filter(|w| {
            [
                "raw block inside prose",
                "PEM block",
                "MIME part, 76 columns, CRLF",
                "JSON string with \\n every 76",
            ]
            .contains(&w.name.as_str())
        }) {
            for le in [true, false] {
                let text = utf16(&w.text, le);
                let what = format!("{name} / {} / UTF-16{}", w.name, if le { "LE" } else { "BE" });
                // The text is ASCII: character n is at byte 2 + 2n (after the BOM).
                wrong.extend(expect_payload(&what, &text, kind, 2 + 2 * w.offset));
            }
        }
    }
    assert_none_wrong(&wrong);
}

#[test]
fn the_elf_sample_in_utf16le_prose() {
    let b64 = STANDARD.encode(sample("elf-x86_64"));
    let prose = String::from_utf8(sample("text-utf8-prose.txt")).unwrap();
    let text = format!("{prose}\nAttached: {b64}\nThanks, café.\n");
    let at = text.find(&b64).unwrap();
    let content = utf16(&text, true);
    // `café` and `naïve` are one UTF-16 unit each, so the byte offset is not
    // simply twice the UTF-8 offset: count units.
    let units = text[..at].encode_utf16().count();
    let got = sniff_bytes(&content, CAP);
    assert_eq!(got.kind, Kind::Elf);
    assert_eq!(got.reason, Some(Reason::ContentEmbeddedExecutable));
    assert_eq!(got.offset, Some(2 + 2 * units as u64));
    assert_eq!(streamed(&content, 5), got);
}

#[test]
fn a_payload_on_the_line_after_a_short_word() {
    // Ordinary prose puts a line break right before a base64 block; the last
    // word of that line may be one to three letters long. The offset must
    // still be where the base64 begins, not the line break before it.
    let b64 = STANDARD.encode(sample("elf-x86_64"));
    let mut wrong = Vec::new();
    for before in [
        "a\n",
        "is\n",
        "the\n",
        "here\n",
        "x ab\n",
        "see:\nthe\n",
        "a\r\n",
        "abc\r\n",
        "it is\n  ",
        "Zürich\nAa\n",
    ] {
        let w = wrapped(format!("after {before:?}"), before, &b64, "\n");
        wrong.extend(expect_payload(&w.name, w.text.as_bytes(), Kind::Elf, w.offset));
    }
    assert_none_wrong(&wrong);
}

#[test]
fn base64_of_media_documents_and_databases_is_harmless() {
    let mut wrong = Vec::new();
    for name in HARMLESS {
        for w in wrappings(&sample(name)) {
            let what = format!("{name} / {}", w.name);
            wrong.extend(expect_accepted(&what, w.text.as_bytes(), Kind::Utf8Text));
            if w.name == "PEM block" || w.name == "raw block inside prose" {
                wrong.extend(expect_accepted(
                    &format!("{what} / UTF-16LE"),
                    &utf16(&w.text, true),
                    Kind::Utf16LeText,
                ));
            }
        }
    }
    assert_none_wrong(&wrong);
}

/// Deterministic pseudo-random bytes (splitmix64).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn base64_of_a_megabyte_of_random_bytes_is_harmless() {
    let mut wrong = Vec::new();
    let random = random_bytes(1 << 20, 1);
    for w in wrappings(&random) {
        wrong.extend(expect_accepted(&format!("random / {}", w.name), w.text.as_bytes(), Kind::Utf8Text));
    }
    assert_none_wrong(&wrong);
}

#[test]
fn signatures_planted_inside_random_bytes_are_harmless() {
    // Real headers (a zip, an MZ/PE, an ELF) planted in the middle of random
    // bytes, on a 3-byte boundary so the base64 groups line up with them, but
    // never where a wrapped line begins (every 48 bytes for 64 columns, 57 for
    // 76, 45 for 60): only a payload's start counts.
    let mut random = random_bytes(1 << 20, 2);
    let mut wrong = Vec::new();
    for (name, at) in [("zip-text.zip", 300_003usize), ("pe-w32.exe", 500_010), ("elf-x86_64", 700_011)] {
        assert!(at.is_multiple_of(3));
        assert!(![48, 57, 45].iter().any(|w| at.is_multiple_of(*w)), "{at} starts a wrapped line");
        let bin = sample(name);
        let header = &bin[..bin.len().min(512)];
        random[at..at + header.len()].copy_from_slice(header);
    }
    assert_eq!(&random[300_003..300_007], b"PK\x03\x04");
    assert_eq!(&random[500_010..500_012], b"MZ");
    assert_eq!(&random[700_011..700_015], b"\x7fELF");
    for w in wrappings(&random) {
        wrong.extend(expect_accepted(&format!("planted / {}", w.name), w.text.as_bytes(), Kind::Utf8Text));
    }
    assert_none_wrong(&wrong);
}

#[test]
fn text_samples_that_carry_base64_are_harmless() {
    let mut wrong = Vec::new();
    let mut all = String::new();
    for name in TEXT_WITH_BASE64 {
        let text = String::from_utf8(sample(name)).unwrap();
        wrong.extend(expect_accepted(name, text.as_bytes(), Kind::Utf8Text));
        all.push_str(&text);
        all.push('\n');
    }
    wrong.extend(expect_accepted("all of them, one after another", all.as_bytes(), Kind::Utf8Text));
    assert_none_wrong(&wrong);
}

#[test]
fn jwts_hex_and_prose_are_harmless() {
    let mut wrong = Vec::new();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT","kid":"2024-06-01"}"#);
    let claims = URL_SAFE_NO_PAD.encode(
        br#"{"sub":"1234567890","name":"A Person","iat":1700000000,"exp":1700003600,"scope":"read write admin"}"#,
    );
    let signature = URL_SAFE_NO_PAD.encode(random_bytes(256, 3));
    let jwt = format!("{header}.{claims}.{signature}");
    wrong.extend(expect_accepted("a JWT", jwt.as_bytes(), Kind::Utf8Text));
    wrong.extend(expect_accepted(
        "a JWT in a header",
        format!("Authorization: Bearer {jwt}\r\n").as_bytes(),
        Kind::Utf8Text,
    ));
    let hex: String = random_bytes(32 * 1024, 4).iter().map(|b| format!("{b:02x}")).collect();
    wrong.extend(expect_accepted("64 KiB of hex", hex.as_bytes(), Kind::Utf8Text));
    wrong.extend(expect_accepted("hex lines", wrap(&hex, 64, "\n").as_bytes(), Kind::Utf8Text));
    let hex_upper = hex.to_uppercase();
    wrong.extend(expect_accepted("upper-case hex", hex_upper.as_bytes(), Kind::Utf8Text));
    let prose = String::from_utf8(sample("text-utf8-prose.txt")).unwrap();
    wrong.extend(expect_accepted("prose", prose.repeat(200).as_bytes(), Kind::Utf8Text));
    let identifiers =
        "ThisIsAVeryLongIdentifierNameThatGoesOnAndOn_withSnakeCase_and_Digits0123456789 ".repeat(100);
    wrong.extend(expect_accepted("long identifiers", identifiers.as_bytes(), Kind::Utf8Text));
    assert_none_wrong(&wrong);
}

// Adversarial inputs: shaped to make a finder that re-examines text
// quadratic. No timing assertions; they must complete and answer.

const BIG: usize = 8 << 20;

#[test]
fn eight_mebibytes_of_one_letter() {
    let text = vec![b'A'; BIG];
    assert_eq!(sniff_bytes(&text, CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
}

#[test]
fn eight_mebibytes_of_mz_lines() {
    // `TVqQ` is the base64 of `MZ\x90`: every 4-character line starts an MZ.
    let text = b"TVqQ\n".repeat(BIG / 5);
    assert_eq!(sniff_bytes(&text, CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
}

#[test]
fn eight_mebibytes_of_json_line_escapes() {
    let text = b"\\n".repeat(BIG / 2);
    assert_eq!(sniff_bytes(&text, CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
    let text = b"\\r\\n".repeat(BIG / 4);
    assert_eq!(sniff_bytes(&text, CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
}

#[test]
fn lines_of_fifteen_and_sixteen_base64_characters() {
    // The narrowest lines the finder follows: every line starts a candidate.
    let b64 = STANDARD_NO_PAD.encode(random_bytes(3 << 20, 5));
    for width in [15, 16] {
        let text = wrap(&b64, width, "\n");
        let got = sniff_bytes(text.as_bytes(), CAP);
        // Only that it answers: whether random lines stay harmless is
        // `random_base64_in_narrow_lines_is_harmless`.
        assert!(got.accepted() || got.offset.is_some(), "width {width}: {got:?}");
    }
    // The same line over and over: `TVqQAAMAAAAEAAA` is the start of a PE,
    // `f0VMRgIBAQAAAAAA` of an ELF (found on the first line).
    for line in ["TVqQAAMAAAAEAAA", "TVqQAAMAAAAEAAAA", "AAAAAAAAAAAAAAA", "f0VMRgIBAQAAAAAA"] {
        let text = format!("{line}\n").repeat(BIG / (line.len() + 1));
        let got = sniff_bytes(text.as_bytes(), CAP);
        assert!(got.accepted() || got.offset == Some(0), "{line}: {got:?}");
    }
    let got = sniff_bytes(format!("{}\n", "f0VMRgIBAQAAAAAA").repeat(1000).as_bytes(), CAP);
    assert_eq!((got.kind, got.offset), (Kind::Elf, Some(0)));
}

#[test]
fn random_base64_in_narrow_lines_is_harmless() {
    // Every wrapped line is a candidate, so a long MIME or PEM blob of
    // compressed data (JPEG, zip-less random bytes) is judged at thousands of
    // starts: signatures must be rare in random bytes (embedded.rs promises
    // less than once in 2^27).
    let b64 = STANDARD_NO_PAD.encode(random_bytes(3 << 20, 5));
    for width in [15, 16, 64, 76] {
        let text = wrap(&b64, width, "\n");
        let got = sniff_bytes(text.as_bytes(), CAP);
        assert_eq!(got, Finding { kind: Kind::Utf8Text, reason: None, offset: None }, "width {width}");
    }
}

#[test]
fn payload_signatures_are_rare_in_random_bytes() {
    // Every value of the first three bytes, each with a few random tails:
    // 2^26 windows. At less than one match in 2^27 random windows, a handful
    // of matches at most; a signature with only ~20 fixed bits matches dozens.
    use gatehouse_content::magic::{PayloadPrefix, payload_prefix};
    let mut hits = Vec::new();
    for seed in 0..4 {
        let mut window = random_bytes(9, 100 + seed);
        for head in 0u32..1 << 24 {
            window[..3].copy_from_slice(&head.to_be_bytes()[1..]);
            if let Some(PayloadPrefix::Kind(kind)) = payload_prefix(&window) {
                hits.push((kind, [window[0], window[1], window[2]]));
            }
        }
    }
    let mut kinds: Vec<Kind> = hits.iter().map(|h| h.0).collect();
    kinds.dedup();
    assert!(
        hits.len() <= 4,
        "{} of 2^26 random windows match ({kinds:?}), e.g. {:02x?}",
        hits.len(),
        &hits[..4]
    );
}

/// 300 bytes that look like a tar header's first part: `ustar` at 257 and
/// nothing else of tar (no valid version, no checksum).
fn almost_tar() -> Vec<u8> {
    let mut b = random_bytes(300, 6);
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"\0\0");
    b
}

#[test]
fn every_line_an_almost_tar_run() {
    let b64 = STANDARD.encode(almost_tar());
    assert_eq!(b64.len(), 400);
    // One run per line, and one continued run whose every line is a candidate.
    for sep in ["\n", "\nid: ", "\n- "] {
        let text = format!("{b64}{sep}").repeat(BIG / (b64.len() + sep.len()));
        let got = sniff_bytes(text.as_bytes(), CAP);
        assert_eq!(got, Finding { kind: Kind::Utf8Text, reason: None, offset: None }, "{sep:?}");
    }
    // With the full magic each line would be a tar payload: the first is found.
    let mut tar = almost_tar();
    tar[257..265].copy_from_slice(b"ustar\x0000");
    let b64 = STANDARD.encode(tar);
    let text = format!("id: {b64}\n").repeat(1000);
    let got = sniff_bytes(text.as_bytes(), CAP);
    assert_eq!((got.kind, got.offset), (Kind::Tar, Some(4)), "{got:?}");
}

#[test]
fn tiny_and_truncated_inputs_get_clear_verdicts() {
    assert_eq!(sniff_bytes(b"", CAP), Finding { kind: Kind::Empty, reason: None, offset: None });
    assert_eq!(streamed(b"", 1), Finding { kind: Kind::Empty, reason: None, offset: None });
    assert_eq!(sniff_bytes(b"a", CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
    assert_eq!(sniff_bytes(b"\n", CAP), Finding { kind: Kind::Utf8Text, reason: None, offset: None });
    let nul = sniff_bytes(b"\0", CAP);
    assert_eq!((nul.kind, nul.reason, nul.offset), (Kind::Binary, Some(Reason::ContentNotText), Some(0)));
    let high = sniff_bytes(b"\xff", CAP);
    assert_eq!((high.reason, high.offset), (Some(Reason::ContentNotText), Some(0)));
    let text_then_nul = sniff_bytes(b"abc\0", CAP);
    assert_eq!((text_then_nul.reason, text_then_nul.offset), (Some(Reason::ContentNotText), Some(3)));

    // The first bytes of every executable and archive sample.
    let mut wrong = Vec::new();
    for &(name, _) in PAYLOADS {
        let bin = sample(name);
        for len in 1..=8 {
            let head = &bin[..len];
            let got = sniff_bytes(head, CAP);
            for chunk in [1, 2] {
                if streamed(head, chunk) != got {
                    wrong.push(format!("{name}[..{len}]: chunks of {chunk} disagree with {got:?}"));
                }
            }
            let is_text = std::str::from_utf8(head)
                .is_ok_and(|s| !s.bytes().any(|b| matches!(b, 0..=6 | 0x0e..=0x1a | 0x1c..=0x1f | 0x7f)));
            let ok = match got.reason {
                None => is_text && got.kind == Kind::Utf8Text,
                Some(Reason::ContentNotText | Reason::ContentExecutable | Reason::ContentArchive) => {
                    got.offset.is_some()
                }
                Some(_) => false,
            };
            if !ok {
                wrong.push(format!("{name}[..{len}] ({head:02x?}): {got:?}"));
            }
        }
        // Three bytes are never mistaken for text unless they are text.
        let got = sniff_bytes(&bin[..3], CAP);
        if std::str::from_utf8(&bin[..3]).is_err() && got.accepted() {
            wrong.push(format!("{name}[..3] accepted: {got:?}"));
        }
    }
    assert_none_wrong(&wrong);
}

#[test]
fn payloads_shorter_than_the_minimum_are_not_judged() {
    // Documented limit: a run of fewer than 24 base64 characters is not a
    // payload. (Whitespace joins words into one run, so the run is ended by
    // a comma here: `x {short} y` is a run of 25 characters.)
    let elf = sample("elf-x86_64");
    let short = STANDARD_NO_PAD.encode(&elf[..17]);
    assert!(short.len() < 24);
    assert!(sniff_bytes(format!("x, {short}, y").as_bytes(), CAP).accepted());
    let long = STANDARD_NO_PAD.encode(&elf[..18]);
    assert_eq!(long.len(), 24);
    let got = sniff_bytes(format!("x {long} y").as_bytes(), CAP);
    assert_eq!((got.kind, got.offset), (Kind::Elf, Some(2)), "{got:?}");
}

#[test]
fn signatures_longer_than_nine_bytes_are_found() {
    // bzip2 is `BZh1`-`BZh9` then the block magic `1AY&SY` (10 bytes); an
    // ASCII cpio header is `070701`/`070707` then digits (12 bytes checked).
    use gatehouse_content::embedded::find;
    let mut bzip2 = b"BZh91AY&SY".to_vec();
    bzip2.extend(random_bytes(40, 7));
    let mut newc = b"070701000000000000000000".to_vec();
    newc.extend(random_bytes(40, 8));
    for (bin, kind) in [(bzip2, Kind::Bzip2), (newc, Kind::Cpio)] {
        let text = format!("x {}", STANDARD.encode(&bin));
        assert_eq!(find(text.as_bytes()).map(|p| (p.kind, p.offset)), Some((kind, 2)), "{text}");
    }
}

#[test]
fn json_escaped_slashes_in_the_first_characters() {
    // JSON may escape `/` as `\/`. In the first characters of a payload the
    // escape must neither hide it nor move its offset past the backslash.
    use gatehouse_content::embedded::find;
    for (name, kind) in
        [("macho-arm64.so", Kind::MachO), ("zstd-text.zst", Kind::Zstd), ("xz-text.xz", Kind::Xz)]
    {
        let b64 = STANDARD.encode(&sample(name)[..48]).replace('/', "\\/");
        let text = format!("{{\"f\": \"{b64}\"}}");
        assert_eq!(find(text.as_bytes()).map(|p| (p.kind, p.offset)), Some((kind, 7)), "{text}");
    }
    // Found when streamed byte by byte, missed whole: the zstd magic behind
    // one glued letter, with a `\/` among the first characters.
    let text = br"+AKLUv\/WRZAWULAHZdSx6wJx2s";
    let mut streamed = gatehouse_content::embedded::PayloadFinder::new();
    for b in text.chunks(1) {
        streamed.update(b);
    }
    let streamed = streamed.finish().map(|p| (p.kind, p.offset));
    assert_eq!(streamed, Some((Kind::Zstd, 2)));
    assert_eq!(find(text).map(|p| (p.kind, p.offset)), streamed, "whole and streamed disagree");
}

#[test]
fn an_escaped_slash_glued_before_a_payload() {
    // `\/` is one junk character glued before the ELF's base64; the payload
    // begins at the `f`, however the text is chunked.
    use gatehouse_content::embedded::{PayloadFinder, find};
    for text in [
        &br"x \/f0VMRgIBAQAAAAAAAAAAAAMA"[..],
        br"x ==\/f0VMRgIBAQAAAAAAAAAAAAMA",
        br#"{"f": "\/f0VMRgIBAQAAAAAAAAAAAAMA"}"#,
    ] {
        let at = text.windows(4).position(|w| w == b"f0VM").unwrap() as u64;
        assert_eq!(find(text).map(|p| (p.kind, p.offset)), Some((Kind::Elf, at)), "whole");
        for size in 1..8 {
            let mut f = PayloadFinder::new();
            for c in text.chunks(size) {
                f.update(c);
            }
            assert_eq!(f.finish().map(|p| (p.kind, p.offset)), Some((Kind::Elf, at)), "chunks of {size}");
        }
    }
}
