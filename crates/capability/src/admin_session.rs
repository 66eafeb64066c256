//! The settings page's session tokens and the anti-forgery token each form
//! carries.
//!
//! A session token is 256 random bits, held by the browser in an
//! `HttpOnly` cookie; the store keeps only its SHA-256, so a copy of the
//! database signs nobody in. Each form carries a token derived from the
//! session's (a keyed hash under a fixed label): a page of another origin can
//! neither read the cookie nor compute the form token, so it cannot post a
//! form in the person's name, and no second secret needs storing.
//!
//! Each session is bound to the password hash in force when it began: the
//! store keeps, beside the token's hash, a keyed digest of the password
//! hash (keyed by the session's token, so the row alone reveals nothing of
//! the hash), and every request compares it with the hash the node holds
//! now. A new password hash ends every session begun under the old one, on
//! every node and across restarts.

use std::fmt;

use hmac::{KeyInit as _, Mac as _};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::admin_password::AdminPasswordHash;
use crate::encoding::{b64url_decode, b64url_encode};

/// The bytes in a session token.
const TOKEN_BYTES: usize = 32;
/// What the anti-forgery token is derived under: a new label, never reused.
const CSRF_LABEL: &[u8] = b"gatehouse/admin-csrf/v1";
/// What a session's binding to the password hash is derived under.
const PASSWORD_BINDING_LABEL: &[u8] = b"gatehouse/admin-session-password/v1";

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
        hex::encode(Sha256::digest(self.0.as_bytes()))
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

    /// What binds this session to `password`, the hash in force when it
    /// began: HMAC-SHA256 under the session's token of a fixed label and the
    /// PHC string, lowercase hex. Stored with the session; a node holding
    /// another hash computes another value, and the session has ended.
    pub fn password_binding(&self, password: &AdminPasswordHash) -> String {
        hex::encode(self.mac(&[PASSWORD_BINDING_LABEL, b"\0", password.as_str().as_bytes()]))
    }

    fn csrf_mac(&self) -> [u8; 32] {
        self.mac(&[CSRF_LABEL])
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let Ok(mut mac) = <hmac::Hmac<Sha256>>::new_from_slice(self.0.as_bytes()) else {
            // HMAC takes a key of any length; unreachable, and fails closed.
            return [0; 32];
        };
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }
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
    fn a_session_is_bound_to_one_password_hash_by_its_own_token() {
        let hash = |p: &str| AdminPasswordHash::hash(p).unwrap();
        let (one, two) = (hash("first password"), hash("second password"));
        let a = SessionToken::generate().unwrap();
        let b = SessionToken::generate().unwrap();
        let bound = a.password_binding(&one);
        assert_eq!(bound.len(), 64);
        assert_eq!(bound, SessionToken::from_cookie(a.expose()).unwrap().password_binding(&one), "stable");
        assert_ne!(bound, a.password_binding(&two), "a new hash: another binding");
        assert_ne!(bound, b.password_binding(&one), "keyed by the session's token");
        assert_ne!(bound, a.digest());
        assert!(!bound.contains(one.as_str()) && !a.csrf_token().contains(&bound));
        // The same hash text parsed again binds the same way (a restart).
        assert_eq!(bound, a.password_binding(&AdminPasswordHash::parse(one.as_str()).unwrap()));
    }

    #[test]
    fn debug_prints_nothing_of_the_token() {
        let token = SessionToken::generate().unwrap();
        let shown = format!("{token:?}");
        assert!(!shown.contains(token.expose()) && !shown.contains(&token.digest()[..8]), "{shown}");
    }
}
