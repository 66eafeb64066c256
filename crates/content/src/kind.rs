//! What a piece of content is, as far as gatehouse cares: the detected format
//! (`Kind`, a stable wire name) and the class that decides its fate.

use serde::{Serialize, Serializer};

/// The class of a format: it decides whether content is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Runnable code: refused.
    Executable,
    /// A container or compressed stream that can hide anything: refused.
    Archive,
    /// Anything else that is not text (media, documents, databases, raw bytes): refused.
    NotText,
    /// Text: accepted unless it carries an embedded payload.
    Text,
}

macro_rules! kinds {
    ($($(#[$m:meta])* $variant:ident => $code:literal, $class:ident;)+) => {
        /// A detected format. The wire names are part of gatehouse's public
        /// contract (`content scan --json`, `POST /v1/content/scan`): add, never rename.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($(#[$m])* $variant,)+
        }

        impl Kind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)+];

            /// The stable wire name.
            pub const fn as_str(self) -> &'static str {
                match self { $(Kind::$variant => $code,)+ }
            }

            /// The class that decides the verdict.
            pub const fn class(self) -> Class {
                match self { $(Kind::$variant => Class::$class,)+ }
            }
        }
    };
}

kinds! {
    /// ELF (Linux and most Unix executables, shared objects, core files).
    Elf => "elf", Executable;
    /// Windows PE (an `MZ` header whose `e_lfanew` points at `PE\0\0`).
    Pe => "pe", Executable;
    /// An `MZ` executable without a PE header (DOS, or NE/LE/LX).
    MsDos => "msdos", Executable;
    /// Mach-O, one architecture.
    MachO => "macho", Executable;
    /// Mach-O universal ("fat") binary.
    MachOFat => "macho_fat", Executable;
    /// WebAssembly binary module.
    Wasm => "wasm", Executable;
    /// Java class file.
    JavaClass => "java_class", Executable;
    /// Android Dalvik executable.
    Dex => "dex", Executable;
    /// Zip and everything built on it (jar, apk, docx, xlsx, odt, ...).
    Zip => "zip", Archive;
    /// gzip.
    Gzip => "gzip", Archive;
    /// bzip2.
    Bzip2 => "bzip2", Archive;
    /// xz.
    Xz => "xz", Archive;
    /// Zstandard (and skippable frames).
    Zstd => "zstd", Archive;
    /// LZ4 (frame and legacy formats).
    Lz4 => "lz4", Archive;
    /// 7-Zip.
    SevenZip => "7z", Archive;
    /// RAR 4 and 5.
    Rar => "rar", Archive;
    /// tar (POSIX ustar and GNU), by its `ustar` marker at offset 257 with a valid header checksum.
    Tar => "tar", Archive;
    /// Microsoft Cabinet (and InstallShield cabinets).
    Cab => "cab", Archive;
    /// Unix `ar` archives (static libraries, .deb packages).
    Ar => "ar", Archive;
    /// RPM package.
    Rpm => "rpm", Archive;
    /// cpio (binary, odc and newc formats).
    Cpio => "cpio", Archive;
    /// ISO 9660 disc image.
    Iso9660 => "iso9660", Archive;
    /// Microsoft Compound File (msi, doc, xls, ppt, msg).
    Cfb => "cfb", Archive;
    /// lzip.
    Lzip => "lzip", Archive;
    /// Unix `compress` (.Z).
    Compress => "compress", Archive;
    /// xar (macOS .pkg).
    Xar => "xar", Archive;
    /// SquashFS image.
    Squashfs => "squashfs", Archive;
    /// Windows Imaging (WIM).
    Wim => "wim", Archive;
    /// ARJ.
    Arj => "arj", Archive;
    /// PNG image.
    Png => "png", NotText;
    /// JPEG image.
    Jpeg => "jpeg", NotText;
    /// GIF image.
    Gif => "gif", NotText;
    /// WebP image.
    Webp => "webp", NotText;
    /// BMP image.
    Bmp => "bmp", NotText;
    /// TIFF image.
    Tiff => "tiff", NotText;
    /// Windows icon.
    Ico => "ico", NotText;
    /// PDF document.
    Pdf => "pdf", NotText;
    /// WAVE audio.
    Wav => "wav", NotText;
    /// AVI video.
    Avi => "avi", NotText;
    /// FLAC audio.
    Flac => "flac", NotText;
    /// Ogg container.
    Ogg => "ogg", NotText;
    /// MP3 audio.
    Mp3 => "mp3", NotText;
    /// Standard MIDI file.
    Midi => "midi", NotText;
    /// ISO base media (mp4, mov, m4a, heic, ...).
    Mp4 => "mp4", NotText;
    /// Matroska / WebM.
    Matroska => "matroska", NotText;
    /// SQLite 3 database.
    Sqlite => "sqlite", NotText;
    /// WOFF font.
    Woff => "woff", NotText;
    /// WOFF2 font.
    Woff2 => "woff2", NotText;
    /// TrueType font.
    TrueType => "truetype", NotText;
    /// OpenType (CFF) font.
    OpenType => "opentype", NotText;
    /// Bytes that are not text and match no known signature.
    Binary => "binary", NotText;
    /// No content at all.
    Empty => "empty", Text;
    /// UTF-8 text (with or without BOM).
    Utf8Text => "utf8_text", Text;
    /// UTF-16 little-endian text with BOM.
    Utf16LeText => "utf16le_text", Text;
    /// UTF-16 big-endian text with BOM.
    Utf16BeText => "utf16be_text", Text;
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn wire_names_are_unique_snake_case() {
        let mut seen = HashSet::new();
        for k in Kind::ALL {
            let s = k.as_str();
            assert!(seen.insert(s), "duplicate kind {s}");
            assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{s}");
        }
    }
}
