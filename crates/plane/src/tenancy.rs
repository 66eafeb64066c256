//! Callers bound to tenants: whether a caller may act on a tenant, and
//! lists read under the tenants it may see.
//!
//! A caller bound to tenants acts on those tenants only
//! ([`Caller::may_act_on`]); operations on every tenant at once need an
//! unbound caller with scope `admin` ([`Caller::acts_globally`]). A refusal
//! is `tenant_not_allowed`, recorded like every other.

use std::future::Future;

use gatehouse_core::{Reason, RefusalKind};
use gatehouse_store::{Page, PageRequest, Run};

use crate::{Caller, Plane, PlaneError, Result};

impl Plane {
    /// `tenant_not_allowed`, recorded (with the tenant reached, when known).
    pub fn not_allowed(&self, request_id: &str, caller: &Caller, tenant: Option<&str>) -> PlaneError {
        tracing::warn!(request_id, caller = %caller.name, tenant = tenant.unwrap_or("-"),
            "caller bound to tenants refused another tenant");
        self.refusals.record(
            RefusalKind::AuthRefused,
            Reason::TenantNotAllowed,
            tenant,
            None,
            Some(request_id),
        );
        PlaneError::Refused(Reason::TenantNotAllowed)
    }

    /// The caller may act on `tenant` (a bound caller never on a request
    /// that names none); else `tenant_not_allowed`.
    pub fn require(&self, request_id: &str, caller: &Caller, tenant: Option<&str>) -> Result<()> {
        if caller.may_act_on(tenant) { Ok(()) } else { Err(self.not_allowed(request_id, caller, tenant)) }
    }

    /// The caller may act on every tenant at once; else `tenant_not_allowed`.
    pub fn require_global(&self, request_id: &str, caller: &Caller) -> Result<()> {
        if caller.acts_globally() { Ok(()) } else { Err(self.not_allowed(request_id, caller, None)) }
    }

    /// The run `run_id`, if there is one, after checking the caller may
    /// act on its tenant.
    pub async fn reach_run(&self, request_id: &str, caller: &Caller, run_id: &str) -> Result<Option<Run>> {
        let run = self.store()?.run(run_id).await?;
        if let Some(run) = &run {
            self.require(request_id, caller, Some(&run.tenant_id))?;
        }
        Ok(run)
    }

    /// The tenant filters a list is read under: what the caller asked for
    /// (checked), or, when it asked for none, each of its tenants (an
    /// unbound caller: none, so every tenant).
    pub fn narrowed(
        &self,
        request_id: &str,
        caller: &Caller,
        asked: Option<String>,
    ) -> Result<Vec<Option<String>>> {
        match (&caller.tenants, asked) {
            (None, asked) => Ok(vec![asked]),
            (Some(_), Some(asked)) => {
                self.require(request_id, caller, Some(&asked))?;
                Ok(vec![Some(asked)])
            }
            (Some(own), None) => Ok(own.iter().cloned().map(Some).collect()),
        }
    }
}

/// One page of a list read once per tenant filter and merged, newest first
/// by `key` (unique across tenants). Each read covers its items down to its
/// own next cursor; the merged page holds only what every read has covered,
/// so no item is skipped or repeated, and its cursor is one of the lists'
/// own (no id of another tenant's item). One filter is one plain read.
pub async fn merged<T, K, F, Fut>(
    filters: Vec<Option<String>>,
    page: &PageRequest,
    key: impl Fn(&T) -> K,
    mut read: F,
) -> Result<Page<T>>
where
    K: CursorKey,
    F: FnMut(Option<String>, PageRequest) -> Fut,
    Fut: Future<Output = Result<Page<T>>>,
{
    if filters.len() == 1 {
        let filter = filters.into_iter().next().flatten();
        return read(filter, page.clone()).await;
    }
    let mut items = Vec::new();
    // The highest key some read has not covered below: the merged page
    // reaches down to it and no further.
    let mut frontier: Option<(K, String)> = None;
    for filter in filters {
        let got = read(filter, page.clone()).await?;
        items.extend(got.items);
        if let Some(cursor) = got.next_cursor {
            let k = K::from_cursor(&cursor).ok_or(PlaneError::Internal("list_cursor_unreadable"))?;
            if frontier.as_ref().is_none_or(|(f, _)| k > *f) {
                frontier = Some((k, cursor));
            }
        }
    }
    items.sort_by_key(|item| std::cmp::Reverse(key(item)));
    if let Some((f, _)) = &frontier {
        items.retain(|item| key(item) >= *f);
    }
    let limit = usize::try_from(page.limit).unwrap_or(usize::MAX);
    if items.len() > limit {
        items.truncate(limit);
        let next_cursor = items.last().map(|last| key(last).as_cursor());
        return Ok(Page { items, next_cursor });
    }
    Ok(Page { items, next_cursor: frontier.map(|(_, cursor)| cursor) })
}

/// A list's sort key and its cursor text (the cursor reads on below it).
pub trait CursorKey: Ord + Sized {
    /// The cursor that reads on below this key.
    fn as_cursor(&self) -> String;
    /// The key a cursor of the list stands for.
    fn from_cursor(cursor: &str) -> Option<Self>;
}

/// Ids made by gatehouse in creation order (runs, leases).
impl CursorKey for String {
    fn as_cursor(&self) -> String {
        self.clone()
    }
    fn from_cursor(cursor: &str) -> Option<Self> {
        Some(cursor.to_owned())
    }
}

/// Sequence numbers (refusals).
impl CursorKey for i64 {
    fn as_cursor(&self) -> String {
        self.to_string()
    }
    fn from_cursor(cursor: &str) -> Option<Self> {
        cursor.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    /// A list of one tenant's sequence numbers as the store pages it: below
    /// the cursor, newest first, and (like the refusals' bounded walk) a
    /// read of at most `scan` numbers, which may end a page early with a
    /// cursor at its floor.
    fn read_one(seqs: &[i64], page: &PageRequest, scan: usize) -> Page<i64> {
        let before = page.cursor.as_deref().map_or(i64::MAX, |c| c.parse().unwrap());
        let below: Vec<i64> = seqs.iter().copied().filter(|s| *s < before).collect();
        let walked = &below[..below.len().min(scan)];
        let limit = usize::try_from(page.limit).unwrap();
        if walked.len() > limit {
            return Page {
                items: walked[..limit].to_vec(),
                next_cursor: Some(walked[limit - 1].to_string()),
            };
        }
        let floor = (below.len() > walked.len()).then(|| walked.last().map_or(before, |s| *s).to_string());
        Page { items: walked.to_vec(), next_cursor: floor }
    }

    /// Paging through the merge of several tenants' lists yields each item
    /// once, newest first, whatever the page size and however early a
    /// tenant's read stops.
    #[tokio::test]
    async fn merged_pages_hold_every_item_once_in_order() {
        let lists: Vec<Vec<i64>> =
            vec![vec![97, 60, 59, 58, 20, 3], vec![99, 98, 61, 40, 39, 38, 37, 2, 1], vec![], vec![50]];
        let mut everything: Vec<i64> = lists.concat();
        everything.sort_unstable_by(|a, b| b.cmp(a));
        for limit in 1..=7 {
            for scan in [1, 2, 3, 100] {
                let mut seen = Vec::new();
                let mut cursor = None;
                for _ in 0..100 {
                    let page = PageRequest { limit, cursor: cursor.clone() };
                    let filters = (0..lists.len()).map(|i| Some(i.to_string())).collect();
                    let got = merged(
                        filters,
                        &page,
                        |s: &i64| *s,
                        |tenant, page| {
                            let i: usize = tenant.unwrap().parse().unwrap();
                            let list = lists[i].clone();
                            async move { Ok(read_one(&list, &page, scan)) }
                        },
                    )
                    .await
                    .unwrap();
                    assert!(got.items.len() <= usize::try_from(limit).unwrap());
                    seen.extend(got.items);
                    match got.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                assert_eq!(seen, everything, "limit {limit}, scan {scan}");
            }
        }
    }
}
