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
use crate::viewdeps::Dependents;

/// A table to create.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub sort_key: Vec<String>,
    pub partition_key: Option<String>,
    /// A PRIMARY KEY makes a row table (`rows/`).
    pub primary_key: Vec<String>,
    /// Column DEFAULTs (column, SQL text).
    pub defaults: Vec<(String, String)>,
}

/// The tables of one database. Cheap to share (`Arc`); catalog changes from one process are
/// serialized by a lock, and the KV engine's fencing keeps a second writer process out.
pub struct Tables {
    name: String,
    root: String,
    pub(crate) reader: Arc<dyn KvRead>,
    writer: Option<Arc<KvDb>>,
    store: Arc<dyn ObjectStore>,
    df_store: DfStore,
    tiered: tierdb_store::TieredStore,
    pub(crate) commit_lock: tokio::sync::Mutex<()>,
    /// Segment files written by this process and not yet committed or discarded (an open
    /// transaction's, an import's in progress): VACUUM leaves them alone.
    writing: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// The tables' Delta logs, for other engines (see `delta.rs`).
    delta: crate::delta::DeltaLogs,
    pub segment_options: SegmentOptions,
    /// Row locks and recent row commits (`rows/locks.rs`).
    rows: Arc<crate::rows::locks::RowState>,
    /// Sequence values reserved by this process (`rows/sequence.rs`).
    pub(crate) sequences: crate::rows::sequence::Sequences,
    /// Catalog commits made by this process (see [`Tables::generation`]).
    generation: std::sync::atomic::AtomicU64,
    /// Catalog commits made by this process that changed a definition (see
    /// [`Tables::ddl_generation`]).
    ddl_generation: std::sync::atomic::AtomicU64,
    /// Small-segment merges (`merge.rs`).
    merge: Arc<crate::merge::MergeState>,
    pub merge_policy: crate::merge::MergePolicy,
    /// What open transactions' DDL has changed (`ddlundo.rs` invariant 7).
    pub(crate) pending_ddl: crate::ddlundo::PendingDdl,
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
            writing: Default::default(),
            delta: Default::default(),
            segment_options: SegmentOptions::default(),
            rows: Default::default(),
            sequences: Default::default(),
            generation: Default::default(),
            ddl_generation: Default::default(),
            merge: Default::default(),
            merge_policy: Default::default(),
            pending_ddl: Default::default(),
        }
    }

    pub(crate) fn merge_state(&self) -> &Arc<crate::merge::MergeState> {
        &self.merge
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

    /// Commits `b` stamped with its time (`Tt`) and counts it in [`Tables::generation`].
    /// Made by a statement of an open transaction, it carries its undo records
    /// (`ddlundo.rs` invariant 1).
    pub(crate) async fn commit_catalog(
        &self,
        kv: &KvDb,
        mut b: CatalogBatch,
    ) -> tierdb_kv::Result<u64> {
        crate::ddlundo::record(self.reader.as_ref(), &mut b.batch).await?;
        self.pending_ddl.note(&b.batch);
        let defines = b.defines();
        self.commit_stamped(kv, b.stamped(), defines).await
    }

    /// Commits `batch` (a rollback's: never recorded) as a change of definitions.
    pub(crate) async fn commit_unrecorded(
        &self,
        kv: &KvDb,
        batch: tierdb_kv::Batch,
    ) -> tierdb_kv::Result<u64> {
        let b = CatalogBatch::redefining(batch);
        self.commit_stamped(kv, b.stamped(), true).await
    }

    async fn commit_stamped(
        &self,
        kv: &KvDb,
        batch: tierdb_kv::Batch,
        defines: bool,
    ) -> tierdb_kv::Result<u64> {
        let r = kv.commit(batch).await;
        // Also after a failure: its outcome may be unknown.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if defines {
            self.ddl_generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        r
    }

    /// How many catalog commits this process has made: while it is unchanged (and this
    /// process is the writer, the only one that commits), the catalog's tables and views
    /// are the ones read last.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How many catalog commits this process has made that changed a table, view,
    /// sequence or schema definition. A plan made while it read `g` (read before planning)
    /// is still the statement's plan while it reads `g`, on the writer (the only process
    /// that changes definitions): `sql/plancache.rs`.
    pub fn ddl_generation(&self) -> u64 {
        self.ddl_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn row_state(&self) -> &Arc<crate::rows::locks::RowState> {
        &self.rows
    }

    pub(crate) fn kv_writer(&self) -> Result<&Arc<KvDb>> {
        self.writer.as_ref().ok_or_else(|| TableError::ReadOnly {
            db: self.name.clone(),
        })
    }

    pub async fn table(&self, name: &str) -> Result<Option<TableDef>> {
        catalog::get_table(self.reader.as_ref(), name).await
    }

    /// The table `def` as the catalog has it now, found by its id: under a new name if it
    /// was renamed (a transaction's writes follow their table through `ALTER TABLE …
    /// RENAME TO`), `None` if it was dropped.
    pub(crate) async fn table_by_id(&self, def: &TableDef) -> Result<Option<TableDef>> {
        self.table_by_name_or_id(&def.name, def.id).await
    }

    /// [`Tables::table_by_id`] of the table `id`, last known as `name`.
    pub(crate) async fn table_by_name_or_id(
        &self,
        name: &str,
        id: u64,
    ) -> Result<Option<TableDef>> {
        if let Some(now) = self.table(name).await?
            && now.id == id
        {
            return Ok(Some(now));
        }
        Ok(self.tables().await?.into_iter().find(|t| t.id == id))
    }

    pub async fn require(&self, name: &str) -> Result<TableDef> {
        self.table(name)
            .await?
            .ok_or_else(|| TableError::NoTable(name.to_string()))
    }

    pub async fn tables(&self) -> Result<Vec<TableDef>> {
        catalog::list_tables(self.reader.as_ref()).await
    }

    /// When the newest commit to the tables this process sees was made (ms since the
    /// epoch): on a replica, `now - this` bounds how far behind its writer it is (as
    /// PostgreSQL's `now() - pg_last_xact_replay_timestamp()`).
    pub async fn last_commit_ms(&self) -> Result<Option<u64>> {
        catalog::last_commit_ms(self.reader.as_ref()).await
    }

    /// The committed segment stored at `path` (`…/tables/<table id>/<name>.parquet`), if
    /// the catalog this process sees has it.
    pub async fn segment_by_path(&self, path: &str) -> Result<Option<SegmentMeta>> {
        let table = path
            .rsplit('/')
            .nth(1)
            .and_then(|id| id.parse::<u64>().ok());
        let Some(table) = table else {
            return Ok(None);
        };
        Ok(catalog::segments(self.reader.as_ref(), table)
            .await?
            .into_iter()
            .find(|s| s.path == path))
    }

    pub async fn segments(&self, def: &TableDef) -> Result<Vec<SegmentMeta>> {
        catalog::segments(self.reader.as_ref(), def.id).await
    }

    /// Creates a table; with `if_not_exists`, an existing table of that name is returned.
    pub async fn create_table(&self, new: NewTable, if_not_exists: bool) -> Result<TableDef> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        self.require_namespace(&new.name).await?;
        if let Some(existing) = self.table(&new.name).await? {
            if if_not_exists {
                return Ok(existing);
            }
            return Err(TableError::TableExists(new.name));
        }
        if catalog::get_view(self.reader.as_ref(), &new.name)
            .await?
            .is_some()
        {
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
            dropped: Vec::new(),
            primary_key: new.primary_key,
            defaults: new.defaults,
            indexes: Vec::new(),
            comments: Default::default(),
            missing: Vec::new(),
        };
        def.validate()?;
        let mut b = CatalogBatch::default();
        b.put_table(&def);
        b.set_next_id(id + 1);
        self.commit_catalog(kv, b).await?;
        self.publish_delta(&def, &[]).await;
        Ok(def)
    }

    /// Appends the catalog's new state of `def` (its `segments`) to its Delta log. Called
    /// under the commit lock after the catalog commit; a failure is logged, not returned:
    /// the commit is durable, and the next commit of the table writes the difference.
    pub(crate) async fn publish_delta(&self, def: &TableDef, segments: &[SegmentMeta]) {
        if let Err(e) = self
            .delta
            .publish(&self.tiered, &self.root, def, segments)
            .await
        {
            tracing::warn!(table = %def.name, error = %e,
                "cannot append to the table's Delta log; the next commit of the table will");
        }
    }

    /// Drops a table: its catalog entries go in one commit, which also retires its segment
    /// files (VACUUM deletes them once no reader can still be using them). Views that
    /// read it are left ([`Dependents::Keep`]: for the drops tierdb makes itself).
    /// Returns whether a table was dropped.
    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let dropped = self
            .drop_tables(&[name.to_string()], if_exists, Dependents::Keep)
            .await?;
        Ok(dropped.existed.first().copied().unwrap_or(false))
    }

    /// Drops every table of `names` in one atomic catalog commit (`DROP TABLE a, b`):
    /// all of them or, if one does not exist and not `if_exists`, none; the views that
    /// read them as `dependents` says (`viewdeps.rs` invariant 3), in the same commit.
    /// Returns which existed and the views dropped with them.
    pub async fn drop_tables(
        &self,
        names: &[String],
        if_exists: bool,
        dependents: Dependents,
    ) -> Result<crate::viewdeps::Dropped> {
        self.clear_tables(names, if_exists, Some(dependents)).await
    }

    /// Deletes every row of the tables of `names` in one atomic catalog commit (`TRUNCATE
    /// a, b`): their segments leave the catalog (their files are retired for VACUUM), the
    /// tables stay.
    pub async fn truncate(&self, names: &[String]) -> Result<()> {
        self.clear_tables(names, false, None).await.map(|_| ())
    }

    /// `drop`: how a DROP treats the views reading the tables; `None`: TRUNCATE.
    async fn clear_tables(
        &self,
        names: &[String],
        if_exists: bool,
        drop: Option<Dependents>,
    ) -> Result<crate::viewdeps::Dropped> {
        let dependents = drop;
        let drop = drop.is_some();
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            match self.table(name).await? {
                Some(def) => found.push(Some(def)),
                None if if_exists => found.push(None),
                None => {
                    // As PostgreSQL: a missing schema is named before a missing table.
                    let (schema, _) = crate::sql::split_qualified(name);
                    if name.contains('.') && self.schema_def(schema).await?.is_none() {
                        return Err(TableError::Column {
                            code: "3F000",
                            message: format!("schema \"{schema}\" does not exist"),
                        });
                    }
                    return Err(TableError::NoTable(name.to_string()));
                }
            }
        }
        let mut b = CatalogBatch::default();
        let mut cascaded = Vec::new();
        if let Some(dependents) = dependents {
            let dropped: Vec<String> = found.iter().flatten().map(|d| d.name.clone()).collect();
            cascaded = dependents.resolve(&self.views().await?, &dropped, "table")?;
            for view in &cascaded {
                b.delete_view(view);
            }
        }
        let now = tierdb_kv::lease::now_ms();
        let sequences = if drop {
            catalog::list_sequences(self.reader.as_ref()).await?
        } else {
            Vec::new()
        };
        let mut forget = Vec::new();
        for def in found.iter().flatten() {
            if def.is_row_table() {
                // Its rows go in the same commit (rows/ invariant 1).
                for (k, _) in self
                    .reader
                    .scan(crate::rows::table_range(def.id), None)
                    .await?
                {
                    b.batch.delete(k);
                }
            }
            for s in sequences
                .iter()
                .filter(|s| s.owned_by.as_deref() == Some(&def.name))
            {
                b.delete_sequence(&s.name);
                forget.push(s.name.clone());
            }
            if drop {
                b.delete_table(&def.name);
            }
            for s in &self.segments(def).await? {
                b.delete_segment(def.id, s.id);
                b.retire(s, now);
            }
        }
        self.commit_catalog(kv, b).await?;
        for name in forget {
            self.sequences.forget(&name);
        }
        for def in found.iter().flatten() {
            self.publish_delta(def, &[]).await;
        }
        Ok(crate::viewdeps::Dropped {
            existed: found.iter().map(Option::is_some).collect(),
            cascaded,
        })
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
                removed: Vec::new(),
            }])
            .await?;
        Ok(done.pop().map(|w| w.segments).unwrap_or_default())
    }

    /// Commits several tables' written segments in one atomic catalog commit: a reader sees
    /// all of them or none. Fails, committing nothing, if any table was dropped or replaced
    /// meanwhile, or if a segment a write removes (UPDATE, DELETE) is no longer in its table
    /// (another commit removed it first: SQLSTATE 40001, retry the transaction). Returns the
    /// writes with their segments' assigned ids.
    ///
    /// On an error the segment files are deleted when the commit surely did not happen. When
    /// its outcome is unknown (the catalog commit itself failed: it may have taken effect)
    /// they are left in place, since the catalog may name them; callers never delete them.
    pub async fn commit_writes(&self, writes: Vec<PendingWrite>) -> Result<Vec<PendingWrite>> {
        self.commit_writes_with(writes, tierdb_kv::Batch::new(), None)
            .await
    }

    /// [`Tables::commit_writes`], with `rows` (a transaction's row writes) in the same KV
    /// batch as the catalog changes.
    /// `own_ddl` is the committing transaction's (its own DDL does not stop it).
    pub async fn commit_writes_with(
        &self,
        writes: Vec<PendingWrite>,
        rows: tierdb_kv::Batch,
        own_ddl: Option<u64>,
    ) -> Result<Vec<PendingWrite>> {
        let all: Vec<SegmentMeta> = writes.iter().flat_map(|w| w.segments.clone()).collect();
        match self.try_commit_writes(writes, rows, own_ddl).await {
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
        rows: tierdb_kv::Batch,
        own_ddl: Option<u64>,
    ) -> std::result::Result<Vec<PendingWrite>, CommitFailure> {
        let before = CommitFailure::NotCommitted;
        // A write emptied by its own transaction's ADD PRIMARY KEY (`Transaction::
        // absorb_writes_of`) commits nothing.
        let mut writes: Vec<PendingWrite> = writes
            .into_iter()
            .filter(|w| !w.segments.is_empty() || !w.removed.is_empty() || w.replace)
            .collect();
        let kv = self.kv_writer().map_err(before)?;
        let _guard = self.commit_lock.lock().await;
        self.pending_ddl
            .check(writes.iter().map(|w| w.table.name.as_str()), own_ddl)
            .map_err(before)?;
        for w in writes.iter_mut() {
            match self.table_by_id(&w.table).await.map_err(before)? {
                Some(now)
                    if now.id == w.table.id
                        && now.columns == w.table.columns
                        && now.primary_key == w.table.primary_key =>
                {
                    w.table.name = now.name;
                }
                Some(now) if now.id == w.table.id => {
                    return Err(before(TableError::Conflict(format!(
                        "table {} was altered (ALTER TABLE) while rows were being written; \
                         nothing was committed, retry",
                        w.table.name
                    ))));
                }
                _ => {
                    return Err(before(TableError::NoTable(format!(
                        "{} (it was dropped while rows were being written; nothing was committed)",
                        w.table.name
                    ))));
                }
            }
        }
        // Segments written earlier in this transaction and removed again by a later
        // statement of it (an UPDATE of rows it inserted) never reach the catalog.
        let written: std::collections::HashSet<String> = writes
            .iter()
            .flat_map(|w| w.segments.iter().map(|s| s.path.clone()))
            .collect();
        let removed_paths: std::collections::HashSet<String> = writes
            .iter()
            .flat_map(|w| w.removed.iter().map(|s| s.path.clone()))
            .collect();
        let mut next = catalog::next_id(self.reader.as_ref())
            .await
            .map_err(before)?;
        let now = tierdb_kv::lease::now_ms();
        let mut b = CatalogBatch::default();
        let mut unused = Vec::new();
        for i in 0..writes.len() {
            let (w, later) = writes[i..].split_first_mut().expect("i < len");
            if later.iter().any(|l| l.replace && l.table.id == w.table.id) {
                // An INSERT OVERWRITE later in this commit replaces these rows too; what this
                // write removed is removed by it as well.
                unused.append(&mut w.segments);
                continue;
            }
            if w.replace {
                let current = self.segments(&w.table).await.map_err(before)?;
                for s in &current {
                    b.delete_segment(w.table.id, s.id);
                    b.retire(s, now);
                }
            }
            for r in &w.removed {
                if written.contains(&r.path) {
                    continue; // this transaction's own, not in the catalog
                }
                let current = catalog::get_segment(self.reader.as_ref(), w.table.id, r.id)
                    .await
                    .map_err(before)?;
                if current.as_ref().is_none_or(|c| c.path != r.path) {
                    return Err(before(TableError::Conflict(format!(
                        "table {}: a segment this transaction rewrote was changed by another \
                         commit first; nothing was committed, retry the transaction",
                        w.table.name
                    ))));
                }
                b.delete_segment(w.table.id, r.id);
                b.retire(r, now);
            }
            let mut kept = Vec::with_capacity(w.segments.len());
            for mut s in std::mem::take(&mut w.segments) {
                if removed_paths.contains(&s.path) {
                    unused.push(s);
                    continue;
                }
                s.id = next;
                next += 1;
                b.put_segment(w.table.id, &s);
                kept.push(s);
            }
            w.segments = kept;
        }
        b.set_next_id(next);
        for op in rows.ops() {
            match op {
                tierdb_kv::Op::Put(k, v) => b.batch.put(k.clone(), v.clone()),
                tierdb_kv::Op::Delete(k) => b.batch.delete(k.clone()),
            };
        }
        let committed = self.commit_catalog(kv, b).await;
        for w in &writes {
            self.done_writing(&w.segments);
        }
        committed.map_err(|e| CommitFailure::Unknown(e.into()))?;
        let mut published = std::collections::HashSet::new();
        for w in &writes {
            if published.insert(w.table.id) {
                match self.segments(&w.table).await {
                    Ok(segments) => self.publish_delta(&w.table, &segments).await,
                    Err(e) => tracing::warn!(table = %w.table.name, error = %e,
                        "cannot read the catalog to append to the Delta log"),
                }
            }
        }
        self.discard(&unused).await;
        self.merge.committed(&writes);
        Ok(writes)
    }

    /// Notes a segment file this process is writing and has not committed yet.
    pub(crate) fn note_writing(&self, path: &str) {
        self.writing.lock().insert(path.to_string());
    }

    pub(crate) fn done_writing(&self, segments: &[SegmentMeta]) {
        let mut w = self.writing.lock();
        for s in segments {
            w.remove(&s.path);
        }
    }

    /// Files that are not part of any table and that VACUUM would delete now, given that
    /// retired files (and unreferenced files nobody retired: left by a write that was killed
    /// before its commit) are kept for `retain` after they left the catalog (were written).
    pub async fn vacuum_plan(&self, retain: std::time::Duration) -> Result<VacuumPlan> {
        let prefix = Path::from(format!("{}/tables", self.root.trim_end_matches('/')));
        let mut referenced = std::collections::HashSet::new();
        let mut logs = std::collections::HashSet::new();
        for def in self.tables().await? {
            logs.insert(format!("{}/", crate::delta::table_root(&self.root, def.id)));
            for s in self.segments(&def).await? {
                referenced.insert(s.path);
            }
        }
        // What a rollback of DDL could bring back (`ddlundo.rs` invariant 6).
        let held = crate::ddlundo::held(self.reader.as_ref()).await?;
        referenced.extend(held.paths);
        for id in held.tables {
            logs.insert(format!("{}/", crate::delta::table_root(&self.root, id)));
        }
        let retired: std::collections::HashMap<String, catalog::Retired> =
            catalog::list_retired(self.reader.as_ref())
                .await?
                .into_iter()
                .map(|r| (r.path.clone(), r))
                .collect();
        let now = tierdb_kv::lease::now_ms();
        let retain_ms = u64::try_from(retain.as_millis()).unwrap_or(u64::MAX);
        let writing = self.writing.lock().clone();
        let mut plan = VacuumPlan::default();
        let mut listing = self.store.list(Some(&prefix));
        let mut seen = std::collections::HashSet::new();
        while let Some(meta) = listing.next().await {
            let meta = meta?;
            let path = meta.location.to_string();
            seen.insert(path.clone());
            if referenced.contains(&path) {
                plan.referenced += 1;
                continue;
            }
            // The Delta log of an existing table (a dropped table's goes with its files).
            if crate::delta::is_log_file(&path) && logs.iter().any(|l| path.starts_with(l)) {
                continue;
            }
            if writing.contains(&path) {
                plan.kept.push(path);
                continue;
            }
            let since_ms = match retired.get(&path) {
                Some(r) => r.retired_ms,
                None => u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0),
            };
            let file = VacuumFile {
                path,
                bytes: meta.size,
                retired: retired.contains_key(meta.location.as_ref()),
                age_ms: now.saturating_sub(since_ms),
            };
            if file.age_ms >= retain_ms {
                plan.delete.push(file);
            } else {
                plan.kept.push(file.path);
            }
        }
        // Retirement records of files already gone (deleted by hand, or a VACUUM that
        // stopped between deleting and forgetting).
        plan.stale_records = retired.into_keys().filter(|p| !seen.contains(p)).collect();
        Ok(plan)
    }

    /// Deletes what [`Tables::vacuum_plan`] lists, then forgets their retirement records.
    /// Files are deleted before their records, so a crash in between leaves only records of
    /// missing files, which the next VACUUM forgets.
    pub async fn vacuum(&self, retain: std::time::Duration) -> Result<VacuumPlan> {
        let kv = self.kv_writer()?.clone();
        let _guard = self.commit_lock.lock().await;
        let plan = self.vacuum_plan(retain).await?;
        let paths: Vec<Path> = plan
            .delete
            .iter()
            .map(|f| Path::from(f.path.as_str()))
            .collect();
        let mut deletes = futures::stream::iter(paths.into_iter().map(|path| {
            let store = self.store.clone();
            async move { store.delete(&path).await }
        }))
        .buffer_unordered(16);
        while let Some(r) = deletes.next().await {
            match r {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(TableError::Store(e)),
            }
        }
        drop(deletes);
        let mut b = CatalogBatch::default();
        for f in plan.delete.iter().filter(|f| f.retired) {
            b.forget_retired(&f.path);
        }
        for p in &plan.stale_records {
            b.forget_retired(p);
        }
        if !b.batch.is_empty() {
            self.commit_catalog(&kv, b).await?;
        }
        Ok(plan)
    }

    /// The cheap part of VACUUM, run after segment merges: deletes only files the catalog
    /// retired (replaced or dropped) at least `retain` ago, found from their retirement
    /// records without listing the store. Returns how many were deleted.
    pub async fn vacuum_retired(&self, retain: std::time::Duration) -> Result<usize> {
        let kv = self.kv_writer()?.clone();
        let _guard = self.commit_lock.lock().await;
        let now = tierdb_kv::lease::now_ms();
        let retain_ms = u64::try_from(retain.as_millis()).unwrap_or(u64::MAX);
        let held = crate::ddlundo::held(self.reader.as_ref()).await?.paths;
        let old: Vec<String> = catalog::list_retired(self.reader.as_ref())
            .await?
            .into_iter()
            .filter(|r| now.saturating_sub(r.retired_ms) >= retain_ms)
            .map(|r| r.path)
            .filter(|p| !held.contains(p))
            .collect();
        let mut b = CatalogBatch::default();
        for path in &old {
            match self.store.delete(&Path::from(path.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => b.forget_retired(path),
                Err(e) => return Err(TableError::Store(e)),
            }
        }
        if !b.batch.is_empty() {
            self.commit_catalog(&kv, b).await?;
        }
        Ok(old.len())
    }

    /// Deletes segment files that no commit references (an aborted load's, a dropped
    /// table's). Best effort: failures are logged.
    pub async fn discard(&self, segments: &[SegmentMeta]) {
        self.done_writing(segments);
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
    /// Segments of the table this write replaces (UPDATE, DELETE rewrote them): they leave
    /// it in the same commit, which fails if one of them already left.
    pub removed: Vec<SegmentMeta>,
}

/// What VACUUM deletes and keeps.
#[derive(Debug, Default, Clone)]
pub struct VacuumPlan {
    /// Unreferenced files old enough to delete.
    pub delete: Vec<VacuumFile>,
    /// Unreferenced files kept: still within the retention, or being written.
    pub kept: Vec<String>,
    /// Files some table references (never deleted).
    pub referenced: usize,
    /// Retirement records whose file is already gone.
    pub stale_records: Vec<String>,
}

impl VacuumPlan {
    pub fn bytes(&self) -> u64 {
        self.delete.iter().map(|f| f.bytes).sum()
    }
}

#[derive(Debug, Clone)]
pub struct VacuumFile {
    pub path: String,
    pub bytes: u64,
    /// Left the catalog by a commit (else: never committed).
    pub retired: bool,
    /// Since it was retired (or written, if never committed).
    pub age_ms: u64,
}

/// How a catalog commit failed: surely not committed, or with an unknown outcome.
enum CommitFailure {
    NotCommitted(TableError),
    Unknown(TableError),
}
