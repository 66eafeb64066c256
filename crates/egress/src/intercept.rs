//! TLS interception for the hosts a run holds a credential lease for.
//!
//! A lease's secret can only be put into a request the proxy can read, and a
//! `CONNECT` tunnel carries TLS the proxy cannot read. So for a lease's host,
//! and only for it, the proxy ends the sandbox's TLS itself: it answers the
//! ClientHello with a leaf certificate for that host, signed by an
//! interception CA the sandbox was told to trust, injects the credential into
//! the decrypted request and sends it on over a TLS connection of its own.
//! Every other tunnel stays opaque; whether to intercept is the proxy's
//! decision, not this module's.
//!
//! - [`InterceptCa`]: the CA, with a P-256 key of its own that signs nothing
//!   but leaves, so no signature gatehouse makes for anything else can be
//!   passed off as a certificate, nor a certificate as one of those. It is
//!   generated once and kept like gatehouse's other keys: written as PKCS#8
//!   PEM by `gatehouse keygen`, handed out only as [`zeroize::Zeroizing`]
//!   text, never printed (its `Debug` is the certificate's fingerprint).
//! - [`Leaves`]: one leaf per host, minted on first use (a fresh P-256 key,
//!   24 hours of validity, the host as its only SAN) and cached as a ready
//!   [`rustls::ServerConfig`], so a tunnel costs a handshake, not a
//!   signature.
//!
//! The leaf offers `http/1.1` only: injection and scrubbing work on HTTP/1.1
//! messages, so a client that can speak nothing else is refused at ALPN
//! rather than passed through unread.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use gatehouse_core::{Clock, SystemClock, UnixTime};
use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData as _, SanType, SerialNumber,
};
use rustls::ServerConfig;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, DnsName, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use zeroize::{Zeroize as _, Zeroizing};

/// The interception CA's common name: what a sandbox's trust store shows.
pub const CA_COMMON_NAME: &str = "gatehouse interception CA";

/// The one application protocol a leaf offers.
pub const ALPN_HTTP_1_1: &[u8] = b"http/1.1";

/// How long before "now" certificates start, so a sandbox whose clock runs
/// a little behind the proxy's still accepts them.
const BACKDATE: i64 = 3600;

/// How long a leaf is valid after it is minted.
const LEAF_LIFETIME: i64 = 24 * 3600;

/// How long before a leaf expires the cache mints its successor, so no
/// handshake presents a leaf about to lapse.
const LEAF_RENEW_BEFORE: i64 = 3600;

/// How long the CA is valid.
const CA_LIFETIME_YEARS: i32 = 10;

/// The name the probe leaf is minted for when a loaded CA is checked
/// (`.invalid` is reserved, RFC 6761 §6.4, so it names no real host).
const PROBE_HOST: &str = "probe.gatehouse.invalid";

/// A Unix time as the certificate library's date type (which rcgen does not
/// re-export, so it is only ever inferred), or `None` before 1970 or beyond
/// what the type holds.
macro_rules! datetime {
    ($unix:expr) => {
        u64::try_from($unix).ok().and_then(|secs| {
            Duration::from_secs(secs)
                .try_into()
                .ok()
                .and_then(|d| rcgen::date_time_ymd(1970, 1, 1).checked_add(d))
        })
    };
}

/// Why the CA or a leaf is not available. Each has a stable code
/// ([`InterceptError::code`]); the detail is fixed text, never a runtime
/// value, so no key material or input can reach a log line through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InterceptError {
    /// The CA certificate is unreadable, not a CA, not valid now, or not
    /// the key's.
    #[error("intercept_ca_invalid: {0}")]
    CaInvalid(&'static str),
    /// The CA key is unreadable or not an ECDSA P-256 key, or one could not
    /// be generated.
    #[error("intercept_key_invalid: {0}")]
    KeyInvalid(&'static str),
    /// A leaf could not be minted.
    #[error("intercept_leaf_failed: {0}")]
    LeafFailed(&'static str),
    /// The host is not one a leaf can be minted for.
    #[error("intercept_host_invalid")]
    HostInvalid,
}

impl InterceptError {
    /// The stable code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            InterceptError::CaInvalid(_) => "intercept_ca_invalid",
            InterceptError::KeyInvalid(_) => "intercept_key_invalid",
            InterceptError::LeafFailed(_) => "intercept_leaf_failed",
            InterceptError::HostInvalid => "intercept_host_invalid",
        }
    }
}

/// The interception CA: its own ECDSA P-256 key (never any other key),
/// generated and kept like gatehouse's other keys, and its certificate.
pub struct InterceptCa {
    /// The signing key. rcgen holds its PKCS#8 form; the copies this module
    /// makes of it are zeroized.
    key: KeyPair,
    /// What a leaf's issuer fields are made from: the CA's subject, and how
    /// its key identifier is found.
    issuer: CertificateParams,
    /// Whether leaves carry an authority key identifier: only when the CA
    /// has a subject key identifier for it to match.
    key_id: bool,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    /// The CA certificate's validity, in Unix seconds.
    not_before: UnixTime,
    not_after: UnixTime,
    sha256: [u8; 32],
}

impl std::fmt::Debug for InterceptCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterceptCa").field("sha256", &self.fingerprint()).finish_non_exhaustive()
    }
}

impl InterceptCa {
    /// A fresh CA: CN "gatehouse interception CA", basicConstraints CA:true
    /// pathlen:0 (it signs leaves, never another CA), keyUsage keyCertSign
    /// and cRLSign (critical), valid from an hour ago for ten years, with a
    /// random serial.
    pub fn generate() -> Result<Self, InterceptError> {
        Self::generate_at(SystemClock.now())
    }

    fn generate_at(now: UnixTime) -> Result<Self, InterceptError> {
        const CLOCK: InterceptError = InterceptError::CaInvalid("the clock is out of range");
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|_| InterceptError::KeyInvalid("an ECDSA P-256 key could not be generated"))?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, CA_COMMON_NAME);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number =
            Some(random_serial().ok_or(InterceptError::CaInvalid("no randomness for a serial number"))?);
        let not_before = now.checked_sub(BACKDATE).ok_or(CLOCK)?;
        params.not_before = datetime!(not_before).ok_or(CLOCK)?;
        let start = datetime!(now).ok_or(CLOCK)?;
        let years = start.year().checked_add(CA_LIFETIME_YEARS).ok_or(CLOCK)?;
        // 29 February has no counterpart in most years; the day after does.
        params.not_after = match start.replace_year(years) {
            Ok(end) => end,
            Err(_) => datetime!(now.saturating_add(86_400))
                .and_then(|next| next.replace_year(years).ok())
                .ok_or(CLOCK)?,
        };
        let not_after = params.not_after.unix_timestamp();
        let cert = params
            .self_signed(&key)
            .map_err(|_| InterceptError::CaInvalid("the certificate could not be signed"))?;
        let cert_der = cert.der().clone();
        Self::assemble(key, params, true, cert_der, not_before, not_after)
    }

    /// Loads a key (PKCS#8 PEM, ECDSA P-256) and its certificate (PEM).
    /// Refuses a certificate that is not a CA (no basicConstraints CA:true,
    /// or a keyUsage without keyCertSign), is not valid now, or whose public
    /// key is not the key's; and, as the last word, one that a leaf minted
    /// with the key does not verify against.
    pub fn from_pem(key_pem: &str, cert_pem: &str) -> Result<Self, InterceptError> {
        Self::from_pem_at(key_pem, cert_pem, SystemClock.now())
    }

    fn from_pem_at(key_pem: &str, cert_pem: &str, now: UnixTime) -> Result<Self, InterceptError> {
        let key_der = Zeroizing::new(
            PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|_| InterceptError::KeyInvalid("not a PKCS#8 PEM private key"))?,
        );
        let key = KeyPair::from_pkcs8_der_and_sign_algo(&key_der, &PKCS_ECDSA_P256_SHA256)
            .map_err(|_| InterceptError::KeyInvalid("not an ECDSA P-256 key"))?;
        drop(key_der);
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|_| InterceptError::CaInvalid("not a PEM certificate"))?;
        let cert = x509::parse(&cert_der).map_err(InterceptError::CaInvalid)?;
        if !cert.is_ca {
            return Err(InterceptError::CaInvalid("the certificate is not a CA"));
        }
        if !cert.may_sign_certificates {
            return Err(InterceptError::CaInvalid("the certificate's keyUsage does not allow keyCertSign"));
        }
        if cert.spki != key.subject_public_key_info().as_slice() {
            return Err(InterceptError::CaInvalid("the certificate's public key is not the key's"));
        }
        if !(cert.not_before..=cert.not_after).contains(&now) {
            return Err(InterceptError::CaInvalid("the certificate is not valid now"));
        }
        let mut issuer = CertificateParams::default();
        issuer.distinguished_name = x509::distinguished_name(&cert.subject)
            .ok_or(InterceptError::CaInvalid("the certificate's subject cannot be reproduced"))?;
        let key_id = cert.subject_key_id.is_some();
        if let Some(id) = cert.subject_key_id {
            issuer.key_identifier_method = KeyIdMethod::PreSpecified(id);
        }
        let (not_before, not_after) = (cert.not_before, cert.not_after);
        let ca = Self::assemble(key, issuer, key_id, cert_der, not_before, not_after)?;
        ca.probe(now)?;
        Ok(ca)
    }

    fn assemble(
        key: KeyPair,
        issuer: CertificateParams,
        key_id: bool,
        cert_der: CertificateDer<'static>,
        not_before: UnixTime,
        not_after: UnixTime,
    ) -> Result<Self, InterceptError> {
        let sha256 = sha256(&cert_der).ok_or(InterceptError::CaInvalid("no SHA-256 to fingerprint it"))?;
        let cert_pem = pem("CERTIFICATE", &cert_der).as_str().to_owned();
        Ok(Self { key, issuer, key_id, cert_der, cert_pem, not_before, not_after, sha256 })
    }

    /// Mints a leaf for [`PROBE_HOST`] and verifies it as a sandbox would,
    /// with this certificate as the only root: the signature proves the key
    /// is the certificate's, and the chain proves the issuer name leaves
    /// carry is the certificate's subject byte for byte.
    fn probe(&self, now: UnixTime) -> Result<(), InterceptError> {
        const UNUSABLE: InterceptError =
            InterceptError::CaInvalid("leaves it signs do not verify against it");
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|_| InterceptError::KeyInvalid("an ECDSA P-256 key could not be generated"))?;
        let host = LeafHost::parse(PROBE_HOST)?;
        let (leaf, _) = self.leaf(&host, &leaf_key, now)?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert_der.clone()).map_err(|_| UNUSABLE)?;
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|_| UNUSABLE)?;
        let name = ServerName::try_from(PROBE_HOST).map_err(|_| UNUSABLE)?;
        let secs = u64::try_from(now).map_err(|_| UNUSABLE)?;
        let at = rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_secs(secs));
        verifier.verify_server_cert(&leaf, &[], &name, &[], at).map(|_| ()).map_err(|_| UNUSABLE)
    }

    /// A leaf certificate for `host` with `leaf_key`'s public key, valid
    /// from an hour before `now` for [`LEAF_LIFETIME`], and when it starts.
    fn leaf(
        &self,
        host: &LeafHost,
        leaf_key: &KeyPair,
        now: UnixTime,
    ) -> Result<(CertificateDer<'static>, UnixTime), InterceptError> {
        const CLOCK: InterceptError = InterceptError::LeafFailed("the clock is out of range");
        if !(self.not_before..=self.not_after).contains(&now) {
            return Err(InterceptError::LeafFailed("the CA is not valid now"));
        }
        let mut params = CertificateParams::default();
        let not_before = now.checked_sub(BACKDATE).ok_or(CLOCK)?;
        params.not_before = datetime!(not_before).ok_or(CLOCK)?;
        params.not_after = datetime!(now.saturating_add(LEAF_LIFETIME)).ok_or(CLOCK)?;
        params.serial_number =
            Some(random_serial().ok_or(InterceptError::LeafFailed("no randomness for a serial number"))?);
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host.key.as_str());
        params.distinguished_name = name;
        params.subject_alt_names = vec![match &host.kind {
            HostKind::Ip(ip) => SanType::IpAddress(*ip),
            HostKind::Name => SanType::DnsName(
                Ia5String::try_from(host.key.as_str()).map_err(|_| InterceptError::HostInvalid)?,
            ),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = self.key_id;
        let issuer = Issuer::from_params(&self.issuer, &self.key);
        let cert = params
            .signed_by(leaf_key, &issuer)
            .map_err(|_| InterceptError::LeafFailed("the leaf could not be signed"))?;
        Ok((cert.der().clone(), not_before))
    }

    /// The key as PKCS#8 PEM, for the operator to store (as a secret).
    #[must_use]
    pub fn key_pem(&self) -> Zeroizing<String> {
        pem("PRIVATE KEY", self.key.serialized_der())
    }

    /// The certificate as PEM: what a sandbox adds to its trust store.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The certificate as DER.
    #[must_use]
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The certificate's SHA-256 fingerprint as `openssl x509 -fingerprint
    /// -sha256` prints it (uppercase hex pairs joined by `:`), for logs and
    /// for an operator to compare with what a sandbox trusts.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        let hex: Vec<String> = self.sha256.iter().map(|b| format!("{b:02X}")).collect();
        hex.join(":")
    }
}

/// Leaf certificates per host, minted on first use and cached.
///
/// Minting (a key, a signature, a server config) runs on the calling thread
/// outside the cache's lock, so a mint never holds up handshakes for hosts
/// already cached; two first tunnels to one host may both mint, and the
/// first to finish is the one kept.
pub struct Leaves {
    ca: Arc<InterceptCa>,
    capacity: usize,
    clock: Arc<dyn Clock>,
    provider: Arc<CryptoProvider>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_host: HashMap<String, Cached>,
    /// Hosts by when their leaf was cached, oldest first.
    by_age: BTreeMap<u64, String>,
    next: u64,
}

struct Cached {
    config: Arc<ServerConfig>,
    /// The leaf's notBefore: a clock set back past it must not serve it.
    valid_from: UnixTime,
    /// When its successor is minted instead.
    renew_at: UnixTime,
    age: u64,
}

impl Cached {
    fn is_fresh(&self, now: UnixTime) -> bool {
        (self.valid_from..self.renew_at).contains(&now)
    }
}

impl std::fmt::Debug for Leaves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaves")
            .field("ca", &self.ca)
            .field("capacity", &self.capacity)
            .field("cached", &self.lock().by_host.len())
            .finish_non_exhaustive()
    }
}

impl Leaves {
    /// Leaves signed by `ca`, at most `capacity` hosts cached (none with
    /// `0`: every call mints), on the system clock.
    #[must_use]
    pub fn new(ca: Arc<InterceptCa>, capacity: usize) -> Self {
        Self::with_clock(ca, capacity, Arc::new(SystemClock))
    }

    /// As [`Leaves::new`], with validity and renewal taken from `clock`.
    #[must_use]
    pub fn with_clock(ca: Arc<InterceptCa>, capacity: usize, clock: Arc<dyn Clock>) -> Self {
        Self { ca, capacity, clock, provider: provider(), cache: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // The cache is consistent between statements; a panic elsewhere
        // holding the lock leaves nothing half-written.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A rustls server config presenting a leaf for `host` — a DNS name
    /// gets a DNS SAN, an IP literal (IPv6 bracketed or bare) an IP SAN —
    /// signed by the CA, valid from an hour ago for 24 hours, ALPN
    /// `http/1.1` only, TLS 1.2 and 1.3 with the aws-lc-rs provider.
    ///
    /// Cached per host until an hour before the leaf expires; at most
    /// `capacity` hosts are held, the oldest evicted first. The `bool` says
    /// whether the leaf was minted by this call (for metrics).
    ///
    /// `host` is normalized already (lowercase, no trailing dot); a name
    /// with anything but `a-z`, `0-9`, `.` and `-`, an empty label or an
    /// empty host is refused (`intercept_host_invalid`).
    pub fn server_config(&self, host: &str) -> Result<(Arc<ServerConfig>, bool), InterceptError> {
        let host = LeafHost::parse(host)?;
        let now = self.clock.now();
        if let Some(cached) = self.lock().by_host.get(&host.key).filter(|c| c.is_fresh(now)) {
            return Ok((cached.config.clone(), false));
        }
        let (config, valid_from) = self.mint(&host, now)?;
        let renew_at = now.saturating_add(LEAF_LIFETIME - LEAF_RENEW_BEFORE);
        let mut cache = self.lock();
        if let Some(cached) = cache.by_host.get(&host.key).filter(|c| c.is_fresh(now)) {
            // Another call minted this host while this one did.
            return Ok((cached.config.clone(), false));
        }
        if self.capacity == 0 {
            return Ok((config, true));
        }
        if let Some(stale) = cache.by_host.remove(&host.key) {
            cache.by_age.remove(&stale.age);
        }
        while cache.by_host.len() >= self.capacity {
            let Some((_, oldest)) = cache.by_age.pop_first() else { break };
            cache.by_host.remove(&oldest);
        }
        let age = cache.next;
        cache.next = cache.next.wrapping_add(1);
        cache.by_age.insert(age, host.key.clone());
        cache.by_host.insert(host.key, Cached { config: config.clone(), valid_from, renew_at, age });
        Ok((config, true))
    }

    /// A server config with a fresh leaf for `host`, and the leaf's start.
    fn mint(&self, host: &LeafHost, now: UnixTime) -> Result<(Arc<ServerConfig>, UnixTime), InterceptError> {
        const CONFIG: InterceptError = InterceptError::LeafFailed("the server configuration was refused");
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|_| InterceptError::LeafFailed("an ECDSA P-256 key could not be generated"))?;
        let (cert, valid_from) = self.ca.leaf(host, &leaf_key, now)?;
        let mut der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let signer = rustls::crypto::aws_lc_rs::sign::any_ecdsa_type(&der);
        der.zeroize();
        let certified = rustls::sign::CertifiedKey::new(vec![cert], signer.map_err(|_| CONFIG)?);
        certified.keys_match().map_err(|_| CONFIG)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|_| CONFIG)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![ALPN_HTTP_1_1.to_vec()];
        Ok((Arc::new(config), valid_from))
    }
}

/// What a leaf is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostKind {
    Name,
    Ip(IpAddr),
}

/// A host a leaf can be minted for, with its cache key: the name, or the
/// address in its canonical form (so `[::1]` and `::1` share a leaf).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeafHost {
    key: String,
    kind: HostKind,
}

impl LeafHost {
    fn parse(host: &str) -> Result<Self, InterceptError> {
        let ip = |ip: IpAddr| Self { key: ip.to_string(), kind: HostKind::Ip(ip) };
        if let Some(inner) = host.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or(InterceptError::HostInvalid)?;
            let v6 = inner.parse::<Ipv6Addr>().map_err(|_| InterceptError::HostInvalid)?;
            return Ok(ip(IpAddr::V6(v6)));
        }
        if let Ok(addr) = host.parse::<IpAddr>() {
            return Ok(ip(addr));
        }
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-';
        if host.is_empty()
            || host.len() > 253
            || !host.bytes().all(allowed)
            || host.split('.').any(|label| label.is_empty() || label.len() > 63)
            || DnsName::try_from(host).is_err()
        {
            return Err(InterceptError::HostInvalid);
        }
        Ok(Self { key: host.to_owned(), kind: HostKind::Name })
    }
}

/// The tree's one crypto provider.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// SHA-256 from the provider (the hash its TLS 1.3 suites use), so no second
/// crypto implementation enters the tree for a fingerprint.
fn sha256(data: &[u8]) -> Option<[u8; 32]> {
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    suite.common.hash_provider.hash(data).as_ref().try_into().ok()
}

/// A random positive 127-bit serial (RFC 5280 §4.1.2.2 wants it unique per
/// CA; random makes it so without state, and unpredictable).
fn random_serial() -> Option<SerialNumber> {
    let mut serial = [0u8; 16];
    rustls::crypto::aws_lc_rs::default_provider().secure_random.fill(&mut serial).ok()?;
    serial[0] &= 0x7f;
    // A leading zero byte would be dropped by the encoder; keep 16 bytes.
    serial[0] |= 0x01;
    Some(SerialNumber::from_slice(&serial))
}

/// `der` as PEM with `label`, in a buffer sized up front and zeroized when
/// dropped, since it may hold a private key.
fn pem(label: &str, der: &[u8]) -> Zeroizing<String> {
    let encoded_len = base64::encoded_len(der.len(), true).unwrap_or(0);
    let mut encoded = Zeroizing::new(String::with_capacity(encoded_len));
    STANDARD.encode_string(der, &mut encoded);
    let lines = encoded.len().div_ceil(64);
    let mut out = Zeroizing::new(String::with_capacity(encoded.len() + lines + 2 * label.len() + 32));
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    let mut rest = encoded.as_str();
    while let Some((line, tail)) = rest.split_at_checked(rest.len().min(64)) {
        if line.is_empty() {
            break;
        }
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
}

/// What loading an interception CA needs from its certificate: the subject
/// (to issue under it), the public key (to hold to the key), the validity
/// and the extensions that make it a CA.
///
/// RustCrypto's `x509-cert` reads the certificate on the tree's `der`, which
/// is strict DER (definite, minimal lengths, no trailing bytes); rcgen's own
/// reader would bring a second ASN.1 stack for this one use. This module
/// only decides what the parsed certificate means for a CA, and the last
/// word on it is not this code: [`InterceptCa::from_pem`] mints a leaf under
/// what was read and has webpki verify it against the certificate.
///
/// `der` has no form for a UniversalString or a time before 1970, so a
/// certificate holding either does not load; neither belongs in a CA made
/// for this (RFC 5280 §4.1.2.4 keeps UniversalString for old names only).
mod x509 {
    use gatehouse_core::UnixTime;
    use rcgen::string::{BmpString, Ia5String, PrintableString, TeletexString};
    use rcgen::{DistinguishedName, DnType, DnValue};
    use x509_cert::Certificate;
    use x509_cert::der::oid::AssociatedOid as _;
    use x509_cert::der::{Decode as _, Encode as _, ErrorKind, Tag, Tagged as _};
    use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, SubjectKeyIdentifier};
    use x509_cert::name::Name;
    use x509_cert::time::Time;

    const NOT_X509: &str = "not a DER X.509 certificate";
    const VALIDITY: &str = "the certificate's validity is unreadable";

    /// What [`parse`] reads from a certificate.
    #[derive(Debug)]
    pub(super) struct CaCert {
        pub(super) subject: Name,
        /// The whole SubjectPublicKeyInfo, as DER: compared byte for byte
        /// with the key's.
        pub(super) spki: Vec<u8>,
        pub(super) not_before: UnixTime,
        pub(super) not_after: UnixTime,
        /// basicConstraints says CA:true.
        pub(super) is_ca: bool,
        /// No keyUsage, or one with keyCertSign.
        pub(super) may_sign_certificates: bool,
        pub(super) subject_key_id: Option<Vec<u8>>,
    }

    /// Reads a certificate (RFC 5280 §4.1). The signature is not checked:
    /// the certificate is a trust anchor, taken on the operator's word.
    pub(super) fn parse(der: &[u8]) -> Result<CaCert, &'static str> {
        let cert = Certificate::from_der(der).map_err(|e| match e.kind() {
            // The only times in a certificate are its validity's.
            ErrorKind::DateTime
            | ErrorKind::Value { tag: Tag::UtcTime | Tag::GeneralizedTime }
            | ErrorKind::Length { tag: Tag::UtcTime | Tag::GeneralizedTime } => VALIDITY,
            _ => NOT_X509,
        })?;
        let tbs = cert.tbs_certificate();
        let validity = tbs.validity();
        let mut ca = CaCert {
            subject: tbs.subject().clone(),
            // Decoding was strict DER, so encoding again gives the bytes read.
            spki: tbs.subject_public_key_info().to_der().map_err(|_| NOT_X509)?,
            not_before: unix(validity.not_before).ok_or(VALIDITY)?,
            not_after: unix(validity.not_after).ok_or(VALIDITY)?,
            is_ca: false,
            may_sign_certificates: true,
            subject_key_id: None,
        };
        let extensions = tbs.extensions().map(Vec::as_slice).unwrap_or_default();
        for (i, ext) in extensions.iter().enumerate() {
            // RFC 5280 §4.2: at most one instance of an extension. x509-cert
            // would take the first of two and not say so.
            if extensions.get(..i).unwrap_or_default().iter().any(|e| e.extn_id == ext.extn_id) {
                return Err("the certificate repeats an extension");
            }
            let value = ext.extn_value.as_bytes();
            if ext.extn_id == BasicConstraints::OID {
                let constraints = BasicConstraints::from_der(value)
                    .map_err(|_| "the certificate's basicConstraints is unreadable")?;
                ca.is_ca = constraints.ca;
            } else if ext.extn_id == KeyUsage::OID {
                let usage =
                    KeyUsage::from_der(value).map_err(|_| "the certificate's keyUsage is unreadable")?;
                ca.may_sign_certificates = usage.key_cert_sign();
            } else if ext.extn_id == SubjectKeyIdentifier::OID {
                // An empty identifier would give leaves an empty authority
                // key identifier that matches nothing.
                let id = SubjectKeyIdentifier::from_der(value)
                    .ok()
                    .map(|id| id.0.as_bytes().to_vec())
                    .filter(|id| !id.is_empty())
                    .ok_or("the certificate's subjectKeyIdentifier is unreadable")?;
                ca.subject_key_id = Some(id);
            }
        }
        Ok(ca)
    }

    /// A validity time as Unix seconds (`der` holds none before 1970).
    fn unix(time: Time) -> Option<UnixTime> {
        UnixTime::try_from(time.to_unix_duration().as_secs()).ok()
    }

    /// The subject as rcgen's name type, which it encodes again for every
    /// leaf's issuer field: `None` for what that type cannot say the same
    /// way (an empty name, a multi-valued RDN, an attribute twice, a string
    /// type it has no form for).
    pub(super) fn distinguished_name(subject: &Name) -> Option<DistinguishedName> {
        if subject.is_empty() {
            return None;
        }
        let mut name = DistinguishedName::new();
        for rdn in subject.iter_rdn() {
            let mut attributes = rdn.iter();
            let (Some(attribute), None) = (attributes.next(), attributes.next()) else { return None };
            let arcs: Vec<u64> = attribute.oid.arcs().map(u64::from).collect();
            let kind = DnType::from_oid(&arcs);
            if name.get(&kind).is_some() {
                return None;
            }
            let bytes = attribute.value.value();
            let text = || std::str::from_utf8(bytes).ok();
            let value = match attribute.value.tag() {
                Tag::Utf8String => DnValue::Utf8String(text()?.to_owned()),
                Tag::PrintableString => DnValue::PrintableString(PrintableString::try_from(text()?).ok()?),
                Tag::TeletexString => DnValue::TeletexString(TeletexString::try_from(text()?).ok()?),
                Tag::Ia5String => DnValue::Ia5String(Ia5String::try_from(text()?).ok()?),
                Tag::BmpString => DnValue::BmpString(BmpString::from_utf16be(bytes.to_vec()).ok()?),
                _ => return None,
            };
            name.push(kind, value);
        }
        Some(name)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn times_read_as_unix_seconds() {
            let read = |tag: u8, text: &str| {
                let mut der = vec![tag, u8::try_from(text.len()).unwrap()];
                der.extend_from_slice(text.as_bytes());
                Time::from_der(&der).ok().and_then(unix)
            };
            const UTC_TIME: u8 = 0x17;
            const GENERALIZED_TIME: u8 = 0x18;
            assert_eq!(read(UTC_TIME, "700101000000Z"), Some(0));
            assert_eq!(read(UTC_TIME, "491231235959Z"), Some(2_524_607_999));
            assert_eq!(read(GENERALIZED_TIME, "20240229120000Z"), Some(1_709_208_000));
            assert_eq!(read(GENERALIZED_TIME, "20230229120000Z"), None);
            assert_eq!(read(UTC_TIME, "7001010000Z"), None);
            assert_eq!(read(UTC_TIME, "700101000000+0100"), None);
            assert_eq!(read(GENERALIZED_TIME, "700101000000Z"), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use gatehouse_core::ManualClock;
    use rcgen::DnValue;
    use rustls::{CertificateError, ClientConfig, RootCertStore};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    fn ca() -> Arc<InterceptCa> {
        Arc::new(InterceptCa::generate().unwrap())
    }

    fn client(roots: RootCertStore) -> ClientConfig {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    }

    fn trusting(ca: &InterceptCa) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(ca.cert_der().to_vec())).unwrap();
        client(roots)
    }

    /// What the client saw: the ALPN it negotiated and the server's answer.
    type ClientSide = io::Result<(Option<Vec<u8>>, [u8; 4])>;

    /// A real handshake over an in-memory pipe, then one exchange each way.
    async fn handshake(
        server: Arc<ServerConfig>,
        client: ClientConfig,
        name: &str,
    ) -> (ClientSide, io::Result<()>) {
        let name = ServerName::try_from(name.to_owned()).unwrap();
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let server = async move {
            let mut tls = acceptor.accept(server_io).await?;
            let mut ping = [0u8; 4];
            tls.read_exact(&mut ping).await?;
            assert_eq!(&ping, b"ping");
            tls.write_all(b"pong").await?;
            tls.shutdown().await
        };
        let client = async move {
            let mut tls = connector.connect(name, client_io).await?;
            let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            tls.write_all(b"ping").await?;
            let mut pong = [0u8; 4];
            tls.read_exact(&mut pong).await?;
            Ok((alpn, pong))
        };
        let both = async { tokio::join!(client, server) };
        tokio::time::timeout(Duration::from_secs(10), both).await.expect("the handshake does not hang")
    }

    fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
    }

    fn code<T: std::fmt::Debug>(result: Result<T, InterceptError>) -> &'static str {
        result.unwrap_err().code()
    }

    #[tokio::test]
    async fn a_client_trusting_the_ca_completes_a_handshake_on_http_1_1() {
        let ca = ca();
        let leaves = Leaves::new(ca.clone(), 8);
        let (server, minted) = leaves.server_config("api.example.com").unwrap();
        assert!(minted);
        let (client, server) = handshake(server, trusting(&ca), "api.example.com").await;
        let (alpn, pong) = client.unwrap();
        server.unwrap();
        assert_eq!(alpn.as_deref(), Some(b"http/1.1".as_slice()));
        assert_eq!(&pong, b"pong");
    }

    #[tokio::test]
    async fn tls_1_2_works_too() {
        let ca = ca();
        let leaves = Leaves::new(ca.clone(), 8);
        let (server, _) = leaves.server_config("api.example.com").unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(ca.cert_der().to_vec())).unwrap();
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (client, server) = handshake(server, config, "api.example.com").await;
        assert_eq!(&client.unwrap().1, b"pong");
        server.unwrap();
    }

    #[tokio::test]
    async fn a_client_asking_for_another_name_refuses_the_leaf() {
        let ca = ca();
        let (server, _) = Leaves::new(ca.clone(), 8).server_config("api.example.com").unwrap();
        let (client, server) = handshake(server, trusting(&ca), "other.example.com").await;
        let err = client.unwrap_err();
        assert!(
            matches!(
                rustls_error(&err),
                Some(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
                ))
            ),
            "{err:?}"
        );
        assert!(server.is_err());
    }

    #[tokio::test]
    async fn a_client_that_does_not_trust_the_ca_refuses_the_leaf_and_the_server_fails_cleanly() {
        let ca = ca();
        let leaves = Leaves::new(ca.clone(), 8);
        let (server, _) = leaves.server_config("api.example.com").unwrap();
        // The system's roots (what the fetch client trusts), and none at all.
        for config in [crate::connect::tls_config(&[]).unwrap(), client(RootCertStore::empty())] {
            let (client, server) = handshake(server.clone(), config, "api.example.com").await;
            let err = client.unwrap_err();
            assert!(
                matches!(
                    rustls_error(&err),
                    Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer))
                ),
                "{err:?}"
            );
            let err = server.unwrap_err();
            assert!(
                matches!(
                    rustls_error(&err),
                    Some(rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA))
                ),
                "{err:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_ip_host_gets_an_ip_san() {
        let ca = ca();
        let leaves = Leaves::new(ca.clone(), 8);
        let (server, _) = leaves.server_config("127.0.0.1").unwrap();
        let (client, server) = handshake(server, trusting(&ca), "127.0.0.1").await;
        assert_eq!(&client.unwrap().1, b"pong");
        server.unwrap();
        // Not for another address, nor for a name.
        let (server, _) = leaves.server_config("127.0.0.1").unwrap();
        assert!(handshake(server.clone(), trusting(&ca), "127.0.0.2").await.0.is_err());
        assert!(handshake(server, trusting(&ca), "localhost").await.0.is_err());

        // IPv6, bracketed or bare, is one host.
        let (bracketed, minted) = leaves.server_config("[::1]").unwrap();
        assert!(minted);
        let (bare, minted) = leaves.server_config("::1").unwrap();
        assert!(!minted);
        assert!(Arc::ptr_eq(&bracketed, &bare));
        let (client, server) = handshake(bare, trusting(&ca), "::1").await;
        assert_eq!(&client.unwrap().1, b"pong");
        server.unwrap();
    }

    #[test]
    fn the_ip_name_is_what_server_name_parses_it_as() {
        assert!(matches!(ServerName::try_from("127.0.0.1"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(ServerName::try_from("::1"), Ok(ServerName::IpAddress(_))));
    }

    #[test]
    fn the_ca_is_what_was_asked_for() {
        let now = SystemClock.now();
        let ca = InterceptCa::generate_at(now).unwrap();
        let cert = x509::parse(ca.cert_der()).unwrap();
        assert!(cert.is_ca);
        assert!(cert.may_sign_certificates);
        assert!(cert.subject_key_id.is_some());
        assert_eq!(cert.not_before, now - 3600);
        let ten_years = cert.not_after - now;
        assert!((3652 * 86_400..=3653 * 86_400).contains(&ten_years), "{ten_years}");
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, CA_COMMON_NAME);
        assert_eq!(x509::distinguished_name(&cert.subject), Some(name));
        // The CA's own key: P-256, and the certificate is its.
        let key = KeyPair::from_pem(&ca.key_pem()).unwrap();
        assert_eq!(key.algorithm(), &PKCS_ECDSA_P256_SHA256);
        assert_eq!(cert.spki, key.subject_public_key_info().as_slice());
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(ca.key_pem().starts_with("-----BEGIN PRIVATE KEY-----\n"));
        // Serials are random.
        let other = InterceptCa::generate().unwrap();
        assert_ne!(ca.cert_der(), other.cert_der());
        assert_ne!(ca.fingerprint(), other.fingerprint());
    }

    #[test]
    fn from_pem_round_trips() {
        let ca = InterceptCa::generate().unwrap();
        let loaded = InterceptCa::from_pem(&ca.key_pem(), ca.cert_pem()).unwrap();
        assert_eq!(loaded.cert_der(), ca.cert_der());
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        assert_eq!(*loaded.key_pem(), *ca.key_pem());
        assert_eq!(loaded.fingerprint(), ca.fingerprint());
    }

    #[tokio::test]
    async fn a_loaded_ca_issues_leaves_the_original_certificate_verifies() {
        let ca = InterceptCa::generate().unwrap();
        let loaded = Arc::new(InterceptCa::from_pem(&ca.key_pem(), ca.cert_pem()).unwrap());
        let (server, _) = Leaves::new(loaded, 8).server_config("api.example.com").unwrap();
        let (client, server) = handshake(server, trusting(&ca), "api.example.com").await;
        assert_eq!(&client.unwrap().1, b"pong");
        server.unwrap();
    }

    #[tokio::test]
    async fn a_ca_made_elsewhere_loads_when_its_subject_can_be_reproduced() {
        // Printable strings, several attributes, a SHA-1-length key id: not
        // what `generate` writes.
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CountryName, DnValue::PrintableString("DE".try_into().unwrap()));
        name.push(DnType::OrganizationName, DnValue::PrintableString("Example Corp".try_into().unwrap()));
        name.push(DnType::CommonName, "Example Interception Root");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        params.key_identifier_method = KeyIdMethod::PreSpecified(vec![7; 20]);
        let cert = params.self_signed(&key).unwrap();
        let loaded = Arc::new(InterceptCa::from_pem(&key.serialize_pem(), &cert.pem()).unwrap());
        let (server, _) = Leaves::new(loaded, 8).server_config("api.example.com").unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let (client, server) = handshake(server, client(roots), "api.example.com").await;
        assert_eq!(&client.unwrap().1, b"pong");
        server.unwrap();
    }

    #[test]
    fn from_pem_refuses_what_is_not_the_ca_and_its_key() {
        let ca = InterceptCa::generate().unwrap();
        let other = InterceptCa::generate().unwrap();
        // A key and a certificate that are not each other's.
        assert_eq!(code(InterceptCa::from_pem(&other.key_pem(), ca.cert_pem())), "intercept_ca_invalid");
        // Garbage either side, or the two swapped.
        assert_eq!(code(InterceptCa::from_pem("garbage", ca.cert_pem())), "intercept_key_invalid");
        assert_eq!(code(InterceptCa::from_pem(&ca.key_pem(), "garbage")), "intercept_ca_invalid");
        assert_eq!(code(InterceptCa::from_pem(ca.cert_pem(), &ca.key_pem())), "intercept_key_invalid");
        let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(code(InterceptCa::from_pem(&ca.key_pem(), not_der)), "intercept_ca_invalid");
        let mut truncated = ca.cert_der().to_vec();
        truncated.pop();
        let truncated = pem("CERTIFICATE", &truncated);
        assert_eq!(code(InterceptCa::from_pem(&ca.key_pem(), &truncated)), "intercept_ca_invalid");
        // A key that is not P-256.
        let p384 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        assert_eq!(
            code(InterceptCa::from_pem(&p384.serialize_pem(), ca.cert_pem())),
            "intercept_key_invalid"
        );
    }

    /// A self-signed certificate for `key` from `params`, as PEM.
    fn self_signed(key: &KeyPair, configure: impl FnOnce(&mut CertificateParams)) -> String {
        let mut params = CertificateParams::new(vec!["ca.example".to_owned()]).unwrap();
        configure(&mut params);
        params.self_signed(key).unwrap().pem()
    }

    #[test]
    fn from_pem_refuses_a_certificate_that_is_not_a_ca() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = key.serialize_pem();
        // No basicConstraints at all, CA:false, and a CA whose keyUsage does
        // not allow signing certificates.
        let none = self_signed(&key, |_| {});
        let explicit = self_signed(&key, |p| p.is_ca = IsCa::ExplicitNoCa);
        let no_cert_sign = self_signed(&key, |p| {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        });
        for cert in [none, explicit, no_cert_sign] {
            let err = InterceptCa::from_pem(&pem, &cert).unwrap_err();
            assert_eq!(err.code(), "intercept_ca_invalid");
        }
        // The same key with a proper CA certificate loads.
        let ca = self_signed(&key, |p| {
            p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        });
        InterceptCa::from_pem(&pem, &ca).unwrap();
    }

    #[test]
    fn only_strict_der_is_read() {
        let ca = InterceptCa::generate().unwrap();
        let der = ca.cert_der();
        x509::parse(der).unwrap();
        // A certificate of a few hundred bytes: a two-byte length.
        assert_eq!(der[..2], [0x30, 0x82]);
        let contents = &der[4..];
        let non_minimal = [&[0x30, 0x83, 0x00], &der[2..4], contents].concat();
        let indefinite = [&[0x30, 0x80], contents, &[0x00, 0x00]].concat();
        let trailing = [der, &[0x00]].concat();
        let truncated = &der[..der.len() - 1];
        for bad in [&non_minimal[..], &indefinite, &trailing, truncated, &[], &der[..4]] {
            assert_eq!(x509::parse(bad).unwrap_err(), "not a DER X.509 certificate");
            let pem = pem("CERTIFICATE", bad);
            assert_eq!(code(InterceptCa::from_pem(&ca.key_pem(), &pem)), "intercept_ca_invalid");
        }
    }

    #[test]
    fn a_repeated_or_unreadable_extension_is_refused() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        // A second basicConstraints (CA:true) behind rcgen's own.
        let repeated = self_signed(&key, |p| {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
                &[2, 5, 29, 19],
                vec![0x30, 0x03, 0x01, 0x01, 0xff],
            )];
        });
        assert_eq!(
            InterceptCa::from_pem(&key.serialize_pem(), &repeated).unwrap_err(),
            InterceptError::CaInvalid("the certificate repeats an extension")
        );
        // A basicConstraints that is not a SEQUENCE.
        let unreadable = self_signed(&key, |p| {
            p.custom_extensions =
                vec![rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 19], vec![0x01, 0x01, 0xff])];
        });
        assert_eq!(
            InterceptCa::from_pem(&key.serialize_pem(), &unreadable).unwrap_err(),
            InterceptError::CaInvalid("the certificate's basicConstraints is unreadable")
        );
    }

    #[test]
    fn subjects_read_back_as_they_were_written() {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut name = DistinguishedName::new();
        name.push(DnType::CountryName, DnValue::PrintableString("DE".try_into().unwrap()));
        name.push(DnType::OrganizationName, DnValue::TeletexString("Example".try_into().unwrap()));
        name.push(DnType::OrganizationalUnitName, DnValue::BmpString("Ünit".try_into().unwrap()));
        name.push(DnType::LocalityName, DnValue::Utf8String("Köln".to_owned()));
        // emailAddress (PKCS #9), which rcgen has no name for.
        let email = DnType::CustomDnType(vec![1, 2, 840, 113_549, 1, 9, 1]);
        name.push(email, DnValue::Ia5String("ca@example.com".try_into().unwrap()));
        name.push(DnType::CommonName, "Example Interception Root");
        let mut params = CertificateParams::default();
        params.distinguished_name = name.clone();
        let cert = params.self_signed(&key).unwrap();
        let read = x509::parse(cert.der()).unwrap();
        assert_eq!(x509::distinguished_name(&read.subject), Some(name));
        // An empty subject gives leaves no issuer to name.
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(x509::distinguished_name(&x509::parse(cert.der()).unwrap().subject), None);
    }

    #[test]
    fn from_pem_refuses_a_ca_not_valid_now() {
        let now = SystemClock.now();
        let old = InterceptCa::generate_at(now - 11 * 366 * 86_400).unwrap();
        let err = InterceptCa::from_pem(&old.key_pem(), old.cert_pem()).unwrap_err();
        assert_eq!(err, InterceptError::CaInvalid("the certificate is not valid now"));
        let early = InterceptCa::generate_at(now + 2 * 86_400).unwrap();
        assert_eq!(code(InterceptCa::from_pem(&early.key_pem(), early.cert_pem())), "intercept_ca_invalid");
        // Nor does it mint leaves outside its validity.
        let leaves = Leaves::new(Arc::new(old), 8);
        assert_eq!(code(leaves.server_config("api.example.com")), "intercept_leaf_failed");
    }

    #[test]
    fn a_cached_leaf_is_served_again() {
        let leaves = Leaves::new(ca(), 8);
        let (first, minted) = leaves.server_config("api.example.com").unwrap();
        assert!(minted);
        let (second, minted) = leaves.server_config("api.example.com").unwrap();
        assert!(!minted);
        assert!(Arc::ptr_eq(&first, &second));
        let (other, minted) = leaves.server_config("other.example.com").unwrap();
        assert!(minted);
        assert!(!Arc::ptr_eq(&first, &other));
    }

    #[test]
    fn the_oldest_host_is_evicted_at_capacity() {
        let leaves = Leaves::new(ca(), 2);
        assert!(leaves.server_config("a.example").unwrap().1);
        assert!(leaves.server_config("b.example").unwrap().1);
        assert!(!leaves.server_config("a.example").unwrap().1);
        assert!(leaves.server_config("c.example").unwrap().1);
        // `a` was cached first, so it went; `b` and `c` stay.
        assert!(!leaves.server_config("b.example").unwrap().1);
        assert!(!leaves.server_config("c.example").unwrap().1);
        // `a` again evicts `b`, now the oldest.
        assert!(leaves.server_config("a.example").unwrap().1);
        assert!(!leaves.server_config("c.example").unwrap().1);
        assert!(leaves.server_config("b.example").unwrap().1);
        assert_eq!(leaves.lock().by_host.len(), 2);
        assert_eq!(leaves.lock().by_age.len(), 2);

        // Capacity zero caches nothing.
        let uncached = Leaves::new(ca(), 0);
        assert!(uncached.server_config("a.example").unwrap().1);
        assert!(uncached.server_config("a.example").unwrap().1);
    }

    #[test]
    fn a_leaf_is_renewed_an_hour_before_it_expires() {
        let clock = ManualClock::new(SystemClock.now());
        let leaves = Leaves::with_clock(ca(), 8, Arc::new(clock.clone()));
        let (first, _) = leaves.server_config("api.example.com").unwrap();
        clock.advance(23 * 3600 - 1);
        let (same, minted) = leaves.server_config("api.example.com").unwrap();
        assert!(!minted);
        assert!(Arc::ptr_eq(&first, &same));
        clock.advance(1);
        let (renewed, minted) = leaves.server_config("api.example.com").unwrap();
        assert!(minted);
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert_eq!(leaves.lock().by_host.len(), 1);
        assert_eq!(leaves.lock().by_age.len(), 1);
        // A clock set back before the leaf's start gets a new one too.
        clock.advance(-3 * 3600);
        assert!(leaves.server_config("api.example.com").unwrap().1);
    }

    #[test]
    fn leaves_have_the_asked_for_validity() {
        let ca = InterceptCa::generate().unwrap();
        let now = SystemClock.now();
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let (leaf, start) = ca.leaf(&LeafHost::parse("api.example.com").unwrap(), &key, now).unwrap();
        let leaf = x509::parse(&leaf).unwrap();
        assert_eq!((start, leaf.not_before, leaf.not_after), (now - 3600, now - 3600, now + 24 * 3600));
        assert!(!leaf.is_ca);
    }

    #[test]
    fn hosts_are_checked() {
        let leaves = Leaves::new(ca(), 8);
        for bad in [
            "",
            "API.example.com",
            "api_1.example.com",
            "api.example.com.",
            ".example.com",
            "a..example.com",
            "exa mple.com",
            "api.example.com:443",
            "[127.0.0.1]",
            "[::1",
            "::1]",
            "[fe80::1%eth0]",
            "é.example",
            &format!("{}.example", "a".repeat(64)),
            &format!("{}example", "a.".repeat(127)),
        ] {
            assert_eq!(leaves.server_config(bad).unwrap_err(), InterceptError::HostInvalid, "{bad:?}");
        }
        for good in
            ["localhost", "xn--bcher-kva.example", "a-b.example", "10.0.0.1", "2001:db8::1", "[2001:db8::1]"]
        {
            leaves.server_config(good).unwrap();
        }
    }

    #[test]
    fn debug_shows_no_key() {
        let ca = ca();
        let pem = ca.key_pem();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let leaves = Leaves::new(ca.clone(), 8);
        leaves.server_config("api.example.com").unwrap();
        for shown in [format!("{ca:?}"), format!("{leaves:?}"), format!("{ca:#?}"), format!("{leaves:#?}")] {
            assert!(!shown.contains("PRIVATE"), "{shown}");
            assert!(!shown.contains(&body), "{shown}");
            for line in pem.lines().filter(|l| !l.starts_with("-----")) {
                assert!(!shown.contains(line), "{shown}");
            }
            assert!(shown.contains(&ca.fingerprint()), "{shown}");
        }
        assert_eq!(format!("{ca:?}"), format!("InterceptCa {{ sha256: {:?}, .. }}", ca.fingerprint()));
    }

    #[test]
    fn the_fingerprint_is_the_certificates_sha256() {
        let ca = ca();
        let hex = ca.fingerprint();
        assert_eq!(hex.len(), 32 * 3 - 1);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase() || b == b':'));
        // SHA-256 of "abc" (FIPS 180-2, appendix B.1), through the same path.
        let abc = sha256(b"abc").unwrap();
        assert_eq!(abc[..4], [0xba, 0x78, 0x16, 0xbf]);
    }

    #[test]
    fn errors_have_stable_codes() {
        assert_eq!(InterceptError::HostInvalid.to_string(), "intercept_host_invalid");
        assert_eq!(
            InterceptError::LeafFailed("the CA is not valid now").to_string(),
            "intercept_leaf_failed: the CA is not valid now"
        );
        assert_eq!(InterceptError::KeyInvalid("x").code(), "intercept_key_invalid");
        assert_eq!(InterceptError::CaInvalid("x").code(), "intercept_ca_invalid");
    }

    #[test]
    fn the_types_can_be_shared_across_tasks() {
        fn shared<T: Send + Sync>() {}
        shared::<InterceptCa>();
        shared::<Leaves>();
    }
}
