//! Time as the core sees it: a plain number handed in by whoever drives the core.
//!
//! The core never reads a clock. The simulator passes virtual time; the proxy passes the
//! nanoseconds elapsed since it started. Both are a [`Time`]: nanoseconds since an origin the
//! driver chose. Spans are ordinary [`std::time::Duration`]s.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: nanoseconds since an origin chosen by the driver. Serialises as that number.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Time(u64);

impl Time {
    /// The driver's origin.
    pub const ZERO: Time = Time(0);

    /// A time `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Time(nanos)
    }

    /// A time `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Time(micros.saturating_mul(1_000))
    }

    /// A time `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Time(millis.saturating_mul(1_000_000))
    }

    /// A time `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Self {
        Time(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the origin, as a float (for rates and plots).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        Time(self.0.saturating_add(duration_nanos(rhs)))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, rhs: Duration) -> Time {
        Time(self.0.saturating_sub(duration_nanos(rhs)))
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A latency measured with `from` queries in flight carried to `to` in flight, each query
/// ahead of a new one adding its share: `nanos` × (to + 1) / (from + 1), saturating.
pub(crate) fn scale_with_rif(nanos: u64, from: u32, to: u32) -> u64 {
    let scaled = u128::from(nanos) * (u128::from(to) + 1) / (u128::from(from) + 1);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Time::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Time::from_millis(6));
        assert_eq!(t - Duration::from_secs(1), Time::ZERO);
        assert_eq!(Time::ZERO.saturating_since(t), Duration::ZERO);
        assert_eq!(t.saturating_since(Time::ZERO), Duration::from_millis(5));
        assert_eq!(Time::from_secs(2).as_secs_f64(), 2.0);
    }
}
