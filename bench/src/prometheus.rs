//! Reading one histogram off an AX process's `/metrics`: some figures (a cron
//! fire's wake-up by the leader's timer) exist only inside the scheduler.
//! Parsing and the quantile are pure, so they are unit-tested without a process.

/// Cumulative bucket counts of one histogram, by upper bound (`+Inf` last).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The `<name>_bucket` lines of a Prometheus text exposition, summed over label sets.
    pub fn parse(text: &str, name: &str) -> Self {
        let prefix = format!("{name}_bucket{{");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let Some((labels, value)) = line[prefix.len()..].rsplit_once("} ") else { continue };
            let Some(le) = labels.split(',').find_map(|l| l.trim().strip_prefix("le=\"")?.strip_suffix('"').map(str::to_owned)) else { continue };
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
            let (Ok(count), false) = (value.trim().parse::<f64>(), bound.is_nan()) else { continue };
            match buckets.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, c)) => *c += count,
                None => buckets.push((bound, count)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self { buckets }
    }

    /// What was observed since `earlier` (the same process, scraped before).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |bound: f64| earlier.buckets.iter().find(|(b, _)| *b == bound).map_or(0.0, |(_, c)| *c);
        Histogram { buckets: self.buckets.iter().map(|(b, c)| (*b, (c - before(*b)).max(0.0))).collect() }
    }

    pub fn count(&self) -> f64 {
        self.buckets.last().map_or(0.0, |(_, c)| *c)
    }

    /// The `q` quantile as Prometheus' `histogram_quantile` estimates it: linear
    /// within the bucket that holds it; the highest finite bound if it falls in
    /// `+Inf`. `None` with no observation.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let mut lower = (0.0, 0.0);
        for &(bound, cumulative) in &self.buckets {
            if cumulative >= rank {
                if bound.is_infinite() {
                    return Some(lower.0);
                }
                let inside = cumulative - lower.1;
                let fraction = if inside > 0.0 { (rank - lower.1) / inside } else { 1.0 };
                return Some(lower.0 + (bound - lower.0) * fraction);
            }
            lower = (bound, cumulative);
        }
        Some(lower.0)
    }
}

/// Scrapes `http://<addr>/metrics`.
///
/// # Errors
/// The process does not answer.
pub async fn scrape(addr: &str) -> anyhow::Result<String> {
    let response = reqwest::get(format!("http://{addr}/metrics")).await?.error_for_status()?;
    Ok(response.text().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE ax_skew_seconds histogram\n\
        ax_skew_seconds_bucket{le=\"0.001\"} 10\n\
        ax_skew_seconds_bucket{le=\"0.002\"} 90\n\
        ax_skew_seconds_bucket{le=\"0.005\"} 100\n\
        ax_skew_seconds_bucket{le=\"+Inf\"} 100\n\
        ax_skew_seconds_sum 0.15\n\
        ax_skew_seconds_count 100\n\
        ax_other_seconds_bucket{le=\"0.001\"} 7\n";

    #[test]
    fn buckets_of_the_named_histogram_only() {
        let h = Histogram::parse(TEXT, "ax_skew_seconds");
        assert_eq!(h.buckets, vec![(0.001, 10.0), (0.002, 90.0), (0.005, 100.0), (f64::INFINITY, 100.0)]);
        assert_eq!(h.count(), 100.0);
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let h = Histogram::parse(TEXT, "ax_skew_seconds");
        assert!((h.quantile(0.05).unwrap() - 0.0005).abs() < 1e-12, "half-way through the first bucket");
        assert!((h.quantile(0.5).unwrap() - 0.0015).abs() < 1e-12, "half-way through the second");
        assert!((h.quantile(0.99).unwrap() - 0.0047).abs() < 1e-12, "nine tenths through the third");
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn a_window_is_the_difference_of_two_scrapes_and_inf_gives_the_last_bound() {
        let before = Histogram::parse(TEXT, "ax_skew_seconds");
        let after = Histogram { buckets: vec![(0.001, 10.0), (0.002, 90.0), (0.005, 100.0), (f64::INFINITY, 110.0)] };
        let window = after.since(&before);
        assert_eq!(window.count(), 10.0);
        assert_eq!(window.quantile(0.99), Some(0.005), "all ten above the last finite bound");
    }
}
