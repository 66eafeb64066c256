//! Which part of gatehouse a process is, and what each role does.

/// Which part of gatehouse this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every role in one process.
    All,
    /// Control plane: holds the manifest private key and the grant secret.
    Worker,
    /// Beside the sandbox runner: holds only the manifest public key.
    Runner,
    /// The outbound door: holds the grant secret, never the manifest private key.
    Gateway,
}

impl Role {
    /// Parses `all|worker|runner|gateway`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Some(Self::All),
            "worker" => Some(Self::Worker),
            "runner" => Some(Self::Runner),
            "gateway" => Some(Self::Gateway),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Worker => "worker",
            Self::Runner => "runner",
            Self::Gateway => "gateway",
        }
    }

    /// Signs manifests and mints grants.
    pub fn mints(self) -> bool {
        matches!(self, Self::All | Self::Worker)
    }

    /// Verifies manifests.
    pub fn verifies_manifests(self) -> bool {
        matches!(self, Self::All | Self::Worker | Self::Runner)
    }

    /// Opens grants.
    pub fn opens_grants(self) -> bool {
        matches!(self, Self::All | Self::Worker | Self::Gateway)
    }

    /// Uses the durable store. A runner does not: it sits beside the
    /// sandbox and needs nothing but the public key.
    pub fn has_store(self) -> bool {
        self.opens_grants()
    }
}
