//! [`Tables`]: the columnar side of one database: its catalog (in the KV engine) and its
//! segments (in the tiered store).

use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tierdb_kv::{KvDb, KvHandle, KvRead, KvWrite};

use crate::catalog::{self, CatalogBatch, ColumnDef, SegmentMeta, TableDef};
use crate::dfstore::DfStore;
use crate::error::{Result, TableError};
use crate::segment::SegmentOptions;

/// A table to create.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub sort_key: Vec<String>,
    pub partition_key: Option<String>,
}

/// The tables of one database. Cheap to share (`Arc`); catalog changes from one process are
/// serialized by a lock, and the KV engine's fencing keeps a second writer process out.
pub struct Tables {
    name: String,
    root: String,
    reader: Arc<dyn KvRead>,
    writer: Option<Arc<KvDb>>,
    store: Arc<dyn ObjectStore>,
    df_store: DfStore,
    tiered: tierdb_store::TieredStore,
    commit_lock: tokio::sync::Mutex<()>,
    pub segment_options: SegmentOptions,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("name", &self.name)
            .field("root", &self.root)
            .field("read_only", &self.writer.is_none())
            .finish_non_exhaustive()
    }
}

impl Tables {
    /// The tables of the database `kv`: read-write through its writer, read-only through a
    /// follower.
    pub fn open(kv: KvHandle) -> Self {
        let tiered = kv.store().clone();
        let store: Arc<dyn ObjectStore> = Arc::new(tiered.clone());
        Tables {
            name: kv.name().to_string(),
            root: kv.path().to_string(),
            tiered,
            writer: kv.writer().cloned(),
            reader: Arc::new(kv),
            df_store: DfStore::new(store.clone()),
            store,
            commit_lock: tokio::sync::Mutex::new(()),
            segment_options: SegmentOptions::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The store as DataFusion reads it (object_store 0.13), with read counters.
    pub fn df_store(&self) -> &DfStore {
        &self.df_store
    }

    /// The tiered store's counters (what the tiers served, what they fetched from the
    /// capacity store) so far.
    pub fn store_stats(&self) -> tierdb_store::TierStats {
        self.tiered.stats()
    }

    /// Why the KV engine under these tables can no longer be used, if it cannot (see
    /// [`KvDb::failure`]): the database must be reopened.
    pub fn failure(&self) -> Option<String> {
        self.writer.as_ref().and_then(|w| w.failure())
    }

    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    fn kv_writer(&self) -> Result<&Arc<KvDb>> {
        self.writer.as_ref().ok_or_else(|| TableError::ReadOnly {
            db: self.name.clone(),
        })
    }

    pub async fn table(&self, name: &str) -> Result<Option<TableDef>> {
        catalog::get_table(self.reader.as_ref(), name).await
    }

    pub async fn require(&self, name: &str) -> Result<TableDef> {
        self.table(name)
            .await?
            .ok_or_else(|| TableError::NoTable(name.to_string()))
    }

    pub async fn tables(&self) -> Result<Vec<TableDef>> {
        catalog::list_tables(self.reader.as_ref()).await
    }

    pub async fn segments(&self, def: &TableDef) -> Result<Vec<SegmentMeta>> {
        catalog::segments(self.reader.as_ref(), def.id).await
    }

    /// Creates a table; with `if_not_exists`, an existing table of that name is returned.
    pub async fn create_table(&self, new: NewTable, if_not_exists: bool) -> Result<TableDef> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        if let Some(existing) = self.table(&new.name).await? {
            if if_not_exists {
                return Ok(existing);
            }
            return Err(TableError::TableExists(new.name));
        }
        let id = catalog::next_id(self.reader.as_ref()).await?;
        let def = TableDef {
            id,
            name: new.name,
            columns: new.columns,
            sort_key: new.sort_key,
            partition_key: new.partition_key,
            created_ms: tierdb_kv::lease::now_ms(),
        };
        def.validate()?;
        let mut b = CatalogBatch::default();
        b.put_table(&def);
        b.set_next_id(id + 1);
        kv.commit(b.batch).await?;
        Ok(def)
    }

    /// Drops a table: its catalog entries go in one commit, then its segment files are
    /// deleted (a failure there leaves unreferenced files, logged, never a half table).
    /// Returns whether a table was dropped.
    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let Some(def) = self.table(name).await? else {
            if if_exists {
                return Ok(false);
            }
            return Err(TableError::NoTable(name.to_string()));
        };
        let segments = self.segments(&def).await?;
        let mut b = CatalogBatch::default();
        b.delete_table(name);
        for s in &segments {
            b.delete_segment(def.id, s.id);
        }
        kv.commit(b.batch).await?;
        self.discard(&segments).await;
        Ok(true)
    }

    /// Makes `segments` (already uploaded) part of `table` in one atomic commit. Fails,
    /// committing nothing, if the table was dropped or replaced meanwhile.
    /// With `replace`, the table's current segments leave it in the same commit (INSERT
    /// OVERWRITE) and their files are deleted afterwards.
    pub async fn commit_segments(
        &self,
        table: &TableDef,
        segments: Vec<SegmentMeta>,
        replace: bool,
    ) -> Result<Vec<SegmentMeta>> {
        let mut done = self
            .commit_writes(vec![PendingWrite {
                table: table.clone(),
                segments,
                replace,
            }])
            .await?;
        Ok(done.pop().map(|w| w.segments).unwrap_or_default())
    }

    /// Commits several tables' written segments in one atomic catalog commit: a reader sees
    /// all of them or none. Fails, committing nothing, if any table was dropped or replaced
    /// meanwhile. Returns the writes with their segments' assigned ids.
    ///
    /// On an error the segment files are deleted when the commit surely did not happen. When
    /// its outcome is unknown (the catalog commit itself failed: it may have taken effect)
    /// they are left in place, since the catalog may name them; callers never delete them.
    pub async fn commit_writes(&self, writes: Vec<PendingWrite>) -> Result<Vec<PendingWrite>> {
        let all: Vec<SegmentMeta> = writes.iter().flat_map(|w| w.segments.clone()).collect();
        match self.try_commit_writes(writes).await {
            Ok(done) => Ok(done),
            Err(CommitFailure::NotCommitted(e)) => {
                self.discard(&all).await;
                Err(e)
            }
            Err(CommitFailure::Unknown(e)) => {
                tracing::warn!(
                    segments = all.len(),
                    error = %e,
                    "a catalog commit failed with an unknown outcome; its segment files are kept \
                     (unreferenced if it did not happen)"
                );
                Err(e)
            }
        }
    }

    async fn try_commit_writes(
        &self,
        writes: Vec<PendingWrite>,
    ) -> std::result::Result<Vec<PendingWrite>, CommitFailure> {
        let before = CommitFailure::NotCommitted;
        let mut writes = writes;
        let kv = self.kv_writer().map_err(before)?;
        let _guard = self.commit_lock.lock().await;
        for w in &writes {
            match self.table(&w.table.name).await.map_err(before)? {
                Some(now) if now.id == w.table.id => {}
                _ => {
                    return Err(before(TableError::NoTable(format!(
                        "{} (it was dropped while rows were being written; nothing was committed)",
                        w.table.name
                    ))));
                }
            }
        }
        let mut next = catalog::next_id(self.reader.as_ref())
            .await
            .map_err(before)?;
        let mut b = CatalogBatch::default();
        let mut replaced = Vec::new();
        for i in 0..writes.len() {
            let (w, later) = writes[i..].split_first_mut().expect("i < len");
            if later.iter().any(|l| l.replace && l.table.id == w.table.id) {
                // An INSERT OVERWRITE later in this commit replaces these rows too.
                replaced.append(&mut w.segments);
                continue;
            }
            if w.replace {
                let current = self.segments(&w.table).await.map_err(before)?;
                for s in &current {
                    b.delete_segment(w.table.id, s.id);
                }
                replaced.extend(current);
            }
            for s in &mut w.segments {
                s.id = next;
                next += 1;
                b.put_segment(w.table.id, s);
            }
        }
        b.set_next_id(next);
        kv.commit(b.batch)
            .await
            .map_err(|e| CommitFailure::Unknown(e.into()))?;
        self.discard(&replaced).await;
        Ok(writes)
    }

    /// Deletes segment files that no commit references (an aborted load's, a dropped
    /// table's). Best effort: failures are logged.
    pub async fn discard(&self, segments: &[SegmentMeta]) {
        let paths = segments
            .iter()
            .map(|s| Path::from(s.path.as_str()))
            .collect::<Vec<_>>();
        let mut deletes = futures::stream::iter(paths)
            .map(|p| {
                let store = self.store.clone();
                async move { (store.delete(&p).await, p) }
            })
            .buffer_unordered(16);
        while let Some((r, p)) = deletes.next().await {
            if let Err(e) = r {
                tracing::warn!(path = %p, error = %e, "cannot delete an unreferenced segment");
            }
        }
    }
}

/// Rows written to a table's segments (uploaded), waiting for their catalog commit.
#[derive(Debug, Clone)]
pub struct PendingWrite {
    pub table: TableDef,
    pub segments: Vec<SegmentMeta>,
    /// INSERT OVERWRITE: the table's committed segments leave it in the same commit.
    pub replace: bool,
}

/// How a catalog commit failed: surely not committed, or with an unknown outcome.
enum CommitFailure {
    NotCommitted(TableError),
    Unknown(TableError),
}
