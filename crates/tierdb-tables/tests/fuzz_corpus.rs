//! Proves that catalog values never panic the engine when damaged: valid encodings of a
//! table, a segment's extent map and a retired file, the kept fuzz corpus
//! (`fuzz/corpus/catalog`, grown by `scripts/fuzz.sh`) and thousands of deterministic
//! mutations of them are decoded (and a decoded table validated, its schema built). A
//! panic fails the test; `TableError::Damaged` is the right answer.

use tierdb_testkit::mutate::{corpus, mutations};

fn seeds() -> Vec<Vec<u8>> {
    use tierdb_tables::catalog::{
        ColumnDef, ColumnStats, ColumnType, FORMAT_VERSION, Retired, SegmentMeta, StatValue,
        TableDef,
    };
    let table = TableDef {
        id: 7,
        name: "t".into(),
        columns: vec![
            ColumnDef {
                name: "a".into(),
                ty: ColumnType::Int32,
                nullable: false,
            },
            ColumnDef {
                name: "d".into(),
                ty: ColumnType::Decimal {
                    precision: 10,
                    scale: 2,
                },
                nullable: true,
            },
        ],
        sort_key: vec!["a".into()],
        partition_key: Some("a".into()),
        created_ms: 1,
        dropped: Vec::new(),
        primary_key: Vec::new(),
        defaults: Vec::new(),
        indexes: Vec::new(),
        comments: Default::default(),
        missing: Vec::new(),
    };
    let stats = |min, max| ColumnStats {
        min: Some(min),
        max: Some(max),
        nulls: 1,
    };
    let segment = SegmentMeta {
        id: 3,
        path: "db/tables/7/x.parquet".into(),
        rows: 10,
        bytes: 100,
        columns: vec![
            stats(StatValue::Int(1), StatValue::Int(9)),
            stats(StatValue::Str("1.50".into()), StatValue::Float(2.5)),
        ],
        checksums: tierdb_tables::checksum::BlockSums::of(b"0123456789"),
    };
    let retired = Retired {
        path: "db/tables/7/x.parquet".into(),
        bytes: 100,
        retired_ms: 5,
    };
    let json = |v: serde_json::Value| [&[FORMAT_VERSION][..], v.to_string().as_bytes()].concat();
    let mut out = vec![
        json(serde_json::to_value(&table).expect("a table serializes")),
        json(serde_json::to_value(&segment).expect("a segment serializes")),
        json(serde_json::to_value(&retired).expect("a retired file serializes")),
    ];
    out.extend(tierdb_testkit::mutate::seeds("catalog"));
    out
}

#[test]
fn catalog_decoding_survives_damaged_values() {
    for seed in seeds() {
        tierdb_tables::fuzzing::catalog(&seed);
        for m in mutations(&seed, 3000, 0xca) {
            tierdb_tables::fuzzing::catalog(&m);
        }
    }
    for input in corpus("catalog") {
        tierdb_tables::fuzzing::catalog(&input);
    }
}

/// A row table's values (row format 1): valid rows of every type, their mutations and the
/// kept corpus (`fuzz/corpus/row_value`) decode or are refused as damaged, never a panic.
#[test]
fn row_values_survive_damage() {
    let seeds = tierdb_tables::fuzzing::row_value_seeds();
    assert_eq!(seeds.len(), 2, "both seed rows encode");
    // TIERDB_WRITE_FUZZ_SEEDS=1 writes them where scripts/fuzz.sh starts libFuzzer from.
    if std::env::var_os("TIERDB_WRITE_FUZZ_SEEDS").is_some() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/row_value");
        std::fs::create_dir_all(&dir).expect("seed folder");
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("row{i}")), s).expect("seed written");
        }
    }
    for seed in seeds
        .iter()
        .cloned()
        .chain(tierdb_testkit::mutate::seeds("row_value"))
    {
        tierdb_tables::fuzzing::row_value(&seed);
        for m in mutations(&seed, 3000, 0x40) {
            tierdb_tables::fuzzing::row_value(&m);
        }
    }
    for input in corpus("row_value") {
        tierdb_tables::fuzzing::row_value(&input);
    }
}
