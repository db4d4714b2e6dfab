//! The read path of [`TieredStore`](super::TieredStore): the write-back log's pending
//! versions first, then the read tiers block by block (DRAM, device), then the capacity
//! store; object metadata through the metadata cache. See `docs/ARCHITECTURE.md`, "Read
//! path".

use futures::TryFutureExt;

use super::*;

pub(super) fn insert_blocks(
    cache: &BlockCache,
    path: &Path,
    version: &str,
    data: &Bytes,
    block_bytes: u64,
) {
    for (i, block) in split_blocks(data, block_bytes).into_iter().enumerate() {
        let key = BlockKey {
            path: path.as_ref().to_string(),
            version: version.to_string(),
            block: i as u64,
        };
        cache.insert(key, block);
    }
}

pub(super) fn version_of(meta: &ObjectMeta) -> String {
    meta.e_tag.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            meta.size,
            meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
        )
    })
}

pub(super) fn has_preconditions(o: &GetOptions) -> bool {
    o.if_match.is_some()
        || o.if_none_match.is_some()
        || o.if_modified_since.is_some()
        || o.if_unmodified_since.is_some()
        || o.version.is_some()
}

pub(super) fn resolve_range(
    range: Option<&GetRange>,
    size: u64,
) -> object_store::Result<Range<u64>> {
    match range {
        None => Ok(0..size),
        Some(r) => r.as_range(size).map_err(|e| object_store::Error::Generic {
            store: STORE_NAME,
            source: Box::new(e),
        }),
    }
}

pub(super) fn result_of(meta: ObjectMeta, range: Range<u64>, chunks: Vec<Bytes>) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(stream::iter(chunks.into_iter().map(Ok)).boxed()),
        meta,
        range,
        attributes: Attributes::default(),
        extensions: Default::default(),
    }
}

pub(super) fn pending_meta(path: &Path, entry: &Entry) -> ObjectMeta {
    ObjectMeta {
        location: path.clone(),
        last_modified: Utc
            .timestamp_millis_opt(entry.stamp_ms as i64)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH),
        size: entry.payload_len,
        e_tag: None,
        version: None,
    }
}

/// The cache keys of `blocks` of one version of the object at `path`.
fn block_keys(path: &Path, version: &str, blocks: Range<u64>) -> Vec<BlockKey> {
    blocks
        .map(|block| BlockKey {
            path: path.as_ref().to_string(),
            version: version.to_string(),
            block,
        })
        .collect()
}

/// What the tiers (DRAM, then device) hold of `keys`, looked up [`READ_FANOUT`] at once;
/// every hit is counted.
async fn probe(cache: &BlockCache, keys: &[BlockKey]) -> object_store::Result<Vec<Option<Bytes>>> {
    stream::iter(0..keys.len())
        .map(|i| async move {
            let hit = cache.get(&keys[i]).await?;
            if let Some((bytes, source)) = &hit {
                cache.counters.record(*source, bytes.len() as u64);
            }
            Ok::<_, object_store::Error>(hit.map(|(bytes, _)| bytes))
        })
        .buffered(READ_FANOUT)
        .try_collect()
        .await
}

/// `bytes` cut into blocks of `block_bytes` (the last may be shorter).
pub(super) fn split_blocks(bytes: &Bytes, block_bytes: u64) -> Vec<Bytes> {
    (0..bytes.len())
        .step_by(block_bytes as usize)
        .map(|from| bytes.slice(from..(from + block_bytes as usize).min(bytes.len())))
        .collect()
}

/// `blocks` with empty blocks added up to `n` (an object shorter than its metadata said;
/// the caller notices the missing bytes and refuses the read).
fn pad_blocks(mut blocks: Vec<Bytes>, n: usize) -> Vec<Bytes> {
    blocks.resize(n.max(blocks.len()), Bytes::new());
    blocks
}

/// Runs of adjacent `None`s in `chunks`, each at most `max_len` long.
pub(super) fn missing_runs(chunks: &[Option<Bytes>], max_len: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < chunks.len() {
        if chunks[i].is_some() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chunks.len() && chunks[j].is_none() && j - i < max_len {
            j += 1;
        }
        runs.push(i..j);
        i = j;
    }
    runs
}

pub(super) fn not_found(path: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: path.to_string(),
        source: "deleted (pending upload in the write-back log)".into(),
    }
}

impl Inner {
    pub(super) async fn head_capacity(&self, location: &Path) -> object_store::Result<ObjectMeta> {
        if let Some(meta) = self.meta.get(location.as_ref()) {
            return Ok(meta);
        }
        let ticket = self.meta.ticket(location.as_ref());
        bump(&self.counters.heads, 1);
        let meta = self.capacity.head(location).await?;
        self.meta.learn(ticket, &meta);
        Ok(meta)
    }

    pub(super) async fn get_pending(
        &self,
        location: &Path,
        entry: &Entry,
        options: &GetOptions,
    ) -> object_store::Result<GetResult> {
        if entry.kind == RecordKind::Delete {
            return Err(not_found(location));
        }
        let meta = pending_meta(location, entry);
        let range = resolve_range(options.range.as_ref(), meta.size)?;
        if options.head {
            return Ok(result_of(meta, range, Vec::new()));
        }
        let log = self
            .log
            .as_ref()
            .expect("a pending entry comes from the log");
        let bytes = log.read(entry, range.clone()).await?;
        Ok(result_of(meta, range, vec![bytes]))
    }

    pub(super) async fn get_capacity(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        bump(&self.counters.gets, 1);
        let result = self.capacity.get_opts(location, options).await?;
        bump(
            &self.counters.get_bytes,
            result.range.end - result.range.start,
        );
        Ok(result)
    }

    pub(super) async fn get_cached(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        options: &GetOptions,
    ) -> object_store::Result<GetResult> {
        let meta = self.head_capacity(location).await?;
        let range = resolve_range(options.range.as_ref(), meta.size)?;
        if options.head || range.is_empty() {
            return Ok(result_of(meta, range, Vec::new()));
        }
        let admit = self.admission.admit(location.as_ref(), range.clone());
        let version = version_of(&meta);
        let b = self.options.block_bytes;
        let blocks = range.start / b..(range.end - 1) / b + 1;
        let chunks = if admit {
            self.read_blocks_admitted(cache, location, &meta, &version, blocks.clone())
                .await?
        } else {
            self.read_blocks_bypassing(cache, location, &meta, &version, blocks.clone())
                .await?
        };
        // Trim the first and last block to the requested range.
        let mut out = Vec::with_capacity(chunks.len());
        for (block, chunk) in blocks.zip(chunks) {
            let block_start = block * b;
            let from = range
                .start
                .saturating_sub(block_start)
                .min(chunk.len() as u64);
            let to = (range.end - block_start).min(chunk.len() as u64);
            if from < to {
                out.push(chunk.slice(from as usize..to as usize));
            }
        }
        let got: u64 = out.iter().map(|c| c.len() as u64).sum();
        if got != range.end - range.start {
            // The object is shorter than its metadata said: it changed underneath us.
            return Err(object_store::Error::Precondition {
                path: location.to_string(),
                source: format!(
                    "read {got} bytes of {location} where {} were expected",
                    range.end - range.start
                )
                .into(),
            });
        }
        Ok(result_of(meta, range, out))
    }

    pub(super) fn block_range(&self, meta: &ObjectMeta, block: u64) -> Range<u64> {
        let b = self.options.block_bytes;
        block * b..((block + 1) * b).min(meta.size)
    }

    pub(super) fn fetch(
        &self,
        location: &Path,
        meta: &ObjectMeta,
        range: Range<u64>,
    ) -> impl Future<Output = object_store::Result<Bytes>> + Send + 'static {
        let capacity = self.capacity.clone();
        let location = location.clone();
        let options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: meta.e_tag.clone(),
            ..Default::default()
        };
        async move { capacity.get_opts(&location, options).await?.bytes().await }
    }

    /// Reads `blocks` through the tiers: blocks the tiers hold are served from them, the
    /// missing ones are fetched as few ranged GETs as possible (runs of adjacent missing
    /// blocks, each at most [`COALESCE_MAX_BYTES`], up to [`READ_FANOUT`] at once), split
    /// into blocks and inserted.
    pub(super) async fn read_blocks_admitted(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        version: &str,
        blocks: Range<u64>,
    ) -> object_store::Result<Vec<Bytes>> {
        let keys = block_keys(location, version, blocks.clone());
        let keys = &keys;
        let mut chunks = probe(cache, keys).await?;
        let max_blocks = (COALESCE_MAX_BYTES / self.options.block_bytes).max(1) as usize;
        let fetched: Vec<(usize, Vec<Bytes>)> = stream::iter(missing_runs(&chunks, max_blocks))
            .map(|run| {
                let first = blocks.start + run.start as u64;
                self.fetch_run(cache, location, meta, &keys[run.clone()], first)
                    .map_ok(move |got| (run.start, got))
            })
            .buffer_unordered(READ_FANOUT)
            .try_collect()
            .await?;
        for (start, run) in fetched {
            for (k, bytes) in run.into_iter().enumerate() {
                chunks[start + k] = Some(bytes);
            }
        }
        Ok(chunks.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Fetches the adjacent blocks `keys` (the first is block `first`) with one ranged GET,
    /// inserts them into the tiers and returns them. The fetch goes through the cache's
    /// single flight on the first block and inserts the others before it completes, so a
    /// concurrent reader of the same run waits for it and then finds every block cached
    /// instead of asking the capacity store again.
    async fn fetch_run(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        keys: &[BlockKey],
        first: u64,
    ) -> object_store::Result<Vec<Bytes>> {
        let b = self.options.block_bytes;
        let range = first * b..((first + keys.len() as u64) * b).min(meta.size);
        let whole: Arc<parking_lot::Mutex<Option<Bytes>>> = Arc::default();
        let fetch = {
            let request = self.fetch(location, meta, range);
            let (whole, cache, rest) = (whole.clone(), cache.clone(), keys[1..].to_vec());
            async move {
                let bytes = request.await?;
                let blocks = split_blocks(&bytes, b);
                for (key, block) in rest.into_iter().zip(blocks.iter().skip(1)) {
                    cache.insert(key, block.clone());
                }
                let head = blocks.first().cloned().unwrap_or_default();
                *whole.lock() = Some(bytes);
                Ok(head)
            }
        };
        let (head, source) = cache.get_or_fetch(&keys[0], fetch).await?;
        let fetched = whole.lock().take();
        if let Some(bytes) = fetched {
            // This reader's request: every block of the run came from the capacity store.
            bump(&self.counters.gets, 1);
            bump(&self.counters.get_bytes, bytes.len() as u64);
            let blocks = split_blocks(&bytes, b);
            for block in &blocks {
                cache.counters.record(Source::Capacity, block.len() as u64);
            }
            return Ok(pad_blocks(blocks, keys.len()));
        }
        // Another reader fetched the first block: the rest through the tiers, where that
        // reader's run put them.
        cache.counters.record(source, head.len() as u64);
        let rest: Vec<Bytes> = stream::iter(1..keys.len())
            .map(|k| {
                let fetch = self.fetch(location, meta, self.block_range(meta, first + k as u64));
                async move {
                    let (bytes, source) = cache.get_or_fetch(&keys[k], fetch).await?;
                    cache.counters.record(source, bytes.len() as u64);
                    if source == Source::Capacity {
                        bump(&self.counters.gets, 1);
                        bump(&self.counters.get_bytes, bytes.len() as u64);
                    }
                    Ok::<_, object_store::Error>(bytes)
                }
            })
            .buffered(READ_FANOUT)
            .try_collect()
            .await?;
        Ok(std::iter::once(head).chain(rest).collect())
    }

    /// Serves cached blocks from the cache and the rest with as few capacity requests as
    /// possible, without inserting anything.
    pub(super) async fn read_blocks_bypassing(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        version: &str,
        blocks: Range<u64>,
    ) -> object_store::Result<Vec<Bytes>> {
        let mut chunks = probe(cache, &block_keys(location, version, blocks.clone())).await?;
        let b = self.options.block_bytes;
        let max_blocks = (COALESCE_MAX_BYTES / b).max(1) as usize;
        for run in missing_runs(&chunks, max_blocks) {
            let first = blocks.start + run.start as u64;
            let range = first * b..((first + run.len() as u64) * b).min(meta.size);
            bump(&cache.counters.bypassed, run.len() as u64);
            bump(&self.counters.gets, 1);
            bump(&self.counters.get_bytes, range.end - range.start);
            let bytes = self.fetch(location, meta, range).await?;
            let got = pad_blocks(split_blocks(&bytes, b), run.len());
            for (slot, block) in chunks[run].iter_mut().zip(got) {
                *slot = Some(block);
            }
        }
        Ok(chunks.into_iter().map(Option::unwrap_or_default).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_blocks_are_grouped_into_capped_runs() {
        let hit = Some(Bytes::from_static(b"x"));
        let chunks = vec![
            None,
            None,
            hit.clone(),
            None,
            None,
            None,
            None,
            None,
            hit,
            None,
        ];
        assert_eq!(missing_runs(&chunks, 3), vec![0..2, 3..6, 6..8, 9..10]);
        assert_eq!(missing_runs(&chunks, 100), vec![0..2, 3..8, 9..10]);
        assert!(missing_runs(&[], 4).is_empty());
    }

    #[test]
    fn bytes_split_into_blocks_with_a_short_last_one() {
        let bytes = Bytes::from(vec![7u8; 10]);
        let blocks = split_blocks(&bytes, 4);
        assert_eq!(blocks.iter().map(Bytes::len).collect::<Vec<_>>(), [4, 4, 2]);
        assert_eq!(pad_blocks(blocks, 5).len(), 5);
        assert!(split_blocks(&Bytes::new(), 4).is_empty());
    }
}
