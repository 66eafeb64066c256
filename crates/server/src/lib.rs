//! The gatehouse server: secure startup, the HTTP API, and the command line.
//!
//! Architecture invariant: this is the only crate that knows HTTP and JSON
//! wire shapes. Decisions are made by `gatehouse-capability` (and, later, the
//! other domain crates); this crate authenticates callers, maps requests to
//! those decisions, records refusals, and maps every error to the safe public
//! shape before it leaves the process.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

/// `println!` for what a command prints. When its reader has gone away
/// (`gatehouse deps parse FILE --json | head`), the process ends quietly
/// with status 141, as a command killed by SIGPIPE would, instead of
/// panicking as `println!` does.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::stdout_failed(&e);
        }
    }};
}

/// Ends the process after stdout failed: quietly when the reader left.
pub(crate) fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        eprintln!("gatehouse: cannot write to standard output: {}", e.kind());
        std::process::exit(1);
    }
    std::process::exit(141)
}

pub mod admin;
pub mod api;
pub mod cli;
mod files;
pub mod http;
pub mod metrics;
pub mod openapi;
pub mod scanner;
pub mod serve;
pub mod state;
