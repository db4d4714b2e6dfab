//! Proves that the object store's decoders of bytes from disk never panic: the FileStorage
//! reader, every object-store record and the pickle reference reader get the kept fuzz
//! corpus (`fuzz/corpus/`, grown by `scripts/fuzz.sh`) and thousands of deterministic
//! mutations of valid encodings (truncations, bit flips, huge length fields). A panic
//! fails the test; an error is the right answer.

use bytes::Bytes;
use tierdb_objects::fuzzing;
use tierdb_objects::records::{self, DataRecord, Meta, Revision, TxnMeta, TxnRecord};
use tierdb_objects::{Oid, Tid};
use tierdb_testkit::mutate::{corpus, mutations, seeds};

#[test]
fn filestorage_reader_survives_damaged_files() {
    let made = seeds("filestorage");
    assert!(!made.is_empty(), "fuzz/corpus/filestorage holds a Data.fs");
    for seed in &made {
        for m in mutations(seed, 3000, 0xF5) {
            fuzzing::filestorage(&m);
        }
    }
    for input in corpus("filestorage") {
        fuzzing::filestorage(&input);
    }
}

#[test]
fn pickle_reference_reader_survives_damaged_pickles() {
    let made = seeds("pickle_refs");
    assert!(!made.is_empty(), "fuzz/corpus/pickle_refs holds pickles");
    for seed in &made {
        for m in mutations(seed, 2000, 0x9c) {
            fuzzing::pickle(&m);
        }
    }
    for input in corpus("pickle_refs") {
        fuzzing::pickle(&input);
    }
}

#[test]
fn record_decoders_survive_damaged_records() {
    let rev = Revision {
        data: Some([7; 32]),
        data_txn: Some(Tid(5)),
        prev: Tid(3),
        blob: Some([9; 32]),
    };
    let txn = TxnRecord {
        status: b' ',
        meta: TxnMeta {
            user: Bytes::from_static(b"user"),
            description: Bytes::from_static(b"description"),
            extension: Bytes::from_static(b"ext"),
        },
    };
    let data = DataRecord {
        codec: 1,
        raw_len: 1000,
        inline: Bytes::from_static(b"inline bytes"),
        chunks: 0,
    };
    let meta = Meta {
        last_tid: Tid(42),
        oid_reserved: 100,
        heads: true,
    };
    // (selector byte of fuzzing::records, a valid value for it)
    let mut seeds: Vec<Vec<u8>> = vec![
        [&[0u8][..], &meta.encode()].concat(),
        [&[1u8][..], &rev.encode()].concat(),
        [&[2u8][..], &txn.encode()].concat(),
        [&[3u8][..], &records::encode_head(Tid(2), &rev, None)].concat(),
        [&[4u8][..], &records::encode_oids(77)].concat(),
        [&[5u8][..], &records::encode_chunk(b"chunk")].concat(),
        [&[6u8][..], &records::rev_key(Oid(1), Tid(2))].concat(),
        [&[7u8][..], &data.encode()].concat(),
    ];
    seeds.extend(tierdb_testkit::mutate::seeds("object_records"));
    for seed in &seeds {
        fuzzing::records(seed);
        for m in mutations(seed, 3000, 0x0b) {
            fuzzing::records(&m);
        }
    }
    for input in corpus("object_records") {
        fuzzing::records(&input);
    }
}
