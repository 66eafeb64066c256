//! Capabilities: what a run may be and do, as tokens nobody downstream can forge.
//!
//! - [`manifest`]: Ed25519-signed execution manifests bound to the execute
//!   request body (legacy HMAC mode kept, and marked weaker).
//! - [`grant`]: XChaCha20-Poly1305-sealed egress grants the sandbox carries but
//!   cannot read or alter.
//! - [`session_key`]: storage namespaces derived from the principal and the
//!   resource, never supplied by a caller.
//! - [`service_token`]: the internal service token, compared in constant time.
//! - [`credential`]: stored credentials HPKE-sealed to the gateway, so the
//!   worker can write and rotate them but never read them back.
//! - [`github_app`]: a GitHub App's private key and the RS256 app JWT the
//!   door trades for an installation token.
//! - [`sigv4`]: AWS Signature Version 4, the door's signature with a stored
//!   `aws_sigv4` credential.
//!
//! Architecture invariant: pure functions over bytes. No I/O, no clock reads
//! (callers pass `now`), no async. This is the only crate that handles key bytes.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod admin_password;
pub mod admin_session;
pub mod canonical;
pub mod credential;
mod encoding;
pub mod github_app;
pub mod grant;
pub mod keys;
pub mod manifest;
pub mod secret;
pub mod service_token;
pub mod session_key;
pub mod sigv4;

pub use admin_password::{AdminPasswordError, AdminPasswordHash};
pub use admin_session::SessionToken;
pub use canonical::BodyDigest;
pub use credential::{
    CredentialContext, CredentialError, CredentialSecret, FingerprintKey, LocalSeal, LocallySealed,
    SealedSecret, SealingKey, SealingKeys, SealingPublicKey, webhook_signature,
};
pub use grant::{
    GrantBudgets, GrantClaims, GrantLifetime, GrantRequest, GrantSealer, OpenedGrants, UNLIMITED_TOOL_CALLS,
};
pub use keys::{KeyError, ManifestSigningKey, ManifestVerifyingKeys};
pub use manifest::{ManifestClaims, ManifestPresence, ManifestSigner, ManifestVerifier, VerifiedManifest};
pub use secret::{Secret, SecretError};
pub use service_token::{CallerToken, Callers, Scope, ServiceToken};
pub use session_key::{Namespace, Principal, SessionKeyDeriver};
