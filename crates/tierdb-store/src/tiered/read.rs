//! The read path of [`TieredStore`](super::TieredStore): the write-back log's pending
//! versions first, then the read tiers block by block (DRAM, device), then the capacity
//! store; object metadata through the metadata cache. See `docs/ARCHITECTURE.md`, "Read
//! path".

use super::*;

pub(super) fn insert_blocks(
    cache: &BlockCache,
    path: &Path,
    version: &str,
    data: &Bytes,
    block_bytes: u64,
) {
    for (i, start) in (0..data.len() as u64)
        .step_by(block_bytes as usize)
        .enumerate()
    {
        let end = (start + block_bytes).min(data.len() as u64);
        cache.insert(
            BlockKey {
                path: path.as_ref().to_string(),
                version: version.to_string(),
                block: i as u64,
            },
            data.slice(start as usize..end as usize),
        );
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

    pub(super) async fn read_blocks_admitted(
        &self,
        cache: &Arc<BlockCache>,
        location: &Path,
        meta: &ObjectMeta,
        version: &str,
        blocks: Range<u64>,
    ) -> object_store::Result<Vec<Bytes>> {
        stream::iter(blocks)
            .map(|block| {
                let key = BlockKey {
                    path: location.as_ref().to_string(),
                    version: version.to_string(),
                    block,
                };
                let fetch = self.fetch(location, meta, self.block_range(meta, block));
                async move {
                    let (bytes, source) = cache.get_or_fetch(&key, fetch).await?;
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
            .await
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
        let mut chunks: Vec<Option<Bytes>> =
            Vec::with_capacity((blocks.end - blocks.start) as usize);
        for block in blocks.clone() {
            let key = BlockKey {
                path: location.as_ref().to_string(),
                version: version.to_string(),
                block,
            };
            let hit = cache.get(&key).await?;
            if let Some((bytes, source)) = &hit {
                cache.counters.record(*source, bytes.len() as u64);
            }
            chunks.push(hit.map(|(bytes, _)| bytes));
        }
        let b = self.options.block_bytes;
        let mut i = 0;
        while i < chunks.len() {
            if chunks[i].is_some() {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chunks.len() && chunks[j].is_none() {
                j += 1;
            }
            let first = blocks.start + i as u64;
            let range = first * b..((blocks.start + j as u64) * b).min(meta.size);
            bump(&cache.counters.bypassed, (j - i) as u64);
            bump(&self.counters.gets, 1);
            bump(&self.counters.get_bytes, range.end - range.start);
            let bytes = self.fetch(location, meta, range.clone()).await?;
            for (k, slot) in chunks[i..j].iter_mut().enumerate() {
                let from = (k as u64 * b).min(bytes.len() as u64) as usize;
                let to = ((k as u64 + 1) * b).min(bytes.len() as u64) as usize;
                *slot = Some(bytes.slice(from..to));
            }
            i = j;
        }
        Ok(chunks.into_iter().map(Option::unwrap_or_default).collect())
    }
}
