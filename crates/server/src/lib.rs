//! The gatehouse server: secure startup, the HTTP API, and the command line.
//!
//! Architecture invariant: this is the only crate that knows HTTP and JSON
//! wire shapes. Decisions are made by `gatehouse-capability` (and, later, the
//! other domain crates); this crate authenticates callers, maps requests to
//! those decisions, records refusals, and maps every error to the safe public
//! shape before it leaves the process.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod api;
pub mod cli;
pub mod control;
mod control_cli;
mod deps_cli;
pub mod events;
mod files;
pub mod http;
pub mod openapi;
pub mod osv;
pub mod policy_cache;
pub mod scanner;
pub mod serve;
pub mod state;
