//! The keys only some roles hold: the credential sealing keys and the
//! interception CA, each refused on a role that must not hold it.

use std::path::{Path, PathBuf};

use gatehouse_capability::{SealingKey, SealingKeys, SealingPublicKey};

use crate::reader::Reader;
use crate::role::Role;
use crate::secretish::Secretish;
use crate::{embedded_files, names};

impl Reader<'_> {
    /// The credential sealing keys a role holds. The gateway (and `all`)
    /// must hold the private key, which opens credentials; a worker must
    /// not — it seals to the public key and cannot read a credential back —
    /// and neither may a runner.
    pub(crate) fn credential_keys(
        &mut self,
        role: Role,
        in_data_dir: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> (Option<std::sync::Arc<SealingKeys>>, Option<SealingPublicKey>) {
        let private_names = [names::CREDENTIAL_SEALING_KEY, names::CREDENTIAL_SEALING_PREVIOUS_KEY];
        if matches!(role, Role::Worker | Role::Runner) {
            let held: Vec<&str> = private_names.into_iter().filter(|n| self.is_set(n)).collect();
            for name in held {
                self.problem(
                    name,
                    "forbidden_for_role",
                    "only the gateway holds the credential sealing key: a worker seals to its public key and must not be able to read credentials back",
                );
            }
        }
        let private = |this: &mut Self, name: &str, embedded: Option<&Path>| {
            let text = zeroize::Zeroizing::new(this.secret_text(name, embedded)?);
            SealingKey::from_text(&text)
                .map_err(|e| this.problem(name, "key_malformed", format!("{e} (run `gatehouse keygen`)")))
                .ok()
        };
        let keys = if matches!(role, Role::Gateway | Role::All) {
            let current = private(
                self,
                names::CREDENTIAL_SEALING_KEY,
                in_data_dir(embedded_files::CREDENTIAL_SEALING_KEY).as_deref(),
            );
            let previous = private(self, names::CREDENTIAL_SEALING_PREVIOUS_KEY, None);
            match current {
                Some(current) => SealingKeys::new(current, previous)
                    .map_err(|e| {
                        self.problem(names::CREDENTIAL_SEALING_PREVIOUS_KEY, "invalid_value", e.to_string())
                    })
                    .ok(),
                None => {
                    if !self.is_set(names::CREDENTIAL_SEALING_KEY) {
                        self.problem(
                            names::CREDENTIAL_SEALING_KEY,
                            "missing_required",
                            "the gateway needs the credential sealing key to open the credentials it injects (run `gatehouse keygen`)",
                        );
                    }
                    None
                }
            }
        } else {
            None
        };
        let public = if matches!(role, Role::Worker | Role::All) {
            let text = self.setting_text(
                names::CREDENTIAL_SEALING_PUBLIC_KEY,
                in_data_dir(embedded_files::CREDENTIAL_SEALING_PUBLIC_KEY).as_deref(),
            );
            let given = text.and_then(|t| {
                SealingPublicKey::from_text(&t)
                    .map_err(|e| {
                        self.problem(names::CREDENTIAL_SEALING_PUBLIC_KEY, "key_malformed", e.to_string())
                    })
                    .ok()
            });
            let own = keys.as_ref().map(|k| k.current_public().clone());
            match (given, own) {
                (Some(given), Some(own)) if given != own => {
                    self.problem(
                        names::CREDENTIAL_SEALING_PUBLIC_KEY,
                        "key_mismatch",
                        "is not the public half of GATEHOUSE_CREDENTIAL_SEALING_KEY",
                    );
                    None
                }
                (given, own) => {
                    let public = given.or(own);
                    if public.is_none()
                        && role == Role::Worker
                        && !self.is_set(names::CREDENTIAL_SEALING_PUBLIC_KEY)
                    {
                        self.problem(
                            names::CREDENTIAL_SEALING_PUBLIC_KEY,
                            "missing_required",
                            "the worker seals credentials to the gateway's public key (run `gatehouse keygen`)",
                        );
                    }
                    public
                }
            }
        } else {
            None
        };
        (keys.map(std::sync::Arc::new), public)
    }

    /// The interception CA a role holds: key and certificate on the gateway
    /// (and `all`), the certificate alone on a worker (it hands it to
    /// sandboxes with their runs); the key never on a worker or runner.
    /// Their contents are checked where they are used, at startup.
    pub(crate) fn intercept_ca(
        &mut self,
        role: Role,
        in_data_dir: &dyn Fn(&str) -> Option<PathBuf>,
    ) -> (Option<Secretish>, Option<String>) {
        if matches!(role, Role::Worker | Role::Runner) && self.is_set(names::INTERCEPT_CA_KEY) {
            self.problem(
                names::INTERCEPT_CA_KEY,
                "forbidden_for_role",
                "only the gateway holds the interception CA's key: whoever holds it can impersonate any host to a sandbox",
            );
        }
        let gateway = matches!(role, Role::Gateway | Role::All);
        let key = if gateway {
            self.secret_text(
                names::INTERCEPT_CA_KEY,
                in_data_dir(embedded_files::INTERCEPT_CA_KEY).as_deref(),
            )
        } else {
            None
        };
        let cert = if gateway || role == Role::Worker {
            self.setting_text(
                names::INTERCEPT_CA_CERT,
                in_data_dir(embedded_files::INTERCEPT_CA_CERT).as_deref(),
            )
        } else {
            None
        };
        let missing = |this: &mut Self, name: &str, why: &str| {
            if !this.is_set(name) {
                this.problem(name, "missing_required", format!("{why} (run `gatehouse keygen`)"));
            }
        };
        if gateway && key.is_none() {
            missing(
                self,
                names::INTERCEPT_CA_KEY,
                "the gateway terminates TLS for lease hosts under its interception CA",
            );
        }
        if (gateway || role == Role::Worker) && cert.is_none() {
            missing(
                self,
                names::INTERCEPT_CA_CERT,
                "the interception CA's certificate is handed to sandboxes with their runs",
            );
        }
        (key.map(Secretish), cert)
    }
}
