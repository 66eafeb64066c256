//! Strict base64url, the one token encoding.
//!
//! Decoding refuses padding and non-zero trailing bits, so every token has
//! exactly one textual form: a changed character can never decode to the
//! same bytes and slip past a comparison or a replay check.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub(crate) fn b64url_encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// Standard base64 (with or without padding), for keys given as base64 DER.
/// Whitespace (line wrapping) is ignored.
pub(crate) fn b64_decode_lenient_whitespace(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD.decode(&compact).or_else(|_| STANDARD_NO_PAD.decode(&compact)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_canonical_base64url_is_refused() {
        assert_eq!(b64url_decode("AA").as_deref(), Some(&[0u8][..]));
        // Same bytes with trailing bits set: a lenient decoder would accept it.
        assert_eq!(b64url_decode("AB"), None);
        assert_eq!(b64url_decode("AA=="), None);
        assert_eq!(b64url_decode("A+"), None);
    }
}
