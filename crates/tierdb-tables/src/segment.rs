//! Writing segments: plain Parquet files (readable by DuckDB or Spark) with page indexes, and
//! the extent-map entry (per column min, max and null count) computed from the rows
//! themselves while they are written.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::metadata::SortingColumn;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::catalog::{ColumnStats, SegmentMeta, StatValue, TableDef};
use crate::error::{Result, TableError};
use crate::segment_layout;

/// The compression of a segment's column chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentCodec {
    /// LZ4 only where it saves space: the columns a dictionary or delta encoding leaves
    /// dense are stored uncompressed (see `segment_layout`; the default).
    Auto,
    /// No compression.
    None,
    Snappy,
    /// LZ4 (Parquet's `LZ4_RAW`).
    Lz4,
    /// Zstandard at the given level (1-22).
    Zstd(i32),
}

impl SegmentCodec {
    fn parquet(self) -> Result<Compression> {
        Ok(match self {
            SegmentCodec::Auto | SegmentCodec::Lz4 => Compression::LZ4_RAW,
            SegmentCodec::None => Compression::UNCOMPRESSED,
            SegmentCodec::Snappy => Compression::SNAPPY,
            SegmentCodec::Zstd(level) => Compression::ZSTD(ZstdLevel::try_new(level)?),
        })
    }
}

impl std::str::FromStr for SegmentCodec {
    type Err = String;

    /// `auto`, `none`, `snappy`, `lz4`, `zstd` (level 1) or `zstd:LEVEL`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "auto" => Ok(SegmentCodec::Auto),
            "none" | "uncompressed" => Ok(SegmentCodec::None),
            "snappy" => Ok(SegmentCodec::Snappy),
            "lz4" => Ok(SegmentCodec::Lz4),
            "zstd" => Ok(SegmentCodec::Zstd(1)),
            _ => match lower.strip_prefix("zstd:").map(str::parse::<i32>) {
                Some(Ok(level)) if (1..=22).contains(&level) => Ok(SegmentCodec::Zstd(level)),
                _ => Err(format!(
                    "{s:?} is not a segment codec: use auto, none, snappy, lz4, zstd or \
                     zstd:LEVEL \
                     (1-22)"
                )),
            },
        }
    }
}

impl std::fmt::Display for SegmentCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentCodec::Auto => f.write_str("auto"),
            SegmentCodec::None => f.write_str("none"),
            SegmentCodec::Snappy => f.write_str("snappy"),
            SegmentCodec::Lz4 => f.write_str("lz4"),
            SegmentCodec::Zstd(level) => write!(f, "zstd:{level}"),
        }
    }
}

/// How segments are cut and encoded. The defaults were picked by measurement (SSB, see
/// docs/benchmarks.md, "Segment encoding").
#[derive(Debug, Clone)]
pub struct SegmentOptions {
    /// A segment is closed at this many rows (ColumnStore's extents hold 8M rows of one
    /// column; a segment holds every column of its rows).
    pub segment_rows: usize,
    /// Rows per Parquet row group (the unit of row-group pruning inside a segment; pages
    /// inside it are pruned by the page index).
    pub row_group_rows: usize,
    pub codec: SegmentCodec,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            segment_rows: 1 << 21,
            row_group_rows: 1 << 20,
            codec: SegmentCodec::Auto,
        }
    }
}

/// Encodes one segment's rows (in order) as a Parquet file; returns its bytes and the
/// column statistics for the extent map (in schema order), computed from the rows.
pub fn encode_segment(
    def: &TableDef,
    schema: SchemaRef,
    options: &SegmentOptions,
    batches: &[RecordBatch],
) -> Result<(Vec<u8>, Vec<ColumnStats>)> {
    let mut stats = Vec::with_capacity(schema.fields().len());
    let mut layouts = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let mut min = MinAccumulator::try_new(f.data_type())?;
        let mut max = MaxAccumulator::try_new(f.data_type())?;
        let mut nulls = 0u64;
        for b in batches {
            let col = b.column(i);
            min.update_batch(std::slice::from_ref(col))?;
            max.update_batch(std::slice::from_ref(col))?;
            nulls += col.null_count() as u64;
        }
        let (min, max) = (min.evaluate()?, max.evaluate()?);
        layouts.push(segment_layout::choose(
            f.data_type(),
            &min,
            &max,
            batches,
            i,
        ));
        stats.push(ColumnStats {
            min: StatValue::from_scalar(&min),
            max: StatValue::from_scalar(&max),
            nulls,
        });
    }
    let sorting: Vec<SortingColumn> = def
        .ingest_order()
        .iter()
        .filter_map(|c| def.column_index(c))
        .map(|i| SortingColumn {
            column_idx: i as i32,
            descending: false,
            nulls_first: true,
        })
        .collect();
    let mut props = WriterProperties::builder()
        .set_compression(options.codec.parquet()?)
        .set_max_row_group_row_count(Some(options.row_group_rows))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_sorting_columns((!sorting.is_empty()).then_some(sorting))
        .set_created_by(format!("tierdb {}", env!("CARGO_PKG_VERSION")));
    for (f, layout) in schema.fields().iter().zip(&layouts) {
        props = segment_layout::apply(props, f.name(), *layout, options.codec);
    }
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props.build()))?;
    for b in batches {
        if b.num_rows() > 0 {
            writer.write(b)?;
        }
    }
    Ok((writer.into_inner()?, stats))
}

/// The object path of a new segment of table `table_id` in the database at `root`. A random
/// name, so files of an import that crashed before its commit never collide with later ones.
pub fn segment_path(root: &str, table_id: u64) -> Path {
    Path::from(format!(
        "{}/tables/{table_id}/{}.parquet",
        root.trim_end_matches('/'),
        uuid::Uuid::new_v4()
    ))
}

/// Uploads a finished segment; returns its catalog entry (with `id` still to be assigned).
pub async fn upload(
    store: &Arc<dyn ObjectStore>,
    path: Path,
    bytes: Vec<u8>,
    rows: usize,
    columns: Vec<ColumnStats>,
) -> Result<SegmentMeta> {
    let len = bytes.len() as u64;
    let checksums = crate::checksum::BlockSums::of(&bytes);
    store
        .put(&path, bytes::Bytes::from(bytes).into())
        .await
        .map_err(|e| TableError::Segment {
            path: path.to_string(),
            reason: format!("cannot upload: {e}"),
        })?;
    Ok(SegmentMeta {
        id: 0,
        path: path.to_string(),
        rows: rows as u64,
        bytes: len,
        columns,
        checksums,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::parquet::basic::Encoding;
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

    #[test]
    fn codecs_parse_and_print() {
        for (text, codec) in [
            ("auto", SegmentCodec::Auto),
            ("none", SegmentCodec::None),
            ("snappy", SegmentCodec::Snappy),
            ("LZ4", SegmentCodec::Lz4),
            ("zstd", SegmentCodec::Zstd(1)),
            ("zstd:9", SegmentCodec::Zstd(9)),
        ] {
            assert_eq!(text.parse::<SegmentCodec>().unwrap(), codec);
        }
        assert_eq!(SegmentCodec::Zstd(3).to_string(), "zstd:3");
        for bad in ["gzip", "zstd:0", "zstd:23", "zstd:x"] {
            let e = bad.parse::<SegmentCodec>().unwrap_err();
            assert!(e.contains("use auto, none, snappy, lz4, zstd"), "{e}");
        }
    }

    /// A table of `columns` (name, type), for encoding tests.
    fn table(columns: &[(&str, crate::catalog::ColumnType)]) -> TableDef {
        TableDef {
            id: 1,
            name: "t".into(),
            columns: columns
                .iter()
                .map(|(name, ty)| crate::catalog::ColumnDef {
                    name: (*name).into(),
                    ty: *ty,
                    nullable: true,
                })
                .collect(),
            sort_key: Vec::new(),
            partition_key: None,
            created_ms: 0,
            dropped: Vec::new(),
            primary_key: Vec::new(),
            defaults: Vec::new(),
            indexes: Vec::new(),
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    /// The rows of an encoded segment, read back.
    fn read_back(bytes: Vec<u8>) -> Vec<RecordBatch> {
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
            bytes::Bytes::from(bytes),
            1 << 20,
        )
        .unwrap()
        .collect::<std::result::Result<_, _>>()
        .unwrap()
    }

    /// A narrow integer column gets a dictionary, a wide one is written plain; both read
    /// back unchanged, and the statistics are the rows'.
    #[test]
    fn integer_columns_get_a_dictionary_only_over_a_narrow_range() {
        use crate::catalog::ColumnType::Int32;
        let def = table(&[("narrow", Int32), ("wide", Int32)]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("narrow", DataType::Int32, false),
            Field::new("wide", DataType::Int32, false),
        ]));
        let narrow: Vec<i32> = (0..100_000).map(|i| i % 12).collect();
        let wide: Vec<i32> = (0..100_000).map(|i| i * 7919).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(narrow)),
                Arc::new(Int32Array::from(wide)),
            ],
        )
        .unwrap();
        let (bytes, stats) = encode_segment(
            &def,
            schema,
            &SegmentOptions::default(),
            std::slice::from_ref(&batch),
        )
        .unwrap();
        assert_eq!(stats[0].max, Some(StatValue::Int(11)));
        assert_eq!(stats[1].max, Some(StatValue::Int(99_999 * 7919)));
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes.clone())).unwrap();
        let rg = reader.metadata().row_group(0);
        let dict = |i: usize| {
            rg.column(i)
                .encodings()
                .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
        };
        assert!(
            dict(0),
            "narrow column: {:?}",
            rg.column(0).encodings().collect::<Vec<_>>()
        );
        assert!(
            !dict(1),
            "wide column: {:?}",
            rg.column(1).encodings().collect::<Vec<_>>()
        );
        // The default codec `auto`: delta for the wide column, neither compressed.
        assert!(
            rg.column(1)
                .encodings()
                .any(|e| e == Encoding::DELTA_BINARY_PACKED)
        );
        for i in 0..2 {
            assert_eq!(
                rg.column(i).compression(),
                Compression::UNCOMPRESSED,
                "column {i}"
            );
        }
        assert_eq!(read_back(bytes), vec![batch]);
    }

    /// Under `auto`, text with few distinct values is a dictionary left uncompressed, text
    /// with many is plain and LZ4; a named codec compresses every column. Either way the
    /// rows (nulls included) read back unchanged.
    #[test]
    fn auto_compresses_only_plain_text_and_a_named_codec_everything() {
        use crate::catalog::ColumnType::Utf8;
        use datafusion::arrow::array::StringArray;
        let def = table(&[("mode", Utf8), ("comment", Utf8)]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("mode", DataType::Utf8, true),
            Field::new("comment", DataType::Utf8, true),
        ]));
        let modes = ["AIR", "MAIL", "SHIP", "TRUCK"];
        let mode: Vec<Option<&str>> = (0..50_000)
            .map(|i| (i % 11 != 0).then_some(modes[i % 4]))
            .collect();
        let comment: Vec<Option<String>> = (0..50_000)
            .map(|i| (i % 13 != 0).then(|| format!("{i} carefully final deposits {}", i * 7)))
            .collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(mode)),
                Arc::new(StringArray::from(comment)),
            ],
        )
        .unwrap();
        for (codec, want) in [
            (
                SegmentCodec::Auto,
                [Compression::UNCOMPRESSED, Compression::LZ4_RAW],
            ),
            (
                SegmentCodec::Snappy,
                [Compression::SNAPPY, Compression::SNAPPY],
            ),
        ] {
            let options = SegmentOptions {
                codec,
                ..SegmentOptions::default()
            };
            let (bytes, _) =
                encode_segment(&def, schema.clone(), &options, std::slice::from_ref(&batch))
                    .unwrap();
            let reader = SerializedFileReader::new(bytes::Bytes::from(bytes.clone())).unwrap();
            let rg = reader.metadata().row_group(0);
            for (i, w) in want.iter().enumerate() {
                assert_eq!(rg.column(i).compression(), *w, "{codec}, column {i}");
            }
            assert_eq!(read_back(bytes), vec![batch.clone()], "{codec}");
        }
    }
}
