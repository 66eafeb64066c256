//! OSV `all.zip` exports: `osv::load_dir` reads a zip archive (given
//! directly, or found in a directory) like the directory of its `*.json`
//! files, and treats the archive as untrusted input.
//!
//! The archives are built here with the `zip` crate's writer from the real
//! advisories under `tests/fixtures/osv/` (see its SOURCES.md), one
//! `<Ecosystem>/all.zip` per ecosystem with `<ID>.json` at the root, as OSV
//! publishes them. Hostile archives are made by editing a well-formed one's
//! bytes: a header that lies about an entry's size, a cut-off file, a flipped
//! data byte, the encryption flag.

#![allow(missing_docs, clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use gatehouse_deps::osv::{self, Advisory, LoadError, LoadErrorCode, MAX_ADVISORY_BYTES};
use zip::CompressionMethod;
use zip::write::{SimpleFileOptions, ZipWriter};

const ECOSYSTEMS: [&str; 5] = ["Go", "PyPI", "RubyGems", "crates.io", "npm"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/osv")
}

enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
}

fn zip_bytes(entries: &[Entry<'_>], method: CompressionMethod) -> Vec<u8> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(method);
    for entry in entries {
        match entry {
            Entry::File(name, bytes) => {
                writer.start_file(*name, options).unwrap();
                writer.write_all(bytes).unwrap();
            }
            Entry::Dir(name) => writer.add_directory(*name, options).unwrap(),
        }
    }
    writer.finish().unwrap().into_inner()
}

/// `(<ID>.json, bytes)` for every fixture advisory of one ecosystem.
fn fixture_files(ecosystem: &str) -> Vec<(String, Vec<u8>)> {
    osv::json_files(&fixtures().join(ecosystem))
        .unwrap()
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_str().unwrap().to_owned(), fs::read(&p).unwrap()))
        .collect()
}

/// OSV's export for one ecosystem: `<ID>.json` entries at the root, deflated.
fn export_zip(ecosystem: &str) -> Vec<u8> {
    let files = fixture_files(ecosystem);
    let entries: Vec<Entry<'_>> = files.iter().map(|(n, b)| Entry::File(n, b)).collect();
    zip_bytes(&entries, CompressionMethod::Deflated)
}

fn sorted(mut advisories: Vec<Advisory>) -> Vec<Advisory> {
    advisories.sort_by(|a, b| a.id.cmp(&b.id));
    advisories
}

fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

fn entry_name(zip: &Path, entry: &str) -> String {
    format!("{}!{entry}", zip.display())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// The offsets of the first entry's local header and central directory
/// header, read from the end-of-central-directory record (no archive comment).
fn first_entry_headers(zip: &[u8]) -> (usize, usize) {
    let eocd = zip.len() - 22;
    assert_eq!(u32_at(zip, eocd), 0x0605_4b50, "end of central directory");
    let central = u32_at(zip, eocd + 16) as usize;
    assert_eq!(u32_at(zip, central), 0x0201_4b50, "central directory header");
    let local = u32_at(zip, central + 42) as usize;
    assert_eq!(u32_at(zip, local), 0x0403_4b50, "local file header");
    (local, central)
}

#[test]
fn an_export_zip_loads_the_same_advisories_as_the_directory() {
    let expected = sorted(osv::load_dir(&fixtures()).unwrap());
    assert_eq!(expected.len(), 34, "every fixture advisory");

    let dir = tempfile::tempdir().unwrap();
    for ecosystem in ECOSYSTEMS {
        write(&dir.path().join(ecosystem).join("all.zip"), &export_zip(ecosystem));
    }
    assert_eq!(sorted(osv::load_dir(dir.path()).unwrap()), expected);
    assert_eq!(sorted(osv::load_dir_all(dir.path()).unwrap()), expected);

    // One archive given directly is a database of its own.
    let npm_zip = dir.path().join("npm/all.zip");
    let npm_dir = sorted(osv::load_dir(&fixtures().join("npm")).unwrap());
    assert_eq!(npm_dir.len(), 12);
    assert_eq!(sorted(osv::load_dir(&npm_zip).unwrap()), npm_dir);
    assert_eq!(sorted(osv::load_dir_all(&npm_zip).unwrap()), npm_dir);
}

#[test]
fn stored_entries_directories_and_other_entries() {
    // Stored (not deflated) entries read the same; directories, non-JSON
    // entries and JSON entries in subdirectories: only the last count.
    let files = fixture_files("crates.io");
    let mut entries = vec![Entry::Dir("advisories/"), Entry::File("README.md", b"not an advisory")];
    entries.push(Entry::File("advisories/RUSTSEC-2020-0053.json", &files[0].1));
    entries.extend(files[1..].iter().map(|(n, b)| Entry::File(n, b)));
    entries.push(Entry::File("notes.json.txt", b"{"));
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("crates.zip");
    write(&zip, &zip_bytes(&entries, CompressionMethod::Stored));
    assert_eq!(files[0].0, "RUSTSEC-2020-0053.json");
    assert_eq!(
        sorted(osv::load_dir(&zip).unwrap()),
        sorted(osv::load_dir(&fixtures().join("crates.io")).unwrap())
    );
}

#[test]
fn a_directory_mixing_json_files_and_zips() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in fixture_files("npm") {
        write(&dir.path().join("npm").join(name), &bytes);
    }
    for (name, bytes) in fixture_files("Go") {
        write(&dir.path().join(name), &bytes);
    }
    write(&dir.path().join("PyPI/all.zip"), &export_zip("PyPI"));
    write(&dir.path().join("more/RubyGems.zip"), &export_zip("RubyGems"));
    // A file that only looks like an archive by name elsewhere is not read.
    write(&dir.path().join("crates.io/all.zip.part"), b"partial download");

    let mut expected = Vec::new();
    for ecosystem in ["npm", "Go", "PyPI", "RubyGems"] {
        expected.extend(osv::load_dir(&fixtures().join(ecosystem)).unwrap());
    }
    assert_eq!(expected.len(), 12 + 5 + 9 + 5);
    assert_eq!(sorted(osv::load_dir(dir.path()).unwrap()), sorted(expected));
}

#[test]
fn a_zip_bomb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // One byte over the cap; deflates to a few kilobytes.
    let mut bomb = vec![b' '; usize::try_from(MAX_ADVISORY_BYTES).unwrap() + 1];
    bomb[0] = b'{';
    let honest = zip_bytes(&[Entry::File("bomb.json", &bomb)], CompressionMethod::Deflated);
    assert!(honest.len() < 100_000, "{} bytes", honest.len());

    // The header says how large it is: refused without inflating.
    let zip = dir.path().join("honest.zip");
    write(&zip, &honest);
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!(
        (err.code, err.source_name.as_str()),
        (LoadErrorCode::TooLarge, &*entry_name(&zip, "bomb.json"))
    );

    // The headers lie (100 bytes, in the local and the central header). The
    // loader reads at most the cap plus one byte whatever a header says
    // (`too_large`); the zip crate itself also stops at the declared size
    // (`zip`, "larger than its declared uncompressed size"). Either way the
    // entry is refused, by name, without inflating it whole.
    let mut lying = honest.clone();
    let (local, central) = first_entry_headers(&lying);
    lying[local + 22..local + 26].copy_from_slice(&100u32.to_le_bytes());
    lying[central + 24..central + 28].copy_from_slice(&100u32.to_le_bytes());
    let zip = dir.path().join("lying.zip");
    write(&zip, &lying);
    let err = osv::load_dir(&zip).unwrap_err();
    assert!(matches!(err.code, LoadErrorCode::TooLarge | LoadErrorCode::Zip), "{err}");
    assert_eq!(err.source_name, entry_name(&zip, "bomb.json"));
    assert!(err.message.contains("larger than") || err.message.contains("more than"), "{err}");
    let errors = osv::load_dir_all(&zip).unwrap_err();
    assert_eq!(errors, vec![err]);
}

#[test]
fn a_truncated_or_corrupt_zip_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let whole = export_zip("npm");
    for (name, bytes) in [
        ("half.zip", &whole[..whole.len() / 2]),
        ("no-end.zip", &whole[..whole.len() - 10]),
        ("empty.zip", &whole[..0]),
        ("text.zip", b"PK but not a zip".as_slice()),
    ] {
        let zip = dir.path().join(name);
        write(&zip, bytes);
        let err = osv::load_dir(&zip).unwrap_err();
        assert_eq!(err.code, LoadErrorCode::Zip, "{name}: {err}");
        assert_eq!(err.source_name, zip.display().to_string());
        assert_eq!(osv::load_dir_all(&zip).unwrap_err(), vec![err]);
    }

    // A flipped byte inside an entry's data: the checksum catches it, and
    // the error names the entry.
    let good = fs::read(fixtures().join("npm/GHSA-29mw-wpgm-hmr9.json")).unwrap();
    let mut stored = zip_bytes(&[Entry::File("GHSA-29mw-wpgm-hmr9.json", &good)], CompressionMethod::Stored);
    let at = stored.windows(good.len()).position(|w| w == good.as_slice()).unwrap() + good.len() / 2;
    stored[at] ^= 0x20;
    let zip = dir.path().join("flipped.zip");
    write(&zip, &stored);
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Zip, "{err}");
    assert_eq!(err.source_name, entry_name(&zip, "GHSA-29mw-wpgm-hmr9.json"));

    // The same in deflated data: a broken stream or a checksum mismatch.
    let mut deflated =
        zip_bytes(&[Entry::File("GHSA-29mw-wpgm-hmr9.json", &good)], CompressionMethod::Deflated);
    let (local, _) = first_entry_headers(&deflated);
    let data = local + 30 + "GHSA-29mw-wpgm-hmr9.json".len() + usize::from(deflated[local + 28]);
    deflated[data + 40] ^= 0xff;
    let zip = dir.path().join("flipped-deflate.zip");
    write(&zip, &deflated);
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Zip, "{err}");
    assert_eq!(err.source_name, entry_name(&zip, "GHSA-29mw-wpgm-hmr9.json"));
}

#[test]
fn a_bad_entry_is_named_by_zip_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixture_files("Go");
    let mut entries: Vec<Entry<'_>> = good.iter().map(|(n, b)| Entry::File(n, b)).collect();
    entries.insert(1, Entry::File("bad.json", b"{\"id\": \"X-1\", \"modified\": "));
    entries.push(Entry::File("shape.json", b"{\"modified\": \"2024-01-01T00:00:00Z\"}"));
    let zip = dir.path().join("x.zip");
    write(&zip, &zip_bytes(&entries, CompressionMethod::Deflated));

    let err = osv::load_dir(dir.path()).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Syntax);
    assert_eq!(err.source_name, entry_name(&zip, "bad.json"));
    assert!(err.source_name.ends_with("x.zip!bad.json"));
    assert!(err.to_string().starts_with(&format!("{}: not an OSV advisory", err.source_name)), "{err}");

    let errors = osv::load_dir_all(dir.path()).unwrap_err();
    let names: Vec<(&str, LoadErrorCode)> =
        errors.iter().map(|e: &LoadError| (e.source_name.as_str(), e.code)).collect();
    assert_eq!(
        names,
        vec![
            (&*entry_name(&zip, "bad.json"), LoadErrorCode::Syntax),
            (&*entry_name(&zip, "shape.json"), LoadErrorCode::Structure),
        ]
    );
}

#[test]
fn entry_names_are_labels_only() {
    // A name that climbs out of the directory, or carries control
    // characters, is only printed (escaped), never used as a path.
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    let zip = inner.join("x.zip");
    let good = fs::read(fixtures().join("npm/GHSA-29mw-wpgm-hmr9.json")).unwrap();
    write(
        &zip,
        &zip_bytes(
            &[Entry::File("../../escaped.json", &good), Entry::File("/abs/evil\n\u{1b}[31m.json", b"[]")],
            CompressionMethod::Deflated,
        ),
    );
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Structure);
    assert_eq!(err.source_name, entry_name(&zip, "/abs/evil\\n\\u{1b}[31m.json"));
    assert!(!err.to_string().contains('\n') && !err.to_string().contains('\u{1b}'));
    assert!(!dir.path().join("escaped.json").exists() && !inner.join("escaped.json").exists());

    // The climbing entry itself loads: its name is nothing but a label.
    write(&zip, &zip_bytes(&[Entry::File("../../escaped.json", &good)], CompressionMethod::Deflated));
    let loaded = osv::load_dir(&zip).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].id, "GHSA-29mw-wpgm-hmr9");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "nothing written beside the archive");
}

#[test]
fn an_encrypted_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = fs::read(fixtures().join("npm/GHSA-29mw-wpgm-hmr9.json")).unwrap();
    let mut bytes = zip_bytes(&[Entry::File("GHSA-29mw-wpgm-hmr9.json", &good)], CompressionMethod::Stored);
    // General-purpose flag bit 0, "encrypted", in the local and the central header.
    let (local, central) = first_entry_headers(&bytes);
    bytes[local + 6] |= 1;
    bytes[central + 8] |= 1;
    let zip = dir.path().join("locked.zip");
    write(&zip, &bytes);
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!(err.code, LoadErrorCode::Zip);
    assert_eq!(err.source_name, entry_name(&zip, "GHSA-29mw-wpgm-hmr9.json"));
    assert!(err.message.contains("encrypted"), "{}", err.message);
}

#[test]
fn a_zip_without_advisories_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("npm/all.zip");
    write(&zip, &zip_bytes(&[Entry::Dir("npm/"), Entry::File("README", b"x")], CompressionMethod::Deflated));
    let err = osv::load_dir(&zip).unwrap_err();
    assert_eq!((err.code, err.source_name.clone()), (LoadErrorCode::Empty, zip.display().to_string()));
    // Inside a directory too: an empty export is a missing database, not a clean one.
    let err = osv::load_dir(dir.path()).unwrap_err();
    assert_eq!((err.code, err.source_name.clone()), (LoadErrorCode::Empty, zip.display().to_string()));
    // And a directory whose only files are neither JSON nor zip is empty as before.
    let other = tempfile::tempdir().unwrap();
    write(&other.path().join("all.tar.gz"), b"x");
    assert_eq!(osv::load_dir(other.path()).unwrap_err().code, LoadErrorCode::Empty);
}
