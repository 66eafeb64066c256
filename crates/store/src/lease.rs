//! The lease rules, apart from the SQL that applies them.
//!
//! A lease binds one live run to one credential, its purpose and its one
//! host, for two minutes at a time. The store decides a grant with
//! [`may_grant`] inside the transaction that inserts the lease, under the
//! control lock, so the facts it decides on cannot change before the lease
//! exists.

use gatehouse_core::{Reason, UnixTime};

use crate::model::LEASE_LIFETIME_SECS;

/// What a lease grant is decided on, read in the granting transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantFacts<'a> {
    /// The run is live, within its lifetime and its heartbeat deadline.
    pub run_live: bool,
    /// A lease of the run was ever revoked.
    pub run_had_lease_revoked: bool,
    /// The credential's purpose and host, if the run's tenant has it.
    pub credential: Option<(&'a str, &'a str)>,
}

/// Whether a lease for `purpose` and `host` may be granted, checked in
/// this order: the run must be live; a run that ever had a lease revoked
/// never gets another (whoever revoked it had a reason, and a sandbox that
/// leaked one placeholder is not handed a second); the credential must be
/// the run's tenant's; the lease's host must be one of the credential's
/// (the `host` column, `,`-joined) and its purpose the credential's own,
/// exactly (hosts are compared normalized).
pub fn may_grant(facts: &GrantFacts<'_>, purpose: &str, host: &str) -> Result<(), Reason> {
    if !facts.run_live {
        return Err(Reason::RunNotLive);
    }
    if facts.run_had_lease_revoked {
        return Err(Reason::RunLeaseRevoked);
    }
    let Some((credential_purpose, credential_host)) = facts.credential else {
        return Err(Reason::CredentialUnknown);
    };
    if !credential_host.split(',').any(|h| h == host) {
        return Err(Reason::LeaseHostMismatch);
    }
    if purpose != credential_purpose {
        return Err(Reason::LeasePurposeMismatch);
    }
    Ok(())
}

/// When a lease granted or renewed at `now` expires: two minutes on, but
/// never after its run's own lifetime or its run's heartbeat deadline (a
/// run that stops beating stops being live then, and so does its lease,
/// whether or not a sweep has recorded it yet).
pub fn expiry(now: UnixTime, run_expires_at: UnixTime, heartbeat_deadline: UnixTime) -> UnixTime {
    now.saturating_add(LEASE_LIFETIME_SECS).min(run_expires_at).min(heartbeat_deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(credential: Option<(&'static str, &'static str)>) -> GrantFacts<'static> {
        GrantFacts { run_live: true, run_had_lease_revoked: false, credential }
    }

    #[test]
    fn each_refusal_in_its_order() {
        let ok = facts(Some(("git_provider", "github.com")));
        assert_eq!(may_grant(&ok, "git_provider", "github.com"), Ok(()));
        assert_eq!(may_grant(&ok, "git_provider", "api.github.com"), Err(Reason::LeaseHostMismatch));
        assert_eq!(may_grant(&ok, "mcp_server", "github.com"), Err(Reason::LeasePurposeMismatch));
        assert_eq!(may_grant(&facts(None), "git_provider", "github.com"), Err(Reason::CredentialUnknown));
        let marked = GrantFacts { run_had_lease_revoked: true, ..ok };
        assert_eq!(may_grant(&marked, "git_provider", "github.com"), Err(Reason::RunLeaseRevoked));
        let ended = GrantFacts { run_live: false, ..marked };
        assert_eq!(may_grant(&ended, "git_provider", "github.com"), Err(Reason::RunNotLive));
    }

    #[test]
    fn a_lease_never_outlives_its_run() {
        assert_eq!(expiry(1000, 5000, 9000), 1000 + LEASE_LIFETIME_SECS);
        assert_eq!(expiry(1000, 1030, 9000), 1030);
        assert_eq!(expiry(1000, 5000, 1060), 1060, "nor its run's heartbeat deadline");
        assert_eq!(expiry(i64::MAX - 1, i64::MAX, i64::MAX), i64::MAX);
    }
}
