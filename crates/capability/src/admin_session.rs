//! The settings page's session tokens and the anti-forgery token each form
//! carries.
//!
//! A session token is 256 random bits, held by the browser in an
//! `HttpOnly` cookie; the store keeps only its SHA-256, so a copy of the
//! database signs nobody in. Each form carries a token derived from the
//! session's (a keyed hash under a fixed label): a page of another origin can
//! neither read the cookie nor compute the form token, so it cannot post a
//! form in the person's name, and no second secret needs storing.

use std::fmt;

use hmac::{KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::encoding::{b64url_decode, b64url_encode};

/// The bytes in a session token.
const TOKEN_BYTES: usize = 32;
/// What the anti-forgery token is derived under: a new label, never reused.
const CSRF_LABEL: &[u8] = b"gatehouse/admin-csrf/v1";

/// A signed-in person's session token. `Debug` prints nothing of it.
pub struct SessionToken(Zeroizing<String>);

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(..)")
    }
}

impl SessionToken {
    /// A fresh token from the OS random generator.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut raw = Zeroizing::new([0u8; TOKEN_BYTES]);
        getrandom::fill(raw.as_mut())?;
        Ok(Self(Zeroizing::new(b64url_encode(raw.as_ref()))))
    }

    /// A token as a cookie presents it: exactly the canonical base64url of
    /// 32 bytes, else `None` (nothing else is ever looked up).
    pub fn from_cookie(text: &str) -> Option<Self> {
        let bytes = Zeroizing::new(b64url_decode(text)?);
        (bytes.len() == TOKEN_BYTES).then(|| Self(Zeroizing::new(text.to_owned())))
    }

    /// The cookie's value.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the store keys the session by: SHA-256, lowercase hex.
    pub fn digest(&self) -> String {
        hex(&Sha256::digest(self.0.as_bytes()))
    }

    /// The anti-forgery token the session's forms carry.
    pub fn csrf_token(&self) -> String {
        b64url_encode(&self.csrf_mac())
    }

    /// Whether `presented` is this session's anti-forgery token, compared in
    /// constant time.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        match b64url_decode(presented) {
            Some(bytes) => bool::from(bytes.as_slice().ct_eq(self.csrf_mac().as_slice())),
            None => false,
        }
    }

    fn csrf_mac(&self) -> [u8; 32] {
        let Ok(mut mac) = <hmac::Hmac<Sha256>>::new_from_slice(self.0.as_bytes()) else {
            // HMAC takes a key of any length; unreachable, and fails closed.
            return [0; 32];
        };
        mac.update(CSRF_LABEL);
        mac.finalize().into_bytes().into()
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_through_the_cookie_and_nothing_else_is_accepted() {
        let token = SessionToken::generate().unwrap();
        assert_eq!(token.expose().len(), 43);
        let back = SessionToken::from_cookie(token.expose()).unwrap();
        assert_eq!(back.digest(), token.digest());
        assert_eq!(token.digest().len(), 64);
        for bad in ["", "abc", &format!("{}A", token.expose()), &token.expose()[1..], "a".repeat(43).as_str()]
        {
            // "a"*43 decodes with non-zero trailing bits: not canonical.
            assert!(SessionToken::from_cookie(bad).is_none(), "{bad}");
        }
        assert_ne!(SessionToken::generate().unwrap().digest(), token.digest());
    }

    #[test]
    fn the_form_token_belongs_to_its_session_only() {
        let a = SessionToken::generate().unwrap();
        let b = SessionToken::generate().unwrap();
        assert!(a.csrf_matches(&a.csrf_token()));
        assert!(!a.csrf_matches(&b.csrf_token()));
        assert!(!a.csrf_matches(""));
        assert!(!a.csrf_matches(&a.digest()));
        // Neither the token nor its stored digest is the form token.
        assert_ne!(a.csrf_token(), a.expose());
        let mut flipped = a.csrf_token().into_bytes();
        flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
        assert!(!a.csrf_matches(std::str::from_utf8(&flipped).unwrap()));
    }

    #[test]
    fn debug_prints_nothing_of_the_token() {
        let token = SessionToken::generate().unwrap();
        let shown = format!("{token:?}");
        assert!(!shown.contains(token.expose()) && !shown.contains(&token.digest()[..8]), "{shown}");
    }
}
