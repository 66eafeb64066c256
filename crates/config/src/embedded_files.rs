//! Files the embedded single-machine mode keeps in the data directory
//! (the same names `gatehouse keygen` writes).

/// PKCS#8 PEM.
pub const MANIFEST_PRIVATE_KEY: &str = "manifest-private.pem";
/// SPKI PEM.
pub const MANIFEST_PUBLIC_KEY: &str = "manifest-public.pem";
/// One line of text.
pub const GRANT_SECRET: &str = "grant-secret";
/// One line of text.
pub const SERVICE_TOKEN: &str = "service-token";
/// One line of text.
pub const SESSION_KEY_SECRET: &str = "session-key-secret";
/// One line: the credential sealing key (X25519, base64url).
pub const CREDENTIAL_SEALING_KEY: &str = "credential-sealing-key";
/// One line: its public half, for workers.
pub const CREDENTIAL_SEALING_PUBLIC_KEY: &str = "credential-sealing-public-key";
/// PKCS#8 PEM: the interception CA's key.
pub const INTERCEPT_CA_KEY: &str = "intercept-ca-key.pem";
/// PEM: the interception CA's certificate (public).
pub const INTERCEPT_CA_CERT: &str = "intercept-ca.pem";
/// One line: the settings page password's Argon2id hash (never the password).
pub const ADMIN_PASSWORD_HASH: &str = "admin-password-hash";
/// The embedded durable store (SQLite).
pub const DATABASE: &str = "gatehouse.db";
/// PKCS#8 PEM: signs audit checkpoints (its own key, never the manifest key).
pub const AUDIT_SIGNING_KEY: &str = "audit-signing.pem";
/// SPKI PEM: verifies audit checkpoints.
pub const AUDIT_PUBLIC_KEY: &str = "audit-public.pem";
