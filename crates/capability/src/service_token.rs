//! How internal callers authenticate: the one internal service token (every
//! scope), or named caller tokens, each with its own scopes.
//!
//! Nodes keep only SHA-256 digests of tokens (tokens are 32+ bytes of random
//! text, so a digest is as good as a slow hash), compared in constant time.
//! A caller file lists names, scopes and digests, so every node can share one
//! configuration file while a runner's own token can verify manifests and
//! nothing else: the file holds no token anyone could use.

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

/// What a caller may do. A closed list: the route table maps every `/v1`
/// route to one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Create, end, cancel and read runs.
    Runs,
    /// Sign execution manifests.
    ManifestsSign,
    /// Verify execution manifests.
    ManifestsVerify,
    /// Mint and revoke grants.
    Grants,
    /// Open grants and spend them.
    Ledger,
    /// The door's API: fetches on a run's behalf, content scans.
    Egress,
    /// Tenants' egress policies and gate settings.
    Policies,
    /// Store, rotate and delete tenants' credentials (never read them back).
    Credentials,
    /// The kill switch, emergency revoke, refusals and the audit log.
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 9] = [
        Scope::Runs,
        Scope::ManifestsSign,
        Scope::ManifestsVerify,
        Scope::Grants,
        Scope::Ledger,
        Scope::Egress,
        Scope::Policies,
        Scope::Credentials,
        Scope::Admin,
    ];

    /// The stable written form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Runs => "runs",
            Scope::ManifestsSign => "manifests:sign",
            Scope::ManifestsVerify => "manifests:verify",
            Scope::Grants => "grants",
            Scope::Ledger => "ledger",
            Scope::Egress => "egress",
            Scope::Policies => "policies",
            Scope::Credentials => "credentials",
            Scope::Admin => "admin",
        }
    }

    /// Parses the written form.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scope| scope.as_str() == s)
    }
}

/// One named caller: its scopes, the tenants it is bound to (none: every
/// tenant) and its token's digest.
#[derive(Clone)]
pub struct CallerToken {
    name: String,
    scopes: Vec<Scope>,
    tenants: Option<Vec<String>>,
    digest: [u8; 32],
}

impl std::fmt::Debug for CallerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerToken")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("tenants", &self.tenants)
            .finish_non_exhaustive()
    }
}

impl CallerToken {
    /// A caller from its token's SHA-256 in lowercase hex (64 digits).
    pub fn from_digest_hex(name: &str, scopes: Vec<Scope>, digest_hex: &str) -> Option<Self> {
        let hex = digest_hex.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (i, pair) in hex.chunks(2).enumerate() {
            let digit = |b: u8| char::from(b).to_digit(16).filter(|_| !b.is_ascii_uppercase());
            let (hi, lo) = (digit(pair[0])?, digit(pair[1])?);
            digest[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(Self { name: name.to_owned(), scopes, tenants: None, digest })
    }

    /// The same caller bound to `tenants`: it acts on those tenants only.
    #[must_use]
    pub fn bound_to(mut self, tenants: Vec<String>) -> Self {
        self.tenants = Some(tenants);
        self
    }

    /// The lowercase hex SHA-256 of `token`, as a caller file records it.
    pub fn digest_hex(token: &str) -> String {
        hex::encode(Sha256::digest(token.as_bytes()))
    }

    /// The caller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The caller's scopes.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// The tenants the caller is bound to; `None`: every tenant.
    pub fn tenants(&self) -> Option<&[String]> {
        self.tenants.as_deref()
    }
}

/// The configured named callers.
#[derive(Debug, Clone, Default)]
pub struct Callers(Vec<CallerToken>);

impl Callers {
    /// These callers.
    pub fn new(callers: Vec<CallerToken>) -> Self {
        Self(callers)
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The caller whose token `presented` is. Every entry is compared, in
    /// constant time, whichever matches.
    pub fn identify(&self, presented: &str) -> Option<&CallerToken> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for caller in &self.0 {
            if bool::from(caller.digest.ct_eq(&digest)) {
                found = Some(caller);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_identified_by_their_token_only() {
        let runner = "runner-token-0123456789abcdefghijklmnopqrstuvwxyz";
        let worker = "worker-token-0123456789abcdefghijklmnopqrstuvwxyz";
        let callers = Callers::new(vec![
            CallerToken::from_digest_hex(
                "runner",
                vec![Scope::ManifestsVerify],
                &CallerToken::digest_hex(runner),
            )
            .unwrap(),
            CallerToken::from_digest_hex("worker", Scope::ALL.to_vec(), &CallerToken::digest_hex(worker))
                .unwrap(),
        ]);
        assert_eq!(callers.identify(runner).unwrap().name(), "runner");
        assert_eq!(callers.identify(runner).unwrap().scopes(), [Scope::ManifestsVerify]);
        assert_eq!(callers.identify(worker).unwrap().name(), "worker");
        assert_eq!(callers.identify(runner).unwrap().tenants(), None, "unbound unless told");
        let bound = CallerToken::from_digest_hex("b", vec![Scope::Runs], &CallerToken::digest_hex(worker))
            .unwrap()
            .bound_to(vec!["t1".into()]);
        assert_eq!(bound.tenants(), Some(&["t1".to_owned()][..]));
        assert!(format!("{bound:?}").contains("t1") && !format!("{bound:?}").contains("digest"));
        assert!(callers.identify(&runner[1..]).is_none());
        assert!(callers.identify("").is_none());
        for bad in ["", "ab", &"g".repeat(64), &"A".repeat(64)] {
            assert!(CallerToken::from_digest_hex("x", vec![], bad).is_none(), "{bad}");
        }
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
    }

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
