//! Entry points for the fuzz targets in `fuzz/` (and the corpus replay in CI): each takes
//! arbitrary bytes and must return, never panic, hang or allocate without bound. Not an API.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::ids::{Oid, Tid};
use crate::records;

/// The FileStorage reader over a file holding `data` (read to its end or first error).
pub fn filestorage(data: &[u8]) {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "tierdb-fuzz-fs-{}-{}.fs",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    read_all(&path);
    let _ = std::fs::remove_file(&path);
}

fn read_all(path: &std::path::Path) {
    let Ok(mut reader) = crate::filestorage::FsReader::open(path) else {
        return;
    };
    // Every transaction moves the reader forward, so this ends; the bound is belt and braces.
    for _ in 0..100_000 {
        match reader.next_txn() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

/// Every object-store record decoder on `data` (the first byte picks the key kind).
pub fn records(data: &[u8]) {
    let (key, value) = match data.split_first() {
        Some((k, rest)) => (*k, rest),
        None => return,
    };
    let oid = Oid(1);
    let tid = Tid(2);
    match key % 8 {
        0 => drop(records::Meta::decode(&records::meta_key(), value)),
        1 => drop(records::Revision::decode(
            &records::rev_key(oid, tid),
            value,
        )),
        2 => drop(records::TxnRecord::decode(&records::txn_key(tid), value)),
        3 => drop(records::decode_head(&records::head_key(oid), value)),
        4 => drop(records::decode_oids(&records::oids_key(), value)),
        5 => drop(records::decode_chunk(&records::data_key(&[0; 32]), value)),
        6 => {
            let _ = records::parse_rev_key(value);
            let _ = records::parse_wrote_key(value);
            let _ = records::parse_txn_key(value);
            let _ = records::parse_data_key(value);
        }
        _ => drop(records::DataRecord::decode(
            &records::data_key(&[0; 32]),
            value,
        )),
    }
}

/// The pickle reference reader (pack's garbage collection reads every object with it).
pub fn pickle(data: &[u8]) {
    drop(crate::pickle::references(data));
}
