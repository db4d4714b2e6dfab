//! Proves that COPY FROM STDIN's text and binary decoders never panic on a client's bytes:
//! valid COPY data, the kept fuzz corpora (`fuzz/corpus/copy_text`, `copy_binary`, grown by
//! `scripts/fuzz.sh`) and thousands of deterministic mutations of them, cut into messages at
//! many sizes, are decoded and every field parsed as every column type.

use tierdb_testkit::mutate::{corpus, mutations};

fn seeds() -> Vec<Vec<u8>> {
    let text = "1\tone\t2024-01-02\t3.25\t\\N\t\\\\x00ff\tt\n\
                2\ttab\\there\t1999-12-31\t-0.5\t\\N\t\\\\x\tf\n\
                3\tline\\nbreak\t2000-02-29 12:34:56\t1e9\t\\N\t\\\\xdeadbeef\ttrue\n\
                \\.\n";
    let mut out = Vec::new();
    for control in [0u8, 1, 2, 7, 64, 255] {
        out.push([&[control][..], text.as_bytes()].concat());
    }
    out.push(b"\x02a,\"b\",c\r\nd,e\\\n\\.\r\n".to_vec());
    out.extend(tierdb_testkit::mutate::seeds("copy_text"));
    out
}

#[test]
fn copy_text_decoding_survives_any_client_bytes() {
    for seed in seeds() {
        tierdb_pgwire::fuzzing::copy_text(&seed);
        for m in mutations(&seed, 2000, 0xc0) {
            tierdb_pgwire::fuzzing::copy_text(&m);
        }
    }
    for input in corpus("copy_text") {
        tierdb_pgwire::fuzzing::copy_text(&input);
    }
}

#[test]
fn copy_binary_decoding_survives_any_client_bytes() {
    let seeds = tierdb_testkit::mutate::seeds("copy_binary");
    assert!(
        !seeds.is_empty(),
        "fuzz/seeds/copy_binary holds the valid streams"
    );
    for seed in seeds {
        tierdb_pgwire::fuzzing::copy_binary(&seed);
        for m in mutations(&seed, 2000, 0xb1) {
            tierdb_pgwire::fuzzing::copy_binary(&m);
        }
    }
    for input in corpus("copy_binary") {
        tierdb_pgwire::fuzzing::copy_binary(&input);
    }
}
