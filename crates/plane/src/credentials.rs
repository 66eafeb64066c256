//! Credentials and the leases runs hold on them (worker and `all` roles).
//!
//! A credential's secret arrives once, is sealed at once to the gateway
//! role's public key (HPKE, bound to tenant, id and version) and is never
//! answered, listed, logged or stored in clear: what is shown carries a
//! keyed fingerprint. The worker cannot open what it stored.
//!
//! A lease binds one live run to one credential, its purpose and its one
//! host for two minutes, renewed by the run's heartbeat. Every change to a
//! run's leases bumps its grant's lease generation in the ledger before the
//! operation returns; every node's door reads the generation with the run's
//! next spend and re-reads the leases when it moved, so a revocation on one
//! node stops injection on all of them at their next request.

use gatehouse_capability::credential::{CredentialContext, CredentialSecret, seal};
use gatehouse_core::{Reason, is_valid_id, new_id};
use gatehouse_egress::inject::Delivery;
use gatehouse_egress::target::parse_authority;
use gatehouse_ledger::LedgerBackend as _;
use gatehouse_store::{
    Credential, Lease, LeaseFilter, LeaseStatus, NewEvent, NewLease, Page, PageRequest, Resealed, StoreError,
};
use serde_json::json;

pub use crate::credential_kinds::InjectSpec;
use crate::credential_kinds::{INJECT_SHAPE, Kind, MAX_HOSTS, Material, Stored};
use crate::{Caller, Plane, PlaneError, Result};

/// What a credential may be for.
pub const PURPOSES: [&str; 4] = ["git_provider", "mcp_server", "runtime_secret", "webhook_signing"];

/// How a stored credential is sent to `host` (its `inject` column, JSON
/// text, read by [`Stored::read`]): the delivery and whether plain HTTP is
/// allowed.
pub fn delivery(stored: &str, host: &str) -> Option<(Delivery, bool)> {
    let stored = Stored::read(stored)?;
    Some((stored.delivery_for(host)?, stored.allow_plain_http))
}

/// A host as leases and the door compare it: lowercase ASCII (IDNA), no
/// trailing dot, no port.
pub fn normalized_host(host: &str) -> std::result::Result<String, Reason> {
    match parse_authority(host)? {
        (host, None) => Ok(host.to_string()),
        (_, Some(_)) => Err(Reason::PortInvalid),
    }
}

/// A credential's purpose and hosts as a caller gives them, checked; the
/// hosts normalized and joined by `,` (which no host holds), as the
/// `host` column keeps them.
fn credential_hosts(purpose: &str, hosts: &[String]) -> Result<String> {
    if hosts.is_empty() || hosts.len() > MAX_HOSTS {
        return Err(PlaneError::invalid("hosts holds 1 to 16 hosts"));
    }
    let mut normalized = Vec::with_capacity(hosts.len());
    for host in hosts {
        let host = purpose_and_host(purpose, host)?;
        if !normalized.contains(&host) {
            normalized.push(host);
        }
    }
    Ok(normalized.join(","))
}

/// A purpose and a host as a caller gives them, checked; the host
/// normalized (`GitHub.com.` is `github.com`), as leases compare it.
fn purpose_and_host(purpose: &str, host: &str) -> Result<String> {
    if !PURPOSES.contains(&purpose) {
        return Err(PlaneError::invalid(
            "purpose is git_provider, mcp_server, runtime_secret or webhook_signing",
        ));
    }
    normalized_host(host)
        .map_err(|_| PlaneError::invalid("host is one host name or address, without scheme, port or path"))
}

/// A credential to store. Its secret material is wiped when dropped.
pub struct NewCredential {
    /// Its name, unique in its tenant.
    pub name: String,
    /// What it is for (one of [`PURPOSES`]).
    pub purpose: String,
    /// The hosts it is sent to (one for `static` and `oauth2_refresh`).
    pub hosts: Vec<String>,
    /// Its kind and the kind's facts.
    pub kind: Kind,
    /// How it is sent (none for `webhook_signing` and `aws_sigv4`; a
    /// minted kind without one is sent as `Authorization: Bearer`).
    pub inject: Option<InjectSpec>,
    /// The secret may go over plain `http://` (a test server, an internal
    /// host); by default it is sent over TLS only.
    pub allow_plain_http: bool,
    /// What is sealed.
    pub material: Material,
}

/// A credential that does not exist (in that tenant).
const fn credential_unknown() -> PlaneError {
    PlaneError::NotFound(Some(Reason::CredentialUnknown))
}

/// A store error of an operation on one credential: its absence is the
/// credential's.
fn on_credential(e: StoreError) -> PlaneError {
    match e {
        StoreError::NotFound => credential_unknown(),
        e => e.into(),
    }
}

fn credential_secret(text: &str) -> Result<CredentialSecret> {
    CredentialSecret::new(text)
        .map_err(|_| PlaneError::invalid("secret must be 1-4096 bytes without control characters"))
}

impl Plane {
    /// Only the worker (and `all`) keeps credentials and grants leases.
    pub fn keeps_credentials(&self) -> Result<()> {
        if self.settings.keeps_credentials { Ok(()) } else { Err(PlaneError::NotServed) }
    }

    /// Seals `secret` for the credential row `context` names (its facts
    /// bound in): the sealed text, the key id and the fingerprint.
    fn sealed_for(
        &self,
        request_id: &str,
        context: &CredentialContext<'_>,
        secret: &CredentialSecret,
    ) -> Result<(String, String, String)> {
        let (Some(public), Some(fingerprints)) =
            (self.credential_public_key.as_ref(), self.fingerprints.as_ref())
        else {
            return Err(PlaneError::NotServed);
        };
        let sealed = seal(public, secret, context).map_err(|e| {
            tracing::error!(request_id, code = e.code(), "a credential could not be sealed");
            PlaneError::Internal("credential_seal_failed")
        })?;
        Ok((sealed.as_str().to_owned(), public.kid().to_owned(), fingerprints.fingerprint(secret)))
    }

    /// Stores a credential of `tenant_id`, its secret sealed at once (the
    /// store's transaction audits it).
    pub async fn create_credential(
        &self,
        request_id: &str,
        tenant_id: String,
        req: NewCredential,
        actor: &str,
    ) -> Result<Credential> {
        self.keeps_credentials()?;
        let store = self.store()?;
        if req.name.is_empty() || req.name.chars().count() > 128 || req.name.chars().any(char::is_control) {
            return Err(PlaneError::invalid("name is 1-128 characters without control characters"));
        }
        let host = credential_hosts(&req.purpose, &req.hosts)?;
        let inject = match (req.purpose.as_str(), &req.kind, req.inject) {
            // A webhook signing secret signs deliveries; it is never sent as a header.
            ("webhook_signing", Kind::Static, None) => json!({}).to_string(),
            ("webhook_signing", Kind::Static, Some(_)) => {
                return Err(PlaneError::invalid(
                    "a webhook_signing credential signs deliveries and takes no inject rule",
                ));
            }
            ("webhook_signing", _, _) => {
                return Err(PlaneError::invalid("a webhook_signing credential is of kind static"));
            }
            (_, Kind::Static, None) => return Err(PlaneError::invalid(INJECT_SHAPE)),
            (_, Kind::AwsSigV4(_), Some(_)) => {
                return Err(PlaneError::invalid(
                    "an aws_sigv4 credential signs requests and takes no inject rule",
                ));
            }
            (_, kind, inject) => {
                if let Some(spec) = &inject {
                    spec.rule().map_err(PlaneError::invalid)?;
                }
                Stored { kind: kind.clone(), inject, allow_plain_http: req.allow_plain_http }.text()
            }
        };
        let secret = req.material.sealable().map_err(PlaneError::invalid)?;
        let now = self.clock.now();
        let mut credential = Credential {
            credential_id: new_id("cred"),
            tenant_id,
            name: req.name,
            purpose: req.purpose,
            host,
            inject,
            sealed: String::new(),
            key_id: String::new(),
            version: 1,
            fingerprint: String::new(),
            created_at: now,
            updated_at: now,
        };
        (credential.sealed, credential.key_id, credential.fingerprint) =
            self.sealed_for(request_id, &credential.sealing_context(), &secret)?;
        drop(secret);
        store.create_credential(&credential, actor).await.map_err(|e| match e {
            StoreError::Conflict => PlaneError::invalid("the tenant already has a credential of this name"),
            e => e.into(),
        })
    }

    /// One credential of `tenant_id`.
    pub async fn credential(&self, tenant_id: &str, credential_id: &str) -> Result<Credential> {
        self.keeps_credentials()?;
        self.store()?.credential(tenant_id, credential_id).await?.ok_or_else(credential_unknown)
    }

    /// One page of a tenant's credentials.
    pub async fn credentials(&self, tenant_id: &str, page: &PageRequest) -> Result<Page<Credential>> {
        self.keeps_credentials()?;
        Ok(self.store()?.credentials(Some(tenant_id), page).await?)
    }

    /// A new secret, one version up. Runs holding leases on it inject the
    /// new secret from their next request.
    pub async fn rotate_credential(
        &self,
        request_id: &str,
        tenant_id: &str,
        credential_id: &str,
        secret: &str,
        actor: &str,
    ) -> Result<Credential> {
        self.keeps_credentials()?;
        let store = self.store()?;
        let current = self.credential(tenant_id, credential_id).await?;
        if Stored::read(&current.inject).is_none_or(|stored| stored.kind != Kind::Static) {
            return Err(PlaneError::invalid(
                "only a static credential's secret is replaced; create a new credential of this kind instead",
            ));
        }
        let secret = credential_secret(secret)?;
        let version = current.version + 1;
        let context = CredentialContext { version, ..current.sealing_context() };
        let (sealed, key_id, fingerprint) = self.sealed_for(request_id, &context, &secret)?;
        drop(secret);
        let rotation = Resealed {
            credential_id: credential_id.to_owned(),
            version: current.version,
            previous_sealed: None,
            sealed,
            key_id,
            fingerprint,
        };
        let mut changed = store
            .reseal_credentials(Some(tenant_id), &[rotation], actor, self.clock.now())
            .await
            .map_err(on_credential)?;
        let rotated = changed.pop().ok_or(PlaneError::Conflict(None))?;
        let filter = LeaseFilter {
            credential_id: Some(credential_id.to_owned()),
            status: Some(LeaseStatus::Live),
            ..LeaseFilter::default()
        };
        let holders = self.live_leases(&filter).await?;
        self.runs_leases_changed(holders.iter().map(|l| l.run_id.as_str())).await?;
        Ok(rotated)
    }

    /// Deletes a credential and revokes its leases; how many leases.
    pub async fn delete_credential(
        &self,
        tenant_id: &str,
        credential_id: &str,
        actor: &str,
    ) -> Result<usize> {
        self.keeps_credentials()?;
        let revoked = self
            .store()?
            .delete_credential(tenant_id, credential_id, actor, self.clock.now())
            .await
            .map_err(on_credential)?;
        self.leases_revoked(&revoked).await?;
        Ok(revoked.len())
    }

    /// Every live lease `filter` selects, all pages.
    async fn live_leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>> {
        let store = self.store()?;
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = PageRequest { limit: 500, cursor };
            let listed = store.leases(filter, &page, self.clock.now()).await?;
            all.extend(listed.items);
            match listed.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// Revoked leases: their runs' doors told, a `lease_revoked` event each.
    async fn leases_revoked(&self, revoked: &[Lease]) -> Result<()> {
        let now = self.clock.now();
        for lease in revoked {
            self.refusals.record_event(NewEvent::lease_event(
                lease,
                "lease_revoked",
                lease.revoke_reason.as_deref(),
                now,
            ));
        }
        self.runs_leases_changed(revoked.iter().map(|l| l.run_id.as_str())).await
    }

    /// Bumps the lease generation of each run's grant (see the module docs).
    async fn runs_leases_changed<'a>(&self, run_ids: impl Iterator<Item = &'a str>) -> Result<()> {
        let mut run_ids: Vec<&str> = run_ids.collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        let store = self.store()?;
        for run_id in run_ids {
            if let Some(run) = store.run(run_id).await? {
                self.leases_changed(&run.grant_id).await?;
            }
        }
        Ok(())
    }

    /// Tells every node's door that the leases of `grant_id`'s run changed.
    /// A ledger that cannot take it is `lease_unavailable`: the change is
    /// recorded, but the caller must not believe it is in force everywhere
    /// (retrying bumps again).
    pub async fn leases_changed(&self, grant_id: &str) -> Result<()> {
        match self.ledger()?.bump_lease_generation(grant_id).await {
            // No record: nothing spends on this grant anywhere, so nothing injects.
            Ok(_) | Err(Reason::GrantUnknown) => Ok(()),
            Err(_) => Err(PlaneError::unavailable(Reason::LeaseUnavailable)),
        }
    }

    /// Grants run `run_id` a lease on a credential of its tenant, for
    /// `purpose` toward `host`; every door hears of it before the answer.
    pub async fn grant_lease(
        &self,
        run_id: String,
        credential_id: String,
        purpose: String,
        host: &str,
        actor: &str,
    ) -> Result<Lease> {
        self.keeps_credentials()?;
        if !is_valid_id(&credential_id) {
            return Err(PlaneError::invalid("credential_id is not a valid id"));
        }
        let host = purpose_and_host(&purpose, host)?;
        let new = NewLease { lease_id: new_id("lease"), run_id, credential_id, purpose, host };
        let now = self.clock.now();
        let (lease, run) =
            self.store()?.grant_lease(&new, actor, now, self.settings.run_heartbeat_timeout_secs).await?;
        self.leases_changed(&run.grant_id).await?;
        self.refusals.record_event(NewEvent::lease_event(&lease, "lease_granted", None, now));
        Ok(lease)
    }

    /// Revokes one lease (1) or reports it was revoked before (0); either
    /// way every door hears of it before the answer.
    pub async fn revoke_lease(&self, lease_id: &str, actor: &str) -> Result<u64> {
        self.keeps_credentials()?;
        let store = self.store()?;
        let now = self.clock.now();
        let revoked = store.revoke_lease(lease_id, "revoked", actor, now).await.map_err(|e| match e {
            StoreError::NotFound => PlaneError::NotFound(None),
            e => e.into(),
        })?;
        match revoked {
            Some(lease) => {
                self.leases_revoked(std::slice::from_ref(&lease)).await?;
                Ok(1)
            }
            None => {
                // Revoked before: tell the doors again, in case that call's
                // bump did not land.
                if let Some(lease) = store.lease(lease_id, now).await? {
                    self.runs_leases_changed(std::iter::once(lease.run_id.as_str())).await?;
                }
                Ok(0)
            }
        }
    }

    /// One page of the leases `caller` may see that `filter` selects
    /// (`filter.tenant_id` is the tenant asked for, if any).
    pub async fn list_leases(
        &self,
        request_id: &str,
        caller: &Caller,
        filter: LeaseFilter,
        page: &PageRequest,
    ) -> Result<Page<Lease>> {
        self.keeps_credentials()?;
        let store = self.store()?;
        let tenants = self.narrowed(request_id, caller, filter.tenant_id.clone())?;
        let now = self.clock.now();
        let filter = &filter;
        crate::tenancy::merged(
            tenants,
            page,
            |l: &Lease| l.lease_id.clone(),
            |tenant_id, page| async move {
                let filter = LeaseFilter { tenant_id, ..filter.clone() };
                Ok(store.leases(&filter, &page, now).await?)
            },
        )
        .await
    }
}
