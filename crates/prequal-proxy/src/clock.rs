//! The proxy's clock: tokio's, converted at the edge into prequal-core's [`Time`].
//!
//! Every instant in the proxy is a `tokio::time::Instant` (a clippy rule in this crate's
//! `clippy.toml` refuses `std::time::Instant`, as linkerd2-proxy does), so a test that pauses
//! tokio's clock (`#[tokio::test(start_paused = true)]`) pauses all of the proxy's timing: a
//! probe timeout, an ejection's end or a hedge delay then elapses without real waiting. The
//! policies take time as an argument ([`Time`], nanoseconds since an epoch); the [`Clock`] is
//! that epoch, the moment the proxy started, shared by its clusters.

use std::time::Duration;

use prequal_core::Time;
use tokio::time::Instant;

/// The policies' clock: time since the proxy started, read from tokio's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// The policy time now.
    pub fn now(&self) -> Time {
        self.time_at(Instant::now())
    }

    /// The policy time of `instant` (zero for one before the epoch).
    pub fn time_at(&self, instant: Instant) -> Time {
        let since = instant.saturating_duration_since(self.epoch);
        Time::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The instant a policy time stands for.
    pub fn instant_of(&self, time: Time) -> Instant {
        self.epoch + Duration::from_nanos(time.as_nanos())
    }
}
