//! Sign-in attempts, counted per client and in all over a sliding window.
//! Pure: the caller passes the time, so the rules are tested without
//! waiting.
//!
//! An attempt is *reserved* before its password is checked (the Argon2id
//! check is slow, and attempts arrive at once): a reservation counts
//! against the client's share as a failure would, so however many attempts
//! arrive together, one client gets at most [`PER_CLIENT`] checks in a
//! window. A check that fails keeps its reservation as a failure; one that
//! succeeds gives it back and clears the client's failures; one that never
//! finishes (the connection went away mid-check) counts as failed; one given
//! up before its password was checked gives its place back.
//!
//! A client is an IPv4 address or an IPv6 /64 (one host usually holds a
//! whole /64, so counting its addresses apart would give it billions of
//! shares).
//!
//! In all, past [`IN_ALL`] failures (and checks under way) in the window,
//! sign-ins are *slowed*, never closed: a client with a failure in the
//! window is held back, and a clean client is checked in turn, one check
//! every [`SLOW_INTERVAL`], waiting up to [`SLOW_MAX_WAIT`] for its turn. So
//! guessers with many addresses get one guess per address and a few a
//! minute in all, and the operator, from an address that has not failed,
//! still signs in with the right password. One client alone can never make
//! sign-ins slow for others: its share is far below the total.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Checks one client may have within the window (failed or under way).
pub const PER_CLIENT: usize = 10;
/// Failures (and checks under way) in all within the window past which
/// sign-ins are slowed.
pub const IN_ALL: usize = 200;
/// Slowed, clean clients' checks start at least this far apart.
pub const SLOW_INTERVAL: Duration = Duration::from_secs(2);
/// Slowed, the longest a clean client waits for its turn; past it, it is
/// told to come back (no queue grows without bound). Well inside the
/// request timeout (30 s), so a turn is never cut off by it.
pub const SLOW_MAX_WAIT: Duration = Duration::from_secs(20);
/// Clients tracked at once; past it, a new client is checked as if slowed
/// (memory stays bounded whatever the number of addresses).
const MAX_CLIENTS: usize = 10_000;

/// Who an attempt is counted against: an IPv4 address, or an IPv6 /64
/// (an IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// One IPv4 address.
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6Net(u64),
}

impl ClientKey {
    /// The client `ip` is counted as.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4),
                None => Self::V6Net(u64::try_from(u128::from(v6) >> 64).unwrap_or(u64::MAX)),
            },
        }
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(v4) => write!(f, "{v4}"),
            Self::V6Net(net) => {
                write!(f, "{}/64", std::net::Ipv6Addr::from(u128::from(*net) << 64))
            }
        }
    }
}

/// One client's failures in the window and checks under way.
#[derive(Debug, Default)]
struct Bucket {
    failures: VecDeque<Instant>,
    in_flight: usize,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.failures.is_empty() && self.in_flight == 0
    }
}

/// The attempts seen lately.
#[derive(Debug, Default)]
pub struct SignInThrottle {
    by_client: HashMap<ClientKey, Bucket>,
    all: VecDeque<Instant>,
    in_flight: usize,
    next_slow_turn: Option<Instant>,
}

/// A reserved check: hand it back to [`SignInThrottle::settle`] with the
/// outcome.
#[must_use = "a reservation is settled with the check's outcome"]
#[derive(Debug)]
pub struct Ticket {
    client: ClientKey,
    /// Whether the client has a bucket (false only past `MAX_CLIENTS`).
    tracked: bool,
}

impl Ticket {
    /// The client the attempt counts against.
    pub fn client(&self) -> ClientKey {
        self.client
    }
}

/// Whether an attempt may have its password checked.
#[derive(Debug)]
pub enum Admission {
    /// Check it once `wait` has passed (zero unless sign-ins are slowed).
    Check {
        /// The reservation.
        ticket: Ticket,
        /// How long to wait before checking.
        wait: Duration,
    },
    /// Held back: not checked at all.
    Refused,
}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The wrong password (or a check that never finished).
    Failed,
    /// The right password.
    Succeeded,
    /// Given up before the password was checked: nothing was guessed.
    Abandoned,
}

impl SignInThrottle {
    /// Whether an attempt from `client` may be checked at `now`; if so, it
    /// is reserved, atomically with this decision.
    pub fn admit(&mut self, client: IpAddr, now: Instant) -> Admission {
        self.forget_before(now);
        let client = ClientKey::of(client);
        let (failures, in_flight) =
            self.by_client.get(&client).map_or((0, 0), |b| (b.failures.len(), b.in_flight));
        if failures + in_flight >= PER_CLIENT {
            return Admission::Refused;
        }
        let tracked = self.by_client.contains_key(&client) || self.by_client.len() < MAX_CLIENTS;
        let slowed = self.all.len() + self.in_flight >= IN_ALL || !tracked;
        let wait = if slowed {
            // Only a clean client, one check of its own at a time, in turn.
            if failures > 0 || in_flight > 0 {
                return Admission::Refused;
            }
            let turn = self.next_slow_turn.filter(|t| *t > now).unwrap_or(now);
            let wait = turn.saturating_duration_since(now);
            if wait > SLOW_MAX_WAIT {
                return Admission::Refused;
            }
            self.next_slow_turn = Some(turn + SLOW_INTERVAL);
            wait
        } else {
            Duration::ZERO
        };
        self.in_flight += 1;
        if tracked {
            self.by_client.entry(client).or_default().in_flight += 1;
        }
        Admission::Check { ticket: Ticket { client, tracked }, wait }
    }

    /// Settles a reservation: a failure keeps it (as a failure, for the
    /// window), a success gives it back and clears the client's failures
    /// (not the total).
    pub fn settle(&mut self, ticket: Ticket, outcome: Outcome, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if ticket.tracked
            && let Some(bucket) = self.by_client.get_mut(&ticket.client)
        {
            bucket.in_flight = bucket.in_flight.saturating_sub(1);
        }
        match outcome {
            Outcome::Failed => {
                self.all.push_back(now);
                if ticket.tracked || self.by_client.len() < MAX_CLIENTS {
                    self.by_client.entry(ticket.client).or_default().failures.push_back(now);
                }
            }
            Outcome::Succeeded => {
                if let Some(bucket) = self.by_client.get_mut(&ticket.client) {
                    bucket.failures.clear();
                }
            }
            Outcome::Abandoned => {}
        }
        if self.by_client.get(&ticket.client).is_some_and(Bucket::is_empty) {
            self.by_client.remove(&ticket.client);
        }
        self.forget_before(now);
    }

    fn forget_before(&mut self, now: Instant) {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < WINDOW;
        while self.all.front().is_some_and(|at| !fresh(at)) {
            self.all.pop_front();
        }
        self.by_client.retain(|_, bucket| {
            while bucket.failures.front().is_some_and(|at| !fresh(at)) {
                bucket.failures.pop_front();
            }
            !bucket.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(Ipv4Addr::from(0x0a00_0000 + n))
    }

    fn check(t: &mut SignInThrottle, client: IpAddr, now: Instant) -> Option<(Ticket, Duration)> {
        match t.admit(client, now) {
            Admission::Check { ticket, wait } => Some((ticket, wait)),
            Admission::Refused => None,
        }
    }

    fn fail(t: &mut SignInThrottle, client: IpAddr, now: Instant) {
        let (ticket, _) = check(t, client, now).expect("admitted");
        t.settle(ticket, Outcome::Failed, now);
    }

    #[test]
    fn one_address_is_stopped_after_its_share_and_freed_by_time() {
        let mut t = SignInThrottle::default();
        let start = Instant::now();
        for _ in 0..PER_CLIENT {
            fail(&mut t, ip(1), start);
        }
        assert!(check(&mut t, ip(1), start).is_none());
        assert!(check(&mut t, ip(2), start).is_some(), "another address is not held back");
        assert!(check(&mut t, ip(1), start + WINDOW - Duration::from_secs(1)).is_none());
        assert!(check(&mut t, ip(1), start + WINDOW).is_some());
    }

    #[test]
    fn checks_under_way_count_against_the_share_before_any_fails() {
        let mut t = SignInThrottle::default();
        let now = Instant::now();
        let tickets: Vec<Ticket> =
            (0..80).filter_map(|_| check(&mut t, ip(1), now)).map(|(k, _)| k).collect();
        assert_eq!(tickets.len(), PER_CLIENT, "80 at once: only the share is checked");
        // They fail: still held back. One succeeding gives its place back and
        // clears the address's failures.
        let mut tickets = tickets.into_iter();
        let last = tickets.next_back().unwrap();
        for ticket in tickets {
            t.settle(ticket, Outcome::Failed, now);
        }
        assert!(check(&mut t, ip(1), now).is_none());
        t.settle(last, Outcome::Succeeded, now);
        let (again, _) = check(&mut t, ip(1), now).expect("a success clears the address");
        assert_eq!(t.all.len(), PER_CLIENT - 1, "but not the total");
        // Given up before its check: no failure, its place back.
        t.settle(again, Outcome::Abandoned, now);
        assert_eq!((t.all.len(), t.in_flight, t.by_client.len()), (PER_CLIENT - 1, 0, 0));
    }

    #[test]
    fn many_addresses_slow_sign_ins_down_and_clean_ones_still_get_their_turn() {
        let mut t = SignInThrottle::default();
        let now = Instant::now();
        for i in 0..u32::try_from(IN_ALL).unwrap() {
            fail(&mut t, ip(i), now);
        }
        assert!(check(&mut t, ip(0), now).is_none(), "an address that failed waits for the window");
        let (first, wait) = check(&mut t, ip(100_000), now).expect("a clean address is checked");
        assert_eq!(wait, Duration::ZERO);
        assert!(check(&mut t, ip(100_000), now).is_none(), "one check at a time per clean address");
        let (second, wait) = check(&mut t, ip(100_001), now).expect("in turn");
        assert_eq!(wait, SLOW_INTERVAL);
        t.settle(first, Outcome::Failed, now);
        t.settle(second, Outcome::Succeeded, now + wait);
        // Turns are booked ahead only so far: past it, come back later.
        let booked = (0..100u32).filter(|i| check(&mut t, ip(200_000 + i), now).is_some()).count();
        let most = usize::try_from(SLOW_MAX_WAIT.as_secs() / SLOW_INTERVAL.as_secs()).unwrap();
        assert!((most - 1..=most + 1).contains(&booked), "{booked}");
        assert!(check(&mut t, ip(300_000), now + WINDOW + SLOW_MAX_WAIT).is_some_and(|(_, w)| w.is_zero()));
    }

    #[test]
    fn an_ipv6_client_is_its_64_and_a_mapped_address_its_ipv4() {
        let key = |s: &str| ClientKey::of(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        let mut t = SignInThrottle::default();
        let now = Instant::now();
        for i in 0..PER_CLIENT {
            fail(&mut t, format!("2001:db8::{i:x}").parse().unwrap(), now);
        }
        assert!(check(&mut t, "2001:db8::abcd".parse().unwrap(), now).is_none());
    }
}
