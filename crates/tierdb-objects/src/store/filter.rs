//! A Bloom filter of content hashes, for pack (data still named) and import (data already
//! written by this import).

use super::*;

/// A Bloom filter of content hashes: "not in it" is certain, "in it" is not. The keys are
/// already BLAKE3 hashes, so the filter's positions come from their bits (salted: a record
/// one pack keeps by a false positive the next, salted differently, can collect) and no
/// hashing is needed: why it is written here rather than taken from a crate.
pub(super) struct NamedFilter {
    bits: Vec<u64>,
    mask: u64,
    salt: u64,
}

impl std::fmt::Debug for NamedFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedFilter")
            .field("bits", &(self.mask + 1))
            .finish_non_exhaustive()
    }
}

impl NamedFilter {
    const HASHES: u64 = 7;

    /// A filter for about `items` keys at 10 bits each, at most `max_bytes`.
    pub fn new(items: u64, max_bytes: usize, salt: u64) -> Self {
        let want_bits = items.saturating_mul(10).max(1 << 16);
        let max_bits = (max_bytes as u64 * 8).max(1 << 16);
        let bits = want_bits
            .min(max_bits)
            .next_power_of_two()
            .min(max_bits.next_power_of_two());
        NamedFilter {
            bits: vec![0; (bits / 64) as usize],
            mask: bits - 1,
            salt,
        }
    }

    fn positions(&self, h: &Hash) -> impl Iterator<Item = u64> + use<> {
        let word = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let h1 = word(0) ^ self.salt;
        let h2 = word(8) | 1;
        let mask = self.mask;
        (0..Self::HASHES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & mask)
    }

    pub fn insert(&mut self, h: &Hash) {
        for p in self.positions(h).collect::<Vec<_>>() {
            self.bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    pub fn contains(&self, h: &Hash) -> bool {
        self.positions(h)
            .all(|p| self.bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::NamedFilter;

    #[test]
    fn the_filter_never_forgets_and_rarely_invents() {
        let key = |i: u32| *blake3::hash(&i.to_le_bytes()).as_bytes();
        let mut f = NamedFilter::new(10_000, 1 << 20, 42);
        for i in 0..10_000 {
            f.insert(&key(i));
        }
        assert!((0..10_000).all(|i| f.contains(&key(i))));
        let false_positives = (10_000..110_000).filter(|&i| f.contains(&key(i))).count();
        assert!(false_positives < 3_000, "{false_positives} of 100000");
    }
}
