//! The arithmetic every scenario shares: percentiles of a sample and rates over a
//! window. Pure, so it is unit-tested without any service.

use serde::Serialize;

/// A latency (or skew) sample reduced to what the report prints.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// The nearest-rank percentile (`q` in 0..=1) of an ascending, non-empty slice:
/// the smallest value with at least `q` of the sample at or below it.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of an empty sample");
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p99, max and mean of `values` (sorted in place); `None` for an empty sample.
pub fn summarize(values: &mut [f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some(Summary {
        count: values.len(),
        p50: percentile(values, 0.50),
        p99: percentile(values, 0.99),
        max: values[values.len() - 1],
        mean,
    })
}

/// Events per second over a window; `None` when the window is empty or negative
/// (a single event has no rate).
pub fn rate(count: u64, seconds: f64) -> Option<f64> {
    (seconds > 0.0 && count > 0).then(|| count as f64 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_of_one_to_a_hundred() {
        let mut values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = summarize(&mut values).unwrap();
        assert_eq!((s.count, s.p50, s.p99, s.max), (100, 50.0, 99.0, 100.0));
        assert!((s.mean - 50.5).abs() < 1e-9);
    }

    #[test]
    fn small_samples_take_their_max_as_p99() {
        let mut values = vec![3.0, 1.0, 2.0];
        let s = summarize(&mut values).unwrap();
        assert_eq!((s.p50, s.p99, s.max), (2.0, 3.0, 3.0));
        assert_eq!(percentile(&[7.0], 0.0), 7.0);
    }

    #[test]
    fn two_hundred_values_put_p99_on_the_198th() {
        let sorted: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.99), 198.0);
    }

    #[test]
    fn empty_samples_and_windows_have_no_figure() {
        assert_eq!(summarize(&mut []), None);
        assert_eq!(rate(10, 0.0), None);
        assert_eq!(rate(0, 1.0), None);
        assert_eq!(rate(10, 2.0), Some(5.0));
    }
}
