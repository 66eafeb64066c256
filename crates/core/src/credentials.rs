//! Reading the credentials a caller presents in an `Authorization` or
//! `Proxy-Authorization` value. One reader, so the API, the metrics route
//! and the proxy agree on what counts as a token.

/// The token of a `Bearer` credential (RFC 6750 §2.1): the scheme is
/// matched case-insensitively (RFC 9110 §11.1), the token is what follows
/// it, trimmed, and must not be empty. Any other scheme is `None`.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn a_bearer_token_is_read_whatever_the_scheme_s_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token(" BEARER abc"), Some("abc"));
        for refused in ["Bearer", "Bearer ", "Bearer    ", "Basic abc", "Bearerabc", "", "Token abc"] {
            assert_eq!(bearer_token(refused), None, "{refused:?}");
        }
    }
}
