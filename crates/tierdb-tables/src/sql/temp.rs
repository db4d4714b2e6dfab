//! Temporary tables: `CREATE TEMP[ORARY] TABLE`, kept in the memory of the session that
//! created them and gone when it ends.
//!
//! 1. **Seen by their session only, before stored tables.** Each session's catalog has its
//!    own `public` schema ([`SessionSchema`]): a name is looked up among the session's
//!    temporary tables first, then among the stored tables, as PostgreSQL searches
//!    `pg_temp` first; `pg_temp.name` names a temporary table explicitly. They are not in
//!    the stored catalog, the Delta log or `pg_class`.
//! 2. **In memory, within the query memory budget.** Rows are DataFusion `MemTable`
//!    batches; their size is reserved from the session's memory pool after every statement
//!    that wrote one. A statement that would go past the pool fails with 53200 and leaves
//!    the tables as they were before it.
//! 3. **Transactional.** ROLLBACK (also of an aborted or implicit transaction) puts the
//!    temporary tables back as they were before the transaction's first change to them;
//!    ROLLBACK TO SAVEPOINT as they were at the savepoint; a failed statement as before it.
//!    Snapshots share the batches (`Arc`), so they cost a list, not a copy.
//! 4. **What is refused** (0A000, nothing changed): constraints, SERIAL, `ON COMMIT DROP |
//!    DELETE ROWS`, ALTER TABLE, and UPDATE/DELETE with a subquery, `FROM` or `USING`
//!    (temporary tables are written through DataFusion's own DML, which evaluates a WHERE
//!    row by row: issue 26's rewrite is for stored tables). Declared lengths (`VARCHAR(n)`)
//!    are not enforced on them.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ObjectName, Statement, Visit, Visitor};
use futures::StreamExt;
use parking_lot::Mutex;

use crate::error::{Result, TableError};
use crate::provider::TierSchema;

/// The schema name that names temporary tables explicitly.
pub const TEMP_SCHEMA: &str = "pg_temp";

/// One table's rows as of a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Saved {
    schema: SchemaRef,
    defaults: std::collections::HashMap<String, datafusion::prelude::Expr>,
    batches: Vec<RecordBatch>,
}

/// Every temporary table's rows at one moment (they share the batches).
pub(crate) type Snapshot = BTreeMap<String, Saved>;

/// A session's temporary tables (invariant 1), with the snapshots ROLLBACK returns to.
#[derive(Debug)]
pub struct TempTables {
    tables: Mutex<BTreeMap<String, (Arc<MemTable>, Saved)>>,
    /// Taken before the transaction's first change (invariant 3).
    in_transaction: Mutex<Option<Snapshot>>,
    savepoints: Mutex<Vec<(String, Snapshot)>>,
    reservation: Mutex<MemoryReservation>,
}

impl TempTables {
    pub fn new(pool: &Arc<dyn MemoryPool>) -> Self {
        TempTables {
            tables: Default::default(),
            in_transaction: Default::default(),
            savepoints: Default::default(),
            reservation: Mutex::new(MemoryConsumer::new("temporary tables").register(pool)),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.tables.lock().contains_key(name)
    }

    pub fn is_empty(&self) -> bool {
        self.tables.lock().is_empty()
    }

    fn names(&self) -> Vec<String> {
        self.tables.lock().keys().cloned().collect()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.tables
            .lock()
            .get(name)
            .map(|(t, _)| t.clone() as Arc<dyn TableProvider>)
    }

    /// Whether `stmt` names one of these tables anywhere (then it must not take a path that
    /// reads the stored catalog by name, such as the key-lookup short path).
    pub fn named_in(&self, stmt: &DfStatement) -> bool {
        if self.is_empty() {
            return false;
        }
        let DfStatement::Statement(s) = stmt else {
            return false;
        };
        // sqlparser's relation visitor does not visit DROP's names.
        if let datafusion::sql::sqlparser::ast::Statement::Drop {
            object_type: datafusion::sql::sqlparser::ast::ObjectType::Table,
            names,
            ..
        } = s.as_ref()
        {
            return names.iter().any(|n| self.resolve(n).is_some());
        }
        let mut found = false;
        let _ = s.visit(&mut RelationVisitor(|name: &ObjectName| {
            if self.resolve(name).is_some() {
                found = true;
            }
        }));
        found
    }

    /// The temporary table `name` refers to (`t` or `pg_temp.t`), if any.
    pub fn resolve(&self, name: &ObjectName) -> Option<String> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| p.as_ident().map(super::ident_name))
            .collect::<Option<_>>()?;
        let table = match parts.as_slice() {
            [t] => t,
            [s, t] if s == TEMP_SCHEMA || s == super::SCHEMA => t,
            _ => return None,
        };
        self.has(table).then(|| table.clone())
    }

    /// Creates the empty table `name`.
    pub async fn create(
        &self,
        name: &str,
        schema: SchemaRef,
        defaults: std::collections::HashMap<String, datafusion::prelude::Expr>,
    ) -> Result<()> {
        let saved = Saved {
            schema,
            defaults,
            batches: Vec::new(),
        };
        let mut tables = self.tables.lock();
        if tables.contains_key(name) {
            return Err(TableError::TableExists(name.to_string()));
        }
        tables.insert(name.to_string(), (Arc::new(table_of(&saved)?), saved));
        Ok(())
    }

    /// Appends the rows of `rows` to table `name` (all of them or, on an error, none),
    /// reserving their memory batch by batch (invariant 2): a statement cannot fill the
    /// machine before it is stopped. NOT NULL columns refuse NULLs (23502).
    pub async fn append(&self, name: &str, mut rows: SendableRecordBatchStream) -> Result<u64> {
        let Some((table, saved)) = self.tables.lock().get(name).cloned() else {
            return Err(TableError::NoTable(name.to_string()));
        };
        let mut batches = Vec::new();
        let mut n = 0u64;
        while let Some(batch) = rows.next().await {
            let batch = batch?;
            for (i, f) in saved.schema.fields().iter().enumerate() {
                if !f.is_nullable() && batch.column(i).null_count() > 0 {
                    return Err(not_null(f.name(), name));
                }
            }
            let batch = RecordBatch::try_new(table.schema(), batch.columns().to_vec())?;
            self.reservation
                .lock()
                .try_grow(batch.get_array_memory_size())?;
            n += batch.num_rows() as u64;
            batches.push(batch);
        }
        table.batches[0].write().await.extend(batches);
        Ok(n)
    }

    /// Removes `name`; whether it was there.
    pub fn drop_table(&self, name: &str) -> bool {
        self.tables.lock().remove(name).is_some()
    }

    /// Empties `name`.
    pub fn truncate(&self, name: &str) -> Result<()> {
        let mut tables = self.tables.lock();
        if let Some((t, saved)) = tables.get_mut(name) {
            saved.batches.clear();
            *t = Arc::new(table_of(saved)?);
        }
        Ok(())
    }

    /// The state to go back to if the statement about to change these tables fails; in a
    /// transaction, also remembered as the transaction's starting point if it has none.
    pub async fn before_change(&self, in_transaction: bool) -> Snapshot {
        let now = self.snapshot().await;
        if in_transaction {
            self.in_transaction
                .lock()
                .get_or_insert_with(|| now.clone());
        }
        now
    }

    /// After a statement that changed these tables: reserves their memory (invariant 2),
    /// or, if the pool refuses, goes back to `before` and fails with 53200.
    pub async fn after_change(&self, before: Snapshot) -> Result<()> {
        let now = self.snapshot().await;
        // An UPDATE (DataFusion's own) may have set a NOT NULL column to NULL.
        for (name, saved) in &now {
            for (i, f) in saved.schema.fields().iter().enumerate() {
                if !f.is_nullable() && saved.batches.iter().any(|b| b.column(i).null_count() > 0) {
                    self.failed_change(before).await?;
                    return Err(not_null(f.name(), name));
                }
            }
        }
        let bytes: usize = now
            .values()
            .flat_map(|s| &s.batches)
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let grown = self.reservation.lock().try_resize(bytes);
        if let Err(e) = grown {
            self.failed_change(before).await?;
            return Err(TableError::DataFusion(e));
        }
        Ok(())
    }

    /// After a statement that failed: the tables as `before` has them, and the memory
    /// reserved for them no more than they hold.
    pub async fn failed_change(&self, before: Snapshot) -> Result<()> {
        self.restore(before)?;
        let bytes: usize = self
            .snapshot()
            .await
            .values()
            .flat_map(|s| &s.batches)
            .map(RecordBatch::get_array_memory_size)
            .sum();
        self.reservation.lock().resize(bytes);
        Ok(())
    }

    /// Puts the tables back as `snapshot` has them.
    pub fn restore(&self, snapshot: Snapshot) -> Result<()> {
        let mut next = BTreeMap::new();
        for (name, saved) in snapshot {
            next.insert(name, (Arc::new(table_of(&saved)?), saved));
        }
        *self.tables.lock() = next;
        Ok(())
    }

    async fn snapshot(&self) -> Snapshot {
        let tables: Vec<(String, Arc<MemTable>, Saved)> = self
            .tables
            .lock()
            .iter()
            .map(|(n, (t, s))| (n.clone(), t.clone(), s.clone()))
            .collect();
        let mut out = BTreeMap::new();
        for (name, table, mut saved) in tables {
            let mut batches = Vec::new();
            for p in &table.batches {
                batches.extend(p.read().await.iter().cloned());
            }
            saved.batches = batches;
            out.insert(name, saved);
        }
        out
    }

    /// The transaction ended: committed (`keep`) or rolled back (invariant 3).
    pub fn end_transaction(&self, keep: bool) -> Result<()> {
        self.savepoints.lock().clear();
        if let Some(before) = self.in_transaction.lock().take()
            && !keep
        {
            self.restore(before)?;
        }
        Ok(())
    }

    pub async fn savepoint(&self, name: &str) {
        let now = self.before_change(true).await;
        self.savepoints.lock().push((name.to_string(), now));
    }

    pub fn release(&self, name: &str) {
        let mut sp = self.savepoints.lock();
        if let Some(i) = sp.iter().rposition(|(n, _)| n == name) {
            sp.truncate(i);
        }
    }

    pub fn rollback_to(&self, name: &str) -> Result<()> {
        let snapshot = {
            let mut sp = self.savepoints.lock();
            let Some(i) = sp.iter().rposition(|(n, _)| n == name) else {
                return Ok(());
            };
            sp.truncate(i + 1);
            sp[i].1.clone()
        };
        self.restore(snapshot)
    }
}

fn not_null(column: &str, table: &str) -> TableError {
    TableError::Column {
        code: "23502",
        message: format!(
            "null value in column \"{column}\" of relation \"{table}\" violates not-null \
             constraint"
        ),
    }
}

/// The table DataFusion reads and writes: every column nullable as DataFusion sees it, so
/// NOT NULL is checked by `TempTables::append` with PostgreSQL's 23502 naming the column.
fn table_of(saved: &Saved) -> Result<MemTable> {
    let fields: Vec<_> = saved
        .schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
    Ok(MemTable::try_new(schema, vec![saved.batches.clone()])?
        .with_column_defaults(saved.defaults.clone()))
}

/// Refuses what temporary tables do not support in an UPDATE or DELETE (invariant 4).
pub fn check_dml(stmt: &Statement) -> Result<()> {
    let refuse = |what: &str| {
        Err(TableError::Unsupported(format!(
            "{what} in an UPDATE or DELETE of a temporary table is not supported; \
             write the rows to change into the WHERE without it"
        )))
    };
    match stmt {
        Statement::Update(u) if u.from.is_some() => return refuse("FROM"),
        Statement::Delete(d) if d.using.is_some() => return refuse("USING"),
        _ => {}
    }
    let mut sub = false;
    let _ = stmt.visit(&mut SubqueryVisitor(&mut sub));
    if sub {
        return refuse("a subquery");
    }
    Ok(())
}

struct SubqueryVisitor<'a>(&'a mut bool);

impl Visitor for SubqueryVisitor<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &SqlExpr) -> ControlFlow<()> {
        if matches!(
            e,
            SqlExpr::Subquery(_) | SqlExpr::InSubquery { .. } | SqlExpr::Exists { .. }
        ) {
            *self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

struct RelationVisitor<F>(F);

impl<F: FnMut(&ObjectName)> Visitor for RelationVisitor<F> {
    type Break = ();
    fn pre_visit_relation(&mut self, r: &ObjectName) -> ControlFlow<()> {
        (self.0)(r);
        ControlFlow::Continue(())
    }
}

/// A session's `public` schema: its temporary tables first, then the stored ones
/// (invariant 1).
#[derive(Debug)]
pub struct SessionSchema {
    pub(crate) stored: Arc<TierSchema>,
    pub(crate) temp: Arc<TempTables>,
}

#[async_trait]
impl SchemaProvider for SessionSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.temp.names();
        names.extend(self.stored.table_names());
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.temp.get(name) {
            return Ok(Some(t));
        }
        // A dotted name is another schema's relation (`sql/namespaces.rs`), not public's.
        if name.contains('.') {
            return Ok(None);
        }
        self.stored.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.temp.has(name) || (!name.contains('.') && self.stored.table_exist(name))
    }
}

/// `pg_temp`: the session's temporary tables only.
#[derive(Debug)]
pub struct TempSchema(pub(crate) Arc<TempTables>);

#[async_trait]
impl SchemaProvider for TempSchema {
    fn table_names(&self) -> Vec<String> {
        self.0.names()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.0.get(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.0.has(name)
    }
}
