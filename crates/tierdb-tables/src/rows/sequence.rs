//! Sequences (`CREATE SEQUENCE`, `SERIAL`, `nextval`, `currval`, `setval`): numbers that are
//! never handed out twice, also across crashes and a writer take-over.
//!
//! A sequence is a catalog entry (`Tq` + name, [`SequenceDef`]) whose `last` is the highest
//! value that may have been handed out. Values are reserved in blocks of [`BLOCK`]: before
//! the first value of a block is handed out, `last` is moved to the block's end in a
//! durable KV commit; the block's values are then handed out from memory. A crash loses
//! the rest of the block (a gap, as PostgreSQL's sequences have), never repeats a value:
//! the next writer starts after `last`. As in PostgreSQL, sequences are not transactional:
//! a value handed out stays used when its transaction rolls back.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use serde::{Deserialize, Serialize};
use tierdb_kv::KvWrite;

use crate::error::{Result, TableError};
use crate::tables::Tables;

/// Values reserved per durable commit.
pub const BLOCK: i64 = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub name: String,
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    /// The highest value that may have been handed out; `None` before the first.
    pub last: Option<i64>,
    /// The table whose column draws from it (SERIAL): dropped with the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<String>,
    /// The column of `owned_by` that draws from it (`ALTER SEQUENCE … OWNED BY t.c`; a
    /// sequence made for a SERIAL column names it). Catalogs written before this field
    /// have none: [`SequenceDef::owner_column`] finds it by the table's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_column: Option<String>,
    /// When it was created (ms since the epoch; 0 for sequences created before this was
    /// kept): DROP SCHEMA … CASCADE names what it takes in the order it was made.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub created_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl SequenceDef {
    pub fn new(name: &str) -> Self {
        SequenceDef {
            name: name.to_string(),
            start: 1,
            increment: 1,
            min: 1,
            max: i64::MAX,
            last: None,
            owned_by: None,
            owned_column: None,
            created_ms: tierdb_kv::lease::now_ms(),
        }
    }

    /// The column of its owning table `def` that draws from it: the recorded one, or the
    /// one whose DEFAULT calls `nextval` of it.
    pub fn owner_column(&self, def: &crate::catalog::TableDef) -> Option<String> {
        if self.owned_by.as_deref() != Some(def.name.as_str()) {
            return None;
        }
        if let Some(c) = &self.owned_column {
            return Some(c.clone());
        }
        let call = format!("nextval('{}')", self.name);
        def.defaults
            .iter()
            .find(|(_, sql)| sql.contains(&call))
            .map(|(c, _)| c.clone())
    }

    /// PostgreSQL's name of the type its bounds fit (`CREATE SEQUENCE … AS`).
    pub fn type_name(&self) -> &'static str {
        if self.min >= i64::from(i16::MIN) && self.max <= i64::from(i16::MAX) {
            "smallint"
        } else if self.min >= i64::from(i32::MIN) && self.max <= i64::from(i32::MAX) {
            "integer"
        } else {
            "bigint"
        }
    }

    fn past_end(&self, v: i64) -> bool {
        v > self.max || v < self.min
    }
}

/// The values reserved in memory for one sequence: `next` up to `to`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    next: i64,
    to: i64,
    increment: i64,
}

/// The process's reserved blocks, by sequence name.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    reserved: parking_lot::Mutex<HashMap<String, Reserved>>,
    /// Serializes reserving blocks (one durable commit at a time per process).
    reserving: tokio::sync::Mutex<()>,
}

impl Sequences {
    fn take(&self, name: &str) -> Option<i64> {
        let mut r = self.reserved.lock();
        let b = r.get_mut(name)?;
        let done = if b.increment > 0 {
            b.next > b.to
        } else {
            b.next < b.to
        };
        if done {
            return None;
        }
        let v = b.next;
        b.next = b.next.saturating_add(b.increment);
        Some(v)
    }

    pub(crate) fn forget(&self, name: &str) {
        self.reserved.lock().remove(name);
    }

    /// The values reserved for sequence `from` are now `to`'s (a sequence moved to another
    /// schema: the same sequence under a new catalog name).
    pub(crate) fn rename(&self, from: &str, to: &str) {
        let mut reserved = self.reserved.lock();
        if let Some(r) = reserved.remove(from) {
            reserved.insert(to.to_string(), r);
        }
    }
}

fn no_sequence(name: &str) -> TableError {
    TableError::Column {
        code: "42P01",
        message: format!("relation \"{name}\" does not exist (no sequence of that name)"),
    }
}

impl Tables {
    pub async fn sequence(&self, name: &str) -> Result<Option<SequenceDef>> {
        crate::catalog::get_sequence(self.reader.as_ref(), name).await
    }

    /// Every sequence, by name.
    pub async fn sequences(&self) -> Result<Vec<SequenceDef>> {
        crate::catalog::list_sequences(self.reader.as_ref()).await
    }

    /// What `SELECT last_value, is_called FROM seq` answers: the last value handed out
    /// (by this process when it has handed some out; else the highest value any writer may
    /// have handed out, which is at most [`BLOCK`] − 1 past it), and whether one was.
    pub fn sequence_state(&self, def: &SequenceDef) -> (i64, bool) {
        if let Some(r) = self.sequences.reserved.lock().get(&def.name) {
            return (r.next.saturating_sub(r.increment), true);
        }
        match def.last {
            Some(l) => (l, true),
            None => (def.start, false),
        }
    }

    /// `ALTER SEQUENCE name OWNED BY table.column | NONE`.
    pub async fn set_sequence_owner(
        &self,
        name: &str,
        owner: Option<(String, String)>,
    ) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let mut def = self
            .sequence(name)
            .await?
            .ok_or_else(|| no_sequence(name))?;
        if let Some((table, column)) = &owner {
            let t = self
                .table(table)
                .await?
                .ok_or_else(|| TableError::NoTable(table.clone()))?;
            if t.column_index(column).is_none() {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!("column \"{column}\" of relation \"{table}\" does not exist"),
                });
            }
        }
        (def.owned_by, def.owned_column) = owner.unzip();
        let mut b = crate::catalog::CatalogBatch::default();
        b.put_sequence(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// Creates a sequence (`IF NOT EXISTS`: keeps one that exists).
    pub async fn create_sequence(&self, def: SequenceDef, if_not_exists: bool) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        self.require_namespace(&def.name).await?;
        if self.sequence(&def.name).await?.is_some() {
            if if_not_exists {
                return Ok(());
            }
            return Err(TableError::Column {
                code: "42P07",
                message: format!("relation \"{}\" already exists", def.name),
            });
        }
        if def.increment == 0 || def.min > def.max || def.past_end(def.start) {
            return Err(TableError::Column {
                code: "22023",
                message: format!(
                    "sequence {}: INCREMENT must not be zero and START ({}) must lie between \
                     MINVALUE ({}) and MAXVALUE ({})",
                    def.name, def.start, def.min, def.max
                ),
            });
        }
        let mut b = crate::catalog::CatalogBatch::default();
        b.put_sequence(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// Drops sequences; returns which existed.
    pub async fn drop_sequences(&self, names: &[String], if_exists: bool) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let mut b = crate::catalog::CatalogBatch::default();
        for n in names {
            if self.sequence(n).await?.is_none() {
                if if_exists {
                    continue;
                }
                return Err(no_sequence(n));
            }
            b.delete_sequence(n);
        }
        self.commit_catalog(kv, b).await?;
        for n in names {
            self.sequences.forget(n);
        }
        Ok(())
    }

    /// `nextval(name)`.
    pub async fn nextval(&self, name: &str) -> Result<i64> {
        if let Some(v) = self.sequences.take(name) {
            return Ok(v);
        }
        let _one = self.sequences.reserving.lock().await;
        if let Some(v) = self.sequences.take(name) {
            return Ok(v);
        }
        let kv = self.kv_writer()?;
        let mut def = self
            .sequence(name)
            .await?
            .ok_or_else(|| no_sequence(name))?;
        let next = match def.last {
            None => def.start,
            Some(l) => l
                .checked_add(def.increment)
                .unwrap_or(if def.increment > 0 {
                    i64::MAX
                } else {
                    i64::MIN
                }),
        };
        if def.past_end(next) || def.last == Some(next) {
            return Err(TableError::Column {
                code: "2200H",
                message: format!(
                    "nextval: reached {} value of sequence \"{name}\" ({})",
                    if def.increment > 0 {
                        "maximum"
                    } else {
                        "minimum"
                    },
                    if def.increment > 0 { def.max } else { def.min }
                ),
            });
        }
        let span = def.increment.saturating_mul(BLOCK - 1);
        let to = next.saturating_add(span).clamp(def.min, def.max);
        def.last = Some(to);
        let mut b = crate::catalog::CatalogBatch::default();
        b.put_sequence(&def);
        kv.commit(b.batch).await?;
        self.sequences.reserved.lock().insert(
            name.to_string(),
            Reserved {
                next: next.saturating_add(def.increment),
                to,
                increment: def.increment,
            },
        );
        Ok(next)
    }

    /// `setval(name, value, is_called)`.
    pub async fn setval(&self, name: &str, value: i64, is_called: bool) -> Result<i64> {
        let _one = self.sequences.reserving.lock().await;
        let kv = self.kv_writer()?;
        let mut def = self
            .sequence(name)
            .await?
            .ok_or_else(|| no_sequence(name))?;
        if def.past_end(value) {
            return Err(TableError::Column {
                code: "22003",
                message: format!(
                    "setval: value {value} is out of bounds for sequence \"{name}\" ({}..{})",
                    def.min, def.max
                ),
            });
        }
        def.last = if is_called {
            Some(value)
        } else {
            value.checked_sub(def.increment)
        };
        if !is_called && def.last.is_none() {
            def.start = value;
        }
        let mut b = crate::catalog::CatalogBatch::default();
        b.put_sequence(&def);
        kv.commit(b.batch).await?;
        self.sequences.forget(name);
        Ok(value)
    }
}

/// `plan` with the session's own sequence functions: row tables' DEFAULTs are planned with
/// shared ones, and `currval` must see the values the session's INSERTs drew.
pub fn bind_to_session(
    plan: datafusion::logical_expr::LogicalPlan,
    state: &datafusion::execution::SessionState,
) -> DfResult<datafusion::logical_expr::LogicalPlan> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::Expr;
    let Some(own) = state.scalar_functions().get("nextval").cloned() else {
        return Ok(plan);
    };
    plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::ScalarFunction(mut f)
                    if f.func.name() == "nextval" && !Arc::ptr_eq(&f.func, &own) =>
                {
                    f.func = own.clone();
                    Ok(Transformed::yes(Expr::ScalarFunction(f)))
                }
                e => Ok(Transformed::no(e)),
            })
        })
    })
    .map(|t| t.data)
}

/// The sequence functions of one session (`currval` is the session's last `nextval`).
pub fn functions(tables: &Arc<Tables>) -> Vec<ScalarUDF> {
    functions_resolving(tables, None)
}

/// How a session finds the sequence an unqualified name means (its search path).
pub type Resolve = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// [`functions`] whose unqualified sequence names `resolve` qualifies.
pub fn functions_resolving(tables: &Arc<Tables>, resolve: Option<Resolve>) -> Vec<ScalarUDF> {
    let last = Arc::new(parking_lot::Mutex::new(HashMap::new()));
    [Which::Next, Which::Curr, Which::Set]
        .into_iter()
        .map(|which| {
            ScalarUDF::new_from_impl(SeqFn {
                which,
                tables: tables.clone(),
                last: last.clone(),
                signature: signature(which),
                resolve: resolve.clone(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Which {
    Next,
    Curr,
    Set,
}

fn signature(which: Which) -> Signature {
    let text = DataType::Utf8;
    let types = match which {
        Which::Next | Which::Curr => vec![TypeSignature::Exact(vec![text])],
        Which::Set => vec![
            TypeSignature::Exact(vec![text.clone(), DataType::Int64]),
            TypeSignature::Exact(vec![text, DataType::Int64, DataType::Boolean]),
        ],
    };
    Signature::one_of(types, Volatility::Volatile)
}

struct SeqFn {
    which: Which,
    tables: Arc<Tables>,
    last: Arc<parking_lot::Mutex<HashMap<String, i64>>>,
    signature: Signature,
    resolve: Option<Resolve>,
}

impl std::fmt::Debug for SeqFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqFn").field("which", &self.which).finish()
    }
}

impl PartialEq for SeqFn {
    fn eq(&self, o: &Self) -> bool {
        self.which == o.which && Arc::ptr_eq(&self.last, &o.last)
    }
}
impl Eq for SeqFn {}
impl std::hash::Hash for SeqFn {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.which.hash(h);
    }
}

/// A sequence's catalog name as `nextval('…')` gives it (`s`, `schema.s`, `"Mixed".s`):
/// unquoted parts lower-cased, qualified as the catalog keys it ([`crate::sql::qualified`]).
fn sequence_name(arg: &str) -> String {
    // (part, whether any of it was quoted)
    let mut parts = vec![(String::new(), false)];
    let mut quoted = false;
    let mut chars = arg.trim().chars().peekable();
    while let Some(c) = chars.next() {
        let Some((part, was_quoted)) = parts.last_mut() else {
            break;
        };
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                part.push('"');
            }
            '"' => {
                quoted = !quoted;
                *was_quoted = true;
            }
            '.' if !quoted => parts.push((String::new(), false)),
            c => part.push(c),
        }
    }
    let parts: Vec<String> = parts
        .into_iter()
        .map(|(p, q)| if q { p } else { p.to_lowercase() })
        .collect();
    match parts.as_slice() {
        [.., schema, name] => crate::sql::qualified(schema, name),
        [name] => name.clone(),
        [] => String::new(),
    }
}

/// Runs `f` (a sequence operation) to completion from inside a synchronous function
/// evaluation: on a worker of a multi-threaded runtime, as servers and the command line run.
fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> DfResult<T> {
    let handle = tokio::runtime::Handle::try_current().map_err(|e| {
        DataFusionError::Execution(format!("sequence functions need a runtime: {e}"))
    })?;
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return Err(DataFusionError::NotImplemented(
            "sequence functions need a multi-threaded runtime".into(),
        ));
    }
    tokio::task::block_in_place(|| handle.block_on(f)).map_err(DataFusionError::from)
}

impl ScalarUDFImpl for SeqFn {
    fn name(&self) -> &str {
        match self.which {
            Which::Next => "nextval",
            Which::Curr => "currval",
            Which::Set => "setval",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<DfResult<_>>()?;
        let names = arrays[0]
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| DataFusionError::Execution("a sequence name must be text".into()))?;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let mut name = sequence_name(names.value(i));
            if let Some(resolve) = &self.resolve
                && !name.contains('.')
            {
                name = resolve(&name);
            }
            let v = match self.which {
                Which::Next => {
                    let v = match self.tables.sequences.take(&name) {
                        Some(v) => v,
                        None => block_on(self.tables.nextval(&name))?,
                    };
                    self.last.lock().insert(name, v);
                    v
                }
                Which::Curr => *self.last.lock().get(&name).ok_or_else(|| {
                    DataFusionError::from(TableError::Column {
                        code: "55000",
                        message: format!(
                            "currval of sequence \"{name}\" is not yet defined in this session"
                        ),
                    })
                })?,
                Which::Set => {
                    let value = ScalarValue::try_from_array(&arrays[1], i)?;
                    let ScalarValue::Int64(Some(value)) = value else {
                        out.push(None);
                        continue;
                    };
                    let called = match arrays.get(2) {
                        Some(a) => !matches!(
                            ScalarValue::try_from_array(a, i)?,
                            ScalarValue::Boolean(Some(false))
                        ),
                        None => true,
                    };
                    block_on(self.tables.setval(&name, value, called))?
                }
            };
            out.push(Some(v));
        }
        let array: ArrayRef = Arc::new(Int64Array::from(out));
        Ok(ColumnarValue::Array(array))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_as_postgresql_reads_them() {
        assert_eq!(sequence_name("public.t_id_seq"), "t_id_seq");
        assert_eq!(sequence_name("T_ID_SEQ"), "t_id_seq");
        assert_eq!(sequence_name("\"Mixed\""), "Mixed");
        assert_eq!(sequence_name("An.T_ID_SEQ"), "an.t_id_seq");
        assert_eq!(sequence_name("tierdb.an.s"), "an.s");
        assert_eq!(sequence_name("\"a\"\"b\".\"S\""), "a\"b.S");
    }
}
