//! Zipfian key sequences (YCSB's skew, θ = 0.99 by default).
//!
//! Ranks are drawn from a Zipf distribution and mapped through a seeded permutation, so the
//! hot keys are spread over the key space instead of being its first few keys.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Zipf};

/// An endless, seeded sequence of keys in `0..n`.
#[derive(Debug)]
pub struct ZipfKeys {
    zipf: Zipf<f64>,
    permutation: Vec<u64>,
    rng: StdRng,
}

impl ZipfKeys {
    /// `n` keys with skew `theta` (0 = uniform).
    pub fn new(n: u64, theta: f64, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut permutation: Vec<u64> = (0..n.max(1)).collect();
        permutation.shuffle(&mut rng);
        let zipf =
            Zipf::new(n.max(1) as f64, theta.max(0.0)).expect("n >= 1 and theta >= 0 are valid");
        Self {
            zipf,
            permutation,
            rng,
        }
    }
}

impl Iterator for ZipfKeys {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let rank = self.zipf.sample(&mut self.rng) as usize; // 1..=n
        Some(self.permutation[rank.saturating_sub(1).min(self.permutation.len() - 1)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_and_deterministic() {
        let a: Vec<u64> = ZipfKeys::new(1000, 0.99, 7).take(10_000).collect();
        let b: Vec<u64> = ZipfKeys::new(1000, 0.99, 7).take(10_000).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|k| *k < 1000));
        let mut counts = std::collections::HashMap::new();
        for k in &a {
            *counts.entry(k).or_insert(0usize) += 1;
        }
        let mut freq: Vec<usize> = counts.into_values().collect();
        freq.sort_unstable_by(|x, y| y.cmp(x));
        let top10: usize = freq.iter().take(10).sum();
        assert!(
            top10 > 10_000 / 5,
            "the 10 hottest of 1000 keys take over 20% of accesses: {top10}"
        );
    }
}
