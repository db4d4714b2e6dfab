use serde_json::{Value, json};

use super::vectors::{PICKLES, RECORDS};
use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn record(name: &str) -> DecodedRecord {
    let (_, h) = RECORDS.iter().find(|(n, _)| *n == name).unwrap();
    decode_record(&hex(h)).unwrap()
}

/// What each value of `gen.py` prints as, whatever the protocol it was pickled with.
fn expected(case: &str) -> Value {
    match case {
        "scalars" => json!({"n": null, "t": true, "i": -7, "big": "1180591620717411303424",
            "neg_big": "-1180591620717411303424", "f": 1.5, "s": "héllo",
            "b": {"$bytes": "00ff"}}),
        "containers" => json!({"tuple": [1, 2], "list": [1, [2]],
            "intkeys": {"$dict": [[1, "a"]]}, "set": {"$set": [3]}, "fs": {"$set": [4]}}),
        "dates" => json!({"d": "2024-02-29", "dt": "2024-01-02T03:04:05.000006",
            "tm": "23:59:00", "dec": {"$decimal": "1.50"}}),
        "refs" => json!({"r": {"$ref": 7}, "rc": {"$ref": 8, "$class": "__main__.Thing"}}),
        "object" => json!({"$class": "__main__.Thing", "$state": {"a": 1}}),
        "shared" => json!({"x": [1], "y": [1]}),
        other => panic!("no expectation for {other}"),
    }
}

#[test]
fn every_protocol_prints_the_same_json() {
    for (name, h) in PICKLES {
        // Python 3 writes a protocol 0 persistent id as its repr text; ZODB never writes
        // protocol 0 (its references are BINPERSID).
        if *name == "refs_0" {
            continue;
        }
        let case = name.rsplit_once('_').unwrap().0;
        let got = decode_pickle(&hex(h)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, expected(case), "{name}");
    }
}

#[test]
fn zodb_records_show_class_state_and_references() {
    let root = record("root");
    assert_eq!(
        root.class_name.as_deref(),
        Some("persistent.mapping.PersistentMapping")
    );
    // The reference to `pm` names its class through the class pickle's memo.
    assert_eq!(
        root.state.unwrap(),
        json!({"data": {
            "small": {"$ref": 1, "$class": "BTrees.OOBTree.OOBTree"},
            "big": {"$ref": 2, "$class": "BTrees.IOBTree.IOBTree"},
            "ts": {"$ref": 3, "$class": "BTrees.OOBTree.OOTreeSet"},
            "pm": {"$ref": 4, "$class": "persistent.mapping.PersistentMapping"},
        }})
    );
    assert_eq!(
        record("pm").state.unwrap(),
        json!({"data": {"when": "2020-05-06T07:08:09"}})
    );
}

#[test]
fn btrees_show_their_items() {
    assert_eq!(
        record("small").state.unwrap(),
        json!({"$items": {"a": 1, "b": 2}})
    );
    assert_eq!(record("ts").state.unwrap(), json!({"$keys": ["x", "y"]}));
    let big = record("big").state.unwrap();
    assert_eq!(big["$keys"], json!([30, 60, 90, 120, 150]));
    assert_eq!(big["$children"].as_array().unwrap().len(), 6);
    assert_eq!(big["$firstbucket"]["$ref"], json!(5));
    let bucket = record("bucket");
    assert_eq!(
        bucket.class_name.as_deref(),
        Some("BTrees.IOBTree.IOBucket")
    );
    let bucket = bucket.state.unwrap();
    assert_eq!(bucket["$items"][0], json!([0, "0"]));
    assert_eq!(bucket["$items"].as_array().unwrap().len(), 30);
    assert_eq!(bucket["$next"]["$ref"], json!(6));
}

#[test]
fn a_state_that_cannot_be_read_keeps_the_class() {
    let (_, h) = RECORDS.iter().find(|(n, _)| *n == "pm").unwrap();
    let mut data = hex(h);
    data.truncate(data.len() - 3);
    let got = decode_record(&data).unwrap();
    assert_eq!(
        got.class_name.as_deref(),
        Some("persistent.mapping.PersistentMapping")
    );
    assert!(got.state.unwrap_err().starts_with("state pickle: "));
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    for (_, h) in PICKLES.iter().chain(RECORDS) {
        let data = hex(h);
        for cut in 0..data.len() {
            let _ = decode_record(&data[..cut]);
        }
        for i in 0..data.len() {
            for flip in [0x01, 0x5a, 0xff] {
                let mut bad = data.clone();
                bad[i] ^= flip;
                let _ = decode_record(&bad);
                let _ = decode_pickle(&bad);
            }
        }
    }
}

#[test]
fn shared_values_cannot_blow_up_and_cycles_print_once() {
    // l0 = [1]; l(n+1) = [ln, ln]: 2^60 values from a few hundred bytes.
    let mut p = b"\x80\x03]q\x00K\x01a".to_vec();
    for n in 0..60u8 {
        // MARK, GET n, GET n, LIST, PUT n+1
        p.extend_from_slice(&[b'(', b'h', n, b'h', n, b'l', b'q', n + 1]);
    }
    p.push(b'.');
    let e = decode_pickle(&p).unwrap_err();
    assert!(e.contains("too large"), "{e}");
    // a = []; a.append(a)
    let cyc = b"\x80\x03]q\x00h\x00a.";
    assert_eq!(decode_pickle(cyc).unwrap(), json!([{"$cycle": true}]));
}

#[test]
fn protocol_zero_helpers() {
    use super::machine::{big_decimal, raw_unicode_escape, unquote};
    assert_eq!(unquote(br"'a\x41\101\n'").unwrap(), b"aAA\n");
    assert_eq!(raw_unicode_escape(br"h\u00e9\U0001F600").unwrap(), "hé😀");
    assert_eq!(big_decimal(&[0xff]), "-1");
    assert_eq!(
        big_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 0x01]),
        "18446744073709551616"
    );
}
