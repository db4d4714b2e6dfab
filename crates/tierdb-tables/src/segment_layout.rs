//! How each column of a segment is encoded, chosen per segment from the column's type and
//! its values, so that a reader spends no CPU on work that buys no space.
//!
//! Why (TPC-H, docs/benchmarks.md "Column layout"): with LZ4 over every column, LZ4
//! decompression was the top function of 12 of the 22 queries' profiles at SF 1 and 10-39%
//! of the CPU samples of 19 of them, yet over dictionary-encoded pages it saved nothing
//! (1.00x: the pages are bit-packed dictionary indices already), and wide integer columns
//! written plain and then LZ4-compressed are both larger and slower to read than the same
//! integers delta encoded and bit-packed (a sorted key comes down to a few bits a value, a
//! random one to the bits of its range). This layout: 14% smaller at SF 1, the 22 queries
//! warm in 0.80x (SF 1) and 0.79x (SF 10) the time.
//!
//! Rules, for the default codec [`SegmentCodec::Auto`]:
//!
//! 1. Integer-like columns (integers, dates, times, timestamps, decimals of at most 18
//!    digits: Parquet INT32/INT64) whose values span less than [`DICTIONARY_INT_RANGE`]:
//!    dictionary with RLE/bit-packed indices, no codec.
//! 2. Wider integer-like columns: `DELTA_BINARY_PACKED`, no dictionary, no codec.
//! 3. Text and binary: a dictionary and no codec when a sample of the segment's values
//!    ([`SAMPLE_ROWS`], spread evenly) is at most a quarter distinct and its distinct
//!    values fit one dictionary page ([`DICTIONARY_PAGE_BYTES`]); otherwise plain with LZ4
//!    and no dictionary (comments, names: LZ4 halves them).
//! 4. Booleans: no codec (RLE). Everything else (floats, long decimals, nested types): LZ4.
//!
//! A codec named by the user (`--segment-codec zstd`, …) applies to every column, as
//! before this layout existed; rules 1-3 still choose the encodings, which never change an
//! answer: they are Parquet's own and every reader decodes them.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::parquet::basic::{Compression, Encoding};
use datafusion::parquet::file::properties::WriterPropertiesBuilder;
use datafusion::parquet::schema::types::ColumnPath;

use crate::segment::SegmentCodec;

/// Integer columns whose values span at most this range are dictionary encoded (a few bits
/// per value, runs where sorted); wider ones are delta encoded: a dictionary of many
/// distinct values costs the writer a hash lookup per value and the reader a gather per
/// value for no space saved (measured, docs/benchmarks.md "Segment encoding").
pub const DICTIONARY_INT_RANGE: i128 = 1 << 16;

/// Rows of a text column looked at to choose between a dictionary and plain values.
pub const SAMPLE_ROWS: usize = 1 << 16;

/// The distinct values of a text column's sample must fit in this many bytes for it to be
/// dictionary encoded (the Parquet writer's own dictionary page limit: past it, the writer
/// falls back to plain values in the middle of a row group).
pub const DICTIONARY_PAGE_BYTES: usize = 1 << 20;

/// How one column of one segment is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnLayout {
    /// Rules 1 and 3: dictionary, no codec under `auto`.
    Dictionary,
    /// Rule 2: delta encoded and bit-packed, no codec under `auto`.
    Delta,
    /// Rule 3: plain values, compressed.
    PlainCompressed,
    /// Rule 4, booleans: RLE, no codec under `auto`.
    Boolean,
    /// Rule 4: the writer's defaults, compressed.
    Default,
}

impl ColumnLayout {
    /// The codec of a column of this layout when the segment's codec is `codec`.
    fn compression(self, codec: SegmentCodec) -> Option<Compression> {
        match (codec, self) {
            (
                SegmentCodec::Auto,
                ColumnLayout::Dictionary | ColumnLayout::Delta | ColumnLayout::Boolean,
            ) => Some(Compression::UNCOMPRESSED),
            _ => None,
        }
    }
}

/// The layout of column `i` of a segment made of `batches`, whose minimum and maximum
/// values are `min` and `max`.
pub fn choose(
    data_type: &DataType,
    min: &ScalarValue,
    max: &ScalarValue,
    batches: &[RecordBatch],
    i: usize,
) -> ColumnLayout {
    if let Some(is_wide) = integer_span(data_type, min, max).map(|s| s >= DICTIONARY_INT_RANGE) {
        return if is_wide {
            ColumnLayout::Delta
        } else {
            ColumnLayout::Dictionary
        };
    }
    if is_integer_like(data_type) {
        // All values null: nothing to encode either way.
        return ColumnLayout::Dictionary;
    }
    match data_type {
        DataType::Boolean => ColumnLayout::Boolean,
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => {
            let columns: Vec<&ArrayRef> = batches.iter().map(|b| b.column(i)).collect();
            if few_distinct(&columns) {
                ColumnLayout::Dictionary
            } else {
                ColumnLayout::PlainCompressed
            }
        }
        _ => ColumnLayout::Default,
    }
}

/// Sets the writer's encoding, dictionary and codec of column `name` for `layout`.
pub fn apply(
    props: WriterPropertiesBuilder,
    name: &str,
    layout: ColumnLayout,
    codec: SegmentCodec,
) -> WriterPropertiesBuilder {
    let path = || ColumnPath::from(name);
    let mut props = match layout {
        ColumnLayout::Delta => props
            .set_column_dictionary_enabled(path(), false)
            .set_column_encoding(path(), Encoding::DELTA_BINARY_PACKED),
        ColumnLayout::PlainCompressed => props.set_column_dictionary_enabled(path(), false),
        ColumnLayout::Dictionary | ColumnLayout::Boolean | ColumnLayout::Default => props,
    };
    if let Some(c) = layout.compression(codec) {
        props = props.set_column_compression(path(), c);
    }
    props
}

/// Types Parquet stores as INT32 or INT64.
fn is_integer_like(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(_, _)
                | DataType::Duration(_)
        )
        || matches!(t, DataType::Decimal128(p, _) if *p <= 18)
}

/// `max - min` of an integer-like column, or None for other types and all-null columns.
fn integer_span(t: &DataType, min: &ScalarValue, max: &ScalarValue) -> Option<i128> {
    if !is_integer_like(t) {
        return None;
    }
    Some(as_i128(max)?.saturating_sub(as_i128(min)?))
}

fn as_i128(v: &ScalarValue) -> Option<i128> {
    use ScalarValue as S;
    match v {
        S::Int8(Some(x)) => Some(i128::from(*x)),
        S::Int16(Some(x)) => Some(i128::from(*x)),
        S::Int32(Some(x))
        | S::Date32(Some(x))
        | S::Time32Second(Some(x))
        | S::Time32Millisecond(Some(x)) => Some(i128::from(*x)),
        S::Int64(Some(x))
        | S::Date64(Some(x))
        | S::Time64Microsecond(Some(x))
        | S::Time64Nanosecond(Some(x))
        | S::TimestampSecond(Some(x), _)
        | S::TimestampMillisecond(Some(x), _)
        | S::TimestampMicrosecond(Some(x), _)
        | S::TimestampNanosecond(Some(x), _)
        | S::DurationSecond(Some(x))
        | S::DurationMillisecond(Some(x))
        | S::DurationMicrosecond(Some(x))
        | S::DurationNanosecond(Some(x)) => Some(i128::from(*x)),
        S::UInt8(Some(x)) => Some(i128::from(*x)),
        S::UInt16(Some(x)) => Some(i128::from(*x)),
        S::UInt32(Some(x)) => Some(i128::from(*x)),
        S::UInt64(Some(x)) => Some(i128::from(*x)),
        S::Decimal128(Some(x), _, _) => Some(*x),
        _ => None,
    }
}

/// Rule 3: whether the text values of a segment (its columns, batch by batch) suit a
/// dictionary, judged from at most [`SAMPLE_ROWS`] values spread evenly over them.
fn few_distinct(columns: &[&ArrayRef]) -> bool {
    let rows: usize = columns.iter().map(|c| c.len()).sum();
    if rows == 0 {
        return true;
    }
    let stride = rows.div_ceil(SAMPLE_ROWS).max(1);
    let mut seen: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    let (mut sampled, mut distinct_bytes, mut offset) = (0usize, 0usize, 0usize);
    for col in columns {
        // The first sampled row of this batch continues the stride of the batches before it.
        let start = (stride - offset % stride) % stride;
        let mut r = start;
        while r < col.len() {
            if let Some(v) = value_bytes(col, r) {
                sampled += 1;
                if seen.insert(v) {
                    distinct_bytes += v.len();
                    if distinct_bytes > DICTIONARY_PAGE_BYTES {
                        return false;
                    }
                }
            }
            r += stride;
        }
        offset += col.len();
    }
    seen.len() * 4 <= sampled.max(1)
}

/// The bytes of row `r` of a text or binary column (None when null).
fn value_bytes(col: &ArrayRef, r: usize) -> Option<&[u8]> {
    if col.is_null(r) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(r).as_bytes(),
        DataType::LargeUtf8 => col.as_string::<i64>().value(r).as_bytes(),
        DataType::Utf8View => col.as_string_view().value(r).as_bytes(),
        DataType::Binary => col.as_binary::<i32>().value(r),
        DataType::LargeBinary => col.as_binary::<i64>().value(r),
        DataType::BinaryView => col.as_binary_view().value(r),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn text_batches(values: Vec<String>, per_batch: usize) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
        values
            .chunks(per_batch)
            .map(|c| {
                RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(StringArray::from(c.to_vec()))],
                )
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn integers_by_span() {
        let t = DataType::Int64;
        let none: [RecordBatch; 0] = [];
        assert_eq!(
            choose(
                &t,
                &ScalarValue::Int64(Some(5)),
                &ScalarValue::Int64(Some(5 + 65_535)),
                &none,
                0
            ),
            ColumnLayout::Dictionary
        );
        assert_eq!(
            choose(
                &t,
                &ScalarValue::Int64(Some(5)),
                &ScalarValue::Int64(Some(5 + 65_536)),
                &none,
                0
            ),
            ColumnLayout::Delta
        );
        // The full range of i64 neither overflows nor counts as narrow.
        assert_eq!(
            choose(
                &t,
                &ScalarValue::Int64(Some(i64::MIN)),
                &ScalarValue::Int64(Some(i64::MAX)),
                &none,
                0
            ),
            ColumnLayout::Delta
        );
        let d = DataType::Decimal128(15, 2);
        assert_eq!(
            choose(
                &d,
                &ScalarValue::Decimal128(Some(90_000), 15, 2),
                &ScalarValue::Decimal128(Some(10_500_000), 15, 2),
                &none,
                0
            ),
            ColumnLayout::Delta
        );
        // Long decimals are FIXED_LEN_BYTE_ARRAY in Parquet: no delta encoding.
        let long = DataType::Decimal128(30, 2);
        assert_eq!(
            choose(
                &long,
                &ScalarValue::Decimal128(Some(0), 30, 2),
                &ScalarValue::Decimal128(Some(1 << 40), 30, 2),
                &none,
                0
            ),
            ColumnLayout::Default
        );
        assert_eq!(
            choose(
                &t,
                &ScalarValue::Int64(None),
                &ScalarValue::Int64(None),
                &none,
                0
            ),
            ColumnLayout::Dictionary
        );
    }

    #[test]
    fn text_by_distinct_values_in_a_sample() {
        let t = DataType::Utf8;
        let n = ScalarValue::Utf8(None);
        // Seven modes over 300,000 rows in batches of 8,192: a dictionary.
        let modes = ["AIR", "MAIL", "SHIP", "TRUCK", "RAIL", "FOB", "REG AIR"];
        let low = text_batches(
            (0..300_000).map(|i| modes[i % 7].to_string()).collect(),
            8192,
        );
        assert_eq!(choose(&t, &n, &n, &low, 0), ColumnLayout::Dictionary);
        // 10,000 clerks over 300,000 rows: still a dictionary.
        let mid = text_batches(
            (0..300_000)
                .map(|i| format!("Clerk#{:09}", i % 10_000))
                .collect(),
            8192,
        );
        assert_eq!(choose(&t, &n, &n, &mid, 0), ColumnLayout::Dictionary);
        // Every value distinct (short phone numbers, under the byte limit): plain.
        let unique = text_batches((0..300_000).map(|i| format!("{i:015}")).collect(), 8192);
        assert_eq!(
            choose(&t, &n, &n, &unique, 0),
            ColumnLayout::PlainCompressed
        );
        // Long distinct values pass the dictionary page limit early: plain.
        let long = text_batches(
            (0..40_000)
                .map(|i| format!("{i} {}", "comment ".repeat(8)))
                .collect(),
            1000,
        );
        assert_eq!(choose(&t, &n, &n, &long, 0), ColumnLayout::PlainCompressed);
        // Nulls only, and no rows: a dictionary (nothing to store).
        let nulls = text_batches(vec![], 10);
        assert_eq!(choose(&t, &n, &n, &nulls, 0), ColumnLayout::Dictionary);
    }

    #[test]
    fn auto_leaves_encoded_columns_uncompressed_and_a_named_codec_applies_everywhere() {
        for layout in [
            ColumnLayout::Dictionary,
            ColumnLayout::Delta,
            ColumnLayout::Boolean,
        ] {
            assert_eq!(
                layout.compression(SegmentCodec::Auto),
                Some(Compression::UNCOMPRESSED)
            );
            assert_eq!(layout.compression(SegmentCodec::Zstd(3)), None);
        }
        for layout in [ColumnLayout::PlainCompressed, ColumnLayout::Default] {
            assert_eq!(layout.compression(SegmentCodec::Auto), None);
        }
    }
}
