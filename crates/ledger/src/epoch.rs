//! Revocation markers: tenant-wide and global revocation in one step.
//!
//! Every registration takes the next sequence number. Revoking a tenant (the
//! kill switch) or everything (emergency revoke) records the current number
//! as that scope's epoch; a grant whose number is at or below its tenant's
//! epoch or the global one is revoked, which every spend checks. So revoking
//! 100,000 live grants writes one value, however many grants there are, and
//! no index of grants has to be kept or walked.
//!
//! The count a scope revocation reports comes from counters kept beside the
//! epochs: grants registered in the scope since its previous revocation, less
//! those revoked one by one since. Grants that simply expired in the meantime
//! are still counted, so the count is an upper bound of what changed.
//!
//! This is the pure rule; the in-process backend applies it directly and the
//! Redis backend mirrors it in its scripts, and the conformance suite holds
//! them equal.

use std::collections::HashMap;

/// One tenant's marker and counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TenantMark {
    epoch: u64,
    live: u64,
    /// The global epoch `live` was counted under: a global revocation since
    /// then revoked them all, so the counter restarts.
    counted_under: u64,
}

/// Sequence numbers, epochs and counters.
#[derive(Debug, Default)]
pub struct Epochs {
    last_seq: u64,
    global: u64,
    global_live: u64,
    tenants: HashMap<String, TenantMark>,
}

impl Epochs {
    /// The sequence number of a new registration.
    pub fn register(&mut self, tenant_id: Option<&str>) -> u64 {
        self.last_seq += 1;
        self.global_live += 1;
        if let Some(t) = tenant_id {
            let global = self.global;
            let mark = self.tenants.entry(t.to_owned()).or_default();
            if mark.counted_under != global {
                mark.live = 0;
                mark.counted_under = global;
            }
            mark.live += 1;
        }
        self.last_seq
    }

    /// Whether a grant registered as `seq` under `tenant_id` is revoked by a marker.
    pub fn covers(&self, seq: u64, tenant_id: Option<&str>) -> bool {
        seq <= self.global || tenant_id.and_then(|t| self.tenants.get(t)).is_some_and(|m| seq <= m.epoch)
    }

    /// Notes that an active grant not covered by a marker was revoked on its own.
    pub fn revoked_one(&mut self, tenant_id: Option<&str>) {
        self.global_live = self.global_live.saturating_sub(1);
        let global = self.global;
        if let Some(mark) = tenant_id.and_then(|t| self.tenants.get_mut(t))
            && mark.counted_under == global
        {
            mark.live = mark.live.saturating_sub(1);
        }
    }

    /// Revokes every grant of `tenant_id` registered so far; returns the count.
    pub fn revoke_tenant(&mut self, tenant_id: &str) -> u64 {
        let (last, global) = (self.last_seq, self.global);
        let mark = self.tenants.entry(tenant_id.to_owned()).or_default();
        let live = if mark.counted_under == global { mark.live } else { 0 };
        *mark = TenantMark { epoch: last, live: 0, counted_under: global };
        self.global_live = self.global_live.saturating_sub(live);
        live
    }

    /// Revokes every grant registered so far; returns the count.
    pub fn revoke_all(&mut self) -> u64 {
        self.global = self.last_seq;
        std::mem::take(&mut self.global_live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_cover_what_was_registered_before_them_only() {
        let mut e = Epochs::default();
        let a = e.register(Some("t1"));
        let b = e.register(Some("t2"));
        let c = e.register(None);
        assert_eq!(e.revoke_tenant("t1"), 1);
        assert!(e.covers(a, Some("t1")) && !e.covers(b, Some("t2")) && !e.covers(c, None));
        let d = e.register(Some("t1"));
        assert!(!e.covers(d, Some("t1")), "a grant after the marker is live");
        assert_eq!(e.revoke_all(), 3, "b, c and d");
        assert!(e.covers(b, Some("t2")) && e.covers(c, None) && e.covers(d, Some("t1")));
        assert_eq!(e.revoke_tenant("t1"), 0, "d was revoked by the global marker");
        assert_eq!(e.revoke_all(), 0);
    }

    #[test]
    fn grants_revoked_one_by_one_are_not_counted_again() {
        let mut e = Epochs::default();
        e.register(Some("t1"));
        e.register(Some("t1"));
        e.revoked_one(Some("t1"));
        assert_eq!(e.revoke_tenant("t1"), 1);
        assert_eq!(e.revoke_all(), 0);
    }
}
