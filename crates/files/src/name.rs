//! The rule for a file's name.
//!
//! A name is chosen by whoever stores the file (the platform for inputs, the
//! sandbox for outputs) and shown back to whoever lists the session. It is
//! metadata only: storage paths never contain it ([`crate::layout`]). It is
//! still refused when it could mislead a reader or a tool that does turn
//! names into paths (an unzip, a sync to disk):
//!
//! - empty, or longer than 255 bytes (the POSIX `NAME_MAX` of common file
//!   systems);
//! - `.` or `..`, or any name made only of dots;
//! - a path separator: `/`, and `\` too (a separator for Windows tools —
//!   the safer reading);
//! - NUL or any other control character (Unicode `Cc`: C0, DEL, C1);
//! - bidirectional formatting characters (U+061C, U+200E, U+200F,
//!   U+202A–U+202E, U+2066–U+2069), which make a name read differently
//!   from what it is (`invoice\u{202E}fdp.exe`; CVE-2021-42574's class);
//! - leading or trailing whitespace, which makes two names look alike.

use crate::FileError;

/// The longest name, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// Checks `name` against the rule above.
pub fn check_name(name: &str) -> Result<(), FileError> {
    if name.is_empty() {
        return Err(FileError::NameInvalid("empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(FileError::NameInvalid("longer than 255 bytes"));
    }
    if name.bytes().all(|b| b == b'.') {
        return Err(FileError::NameInvalid("only dots"));
    }
    if name.trim() != name {
        return Err(FileError::NameInvalid("leading or trailing whitespace"));
    }
    for c in name.chars() {
        if c == '/' || c == '\\' {
            return Err(FileError::NameInvalid("a path separator"));
        }
        if c.is_control() {
            return Err(FileError::NameInvalid("a control character"));
        }
        if is_bidi_control(c) {
            return Err(FileError::NameInvalid("a bidirectional formatting character"));
        }
    }
    Ok(())
}

/// The characters Unicode's bidirectional algorithm (UAX #9) treats as
/// explicit formatting: marks, embeddings, overrides and isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ordinary_names_pass() {
        for name in [
            "report.pdf",
            "a",
            ".env",
            "...x",
            "données 2026.csv",
            "报告.txt",
            "x".repeat(255).as_str(),
            "é".repeat(127).as_str(),
        ] {
            assert_eq!(check_name(name), Ok(()), "{name:?}");
        }
    }

    #[test]
    fn names_that_escape_or_mislead_are_refused() {
        let long = "x".repeat(256);
        let long_multibyte = "é".repeat(128);
        for name in [
            "",
            ".",
            "..",
            "...",
            "a/b",
            "../etc/passwd",
            "/abs",
            "a\\b",
            "..\\x",
            "nul\0byte",
            "tab\there",
            "line\nbreak",
            "del\u{7f}",
            "c1\u{85}",
            "invoice\u{202E}fdp.exe",
            "iso\u{2066}late",
            "mark\u{200F}",
            " leading",
            "trailing ",
            long.as_str(),
            long_multibyte.as_str(),
        ] {
            let refused = check_name(name);
            assert!(matches!(refused, Err(FileError::NameInvalid(_))), "{name:?}: {refused:?}");
            assert_eq!(refused.unwrap_err().reason(), gatehouse_core::Reason::FileNameInvalid);
        }
    }

    proptest! {
        /// Whatever the name, a name that passes holds no separator, no
        /// control character, is no dot-name and fits.
        #[test]
        fn a_name_that_passes_cannot_address_anything(name in any::<String>()) {
            if check_name(&name).is_ok() {
                prop_assert!(!name.is_empty() && name.len() <= MAX_NAME_BYTES);
                prop_assert!(!name.contains('/') && !name.contains('\\'));
                prop_assert!(!name.chars().any(char::is_control));
                prop_assert!(name != "." && name != "..");
            }
        }

        #[test]
        fn plain_names_pass(name in "[A-Za-z0-9_][A-Za-z0-9_. -]{0,200}[A-Za-z0-9_]") {
            prop_assume!(!name.bytes().all(|b| b == b'.'));
            prop_assert_eq!(check_name(&name), Ok(()));
        }
    }
}
