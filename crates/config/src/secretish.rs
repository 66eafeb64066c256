//! A value that may carry credentials, kept out of every printout.

use std::fmt;

/// A value that may carry credentials (a database URL): usable, never printed.
#[derive(Clone)]
pub struct Secretish(pub(crate) String);

impl Secretish {
    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secretish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.split_once("://") {
            Some((scheme, _)) => write!(f, "{scheme}://<redacted>"),
            None => f.write_str("<redacted>"),
        }
    }
}
