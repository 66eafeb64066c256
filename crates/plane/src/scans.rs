//! Dependency scans of pull requests and the gate at the worker's pass.
//!
//! A scan is submitted with the exact committed bytes of each changed
//! lockfile (head, and base when there is one), checked against OSV
//! through the door (or the operator's offline database), recorded with its
//! findings, and answered as `deps scan --format json` shapes it.
//!
//! A submission is recorded (`pending`) when it takes its submission
//! number, before OSV is asked, and the scan then runs in a task of its
//! own: a submission that finishes within `GATEHOUSE_DEPS_SCAN_WAIT_MS` is
//! answered `201` with the scan, one that does not `202` with its id, and
//! finishes in the background either way (a request that times out, or a
//! client that hangs up, loses nothing). A scan's memory-heavy part (the
//! body read, decoded and parsed) takes one of `GATEHOUSE_DEPS_SCAN_CONCURRENCY`
//! turns, taken before the body is read; the rest queue for one (never
//! refused busy). Asking OSV holds none, so a stalled OSV never holds up
//! other tenants' scans. A scan still pending after
//! [`SCAN_DEADLINE`] is errored by its own task, and one whose node stopped
//! is marked errored once it is [`STALE_AFTER`] old (at a node's start and
//! every ten minutes after).
//!
//! A gate check names the head commit it is about: the newest submission
//! for that head decides, under the tenant's current gate mode (complete: by
//! severity; pending, errored, or none: blocked), so a scan of an older
//! head never vouches for a newer one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use gatehouse_core::{Clock, Reason, new_id};
use gatehouse_deps::Package;
use gatehouse_deps::gate::{self, GateMode, GateReason};
use gatehouse_deps::lockfile::{self, MAX_LOCKFILE_BYTES, ParseError, Parsed};
use gatehouse_deps::matching::Index;
use gatehouse_deps::osv_client::OsvClient;
use gatehouse_deps::scan::{self, BaseAbsent, Finding, ScanError, plan, read_base};
use gatehouse_deps::severity::Level;
use gatehouse_store::{AuditRecord, DependencyScan, NewScan, Page, PageRequest, ScanOutcome, Store};
use serde::Deserialize;
use serde_json::{Value, json};

pub use crate::osv::EgressTransport;
use crate::{Plane, PlaneError, Result};

/// The largest base lockfile read; a larger one is read as absent (the git
/// provider's contents API stops at 1 MB, as the seed says).
pub const BASE_MAX_BYTES: u64 = 1 << 20;

/// Lockfiles one scan may carry.
pub const MAX_LOCKFILES: usize = 100;

/// The largest scan submission: base64 of several lockfiles near the
/// parsers' own cap. Larger bodies are refused before they are read.
pub const MAX_SCAN_BODY_BYTES: usize = 96 << 20;

/// The longest a scan may run once submitted: past it, its task records it
/// errored (`osv_timeout`), so nothing is pending for ever.
pub const SCAN_DEADLINE: Duration = Duration::from_secs(600);

/// A scan still pending this long after its submission was left by a node
/// that stopped (its own task would have finished it by
/// [`SCAN_DEADLINE`]): it is marked errored, and the gate says
/// `dependency_gate_scan_error` for its head until a new submission.
pub const STALE_AFTER: Duration = Duration::from_secs(660);

/// How many scans parse at once and how long a submission waits.
#[derive(Clone)]
pub struct ScanLimits {
    turns: Arc<tokio::sync::Semaphore>,
    wait: Duration,
}

impl ScanLimits {
    /// `concurrency` scans parse at once (at least one); a submission is
    /// answered pending after `wait`.
    pub fn new(concurrency: usize, wait: Duration) -> Self {
        Self { turns: Arc::new(tokio::sync::Semaphore::new(concurrency.max(1))), wait }
    }

    /// How long a submission waits for its scan before it is answered pending.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// A turn to read, decode and parse one submission, however long the
    /// queue for it.
    pub async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.turns.clone().acquire_owned().await.map_err(|_| PlaneError::Internal("scan_turns_closed"))
    }
}

/// Where a scan's advisories come from.
pub enum OsvSource {
    /// `GATEHOUSE_OSV_DB`, loaded once at start.
    Offline(Arc<Index>),
    /// The OSV API or a mirror (`GATEHOUSE_OSV_URL`), asked through the door.
    Online(Box<OsvClient<EgressTransport>>),
}

impl OsvSource {
    /// Findings for `packages`, and what could not be checked. Matching
    /// against the offline index is CPU work: it runs on a blocking thread,
    /// never on the runtime's workers.
    pub async fn check(&self, packages: Vec<Package>) -> (Vec<Finding>, Vec<ScanError>) {
        if packages.is_empty() {
            return (Vec::new(), Vec::new());
        }
        match self {
            Self::Offline(index) => {
                let index = index.clone();
                tokio::task::spawn_blocking(move || scan::findings_offline(&index, &packages))
                    .await
                    .unwrap_or_else(|_| {
                        let stopped =
                            ScanError { code: "match_failed".into(), message: "the matcher stopped".into() };
                        (Vec::new(), vec![stopped])
                    })
            }
            Self::Online(client) => scan::findings_online(client, &packages).await,
        }
    }
}

/// One changed lockfile of a submission: its committed bytes at the head
/// and at the base (standard base64), or the base's size when the provider
/// would not give it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmittedLockfile {
    path: String,
    head_base64: String,
    #[serde(default)]
    base_base64: Option<String>,
    #[serde(default)]
    base_size: Option<u64>,
}

/// A pull request's dependency scan as submitted.
#[derive(Debug)]
pub struct Submission {
    /// `owner/name`.
    pub repository: String,
    /// Its number.
    pub pull_request: i64,
    /// The head commit scanned.
    pub head_sha: String,
    /// Its changed lockfiles.
    pub lockfiles: Vec<SubmittedLockfile>,
}

/// What a submission came to within its wait.
#[derive(Debug)]
pub enum Submitted {
    /// Finished: the recorded answer.
    Finished(Value),
    /// Still running (it finishes in the background): its pending answer.
    Pending(Value),
}

/// A gate check's verdict, as audited.
#[derive(Debug)]
pub struct GateCheck {
    /// Why the head is blocked (`None`: it is not).
    pub reason: Option<GateReason>,
    /// The submission that decided.
    pub scan_id: Option<String>,
}

/// `owner/name` (one or more `/`-separated segments, as GitLab groups
/// nest), each of `[A-Za-z0-9._-]`, not `.` or `..`, 200 bytes at most.
fn valid_repository(s: &str) -> bool {
    s.len() <= 200
        && s.split('/').count() >= 2
        && s.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// A git object id: SHA-1 (40) or SHA-256 (64) in lower-case hex.
pub fn valid_sha(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A path inside the repository: relative, `/`-separated, no empty, `.`
/// or `..` segment, no control character or backslash, 500 bytes at most.
/// Paths name lockfiles for their format and for errors; nothing is ever
/// read from the file system by them.
fn valid_repo_path(s: &str) -> bool {
    s.len() <= 500
        && !s.chars().any(|c| c.is_control() || c == '\\')
        && s.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// A pull request as a caller names it: its repository and number, checked.
pub fn check_pull_request(repository: &str, pull_request: i64) -> Result<()> {
    if !valid_repository(repository) {
        return Err(PlaneError::invalid(
            "repository is owner/name: segments of [A-Za-z0-9._-], at most 200 bytes",
        ));
    }
    if pull_request < 1 {
        return Err(PlaneError::invalid("pull_request is the pull request's number, 1 or more"));
    }
    Ok(())
}

/// The path `name` names, relative to the directory of `from`, or `None`
/// when it climbs out of the repository (the parser refuses absolute
/// names and URLs before asking).
fn resolve_include(from: &str, name: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for seg in name.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            seg => parts.push(seg),
        }
    }
    Some(parts.join("/"))
}

/// Parses `bytes` (the lockfile at `path`); the files a requirements file
/// includes are read from `submitted` (the same side of the other lockfiles
/// of the scan) and never from anywhere else: one that was not submitted is
/// an include error, so the scan is incomplete rather than partial.
/// The submitted paths it read are added to `read`.
fn parse_submitted(
    path: &str,
    bytes: &[u8],
    submitted: &BTreeMap<&str, &[u8]>,
    read: &mut BTreeSet<String>,
) -> Result<Parsed, ParseError> {
    let mut reader = |name: &str| -> Result<String, String> {
        let target = resolve_include(path, name).ok_or_else(|| "outside the repository".to_owned())?;
        let found = submitted.get(target.as_str()).ok_or_else(|| "not submitted with the scan".to_owned())?;
        let text = String::from_utf8(found.to_vec()).map_err(|_| "not UTF-8".to_owned())?;
        read.insert(target);
        Ok(text)
    };
    lockfile::parse_with(path, bytes, Some(&mut reader))
}

fn decode(text: &str) -> Result<Vec<u8>> {
    // Base64 is 4/3 of the bytes: refuse before decoding anything larger than a lockfile can be.
    if text.len() / 4 * 3 > MAX_LOCKFILE_BYTES + 3 {
        return Err(PlaneError::invalid("a lockfile is larger than the parser's limit"));
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| PlaneError::invalid("head_base64 and base_base64 are standard base64"))
}

/// A stored gate mode read back.
pub fn gate_mode(text: &str) -> GateMode {
    // A stored mode that does not read is the strictest one: never looser than what was set.
    text.parse().unwrap_or(GateMode::High)
}

/// What a submission's lockfiles ask to check: the union of every head's
/// added and changed versions, the heads that could not be read, and a
/// summary per lockfile. `files` are (path, head bytes, base bytes or why
/// the base is absent).
fn plan_submission(files: &Files) -> (Vec<Package>, Vec<ScanError>, Vec<Value>) {
    let heads: BTreeMap<&str, &[u8]> = files.iter().map(|(p, h, _)| (p.as_str(), h.as_slice())).collect();
    let bases: BTreeMap<&str, &[u8]> =
        files.iter().filter_map(|(p, _, b)| b.as_ref().ok().map(|b| (p.as_str(), b.as_slice()))).collect();
    // Every head is parsed first, to learn which submitted files are only
    // included by others (`-r common.txt`): such a file, in no lockfile
    // format of its own, is part of its includers, not an unreadable lockfile.
    let mut parsed = Vec::with_capacity(files.len());
    let mut included_by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (path, head, base) in files {
        let mut read = BTreeSet::new();
        let head = parse_submitted(path, head, &heads, &mut read);
        let base = match base {
            Ok(bytes) => read_base(parse_submitted(path, bytes, &bases, &mut BTreeSet::new())),
            Err(absent) => Err(absent.clone()),
        };
        for target in read {
            included_by.entry(target).or_default().push(path.as_str());
        }
        parsed.push((path.as_str(), head, base));
    }
    let mut to_check = BTreeSet::new();
    let mut errors = Vec::new();
    let mut summaries = Vec::new();
    for (path, head, base) in parsed {
        if let (Err(e), Some(includers)) = (&head, included_by.get(path))
            && e.code == gatehouse_deps::ParseErrorCode::UnknownFormat
        {
            summaries.push(json!({"path": path, "included_by": includers}));
            continue;
        }
        let plan = plan(head, base);
        summaries.push(
            json!({"path": path, "format": plan.format.map(|f| f.as_str()), "checked": plan.to_check.len(),
            "base_absent": plan.base_absent}),
        );
        errors.extend(plan.error);
        to_check.extend(plan.to_check);
    }
    (to_check.into_iter().collect(), errors, summaries)
}

/// A submission's lockfiles, decoded: (path, head bytes, base bytes or why
/// the base is absent).
type Files = Vec<(String, Vec<u8>, Result<Vec<u8>, BaseAbsent>)>;

/// Checks a submission and decodes its lockfiles. Each base64 text is
/// dropped as soon as it is decoded, so the body is never held twice.
fn intake(req: &mut Submission) -> Result<Files> {
    check_pull_request(&req.repository, req.pull_request)?;
    if !valid_sha(&req.head_sha) {
        return Err(PlaneError::invalid("head_sha is the head commit's 40 or 64 lower-case hex digits"));
    }
    if req.lockfiles.is_empty() || req.lockfiles.len() > MAX_LOCKFILES {
        return Err(PlaneError::invalid("lockfiles holds 1 to 100 changed lockfiles"));
    }
    let mut seen = BTreeSet::new();
    for l in &req.lockfiles {
        if !valid_repo_path(&l.path) {
            return Err(PlaneError::invalid(
                "a lockfile path is relative, /-separated, without . or .. segments",
            ));
        }
        if !seen.insert(l.path.as_str()) {
            return Err(PlaneError::invalid("a lockfile path is given twice"));
        }
    }
    let mut files = Vec::with_capacity(req.lockfiles.len());
    for l in &mut req.lockfiles {
        let head = decode(&std::mem::take(&mut l.head_base64))?;
        // The provider's contents API stops at 1 MB: a base it reported
        // larger, or sent larger, is read as absent and every head version
        // is checked.
        let base = match (l.base_base64.take(), l.base_size) {
            (_, Some(size)) if size > BASE_MAX_BYTES => {
                Err(BaseAbsent::TooLarge { bytes: size, limit: BASE_MAX_BYTES })
            }
            (None, _) => Err(BaseAbsent::NotGiven),
            (Some(text), _) => {
                let bytes = decode(&text)?;
                let len = bytes.len() as u64;
                if len > BASE_MAX_BYTES {
                    Err(BaseAbsent::TooLarge { bytes: len, limit: BASE_MAX_BYTES })
                } else {
                    Ok(bytes)
                }
            }
        };
        files.push((std::mem::take(&mut l.path), head, base));
    }
    Ok(files)
}

/// A submission as it is answered while its scan is pending (and the
/// identity every stored scan's answer begins with).
fn pending_answer(s: &DependencyScan) -> Value {
    json!({"scan_id": s.scan_id, "created_at": s.created_at, "tenant_id": s.tenant_id,
        "repository": s.repository, "pull_request": s.pull_request, "head_sha": s.head_sha,
        "status": "pending"})
}

/// A stored scan as the API answers it: the recorded answer once finished;
/// while pending, its identity and `"status": "pending"`; errored because
/// its node stopped, its identity and the error.
fn stored_answer(s: &DependencyScan) -> Value {
    match (s.status.as_str(), s.report.is_empty()) {
        ("pending", _) => pending_answer(s),
        ("error", true) => {
            let mut answer = pending_answer(s);
            answer["status"] = json!("error");
            answer["errors"] = json!([{"code": "scan_interrupted",
                "message": "the node scanning it stopped before the scan finished; submit it again"}]);
            answer
        }
        _ => serde_json::from_str(&s.report).unwrap_or_else(|_| unreadable(s)),
    }
}

/// What a scan's task needs besides its lockfiles.
struct ScanJob {
    record: NewScan,
    mode: GateMode,
    store: Store,
    source: Arc<OsvSource>,
    actor: String,
    request_id: String,
    clock: Arc<dyn Clock>,
}

/// A submitted scan, run to its end whatever became of its request: the
/// lockfiles parsed under the turn taken for them (released before OSV is
/// asked), OSV asked within [`SCAN_DEADLINE`], the outcome recorded. The
/// answer, or `None` when it could not be recorded (the scan then stays
/// pending until it is marked errored as stale).
async fn run_scan(job: ScanJob, files: Files, turn: tokio::sync::OwnedSemaphorePermit) -> Option<Value> {
    let planned = tokio::task::spawn_blocking(move || plan_submission(&files)).await;
    drop(turn);
    let (to_check, mut errors, summaries) = planned.unwrap_or_else(|_| {
        let stopped =
            ScanError { code: "parse_failed".into(), message: "the lockfile parser stopped".into() };
        (Vec::new(), vec![stopped], Vec::new())
    });
    let checked = to_check.len();
    let (findings, lookup_errors) =
        tokio::time::timeout(SCAN_DEADLINE, job.source.check(to_check)).await.unwrap_or_else(|_| {
            let late = ScanError {
                code: "osv_timeout".into(),
                message: format!("OSV did not answer within {} s", SCAN_DEADLINE.as_secs()),
            };
            (Vec::new(), vec![late])
        });
    errors.extend(lookup_errors);
    let report = scan::report(findings, errors, checked, None, job.mode);
    let markdown = scan::render_markdown(&report);
    let mut answer = serde_json::to_value(&report).unwrap_or_else(|_| json!({"status": "error"}));
    let r = &job.record;
    if let Value::Object(fields) = &mut answer {
        fields.insert("scan_id".into(), json!(r.scan_id));
        fields.insert("created_at".into(), json!(r.created_at));
        fields.insert("tenant_id".into(), json!(r.tenant_id));
        fields.insert("repository".into(), json!(r.repository));
        fields.insert("pull_request".into(), json!(r.pull_request));
        fields.insert("head_sha".into(), json!(r.head_sha));
        fields.insert("lockfiles".into(), Value::Array(summaries));
        fields.insert("markdown".into(), json!(markdown));
    }
    let outcome = ScanOutcome {
        status: report.status.to_owned(),
        levels: report.findings.iter().map(|f| f.severity.as_str().to_owned()).collect(),
        report: answer.to_string(),
    };
    let finished_at = job.clock.now();
    match job.store.finish_scan(&r.scan_id, &outcome, finished_at, &job.actor).await {
        Ok(true) => {
            tracing::info!(request_id = %job.request_id, tenant_id = %r.tenant_id, scan_id = %r.scan_id,
                status = report.status, findings = report.findings.len(), checked = report.checked,
                "dependency scan recorded");
            Some(answer)
        }
        Ok(false) => {
            tracing::warn!(request_id = %job.request_id, scan_id = %r.scan_id,
                "a dependency scan finished after it was marked errored; its result is dropped");
            None
        }
        Err(e) => {
            tracing::warn!(request_id = %job.request_id, scan_id = %r.scan_id, code = e.code(),
                "a finished dependency scan could not be recorded; it stays pending until marked errored");
            None
        }
    }
}

impl Plane {
    /// This node's advisory source and store, where it takes dependency
    /// scans (worker and all). Asked before a submission queues for its
    /// turn, so a node that takes none refuses at once.
    pub fn takes_scans(&self) -> Result<(&Arc<OsvSource>, &Store)> {
        Ok((self.osv.as_ref().ok_or(PlaneError::NotServed)?, self.store()?))
    }

    /// A tenant's gate mode as the gate reads it.
    async fn tenant_gate_mode(&self, tenant_id: &str) -> Result<GateMode> {
        let tenant = self.store()?.tenant(tenant_id).await?;
        Ok(tenant.map_or(GateMode::High, |t| gate_mode(&t.gate_mode)))
    }

    /// Records a submission (pending) and runs its scan in a task of its
    /// own holding `turn` while it parses, then waits for it until
    /// `deadline`: finished, or pending (it finishes in the background
    /// whatever becomes of the caller).
    pub async fn submit_scan(
        &self,
        request_id: &str,
        actor: &str,
        tenant_id: String,
        mut submission: Submission,
        turn: tokio::sync::OwnedSemaphorePermit,
        deadline: tokio::time::Instant,
    ) -> Result<Submitted> {
        let (source, store) = self.takes_scans()?;
        let (source, store) = (source.clone(), store.clone());
        let files = intake(&mut submission)?;
        let mode = self.tenant_gate_mode(&tenant_id).await?;
        let record = NewScan {
            scan_id: new_id("scan"),
            tenant_id,
            repository: submission.repository,
            pull_request: submission.pull_request,
            head_sha: submission.head_sha,
            created_at: self.clock.now(),
        };
        // The submission is recorded, pending, with its number: from now
        // on the gate counts it for its head, and its task finishes it
        // whatever becomes of this request.
        store.submit_scan(&record, actor).await?;
        let pending = pending_answer(&DependencyScan {
            scan_id: record.scan_id.clone(),
            submitted: 0,
            tenant_id: record.tenant_id.clone(),
            repository: record.repository.clone(),
            pull_request: record.pull_request,
            head_sha: record.head_sha.clone(),
            created_at: record.created_at,
            status: "pending".into(),
            finished_at: None,
            levels: Vec::new(),
            report: String::new(),
        });
        let job = ScanJob {
            record,
            mode,
            store,
            source,
            actor: actor.to_owned(),
            request_id: request_id.to_owned(),
            clock: self.clock.clone(),
        };
        let task = tokio::spawn(run_scan(job, files, turn));
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(Some(answer))) => Ok(Submitted::Finished(answer)),
            Ok(Ok(None)) => Err(PlaneError::unavailable(Reason::StoreUnavailable)),
            Ok(Err(_)) => Err(PlaneError::Internal("scan_task_failed")),
            Err(_) => Ok(Submitted::Pending(pending)),
        }
    }

    /// One scan of a tenant, as answered (pending or finished).
    pub async fn scan(&self, tenant_id: &str, scan_id: &str) -> Result<Value> {
        let found = self.store()?.scan(tenant_id, scan_id).await?;
        found.map(|s| stored_answer(&s)).ok_or(PlaneError::NotFound(Some(Reason::ScanUnknown)))
    }

    /// One page of a tenant's scans, newest first, of a repository (and a
    /// pull request of it) when given.
    pub async fn scans(
        &self,
        tenant_id: &str,
        repository: Option<&str>,
        pull_request: Option<i64>,
        page: &PageRequest,
    ) -> Result<Page<Value>> {
        if let Some(repository) = repository {
            check_pull_request(repository, pull_request.unwrap_or(1))?;
        } else if pull_request.is_some() {
            return Err(PlaneError::invalid("pull_request needs its repository"));
        }
        let found = self.store()?.scans(tenant_id, repository, pull_request, page).await?;
        Ok(Page { items: found.items.iter().map(stored_answer).collect(), next_cursor: found.next_cursor })
    }

    /// Whether a pull request's head may pass the gate: the newest
    /// submission for that head decides, under the tenant's current mode.
    /// Every check is audited (`gate.check`), and one that cannot be is
    /// not answered.
    pub async fn gate_check(
        &self,
        tenant_id: &str,
        repository: &str,
        pull_request: i64,
        head_sha: &str,
        actor: &str,
        caller: &str,
    ) -> Result<GateCheck> {
        check_pull_request(repository, pull_request)?;
        if !valid_sha(head_sha) {
            return Err(PlaneError::invalid(
                "head_sha is the head commit checked: 40 or 64 lower-case hex digits",
            ));
        }
        let actor_is_person = match actor {
            "agent" => false,
            "person" => true,
            _ => return Err(PlaneError::invalid("actor is agent or person")),
        };
        let mode = self.tenant_gate_mode(tenant_id).await?;
        let store = self.store()?;
        let newest = store.newest_scan_of_head(tenant_id, repository, pull_request, head_sha).await?;
        let reason = gate_verdict(mode, actor_is_person, newest.as_ref());
        let scan_id = newest.map(|s| s.scan_id);
        let detail = json!({"repository": repository, "pull_request": pull_request,
            "head_sha": head_sha, "actor": actor,
            "mode": mode.as_str(), "blocked": reason.is_some(), "policy_failure_code": reason.map(GateReason::as_str),
            "scan_id": scan_id});
        let record = AuditRecord {
            at: self.clock.now(),
            actor: caller.to_owned(),
            action: "gate.check".into(),
            tenant_id: Some(tenant_id.to_owned()),
            subject: format!("{repository}#{pull_request}"),
            detail,
        };
        store.audit(&[record]).await?;
        Ok(GateCheck { reason, scan_id })
    }
}

/// Marks scans left pending by a stopped node as errored, now and every
/// ten minutes (any node may: none holds a scan past [`SCAN_DEADLINE`]).
pub async fn fail_stale_scans(store: Store, clock: Arc<dyn Clock>) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tick.tick().await;
        let now = clock.now();
        let before = now - i64::try_from(STALE_AFTER.as_secs()).unwrap_or(i64::MAX);
        match store.fail_stale_scans(before, now, "gatehouse").await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(scans = n, "dependency scans left pending by a stopped node marked errored")
            }
            Err(e) => tracing::warn!(code = e.code(), "stale dependency scans could not be marked errored"),
        }
    }
}

/// A stored report that no longer reads: its identity and status, marked.
fn unreadable(s: &DependencyScan) -> Value {
    json!({"scan_id": s.scan_id, "repository": s.repository, "pull_request": s.pull_request,
        "head_sha": s.head_sha, "created_at": s.created_at, "status": "error",
        "errors": [{"code": "scan_record_unreadable", "message": "the stored scan does not read"}]})
}

/// The gate's verdict for a head's newest submission (`None`: none). A
/// person is never held to the gate; with the gate on, an agent's head is
/// blocked without a submission, while its newest one is pending, and when
/// that one did not complete. A recorded level that does not read counts
/// as an incomplete scan.
pub fn gate_verdict(
    mode: GateMode,
    actor_is_person: bool,
    newest: Option<&DependencyScan>,
) -> Option<GateReason> {
    if actor_is_person || mode == GateMode::Off {
        return None;
    }
    let Some(scan) = newest else {
        return Some(GateReason::NoScan);
    };
    if scan.status == "pending" {
        return Some(GateReason::ScanPending);
    }
    let levels: Vec<Option<Level>> = scan.levels.iter().map(|l| Level::parse(l)).collect();
    let unreadable = levels.iter().any(Option::is_none);
    let levels: Vec<Level> = levels.into_iter().flatten().collect();
    gate::decide(mode, &levels, scan.status != "ok" || unreadable).reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names_and_paths_are_read_strictly() {
        assert!(valid_repository("octo/repo") && valid_repository("group/sub/repo.js"));
        for bad in ["repo", "/repo", "octo/", "octo/..", "octo/re po", "octo//r", &"a/".repeat(101)] {
            assert!(!valid_repository(bad), "{bad}");
        }
        assert!(valid_repo_path("package-lock.json") && valid_repo_path("app/web/yarn.lock"));
        for bad in ["/etc/passwd", "../x", "a/../b", "a//b", "a\\b", "a\nb", "./a", ""] {
            assert!(!valid_repo_path(bad), "{bad:?}");
        }
        assert!(valid_sha(&"a".repeat(40)) && valid_sha(&"0".repeat(64)));
        assert!(!valid_sha(&"A".repeat(40)) && !valid_sha("abc"));
    }

    #[test]
    fn includes_resolve_inside_the_repository_only() {
        assert_eq!(resolve_include("app/requirements.txt", "base.txt").as_deref(), Some("app/base.txt"));
        assert_eq!(
            resolve_include("app/requirements.txt", "../common/c.txt").as_deref(),
            Some("common/c.txt")
        );
        assert_eq!(resolve_include("requirements.txt", "../x.txt"), None);
    }

    fn scan(status: &str, levels: &[&str]) -> DependencyScan {
        DependencyScan {
            scan_id: "scan_1".into(),
            submitted: 1,
            tenant_id: "t".into(),
            repository: "o/r".into(),
            pull_request: 1,
            head_sha: "a".repeat(40),
            created_at: 0,
            status: status.into(),
            finished_at: (status != "pending").then_some(1),
            levels: levels.iter().map(|l| (*l).to_owned()).collect(),
            report: "{}".into(),
        }
    }

    #[test]
    fn the_gate_holds_agents_to_the_newest_scan_and_never_people() {
        use GateMode::{Critical, High, Off};
        let clean = scan("ok", &["low"]);
        let high = scan("ok", &["high", "medium"]);
        let errored = scan("error", &[]);
        let odd = scan("ok", &["severe"]);
        assert_eq!(gate_verdict(High, false, None), Some(GateReason::NoScan));
        assert_eq!(gate_verdict(Critical, false, None), Some(GateReason::NoScan));
        assert_eq!(gate_verdict(Off, false, None), None);
        assert_eq!(gate_verdict(High, true, None), None, "a person is never held to the gate");
        assert_eq!(gate_verdict(High, true, Some(&errored)), None);
        assert_eq!(gate_verdict(High, false, Some(&clean)), None);
        let pending = scan("pending", &[]);
        assert_eq!(gate_verdict(High, false, Some(&pending)), Some(GateReason::ScanPending));
        assert_eq!(gate_verdict(Critical, false, Some(&pending)), Some(GateReason::ScanPending));
        assert_eq!(gate_verdict(Off, false, Some(&pending)), None);
        assert_eq!(gate_verdict(High, true, Some(&pending)), None);
        assert_eq!(gate_verdict(High, false, Some(&high)), Some(GateReason::Severity));
        assert_eq!(gate_verdict(Critical, false, Some(&high)), None);
        assert_eq!(gate_verdict(Critical, false, Some(&errored)), Some(GateReason::ScanError));
        assert_eq!(
            gate_verdict(Critical, false, Some(&odd)),
            Some(GateReason::ScanError),
            "an unreadable level"
        );
        assert_eq!(gate_mode("garbage"), High, "an unreadable stored mode is never looser");
    }
}
