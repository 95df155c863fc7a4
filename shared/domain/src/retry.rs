//! Back-off arithmetic: the retry intervals of seed 3.4 and the reconnect delays of
//! every loop that talks to a service that may be down. One module, so every wait in
//! AX has a cap and jitter.

use std::time::Duration;

use rand::Rng;

use crate::task::{Backoff, RetryPolicy};

impl RetryPolicy {
    /// The wait before attempt `failed_attempt + 1`, before jitter: `fixed` waits
    /// `initial`, `linear` waits `initial × n`, `exp` waits `initial × 2^(n-1)`, where
    /// `n` is the attempt that failed; always capped at `max_interval_sec`.
    pub fn interval_after(&self, failed_attempt: u32) -> Duration {
        let n = u64::from(failed_attempt.max(1));
        let initial = self.initial_interval_sec;
        let secs = match self.backoff {
            Backoff::Fixed => initial,
            Backoff::Linear => initial.saturating_mul(n),
            Backoff::Exp => initial.saturating_mul(1u64.checked_shl((n - 1) as u32).unwrap_or(u64::MAX)),
        };
        Duration::from_secs(secs.min(self.max_interval_sec))
    }

    /// [`interval_after`](Self::interval_after) with this policy's jitter applied
    /// (a random part of up to `jitter × interval`, taken off, never added, so the cap holds).
    pub fn jittered_interval_after(&self, failed_attempt: u32) -> Duration {
        let base = self.interval_after(failed_attempt);
        if self.jitter <= 0.0 {
            return base;
        }
        let cut = rand::rng().random_range(0.0..=self.jitter);
        base.mul_f64(1.0 - cut)
    }

    /// Whether an attempt that failed may be followed by another.
    pub fn allows_another(&self, failed_attempt: u32) -> bool {
        failed_attempt < self.max_attempts
    }
}

/// Exponential reconnect delays with full jitter, for loops that wait on a service.
#[derive(Debug, Clone)]
pub struct ExponentialBackoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl ExponentialBackoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, current: initial }
    }

    /// The next delay: doubles up to the cap, with up to half of it drawn at random.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.current;
        self.current = (self.current * 2).min(self.max);
        let half = delay / 2;
        half + half.mul_f64(rand::rng().random_range(0.0..=1.0))
    }

    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(backoff: Backoff) -> RetryPolicy {
        RetryPolicy { max_attempts: 10, backoff, initial_interval_sec: 30, max_interval_sec: 1800, jitter: 0.0 }
    }

    #[test]
    fn intervals_follow_the_kind_and_stop_at_the_cap() {
        let secs = |p: &RetryPolicy, n| p.interval_after(n).as_secs();
        let fixed = policy(Backoff::Fixed);
        assert_eq!([secs(&fixed, 1), secs(&fixed, 5)], [30, 30]);
        let linear = policy(Backoff::Linear);
        assert_eq!([secs(&linear, 1), secs(&linear, 3), secs(&linear, 100)], [30, 90, 1800]);
        let exp = policy(Backoff::Exp);
        assert_eq!([secs(&exp, 1), secs(&exp, 2), secs(&exp, 3), secs(&exp, 7), secs(&exp, 70)], [30, 60, 120, 1800, 1800]);
    }

    #[test]
    fn jitter_only_shortens() {
        let mut p = policy(Backoff::Fixed);
        p.jitter = 0.5;
        for _ in 0..100 {
            let d = p.jittered_interval_after(1).as_secs_f64();
            assert!((15.0..=30.0).contains(&d), "{d}");
        }
    }

    #[test]
    fn attempts_stop_at_max_attempts() {
        let p = RetryPolicy { max_attempts: 3, ..policy(Backoff::Fixed) };
        assert!(p.allows_another(2));
        assert!(!p.allows_another(3));
    }

    #[test]
    fn reconnect_backoff_grows_to_its_cap() {
        let mut b = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(1)));
        assert!(delays[7] >= Duration::from_millis(500));
    }
}
