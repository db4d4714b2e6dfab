//! Entry point for the fuzz target in `fuzz/` (and the corpus replay in CI): arbitrary
//! bytes as a write-back log segment, replayed and salvaged. Must return, never panic,
//! hang or allocate without bound. Not an API.

use std::sync::atomic::{AtomicU64, Ordering};

/// `data` as the one segment of a write-back log directory: replay, then salvage.
pub fn wblog(data: &[u8]) {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tierdb-fuzz-wblog-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    if std::fs::write(crate::wblog::recovery::segment_path(&dir, 1), data).is_ok() {
        drop(crate::wblog::recovery::replay(&dir));
        drop(crate::wblog::recovery::dirty_bytes(&dir));
        if let Ok(report) = crate::wblog::recovery::salvage(&dir) {
            // Salvage moves damaged originals to a sibling directory: remove it too.
            if let Some(aside) = report.damaged_dir {
                let _ = std::fs::remove_dir_all(aside);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
