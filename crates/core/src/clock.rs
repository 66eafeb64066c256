//! Time as a dependency.
//!
//! Every expiry decision in gatehouse takes its "now" from a [`Clock`], so a
//! test can put a manifest one second past its expiry without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Seconds since the Unix epoch. Signed so that arithmetic on attacker-chosen
/// timestamps (`exp - skew`) cannot wrap; callers use checked or saturating
/// operations on it.
pub type UnixTime = i64;

/// A time as a UTC calendar reads it (the proleptic Gregorian calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// The year.
    pub year: i64,
    /// 1 to 12.
    pub month: i64,
    /// 1 to 31.
    pub day: i64,
    /// 0 to 23.
    pub hour: i64,
    /// 0 to 59.
    pub minute: i64,
    /// 0 to 59.
    pub second: i64,
}

impl CivilTime {
    /// The UTC calendar time of `at` (Howard Hinnant's `civil_from_days`).
    pub fn of(at: UnixTime) -> Self {
        let (days, secs) = (at.div_euclid(86_400), at.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self { year, month, day, hour: secs / 3600, minute: secs % 3600 / 60, second: secs % 60 }
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time in whole seconds since the Unix epoch.
    fn now(&self) -> UnixTime;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixTime {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            // A clock before 1970 is broken; treating it as the epoch makes
            // every token look expired, which fails closed.
            Err(_) => 0,
        }
    }
}

/// A clock that only moves when told to. Clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: UnixTime) -> Self {
        Self(Arc::new(AtomicI64::new(now)))
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: UnixTime) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the clock forward by `secs`.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixTime {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_between_clones() {
        let c = ManualClock::new(100);
        let d = c.clone();
        c.advance(5);
        assert_eq!(d.now(), 105);
        d.set(7);
        assert_eq!(c.now(), 7);
    }

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now() > 1_700_000_000);
    }
}
