//! Storage namespace derivation (seed: "Storage namespace derivation").
//!
//! A session key names the storage namespace a run reads or writes. It is
//! derived — HMAC-SHA-256 under a key HKDF-derived from a secret of its own
//! (`GATEHOUSE_SESSION_KEY_SECRET`), never the grant secret, so rotating the
//! grant secret leaves every namespace where it is —
//! from the authenticated principal and the resource the files belong to.
//! The caller never supplies it, so there is no field in which to forge one.
//!
//! - Outputs are always user-private, whatever the run read.
//! - A shared resource (a skill bundle) derives from its kind, id and
//!   monotonic version: editing the skill bumps the version and so derives a
//!   fresh key, invalidating the previous cache entry naturally.
//! - A user namespace may be narrowed to one conversation, closing the seed's
//!   limitation that two conversations by one user share a namespace.
//! - With strict tenant isolation a principal without a tenant is refused
//!   rather than pooled into a shared legacy namespace.

use gatehouse_core::Reason;
use hkdf::Hkdf;
use hmac::{KeyInit as _, Mac};
use sha2::Sha256;

use crate::encoding::b64url_encode;
use crate::secret::Secret;

/// Who is asking: established by authentication, never by the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant, if the deployment populates one.
    pub tenant_id: Option<String>,
    /// The user.
    pub user_id: String,
}

/// Which namespace to derive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace<'a> {
    /// The principal's own files; `conversation` narrows it to one conversation.
    User {
        /// Optional conversation scope.
        conversation: Option<&'a str>,
    },
    /// Where a run writes. Always the principal's private namespace.
    Output,
    /// A resource shared inside the tenant, such as a skill bundle.
    Shared {
        /// Resource kind, e.g. `skill`.
        kind: &'a str,
        /// Resource id.
        id: &'a str,
        /// Monotonic version.
        version: u64,
    },
}

/// Derives session keys.
pub struct SessionKeyDeriver {
    key: zeroize::Zeroizing<[u8; 32]>,
    strict_tenants: bool,
}

impl std::fmt::Debug for SessionKeyDeriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeyDeriver")
            .field("strict_tenants", &self.strict_tenants)
            .finish_non_exhaustive()
    }
}

impl SessionKeyDeriver {
    /// A deriver keyed from the session key secret (domain-separated by
    /// HKDF). It must not be the grant secret: namespaces would then move
    /// whenever grants are rotated (the configuration refuses equal secrets).
    pub fn new(secret: &Secret, strict_tenants: bool) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(b"gatehouse/session-key"), secret.expose());
        let mut key = zeroize::Zeroizing::new([0u8; 32]);
        let _ = hk.expand(b"gatehouse/session-key/v1", key.as_mut());
        Self { key, strict_tenants }
    }

    /// The session key (`sk1_…`) for `principal` and `namespace`.
    pub fn derive(&self, principal: &Principal, namespace: &Namespace<'_>) -> Result<String, Reason> {
        let tenant = match (&principal.tenant_id, self.strict_tenants) {
            (Some(t), _) => Some(t.as_str()),
            (None, true) => return Err(Reason::TenantMissing),
            (None, false) => None,
        };
        let mut mac =
            <hmac::Hmac<Sha256>>::new_from_slice(self.key.as_ref()).unwrap_or_else(|_| unreachable!());
        // Length-prefixed fields: no two different tuples encode alike.
        let mut field = |bytes: &[u8]| {
            mac.update(&u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
            mac.update(bytes);
        };
        match tenant {
            Some(t) => {
                field(b"tenant");
                field(t.as_bytes());
            }
            None => field(b"legacy"),
        }
        match namespace {
            Namespace::User { conversation: None } | Namespace::Output => {
                field(b"user");
                field(principal.user_id.as_bytes());
            }
            Namespace::User { conversation: Some(c) } => {
                field(b"conversation");
                field(principal.user_id.as_bytes());
                field(c.as_bytes());
            }
            Namespace::Shared { kind, id, version } => {
                field(b"shared");
                field(kind.as_bytes());
                field(id.as_bytes());
                field(&version.to_be_bytes());
            }
        }
        Ok(format!("sk1_{}", b64url_encode(&mac.finalize().into_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deriver(strict: bool) -> SessionKeyDeriver {
        SessionKeyDeriver::new(&Secret::new("0123456789abcdefghijklmnopqrstuvwxyz").unwrap(), strict)
    }

    fn alice() -> Principal {
        Principal { tenant_id: Some("t1".into()), user_id: "alice".into() }
    }

    #[test]
    fn outputs_are_user_private_and_stable() {
        let d = deriver(true);
        let out = d.derive(&alice(), &Namespace::Output).unwrap();
        assert_eq!(out, d.derive(&alice(), &Namespace::Output).unwrap());
        assert_eq!(out, d.derive(&alice(), &Namespace::User { conversation: None }).unwrap());
        let bob = Principal { user_id: "bob".into(), ..alice() };
        assert_ne!(out, d.derive(&bob, &Namespace::Output).unwrap());
        let other_tenant = Principal { tenant_id: Some("t2".into()), ..alice() };
        assert_ne!(out, d.derive(&other_tenant, &Namespace::Output).unwrap());
    }

    #[test]
    fn a_new_skill_version_derives_a_new_key() {
        let d = deriver(true);
        let v1 = d.derive(&alice(), &Namespace::Shared { kind: "skill", id: "s", version: 1 }).unwrap();
        let v2 = d.derive(&alice(), &Namespace::Shared { kind: "skill", id: "s", version: 2 }).unwrap();
        assert_ne!(v1, v2);
    }

    #[test]
    fn conversations_are_separate_namespaces() {
        let d = deriver(true);
        let a = d.derive(&alice(), &Namespace::User { conversation: Some("c1") }).unwrap();
        let b = d.derive(&alice(), &Namespace::User { conversation: Some("c2") }).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, d.derive(&alice(), &Namespace::Output).unwrap());
    }

    #[test]
    fn field_boundaries_cannot_be_shifted() {
        let d = deriver(true);
        let a = d.derive(&alice(), &Namespace::Shared { kind: "ab", id: "c", version: 1 }).unwrap();
        let b = d.derive(&alice(), &Namespace::Shared { kind: "a", id: "bc", version: 1 }).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn strict_mode_refuses_a_missing_tenant() {
        let nobody = Principal { tenant_id: None, user_id: "alice".into() };
        assert_eq!(deriver(true).derive(&nobody, &Namespace::Output), Err(Reason::TenantMissing));
        assert!(deriver(false).derive(&nobody, &Namespace::Output).is_ok());
    }
}
