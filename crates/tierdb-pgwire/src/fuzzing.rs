//! Entry point for the fuzz target in `fuzz/` (and the corpus replay in CI): arbitrary bytes
//! as COPY FROM STDIN data in PostgreSQL's text format, delivered in pieces as a client's
//! CopyData messages would, decoded into the CSV the import reads, then every field decoded
//! as every column type. Must return, never panic, hang or allocate without bound.
//! Not an API.

use crate::copy::format::{CopyOptions, Spool};

/// The first byte picks the delimiter and where the data is cut into messages.
pub fn copy_text(data: &[u8]) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let options = CopyOptions {
        csv: false,
        header: false,
        delimiter: if control & 1 == 0 { b'\t' } else { b',' },
        null: "\\N".into(),
    };
    let Ok(mut spool) = Spool::new(options) else {
        return;
    };
    let piece = usize::from(control >> 1).max(1);
    for chunk in data.chunks(piece) {
        if spool.add(chunk).is_err() {
            return;
        }
    }
    if spool.finish().is_err() {
        return;
    }
    let Ok(spooled) = std::fs::read(spool.file.path()) else {
        return;
    };
    std::hint::black_box(tierdb_tables::fuzzing::copy_fields(&spooled));
}
