//! Deterministic byte mutations for decoder tests: from a valid encoding, the inputs a
//! fuzzer would try first (truncations, bit flips, bytes set to 0x00/0xFF/0x7F/0x80,
//! insertions, big-endian length fields set to huge values), from a seeded generator.

/// `count` mutations of `seed`, reproducible from `rng_seed`.
pub fn mutations(seed: &[u8], count: usize, rng_seed: u64) -> Vec<Vec<u8>> {
    let mut state = rng_seed | 1;
    let mut next = move || {
        // xorshift64*: enough to spread mutations, and the same on every machine.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut out = Vec::with_capacity(count + seed.len() + 1);
    // Every truncation of a short seed, then random mutations.
    for n in 0..seed.len().min(64) {
        out.push(seed[..n].to_vec());
    }
    for _ in 0..count {
        let mut v = seed.to_vec();
        for _ in 0..1 + next() % 3 {
            let len = v.len().max(1);
            let at = (next() as usize) % len;
            match next() % 6 {
                0 if !v.is_empty() => v[at] ^= 1 << (next() % 8),
                1 if !v.is_empty() => v[at] = [0x00, 0xff, 0x7f, 0x80][(next() % 4) as usize],
                2 if at + 8 <= v.len() => {
                    let big = [u64::MAX, u64::MAX / 2, 1 << 40, 0][(next() % 4) as usize];
                    v[at..at + 8].copy_from_slice(&big.to_be_bytes());
                }
                3 => v.truncate(at),
                4 => v.insert(at.min(v.len()), (next() % 256) as u8),
                _ => v.extend_from_slice(&(next() as u32).to_be_bytes()),
            }
        }
        out.push(v);
    }
    out
}

/// The files of a fuzz target's corpus (`fuzz/corpus/<target>`, grown by libFuzzer).
pub fn corpus(target: &str) -> Vec<Vec<u8>> {
    files_in("corpus", target)
}

/// The hand-made seeds of a fuzz target (`fuzz/seeds/<target>`: valid inputs made by the
/// real producers). Tests mutate these; libFuzzer's corpus is replayed as is.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    files_in("seeds", target)
}

fn files_in(kind: &str, target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}
