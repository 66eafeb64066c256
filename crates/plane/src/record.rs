//! Refusals and run events: a counter for each, a durable row in the
//! store, written in batches off the request path, and a log line.
//!
//! On a node with a store the log lines are capped at
//! [`LOG_LINES_PER_SEC`]: every refusal is already in the store, the audit
//! log and the counters, and a sandbox hammering forbidden hosts must not
//! be able to flood the operator's log pipeline (nor spend the node's CPU
//! formatting lines nobody reads). What is held back is counted
//! (`gatehouse_refusal_log_lines_held_back_total`) and summed up in one line
//! by the first refusal of a later second. A node without a store (a runner) logs
//! every refusal: there, the line is the record.
//!
//! Refusals from callers who proved nothing (a missing or bad token at the
//! API, a missing or bad grant at the proxy or the file routes) are not
//! itemized: anyone can make them, as many as they like. They are counted
//! (the metrics count each) and added up per minute, listener, client
//! address, kind and reason, and the writer adds each sum to its one row in
//! the store ([`RefusalCount`]), which is never audited and is pruned with
//! the other events.
//!
//! A sandbox hammering forbidden hosts must neither slow allowed traffic nor
//! exhaust memory, so recording never waits for the store: events go into a
//! bounded queue with two lanes, and one writer task per node drains it in
//! batches (one transaction each). Refusals inside a run (its grant opened,
//! so the caller is authenticated) take the run lane; everything else (a
//! missing or forged grant, a bad token: noise anyone can make) the noise
//! lane. When the noise lane is full its oldest entry is dropped, and
//! counted; the run lane is far larger and its events are bounded anyway,
//! since every refused request of a run spends from the run's budget. Only
//! if it, too, overflows is an entry dropped, counted apart and logged as an
//! error.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gatehouse_core::{Clock, Reason, Refusal, RefusalKind};
use gatehouse_egress::proxy::RefusalSink;
use gatehouse_store::{AuditEntry, Event, NewEvent, Page, PageRequest, RefusalCount, RefusalFilter, Store};
use tokio::sync::Notify;

/// Noise entries kept waiting for the store at most.
const NOISE_CAP: usize = 10_000;
/// Run entries kept waiting for the store at most.
const RUN_CAP: usize = 100_000;
/// Events per transaction.
const BATCH: usize = 500;
/// Distinct (minute, listener, client, kind, reason) counts kept waiting
/// for the store at most; past it, a new client's refusals are counted
/// under no client (the count is kept, the address is not).
const COUNT_KEYS_CAP: usize = 10_000;
/// How long the writer lets a burst gather before writing it.
const LINGER: Duration = Duration::from_millis(20);
/// Refusal log lines a node with a store writes in one second at most.
pub const LOG_LINES_PER_SEC: u64 = 100;

/// The per-second allowance of refusal log lines (approximate under
/// contention, which only moves a line or two across a second's edge).
#[derive(Default)]
struct LogAllowance {
    second: std::sync::atomic::AtomicI64,
    used: AtomicU64,
    held_back: AtomicU64,
    /// Since the start, for the metrics.
    held_back_total: AtomicU64,
}

impl LogAllowance {
    /// Whether a line may be written in second `now`, and, when `now`
    /// begins a new second, how many were held back before it.
    fn take(&self, now: i64) -> (bool, u64) {
        let mut earlier = 0;
        let second = self.second.load(Ordering::Relaxed);
        if now != second
            && self.second.compare_exchange(second, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.used.store(0, Ordering::Relaxed);
            earlier = self.held_back.swap(0, Ordering::Relaxed);
        }
        let allowed = self.used.fetch_add(1, Ordering::Relaxed) < LOG_LINES_PER_SEC;
        if !allowed {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            self.held_back_total.fetch_add(1, Ordering::Relaxed);
        }
        (allowed, earlier)
    }

    /// [`take`](Self::take), logging what was held back before `now`'s second.
    fn admit(&self, now: i64) -> bool {
        let (allowed, earlier) = self.take(now);
        if earlier > 0 {
            tracing::warn!(
                held_back = earlier,
                "refusal log lines held back (over {LOG_LINES_PER_SEC} a second); every refusal is in the store and the counters"
            );
        }
        allowed
    }
}

/// The refusal record of a node: logs, counters, and (with a store) the
/// durable queue.
pub struct RefusalLog {
    clock: Arc<dyn Clock>,
    counts: Vec<AtomicU64>,
    /// What dry-run policies would have refused: kept apart, since nothing was refused.
    dry_run_counts: Vec<AtomicU64>,
    /// MCP tool calls at the door: [0] let through, [1 + reason] refused.
    tool_calls: Vec<AtomicU64>,
    queue: Option<Arc<EventQueue>>,
    log_allowance: LogAllowance,
}

impl RefusalLog {
    /// A log that writes to `queue` (none on a node without a store: a runner).
    pub fn new(clock: Arc<dyn Clock>, queue: Option<Arc<EventQueue>>) -> Self {
        let slots = || (0..RefusalKind::ALL.len() * Reason::ALL.len()).map(|_| AtomicU64::new(0)).collect();
        Self {
            clock,
            counts: slots(),
            dry_run_counts: slots(),
            tool_calls: (0..=Reason::ALL.len()).map(|_| AtomicU64::new(0)).collect(),
            queue,
            log_allowance: LogAllowance::default(),
        }
    }

    /// The durable queue, if this node has a store.
    pub fn queue(&self) -> Option<&Arc<EventQueue>> {
        self.queue.as_ref()
    }

    /// Records one refusal.
    pub fn record(
        &self,
        kind: RefusalKind,
        reason: Reason,
        tenant_id: Option<&str>,
        run_id: Option<&str>,
        request_id: Option<&str>,
    ) {
        self.record_refusal(Refusal {
            kind,
            reason,
            tenant_id: tenant_id.map(str::to_owned),
            run_id: run_id.map(str::to_owned),
            request_id: request_id.map(str::to_owned),
            host: None,
            rule: None,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            at: 0,
        });
    }

    /// Records a complete refusal record (its `at` is replaced by now).
    pub fn record_refusal(&self, mut refusal: Refusal) {
        refusal.at = self.clock.now();
        // Without a store the line is the record: always written.
        if self.queue.is_none() || self.log_allowance.admit(refusal.at) {
            log_refusal(&refusal);
        }
        let counts = if refusal.dry_run { &self.dry_run_counts } else { &self.counts };
        if let Some(c) = counts.get(Self::slot(refusal.kind, refusal.reason)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(queue) = &self.queue {
            queue.push(NewEvent::from_refusal(refusal));
        }
    }

    /// Records a refusal of a caller who proved nothing (a missing or bad
    /// token or grant): counted, and added to its minute's count for
    /// `listener` (`api`, `proxy`), `client`, kind and reason, never
    /// itemized or audited.
    pub fn record_unauthenticated(
        &self,
        listener: &'static str,
        client: Option<IpAddr>,
        kind: RefusalKind,
        reason: Reason,
        request_id: Option<&str>,
    ) {
        let at = self.clock.now();
        if self.queue.is_none() || self.log_allowance.admit(at) {
            tracing::warn!(
                kind = kind.as_str(),
                reason = reason.as_str(),
                listener,
                client = client.map(|c| c.to_string()).unwrap_or_default(),
                request_id = request_id.unwrap_or(""),
                "refused (unauthenticated)"
            );
        }
        if let Some(c) = self.counts.get(Self::slot(kind, reason)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(queue) = &self.queue {
            queue.count(NoiseKey { minute: at - at.rem_euclid(60), listener, client, kind, reason });
        }
    }

    /// Records a run event that is not a refusal (`run_ended`, ...).
    pub fn record_event(&self, event: NewEvent) {
        if let Some(queue) = &self.queue {
            queue.push(event);
        }
    }

    fn slot(kind: RefusalKind, reason: Reason) -> usize {
        let k = RefusalKind::ALL.iter().position(|x| *x == kind).unwrap_or(0);
        let r = Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0);
        k * Reason::ALL.len() + r
    }

    /// Prometheus text for the refusal counters and the queue.
    pub fn render(&self, out: &mut String) {
        fn samples(counts: &[AtomicU64]) -> impl Iterator<Item = (String, u64)> + '_ {
            RefusalKind::ALL.iter().flat_map(move |kind| {
                Reason::ALL.iter().filter_map(move |reason| {
                    let n =
                        counts.get(RefusalLog::slot(*kind, *reason)).map_or(0, |c| c.load(Ordering::Relaxed));
                    (n > 0).then(|| (format!("{{kind=\"{kind}\",reason=\"{reason}\"}}"), n))
                })
            })
        }
        counter_family(
            out,
            "gatehouse_refusals_total",
            "Security refusals by kind and reason.",
            samples(&self.counts),
        );
        counter_family(
            out,
            "gatehouse_dry_run_refusals_total",
            "What dry-run policies would have refused (and let through), by kind and reason.",
            samples(&self.dry_run_counts),
        );
        let outcomes = std::iter::once("allowed").chain(Reason::ALL.iter().map(|r| r.as_str()));
        counter_family(
            out,
            "gatehouse_mcp_tool_calls_total",
            "MCP tool calls at the door, by outcome (allowed, or the reason a call was refused).",
            outcomes.zip(&self.tool_calls).filter_map(|(outcome, n)| {
                let n = n.load(Ordering::Relaxed);
                (n > 0 || outcome == "allowed").then(|| (format!("{{outcome=\"{outcome}\"}}"), n))
            }),
        );
        if let Some(q) = &self.queue {
            counter_family(
                out,
                "gatehouse_events_dropped_total",
                "Refusal and run events dropped because the queue to the store was full, by lane.",
                [
                    ("{lane=\"noise\"}".to_owned(), q.dropped_noise.load(Ordering::Relaxed)),
                    ("{lane=\"run\"}".to_owned(), q.dropped_run.load(Ordering::Relaxed)),
                ],
            );
            counter_family(
                out,
                "gatehouse_refusal_log_lines_held_back_total",
                "Refusal log lines not written because more than the allowance a second came (each refusal is still stored and counted).",
                [(String::new(), self.log_allowance.held_back_total.load(Ordering::Relaxed))],
            );
            counter_family(
                out,
                "gatehouse_event_write_failures_total",
                "Batches of events the store could not take (they are retried).",
                [(String::new(), q.write_failures.load(Ordering::Relaxed))],
            );
        }
    }
}

fn log_refusal(refusal: &Refusal) {
    tracing::warn!(
        kind = refusal.kind.as_str(),
        reason = refusal.reason.as_str(),
        tenant_id = refusal.tenant_id.as_deref().unwrap_or(""),
        run_id = refusal.run_id.as_deref().unwrap_or(""),
        request_id = refusal.request_id.as_deref().unwrap_or(""),
        host = refusal.host.as_deref().unwrap_or(""),
        rule = refusal.rule.as_deref().unwrap_or(""),
        dry_run = refusal.dry_run,
        "{}",
        if refusal.dry_run { "would refuse (dry run; let through)" } else { "refused" }
    );
}

impl RefusalSink for RefusalLog {
    fn refused(&self, refusal: Refusal) {
        self.record_refusal(refusal);
    }

    fn unauthenticated(&self, client: Option<IpAddr>, kind: RefusalKind, reason: Reason) {
        self.record_unauthenticated("proxy", client, kind, reason, None);
    }

    fn tool_call(&self, tool: &str, refusal: Option<Refusal>) {
        let slot =
            refusal.as_ref().map_or(0, |r| 1 + Reason::ALL.iter().position(|x| *x == r.reason).unwrap_or(0));
        if let Some(n) = self.tool_calls.get(slot) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let Some(refusal) = refusal else { return };
        if let (Some(tenant_id), Some(run_id)) = (refusal.tenant_id.as_deref(), refusal.run_id.as_deref()) {
            let mut event = NewEvent::of_run(
                tenant_id,
                run_id,
                "tool_call_refused",
                Some(refusal.reason.as_str()),
                self.clock.now(),
            );
            event.host.clone_from(&refusal.host);
            event.rule = Some(tool.to_owned());
            event.request_id.clone_from(&refusal.request_id);
            self.record_event(event);
        }
        self.record_refusal(refusal);
    }
}

/// Each event carries the ticket it was queued with: tickets grow with
/// every push, so "everything queued before ticket `t` is written" is the
/// lowest ticket still waiting (in a lane or in flight) being at least `t`,
/// and a reader waits for its own node's earlier events only, not for a
/// flood queued after it.
/// What a refusal of a caller who proved nothing is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct NoiseKey {
    minute: i64,
    listener: &'static str,
    client: Option<IpAddr>,
    kind: RefusalKind,
    reason: Reason,
}

impl NoiseKey {
    fn with_count(self, count: u64) -> RefusalCount {
        RefusalCount {
            minute: self.minute,
            listener: self.listener.to_owned(),
            client: self.client.map(|c| c.to_string()),
            kind: self.kind.as_str().to_owned(),
            reason: self.reason.as_str().to_owned(),
            count: i64::try_from(count).unwrap_or(i64::MAX),
        }
    }
}

#[derive(Default)]
struct Lanes {
    run: VecDeque<(u64, NewEvent)>,
    noise: VecDeque<(u64, NewEvent)>,
    /// Counted refusals not written yet: each key's lowest ticket and count.
    counts: HashMap<NoiseKey, (u64, u64)>,
    /// The lowest ticket of the batch the writer took and has not written yet.
    in_flight: Option<u64>,
    /// The ticket of the next event queued.
    next: u64,
}

impl Lanes {
    /// The lowest ticket not yet written (or dropped): every event queued
    /// with a lower one is in the store.
    fn low_water(&self) -> u64 {
        [
            self.run.front().map(|(t, _)| *t),
            self.noise.front().map(|(t, _)| *t),
            self.counts.values().map(|(t, _)| *t).min(),
            self.in_flight,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.next)
    }

    /// Adds `count` refusals under `key`, the lowest of them `ticket`.
    fn add_count(&mut self, mut key: NoiseKey, ticket: u64, count: u64) {
        if self.counts.len() >= COUNT_KEYS_CAP && !self.counts.contains_key(&key) {
            key.client = None;
        }
        let entry = self.counts.entry(key).or_insert((ticket, 0));
        entry.0 = entry.0.min(ticket);
        entry.1 = entry.1.saturating_add(count);
    }
}

/// What the writer took for one transaction.
#[derive(Debug, PartialEq)]
struct Taken {
    tickets: Vec<u64>,
    batch: Vec<NewEvent>,
    counts: Vec<(NoiseKey, u64, u64)>,
}

impl Taken {
    fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.counts.is_empty()
    }
}

/// Events on their way to the store.
#[derive(Default)]
pub struct EventQueue {
    lanes: Mutex<Lanes>,
    wake: Notify,
    settled: Notify,
    dropped_noise: AtomicU64,
    dropped_run: AtomicU64,
    write_failures: AtomicU64,
}

impl EventQueue {
    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one event; never waits.
    pub fn push(&self, event: NewEvent) {
        {
            let mut lanes = self.lanes();
            let ticket = lanes.next;
            if event.run_id.is_some() {
                if lanes.run.len() >= RUN_CAP {
                    self.dropped_run.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("run event dropped: the queue to the store is full");
                    return;
                }
                lanes.run.push_back((ticket, event));
            } else {
                if lanes.noise.len() >= NOISE_CAP {
                    lanes.noise.pop_front();
                    self.dropped_noise.fetch_add(1, Ordering::Relaxed);
                }
                lanes.noise.push_back((ticket, event));
            }
            lanes.next += 1;
        }
        self.wake.notify_one();
    }

    /// Counts one refusal of a caller who proved nothing; never waits.
    fn count(&self, key: NoiseKey) {
        {
            let mut lanes = self.lanes();
            let ticket = lanes.next;
            lanes.add_count(key, ticket, 1);
            lanes.next += 1;
        }
        self.wake.notify_one();
    }

    /// Events and counts not written yet (queued or in flight).
    pub fn waiting(&self) -> usize {
        let lanes = self.lanes();
        lanes.run.len() + lanes.noise.len() + lanes.counts.len() + usize::from(lanes.in_flight.is_some())
    }

    fn queued(&self) -> usize {
        let lanes = self.lanes();
        lanes.run.len() + lanes.noise.len() + lanes.counts.len()
    }

    /// Up to [`BATCH`] events, run lane first, and every count waiting,
    /// with their tickets.
    fn take(&self) -> Taken {
        let mut lanes = self.lanes();
        let from_run = lanes.run.len().min(BATCH);
        let from_noise = lanes.noise.len().min(BATCH - from_run);
        let mut tickets = Vec::with_capacity(from_run + from_noise);
        let mut batch = Vec::with_capacity(from_run + from_noise);
        let lanes = &mut *lanes;
        for (ticket, event) in lanes.run.drain(..from_run).chain(lanes.noise.drain(..from_noise)) {
            tickets.push(ticket);
            batch.push(event);
        }
        let counts: Vec<(NoiseKey, u64, u64)> =
            lanes.counts.drain().map(|(key, (ticket, n))| (key, ticket, n)).collect();
        lanes.in_flight = tickets.iter().copied().chain(counts.iter().map(|(_, t, _)| *t)).min();
        Taken { tickets, batch, counts }
    }

    /// Returns a batch the store did not take to the front of its lanes.
    fn put_back(&self, taken: Taken) {
        let Taken { tickets, batch, counts } = taken;
        let mut lanes = self.lanes();
        lanes.in_flight = None;
        for (key, ticket, n) in counts {
            lanes.add_count(key, ticket, n);
        }
        let (run, noise): (Vec<_>, Vec<_>) =
            tickets.into_iter().zip(batch).partition(|(_, e)| e.run_id.is_some());
        for e in run.into_iter().rev() {
            lanes.run.push_front(e);
        }
        for e in noise.into_iter().rev() {
            lanes.noise.push_front(e);
        }
        while lanes.noise.len() > NOISE_CAP {
            lanes.noise.pop_front();
            self.dropped_noise.fetch_add(1, Ordering::Relaxed);
        }
        while lanes.run.len() > RUN_CAP {
            lanes.run.pop_back();
            self.dropped_run.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits (at most `within`) until everything queued before this call
    /// is in the store, so a reader on this node sees its own node's
    /// events; what is queued meanwhile (a flood) does not hold it up.
    /// Returns whether it got there.
    pub async fn flush(&self, within: Duration) -> bool {
        let ticket = self.lanes().next;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let settled = self.settled.notified();
            if self.lanes().low_water() >= ticket {
                return true;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return self.lanes().low_water() >= ticket;
            }
        }
    }

    /// Drains the queue into `store` until the process ends. A batch the
    /// store refuses is put back and retried after a pause.
    pub async fn write_to(self: Arc<Self>, store: Store) {
        loop {
            // A burst gathers for a moment into one transaction: the record
            // is a few milliseconds later, and a flood of refusals costs a
            // few commits a second instead of one per handful of events.
            let queued = self.queued();
            if queued > 0 && queued < BATCH {
                tokio::time::sleep(LINGER).await;
            }
            let taken = self.take();
            if taken.is_empty() {
                self.settled.notify_waiters();
                let _ = tokio::time::timeout(Duration::from_secs(1), self.wake.notified()).await;
                continue;
            }
            let counts: Vec<RefusalCount> = taken.counts.iter().map(|(k, _, n)| k.with_count(*n)).collect();
            match store.record_events(&taken.batch, &counts).await {
                Ok(_) => {
                    self.lanes().in_flight = None;
                    self.settled.notify_waiters();
                }
                Err(e) => {
                    self.write_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        code = e.code(),
                        events = taken.batch.len(),
                        "events not written yet; retrying"
                    );
                    self.put_back(taken);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// One Prometheus counter family: HELP, TYPE, then `name{labels} value` per
/// sample. Labels come from closed sets only.
pub fn counter_family(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, u64)>,
) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// How long a record read waits for this node's queued events.
const FLUSH_WITHIN: Duration = Duration::from_secs(2);

/// How much of the audit chain one narrowed page reads at most.
const AUDIT_SCAN_ENTRIES: usize = 10_000;

/// A read of the record and whether it is complete: `true` when every
/// event this node had queued before the read was in the store, `false`
/// when the read did not wait for them all (read again to see them).
#[derive(Debug)]
pub struct RecordRead<T> {
    /// What was read.
    pub read: T,
    /// Whether every event queued here before the read is in it.
    pub complete: bool,
}

impl crate::Plane {
    /// Lets this node's queued events reach the store before a read, so a
    /// caller sees what it just caused. Whether they did: a store too slow
    /// to take them within [`FLUSH_WITHIN`] leaves the read short.
    pub async fn flush(&self) -> bool {
        match self.refusals.queue() {
            Some(queue) => queue.flush(FLUSH_WITHIN).await,
            None => true,
        }
    }

    /// One page of the refusals `caller` may see that `filter` selects
    /// (`filter.tenant_id`: the tenant asked for, if any), newest first.
    pub async fn refusals(
        &self,
        request_id: &str,
        caller: &crate::Caller,
        filter: RefusalFilter,
        page: &PageRequest,
    ) -> crate::Result<RecordRead<Page<Event>>> {
        let store = self.store()?;
        let tenants = self.narrowed(request_id, caller, filter.tenant_id.clone())?;
        let complete = self.flush().await;
        let filter = &filter;
        let read = crate::tenancy::merged(
            tenants,
            page,
            |e: &Event| e.seq,
            |tenant_id, page| async move {
                let filter = RefusalFilter { tenant_id, ..filter.clone() };
                Ok(store.refusals(&filter, &page).await?)
            },
        )
        .await?;
        Ok(RecordRead { read, complete })
    }

    /// A run's events after `after`, at most `limit`, in order.
    pub async fn run_events(
        &self,
        run_id: &str,
        after: i64,
        limit: u32,
    ) -> crate::Result<RecordRead<Vec<Event>>> {
        let store = self.store()?;
        let complete = self.flush().await;
        if store.run(run_id).await?.is_none() {
            return Err(crate::PlaneError::run_unknown());
        }
        let read = store.run_events(run_id, after, limit).await?;
        Ok(RecordRead { read, complete })
    }

    /// Entries of the audit log after `after` that `caller` may read, at
    /// most `limit`, with the cursor to read on from (`None`: the end). A
    /// caller acting globally reads the whole chain; anyone else the
    /// entries of its tenants and its own actions, reading at most
    /// [`AUDIT_SCAN_ENTRIES`] of the chain per page: a page that stops
    /// there may hold fewer, with a cursor to read on from.
    pub async fn audit(
        &self,
        caller: &crate::Caller,
        mut after: i64,
        limit: u32,
    ) -> crate::Result<RecordRead<(Vec<AuditEntry>, Option<i64>)>> {
        let store = self.store()?;
        let complete = self.flush().await;
        if caller.acts_globally() {
            let entries = store.audit_entries(after, limit).await?;
            let next = entries.last().map(|e| e.seq).filter(|_| entries.len() == limit as usize);
            return Ok(RecordRead { read: (entries, next), complete });
        }
        let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
        let own = |actor: &str| {
            actor == caller.name
                || actor.strip_prefix(caller.name.as_str()).is_some_and(|rest| rest.starts_with(':'))
        };
        let mut kept = Vec::new();
        let mut read = 0;
        loop {
            let chunk = store.audit_entries(after, 500).await?;
            let full = chunk.len() == 500;
            for entry in chunk {
                read += 1;
                after = entry.seq;
                let record = &entry.record;
                let theirs = record.tenant_id.as_deref().is_some_and(|t| caller.may_act_on(Some(t)));
                if theirs || own(&record.actor) {
                    kept.push(entry);
                    if kept.len() == wanted {
                        return Ok(RecordRead { read: (kept, Some(after)), complete });
                    }
                }
            }
            if !full {
                return Ok(RecordRead { read: (kept, None), complete });
            }
            if read >= AUDIT_SCAN_ENTRIES {
                return Ok(RecordRead { read: (kept, Some(after)), complete });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(run: Option<&str>, n: i64) -> NewEvent {
        NewEvent {
            at: n,
            kind: "grant_refused".into(),
            reason: Some("grant_tampered".into()),
            tenant_id: None,
            run_id: run.map(str::to_owned),
            host: None,
            rule: None,
            request_id: None,
            lease_id: None,
            actor: None,
            file_name: None,
            dry_run: false,
            refusal: true,
        }
    }

    #[test]
    fn log_lines_are_capped_a_second_and_what_was_held_back_is_told() {
        let allowance = LogAllowance::default();
        let flood: Vec<(bool, u64)> = (0..LOG_LINES_PER_SEC + 40).map(|_| allowance.take(1000)).collect();
        assert!(
            flood[..LOG_LINES_PER_SEC as usize].iter().all(|&(allowed, earlier)| allowed && earlier == 0)
        );
        assert!(flood[LOG_LINES_PER_SEC as usize..].iter().all(|&(allowed, _)| !allowed));
        // The next second: allowed again, and told how many were held back.
        assert_eq!(allowance.take(1001), (true, 40));
        assert_eq!(allowance.take(1001), (true, 0));
        assert_eq!(allowance.held_back_total.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn with_a_store_every_refusal_is_counted_and_queued_whatever_is_logged() {
        let clock: Arc<dyn Clock> = Arc::new(gatehouse_core::ManualClock::new(1000));
        let log = RefusalLog::new(clock, Some(Arc::new(EventQueue::default())));
        let n = LOG_LINES_PER_SEC * 3;
        for _ in 0..n {
            log.record(RefusalKind::EgressRefused, Reason::PolicyNotAllowed, Some("t1"), Some("run_1"), None);
        }
        assert_eq!(log.log_allowance.held_back_total.load(Ordering::Relaxed), n - LOG_LINES_PER_SEC);
        let queue = log.queue().unwrap();
        assert_eq!(queue.queued(), n as usize);
        let mut metrics = String::new();
        log.render(&mut metrics);
        assert!(metrics.contains(&format!("reason=\"policy_not_allowed\"}} {n}")), "{metrics}");
        assert!(
            metrics
                .contains(&format!("gatehouse_refusal_log_lines_held_back_total {}", n - LOG_LINES_PER_SEC))
        );
    }

    #[test]
    fn a_noise_flood_drops_the_oldest_noise_and_never_a_run_event() {
        let q = EventQueue::default();
        q.push(event(Some("run_1"), 0));
        for n in 0..(NOISE_CAP as i64 + 500) {
            q.push(event(None, n));
        }
        q.push(event(Some("run_1"), 1));
        assert_eq!(q.dropped_noise.load(Ordering::Relaxed), 500);
        assert_eq!(q.dropped_run.load(Ordering::Relaxed), 0);
        let taken = q.take();
        let first = &taken.batch;
        assert_eq!(first.iter().filter(|e| e.run_id.is_some()).count(), 2, "run events go first");
        assert_eq!(first[2].at, 500, "the oldest noise was dropped");
        // A batch the store refused comes back in order, ahead of the rest.
        let (tickets, first) = (taken.tickets.clone(), taken.batch.clone());
        q.put_back(taken);
        let again = q.take();
        assert_eq!((again.tickets, again.batch), (tickets, first));
    }

    #[test]
    fn a_reader_waits_for_the_events_queued_before_it_not_after() {
        let q = EventQueue::default();
        q.push(event(Some("run_1"), 0));
        q.push(event(None, 1));
        let ticket = q.lanes().next;
        assert!(q.lanes().low_water() < ticket, "two events wait");
        let tickets = q.take().tickets;
        assert_eq!(tickets, [0, 1]);
        // A flood queued after the reader's ticket, while the batch is in flight.
        for n in 0..1000 {
            q.push(event(None, n));
        }
        assert!(q.lanes().low_water() < ticket, "the batch in flight is not written yet");
        q.lanes().in_flight = None;
        assert!(q.lanes().low_water() >= ticket, "the flood after it does not hold the reader up");
        assert_eq!(q.lanes().low_water(), 2);
    }

    #[test]
    fn unauthenticated_refusals_are_counted_per_minute_and_client_not_queued_one_by_one() {
        let clock = gatehouse_core::ManualClock::new(6_000);
        let log = RefusalLog::new(Arc::new(clock.clone()), Some(Arc::new(EventQueue::default())));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..10_000 {
            log.record_unauthenticated(
                "api",
                Some(a),
                RefusalKind::AuthRefused,
                Reason::ServiceTokenInvalid,
                None,
            );
        }
        log.record_unauthenticated("proxy", Some(b), RefusalKind::GrantRefused, Reason::GrantTampered, None);
        clock.advance(61);
        log.record_unauthenticated(
            "api",
            Some(a),
            RefusalKind::AuthRefused,
            Reason::ServiceTokenInvalid,
            None,
        );
        let queue = log.queue().unwrap().clone();
        assert_eq!(queue.queued(), 3, "three counts wait, not 10,002 events");
        let ticket = queue.lanes().next;
        let taken = queue.take();
        assert!(taken.batch.is_empty());
        let mut counts: Vec<RefusalCount> = taken.counts.iter().map(|(k, _, n)| k.with_count(*n)).collect();
        counts.sort_by(|x, y| (x.minute, &x.listener).cmp(&(y.minute, &y.listener)));
        let summary: Vec<(i64, &str, Option<&str>, &str, i64)> = counts
            .iter()
            .map(|c| (c.minute, c.listener.as_str(), c.client.as_deref(), c.reason.as_str(), c.count))
            .collect();
        assert_eq!(
            summary,
            [
                (6_000, "api", Some("192.0.2.1"), "service_token_invalid", 10_000),
                (6_000, "proxy", Some("192.0.2.2"), "grant_tampered", 1),
                (6_060, "api", Some("192.0.2.1"), "service_token_invalid", 1),
            ]
        );
        // A reader waits for the counts in flight, and a refused write puts them back.
        assert!(queue.lanes().low_water() < ticket);
        queue.put_back(taken);
        assert_eq!(queue.queued(), 3);
        let mut metrics = String::new();
        log.render(&mut metrics);
        assert!(metrics.contains("reason=\"service_token_invalid\"} 10001"), "{metrics}");
    }

    #[test]
    fn too_many_clients_at_once_fold_into_one_count_without_losing_any() {
        let q = EventQueue::default();
        let key = |n: u32| NoiseKey {
            minute: 0,
            listener: "proxy",
            client: Some(IpAddr::from(std::net::Ipv4Addr::from(n))),
            kind: RefusalKind::GrantRefused,
            reason: Reason::ProxyAuthMissing,
        };
        for n in 0..(COUNT_KEYS_CAP as u32 + 500) {
            q.count(key(n));
        }
        let taken = q.take();
        assert_eq!(taken.counts.len(), COUNT_KEYS_CAP + 1);
        assert_eq!(taken.counts.iter().map(|(_, _, n)| n).sum::<u64>(), COUNT_KEYS_CAP as u64 + 500);
        assert!(taken.counts.iter().any(|(k, _, n)| k.client.is_none() && *n == 500));
    }
}
