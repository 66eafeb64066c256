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

/// Actor names gatehouse writes into audit entries on its own account, or
/// writes before a `:`: `gatehouse` (the door's refusals, expiry, the
/// sweeper, leak revocations), `service` (the internal service token's
/// caller), `person:NAME` (the settings page), `cli:TOOL` (command-line
/// tools such as `cli:rewrap`), and `system` kept back for the same use. A
/// named caller may take none of them, in any letter case, nor a name that
/// begins with one followed by `:`: its entries (and `CALLER:actor`, which
/// a cancel records) could otherwise pass for gatehouse's own or a person's.
pub const RESERVED_ACTOR_NAMES: &[&str] = &["gatehouse", "service", "system", "person", "cli"];

/// Whether `name` is, or begins like, an actor gatehouse writes itself
/// (see [`RESERVED_ACTOR_NAMES`]).
pub fn is_reserved_actor_name(name: &str) -> bool {
    let head = name.split(':').next().unwrap_or(name);
    RESERVED_ACTOR_NAMES.iter().any(|reserved| head.eq_ignore_ascii_case(reserved))
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
