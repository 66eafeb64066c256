//! Identifiers.
//!
//! Ids are UUIDv7 in their simple (hex, no dashes) form behind a short type
//! prefix such as `run_` or `gr_`: sortable by creation time, unguessable
//! enough for logs, and obvious to a person reading them. Ids are never
//! secrets; nothing may rely on an id being hard to guess.

/// A new id with the given prefix, e.g. `new_id("gr")` → `gr_0192…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Whether `s` is acceptable as a caller-supplied id: 1–128 characters from
/// `[A-Za-z0-9._:-]`, and neither `.` nor `..`. Ids end up in storage keys,
/// file paths, log lines and URLs, so anything that could need escaping in
/// one of those, or mean a directory, is refused.
pub fn is_valid_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_unique_and_valid() {
        let a = new_id("run");
        let b = new_id("run");
        assert!(a.starts_with("run_"));
        assert_ne!(a, b);
        assert!(is_valid_id(&a));
    }

    #[test]
    fn ids_that_need_escaping_are_refused() {
        for bad in ["", ".", "..", "a b", "a/b", "a\nb", "ü", "a%2f", &"x".repeat(129)] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
        assert!(is_valid_id("exec-1.2:3_x"));
    }
}
