//! Files through grants, their records and their rules: the platform stores
//! a user's input files; a run's sandbox, with its grant as its credential,
//! reads exactly its inputs and sessions and writes only its output
//! session. The bytes themselves move in the face that carries them
//! (streamed through the content scanner into the object store); every
//! decision about them is made here.
//!
//! Every sandbox operation is spent in the ledger before it happens (a
//! `read_file`, a `read_session`, or an upload's bytes and output file),
//! and the ledger's scope check is what refuses a file, a session or an
//! output session the grant does not name. An upload's row is written
//! before its first byte and replaced by its record at the commit, so the
//! sweeper ([`sweeper`]) keeps what an upload in progress wrote and removes
//! what one that never committed left. A record goes before its object, so
//! no record is ever left without one.

use std::net::IpAddr;

use gatehouse_capability::GrantClaims;
use gatehouse_capability::session_key::{Namespace, Principal};
use gatehouse_core::{Reason, Refusal, RefusalKind, is_valid_id, new_id};
use gatehouse_files::{ObjectPath, Storage, check_name};
use gatehouse_ledger::{Operation, refusal_kind, spend};
use gatehouse_store::Store;
use gatehouse_store::files::{FileUpload, StoredFile, UploadFate};

use crate::{Caller, Plane, PlaneError, Result};

mod sweeper;

pub use sweeper::{ORPHAN_GRACE_SECS, SweepReport, UPLOAD_BOUND_SECS, run, sweep};

/// The grant a sandbox's file request carries, as its face read it.
#[derive(Debug, Clone, Copy)]
pub enum Bearer<'a> {
    /// No usable bearer token.
    Missing,
    /// More than one credential: none is chosen.
    Ambiguous,
    /// The token.
    Token(&'a str),
}

/// Where an input file the platform stores goes.
#[derive(Debug)]
pub struct InputFile<'a> {
    /// Its tenant, when the deployment has tenants.
    pub tenant_id: Option<&'a str>,
    /// Its user.
    pub user_id: &'a str,
    /// What it belongs to (`kind:id:version` is shared in the tenant).
    pub resource: &'a str,
    /// Its name (metadata only).
    pub name: &'a str,
    /// The conversation whose namespace it narrows to.
    pub conversation_id: Option<&'a str>,
}

/// The most files, and the most refused uploads, a run's artifacts list:
/// past it the list says it is `truncated` (a run's files stay readable
/// through its session).
pub const ARTIFACTS_LIMIT: i64 = 1000;

/// What a run left, as its artifacts list it.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// Its files and refused uploads, oldest first.
    pub left: gatehouse_store::files::RunArtifacts,
    /// Either list held more than [`ARTIFACTS_LIMIT`].
    pub truncated: bool,
}

/// A file not found, as every file route says it.
pub const fn file_unknown() -> PlaneError {
    PlaneError::NotFound(Some(Reason::FileUnknown))
}

/// A resource named `kind:id:version` (version a number) is shared inside
/// its tenant, such as a skill bundle: its files live in a namespace of the
/// resource's own, which a new version moves. Any other resource is the
/// user's own.
fn shared(resource: &str) -> Option<Namespace<'_>> {
    let mut parts = resource.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(kind), Some(id), Some(version), None) if !kind.is_empty() && !id.is_empty() => {
            Some(Namespace::Shared { kind, id, version: version.parse().ok()? })
        }
        _ => None,
    }
}

/// Whose a sandbox's operation is, for its refusals.
fn of_run(claims: &GrantClaims) -> (Option<&str>, Option<&str>) {
    (claims.tenant_id.as_deref(), Some(claims.exec_id.as_str()))
}

/// This process's name in the upload rows it writes (for an operator
/// reading the table: which node took an upload in).
fn node_name() -> &'static str {
    static NODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NODE.get_or_init(|| new_id("node"))
}

impl Plane {
    /// The object store and the store, on roles that keep files.
    pub fn file_places(&self) -> Result<(&Storage, &Store)> {
        match (&self.storage, &self.store) {
            (Some(storage), Some(store)) => Ok((storage, store)),
            _ => Err(PlaneError::NotServed),
        }
    }

    /// The run's grant a sandbox's request carries, opened. With strict
    /// tenant isolation a grant without a tenant reaches no file. A
    /// missing, doubled or bad grant proved nothing: its refusal is
    /// counted (from `client`), not itemized.
    pub fn file_grant(
        &self,
        request_id: &str,
        bearer: Bearer<'_>,
        client: Option<IpAddr>,
    ) -> Result<GrantClaims> {
        let sealer = self.sealer.as_ref().ok_or(PlaneError::NotServed)?;
        let unproven = |reason: Reason| {
            self.refusals.record_unauthenticated(
                "api",
                client,
                RefusalKind::GrantRefused,
                reason,
                Some(request_id),
            );
        };
        let token = match bearer {
            Bearer::Token(token) => token,
            Bearer::Ambiguous => {
                unproven(Reason::CredentialsAmbiguous);
                return Err(PlaneError::Unauthenticated(Reason::CredentialsAmbiguous));
            }
            Bearer::Missing => {
                unproven(Reason::GrantMalformed);
                return Err(PlaneError::Unauthenticated(Reason::GrantMalformed));
            }
        };
        let claims = sealer.open(token.trim(), self.clock.now()).map_err(|reason| {
            unproven(reason);
            PlaneError::refusal(reason)
        })?;
        if claims.tenant_id.is_none() && self.settings.tenant_isolation_strict {
            return Err(PlaneError::refusal(Reason::TenantMissing));
        }
        Ok(claims)
    }

    /// Spends `op` from the run's grant; a refusal is recorded as the run's.
    pub async fn spend_for_file(&self, request_id: &str, claims: &GrantClaims, op: &Operation) -> Result<()> {
        let ledger = self.ledger()?;
        match spend(ledger, &claims.grant_id, op, self.clock.now(), self.settings.ledger_required).await {
            Ok(_) => Ok(()),
            Err(reason) => {
                self.note_file_refusal(request_id, of_run(claims), refusal_kind(reason), reason, None, None);
                Err(PlaneError::refusal(reason))
            }
        }
    }

    /// Records a refusal of `tenant`'s file operation (of `run`, for a
    /// sandbox's), naming the file when it has a name.
    pub fn note_file_refusal(
        &self,
        request_id: &str,
        (tenant, run): (Option<&str>, Option<&str>),
        kind: RefusalKind,
        reason: Reason,
        rule: Option<String>,
        file_name: Option<&str>,
    ) {
        self.refusals.record_refusal(Refusal {
            kind,
            reason,
            tenant_id: tenant.map(str::to_owned),
            run_id: run.map(str::to_owned),
            request_id: Some(request_id.to_owned()),
            host: None,
            rule,
            lease_id: None,
            actor: None,
            file_name: file_name.map(str::to_owned),
            dry_run: false,
            at: 0,
        });
    }

    /// Content the scanner did not accept, refused and recorded (a scanner
    /// that could not answer is an outage).
    pub fn refuse_content(
        &self,
        request_id: &str,
        whose: (Option<&str>, Option<&str>),
        reason: Option<Reason>,
        signature: Option<String>,
        file_name: Option<&str>,
    ) -> PlaneError {
        let reason = reason.unwrap_or(Reason::ScannerUnavailable);
        self.record_content_refusal(request_id, whose, reason, signature, file_name);
        PlaneError::refusal(reason)
    }

    /// Records a content verdict that refused, as `whose` (a tenant, and a
    /// run while it is live), naming the signature that matched and the
    /// file (a run's refused uploads are listed with its artifacts).
    pub fn record_content_refusal(
        &self,
        request_id: &str,
        whose: (Option<&str>, Option<&str>),
        reason: Reason,
        signature: Option<String>,
        file_name: Option<&str>,
    ) {
        self.note_file_refusal(request_id, whose, RefusalKind::ContentRefused, reason, signature, file_name);
    }

    /// The namespace an input file the platform stores goes into: the
    /// user's (narrowed to the conversation when one is given) or, for a
    /// shared resource, the resource's; for a tenant the caller may act on.
    pub fn input_namespace(
        &self,
        request_id: &str,
        caller: &Caller,
        input: &InputFile<'_>,
    ) -> Result<String> {
        self.file_places()?;
        let sessions = self.sessions.as_ref().ok_or(PlaneError::NotServed)?;
        let ids = [Some(input.user_id), Some(input.resource), input.tenant_id, input.conversation_id];
        if ids.into_iter().flatten().any(|id| !is_valid_id(id)) {
            return Err(PlaneError::invalid("user_id, resource, tenant_id and conversation_id are ids"));
        }
        check_name(input.name)?;
        self.require(request_id, caller, input.tenant_id)?;
        let principal =
            Principal { tenant_id: input.tenant_id.map(str::to_owned), user_id: input.user_id.to_owned() };
        let namespace =
            shared(input.resource).unwrap_or(Namespace::User { conversation: input.conversation_id });
        sessions.derive(&principal, &namespace).map_err(PlaneError::refusal)
    }

    /// An input file the run's grant names (spent as a `read_file` first),
    /// and still: only the user's own file or a resource shared in the
    /// tenant.
    pub async fn input_file_of_run(
        &self,
        request_id: &str,
        claims: &GrantClaims,
        file_id: &str,
    ) -> Result<StoredFile> {
        let (_, store) = self.file_places()?;
        self.spend_for_file(request_id, claims, &Operation::ReadFile { file: file_id.to_owned() }).await?;
        let file = store.file(claims.tenant_id.as_deref(), file_id).await?.ok_or_else(file_unknown)?;
        let shared_resource = file.resource.as_deref().and_then(shared).is_some();
        if file.user_id != claims.user_id && !shared_resource {
            return Err(file_unknown());
        }
        Ok(file)
    }

    /// The files of a session the run's grant may read (a `read_session`
    /// spend): its user's session of that id in the run's namespace.
    pub async fn session_files_of_run(
        &self,
        request_id: &str,
        claims: &GrantClaims,
        session_id: &str,
    ) -> Result<Vec<StoredFile>> {
        let (_, store) = self.file_places()?;
        self.spend_for_file(request_id, claims, &Operation::ReadSession { session: session_id.to_owned() })
            .await?;
        let tenant = claims.tenant_id.as_deref();
        Ok(store
            .session_files(tenant, &claims.user_id, &claims.session_key, session_id, self.clock.now())
            .await?)
    }

    /// An input file's record.
    pub async fn input_file(&self, tenant_id: &str, file_id: &str) -> Result<StoredFile> {
        let (_, store) = self.file_places()?;
        store.file(Some(tenant_id), file_id).await?.ok_or_else(file_unknown)
    }

    /// What run `run_id` left (see [`ARTIFACTS_LIMIT`]): the files it wrote,
    /// each with its content verdict, and its uploads refused as content,
    /// read after this node's queued refusals reached the store.
    pub async fn run_artifacts(&self, run_id: &str) -> Result<crate::record::RecordRead<Artifacts>> {
        let store = self.store()?;
        let complete = self.flush().await;
        if store.run(run_id).await?.is_none() {
            return Err(PlaneError::run_unknown());
        }
        let mut read = store.run_artifacts(run_id, ARTIFACTS_LIMIT + 1).await?;
        let limit = usize::try_from(ARTIFACTS_LIMIT).unwrap_or(usize::MAX);
        let truncated = read.written.len() > limit || read.refused.len() > limit;
        read.written.truncate(limit);
        read.refused.truncate(limit);
        Ok(crate::record::RecordRead { read: Artifacts { left: read, truncated }, complete })
    }

    /// Deletes an input file: the record goes first, then the object (an
    /// object left by a failure there is an orphan the sweeper removes;
    /// never a record without its object).
    pub async fn delete_input(&self, tenant_id: &str, file_id: &str, actor: &str) -> Result<()> {
        let (storage, store) = self.file_places()?;
        let file = store
            .delete_file(Some(tenant_id), file_id, actor, self.clock.now())
            .await?
            .ok_or_else(file_unknown)?;
        remove_object(storage, &file).await;
        Ok(())
    }

    /// A new file's place in `namespace`, its upload recorded before a
    /// byte of it is written: until its record replaces this row, the
    /// sweeper keeps what the upload writes (however old the storage dates
    /// it), and removes it once the row is older than the sweeper's bound.
    pub async fn begin_upload(&self, namespace: &str) -> Result<ObjectPath> {
        let (_, store) = self.file_places()?;
        let file_id = new_id("file");
        let path = ObjectPath::new(namespace, &file_id)?;
        let upload = FileUpload {
            file_id,
            namespace: path.namespace().to_owned(),
            node: node_name().to_owned(),
            started_at: self.clock.now(),
        };
        store.begin_upload(&upload).await?;
        Ok(path)
    }

    /// An upload that kept nothing: its row goes (left behind on failure,
    /// the sweeper expires it).
    pub async fn forget_upload(&self, file_id: &str) {
        let Some(store) = self.store.as_ref() else { return };
        if let Err(e) = store.abandon_upload(file_id).await {
            tracing::warn!(
                file_id,
                code = e.code(),
                "an upload's row could not be removed; the sweeper expires it"
            );
        }
    }

    /// Records a file whose object is complete; a file it replaces loses
    /// its object. A commit that errs may still have gone through (the
    /// store timed out or the connection broke after the commit was sent):
    /// the store is asked again, in a way no late commit can overtake, and
    /// the new object is deleted only when its record is certainly absent.
    /// When the store cannot say, the object stays for the sweeper, which
    /// judges it by its record.
    pub async fn record_file(&self, file: &StoredFile, actor: &str) -> Result<()> {
        let (storage, store) = self.file_places()?;
        match store.record_file(file, actor).await {
            Ok(replaced) => {
                if let Some(old) = replaced {
                    remove_object(storage, &old).await;
                }
                Ok(())
            }
            Err(e) => match store.abandon_upload(&file.file_id).await {
                // Kept after all. The record it replaced, if any, is gone
                // and its object is an orphan the sweeper removes.
                Ok(UploadFate::Committed) => {
                    tracing::warn!(file_id = %file.file_id, code = e.code(), "a commit that erred had gone through; the file is kept");
                    Ok(())
                }
                Ok(UploadFate::Abandoned) => {
                    remove_object(storage, file).await;
                    Err(e.into())
                }
                Err(again) => {
                    tracing::warn!(file_id = %file.file_id, code = again.code(), "whether a file's record was written is unknown; its object is left to the sweeper");
                    Err(e.into())
                }
            },
        }
    }
}

/// A file's object removed; one that cannot be is left to the sweeper.
async fn remove_object(storage: &Storage, file: &StoredFile) {
    let Ok(path) = ObjectPath::new(&file.namespace, &file.file_id) else { return };
    if let Err(e) = storage.delete(&path).await {
        tracing::warn!(file_id = %file.file_id, reason = %e.reason(), "an object could not be deleted; the sweeper removes it");
    }
}

/// A file's name, checked (metadata only: names never reach a path).
pub fn check_file_name(name: &str) -> Result<()> {
    Ok(check_name(name)?)
}
