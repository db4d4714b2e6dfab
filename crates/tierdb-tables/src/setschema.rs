//! Moving relations between schemas: `ALTER TABLE|VIEW|SEQUENCE … SET SCHEMA s` and
//! `ALTER SCHEMA a RENAME TO b` (`docs/design/schemas.md`).
//!
//! A relation's schema is part of its catalog name (`schemas.rs` invariant 2), so a move
//! is a rename of catalog records; rows, segments and index entries are keyed by the
//! table's id and stay where they are.
//!
//! Invariants:
//!
//! 1. One move is one atomic catalog commit: every record it changes, or none.
//! 2. A table takes with it what PostgreSQL moves with it: its indexes (and so its primary
//!    key's and UNIQUE constraints' names) and the sequences it owns (SERIAL, IDENTITY,
//!    `OWNED BY`), whose column DEFAULTs are written again to name them where they went.
//! 3. A name the move would give that a relation or index of the target schema has already
//!    fails with 42P07 and changes nothing; a schema that does not exist, 3F000; a system
//!    schema, as source or target, 42939/2BP01 as PostgreSQL says.
//! 4. A moved sequence keeps its state: its durable high-water mark moves in the same
//!    commit, and the block of values this process reserved is handed out under the new
//!    name (taken under the commit lock, after the commit), so no value is handed out twice
//!    and none is skipped.
//! 5. Views follow what they read: a view that reads a moved table or view is written again
//!    naming it where it went, in the same commit (`viewdeps.rs` invariant 2), as
//!    PostgreSQL's views follow by OID.

use std::collections::{HashMap, HashSet};

use crate::catalog::{CatalogBatch, TableDef};
use crate::error::{Result, TableError};
use crate::rows::sequence::SequenceDef;
use crate::schemas::is_system;
use crate::sql::{SCHEMA, qualified, split_qualified};
use crate::tables::Tables;

/// What `ALTER … SET SCHEMA` moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationKind {
    Table,
    View,
    Sequence,
}

fn missing_schema(name: &str) -> TableError {
    TableError::Column {
        code: "3F000",
        message: format!("schema \"{name}\" does not exist"),
    }
}

/// `name` (a catalog name) in schema `schema`.
fn moved(name: &str, schema: &str) -> String {
    qualified(schema, split_qualified(name).1)
}

/// The catalog records one move changes, and the names it takes.
#[derive(Default)]
struct Moves {
    batch: CatalogBatch,
    /// Names (relations and indexes) the moved relations take.
    taken: Vec<String>,
    /// Sequences moved: (old name, new name) (invariant 4).
    sequences: Vec<(String, String)>,
    /// Tables and views moved: old name → new name (invariant 5).
    relations: HashMap<String, String>,
}

impl Moves {
    /// Table `def` and what goes with it (invariant 2) into `schema`.
    fn table(&mut self, def: &TableDef, owned: &[SequenceDef], schema: &str) {
        let mut new = def.clone();
        new.name = moved(&def.name, schema);
        if new.is_row_table() {
            self.taken.push(format!("{}_pkey", new.name));
        }
        for index in &mut new.indexes {
            index.name = moved(&index.name, schema);
            self.taken.push(index.name.clone());
        }
        for seq in owned {
            let mut s = seq.clone();
            s.name = moved(&seq.name, schema);
            s.owned_by = Some(new.name.clone());
            let quote = |n: &str| format!("'{}'", n.replace('\'', "''"));
            for (_, sql) in &mut new.defaults {
                *sql = sql.replace(&quote(&seq.name), &quote(&s.name));
            }
            self.batch.delete_sequence(&seq.name);
            self.batch.put_sequence(&s);
            self.taken.push(s.name.clone());
            self.sequences.push((seq.name.clone(), s.name.clone()));
        }
        self.batch.delete_table(&def.name);
        self.batch.put_table(&new);
        self.relations.insert(def.name.clone(), new.name.clone());
        self.taken.push(new.name);
    }

    fn sequence(&mut self, seq: &SequenceDef, schema: &str) {
        let mut s = seq.clone();
        s.name = moved(&seq.name, schema);
        self.batch.delete_sequence(&seq.name);
        self.batch.put_sequence(&s);
        self.sequences.push((seq.name.clone(), s.name.clone()));
        self.taken.push(s.name);
    }

    /// View `view` into `schema`: written under its new name when the move commits
    /// ([`crate::viewdeps::follow`], with the views that read what moved).
    fn view(&mut self, view: &crate::views::ViewDef, schema: &str) {
        let name = moved(&view.name, schema);
        self.relations.insert(view.name.clone(), name.clone());
        self.taken.push(name);
    }
}

impl Tables {
    /// Every relation and index name of the catalog now.
    async fn names_in_use(&self) -> Result<HashSet<String>> {
        let mut names = HashSet::new();
        for t in self.tables().await? {
            if t.is_row_table() {
                names.insert(format!("{}_pkey", t.name));
            }
            names.extend(t.indexes.iter().map(|i| i.name.clone()));
            names.insert(t.name);
        }
        names.extend(self.views().await?.into_iter().map(|v| v.name));
        names.extend(self.sequences().await?.into_iter().map(|s| s.name));
        Ok(names)
    }

    /// Invariants 1 and 3: commits `moves` unless a name it takes is in use.
    async fn commit_moves(
        &self,
        kv: &tierdb_kv::KvDb,
        moves: Moves,
        in_use: &HashSet<String>,
        schema: &str,
    ) -> Result<()> {
        if let Some(name) = moves.taken.iter().find(|n| in_use.contains(*n)) {
            return Err(TableError::Column {
                code: "42P07",
                message: format!(
                    "relation \"{}\" already exists in schema \"{schema}\"",
                    split_qualified(name).1
                ),
            });
        }
        let mut batch = moves.batch;
        crate::viewdeps::follow(&self.views().await?, &moves.relations, &mut batch);
        self.commit_catalog(kv, batch).await?;
        for (from, to) in &moves.sequences {
            self.sequences.rename(from, to);
        }
        Ok(())
    }

    fn check_target(&self, schema: &str) -> Result<()> {
        if is_system(schema) && schema != SCHEMA {
            return Err(TableError::Column {
                code: "42939",
                message: format!("cannot move objects into or out of system schema \"{schema}\""),
            });
        }
        Ok(())
    }

    /// `ALTER TABLE|VIEW|SEQUENCE name SET SCHEMA schema`; returns whether `name` existed
    /// (`false` only with `if_exists`).
    pub async fn set_schema(
        &self,
        kind: RelationKind,
        name: &str,
        schema: &str,
        if_exists: bool,
    ) -> Result<bool> {
        self.check_target(schema)?;
        let kv = self.kv_writer()?;
        // As ALTER TABLE takes them: no row commit runs meanwhile.
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        if schema != SCHEMA && self.schema_def(schema).await?.is_none() {
            return Err(missing_schema(schema));
        }
        let mut moves = Moves::default();
        match kind {
            RelationKind::Table => match self.table(name).await? {
                Some(def) => {
                    let owned: Vec<SequenceDef> = self
                        .sequences()
                        .await?
                        .into_iter()
                        .filter(|s| s.owned_by.as_deref() == Some(name))
                        .collect();
                    moves.table(&def, &owned, schema);
                }
                None if if_exists => return Ok(false),
                None => return Err(TableError::NoTable(name.to_string())),
            },
            RelationKind::View => match self.view(name).await? {
                Some(v) => moves.view(&v, schema),
                None if if_exists => return Ok(false),
                None => return Err(TableError::NoTable(format!("{name} (no such view)"))),
            },
            RelationKind::Sequence => match self.sequence(name).await? {
                Some(s) if s.owned_by.is_some() => {
                    return Err(TableError::Column {
                        code: "0A000",
                        message: format!(
                            "cannot move an owned sequence into another schema: sequence \
                             \"{name}\" is linked to table \"{}\"; move the table",
                            s.owned_by.unwrap_or_default()
                        ),
                    });
                }
                Some(s) => moves.sequence(&s, schema),
                None if if_exists => return Ok(false),
                None => {
                    return Err(TableError::Column {
                        code: "42P01",
                        message: format!("relation \"{name}\" does not exist"),
                    });
                }
            },
        }
        let in_use = self.names_in_use().await?;
        if split_qualified(name).0 == schema {
            return Ok(true); // already there: nothing to change, as PostgreSQL
        }
        self.commit_moves(kv, moves, &in_use, schema).await?;
        Ok(true)
    }

    /// `ALTER SCHEMA from RENAME TO to`: the schema's record and every relation in it, in
    /// one commit.
    pub async fn rename_schema(&self, from: &str, to: &str) -> Result<()> {
        for s in [from, to] {
            if is_system(s) {
                return Err(TableError::Column {
                    code: "42939",
                    message: format!(
                        "unacceptable schema name \"{s}\": the prefix \"pg_\" and the names \
                         public, information_schema and zodb are the system's"
                    ),
                });
            }
        }
        crate::sql::check_new_name("schema", to)?;
        let kv = self.kv_writer()?;
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        let Some(mut def) = self.schema_def(from).await? else {
            return Err(missing_schema(from));
        };
        if self.schema_def(to).await?.is_some() {
            return Err(TableError::Column {
                code: "42P06",
                message: format!("schema \"{to}\" already exists"),
            });
        }
        let inside = |n: &str| n.contains('.') && split_qualified(n).0 == from;
        let mut moves = Moves::default();
        let sequences = self.sequences().await?;
        for t in self.tables().await?.iter().filter(|t| inside(&t.name)) {
            let owned: Vec<SequenceDef> = sequences
                .iter()
                .filter(|s| s.owned_by.as_deref() == Some(t.name.as_str()))
                .cloned()
                .collect();
            moves.table(t, &owned, to);
        }
        for s in sequences.iter().filter(|s| inside(&s.name)) {
            // Owned ones moved with their tables (an owned sequence is in its table's
            // schema unless moved by ALTER SEQUENCE, which is refused).
            if s.owned_by.as_deref().is_some_and(inside) {
                continue;
            }
            moves.sequence(s, to);
        }
        for v in self.views().await?.iter().filter(|v| inside(&v.name)) {
            moves.view(v, to);
        }
        moves.batch.delete_schema(from);
        def.name = to.to_string();
        moves.batch.put_schema(&def);
        // Schema `to` does not exist, so nothing holds its names.
        self.commit_moves(kv, moves, &HashSet::new(), to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_name_keeps_its_own_part() {
        assert_eq!(moved("t", "an"), "an.t");
        assert_eq!(moved("an.t", "public"), "t");
        assert_eq!(moved("an.t", "b"), "b.t");
    }
}
