//! The one outbound door.
//!
//! Every request a run can cause — and every call gatehouse itself makes to
//! the outside (OSV, webhooks) — leaves through this crate, so the checks that
//! keep a sandbox from reaching private networks, metadata services or hosts
//! its tenant's policy refuses live in exactly one place.
//!
//! - [`target`]: the strict URL parser whose result is what connects.
//! - [`policy`]: per-tenant `open`/`allowlist` policies with deny rules.
//! - [`special`]: the address guard built from the IANA special-purpose
//!   registries, plus cloud metadata addresses and names.
//! - [`decision`]: the pure pipeline tying them together (the resolver is a
//!   parameter), shared by `gatehouse egress check` and the network paths.
//!
//! Architecture invariant: this is the **only** crate allowed to open network
//! connections or construct HTTP clients. `clippy.toml` forbids the
//! constructors everywhere (`disallowed-methods`, `disallowed-types`); every
//! other crate root denies those lints, and this crate alone allows them.
//! `tests/one_door.rs` fails if that configuration rots.

#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod connect;
pub mod decision;
pub mod decode;
pub mod fetch;
pub mod http1;
pub mod inject;
pub mod intercept;
pub mod leases;
pub mod mcp_door;
pub mod meter;
pub mod policy;
pub mod pool;
pub mod proxy;
pub mod resolve;
pub mod run_fetch;
pub mod scrub;
pub mod service;
pub mod sigv4;
pub mod sni;
pub mod special;
pub mod target;

pub use decision::{Decision, Purpose, decide, decide_target, decide_target_resolving};
pub use policy::{Policy, PolicyDocument, PolicyError};
pub use special::AddressGuard;
pub use target::{Host, Scheme, Target, parse_url};
