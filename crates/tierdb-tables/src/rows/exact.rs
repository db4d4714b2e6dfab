//! Key filters a row table's scan answers exactly, so that DataFusion plans no filter over
//! it: `WHERE id BETWEEN $1 AND $2` on a table keyed by `id` is one key range read, and
//! the physical plan (a tenth of the server's CPU under sysbench's range selects, much of
//! it the filter's statistics and properties) has one node fewer.
//!
//! Invariants:
//!
//! 1. A filter is exact only if it compares the table's primary key, one column of an
//!    integer type (SMALLINT, INT, BIGINT: their key encoding orders as the values do and
//!    every value has one encoding), with a literal or a typed parameter of that same type,
//!    by `=`, `<`, `<=`, `>` or `>=` (either side). Anything else stays inexact: DataFusion
//!    filters the rows again.
//! 2. A scan honors every exact filter it is given, whatever access path it takes (key
//!    points, key ranges, an index): [`Within`] is the intersection of all of them, and the
//!    scan drops every key outside it before it reads the row or a LIMIT counts it. A NULL
//!    value matches no row (`id = NULL` is never true), so such a scan reads nothing.
//! 3. Whether a filter is exact depends on that filter alone (DataFusion asks about newly
//!    pushed filters only, on a scan that may hold others already).

use std::ops::Bound;

use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use super::keys;
use super::provider::split_and;
use super::table_prefix;
use crate::catalog::{ColumnType, TableDef};
use crate::error::{Result, TableError};

/// The keys every exact filter of a scan allows (invariant 2).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Within {
    /// No exact filter.
    Any,
    /// The exact filters contradict each other, or one compares with NULL.
    Nothing,
    /// Keys in this range.
    Keys(Bound<Bytes>, Bound<Bytes>),
}

impl Within {
    /// Whether `key` (a whole row key of the table) is allowed.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        match self {
            Within::Any => true,
            Within::Nothing => false,
            Within::Keys(lo, hi) => {
                let above = match lo {
                    Bound::Included(b) => key >= b.as_ref(),
                    Bound::Excluded(b) => key > b.as_ref(),
                    Bound::Unbounded => true,
                };
                let below = match hi {
                    Bound::Included(b) => key <= b.as_ref(),
                    Bound::Excluded(b) => key < b.as_ref(),
                    Bound::Unbounded => true,
                };
                above && below
            }
        }
    }
}

/// A bound on an integer key: the value, and whether it is included.
type IntBound = (i64, bool);

/// The primary key column's name and type, if it is one integer column (invariant 1).
fn integer_key(def: &TableDef) -> Option<(&str, ColumnType)> {
    let [name] = def.primary_key.as_slice() else {
        return None;
    };
    let ty = def.columns.get(def.column_index(name)?)?.ty;
    matches!(
        ty,
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64
    )
    .then_some((name.as_str(), ty))
}

/// `f` as (operator, value side) with the key column on the left, if it is an exact filter.
fn exact_parts<'a>(def: &TableDef, f: &'a Expr) -> Option<(Operator, &'a Expr, ColumnType)> {
    let (key, ty) = integer_key(def)?;
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = f else {
        return None;
    };
    let is_key = |e: &Expr| matches!(e, Expr::Column(c) if c.name == key);
    let (op, value) = if is_key(left) {
        (*op, right.as_ref())
    } else if is_key(right) {
        (op.swap()?, left.as_ref())
    } else {
        return None;
    };
    if !matches!(
        op,
        Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
    ) {
        return None;
    }
    let typed = match value {
        Expr::Literal(v, _) => v.is_null() || v.data_type() == ty.arrow(),
        Expr::Placeholder(p) => p
            .field
            .as_ref()
            .is_some_and(|f| *f.data_type() == ty.arrow()),
        _ => false,
    };
    typed.then_some((op, value, ty))
}

/// Whether the scan of `def` answers `f` exactly (invariants 1 and 3).
pub(crate) fn is_exact(def: &TableDef, f: &Expr) -> bool {
    exact_parts(def, f).is_some()
}

/// The keys the exact filters among `filters` allow (invariant 2).
pub(crate) fn within(def: &TableDef, filters: &[Expr]) -> Result<Within> {
    let mut conjuncts = Vec::new();
    for f in filters {
        split_and(f, &mut conjuncts);
    }
    // Bounds as (value, inclusive), compared as i64 (every integer key type fits).
    let (mut lo, mut hi): (Option<IntBound>, Option<IntBound>) = (None, None);
    let mut ty = None;
    for f in conjuncts {
        // An exact filter the optimizer simplified again after pushing it down: `id =
        // NULL` (a NULL parameter bound into `id = $1`, or `id IN (NULL)`) becomes the
        // literal NULL, which is never true. Skipping it as not exact read every row, and
        // a DELETE deleted them all.
        if let Expr::Literal(v, _) = f
            && (v.is_null() || *v == ScalarValue::Boolean(Some(false)))
        {
            return Ok(Within::Nothing);
        }
        let Some((op, value, t)) = exact_parts(def, f) else {
            continue;
        };
        ty = Some(t);
        let v = match value {
            Expr::Literal(v, _) => v,
            _ => {
                return Err(TableError::Schema(format!(
                    "a parameter of a filter on {}'s key was not bound",
                    def.name
                )));
            }
        };
        let v = match v {
            ScalarValue::Int16(Some(i)) => i64::from(*i),
            ScalarValue::Int32(Some(i)) => i64::from(*i),
            ScalarValue::Int64(Some(i)) => *i,
            _ => return Ok(Within::Nothing), // NULL: never true
        };
        let mut raise = |b: (i64, bool)| {
            if lo.is_none_or(|l| b.0 > l.0 || (b.0 == l.0 && !b.1)) {
                lo = Some(b);
            }
        };
        match op {
            Operator::Gt => raise((v, false)),
            Operator::GtEq | Operator::Eq => raise((v, true)),
            _ => {}
        }
        let mut lower = |b: (i64, bool)| {
            if hi.is_none_or(|h| b.0 < h.0 || (b.0 == h.0 && !b.1)) {
                hi = Some(b);
            }
        };
        match op {
            Operator::Lt => lower((v, false)),
            Operator::LtEq | Operator::Eq => lower((v, true)),
            _ => {}
        }
    }
    let Some(ty) = ty else {
        return Ok(Within::Any);
    };
    if let (Some(l), Some(h)) = (lo, hi)
        && (l.0 > h.0 || (l.0 == h.0 && !(l.1 && h.1)))
    {
        return Ok(Within::Nothing);
    }
    let key = |v: i64| -> Result<Bytes> {
        let value = match ty {
            ColumnType::Int16 => ScalarValue::Int16(Some(v as i16)),
            ColumnType::Int32 => ScalarValue::Int32(Some(v as i32)),
            _ => ScalarValue::Int64(Some(v)),
        };
        let mut k = table_prefix(def.id);
        keys::encode(&mut k, ty, &value, false)?;
        Ok(Bytes::from(k))
    };
    let bound = |b: Option<IntBound>| -> Result<Bound<Bytes>> {
        Ok(match b {
            None => Bound::Unbounded,
            Some((v, true)) => Bound::Included(key(v)?),
            Some((v, false)) => Bound::Excluded(key(v)?),
        })
    };
    Ok(Within::Keys(bound(lo)?, bound(hi)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    fn def(ty: ColumnType) -> TableDef {
        let column = |name: &str, ty| crate::catalog::ColumnDef {
            name: name.into(),
            ty,
            nullable: true,
        };
        TableDef {
            id: 7,
            name: "t".into(),
            columns: vec![column("id", ty), column("n", ColumnType::Int32)],
            sort_key: Vec::new(),
            partition_key: None,
            created_ms: 0,
            dropped: Vec::new(),
            primary_key: vec!["id".into()],
            defaults: Vec::new(),
            indexes: Vec::new(),
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    fn keys_in(w: &Within, ty: ColumnType, d: &TableDef) -> Vec<i64> {
        (-5i64..=15)
            .filter(|&v| {
                let value = match ty {
                    ColumnType::Int16 => ScalarValue::Int16(Some(v as i16)),
                    ColumnType::Int32 => ScalarValue::Int32(Some(v as i32)),
                    _ => ScalarValue::Int64(Some(v)),
                };
                let mut k = table_prefix(d.id);
                keys::encode(&mut k, ty, &value, false).unwrap();
                w.contains(&k)
            })
            .collect()
    }

    #[test]
    fn only_typed_comparisons_of_an_integer_key_are_exact() {
        let d = def(ColumnType::Int32);
        assert!(is_exact(&d, &col("id").gt_eq(lit(3i32))));
        assert!(is_exact(&d, &lit(3i32).lt(col("id"))));
        assert!(is_exact(&d, &col("id").eq(lit(ScalarValue::Int32(None)))));
        assert!(!is_exact(&d, &col("id").gt_eq(lit(3i64))), "another type");
        assert!(!is_exact(&d, &col("n").gt_eq(lit(3i32))), "not the key");
        assert!(!is_exact(&d, &col("id").not_eq(lit(3i32))));
        assert!(!is_exact(&d, &(col("id") + lit(1i32)).gt(lit(3i32))));
        let text = def(ColumnType::Utf8);
        assert!(
            !is_exact(&text, &col("id").eq(lit("a"))),
            "not an integer key"
        );
    }

    #[test]
    fn within_is_the_intersection_of_every_exact_filter() {
        for ty in [ColumnType::Int16, ColumnType::Int32, ColumnType::Int64] {
            let d = def(ty);
            let v = |i: i64| match ty {
                ColumnType::Int16 => lit(i as i16),
                ColumnType::Int32 => lit(i as i32),
                _ => lit(i),
            };
            let w = |fs: Vec<Expr>| within(&d, &fs).unwrap();
            assert_eq!(
                keys_in(&w(vec![col("id").gt(v(2)), col("id").lt_eq(v(5))]), ty, &d),
                [3, 4, 5]
            );
            assert_eq!(
                keys_in(
                    &w(vec![col("id").gt_eq(v(-2)).and(v(0).gt(col("id")))]),
                    ty,
                    &d
                ),
                [-2, -1]
            );
            assert_eq!(
                keys_in(&w(vec![col("id").eq(v(4)), col("id").gt(v(1))]), ty, &d),
                [4]
            );
            assert_eq!(
                w(vec![col("id").eq(v(4)), col("id").gt(v(4))]),
                Within::Nothing
            );
            assert_eq!(
                w(vec![col("id").eq(v(4)), col("id").eq(v(5))]),
                Within::Nothing
            );
            assert_ne!(
                w(vec![col("id").gt(v(1)), col("n").gt(lit(1i32))]),
                Within::Any
            );
            assert_eq!(w(vec![col("n").gt(lit(1i32))]), Within::Any);
        }
        let d = def(ColumnType::Int32);
        assert_eq!(
            within(&d, &[col("id").gt(lit(ScalarValue::Int32(None)))]).unwrap(),
            Within::Nothing,
            "a comparison with NULL is never true"
        );
        // The same comparison simplified to a literal after it was pushed down (`id IN
        // (NULL)`, `id = $1` bound to NULL): still nothing, not every row.
        for never in [
            lit(ScalarValue::Boolean(None)),
            lit(false),
            lit(ScalarValue::Null),
        ] {
            assert_eq!(
                within(&d, std::slice::from_ref(&never)).unwrap(),
                Within::Nothing
            );
            assert_eq!(
                within(&d, &[col("id").gt(lit(1i32)).and(never)]).unwrap(),
                Within::Nothing
            );
        }
        assert_eq!(within(&d, &[lit(true)]).unwrap(), Within::Any);
    }
}
