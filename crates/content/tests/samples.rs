//! Every sample in `tests/samples/` (real files made by real tools; see its
//! SOURCES.md) gets the verdict its format calls for, whole and streamed in
//! small chunks.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::PathBuf;

use gatehouse_content::{Finding, Kind, Sniffer, sniff_bytes};
use gatehouse_core::Reason;

const CAP: u64 = 1 << 30;

fn sample(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (file, kind, reason): `None` means accepted as text.
const EXPECTED: &[(&str, Kind, Option<Reason>)] = {
    use Kind::*;
    const E: Option<Reason> = Some(Reason::ContentExecutable);
    const A: Option<Reason> = Some(Reason::ContentArchive);
    const N: Option<Reason> = Some(Reason::ContentNotText);
    &[
        ("elf-x86_64", Elf, E),
        ("elf-x86_64-shared.so", Elf, E),
        ("pe-w32.exe", Pe, E),
        ("macho-arm64.so", MachO, E),
        ("macho-fat-universal2.so", MachOFat, E),
        ("wasm-module.wasm", Wasm, E),
        ("java-Hello.class", JavaClass, E),
        ("dex-classes.dex", Dex, E),
        ("zip-text.zip", Zip, A),
        ("zip-empty.zip", Zip, A),
        ("jar-hello.jar", Zip, A),
        ("docx-python-docx.docx", Zip, A),
        ("xlsx-openpyxl.xlsx", Zip, A),
        ("odt-odfpy.odt", Zip, A),
        ("gzip-text.gz", Gzip, A),
        ("bzip2-text.bz2", Bzip2, A),
        ("xz-text.xz", Xz, A),
        ("zstd-text.zst", Zstd, A),
        ("lz4-frame-text.lz4", Lz4, A),
        ("7z-text.7z", SevenZip, A),
        ("rar4-rarfile-rar3-subdirs.rar", Rar, A),
        ("rar5-rarfile-rar5-subdirs.rar", Rar, A),
        ("tar-ustar.tar", Tar, A),
        ("tar-gnu.tar", Tar, A),
        ("tar-text-only.tar", Tar, A),
        ("tar-gz.tar.gz", Gzip, A),
        ("ar-text-only.a", Ar, A),
        ("ar-static-lib.a", Ar, A),
        ("deb-trivial.deb", Ar, A),
        ("cab-gcab.cab", Cab, A),
        ("rpm-noarch.rpm", Rpm, A),
        ("cpio-newc.cpio", Cpio, A),
        ("cpio-odc.cpio", Cpio, A),
        ("cpio-bin.cpio", Cpio, A),
        ("iso9660.iso", Iso9660, A),
        ("cfb-wixl.msi", Cfb, A),
        ("png-16x16.png", Png, N),
        ("jpeg-16x16.jpg", Jpeg, N),
        ("gif-16x16.gif", Gif, N),
        ("webp-16x16.webp", Webp, N),
        ("bmp-16x16.bmp", Bmp, N),
        ("tiff-16x16.tif", Tiff, N),
        ("ico-16x16.ico", Ico, N),
        ("pdf-fpdf2.pdf", Pdf, N),
        ("wav-sine.wav", Wav, N),
        ("flac-sine.flac", Flac, N),
        ("ogg-vorbis-sine.ogg", Ogg, N),
        ("webm-vorbis-sine.webm", Matroska, N),
        ("mp4-mpeg4-16x16.mp4", Mp4, N),
        ("sqlite-db.sqlite", Sqlite, N),
        ("font-dejavusans-subset.ttf", TrueType, N),
        ("font-dejavusans-subset.woff", Woff, N),
        ("font-dejavusans-subset.woff2", Woff2, N),
        ("latin1-accented.txt", Binary, N),
        ("text-utf8-prose.txt", Utf8Text, None),
        ("text-utf8-bom.txt", Utf8Text, None),
        ("text-utf16le-bom.txt", Utf16LeText, None),
        ("text-utf16be-bom.txt", Utf16BeText, None),
        ("svg-handwritten.svg", Utf8Text, None),
        ("svg-imagemagick-potrace.svg", Utf8Text, None),
        ("svg-embedded-png.svg", Utf8Text, None),
        ("ansi-colored.log", Utf8Text, None),
        ("pem-ed25519-cert.pem", Utf8Text, None),
        ("pem-ed25519-key.pem", Utf8Text, None),
        ("openssh-ed25519", Utf8Text, None),
        ("openssh-ed25519.pub", Utf8Text, None),
        ("jwt-request.txt", Utf8Text, None),
        ("js-inline-sourcemap.js", Utf8Text, None),
        ("text-starts-MZ.txt", Utf8Text, None),
        ("text-starts-PK.txt", Utf8Text, None),
        ("text-starts-BZh.txt", Utf8Text, None),
        ("json-base64-png.json", Utf8Text, None),
        ("polyglot-text-zip", Zip, A),
    ]
};

fn streamed(content: &[u8], chunk: usize) -> Finding {
    let mut s = Sniffer::new(CAP);
    for c in content.chunks(chunk) {
        s.update(c);
    }
    s.finish()
}

#[test]
fn every_sample_gets_its_verdict() {
    let mut wrong = Vec::new();
    for &(name, kind, reason) in EXPECTED {
        let content = sample(name);
        let got = sniff_bytes(&content, CAP);
        if (got.kind, got.reason) != (kind, reason) {
            wrong.push(format!("{name}: expected {kind} {reason:?}, got {got:?}"));
        }
        for chunk in [1, 7, 4096] {
            let s = streamed(&content, chunk);
            if s != got {
                wrong.push(format!("{name}: chunks of {chunk} gave {s:?}, whole gave {got:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_sample_is_in_the_table() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "SOURCES.md" || name == "make-samples.sh" {
            continue;
        }
        assert!(EXPECTED.iter().any(|e| e.0 == name), "{name} has no expected verdict");
    }
}

#[test]
fn the_polyglot_is_named_where_the_archive_begins() {
    let content = sample("polyglot-text-zip");
    let zip = sample("zip-text.zip");
    let got = sniff_bytes(&content, CAP);
    if content.ends_with(&zip) {
        assert_eq!(got.offset, Some((content.len() - zip.len()) as u64));
    }
    assert_eq!(got.kind, Kind::Zip);
}

#[test]
fn a_small_cap_gives_the_same_verdict_however_the_content_is_chunked() {
    for &(name, _, _) in EXPECTED {
        let content = sample(name);
        for cap in [0, 1, 100, 600, 40_000] {
            let whole = sniff_bytes(&content, cap);
            for chunk in [1, 7, 4096] {
                let mut s = Sniffer::new(cap);
                for c in content.chunks(chunk) {
                    s.update(c);
                }
                assert_eq!(s.finish(), whole, "{name}, cap {cap}, chunks of {chunk}");
            }
        }
    }
}

/// Found by the `content_sniff` fuzz target: UTF-16 text whose first bad unit
/// began in the previous one-byte chunk lost a byte of the boundary window.
#[test]
fn fuzz_regression_boundary_window_across_chunks() {
    let data: &[u8] = &[
        0xff, 0xfe, 0xff, 0xff, 0xff, 0x3f, 0xff, 0xff, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe,
        0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x54, 0xc7, 0x71, 0x1f,
        0x71, 0x71, 0x01, 0x7e, 0x00, 0x00, 0x00, 0x00, 0xfe, 0xfe, 0xfe, 0xff, 0x16, 0x00, 0x00, 0x00, 0xff,
        0xfb, 0xfd,
    ];
    let whole = sniff_bytes(data, CAP);
    assert_eq!(streamed(data, 1), whole);
}

/// Found by the `content_sniff` fuzz target: a UTF-8 lead byte followed by
/// ASCII was judged broken only once a third byte arrived (or at the end), so
/// one-byte chunks lost the bytes around it.
#[test]
fn fuzz_regression_broken_sequence_is_bad_at_once() {
    let data = b"pxMZng++\\\xe2/";
    let whole = sniff_bytes(data, CAP);
    assert_eq!(whole.kind, Kind::MsDos);
    for size in 1..data.len() {
        assert_eq!(streamed(data, size), whole, "chunks of {size}");
    }
}
