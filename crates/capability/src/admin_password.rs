//! The settings page's sign-in password, kept only as an Argon2id hash
//! (RFC 9106) in PHC string form (`GATEHOUSE_ADMIN_PASSWORD_HASH`).
//!
//! A hash weaker than OWASP's minimum for Argon2id (19 MiB of memory, two
//! passes) is refused when the configuration is loaded: a hash anyone can
//! brute-force is no better than the password in the clear.

use std::fmt;

use argon2::password_hash::phc::PasswordHash;
use argon2::{Algorithm, Argon2, Params, PasswordHasher as _, PasswordVerifier as _, Version};
use zeroize::Zeroizing;

/// The least memory a stored hash may use, in KiB (OWASP, Argon2id).
pub const MIN_MEMORY_KIB: u32 = 19 * 1024;
/// The fewest passes a stored hash may use.
pub const MIN_PASSES: u32 = 2;
/// The shortest salt a stored hash may use, in bytes.
pub const MIN_SALT_BYTES: usize = 16;
/// Passwords longer than this are refused before hashing: Argon2 would
/// take them, but nobody types them, and a huge one is only a way to
/// spend the server's time.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// Why a password hash is not accepted. Messages never hold the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdminPasswordError {
    /// Not a PHC string of Argon2id.
    #[error(
        "admin_password_hash_invalid: not an Argon2id PHC string ($argon2id$v=19$m=...,t=...,p=...$salt$hash)"
    )]
    Invalid,
    /// Argon2id, but below the minimum cost or salt length.
    #[error("admin_password_hash_weak: Argon2id needs at least m=19456, t=2 and a 16-byte salt")]
    Weak,
    /// The OS random generator failed.
    #[error("admin_password_random_unavailable: the OS random generator failed")]
    Random,
    /// The password to hash is empty or longer than the limit.
    #[error("admin_password_invalid: a password is 1 to 1024 bytes")]
    Password,
}

impl AdminPasswordError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid => "admin_password_hash_invalid",
            Self::Weak => "admin_password_hash_weak",
            Self::Random => "admin_password_random_unavailable",
            Self::Password => "admin_password_invalid",
        }
    }
}

/// A checked Argon2id hash of the settings page's password.
#[derive(Clone)]
pub struct AdminPasswordHash {
    phc: String,
}

impl fmt::Debug for AdminPasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminPasswordHash(argon2id)")
    }
}

impl AdminPasswordHash {
    /// Accepts a PHC string of Argon2id version 19 at or above the minimum cost.
    pub fn parse(text: &str) -> Result<Self, AdminPasswordError> {
        let text = text.trim();
        let hash = PasswordHash::new(text).map_err(|_| AdminPasswordError::Invalid)?;
        if hash.algorithm.as_str() != "argon2id" || hash.version != Some(0x13) || hash.hash.is_none() {
            return Err(AdminPasswordError::Invalid);
        }
        let params = Params::try_from(&hash).map_err(|_| AdminPasswordError::Invalid)?;
        let salt_len = hash.salt.as_ref().map_or(0, |s| s.as_ref().len());
        if params.m_cost() < MIN_MEMORY_KIB || params.t_cost() < MIN_PASSES || salt_len < MIN_SALT_BYTES {
            return Err(AdminPasswordError::Weak);
        }
        Ok(Self { phc: text.to_owned() })
    }

    /// Hashes `password` at OWASP's recommended cost (m=19456, t=2, p=1)
    /// with a fresh 16-byte salt.
    pub fn hash(password: &str) -> Result<Self, AdminPasswordError> {
        if password.is_empty() || password.len() > MAX_PASSWORD_BYTES {
            return Err(AdminPasswordError::Password);
        }
        let mut salt = [0u8; MIN_SALT_BYTES];
        getrandom::fill(&mut salt).map_err(|_| AdminPasswordError::Random)?;
        let hash = argon2()
            .hash_password_with_salt(password.as_bytes(), &salt)
            .map_err(|_| AdminPasswordError::Invalid)?;
        Self::parse(&hash.to_string())
    }

    /// Whether `password` is the one hashed. A password over the limit is
    /// refused without hashing it.
    pub fn verify(&self, password: &str) -> bool {
        if password.is_empty() || password.len() > MAX_PASSWORD_BYTES {
            return false;
        }
        let Ok(hash) = PasswordHash::new(&self.phc) else { return false };
        argon2().verify_password(password.as_bytes(), &hash).is_ok()
    }

    /// The PHC string, for the configuration file it belongs in.
    pub fn as_str(&self) -> &str {
        &self.phc
    }
}

fn argon2() -> Argon2<'static> {
    let params = Params::new(MIN_MEMORY_KIB, MIN_PASSES, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// A first password for the embedded start: 24 characters of base64url
/// from 18 random bytes (144 bits).
pub fn generate_password() -> Result<Zeroizing<String>, AdminPasswordError> {
    let mut raw = Zeroizing::new([0u8; 18]);
    getrandom::fill(raw.as_mut()).map_err(|_| AdminPasswordError::Random)?;
    Ok(Zeroizing::new(crate::encoding::b64url_encode(raw.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_only_the_right_password_passes() {
        let hash = AdminPasswordHash::hash("correct horse battery staple").unwrap();
        assert!(hash.as_str().starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{}", hash.as_str());
        assert!(hash.verify("correct horse battery staple"));
        assert!(!hash.verify("correct horse battery stapl"));
        assert!(!hash.verify(""));
        assert!(!hash.verify(&"x".repeat(MAX_PASSWORD_BYTES + 1)));
        let again = AdminPasswordHash::parse(hash.as_str()).unwrap();
        assert!(again.verify("correct horse battery staple"));
        assert!(!format!("{hash:?}").contains("argon2id$"), "Debug never prints the hash");
    }

    #[test]
    fn weak_or_foreign_hashes_are_refused() {
        // argon2i, argon2d, bcrypt, sha-crypt, garbage: not argon2id.
        for text in [
            "$argon2i$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$argon2d$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$2b$12$abcdefghijklmnopqrstuuvwxyzabcdefghijklmnopqrstuvwxyz12",
            "$6$salt$hash",
            "",
            "password",
            "$argon2id$v=16$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA",
        ] {
            assert_eq!(AdminPasswordHash::parse(text).unwrap_err(), AdminPasswordError::Invalid, "{text}");
        }
        for text in [
            "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$argon2id$v=19$m=19456,t=1,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA",
        ] {
            assert_eq!(AdminPasswordHash::parse(text).unwrap_err(), AdminPasswordError::Weak, "{text}");
        }
    }

    #[test]
    fn a_generated_password_is_long_and_random() {
        let (a, b) = (generate_password().unwrap(), generate_password().unwrap());
        assert_eq!(a.len(), 24);
        assert_ne!(*a, *b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }

    #[test]
    fn passwords_to_hash_are_bounded() {
        assert_eq!(AdminPasswordHash::hash("").unwrap_err(), AdminPasswordError::Password);
        assert_eq!(
            AdminPasswordHash::hash(&"x".repeat(MAX_PASSWORD_BYTES + 1)).unwrap_err(),
            AdminPasswordError::Password
        );
    }
}
