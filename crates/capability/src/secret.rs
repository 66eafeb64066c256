//! Shared secrets (grant secret, HMAC manifest secret, service token).

use std::fmt;

use zeroize::Zeroizing;

/// The minimum length of every shared secret, in bytes (seed: "32+ bytes").
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a secret was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_BYTES`], or visibly not random.
    #[error("weak_secret: a secret must be at least {MIN_SECRET_BYTES} bytes of random text")]
    Weak,
}

impl SecretError {
    /// The stable reason code.
    pub fn reason(&self) -> gatehouse_core::Reason {
        gatehouse_core::Reason::WeakSecret
    }
}

/// A secret's bytes: zeroed on drop, never printed.
///
/// A secret is given as a line of text; surrounding whitespace (the newline a
/// file ends with) is not part of it, and the remaining length in bytes is what
/// the 32-byte minimum counts.
#[derive(Clone)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// Accepts `text` as a secret if it is strong enough.
    ///
    /// Besides the length, a secret drawing on fewer than 8 distinct byte
    /// values (`aaaa…`, `0101…`) is refused: no random generator produces one,
    /// but a placeholder copied from an example does.
    pub fn new(text: &str) -> Result<Self, SecretError> {
        let trimmed = text.trim();
        let bytes = trimmed.as_bytes();
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(SecretError::Weak);
        }
        let mut seen = [false; 256];
        for &b in bytes {
            seen[usize::from(b)] = true;
        }
        if seen.iter().filter(|s| **s).count() < 8 {
            return Err(SecretError::Weak);
        }
        Ok(Self(Zeroizing::new(bytes.to_vec())))
    }

    /// A fresh random secret: 32 bytes from the OS, base64url encoded (43 characters).
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut raw = Zeroizing::new([0u8; 32]);
        getrandom::fill(raw.as_mut())?;
        let text = Zeroizing::new(crate::encoding::b64url_encode(raw.as_ref()));
        Ok(Self(Zeroizing::new(text.as_bytes().to_vec())))
    }

    /// The secret's bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_monotonous_secrets_are_weak() {
        assert_eq!(Secret::new("short").unwrap_err(), SecretError::Weak);
        assert_eq!(Secret::new(&"a".repeat(64)).unwrap_err(), SecretError::Weak);
        assert_eq!(Secret::new(&"0123456".repeat(6)).unwrap_err(), SecretError::Weak);
        // 31 bytes plus the newline a file ends with is still 31.
        assert!(Secret::new("0123456789abcdefghijklmnopqrstu\n").is_err());
        assert!(Secret::new("0123456789abcdefghijklmnopqrstuv\n").is_ok());
    }

    #[test]
    fn generated_secrets_are_strong_and_distinct() {
        let a = Secret::generate().unwrap();
        let b = Secret::generate().unwrap();
        assert_eq!(a.expose().len(), 43);
        assert!(Secret::new(std::str::from_utf8(a.expose()).unwrap()).is_ok());
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let s = Secret::new("0123456789abcdefghijklmnopqrstuvwxyz").unwrap();
        assert!(!format!("{s:?}").contains("0123"));
    }
}
