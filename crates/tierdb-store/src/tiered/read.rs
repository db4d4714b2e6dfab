//! The read path of [`TieredStore`](super::TieredStore): the write-back log's pending
//! versions first, then the read tiers block by block (DRAM, device), then the capacity
//! store; object metadata through the metadata cache. See `docs/ARCHITECTURE.md`, "Read
//! path".

use super::*;

/// Inserts the blocks of a whole object just written (version `version`, e.g. its e_tag).
pub(super) fn insert_blocks(
    cache: &BlockCache,
    path: &Path,
    version: &str,
    data: &Bytes,
    block_bytes: u64,
) {
    let version = format!("{version}#{block_bytes}");
    for (i, block) in split_blocks(data, block_bytes).into_iter().enumerate() {
        let key = BlockKey {
            path: path.as_ref().to_string(),
            version: version.clone(),
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

/// What the tiers (DRAM, then device) hold of `keys`, looked up [`READ_FANOUT`] at once;
/// every hit is counted.
async fn probe(cache: &BlockCache, keys: &[BlockKey]) -> Vec<Option<Bytes>> {
    stream::iter(0..keys.len())
        .map(|i| async move {
            let hit = cache.get(&keys[i]).await;
            if let Some((bytes, source)) = &hit {
                cache.counters.record(*source, bytes.len() as u64);
            }
            hit.map(|(bytes, _)| bytes)
        })
        .buffered(READ_FANOUT)
        .collect()
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

/// Blocks of unrequested bytes between two requested ranges that one GET reads anyway, rather
/// than making two requests (a request costs about as much as this many bytes).
const GAP_MERGE_BYTES: u64 = 256 << 10;

/// The cache key under which the metadata of an immutable object is kept in the tiers (block
/// index `u64::MAX`, which no data block of an object under 16 EiB reaches).
fn meta_key(path: &Path) -> BlockKey {
    BlockKey {
        path: path.as_ref().to_string(),
        version: "meta".to_string(),
        block: u64::MAX,
    }
}

const META_MAGIC: &[u8; 4] = b"tmd1";

/// `meta` as stored under [`meta_key`]: magic, size, last-modified nanoseconds, e_tag and
/// version (each a u32 length, then UTF-8; `u32::MAX` for none).
fn encode_meta(meta: &ObjectMeta) -> Bytes {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(META_MAGIC);
    out.extend_from_slice(&meta.size.to_le_bytes());
    let nanos = meta.last_modified.timestamp_nanos_opt().unwrap_or_default();
    out.extend_from_slice(&nanos.to_le_bytes());
    for s in [&meta.e_tag, &meta.version] {
        match s {
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        }
    }
    Bytes::from(out)
}

/// The metadata [`encode_meta`] stored, or `None` if the bytes are not such a record.
fn decode_meta(path: &Path, mut b: &[u8]) -> Option<ObjectMeta> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    if take(&mut b, 4)? != META_MAGIC {
        return None;
    }
    let size = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
    let nanos = i64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
    let mut strings = [None, None];
    for slot in &mut strings {
        let len = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?);
        if len != u32::MAX {
            *slot = Some(String::from_utf8(take(&mut b, len as usize)?.to_vec()).ok()?);
        }
    }
    if !b.is_empty() {
        return None;
    }
    let [e_tag, version] = strings;
    Some(ObjectMeta {
        location: path.clone(),
        last_modified: Utc.timestamp_nanos(nanos),
        size,
        e_tag,
        version,
    })
}

/// The blocks one read touches: the blocks of every requested range, with short gaps between
/// ranges filled in, as sorted spans of block indices. `wanted[k]` says whether block `k` of
/// the spans' concatenation holds requested bytes (the others are gap fill).
struct BlockPlan {
    spans: Vec<Range<u64>>,
    wanted: Vec<bool>,
}

impl BlockPlan {
    fn new(ranges: &[Range<u64>], block_bytes: u64) -> Self {
        let mut need: Vec<Range<u64>> = ranges
            .iter()
            .filter(|r| !r.is_empty())
            .map(|r| r.start / block_bytes..(r.end - 1) / block_bytes + 1)
            .collect();
        need.sort_by_key(|r| r.start);
        let gap_blocks = GAP_MERGE_BYTES / block_bytes;
        let mut spans: Vec<Range<u64>> = Vec::new();
        let mut wanted = Vec::new();
        for r in need {
            match spans.last_mut() {
                Some(last) if r.start <= last.end + gap_blocks => {
                    let new_end = last.end.max(r.end);
                    let base = wanted.len() as u64 - (last.end - last.start);
                    wanted.resize((base + new_end - last.start) as usize, false);
                    for k in r.start..r.end {
                        wanted[(base + k - last.start) as usize] = true;
                    }
                    last.end = new_end;
                }
                _ => {
                    wanted.extend(std::iter::repeat_n(true, (r.end - r.start) as usize));
                    spans.push(r);
                }
            }
        }
        Self { spans, wanted }
    }

    /// Every block index, in order (the concatenation of the spans).
    fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.spans.iter().flat_map(|s| s.clone())
    }
}

/// The runs of `chunks` (missing blocks, adjacent in the object) to fetch: runs of missing
/// blocks within one span, at most `max_len` long, trimmed of gap-fill blocks at either
/// end; a run of gap fill only is not fetched.
fn fetch_runs(plan: &BlockPlan, chunks: &[Option<Bytes>], max_len: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut base = 0;
    for span in &plan.spans {
        let len = (span.end - span.start) as usize;
        for run in missing_runs(&chunks[base..base + len], max_len) {
            let mut run = base + run.start..base + run.end;
            while run.start < run.end && !plan.wanted[run.start] {
                run.start += 1;
            }
            while run.end > run.start && !plan.wanted[run.end - 1] {
                run.end -= 1;
            }
            if !run.is_empty() {
                runs.push(run);
            }
        }
        base += len;
    }
    runs
}

/// Drops the kept metadata of an immutable object that was deleted.
pub(super) fn forget_immutable(cache: &BlockCache, options: &TierOptions, location: &Path) {
    if options.is_immutable(location.as_ref()) {
        cache.remove(&meta_key(location));
    }
}

impl Inner {
    /// The object's metadata: from the metadata cache, for an immutable object from the
    /// tiers (where an earlier process may have left it), or from a HEAD.
    pub(super) async fn head_capacity(&self, location: &Path) -> object_store::Result<ObjectMeta> {
        if let Some(meta) = self.meta.get(location.as_ref()) {
            return Ok(meta);
        }
        let ticket = self.meta.ticket(location.as_ref());
        let immutable = self.options.is_immutable(location.as_ref());
        if immutable
            && let Some(cache) = &self.cache
            && let Some((bytes, _)) = cache.get(&meta_key(location)).await
            && let Some(meta) = decode_meta(location, &bytes)
        {
            self.meta.learn(ticket, &meta);
            return Ok(meta);
        }
        bump(&self.counters.heads, 1);
        let meta = self.capacity.head(location).await?;
        self.meta.learn(ticket, &meta);
        if immutable && let Some(cache) = &self.cache {
            cache.insert(meta_key(location), encode_meta(&meta));
        }
        Ok(meta)
    }

    /// Forgets what the tiers know of the object at `location` (it was written or deleted).
    pub(super) fn forget(&self, location: &Path) {
        self.meta.forget(location.as_ref());
        if let Some(cache) = &self.cache {
            forget_immutable(cache, &self.options, location);
        }
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
        let chunks = self
            .read_ranges(cache, location, &meta, std::slice::from_ref(&range))
            .await?
            .pop()
            .unwrap_or_default();
        Ok(result_of(meta, range, chunks))
    }

    /// `ranges` of one version of an object (`meta`) through the tiers, each as the chunks
    /// it is made of: blocks the tiers hold are served from them; the missing ones are
    /// fetched as few ranged GETs as possible (adjacent missing blocks of all ranges, short
    /// gaps between ranges included, each GET at most [`COALESCE_MAX_BYTES`], up to
    /// [`READ_FANOUT`] at once) and inserted, unless the admission policy says the read is
    /// part of a long scan.
    pub(super) async fn read_ranges(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Vec<Bytes>>> {
        let b = self.options.block_bytes_of(location.as_ref());
        // The block size is part of the version: blocks cut at another size never match.
        let version = format!("{}#{b}", version_of(meta));
        let plan = BlockPlan::new(ranges, b);
        let span = |r: &Range<u64>| (r.start * b, r.end * b);
        let (first, last) = match (plan.spans.first(), plan.spans.last()) {
            (Some(f), Some(l)) => (span(f).0, span(l).1.min(meta.size)),
            _ => return Ok(vec![Vec::new(); ranges.len()]),
        };
        let admit = self.admission.admit(location.as_ref(), first..last);
        let keys: Vec<BlockKey> = plan
            .blocks()
            .map(|block| BlockKey {
                path: location.as_ref().to_string(),
                version: version.clone(),
                block,
            })
            .collect();
        let keys = &keys;
        let mut chunks = probe(cache, keys).await;
        let index: Vec<u64> = plan.blocks().collect();
        let max_blocks = (COALESCE_MAX_BYTES / b).max(1) as usize;
        let fetched: Vec<(usize, Vec<Bytes>)> =
            stream::iter(fetch_runs(&plan, &chunks, max_blocks))
                .map(|run| {
                    let first = index[run.start];
                    async move {
                        let got = if admit {
                            self.fetch_run(cache, location, meta, &keys[run.clone()], first, b)
                                .await?
                        } else {
                            let range = first * b..((first + run.len() as u64) * b).min(meta.size);
                            bump(&cache.counters.bypassed, run.len() as u64);
                            bump(&self.counters.gets, 1);
                            bump(&self.counters.get_bytes, range.end - range.start);
                            let bytes = self.fetch(location, meta, range).await?;
                            pad_blocks(split_blocks(&bytes, b), run.len())
                        };
                        Ok::<_, object_store::Error>((run.start, got))
                    }
                })
                .buffer_unordered(READ_FANOUT)
                .try_collect()
                .await?;
        for (start, run) in fetched {
            for (k, bytes) in run.into_iter().enumerate() {
                chunks[start + k] = Some(bytes);
            }
        }
        // Cut each range out of its blocks.
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let mut parts = Vec::new();
            if !range.is_empty() {
                let from_block = range.start / b;
                let at = index.partition_point(|&k| k < from_block);
                for (k, chunk) in index[at..].iter().zip(&chunks[at..]) {
                    let block_start = k * b;
                    if block_start >= range.end {
                        break;
                    }
                    let chunk = chunk.as_ref().cloned().unwrap_or_default();
                    let from = range
                        .start
                        .saturating_sub(block_start)
                        .min(chunk.len() as u64);
                    let to = (range.end - block_start).min(chunk.len() as u64);
                    if from < to {
                        parts.push(chunk.slice(from as usize..to as usize));
                    }
                }
            }
            let got: u64 = parts.iter().map(|c| c.len() as u64).sum();
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
            out.push(parts);
        }
        Ok(out)
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

    /// Fetches the adjacent blocks `keys` (the first is block `first`, blocks of `b` bytes)
    /// with one ranged GET, inserts them into the tiers and returns them. The fetch goes
    /// through the cache's single flight on the first block and inserts the others before it
    /// completes, so a concurrent reader of the same run waits for it and then finds every
    /// block cached instead of asking the capacity store again.
    async fn fetch_run(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        keys: &[BlockKey],
        first: u64,
        b: u64,
    ) -> object_store::Result<Vec<Bytes>> {
        let range = first * b..((first + keys.len() as u64) * b).min(meta.size);
        let whole: Arc<parking_lot::Mutex<Option<Bytes>>> = Arc::default();
        let fetch = || {
            let request = self.fetch(location, meta, range.clone());
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
                let block = first + k as u64;
                let range = block * b..((block + 1) * b).min(meta.size);
                let fetch = move || self.fetch(location, meta, range.clone());
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
