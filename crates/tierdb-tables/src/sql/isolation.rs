//! Isolation levels as PostgreSQL clients ask for them: `BEGIN ISOLATION LEVEL …`, `SET
//! TRANSACTION ISOLATION LEVEL …` (before the transaction's first query), `SET SESSION
//! CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL …` (pgjdbc's `setTransactionIsolation`)
//! and `SHOW transaction_isolation`.
//!
//! READ UNCOMMITTED is READ COMMITTED (as in PostgreSQL); REPEATABLE READ is snapshot
//! isolation (`txn.rs`); SERIALIZABLE is refused (0A000) rather than given as something
//! weaker.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Set, Statement as SqlStatement, TransactionIsolationLevel as Level, TransactionMode,
};

use super::SqlSession;
use super::session::Outcome;
use crate::error::{Result, TableError};
use crate::txn::Isolation;

/// The isolation level `modes` ask for, if any.
pub(crate) fn requested(modes: &[TransactionMode]) -> Result<Option<Isolation>> {
    let mut out = None;
    for m in modes {
        if let TransactionMode::IsolationLevel(l) = m {
            out = Some(match l {
                Level::ReadUncommitted | Level::ReadCommitted => Isolation::ReadCommitted,
                Level::RepeatableRead | Level::Snapshot => Isolation::RepeatableRead,
                Level::Serializable => {
                    return Err(TableError::Unsupported(
                        "SERIALIZABLE is not supported by tierdb; REPEATABLE READ (snapshot \
                         isolation: a row another transaction changed since the snapshot \
                         cannot be changed, 40001) is the strongest level it gives"
                            .into(),
                    ));
                }
            });
        }
    }
    Ok(out)
}

impl SqlSession {
    /// `BEGIN ISOLATION LEVEL …`: the level of the transaction just begun.
    pub(super) fn begin_modes(&self, stmt: &DfStatement) -> Result<()> {
        if let DfStatement::Statement(s) = stmt
            && let SqlStatement::StartTransaction { modes, .. } = s.as_ref()
            && let Some(level) = requested(modes)?
            && let Some(tx) = self.transaction()
        {
            tx.set_isolation(level)?;
        }
        Ok(())
    }

    /// `SET [SESSION CHARACTERISTICS AS] TRANSACTION ISOLATION LEVEL …`; `None` for other
    /// statements.
    pub(super) fn set_transaction(&self, stmt: &DfStatement) -> Result<Option<Outcome>> {
        let DfStatement::Statement(s) = stmt else {
            return Ok(None);
        };
        let SqlStatement::Set(Set::SetTransaction { modes, session, .. }) = s.as_ref() else {
            return Ok(None);
        };
        self.set_transaction_modes(modes, *session)?;
        Ok(Some(Outcome::Command("SET".into())))
    }

    /// The modes of a SET TRANSACTION (`session`: SET SESSION CHARACTERISTICS AS …).
    pub fn set_transaction_modes(&self, modes: &[TransactionMode], session: bool) -> Result<()> {
        let Some(level) = requested(modes)? else {
            return Ok(());
        };
        if session {
            self.abort.slot.set_default_isolation(level);
            return Ok(());
        }
        match self.transaction() {
            Some(tx) => tx.set_isolation(level),
            None => {
                self.notice(
                    "25P01",
                    "SET TRANSACTION can only be used in transaction blocks",
                );
                Ok(())
            }
        }
    }

    /// The level new transactions start with.
    pub fn default_isolation(&self) -> Isolation {
        self.abort.slot.default_isolation()
    }

    /// The isolation level of the open transaction, or of the next one.
    pub fn isolation(&self) -> Isolation {
        match self.transaction() {
            Some(tx) => tx.isolation(),
            None => self.abort.slot.default_isolation(),
        }
    }
}
