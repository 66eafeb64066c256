//! The `gatehouse` binary.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

/// The proxy allocates and frees small buffers for every request; glibc's
/// allocator showed up as a tenth of the proxy's own time in profiles.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gatehouse_server::cli::main()
}
