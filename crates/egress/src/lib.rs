//! The one outbound door.
//!
//! Every request a run can cause — and every call gatehouse itself makes to
//! the outside (OSV, webhooks) — leaves through this crate, so the checks that
//! keep a sandbox from reaching private networks, metadata services or hosts
//! its tenant's policy refuses live in exactly one place.
//!
//! Architecture invariant: this is the **only** crate allowed to open network
//! connections or construct HTTP clients. `clippy.toml` forbids the
//! constructors everywhere (`disallowed-methods`, `disallowed-types`); every
//! other crate root denies those lints, and this crate alone allows them.
//! `tests/one_door.rs` fails if that configuration rots.
//!
//! The policy engine, address guard, pinned resolver, client and forward
//! proxy arrive with the egress work; until then no gatehouse code dials out
//! at all, which the same lint configuration guarantees.

#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
