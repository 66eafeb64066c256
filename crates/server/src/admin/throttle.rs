//! Failed sign-ins, counted per client address and in all, over a sliding
//! window. Pure: the caller passes the time, so the rules are tested
//! without waiting.
//!
//! Per address, a guesser is stopped after a handful of tries. In all, a
//! guesser with many addresses is stopped too: that also holds back the
//! people who know the password until the window passes, which is the
//! safer failure for a page that can revoke everything (and every refusal
//! is recorded, so the attack is visible).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failures one address may have within the window.
pub const PER_CLIENT: usize = 10;
/// Failures all addresses together may have within the window.
pub const IN_ALL: usize = 200;
/// Addresses tracked at once; past it, every sign-in waits for the window
/// (memory stays bounded whatever the number of addresses).
const MAX_CLIENTS: usize = 10_000;

/// The failures seen lately.
#[derive(Debug, Default)]
pub struct SignInThrottle {
    by_client: HashMap<IpAddr, VecDeque<Instant>>,
    all: VecDeque<Instant>,
}

impl SignInThrottle {
    /// Whether `client` may try to sign in at `now`.
    pub fn allows(&mut self, client: IpAddr, now: Instant) -> bool {
        self.forget_before(now);
        let mine = self.by_client.get(&client).map_or(0, VecDeque::len);
        mine < PER_CLIENT && self.all.len() < IN_ALL && self.by_client.len() < MAX_CLIENTS
    }

    /// Counts a failed sign-in.
    pub fn failed(&mut self, client: IpAddr, now: Instant) {
        self.forget_before(now);
        if self.by_client.len() < MAX_CLIENTS || self.by_client.contains_key(&client) {
            self.by_client.entry(client).or_default().push_back(now);
        }
        self.all.push_back(now);
    }

    /// A successful sign-in clears its address's failures (not the total).
    pub fn succeeded(&mut self, client: IpAddr) {
        self.by_client.remove(&client);
    }

    fn forget_before(&mut self, now: Instant) {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < WINDOW;
        while self.all.front().is_some_and(|at| !fresh(at)) {
            self.all.pop_front();
        }
        self.by_client.retain(|_, failures| {
            while failures.front().is_some_and(|at| !fresh(at)) {
                failures.pop_front();
            }
            !failures.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn one_address_is_stopped_after_its_share_and_freed_by_time() {
        let mut t = SignInThrottle::default();
        let start = Instant::now();
        for i in 0..PER_CLIENT {
            assert!(t.allows(ip(1), start), "try {i}");
            t.failed(ip(1), start);
        }
        assert!(!t.allows(ip(1), start));
        assert!(t.allows(ip(2), start), "another address is not held back");
        assert!(!t.allows(ip(1), start + WINDOW - Duration::from_secs(1)));
        assert!(t.allows(ip(1), start + WINDOW));
    }

    #[test]
    fn many_addresses_are_stopped_in_all() {
        let mut t = SignInThrottle::default();
        let now = Instant::now();
        for i in 0..IN_ALL {
            let client = ip(u32::try_from(i).unwrap());
            assert!(t.allows(client, now));
            t.failed(client, now);
        }
        assert!(!t.allows(ip(999_999), now), "a fresh address waits too");
        assert!(t.allows(ip(999_999), now + WINDOW));
    }

    #[test]
    fn success_clears_the_address_but_not_the_total() {
        let mut t = SignInThrottle::default();
        let now = Instant::now();
        for _ in 0..PER_CLIENT {
            t.failed(ip(1), now);
        }
        t.succeeded(ip(1));
        assert!(t.allows(ip(1), now));
        assert_eq!(t.all.len(), PER_CLIENT);
    }
}
