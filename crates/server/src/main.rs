#![deny(clippy::disallowed_methods, clippy::disallowed_types)]
fn main() {}
