//! The SQL engine end to end over a KV database on an in-memory capacity store: the golden
//! files in `tests/slt/` (sqllogictest format), extent elimination, partitioning, and
//! imports of good and malformed files (nothing committed on failure); join planning is in
//! `joins.rs`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use tierdb_tables::import::{ImportOptions, ImportProgress, ImportSummary, import};
use tierdb_tables::provider::ScanOptions;
use tierdb_tables::{SqlEngine, TableError};

use crate::common;
use common::{engine, engine_on, rows, to_text};

struct Slt(Arc<SqlEngine>);

#[async_trait::async_trait]
impl AsyncDB for Slt {
    type Error = TableError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, TableError> {
        let mut last = DBOutput::StatementComplete(0);
        for r in self.0.sql(sql).await? {
            last = match &r.command {
                Some(tag) => DBOutput::StatementComplete(
                    tag.rsplit(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0),
                ),
                None => DBOutput::Rows {
                    types: vec![DefaultColumnType::Any; r.schema.fields().len()],
                    rows: to_text(&r.batches),
                },
            };
        }
        Ok(last)
    }

    async fn shutdown(&mut self) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_sql_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let (e, _) = engine(1 << 20).await;
        let e = Arc::new(e);
        let mut runner = sqllogictest::Runner::new(move || {
            let e = e.clone();
            async move { Ok::<_, TableError>(Slt(e)) }
        });
        if let Err(err) = runner.run_file_async(&file).await {
            panic!("{}: {err}", file.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extent_map_skips_segments_before_any_file_is_opened() {
    let (e, _) = engine(100).await;
    e.sql(
        "CREATE TABLE m (k INT NOT NULL, v BIGINT NOT NULL) ORDER BY (k);
         INSERT INTO m SELECT CAST((value * 7919) % 1000 AS INT), value FROM generate_series(0, 999)",
    )
    .await
    .unwrap();
    let def = e.tables().require("m").await.unwrap();
    let segments = e.tables().segments(&def).await.unwrap();
    assert_eq!(segments.len(), 10, "1000 rows in segments of 100");
    assert_eq!(segments.iter().map(|s| s.rows).sum::<u64>(), 1000);
    let q = "SELECT count(*), sum(v) FROM m WHERE k BETWEEN 150 AND 249";
    let before = e.scan_counters().snapshot();
    let with = rows(&e, q).await;
    let after = e.scan_counters().snapshot();
    assert_eq!(after[0] - before[0], 10, "segments considered");
    // Sorted by k: keys 150..249 live in segments 1 and 2 only.
    assert_eq!(after[1] - before[1], 8, "segments skipped");
    e.set_scan_options(ScanOptions {
        extent_elimination: false,
        ..ScanOptions::default()
    });
    let before = e.scan_counters().snapshot();
    let without = rows(&e, q).await;
    let after = e.scan_counters().snapshot();
    assert_eq!(after[1] - before[1], 0);
    assert_eq!(with, without);
    let expected: u64 = (0..1000u64)
        .filter(|v| (150..250).contains(&((v * 7919) % 1000)))
        .sum();
    assert_eq!(with, vec![vec!["100".to_string(), expected.to_string()]]);
}

/// UPDATE and DELETE rewrite only the segments holding affected rows: the others keep
/// their files, and the rewritten ones are replaced in one commit.
/// The extent map keeps TIMESTAMP and TIMESTAMPTZ minimums and maximums (microseconds), so
/// a time-range query opens only the segments of that range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extent_map_prunes_time_ranges() {
    let (e, _) = engine(100).await;
    e.sql(
        "CREATE TABLE ev (at TIMESTAMPTZ NOT NULL, local TIMESTAMP NOT NULL, v BIGINT NOT NULL) ORDER BY (at);
         INSERT INTO ev SELECT to_timestamp(value * 3600) AS a, CAST(to_timestamp(value * 3600) AS TIMESTAMP) AS b, value FROM generate_series(0, 999)",
    )
    .await
    .unwrap();
    for q in [
        "SELECT count(*) FROM ev WHERE at >= '1970-01-05 04:00:00+00' AND at < '1970-01-09 12:00:00+00'",
        "SELECT count(*) FROM ev WHERE local >= '1970-01-05 04:00:00' AND local < '1970-01-09 12:00:00'",
    ] {
        let before = e.scan_counters().snapshot();
        // Hours 100..203 of 1000, in segments of 100 hours: segments 1 and 2 only.
        assert_eq!(rows(&e, q).await, [["104"]], "{q}");
        let after = e.scan_counters().snapshot();
        assert_eq!(after[0] - before[0], 10, "segments considered: {q}");
        assert_eq!(after[1] - before[1], 8, "segments skipped: {q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_and_delete_rewrite_only_affected_segments() {
    let (e, _) = engine(100).await;
    e.sql(
        "CREATE TABLE m (k INT NOT NULL, v BIGINT NOT NULL) ORDER BY (k);
         INSERT INTO m SELECT CAST(value AS INT) AS k, value AS v FROM generate_series(0, 999)",
    )
    .await
    .unwrap();
    let def = e.tables().require("m").await.unwrap();
    let paths = |segs: Vec<tierdb_tables::catalog::SegmentMeta>| {
        segs.into_iter()
            .map(|s| s.path)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let before = paths(e.tables().segments(&def).await.unwrap());
    assert_eq!(before.len(), 10);
    // k 150..=160 lives in one segment (100..199).
    let r = e
        .sql("UPDATE m SET v = -v WHERE k BETWEEN 150 AND 160")
        .await
        .unwrap();
    assert_eq!(r[0].command.as_deref(), Some("UPDATE 11"));
    let after = paths(e.tables().segments(&def).await.unwrap());
    assert_eq!(before.difference(&after).count(), 1, "one segment replaced");
    assert_eq!(after.difference(&before).count(), 1, "by one new segment");
    let r = e
        .sql("DELETE FROM m WHERE k >= 990 OR k < 5")
        .await
        .unwrap();
    assert_eq!(r[0].command.as_deref(), Some("DELETE 15"));
    let last = paths(e.tables().segments(&def).await.unwrap());
    assert_eq!(
        after.difference(&last).count(),
        2,
        "the first and last segments replaced"
    );
    let sum: i64 = (0..1000i64)
        .filter(|k| (5..990).contains(k))
        .map(|k| if (150..=160).contains(&k) { -k } else { k })
        .sum();
    assert_eq!(
        rows(&e, "SELECT count(*), sum(v) FROM m").await,
        vec![vec!["985".to_string(), sum.to_string()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_segment_mixes_two_partition_values() {
    let (e, _) = engine(1000).await;
    e.sql(
        "CREATE TABLE p (region VARCHAR NOT NULL, k INT NOT NULL) PARTITION BY region ORDER BY (k);
         INSERT INTO p SELECT CASE value % 3 WHEN 0 THEN 'ASIA' WHEN 1 THEN 'EUROPE' ELSE 'AFRICA' END, CAST(value AS INT) FROM generate_series(1, 300)",
    )
    .await
    .unwrap();
    let def = e.tables().require("p").await.unwrap();
    assert_eq!(def.partition_key.as_deref(), Some("region"));
    let segments = e.tables().segments(&def).await.unwrap();
    assert_eq!(segments.len(), 3);
    for s in &segments {
        assert_eq!(s.columns[0].min, s.columns[0].max, "{s:?}");
        assert_eq!(s.rows, 100);
    }
    let before = e.scan_counters().snapshot();
    assert_eq!(
        rows(&e, "SELECT count(*) FROM p WHERE region = 'EUROPE'").await,
        [["100"]]
    );
    let after = e.scan_counters().snapshot();
    assert_eq!(after[1] - before[1], 2);
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn import_options(dir: &Path, max_rejects: u64) -> ImportOptions {
    ImportOptions {
        format: None,
        delimiter: None,
        header: None,
        max_rejects,
        reject_file: dir.join("rejects.txt"),
        threads: 2,
        transaction: None,
        time_zone: None,
    }
}

/// Imports `files` into `table` with the default options and a cap of `max_rejects`.
async fn import_into(
    e: &SqlEngine,
    table: &str,
    files: &[PathBuf],
    dir: &Path,
    max_rejects: u64,
) -> Result<ImportSummary, TableError> {
    import(
        e.tables().clone(),
        table,
        files,
        &import_options(dir, max_rejects),
        e.context().task_ctx(),
        Arc::new(ImportProgress::default()),
    )
    .await
}

async fn segment_files(capacity: &InMemory) -> usize {
    let all: Vec<_> = capacity.list(None).try_collect().await.unwrap();
    all.iter()
        .filter(|m| {
            m.location.as_ref().ends_with(".parquet")
                && !m.location.as_ref().contains("/_delta_log/")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_sort_on_ingest_and_cut_segments() {
    let (e, capacity) = engine(1000).await;
    e.sql("CREATE TABLE s (k INT NOT NULL, name VARCHAR NOT NULL, d DATE, amount DECIMAL(12,2)) ORDER BY (k)")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut tbl = String::new();
    for i in 0..2500u32 {
        let k = (i * 7919) % 2500;
        tbl.push_str(&format!(
            "{k}|n{k}|2024-01-{:02}|{}.{:02}|\n",
            k % 28 + 1,
            k,
            k % 100
        ));
    }
    let a = write(dir.path(), "s.tbl", tbl.as_bytes());
    let csv = write(
        dir.path(),
        "more.csv",
        b"k,name,d,amount\n5000,\"quoted, name\",,1.5\n",
    );
    let progress = Arc::new(ImportProgress::default());
    let summary = import(
        e.tables().clone(),
        "s",
        &[a, csv],
        &import_options(dir.path(), 0),
        e.context().task_ctx(),
        progress.clone(),
    )
    .await
    .unwrap();
    assert_eq!(summary.rows, 2501);
    assert_eq!(summary.rejected, 0);
    assert_eq!(summary.segments, 3);
    assert_eq!(progress.rows_parsed.load(Ordering::Relaxed), 2501);
    assert_eq!(segment_files(&capacity).await, 3);
    // Sorted on ingest: each segment covers its own key range.
    let def = e.tables().require("s").await.unwrap();
    let mut segs = e.tables().segments(&def).await.unwrap();
    segs.sort_by_key(|s| format!("{:?}", s.columns[0].min));
    let ranges: Vec<_> = segs
        .iter()
        .map(|s| (s.columns[0].min.clone(), s.columns[0].max.clone(), s.rows))
        .collect();
    assert_eq!(ranges.len(), 3);
    assert_eq!(
        rows(
            &e,
            "SELECT k, name, d, amount FROM s WHERE k IN (0, 2499, 5000) ORDER BY k"
        )
        .await,
        [
            ["0", "n0", "2024-01-01", "0.00"],
            ["2499", "n2499", "2024-01-08", "2499.99"],
            ["5000", "quoted, name", "NULL", "1.50"],
        ]
    );
}

/// Each malformed input fails with the line and the reason, and leaves no row and no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_commits_nothing() {
    let (e, capacity) = engine(1000).await;
    e.sql("CREATE TABLE s (k INT NOT NULL, name VARCHAR NOT NULL, d DATE)")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good: String = (0..5000)
        .map(|i| format!("{i}|n{i}|2024-02-03|\n"))
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "columns.tbl",
            [good.as_bytes(), b"7|x|\n"].concat(),
            "5001: 2 fields, the table has 3 columns",
        ),
        (
            "number.tbl",
            [good.as_bytes(), b"12x|x|2024-01-01|\n"].concat(),
            "5001: column k: \"12x\" is not an INT",
        ),
        (
            "date.tbl",
            [good.as_bytes(), b"1|x|2024-13-01|\n"].concat(),
            "5001: column d: \"2024-13-01\" is not a date",
        ),
        (
            "utf8.tbl",
            [good.as_bytes(), b"1|\xff\xfe|2024-01-01|\n"].concat(),
            "5001: column name: invalid UTF-8",
        ),
        (
            "truncated.tbl",
            [good.as_bytes(), b"99|trunc"].concat(),
            "5001: 2 fields, the table has 3 columns",
        ),
        (
            "notnull.tbl",
            [good.as_bytes(), b"|x|2024-01-01|\n"].concat(),
            "5001: column k: empty value for a NOT NULL column",
        ),
    ];
    for (name, bytes, want) in cases {
        let f = write(dir.path(), name, &bytes);
        let err = import_into(&e, "s", &[f], dir.path(), 0)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{name}: {err}");
        assert!(err.contains("nothing was imported"), "{name}: {err}");
        assert_eq!(rows(&e, "SELECT count(*) FROM s").await, [["0"]], "{name}");
        assert_eq!(
            segment_files(&capacity).await,
            0,
            "{name}: no segment file left"
        );
    }
    // A Parquet file that is not one.
    let f = write(dir.path(), "bad.parquet", b"PAR1 this is not parquet");
    let err = import_into(&e, "s", &[f], dir.path(), 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a readable Parquet file"), "{err}");
    // Unknown table.
    let f = write(dir.path(), "ok.tbl", b"1|a|2024-01-01|\n");
    let err = import_into(&e, "nosuch", &[f], dir.path(), 0)
        .await
        .unwrap_err();
    assert!(matches!(err, TableError::NoTable(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_up_to_the_cap_go_to_the_reject_file() {
    let (e, _) = engine(1000).await;
    e.sql("CREATE TABLE s (k INT NOT NULL, name VARCHAR NOT NULL)")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "s.tsv", b"k\tname\n1\ta\nx\tb\n3\tc\n4\n5\te\n");
    let opts = import_options(dir.path(), 2);
    let summary = import_into(&e, "s", std::slice::from_ref(&f), dir.path(), 2)
        .await
        .unwrap();
    assert_eq!((summary.rows, summary.rejected), (3, 2));
    let rejects = std::fs::read_to_string(&opts.reject_file).unwrap();
    assert!(
        rejects.contains("s.tsv:3: column k: \"x\" is not an INT"),
        "{rejects}"
    );
    assert!(
        rejects.contains("s.tsv:5: 1 fields, the table has 2 columns"),
        "{rejects}"
    );
    assert_eq!(rows(&e, "SELECT sum(k) FROM s").await, [["9"]]);
    // One more reject than allowed: nothing of the second import is committed.
    let err = import_into(&e, "s", &[f], dir.path(), 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than --max-rejects 1"), "{err}");
    assert_eq!(rows(&e, "SELECT count(*) FROM s").await, [["3"]]);
}

/// An import that stores no row is an error (the CLI exits non-zero), and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_of_no_rows_fails() {
    let (e, capacity) = engine(1000).await;
    e.sql("CREATE TABLE s (k INT NOT NULL)").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.tbl", b"x|\ny|\n");
    let err = import_into(&e, "s", &[bad], dir.path(), 10)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("all 2 rows were rejected") && err.contains("nothing was imported"),
        "{err}"
    );
    let empty = write(dir.path(), "empty.tbl", b"");
    let err = import_into(&e, "s", &[empty], dir.path(), 10)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("the input holds no rows"), "{err}");
    assert_eq!(segment_files(&capacity).await, 0);
}

/// Digits past a DECIMAL's scale round half away from zero, as PostgreSQL's numeric does and
/// as INSERT does for values that are exact in binary; an import never truncates them. (An
/// INSERT of 1.005 goes through a Float64 literal, 1.00499…, so it is not compared here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_decimals_round_like_insert() {
    let (e, _) = engine(1000).await;
    e.sql("CREATE TABLE d (k INT NOT NULL, a DECIMAL(12,2))")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "d.tbl",
        b"1|0.129|\n2|1.005|\n3|-1.005|\n4|1.004|\n",
    );
    import_into(&e, "d", &[f], dir.path(), 0).await.unwrap();
    e.sql("INSERT INTO d VALUES (11, 0.129), (14, 1.004)")
        .await
        .unwrap();
    assert_eq!(
        rows(&e, "SELECT k, a FROM d ORDER BY k").await,
        [
            ["1", "0.13"],
            ["2", "1.01"],
            ["3", "-1.01"],
            ["4", "1.00"],
            ["11", "0.13"],
            ["14", "1.00"]
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_survive_a_reopen() {
    let capacity = Arc::new(InMemory::new());
    {
        let e = engine_on(capacity.clone(), 1000).await;
        e.sql("CREATE TABLE r (k INT NOT NULL) ORDER BY (k); INSERT INTO r VALUES (2), (1)")
            .await
            .unwrap();
        e.tables().store().head(&"x".into()).await.ok();
    }
    let e = engine_on(capacity, 1000).await;
    assert_eq!(rows(&e, "SELECT k FROM r").await, [["1"], ["2"]]);
}

/// A query string of INSERT … VALUES statements is one implicit transaction, as in
/// PostgreSQL: a failing statement commits none of them and leaves no segment behind;
/// INSERT OVERWRITE later in the string replaces the rows of earlier ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_string_of_inserts_is_one_transaction() {
    let (e, capacity) = engine(1000).await;
    e.sql("CREATE TABLE a (x BIGINT NOT NULL); CREATE TABLE b (y INT NOT NULL)")
        .await
        .unwrap();
    e.sql("INSERT INTO a VALUES (1)").await.unwrap();

    let statements = e
        .parse("INSERT INTO a VALUES (2); INSERT INTO b VALUES (20); INSERT INTO b VALUES ('not a number')")
        .unwrap();
    let (done, error) = e.run(statements).await;
    assert_eq!(done.len(), 2, "the statements before the failing one ran");
    assert!(error.is_some(), "the third statement fails");
    assert_eq!(
        rows(&e, "SELECT x FROM a ORDER BY x").await,
        vec![vec!["1"]]
    );
    assert!(rows(&e, "SELECT y FROM b").await.is_empty());
    // The failed transaction's segments were deleted (only catalog commits may remain).
    let segment_files = |c: Arc<InMemory>| async move {
        c.list(None)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .into_iter()
            .filter(|m| {
                m.location.as_ref().ends_with(".parquet")
                    && !m.location.as_ref().contains("/_delta_log/")
            })
            .count()
    };
    assert_eq!(
        segment_files(capacity.clone()).await,
        1,
        "one segment: the row 1"
    );

    e.sql(
        "INSERT INTO a VALUES (3); INSERT INTO b VALUES (30), (31); INSERT OVERWRITE a VALUES (4)",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&e, "SELECT x FROM a ORDER BY x").await,
        vec![vec!["4"]]
    );
    assert_eq!(
        rows(&e, "SELECT y FROM b ORDER BY y").await,
        vec![vec!["30"], vec!["31"]]
    );
}

/// Errors carry a kind and a SQLSTATE chosen from their structure, not their message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_kinds_and_sqlstates() {
    use tierdb_tables::error::ErrorKind;
    let (e, _) = engine(1000).await;
    e.sql("CREATE TABLE t (x BIGINT NOT NULL)").await.unwrap();
    let cases = [
        ("SELECT * FROM nope", ErrorKind::NotFound, "42P01"),
        ("SELECT y FROM t", ErrorKind::Input, "42703"),
        ("SELEC 1", ErrorKind::Input, "42601"),
        ("CREATE TABLE t (x INT)", ErrorKind::Conflict, "42P07"),
        (
            "INSERT INTO t VALUES ('not a number')",
            ErrorKind::Input,
            "22P02",
        ),
    ];
    for (sql, kind, code) in cases {
        let err = match e.sql(sql).await {
            Ok(_) => panic!("{sql} succeeded"),
            Err(err) => err,
        };
        assert_eq!((err.kind(), err.sqlstate()), (kind, code), "{sql}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_row_inserts_are_merged_into_few_segments_and_no_row_changes() {
    let (e, capacity) = engine(1000).await;
    e.sql("CREATE TABLE s (k INT NOT NULL, v VARCHAR) ORDER BY (k)")
        .await
        .unwrap();
    // Inserted out of order, one statement (one segment) each.
    for i in 0..40 {
        let k = (i * 17) % 40;
        e.sql(&format!("INSERT INTO s VALUES ({k}, 'v{k}')"))
            .await
            .unwrap();
    }
    e.tables().settle().await;
    let def = e.tables().require("s").await.unwrap();
    let segments = e.tables().segments(&def).await.unwrap();
    assert!(
        segments.len() < 8,
        "{} segments after 40 one-row inserts",
        segments.len()
    );
    assert!(e.tables().segments_merged() >= 8);
    assert_eq!(segments.iter().map(|s| s.rows).sum::<u64>(), 40);
    let expected: Vec<Vec<String>> = (0..40)
        .map(|k| vec![k.to_string(), format!("v{k}")])
        .collect();
    assert_eq!(rows(&e, "SELECT k, v FROM s ORDER BY k").await, expected);
    // The replaced files are retired, and deleted once old enough (here: at once).
    let files = || async {
        use futures::TryStreamExt;
        let listed: Vec<_> =
            object_store::ObjectStore::list(capacity.as_ref(), Some(&"db/tables".into()))
                .try_collect()
                .await
                .unwrap();
        listed
            .iter()
            .filter(|m| {
                m.location.as_ref().ends_with(".parquet")
                    && !m.location.as_ref().contains("/_delta_log/")
            })
            .count()
    };
    assert!(files().await > segments.len());
    assert!(
        e.tables()
            .vacuum_retired(std::time::Duration::ZERO)
            .await
            .unwrap()
            > 0
    );
    assert_eq!(files().await, segments.len());
    assert_eq!(rows(&e, "SELECT k, v FROM s ORDER BY k").await, expected);
}

/// pgbench 15 INSERTs its tellers one by one, then adds their primary key: a merge of
/// those segments running meanwhile made ADD PRIMARY KEY fail with 40001 (seen in CI).
/// The conversion now waits out a running merge and keeps new ones from committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_primary_key_right_after_one_row_inserts_is_not_refused_by_a_merge() {
    let (e, _) = engine(1000).await;
    for round in 0..10 {
        let t = format!("tellers{round}");
        e.sql(&format!(
            "CREATE TABLE {t} (tid INT NOT NULL, tbalance INT)"
        ))
        .await
        .unwrap();
        // The eighth one-row segment starts a merge (MergePolicy::min_small).
        for i in 1..=8 {
            e.sql(&format!("INSERT INTO {t} VALUES ({i}, 0)"))
                .await
                .unwrap();
        }
        e.sql(&format!("ALTER TABLE {t} ADD PRIMARY KEY (tid)"))
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(
            rows(&e, &format!("SELECT count(*), sum(tid) FROM {t}")).await,
            vec![vec!["8".to_string(), "36".to_string()]]
        );
    }
    e.tables().settle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_waits_for_a_transaction_that_rewrites_its_segments() {
    let (e, _) = engine(1000).await;
    let s = e.session();
    s.sql("CREATE TABLE s (k INT NOT NULL)").await.unwrap();
    s.sql("INSERT INTO s VALUES (0)").await.unwrap();
    s.sql("BEGIN").await.unwrap();
    // The transaction replaces the first segment; merges must not take it away.
    s.sql("UPDATE s SET k = 100 WHERE k = 0").await.unwrap();
    let other = e.new_session();
    for i in 1..20 {
        other
            .sql(&format!("INSERT INTO s VALUES ({i})"))
            .await
            .unwrap();
    }
    e.tables().settle().await;
    s.sql("COMMIT").await.unwrap();
    assert_eq!(
        rows(&e, "SELECT count(*), sum(k), max(k) FROM s").await,
        vec![vec![
            "20".to_string(),
            (100 + (1..20).sum::<i64>()).to_string(),
            "100".to_string()
        ]]
    );
    // Now nothing holds them: the next commit's merge takes them all.
    e.sql("INSERT INTO s VALUES (200)").await.unwrap();
    e.tables().settle().await;
    let def = e.tables().require("s").await.unwrap();
    assert!(e.tables().segments(&def).await.unwrap().len() < 8);
}

/// EXPLAIN of UPDATE and DELETE shows the query that names their rows and which store it
/// reads; a write of one row by its primary key says it takes the short path.
#[tokio::test]
async fn explain_shows_which_path_an_update_or_delete_takes() {
    let (e, _) = engine(100).await;
    e.sql(
        "CREATE TABLE r (id INT NOT NULL, k INT NOT NULL, PRIMARY KEY (id));
         CREATE TABLE c (id INT NOT NULL, k INT NOT NULL)",
    )
    .await
    .unwrap();
    let text = |sql: &'static str| {
        let e = &e;
        async move {
            rows(e, sql)
                .await
                .into_iter()
                .map(|r| r.join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    for sql in [
        "EXPLAIN UPDATE r SET k = k + 1 WHERE id = 1",
        "EXPLAIN DELETE FROM r AS x WHERE x.id = 7",
    ] {
        let t = text(sql).await;
        assert!(
            t.contains("short path: one row by its primary key"),
            "{sql}:\n{t}"
        );
        assert!(t.contains("RowLookup"), "{sql}:\n{t}");
    }
    let t = text("EXPLAIN UPDATE r SET k = 0 WHERE id > 1").await;
    assert!(t.contains("(row store: KV engine), the rows"), "{t}");
    assert!(t.contains("RowScanExec"), "{t}");
    assert!(!t.contains("short path"), "{t}");
    let t = text("EXPLAIN DELETE FROM c WHERE id = 1").await;
    assert!(t.contains("(columnar segments)"), "{t}");
    let r = e.sql("EXPLAIN ANALYZE DELETE FROM r WHERE id = 1").await;
    assert!(r.is_err(), "EXPLAIN ANALYZE would change rows");
}
