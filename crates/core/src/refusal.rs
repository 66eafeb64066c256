//! Refusals: recorded security decisions, each with a stable reason code.
//!
//! Reason codes are part of gatehouse's public contract — scripts, dashboards
//! and alerts match on them — so they form one closed list here, rendered in
//! `snake_case`, and a test pins the list. Add codes; never rename one.

use serde::{Deserialize, Serialize};

use crate::clock::UnixTime;

macro_rules! closed_codes {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $code:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stable wire form.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            /// Parses the stable wire form.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                Self::parse(&s).ok_or_else(|| serde::de::Error::custom("unknown code"))
            }
        }
    };
}
pub(crate) use closed_codes;

closed_codes! {
    /// Why something was refused.
    pub enum Reason {
        /// A request that must carry an execution manifest carried none.
        ManifestMissing => "manifest_missing",
        /// The manifest is not a well-formed token (encoding, JSON, header).
        ManifestMalformed => "manifest_malformed",
        /// The manifest token exceeds the size cap.
        ManifestTooLarge => "manifest_too_large",
        /// The header names an algorithm this verifier does not accept.
        ManifestAlgorithmNotAllowed => "manifest_algorithm_not_allowed",
        /// The header names a key id this verifier does not hold.
        ManifestUnknownKey => "manifest_unknown_key",
        /// The signature does not verify.
        ManifestBadSignature => "manifest_bad_signature",
        /// The signed claims are not a valid manifest (types, `typ`, version).
        ManifestClaimsInvalid => "manifest_claims_invalid",
        /// `exp` has passed (beyond the allowed clock skew).
        ManifestExpired => "manifest_expired",
        /// `iat` lies in the future (beyond the allowed clock skew).
        ManifestNotYetValid => "manifest_not_yet_valid",
        /// `exp - iat` exceeds the verifier's maximum lifetime.
        ManifestLifetimeTooLong => "manifest_lifetime_too_long",
        /// The request body does not hash to `execute_body_sha256`.
        ManifestBodyMismatch => "manifest_body_mismatch",
        /// The request body cannot be canonicalized (not I-JSON).
        ManifestBodyInvalid => "manifest_body_invalid",
        /// A request that must carry an egress grant carried none.
        GrantMissing => "grant_missing",
        /// The grant is not a well-formed token.
        GrantMalformed => "grant_malformed",
        /// The grant token exceeds the size cap.
        GrantTooLarge => "grant_too_large",
        /// The token does not start with the `ceg1.` prefix.
        GrantBadPrefix => "grant_bad_prefix",
        /// The grant was sealed under a key this node does not hold (wrong or retired secret).
        GrantUnknownKey => "grant_unknown_key",
        /// The grant fails authentication: some byte was changed.
        GrantTampered => "grant_tampered",
        /// The decrypted claims are not a valid grant.
        GrantClaimsInvalid => "grant_claims_invalid",
        /// `exp` has passed.
        GrantExpired => "grant_expired",
        /// `iat` lies in the future.
        GrantNotYetValid => "grant_not_yet_valid",
        /// A secret is shorter than the 32-byte minimum.
        WeakSecret => "weak_secret",
        /// Strict tenant isolation is on and the request carries no tenant.
        TenantMissing => "tenant_missing",
        /// An internal call carried no service token.
        ServiceTokenMissing => "service_token_missing",
        /// An internal call carried a wrong service token.
        ServiceTokenInvalid => "service_token_invalid",
        /// The ledger holds no live record for the grant.
        GrantUnknown => "grant_unknown",
        /// The grant was revoked.
        GrantRevoked => "grant_revoked",
        /// A different grant is already registered under this id.
        GrantConflict => "grant_conflict",
        /// The request budget is spent.
        BudgetRequestsExhausted => "budget_requests_exhausted",
        /// The upload would exceed the byte budget.
        BudgetUploadBytesExhausted => "budget_upload_bytes_exhausted",
        /// The upload would exceed the output-file budget.
        BudgetOutputFilesExhausted => "budget_output_files_exhausted",
        /// The file is not among the grant's input files.
        ScopeFileNotGranted => "scope_file_not_granted",
        /// The session is not among the grant's read sessions.
        ScopeSessionNotGranted => "scope_session_not_granted",
        /// The upload targets a session other than the grant's output session.
        ScopeOutputSessionMismatch => "scope_output_session_mismatch",
        /// The ledger cannot answer (unreachable, slow, erroring): fail closed.
        LedgerUnavailable => "ledger_unavailable",
        /// The URL cannot be parsed unambiguously.
        UrlMalformed => "url_malformed",
        /// The URL holds whitespace, a control character or a backslash.
        UrlForbiddenCharacter => "url_forbidden_character",
        /// Only http and https are allowed.
        SchemeNotAllowed => "scheme_not_allowed",
        /// The URL carries credentials (`user:pass@`, even empty).
        UserinfoPresent => "userinfo_present",
        /// The host is empty or not a valid domain name.
        HostInvalid => "host_invalid",
        /// The host is an IPv4 address in a non-canonical spelling (decimal, octal, hex, shortened, zero-padded).
        HostNoncanonicalIp => "host_noncanonical_ip",
        /// The host is percent-encoded.
        HostPercentEncoded => "host_percent_encoded",
        /// The host is an IPv6 address with a zone id.
        HostZoneId => "host_zone_id",
        /// The port is malformed or out of range.
        PortInvalid => "port_invalid",
        /// The port is not allowed for this kind of connection.
        PortNotAllowed => "port_not_allowed",
        /// The tenant's egress policy cannot be read or parsed: every request is refused.
        PolicyUnreadable => "policy_unreadable",
        /// A deny rule of the tenant's policy matched.
        PolicyDenied => "policy_denied",
        /// The tenant's allowlist has no rule for the host.
        PolicyNotAllowed => "policy_not_allowed",
        /// The host names a cloud metadata service.
        HostMetadataName => "host_metadata_name",
        /// The host name did not resolve (error or no addresses): fail closed.
        DnsFailed => "dns_failed",
        /// An address is in an IANA special-purpose range.
        AddressSpecialPurpose => "address_special_purpose",
        /// An address is a cloud metadata address.
        AddressMetadata => "address_metadata",
        /// An IPv6 address embeds IPv4 (mapped, compatible, 6to4, Teredo).
        AddressEmbeddedIpv4 => "address_embedded_ipv4",
        /// No vetted address of the destination accepted a connection.
        UpstreamUnreachable => "upstream_unreachable",
        /// The destination did not answer in time.
        UpstreamTimeout => "upstream_timeout",
        /// The response body exceeded the cap.
        ResponseTooLarge => "response_too_large",
        /// A proxy request carried no grant.
        ProxyAuthMissing => "proxy_auth_missing",
        /// The request body exceeded the cap.
        RequestTooLarge => "request_too_large",
        /// A redirect pointed to another origin (scheme, host or port).
        RedirectCrossOrigin => "redirect_cross_origin",
        /// More redirects than allowed.
        RedirectLimit => "redirect_limit",
        /// The TLS handshake with the destination failed (certificate or protocol).
        TlsFailed => "tls_failed",
        /// The content is an executable (ELF, PE, Mach-O, WebAssembly, Java class, DEX, ...).
        ContentExecutable => "content_executable",
        /// The content is an archive or compressed container (zip and its kin, tar, gzip, 7z, ...).
        ContentArchive => "content_archive",
        /// The content is not text (media, documents, databases, invalid or legacy-encoded bytes).
        ContentNotText => "content_not_text",
        /// The text carries a base64-encoded executable.
        ContentEmbeddedExecutable => "content_embedded_executable",
        /// The text carries a base64-encoded archive.
        ContentEmbeddedArchive => "content_embedded_archive",
        /// The content exceeds the size cap.
        ContentTooLarge => "content_too_large",
        /// The malware scanner detected a signature.
        ContentMalware => "content_malware",
        /// The configured malware scanner cannot be reached: fail closed.
        ScannerUnavailable => "scanner_unavailable",
        /// The malware scanner did not answer in time: fail closed.
        ScannerTimeout => "scanner_timeout",
        /// The content exceeds the malware scanner's own size limit: fail closed.
        ScannerSizeLimit => "scanner_size_limit",
        /// The malware scanner reported an error: fail closed.
        ScannerError => "scanner_error",
        /// The malware scanner answered something unparseable: fail closed.
        ScannerReplyInvalid => "scanner_reply_invalid",
        /// The durable store cannot answer, and nothing can vouch for what it holds: fail closed.
        StoreUnavailable => "store_unavailable",
        /// The durable store is out of space.
        StoreFull => "store_full",
        /// The tenant's kill switch is engaged: no run may start.
        TenantKillSwitch => "tenant_kill_switch",
        /// The run is not live (ended, cancelled, killed or expired).
        RunNotLive => "run_not_live",
        /// No run has this id.
        RunUnknown => "run_unknown",
        /// The caller's token does not carry the scope this route needs.
        ScopeMissing => "scope_missing",
        /// A `CONNECT` target that is not the authority form `host:port` (RFC 9112 §3.2.3).
        ConnectTargetInvalid => "connect_target_invalid",
        /// The host is a special-use name that can only be local or invalid (RFC 6761: `localhost`, `.invalid`, ...).
        HostSpecialUseName => "host_special_use_name",
        /// The request carries its credentials more than once (two `Proxy-Authorization` or two `Authorization` headers): refused, never guessed.
        CredentialsAmbiguous => "credentials_ambiguous",
        /// The destination's answer is malformed or ambiguous (both `Content-Length` and `Transfer-Encoding`, conflicting lengths).
        UpstreamBadResponse => "upstream_bad_response",
        /// A tunnel to a host name did not begin with a TLS ClientHello: nothing in it could be matched to the host that was checked.
        TunnelNotTls => "tunnel_not_tls",
        /// A tunnel's TLS ClientHello names no server (SNI) although the tunnel was opened to a host name.
        TunnelSniMissing => "tunnel_sni_missing",
        /// A tunnel's TLS ClientHello names a server (SNI) other than the host the tunnel was opened to and checked for.
        TunnelSniMismatch => "tunnel_sni_mismatch",
        /// The grant's egress byte budget (bodies and tunnel bytes, both directions) is spent.
        BudgetEgressBytesExhausted => "budget_egress_bytes_exhausted",
        /// The fetch caller set a header only gatehouse may set (message framing such as `Content-Length`, `Transfer-Encoding`, hop-by-hop headers).
        HeaderNotAllowed => "header_not_allowed",
        /// An encoded (compressed) body could not be decoded, or uses an encoding gatehouse does not decode.
        ContentEncodingInvalid => "content_encoding_invalid",
        /// A lease's placeholder or secret was sent toward a host other than the lease's (the lease is revoked at once: a leak attempt), or a lease was asked for a host that is not its credential's.
        LeaseHostMismatch => "lease_host_mismatch",
        /// A lease was asked for a purpose that is not its credential's.
        LeasePurposeMismatch => "lease_purpose_mismatch",
        /// The lease's two minutes ran out without a heartbeat renewing them.
        LeaseExpired => "lease_expired",
        /// The lease was revoked (by the API, the credential's deletion, or a leak attempt).
        LeaseRevoked => "lease_revoked",
        /// This run already had a lease revoked: it never gets another.
        RunLeaseRevoked => "run_lease_revoked",
        /// The live lease state cannot be read (Redis or the store is down): no credential is injected.
        LeaseUnavailable => "lease_unavailable",
        /// A lease's placeholder is in the URL: a secret never goes into a path or query, which upstreams log.
        LeasePlaceholderInUrl => "lease_placeholder_in_url",
        /// A lease's placeholder is somewhere other than exactly where its inject rule puts the credential (another header, text around it, a header name, a cookie, the body): refused, so a run cannot slide an upstream's echo over the secret.
        LeasePlaceholderMisplaced => "lease_placeholder_misplaced",
        /// A secret would cross the network in clear (`http://`): injected over TLS only, unless the credential allows plain HTTP.
        LeasePlainHttp => "lease_plain_http",
        /// No credential of this tenant has this id (or it was deleted).
        CredentialUnknown => "credential_unknown",
        /// The credential is stored sealed to a key this gateway does not hold, or its sealed form does not open.
        CredentialUnreadable => "credential_unreadable",
        /// A sign-in to the settings page named a wrong password.
        AdminSignInFailed => "admin_sign_in_failed",
        /// Too many sign-ins to the settings page failed lately, from this client or from all: wait and try again.
        AdminSignInThrottled => "admin_sign_in_throttled",
        /// The settings page's session is missing, ended, idle too long or past its lifetime: sign in again.
        AdminSessionInvalid => "admin_session_invalid",
        /// A settings page form arrived without the session's anti-forgery token, or with another one.
        AdminCsrfInvalid => "admin_csrf_invalid",
        /// The policy changed since the form editing it was loaded: nothing was overwritten.
        PolicyStale => "policy_stale",
        /// A file name is empty, longer than 255 bytes, `.` or `..`, or holds a path separator, a control or a bidirectional formatting character.
        FileNameInvalid => "file_name_invalid",
        /// No file or session with this id is visible to the caller (another user's or tenant's is never visible).
        FileUnknown => "file_unknown",
        /// The object store did not answer: nothing was stored or read.
        StorageUnavailable => "storage_unavailable",
        /// The caller is bound to tenants, and the request names or reaches another one (by its path, body or query, or a run, lease, grant, file, scan or credential of it), or acts on every tenant at once.
        TenantNotAllowed => "tenant_not_allowed",
        /// The ledger's Redis may evict keys under memory pressure
        /// (`maxmemory-policy` other than `noeviction`): a revocation it
        /// evicts would be undone, so the node is not ready.
        LedgerEvictionUnsafe => "ledger_eviction_unsafe",
        /// The dependency gate: a finding at or above the tenant's gate level (`unknown` counting as high).
        DependencyGateSeverity => "dependency_gate_severity",
        /// The dependency gate: the head's newest scan did not complete, so it cannot vouch for the head.
        DependencyGateScanError => "dependency_gate_scan_error",
        /// The dependency gate: no scan was submitted for the head being checked.
        DependencyGateNoScan => "dependency_gate_no_scan",
        /// The dependency gate: the head's newest scan is still running; check again when it has finished.
        DependencyGateScanPending => "dependency_gate_scan_pending",
        /// No dependency scan of this tenant has this id.
        ScanUnknown => "scan_unknown",
        /// An upload outlived the file sweeper's bound before its record was written: the sweeper judged it abandoned and removed its object, so nothing was kept. Upload again.
        UploadExpired => "upload_expired",
        /// A person's request with a stored credential did not name who acted as `person:NAME` (the platform relays the person; the audit entry names them).
        ActorInvalid => "actor_invalid",
        /// The tenant made more requests with its stored credentials on people's behalf than its rate allows (`GATEHOUSE_CREDENTIAL_USE_PER_MINUTE`); try again after `Retry-After`.
        CredentialUseRateLimited => "credential_use_rate_limited",
        /// The tenant's rules for this host do not allow the request's method (a rule naming `methods`, or `default_methods`).
        PolicyMethodNotAllowed => "policy_method_not_allowed",
        /// The tenant's rules for this host allow the method, but not on this path.
        PolicyPathNotAllowed => "policy_path_not_allowed",
        /// A rule of the host names paths, and this request's path reads more than one way (an encoded `/`, a `\`, a `;` parameter, a malformed escape): it is refused rather than guessed at.
        UrlAmbiguousPath => "url_ambiguous_path",
        /// The tenant's rules for this host judge each request (methods or paths), so its tunnel must be terminated, and this gateway has no interception CA to terminate it with.
        TunnelNotTerminable => "tunnel_not_terminable",
        /// The run (or its tenant) has as many pending egress proposals as it may: decide or wait for some before asking again.
        ProposalLimit => "proposal_limit",
        /// No egress proposal of this tenant has this id.
        ProposalUnknown => "proposal_unknown",
        /// The egress proposal was decided already, or expired: it cannot be decided again.
        ProposalNotPending => "proposal_not_pending",
        /// The run's tool-call budget (`max_tool_calls`) is spent.
        BudgetToolCallsExhausted => "budget_tool_calls_exhausted",
        /// The tenant's rules for this MCP server do not let a run call this tool.
        McpToolDenied => "mcp_tool_denied",
        /// A request to a declared MCP endpoint that is not valid JSON-RPC 2.0 (or MCP over HTTP).
        McpMessageInvalid => "mcp_message_invalid",
        /// A request to a host the run's AWS credential signs for carries a presigned query string (`X-Amz-Signature`, `X-Amz-Credential`, ...): the door signs, never the run.
        Sigv4PresignedUrl => "sigv4_presigned_url",
        /// A request to a host the run's AWS credential signs for carries a chunk-signed streaming body (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`), whose chunk signatures only a holder of the keys can make.
        Sigv4StreamingSigned => "sigv4_streaming_signed",
    }
}

impl Reason {
    /// Whether the refusal is an outage: the component that decides (the
    /// ledger, the lease state, the store, the scanner) did not answer, so
    /// the request was refused without a decision. Only these are worth
    /// retrying; every other reason is an answer that will not change.
    pub const fn is_outage(self) -> bool {
        matches!(
            self,
            Reason::LedgerUnavailable
                | Reason::LeaseUnavailable
                | Reason::StoreUnavailable
                | Reason::ScannerUnavailable
                | Reason::StorageUnavailable
        )
    }

    /// The public error a refusal with this reason is answered with, at
    /// every door and route alike: an outage is `unavailable` (503, worth
    /// retrying), any other reason `refused` (403, final). One mapping, so
    /// a refusal reads the same through the proxy and through the API.
    pub const fn refusal_code(self) -> crate::ErrorCode {
        match self {
            Reason::CredentialUseRateLimited => crate::ErrorCode::RateLimited,
            _ if self.is_outage() => crate::ErrorCode::Unavailable,
            _ => crate::ErrorCode::Refused,
        }
    }
}

closed_codes! {
    /// Which security mechanism refused.
    pub enum RefusalKind {
        /// The outbound door refused a destination.
        EgressRefused => "egress_refused",
        /// A credential lease was refused.
        SecretRefused => "secret_refused",
        /// Content scanning refused an upload or artifact.
        ContentRefused => "content_refused",
        /// An execution manifest was refused.
        ManifestRefused => "manifest_refused",
        /// An egress grant was refused.
        GrantRefused => "grant_refused",
        /// A ledger budget ran out.
        BudgetExhausted => "budget_exhausted",
        /// An internal caller failed service authentication.
        AuthRefused => "auth_refused",
    }
}

/// One recorded refusal. It carries identifiers and codes only — never a
/// token, a secret or a request body — so it is safe to store and display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The mechanism that refused.
    pub kind: RefusalKind,
    /// Why.
    pub reason: Reason,
    /// The tenant, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The run (execution), when the refusal happened inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The request that caused it, to join with logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// For egress refusals: the destination host (never the full URL, whose
    /// path or query may carry secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The policy entry or registry row that fired, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For lease refusals: the lease concerned (an id, never its placeholder
    /// or secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// Who acted, for a refusal of a person's own action outside any run
    /// (`person:NAME`, as the platform relayed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// For a refused upload: the file's name (metadata the sandbox gave,
    /// shown with the run's artifacts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Recorded, not enforced: the tenant's policy is in dry-run mode and
    /// would have refused this. The request went ahead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// When.
    pub at: UnixTime,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn reason_codes_are_unique_snake_case_and_round_trip() {
        let mut seen = HashSet::new();
        for r in Reason::ALL {
            let s = r.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{s}");
            assert_eq!(Reason::parse(s), Some(*r));
            let json = serde_json::to_string(r).unwrap();
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), *r);
        }
    }

    /// The codes are a public contract. If this fails you renamed or removed
    /// a code that users' scripts may match on: add a new one instead.
    #[test]
    fn reason_codes_are_stable() {
        let all: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            all,
            [
                "manifest_missing",
                "manifest_malformed",
                "manifest_too_large",
                "manifest_algorithm_not_allowed",
                "manifest_unknown_key",
                "manifest_bad_signature",
                "manifest_claims_invalid",
                "manifest_expired",
                "manifest_not_yet_valid",
                "manifest_lifetime_too_long",
                "manifest_body_mismatch",
                "manifest_body_invalid",
                "grant_missing",
                "grant_malformed",
                "grant_too_large",
                "grant_bad_prefix",
                "grant_unknown_key",
                "grant_tampered",
                "grant_claims_invalid",
                "grant_expired",
                "grant_not_yet_valid",
                "weak_secret",
                "tenant_missing",
                "service_token_missing",
                "service_token_invalid",
                "grant_unknown",
                "grant_revoked",
                "grant_conflict",
                "budget_requests_exhausted",
                "budget_upload_bytes_exhausted",
                "budget_output_files_exhausted",
                "scope_file_not_granted",
                "scope_session_not_granted",
                "scope_output_session_mismatch",
                "ledger_unavailable",
                "url_malformed",
                "url_forbidden_character",
                "scheme_not_allowed",
                "userinfo_present",
                "host_invalid",
                "host_noncanonical_ip",
                "host_percent_encoded",
                "host_zone_id",
                "port_invalid",
                "port_not_allowed",
                "policy_unreadable",
                "policy_denied",
                "policy_not_allowed",
                "host_metadata_name",
                "dns_failed",
                "address_special_purpose",
                "address_metadata",
                "address_embedded_ipv4",
                "upstream_unreachable",
                "upstream_timeout",
                "response_too_large",
                "proxy_auth_missing",
                "request_too_large",
                "redirect_cross_origin",
                "redirect_limit",
                "tls_failed",
                "content_executable",
                "content_archive",
                "content_not_text",
                "content_embedded_executable",
                "content_embedded_archive",
                "content_too_large",
                "content_malware",
                "scanner_unavailable",
                "scanner_timeout",
                "scanner_size_limit",
                "scanner_error",
                "scanner_reply_invalid",
                "store_unavailable",
                "store_full",
                "tenant_kill_switch",
                "run_not_live",
                "run_unknown",
                "scope_missing",
                "connect_target_invalid",
                "host_special_use_name",
                "credentials_ambiguous",
                "upstream_bad_response",
                "tunnel_not_tls",
                "tunnel_sni_missing",
                "tunnel_sni_mismatch",
                "budget_egress_bytes_exhausted",
                "header_not_allowed",
                "content_encoding_invalid",
                "lease_host_mismatch",
                "lease_purpose_mismatch",
                "lease_expired",
                "lease_revoked",
                "run_lease_revoked",
                "lease_unavailable",
                "lease_placeholder_in_url",
                "lease_placeholder_misplaced",
                "lease_plain_http",
                "credential_unknown",
                "credential_unreadable",
                "admin_sign_in_failed",
                "admin_sign_in_throttled",
                "admin_session_invalid",
                "admin_csrf_invalid",
                "policy_stale",
                "file_name_invalid",
                "file_unknown",
                "storage_unavailable",
                "tenant_not_allowed",
                "ledger_eviction_unsafe",
                "dependency_gate_severity",
                "dependency_gate_scan_error",
                "dependency_gate_no_scan",
                "dependency_gate_scan_pending",
                "scan_unknown",
                "upload_expired",
                "actor_invalid",
                "credential_use_rate_limited",
                "policy_method_not_allowed",
                "policy_path_not_allowed",
                "url_ambiguous_path",
                "tunnel_not_terminable",
                "proposal_limit",
                "proposal_unknown",
                "proposal_not_pending",
                "budget_tool_calls_exhausted",
                "mcp_tool_denied",
                "mcp_message_invalid",
                "sigv4_presigned_url",
                "sigv4_streaming_signed",
            ]
        );
        let kinds: Vec<&str> = RefusalKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "egress_refused",
                "secret_refused",
                "content_refused",
                "manifest_refused",
                "grant_refused",
                "budget_exhausted",
                "auth_refused",
            ]
        );
    }

    #[test]
    fn unknown_codes_do_not_deserialize() {
        assert!(serde_json::from_str::<Reason>("\"manifest_fine\"").is_err());
    }
}
