//! The vocabulary every other gatehouse crate speaks: ids, time, refusals and
//! the one error shape allowed to cross to a caller.
//!
//! Architecture invariant: no I/O, no secrets, no dependency on another
//! gatehouse crate. Everything here is cheap to construct and test.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod clock;
pub mod credentials;
pub mod error;
pub mod id;
pub mod metadata;
pub mod refusal;

pub use clock::{CivilTime, Clock, ManualClock, SystemClock, UnixTime};
pub use error::{ErrorCode, PublicError};
pub use id::{RESERVED_ACTOR_NAMES, is_reserved_actor_name, is_valid_id, new_id};
pub use refusal::{Reason, Refusal, RefusalKind};
