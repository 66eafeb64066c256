//! A request path as path rules see it, and the rules' own paths.
//!
//! RFC 3986 §6.2.2 normalization, then a refusal of whatever a server could
//! read as another path than a rule does:
//!
//! - the query and fragment go (rules name paths);
//! - percent-escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are
//!   decoded (§2.3), every other escape has its hex made uppercase (§6.2.2.1);
//! - dot segments are removed (§5.2.4), after decoding, so `%2e%2e` is `..`;
//! - an encoded `/` (`%2F`), a `\` (raw or `%5C`, which some servers read as
//!   `/`), a `;` (raw or `%3B`: path parameters, which servers strip or
//!   honour differently), an encoded NUL, or a malformed escape makes the
//!   path **ambiguous**: it is refused (`url_ambiguous_path`) wherever a path
//!   rule would decide it, never guessed at.
//!
//! Matching (the safer reading of "prefix", documented in the README): an
//! allow rule's path matches at a segment boundary (`/v1/public` matches
//! `/v1/public` and `/v1/public/x`, not `/v1/publicity`), case-sensitively
//! (paths are case-sensitive, RFC 3986 §6.2.2.1); a deny rule's path
//! matches as a plain prefix, ignoring ASCII case (a server that folds
//! case must not get past a deny).

/// Why a path cannot be read one way only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ambiguous;

/// The longest path a rule may name.
pub const MAX_RULE_PATH: usize = 1024;

/// `path_and_query` normalized (see the module docs), or [`Ambiguous`].
pub fn normalize(path_and_query: &str) -> Result<String, Ambiguous> {
    let path = path_and_query.split(['?', '#']).next().unwrap_or_default();
    let path = if path.is_empty() { "/" } else { path };
    if !path.starts_with('/') {
        return Err(Ambiguous);
    }
    let decoded = decode_unreserved(path)?;
    Ok(remove_dot_segments(&decoded))
}

/// A rule's path, checked and normalized: it starts with `/`, is at most
/// [`MAX_RULE_PATH`] bytes, has no query or fragment, and reads one way.
pub fn rule_path(path: &str) -> Result<String, &'static str> {
    if !path.starts_with('/') {
        return Err("a path starts with /");
    }
    if path.len() > MAX_RULE_PATH {
        return Err("a path is at most 1024 bytes");
    }
    if path.contains(['?', '#']) || path.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("a path has no query, fragment, space or control character");
    }
    normalize(path).map_err(|Ambiguous| "a path has no %2F, \\, ; or malformed escape")
}

/// Whether an allow rule's `prefix` covers `path` (both normalized).
pub fn allow_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Whether a deny rule's `prefix` covers `path` (both normalized).
pub fn deny_matches(prefix: &str, path: &str) -> bool {
    path.len() >= prefix.len() && path.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn decode_unreserved(path: &str) -> Result<String, Ambiguous> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' | b';' => return Err(Ambiguous),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(Ambiguous)?;
                let value = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .filter(|_| hex.iter().all(u8::is_ascii_hexdigit))
                    .ok_or(Ambiguous)?;
                match value {
                    b'/' | b'\\' | b';' | 0 => return Err(Ambiguous),
                    v if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') => {
                        out.push(char::from(v));
                    }
                    v => out.push_str(&format!("%{v:02X}")),
                }
                i += 3;
            }
            _ => {
                // A UTF-8 sequence is copied whole (the path came from a
                // parsed URL, so it is valid UTF-8).
                let len = utf8_len(bytes[i]);
                out.push_str(path.get(i..i + len).ok_or(Ambiguous)?);
                i += len;
            }
        }
    }
    Ok(out)
}

const fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// RFC 3986 §5.2.4, on an absolute path.
fn remove_dot_segments(path: &str) -> String {
    let mut output: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => trailing_slash = i == last,
            ".." => {
                output.pop();
                trailing_slash = i == last;
            }
            s => {
                output.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &output {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_as_rfc_3986_says() {
        for (raw, normal) in [
            ("/", "/"),
            ("", "/"),
            ("/a/b?x=1#f", "/a/b"),
            ("/a/./b/../c", "/a/c"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/../../etc", "/etc"),
            ("/%2e%2E/x", "/x"),
            ("/v1/%7Euser/%61", "/v1/~user/a"),
            ("/a%2fb".replace("%2f", "%2a").as_str(), "/a%2Ab"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/a//b", "/a//b"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(normal), "{raw}");
        }
    }

    #[test]
    fn what_servers_read_differently_is_ambiguous() {
        for raw in ["/a%2Fb", "/a%2fb", "/a\\b", "/a%5cb", "/a;b", "/a%3Bb", "/a%00", "/a%", "/a%G1", "/a%1"]
        {
            assert_eq!(normalize(raw), Err(Ambiguous), "{raw}");
        }
    }

    #[test]
    fn allow_paths_match_at_segment_boundaries_and_deny_paths_as_prefixes_in_any_case() {
        assert!(allow_matches("/v1/public", "/v1/public"));
        assert!(allow_matches("/v1/public", "/v1/public/x"));
        assert!(!allow_matches("/v1/public", "/v1/publicity"));
        assert!(allow_matches("/v1/public/", "/v1/public/x"));
        assert!(!allow_matches("/v1/public/", "/v1/public"));
        assert!(!allow_matches("/v1/public", "/V1/public"));
        assert!(deny_matches("/admin", "/admin/x"));
        assert!(deny_matches("/admin", "/administrator"));
        assert!(deny_matches("/admin", "/ADMIN"));
        assert!(!deny_matches("/admin", "/adm"));
    }

    #[test]
    fn a_rule_path_is_absolute_bounded_and_unambiguous() {
        assert_eq!(rule_path("/v1/./x/"), Ok("/v1/x/".to_owned()));
        for bad in ["v1/", "/a?b", "/a#b", "/a b", "/a%2Fb", "/a;b"] {
            assert!(rule_path(bad).is_err(), "{bad}");
        }
        assert!(rule_path(&format!("/{}", "a".repeat(MAX_RULE_PATH))).is_err());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            /// Normalizing never panics, is idempotent, and what it gives
            /// starts with `/`, has no dot segment and no ambiguous byte.
            #[test]
            fn normalizing_is_idempotent_and_leaves_nothing_ambiguous(raw in "/[a-zA-Z0-9%./;\\\\~_-]{0,40}") {
                if let Ok(once) = normalize(&raw) {
                    prop_assert!(once.starts_with('/'));
                    prop_assert_eq!(normalize(&once), Ok(once.clone()));
                    prop_assert!(!once.split('/').any(|s| s == "." || s == ".."), "{}", once);
                    prop_assert!(!once.contains(['\\', ';']));
                    prop_assert!(!once.to_ascii_uppercase().contains("%2F"));
                }
            }
        }
    }
}
