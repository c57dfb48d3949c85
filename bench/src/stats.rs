//! Order statistics over repeated runs: median and p90 (nearest rank), never a mean, so one slow
//! outlier does not move the headline figure.

use std::time::Duration;

/// The spread of one measurement's runs.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub runs: usize,
    pub median: Duration,
    pub p90: Duration,
}

impl Summary {
    /// Summarise `samples`; `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2
        };
        Some(Summary {
            runs: n,
            median,
            p90: sorted[nearest_rank(n, 0.9)],
        })
    }
}

/// Index of the `q` quantile by the nearest-rank method (`ceil(q * n) - 1`).
fn nearest_rank(n: usize, q: f64) -> usize {
    let rank = (q * n as f64).ceil() as usize;
    rank.clamp(1, n) - 1
}

/// Milliseconds with two decimals, for tables.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Megabytes (10^6 bytes) per second moved in `d`.
pub fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    bytes as f64 / 1e6 / secs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_list(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn median_and_p90_by_nearest_rank() {
        let s = Summary::of(&ms_list(&[5, 1, 4, 2, 3, 10, 9, 8, 7, 6])).unwrap();
        assert_eq!(s.runs, 10);
        assert_eq!(s.median, Duration::from_micros(5500));
        assert_eq!(s.p90, Duration::from_millis(9));
        let odd = Summary::of(&ms_list(&[3, 1, 2])).unwrap();
        assert_eq!(odd.median, Duration::from_millis(2));
        assert_eq!(odd.p90, Duration::from_millis(3));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn throughput_in_megabytes_per_second() {
        assert_eq!(mb_per_s(200_000_000, Duration::from_secs(2)), 100.0);
        assert_eq!(mb_per_s(1, Duration::ZERO), 0.0);
    }
}
