//! Entry points for the fuzz targets in `fuzz/` (and the corpus replay in CI): arbitrary
//! bytes as COPY FROM STDIN data in PostgreSQL's text or binary format, delivered in pieces
//! as a client's CopyData messages would, decoded into the CSV the import reads, then every
//! field decoded as every column type. Must return, never panic, hang or allocate without
//! bound. Not an API.

use crate::copy::format::{CopyOptions, Spool};

/// The first byte picks the delimiter and where the data is cut into messages.
pub fn copy_text(data: &[u8]) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let options = CopyOptions {
        csv: false,
        binary: false,
        header: false,
        delimiter: if control & 1 == 0 { b'\t' } else { b',' },
        null: "\\N".into(),
    };
    let Ok(spool) = Spool::new(options, Vec::new()) else {
        return;
    };
    spool_and_decode(spool, data, usize::from(control >> 1).max(1));
}

/// Binary COPY (`copy/binary.rs`): the first byte picks the columns' types (every type, or
/// one of them repeated) and where the data is cut into messages.
pub fn copy_binary(data: &[u8]) {
    use tierdb_tables::catalog::ColumnType as T;
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let every = [
        T::Boolean,
        T::Int16,
        T::Int32,
        T::Int64,
        T::Float32,
        T::Float64,
        T::Utf8,
        T::Varchar { len: 3 },
        T::Char { len: 2 },
        T::Date32,
        T::Decimal {
            precision: 10,
            scale: 2,
        },
        T::Numeric,
        T::Timestamp,
        T::TimestampTz,
        T::Time,
        T::Binary,
        T::Uuid,
        T::Json,
        T::Jsonb,
    ];
    let types = match usize::from(control & 0x1f) {
        i if i < every.len() => vec![every[i]; 2],
        _ => every.to_vec(),
    };
    let options = CopyOptions {
        csv: false,
        binary: true,
        header: false,
        delimiter: b'\t',
        null: String::new(),
    };
    let Ok(spool) = Spool::new(options, types) else {
        return;
    };
    spool_and_decode(spool, data, usize::from(control >> 5).max(1) * 3);
}

/// `data` given to `spool` in messages of `piece` bytes, then every spooled field decoded
/// as every column type; a refusal anywhere ends it (refusing is allowed, panicking not).
fn spool_and_decode(mut spool: Spool, data: &[u8], piece: usize) {
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
