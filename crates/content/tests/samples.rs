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

// ------------------------------------------------ signatures that text may hold by chance
//
// Each signature whose bytes are all valid text is paired: a minimal real
// structure built here (refused as its format) and text that carries the
// signature where it belongs (accepted as text).

/// Valid UTF-8 prose of exactly `len` bytes, without a base64 run long enough to be a payload.
fn prose(len: usize) -> Vec<u8> {
    let line = "The quick brown fox jumps over the lazy dog; ünïcödé too.\n";
    let mut text = line.repeat(len / line.len() + 1);
    let mut cut = len;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    let mut bytes = text.into_bytes();
    bytes.resize(len, b'.');
    bytes
}

/// The verdict on `content`, checked to be the same whole and in chunks.
#[track_caller]
fn verdict(content: &[u8]) -> (Kind, Option<Reason>) {
    let whole = sniff_bytes(content, CAP);
    for chunk in [1, 7, 4096] {
        assert_eq!(streamed(content, chunk), whole, "chunks of {chunk}");
    }
    (whole.kind, whole.reason)
}

const TEXT: (Kind, Option<Reason>) = (Kind::Utf8Text, None);
const ISO: (Kind, Option<Reason>) = (Kind::Iso9660, Some(Reason::ContentArchive));
const AR: (Kind, Option<Reason>) = (Kind::Ar, Some(Reason::ContentArchive));
const ZIP: (Kind, Option<Reason>) = (Kind::Zip, Some(Reason::ContentArchive));

/// A both-endian field (ECMA-119 7.2.3 / 7.3.3): little-endian, then big-endian.
fn both_u16(v: u16) -> Vec<u8> {
    [v.to_le_bytes(), v.to_be_bytes()].concat()
}

fn both_u32(v: u32) -> Vec<u8> {
    [v.to_le_bytes(), v.to_be_bytes()].concat()
}

/// A minimal ISO 9660 image as ECMA-119 lays it out: a 32 KiB system area,
/// the primary volume descriptor in sector 16, the set terminator in sector
/// 17, and the root directory in sector 18 (19 sectors of 2 KiB).
fn iso_image() -> Vec<u8> {
    const SECTOR: usize = 2048;
    let mut b = vec![0u8; 19 * SECTOR];
    let put = |b: &mut Vec<u8>, off: usize, bytes: &[u8]| b[off..off + bytes.len()].copy_from_slice(bytes);
    let pvd = 16 * SECTOR;
    put(&mut b, pvd, b"\x01CD001\x01\x00");
    put(&mut b, pvd + 8, format!("{:32}", "LINUX").as_bytes()); // system identifier
    put(&mut b, pvd + 40, format!("{:32}", "GATEHOUSE").as_bytes()); // volume identifier
    put(&mut b, pvd + 80, &both_u32(19)); // volume space size
    put(&mut b, pvd + 120, &both_u16(1)); // volume set size
    put(&mut b, pvd + 124, &both_u16(1)); // volume sequence number
    put(&mut b, pvd + 128, &both_u16(2048)); // logical block size
    put(&mut b, pvd + 132, &both_u32(10)); // path table size
    // The root directory record (34 bytes): its extent is sector 18.
    let mut root = vec![34, 0];
    root.extend(both_u32(18));
    root.extend(both_u32(2048));
    root.extend([126, 1, 1, 0, 0, 0, 0, 0x02, 0, 0]);
    root.extend(both_u16(1));
    root.extend([1, 0]);
    put(&mut b, pvd + 156, &root);
    for field in [190, 318, 446, 574] {
        put(&mut b, pvd + field, &[b' '; 128]); // set, publisher, preparer, application
    }
    put(&mut b, pvd + 702, &[b' '; 37 * 3]); // copyright, abstract, bibliographic files
    for date in [813, 830, 847, 864] {
        put(&mut b, pvd + date, b"0000000000000000\x00");
    }
    b[pvd + 881] = 1; // file structure version
    put(&mut b, 17 * SECTOR, b"\xffCD001\x01");
    put(&mut b, 18 * SECTOR, &root);
    b
}

#[test]
fn iso9660_needs_a_volume_descriptor_not_just_its_identifier() {
    assert_eq!(verdict(&iso_image()), ISO);

    // Fail closed: a descriptor whose type byte says "volume descriptor" is
    // refused however wrong the rest is (lenient readers mount it).
    let mut sloppy = iso_image();
    sloppy[0x8000 + 6] = 0; // version
    sloppy[0x8000 + 84] ^= 0xff; // the big-endian half of the volume size
    sloppy[0x8000 + 128..0x8000 + 132].copy_from_slice(&[0, 2, 0, 2]); // block size 512 / 2
    sloppy[0x8000 + 881] = 7;
    assert_eq!(verdict(&sloppy), ISO);
    // A boot record first, the primary descriptor after it.
    let mut boot = iso_image();
    boot.copy_within(0x8000..0x8800, 0x8800);
    boot[0x8000..0x8800].fill(0);
    boot[0x8000..0x8007].copy_from_slice(b"\x00CD001\x01");
    assert_eq!(verdict(&boot), ISO);
    // Truncated after its descriptor: still an image.
    assert_eq!(verdict(&iso_image()[..0x8800]), ISO);
    // Not text, identifier without a descriptor: still named as the format.
    let mut odd = prose(0x8800);
    odd[0x8001..0x8006].copy_from_slice(b"CD001");
    odd[100] = 0;
    assert_eq!(verdict(&odd), ISO);

    // Text that holds `CD001` where descriptors go is text.
    for slots in [&[0x8001][..], &[0x8001, 0x8801, 0x9001], &[0x8801], &[0x9001]] {
        let mut text = prose(0x9800);
        for &at in slots {
            text[at..at + 5].copy_from_slice(b"CD001");
        }
        assert!(std::str::from_utf8(&text).is_ok());
        assert_eq!(verdict(&text), TEXT, "CD001 at {slots:x?}");
    }
}

/// An `ar` member header: name, mtime, uid, gid, mode, size, then "`\n".
fn ar_member(name: &str, data: &str) -> String {
    format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n{data}", 0, 0, 0, 644, data.len())
}

#[test]
fn ar_needs_its_member_header() {
    let archive = format!("!<arch>\n{}", ar_member("notes.txt/", "just text\n"));
    assert_eq!(verdict(archive.as_bytes()), AR);
    // An empty archive is the global header alone.
    assert_eq!(verdict(b"!<arch>\n"), AR);
    // Not text: named as the format whatever follows.
    assert_eq!(verdict(b"!<arch>\n\x00\x01\x02"), AR);
    // Text that starts with the global header is text.
    let mut text = b"!<arch>\n".to_vec();
    text.extend(prose(400));
    assert_eq!(verdict(&text), TEXT);
    assert_eq!(verdict(b"!<arch>\nis how an ar archive starts.\n"), TEXT);
}

#[test]
fn zip_spanning_marker_needs_its_local_header() {
    // `PK\x07\x08` (the spanning marker) is made of text characters (BEL, BS).
    let mut spanned = b"PK\x07\x08".to_vec();
    spanned.extend(sample("zip-text.zip"));
    assert_eq!(verdict(&spanned), ZIP);
    let mut text = b"PK\x07\x08".to_vec();
    text.extend(prose(300));
    assert_eq!(verdict(&text), TEXT);
}
