//! The internal service token components authenticate to each other with.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use crate::secret::{Secret, SecretError};

/// Checks presented tokens against the configured one.
///
/// Only the SHA-256 of the token is kept, and comparison is between digests
/// in constant time, so neither the token's bytes nor its length leak through
/// timing, and a memory dump of a gateway does not hold the token itself.
#[derive(Clone)]
pub struct ServiceToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceToken(<redacted>)")
    }
}

impl ServiceToken {
    /// Accepts the configured token if it is strong enough.
    pub fn new(token: &str) -> Result<Self, SecretError> {
        let secret = Secret::new(token)?;
        Ok(Self { digest: Sha256::digest(secret.expose()).into() })
    }

    /// Whether `presented` is the token.
    pub fn verify(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.digest.ct_eq(&digest).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_only_the_exact_token() {
        let token = "0123456789abcdefghijklmnopqrstuvwxyz";
        let t = ServiceToken::new(token).unwrap();
        assert!(t.verify(token));
        assert!(!t.verify(&token[..35]));
        assert!(!t.verify(&format!("{token}x")));
        assert!(!t.verify(""));
        assert!(ServiceToken::new("short").is_err());
    }
}
