//! The `gatehouse` binary.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

fn main() -> std::process::ExitCode {
    gatehouse_server::cli::main()
}
