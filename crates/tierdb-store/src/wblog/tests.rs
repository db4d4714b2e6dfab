//! Write-back log tests: replay, damage handling, clean marks, backpressure and grouping.
//! The real-process crash test (SIGKILL) is in `tierdb-cli/tests/cli_writeback_crash.rs`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::recovery::{list_segments, segment_path};
use super::*;
use crate::fault::{FaultConfig, FaultStore};

fn options() -> LogOptions {
    LogOptions {
        segment_bytes_max: 1 << 20,
        dirty_bytes_max: 64 << 20,
        dirty_wait_max: Duration::from_secs(30),
        upload_concurrency: 4,
        upload_attempts_max: 3,
    }
}

fn noop() -> OnUploaded {
    Arc::new(|_| {})
}

/// A capacity store that refuses every request until healed.
fn broken(inner: Arc<dyn ObjectStore>) -> Arc<FaultStore> {
    Arc::new(FaultStore::new(
        inner,
        FaultConfig {
            error_before: 1.0,
            ..Default::default()
        },
        1,
    ))
}

async fn read_all(log: &WbLog, path: &Path) -> Option<Bytes> {
    let entry = log.lookup(path)?;
    Some(log.read(&entry, 0..entry.payload_len).await.unwrap())
}

#[tokio::test]
async fn acknowledged_writes_survive_reopen_and_are_uploaded() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = broken(capacity.clone());
    let log = WbLog::open(dir.path(), options(), faulty.clone(), noop()).unwrap();
    for i in 0..20u32 {
        log.put(
            &Path::from(format!("k{i}")),
            vec![Bytes::from(vec![i as u8; 1000])],
        )
        .await
        .unwrap();
    }
    log.delete(&Path::from("k3")).await.unwrap();
    assert_eq!(
        read_all(&log, &Path::from("k5")).await.unwrap(),
        vec![5u8; 1000]
    );
    assert_eq!(log.stats().pending_objects, 20);
    // Simulate a crash: drop without closing (uploads never happened).
    drop(log);

    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    assert_eq!(
        log.lookup(&Path::from("k3")).unwrap().kind,
        RecordKind::Delete
    );
    log.barrier().await.unwrap();
    for i in 0..20u32 {
        let got = capacity.get(&Path::from(format!("k{i}"))).await;
        if i == 3 {
            assert!(matches!(got, Err(object_store::Error::NotFound { .. })));
        } else {
            assert_eq!(got.unwrap().bytes().await.unwrap(), vec![i as u8; 1000]);
        }
    }
    assert_eq!(log.stats().dirty_bytes, 0);
    assert_eq!(log.stats().pending_objects, 0);
    log.close().await.unwrap();
}

#[tokio::test]
async fn torn_tail_is_cut_and_earlier_records_kept() {
    let dir = tempfile::tempdir().unwrap();
    let capacity = broken(Arc::new(InMemory::new()));
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    log.put(&Path::from("a"), vec![Bytes::from_static(b"first")])
        .await
        .unwrap();
    log.put(&Path::from("b"), vec![Bytes::from_static(b"second")])
        .await
        .unwrap();
    drop(log);
    // Half a record at the end: what a crash during an unacknowledged append leaves.
    let seg = segment_path(
        dir.path(),
        *list_segments(dir.path()).unwrap().last().unwrap(),
    );
    let before = std::fs::metadata(&seg).unwrap().len();
    let partial = format_v1::encode_head(
        RecordKind::Put,
        99,
        0,
        "c",
        &[Bytes::from_static(b"never acked")],
    );
    std::fs::write(
        &seg,
        [std::fs::read(&seg).unwrap(), partial[..30].to_vec()].concat(),
    )
    .unwrap();

    let log = WbLog::open(dir.path(), options(), capacity, noop()).unwrap();
    assert_eq!(
        read_all(&log, &Path::from("a")).await.unwrap(),
        Bytes::from_static(b"first")
    );
    assert_eq!(
        read_all(&log, &Path::from("b")).await.unwrap(),
        Bytes::from_static(b"second")
    );
    assert!(log.lookup(&Path::from("c")).is_none());
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        before,
        "the torn tail is cut off"
    );
    // New appends after the cut work and replay again.
    log.put(&Path::from("d"), vec![Bytes::from_static(b"after")])
        .await
        .unwrap();
    drop(log);
    let log = WbLog::open(
        dir.path(),
        options(),
        broken(Arc::new(InMemory::new())),
        noop(),
    )
    .unwrap();
    assert_eq!(
        read_all(&log, &Path::from("d")).await.unwrap(),
        Bytes::from_static(b"after")
    );
}

/// The operator's bad day of issue 10: acknowledged records sit in the newest (and only)
/// segment because the capacity store is down, and one payload byte in the middle flips.
/// Opening refuses and changes nothing; salvage keeps every other record, moves the damaged
/// file aside and reports the one range it dropped.
#[tokio::test]
async fn a_flip_in_the_newest_segment_with_records_after_it_refuses_to_open_and_salvages() {
    let dir = tempfile::tempdir().unwrap();
    let wblog = dir.path().join("wblog");
    let capacity = broken(Arc::new(InMemory::new()));
    let log = WbLog::open(&wblog, options(), capacity.clone(), noop()).unwrap();
    for i in 0..40u8 {
        log.put(
            &Path::from(format!("p{i:02}")),
            vec![Bytes::from(vec![i; 100])],
        )
        .await
        .unwrap();
    }
    drop(log);
    let segments = list_segments(&wblog).unwrap();
    assert_eq!(segments.len(), 1);
    let seg = segment_path(&wblog, segments[0]);
    let mut bytes = std::fs::read(&seg).unwrap();
    let record = bytes.len() / 40;
    bytes[20 * record + record - 10] ^= 0x01; // a payload byte of record 20 (p20)
    std::fs::write(&seg, &bytes).unwrap();

    let err = WbLog::open(&wblog, options(), capacity.clone(), noop()).unwrap_err();
    assert!(matches!(err, Error::LogCorrupt { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("CRC mismatch") && text.contains("not a torn tail"),
        "{text}"
    );
    assert!(
        text.contains("salvage-log"),
        "points to the salvage command: {text}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing is rewritten");

    let report = recovery::salvage(&wblog).unwrap();
    assert_eq!(report.records_kept, 39);
    assert_eq!(report.segments_rewritten, 1);
    assert_eq!(report.dropped.len(), 1, "{report:?}");
    assert_eq!(report.dropped[0].offset, 20 * record as u64);
    assert_eq!(report.dropped[0].bytes, record as u64);
    let aside = report
        .damaged_dir
        .clone()
        .unwrap()
        .join(seg.file_name().unwrap());
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        bytes,
        "the original is kept aside"
    );

    let log = WbLog::open(&wblog, options(), capacity, noop()).unwrap();
    for i in 0..40u8 {
        let got = read_all(&log, &Path::from(format!("p{i:02}"))).await;
        if i == 20 {
            assert!(got.is_none());
        } else {
            assert_eq!(got.unwrap(), Bytes::from(vec![i; 100]), "p{i:02}");
        }
    }
}

/// A flip in the last record, with nothing valid after it, is indistinguishable from a torn
/// append: that record was never acknowledged, so it is cut and the rest opens.
#[tokio::test]
async fn a_bad_last_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let capacity = broken(Arc::new(InMemory::new()));
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    for i in 0..3u8 {
        log.put(
            &Path::from(format!("p{i}")),
            vec![Bytes::from(vec![i; 100])],
        )
        .await
        .unwrap();
    }
    drop(log);
    let seg = segment_path(dir.path(), list_segments(dir.path()).unwrap()[0]);
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x80;
    std::fs::write(&seg, &bytes).unwrap();
    let log = WbLog::open(dir.path(), options(), capacity, noop()).unwrap();
    assert!(read_all(&log, &Path::from("p1")).await.is_some());
    assert!(log.lookup(&Path::from("p2")).is_none());
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), (n / 3 * 2) as u64);
}

#[tokio::test]
async fn damage_before_the_newest_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let capacity = broken(Arc::new(InMemory::new()));
    let small = LogOptions {
        segment_bytes_max: 100,
        ..options()
    };
    let log = WbLog::open(dir.path(), small.clone(), capacity.clone(), noop()).unwrap();
    for i in 0..5 {
        log.put(
            &Path::from(format!("p{i}")),
            vec![Bytes::from(vec![1u8; 200])],
        )
        .await
        .unwrap();
    }
    drop(log);
    let segments = list_segments(dir.path()).unwrap();
    assert!(segments.len() >= 3, "small segments roll: {segments:?}");
    let victim = segment_path(dir.path(), segments[0]);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[100] ^= 0xff; // flip a payload byte of an acknowledged record
    std::fs::write(&victim, &bytes).unwrap();
    let err = WbLog::open(dir.path(), small, capacity, noop()).unwrap_err();
    assert!(matches!(err, Error::LogCorrupt { .. }), "{err}");
    assert!(err.to_string().contains("CRC mismatch"), "{err}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        bytes,
        "nothing is rewritten"
    );
}

#[tokio::test]
async fn clean_mark_keeps_replay_from_undoing_a_direct_write() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    let path = Path::from("manifest");
    log.put(&path, vec![Bytes::from_static(b"old")])
        .await
        .unwrap();
    log.barrier().await.unwrap();
    assert!(!log.needs_barrier());
    // A direct write after the barrier (what a conditional put does).
    capacity
        .put(&path, PutPayload::from_static(b"new"))
        .await
        .unwrap();
    drop(log); // crash: the segment holding "old" is still on disk (it is the active one)
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    assert!(
        log.lookup(&path).is_none(),
        "the uploaded record is not replayed"
    );
    log.barrier().await.unwrap();
    assert_eq!(
        capacity.get(&path).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"new")
    );
}

#[tokio::test]
async fn on_a_full_device_a_barrier_deletes_uploaded_segments_instead_of_a_clean_mark() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    let path = Path::from("manifest");
    log.put(&path, vec![Bytes::from_static(b"old")])
        .await
        .unwrap();
    // The device fills up: the next append fails as ENOSPC, and so would a clean mark.
    log.simulate_full_device(true);
    let err = log
        .put(&Path::from("other"), vec![Bytes::from_static(b"x")])
        .await
        .unwrap_err();
    assert!(err.log_is_full(), "{err}");
    // The tiered store's fallback: a barrier, then a direct write. The barrier must not
    // fail for want of room for its clean mark.
    log.barrier().await.unwrap();
    assert!(!log.needs_barrier());
    capacity
        .put(&path, PutPayload::from_static(b"new"))
        .await
        .unwrap();
    assert_eq!(
        list_segments(dir.path()).unwrap().len(),
        1,
        "only the new, empty segment is left"
    );
    drop(log); // crash: no clean mark was written, but no segment holds "old" any more
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    assert!(log.lookup(&path).is_none(), "nothing to replay");
    log.barrier().await.unwrap();
    assert_eq!(
        capacity.get(&path).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"new")
    );
}

#[tokio::test]
async fn on_a_full_device_a_barrier_that_cannot_stand_in_for_a_clean_mark_fails() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let capacity = broken(inner.clone());
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    log.put(&Path::from("a"), vec![Bytes::from_static(b"1")])
        .await
        .unwrap();
    log.simulate_full_device(true);
    // Uploads fail: the barrier reports that, never a success it cannot stand behind.
    assert!(log.barrier().await.is_err());
    capacity.set_config(FaultConfig::default());
    log.barrier().await.unwrap();
    log.simulate_full_device(false);
    log.close().await.unwrap();
    assert_eq!(
        inner
            .get(&Path::from("a"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
        Bytes::from_static(b"1")
    );
}

#[tokio::test]
async fn writers_wait_at_the_dirty_cap_and_flush_reports_failing_uploads() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let capacity = broken(inner.clone());
    let capped = LogOptions {
        dirty_bytes_max: 3000,
        ..options()
    };
    let log = WbLog::open(dir.path(), capped, capacity.clone(), noop()).unwrap();
    assert!(log.accepts(1500) && !log.accepts(1501));
    log.put(&Path::from("a"), vec![Bytes::from(vec![0u8; 1500])])
        .await
        .unwrap();
    log.put(&Path::from("b"), vec![Bytes::from(vec![0u8; 1500])])
        .await
        .unwrap();
    // The cap is reached: a third writer waits while uploads fail.
    let c = Path::from("c");
    let third = log.put(&c, vec![Bytes::from(vec![0u8; 1000])]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), third)
            .await
            .is_err(),
        "writer must wait"
    );
    let err = log.barrier().await.unwrap_err();
    assert!(matches!(err, Error::UploadFailing { .. }), "{err}");
    assert!(log.stats().upload_errors >= 3);
    // Heal: a barrier retries the backed-off uploads at once and does not report the
    // failure from before the heal; the writer proceeds, nothing is lost.
    capacity.set_config(FaultConfig::default());
    tokio::time::timeout(Duration::from_secs(5), log.barrier())
        .await
        .expect("the barrier retries at once instead of waiting out the backoff")
        .unwrap();
    log.put(&Path::from("c"), vec![Bytes::from(vec![2u8; 1000])])
        .await
        .unwrap();
    log.barrier().await.unwrap();
    for p in ["a", "b", "c"] {
        inner.head(&Path::from(p)).await.unwrap();
    }
    assert_eq!(log.stats().dirty_bytes, 0);
    log.close().await.unwrap();
}

/// A full log never makes a writer wait without bound: past `dirty_wait_max` the append
/// fails with WriteBackFull (the tiered store then writes through), and nothing logged is lost.
#[tokio::test]
async fn a_writer_waits_at_most_dirty_wait_max_at_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let capacity = broken(inner.clone());
    let capped = LogOptions {
        dirty_bytes_max: 3000,
        dirty_wait_max: Duration::from_millis(200),
        ..options()
    };
    let log = WbLog::open(dir.path(), capped, capacity.clone(), noop()).unwrap();
    for p in ["a", "b"] {
        log.put(&Path::from(p), vec![Bytes::from(vec![1u8; 1500])])
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        log.put(&Path::from("c"), vec![Bytes::from(vec![2u8; 1000])]),
    )
    .await
    .expect("bounded")
    .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(matches!(err, Error::WriteBackFull { .. }), "{err}");
    assert!(err.log_is_full() && err.kind() == crate::ErrorKind::Retry);
    assert!(log.lookup(&Path::from("c")).is_none(), "nothing was logged");
    capacity.set_config(FaultConfig::default());
    log.barrier().await.unwrap();
    for p in ["a", "b"] {
        inner.head(&Path::from(p)).await.unwrap();
    }
    log.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_fsyncs_and_newest_version_wins() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    let mut tasks = Vec::new();
    for w in 0..16u32 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for v in 0..25u32 {
                log.put(
                    &Path::from(format!("w{w}")),
                    vec![Bytes::from(format!("{w}:{v}"))],
                )
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = log.stats();
    assert!(
        stats.appends >= 400,
        "400 puts plus any clean marks: {stats:?}"
    );
    assert!(
        stats.group_commits < stats.appends,
        "group commit shares fsyncs: {stats:?}"
    );
    log.barrier().await.unwrap();
    for w in 0..16u32 {
        let got = capacity
            .get(&Path::from(format!("w{w}")))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(got, Bytes::from(format!("{w}:24")));
    }
    log.close().await.unwrap();
    // Everything uploaded and marked clean: reopening replays nothing.
    let log = WbLog::open(dir.path(), options(), capacity, noop()).unwrap();
    assert_eq!(log.stats().pending_objects, 0);
    assert!(!log.needs_barrier());
}

fn wal(i: u32) -> Path {
    Path::from(format!("db/wal/{i:020}.sst"))
}

#[tokio::test]
async fn logged_creates_upload_in_order_and_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = broken(capacity.clone());
    let log = WbLog::open(dir.path(), options(), faulty.clone(), noop()).unwrap();
    for i in 1..=5u32 {
        log.put_create(&wal(i), vec![Bytes::from(vec![i as u8; 100])])
            .await
            .unwrap();
    }
    // A second create of a pending path is refused locally.
    let again = log
        .put_create(&wal(3), vec![Bytes::from_static(b"x")])
        .await;
    assert!(
        matches!(again, Err(Error::AlreadyExists { .. })),
        "{again:?}"
    );
    drop(log); // crash before any upload

    let log = WbLog::open(dir.path(), options(), capacity.clone(), noop()).unwrap();
    assert_eq!(log.lookup(&wal(2)).unwrap().kind, RecordKind::Create);
    log.barrier().await.unwrap();
    for i in 1..=5u32 {
        let got = capacity.get(&wal(i)).await.unwrap().bytes().await.unwrap();
        assert_eq!(got, vec![i as u8; 100]);
    }
    assert_eq!(log.stats().discarded_creates, 0);
    log.close().await.unwrap();
}

#[tokio::test]
async fn a_create_that_loses_to_another_writer_fences_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Another writer already created wal 2 (different bytes) and wal 1 with our exact bytes
    // (as if our own earlier attempt landed but its reply was lost).
    capacity
        .put(&wal(1), PutPayload::from(vec![1u8; 100]))
        .await
        .unwrap();
    capacity
        .put(&wal(2), PutPayload::from(vec![99u8; 100]))
        .await
        .unwrap();
    let faulty = broken(capacity.clone());
    let log = WbLog::open(dir.path(), options(), faulty.clone(), noop()).unwrap();
    for i in 1..=4u32 {
        log.put_create(&wal(i), vec![Bytes::from(vec![i as u8; 100])])
            .await
            .unwrap();
    }
    log.put(
        &Path::from("db/compacted/a.sst"),
        vec![Bytes::from_static(b"sst")],
    )
    .await
    .unwrap();
    faulty.set_config(FaultConfig::default());
    log.barrier().await.unwrap();
    // wal 1 was ours; wal 2 lost; wal 3 and 4 were discarded, never uploaded.
    assert!(log.fenced("db/wal").is_some());
    assert_eq!(log.stats().discarded_creates, 3);
    let got = capacity.get(&wal(2)).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, vec![99u8; 100]);
    for i in 3..=4u32 {
        assert!(matches!(
            capacity.get(&wal(i)).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }
    // Plain puts elsewhere are unaffected; further creates in the fenced directory fail.
    assert!(
        capacity
            .head(&Path::from("db/compacted/a.sst"))
            .await
            .is_ok()
    );
    let later = log
        .put_create(&wal(5), vec![Bytes::from_static(b"x")])
        .await;
    assert!(matches!(later, Err(Error::Fenced { .. })), "{later:?}");
    assert!(
        log.put_create(&Path::from("other/wal/1.sst"), vec![])
            .await
            .is_ok()
    );
    log.close().await.unwrap();
}

#[tokio::test]
async fn a_create_replaced_while_its_upload_fails_does_not_stall_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultStore::new(
        capacity.clone(),
        FaultConfig {
            error_before: 1.0,
            latency: Duration::from_millis(300),
            ..Default::default()
        },
        1,
    ));
    let log = WbLog::open(dir.path(), options(), faulty.clone(), noop()).unwrap();
    log.put_create(&wal(1), vec![Bytes::from_static(b"w1")])
        .await
        .unwrap();
    // The create's upload is now in flight and will fail; replace it meanwhile.
    tokio::time::sleep(Duration::from_millis(100)).await;
    log.delete(&wal(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    faulty.set_config(FaultConfig::default());
    tokio::time::timeout(Duration::from_secs(20), log.barrier())
        .await
        .expect("the barrier must not stall on a replaced create")
        .unwrap();
    assert!(matches!(
        capacity.get(&wal(1)).await,
        Err(object_store::Error::NotFound { .. })
    ));
    log.close().await.unwrap();
}
