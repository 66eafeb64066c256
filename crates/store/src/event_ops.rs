// Run events and refusals (itemized, or counted per minute for callers who
// proved nothing), their pages and their pruning, written once and compiled
// per backend beside `ops.rs` (same module, same helpers).

pub(crate) async fn append_events(
    pool: &Pool<Db>,
    events: &[NewEvent],
    counts: &[RefusalCount],
) -> Result<Vec<i64>, StoreError> {
    let mut tx = begin_write(pool).await?;
    // Numbers are taken under the control lock, so batches from several
    // nodes never interleave and each batch goes in as one statement. A
    // count that adds to an existing row leaves its number unused.
    let first: i64 = sqlx::query_scalar(
        "UPDATE control SET event_seq = event_seq + $1 WHERE id = 1 RETURNING event_seq - $1 + 1",
    )
    .bind(i64::try_from(events.len() + counts.len()).map_err(|_| StoreError::Corrupt)?)
    .fetch_one(tx.conn())
    .await?;
    let seqs: Vec<i64> = (first..).take(events.len()).collect();
    add_refusal_counts(&mut tx, counts, first + seqs.len() as i64).await?;
    let numbered: Vec<(&NewEvent, i64)> = events.iter().zip(seqs.iter().copied()).collect();
    let mut shared = Shared::default();
    for chunk in in_fixed_chunks(&numbered) {
        let mut insert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO events (seq, at, tenant_id, run_id, kind, reason, host, rule, request_id, lease_id, \
             actor, file_name, dry_run, refusal) ",
        );
        insert.push_values(chunk, |mut row, (e, seq)| {
            let e: &NewEvent = e;
            row.push_bind(*seq)
                .push_bind(e.at)
                .push_bind(shared.of(e.tenant_id.as_deref()))
                .push_bind(shared.of(e.run_id.as_deref()))
                .push_bind(shared.of(Some(e.kind.as_str())))
                .push_bind(shared.of(e.reason.as_deref()))
                .push_bind(shared.of(e.host.as_deref()))
                .push_bind(e.rule.as_deref())
                .push_bind(e.request_id.as_deref())
                .push_bind(e.lease_id.as_deref())
                .push_bind(e.actor.as_deref())
                .push_bind(e.file_name.as_deref())
                .push_bind(i64::from(e.dry_run))
                .push_bind(i64::from(e.refusal));
        });
        insert.build().execute(tx.conn()).await?;
    }
    tx.append_audit(&refusal_records(events, &seqs)).await?;
    tx.commit().await?;
    Ok(seqs)
}

/// Adds refusal counts to their rows (one per minute, listener, client,
/// kind and reason, whichever node made it), numbering new rows from
/// `first`. Never audited: these callers proved nothing.
async fn add_refusal_counts(tx: &mut WriteTx, counts: &[RefusalCount], first: i64) -> Result<(), StoreError> {
    let numbered: Vec<(&RefusalCount, i64, String)> =
        counts.iter().zip(first..).map(|(c, seq)| (c, seq, c.key())).collect();
    for chunk in in_fixed_chunks(&numbered) {
        let mut upsert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO events (seq, at, kind, reason, dry_run, refusal, count, listener, client, noise_key) ",
        );
        upsert.push_values(chunk, |mut row, (c, seq, key)| {
            row.push_bind(*seq)
                .push_bind(c.minute)
                .push_bind(c.kind.as_str())
                .push_bind(c.reason.as_str())
                .push_bind(0_i64)
                .push_bind(1_i64)
                .push_bind(c.count)
                .push_bind(c.listener.as_str())
                .push_bind(c.client.as_deref())
                .push_bind(key.as_str());
        });
        upsert.push(
            " ON CONFLICT (noise_key) WHERE noise_key IS NOT NULL DO UPDATE SET count = events.count + excluded.count",
        );
        upsert.build().execute(tx.conn()).await?;
    }
    Ok(())
}

/// One shared copy of each value that events of a batch repeat (their
/// tenant, run, kind, reason and host), bound as it is. SQLite's driver
/// copies a borrowed string it binds twice (into a `String`, then an `Arc`),
/// which cost two allocations per field of every refused request.
#[derive(Default)]
struct Shared<'a>(std::collections::HashMap<&'a str, std::sync::Arc<str>>);

impl<'a> Shared<'a> {
    fn of(&mut self, value: Option<&'a str>) -> Option<std::sync::Arc<str>> {
        value.map(|v| self.0.entry(v).or_insert_with(|| std::sync::Arc::from(v)).clone())
    }
}

/// The audit entries for a batch of events: one per tenant and run that
/// was refused in the batch, listing each of its refusals (event number,
/// kind, reason, host, rule, request id, dry run) in order. Every refusal
/// is in the chain, kept after its event row is pruned, while a flood of
/// refusals costs the chain a few entries a batch rather than one each.
fn refusal_records(events: &[NewEvent], seqs: &[i64]) -> Vec<AuditRecord> {
    let mut groups: Vec<(&NewEvent, Vec<serde_json::Value>)> = Vec::new();
    for (e, seq) in events.iter().zip(seqs).filter(|(e, _)| e.refusal) {
        let mut item = serde_json::json!({"event_seq": seq, "at": e.at, "kind": e.kind, "reason": e.reason,
            "host": e.host, "rule": e.rule, "request_id": e.request_id, "dry_run": e.dry_run});
        if let Some(fields) = item.as_object_mut() {
            let optional = [("lease_id", &e.lease_id), ("actor", &e.actor), ("file_name", &e.file_name)];
            for (name, value) in optional {
                if let Some(value) = value {
                    fields.insert(name.into(), value.as_str().into());
                }
            }
        }
        match groups.iter_mut().find(|(first, _)| first.tenant_id == e.tenant_id && first.run_id == e.run_id)
        {
            Some((_, items)) => items.push(item),
            None => groups.push((e, vec![item])),
        }
    }
    groups
        .into_iter()
        .map(|(first, items)| {
            let subject = first.run_id.as_deref().unwrap_or("-");
            let detail = serde_json::json!({"run_id": first.run_id, "count": items.len(), "refusals": items});
            audit_record(first.at, "gatehouse", "refusals", first.tenant_id.as_deref(), subject, detail)
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    at: i64,
    tenant_id: Option<String>,
    run_id: Option<String>,
    kind: String,
    reason: Option<String>,
    host: Option<String>,
    rule: Option<String>,
    request_id: Option<String>,
    lease_id: Option<String>,
    actor: Option<String>,
    file_name: Option<String>,
    dry_run: i64,
    refusal: i64,
    count: i64,
    listener: Option<String>,
    client: Option<String>,
}

const EVENT_COLUMNS: &str = "seq, at, tenant_id, run_id, kind, reason, host, rule, request_id, lease_id, actor, \
     file_name, dry_run, refusal, count, listener, client";

impl EventRow {
    fn into_event(self) -> Event {
        Event {
            seq: self.seq,
            event: NewEvent {
                at: self.at,
                kind: self.kind,
                reason: self.reason,
                tenant_id: self.tenant_id,
                run_id: self.run_id,
                host: self.host,
                rule: self.rule,
                request_id: self.request_id,
                lease_id: self.lease_id,
                actor: self.actor,
                file_name: self.file_name,
                dry_run: self.dry_run != 0,
                refusal: self.refusal != 0,
            },
            count: self.count,
            listener: self.listener,
            client: self.client,
        }
    }
}

// One page of refusals walks at most `REFUSAL_SCAN_ROWS` event rows: a
// filter that matches rarely could otherwise walk the whole table for one
// page. Past the bound the page ends early, with a cursor where the walk
// stopped, and the next page walks on from there: keyset paging either way,
// each page an index range, never an offset.
pub(crate) async fn refusals(
    pool: &Pool<Db>,
    filter: &RefusalFilter,
    page: &PageRequest,
) -> Result<Page<Event>, StoreError> {
    let before = cursor_number(page)?;
    // With filters no one index holds (a run and a tenant: the planner
    // drives one index and filters by the other), the walk is bounded: the
    // seq `REFUSAL_SCAN_ROWS` rows down the range is its floor (none: fewer
    // rows are left, and the walk reaches the oldest).
    let narrowed = filter.kind.is_some()
        || filter.reason.is_some()
        || filter.since.is_some()
        || filter.host.is_some()
        || (filter.run_id.is_some() && filter.tenant_id.is_some());
    let floor: Option<i64> = if narrowed {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT seq FROM events WHERE ");
        // One index only (a run's, else a tenant's), so this walk is an
        // index range whatever the planner would make of two equalities.
        let driving = RefusalFilter {
            run_id: filter.run_id.clone(),
            tenant_id: if filter.run_id.is_some() { None } else { filter.tenant_id.clone() },
            ..RefusalFilter::default()
        };
        push_refusal_range(&mut q, before, None, &driving);
        q.push(" ORDER BY seq DESC LIMIT 1 OFFSET ").push_bind(REFUSAL_SCAN_ROWS - 1);
        q.build_query_scalar().fetch_optional(pool).await?
    } else {
        None
    };
    let mut query = sqlx::QueryBuilder::<Db>::new(format!("SELECT {EVENT_COLUMNS} FROM events WHERE "));
    push_refusal_range(&mut query, before, floor, filter);
    if let Some(kind) = &filter.kind {
        query.push(" AND kind = ").push_bind(kind);
    }
    if let Some(reason) = &filter.reason {
        query.push(" AND reason = ").push_bind(reason);
    }
    if let Some(since) = filter.since {
        query.push(" AND at >= ").push_bind(since);
    }
    if let Some(host) = &filter.host {
        query.push(" AND host = ").push_bind(host);
    }
    query.push(" ORDER BY seq DESC LIMIT ").push_bind(i64::from(page.limit) + 1);
    let rows: Vec<EventRow> = query.build_query_as().fetch_all(pool).await?;
    let items: Vec<Event> = rows.into_iter().map(EventRow::into_event).collect();
    let mut found = paged(items, page.limit, |e: &Event| e.seq.to_string());
    if found.next_cursor.is_none() {
        // A short page that stopped at the floor: more may match below it.
        found.next_cursor = floor.map(|seq| seq.to_string());
    }
    Ok(found)
}

/// The stretch of refusals a page reads: below the cursor (and at or above
/// the floor), along the narrowest index the filter allows (a run's
/// events, a tenant's refusals, or the table). Only the filters given are in
/// the SQL, so the planner sees plain equalities to drive an index with, and
/// the rows come in index order: no sort, whatever the table holds.
fn push_refusal_range(
    query: &mut sqlx::QueryBuilder<Db>,
    before: i64,
    floor: Option<i64>,
    filter: &RefusalFilter,
) {
    query.push("seq < ").push_bind(before);
    if let Some(floor) = floor {
        query.push(" AND seq >= ").push_bind(floor);
    }
    if let Some(run_id) = &filter.run_id {
        query.push(" AND run_id = ").push_bind(run_id);
    }
    if let Some(tenant_id) = &filter.tenant_id {
        query.push(" AND tenant_id = ").push_bind(tenant_id);
    }
    query.push(" AND refusal = 1");
}

pub(crate) async fn run_events(
    pool: &Pool<Db>,
    run_id: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    )))
    .bind(run_id)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(EventRow::into_event).collect())
}

/// Deletes the events numbered below the first one at or after `before`.
/// Numbers follow writing order, and times nearly do: an event a batch
/// wrote late is kept until the next pass rather than a newer one deleted.
/// The bound is found walking the table by number from the oldest row, so
/// no index on time is written with every event.
pub(crate) async fn prune_events(pool: &Pool<Db>, before: UnixTime) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM events WHERE seq < COALESCE((SELECT seq FROM events WHERE at >= $1 ORDER BY seq LIMIT 1), $2)",
    )
    .bind(before)
    .bind(i64::MAX)
    .execute(pool)
    .await?
    .rows_affected())
}
