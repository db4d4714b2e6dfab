//! COPY's data formats: its options (PostgreSQL's spellings), PostgreSQL's text format
//! decoded into the CSV the import path reads, and rows written out as text or CSV.
//! Pure functions: tested without a socket.

use std::io::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::Array;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions as ArrowFormat};
use datafusion::sql::sqlparser::ast::{CopyLegacyCsvOption, CopyLegacyOption, CopyOption};
use futures::StreamExt;
use pgwire::error::PgWireResult;
use pgwire::messages::copy::CopyData;
use tierdb_tables::TableError;

use crate::encode::pg_text;
use crate::errors::{table_error, user_error};

/// COPY's options, PostgreSQL's spellings (new and legacy).
#[derive(Debug, Clone)]
pub(crate) struct CopyOptions {
    pub(crate) csv: bool,
    /// FORMAT binary (`binary.rs`): COPY FROM only.
    pub(crate) binary: bool,
    pub(crate) header: bool,
    pub(crate) delimiter: u8,
    pub(crate) null: String,
}

impl CopyOptions {
    pub(crate) fn parse(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> PgWireResult<Self> {
        let mut o = CopyOptions {
            csv: false,
            binary: false,
            header: false,
            delimiter: b'\t',
            null: "\\N".into(),
        };
        let mut delimiter = None;
        let mut null = None;
        let unsupported = |what: String| {
            user_error(
                "0A000",
                format!("COPY option {what} is not supported by tierdb serve"),
            )
        };
        for opt in options {
            match opt {
                CopyOption::Format(f) => match f.value.to_lowercase().as_str() {
                    "csv" => (o.csv, o.binary) = (true, false),
                    "text" => (o.csv, o.binary) = (false, false),
                    "binary" => (o.csv, o.binary) = (false, true),
                    other => return Err(unsupported(format!("FORMAT {other}"))),
                },
                CopyOption::Header(h) => o.header = *h,
                CopyOption::Delimiter(c) => delimiter = Some(*c),
                CopyOption::Null(n) => null = Some(n.clone()),
                CopyOption::Encoding(e)
                    if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
                // FREEZE (pgbench -i sends it) is about PostgreSQL's tuple visibility: the
                // copied rows are visible at commit either way.
                CopyOption::Freeze(_) => {}
                other => return Err(unsupported(other.to_string())),
            }
        }
        for opt in legacy {
            match opt {
                CopyLegacyOption::Csv(inner) => {
                    o.csv = true;
                    for i in inner {
                        match i {
                            CopyLegacyCsvOption::Header => o.header = true,
                            other => return Err(unsupported(other.to_string())),
                        }
                    }
                }
                CopyLegacyOption::Delimiter(c) => delimiter = Some(*c),
                CopyLegacyOption::Null(n) => null = Some(n.clone()),
                CopyLegacyOption::Header => o.header = true,
                CopyLegacyOption::Binary => o.binary = true,
                other => return Err(unsupported(other.to_string())),
            }
        }
        // PostgreSQL's checks and codes (copy.c, ProcessCopyOptions).
        if o.binary {
            let refused = if delimiter.is_some() {
                Some(("42601", "DELIMITER"))
            } else if null.is_some() {
                Some(("42601", "NULL"))
            } else if o.header {
                Some(("0A000", "HEADER"))
            } else {
                None
            };
            if let Some((code, what)) = refused {
                return Err(user_error(
                    code,
                    format!("cannot specify {what} in BINARY mode"),
                ));
            }
        }
        if o.csv {
            o.delimiter = b',';
            o.null = String::new();
        }
        if let Some(c) = delimiter {
            if !c.is_ascii() {
                return Err(user_error(
                    "22023",
                    format!("COPY delimiter {c:?} must be one ASCII character"),
                ));
            }
            o.delimiter = c as u8;
        }
        if let Some(n) = null {
            o.null = n;
        }
        if o.header && !o.csv {
            return Err(user_error(
                "0A000",
                "COPY HEADER is available only in CSV mode".into(),
            ));
        }
        Ok(o)
    }

    /// One value as COPY writes it: NULL as the null string; text format escapes
    /// backslash, tab and newlines; CSV quotes what needs it.
    pub(crate) fn field(&self, value: Option<&str>) -> String {
        let Some(v) = value else {
            return self.null.clone();
        };
        if self.csv {
            let needs = v.is_empty()
                || v.bytes()
                    .any(|b| b == self.delimiter || b == b'"' || b == b'\n' || b == b'\r');
            if needs {
                return format!("\"{}\"", v.replace('"', "\"\""));
            }
            return v.to_string();
        }
        let mut out = String::with_capacity(v.len());
        for ch in v.chars() {
            match ch {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c as u32 == u32::from(self.delimiter) => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
        out
    }
}

/// COPY FROM STDIN data on its way to the import path: spooled to a file as CSV.
#[derive(Debug)]
pub(crate) struct Spool {
    pub(crate) options: CopyOptions,
    pub(crate) file: tempfile::NamedTempFile,
    /// FORMAT binary: its decoder.
    binary: Option<super::binary::BinaryIn>,
    /// Text format: the start of a line not yet complete.
    partial: Vec<u8>,
    /// Text format: the `\\.` end marker was seen.
    ended: bool,
}

impl Spool {
    /// For data of columns of `types` (in the order the data sends them).
    pub(crate) fn new(
        options: CopyOptions,
        types: Vec<tierdb_tables::catalog::ColumnType>,
    ) -> std::io::Result<Self> {
        Ok(Spool {
            binary: options.binary.then(|| super::binary::BinaryIn::new(types)),
            options,
            file: tempfile::NamedTempFile::new()?,
            partial: Vec::new(),
            ended: false,
        })
    }

    /// Adds client data to the spool, as CSV. Data that is not what its format says fails
    /// with an `InvalidData` error holding a [`BadData`](super::binary::BadData).
    pub(crate) fn add(&mut self, data: &[u8]) -> std::io::Result<()> {
        if let Some(b) = self.binary.as_mut() {
            let mut out = Vec::with_capacity(data.len() * 2);
            b.add(data, &mut out)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            return self.file.write_all(&out);
        }
        if self.options.csv {
            return self.file.write_all(data);
        }
        self.partial.extend_from_slice(data);
        let mut start = 0;
        let mut out = Vec::with_capacity(self.partial.len() + 64);
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = &self.partial[start..start + nl];
            start += nl + 1;
            if self.ended {
                continue;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line == b"\\." {
                self.ended = true;
                continue;
            }
            text_line_to_csv(line, self.options.delimiter, &self.options.null, &mut out);
        }
        self.partial.drain(..start);
        self.file.write_all(&out)
    }

    pub(crate) fn finish(&mut self) -> std::io::Result<()> {
        if let Some(b) = &self.binary {
            b.finish()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            return self.file.flush();
        }
        if !self.partial.is_empty() && !self.ended {
            let mut last = std::mem::take(&mut self.partial);
            last.push(b'\n');
            self.add(&last)?;
        }
        self.file.flush()
    }
}

/// One line of PostgreSQL's text COPY format as a record of the import's
/// [`CopyText`](tierdb_tables::import::Format::CopyText) format: fields split at the
/// delimiter, the null string as the one byte `COPY_NULL`, backslash escapes decoded, every
/// other field quoted (so an empty field is an empty string).
fn text_line_to_csv(line: &[u8], delimiter: u8, null: &str, out: &mut Vec<u8>) {
    for (i, field) in line.split(|&b| b == delimiter).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if field == null.as_bytes() {
            out.push(tierdb_tables::import::COPY_NULL);
            continue;
        }
        out.push(b'"');
        let mut bytes = field.iter().copied();
        while let Some(b) = bytes.next() {
            let b = if b == b'\\' {
                match bytes.next() {
                    Some(b'n') => b'\n',
                    Some(b't') => b'\t',
                    Some(b'r') => b'\r',
                    Some(b'b') => 8,
                    Some(b'f') => 12,
                    Some(b'v') => 11,
                    Some(other) => other,
                    None => b'\\',
                }
            } else {
                b
            };
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    }
    out.push(b'\n');
}

/// Rows of a query as COPY data, one message per row.
pub(crate) fn copy_out_stream(
    stream: datafusion::execution::SendableRecordBatchStream,
    opts: CopyOptions,
    header: Option<String>,
) -> impl futures::Stream<Item = PgWireResult<CopyData>> + Send + 'static {
    // pgwire counts CopyData messages for the `COPY n` tag, so the header line travels in
    // the first row's message, not in one of its own (with no rows at all it goes alone
    // and the tag says 1: a known limit of counting messages).
    let header = Arc::new(std::sync::Mutex::new(header.map(|h| format!("{h}\n"))));
    let leftover = header.clone();
    let rows = stream.flat_map(move |batch| {
        let messages: Vec<PgWireResult<CopyData>> = match batch {
            Err(e) => vec![Err(table_error(&TableError::from(e)))],
            Ok(batch) => {
                let fmt = ArrowFormat::default();
                let formatters: Result<Vec<_>, _> = batch
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &fmt))
                    .collect();
                match formatters {
                    Err(e) => vec![Err(table_error(&TableError::from(e)))],
                    Ok(formatters) => (0..batch.num_rows())
                        .map(|row| {
                            let fields: Vec<String> = batch
                                .columns()
                                .iter()
                                .zip(&formatters)
                                .map(|(col, f)| {
                                    if col.is_null(row) {
                                        opts.field(None)
                                    } else {
                                        let text = crate::floats::cell(col, row)
                                            .or_else(|| crate::interval::cell(col, row))
                                            .or_else(|| crate::numeric::cell(col, row))
                                            .unwrap_or_else(|| {
                                                pg_text(col.data_type(), f.value(row).to_string())
                                            });
                                        opts.field(Some(&text))
                                    }
                                })
                                .collect();
                            let mut line = header
                                .lock()
                                .ok()
                                .and_then(|mut h| h.take())
                                .unwrap_or_default();
                            line.push_str(&fields.join(&(opts.delimiter as char).to_string()));
                            line.push('\n');
                            Ok(CopyData::new(Bytes::from(line)))
                        })
                        .collect(),
                }
            }
        };
        futures::stream::iter(messages)
    });
    let rest =
        futures::stream::once(async move { leftover.lock().ok().and_then(|mut h| h.take()) })
            .filter_map(|h| async move { h.map(|h| Ok(CopyData::new(Bytes::from(h)))) });
    rows.chain(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::sqlstate;
    use datafusion::sql::sqlparser::ast::{CopyLegacyOption, Ident, Statement};

    /// The options of a COPY statement as PostgreSQL's parser reads them.
    fn options(sql: &str) -> PgWireResult<CopyOptions> {
        let stmt = crate::parse::parse(
            &datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser::new(),
            sql,
        )?
        .remove(0);
        let Statement::Copy {
            options,
            legacy_options,
            ..
        } = stmt
        else {
            panic!("not a COPY: {sql}");
        };
        CopyOptions::parse(&options, &legacy_options)
    }

    #[test]
    fn option_spellings() {
        let o = options("COPY t FROM STDIN").expect("text");
        assert!(!o.csv && o.delimiter == b'\t' && o.null == "\\N");
        let o = options("COPY t FROM STDIN (FORMAT csv, HEADER true)").expect("csv");
        assert!(o.csv && o.header && o.delimiter == b',' && o.null.is_empty());
        let o = options("COPY t FROM STDIN WITH CSV HEADER DELIMITER '|'").expect("legacy");
        assert!(o.csv && o.header && o.delimiter == b'|');
        let o = options("COPY t FROM STDIN (NULL 'x', DELIMITER ';')").expect("null");
        assert!(o.null == "x" && o.delimiter == b';');
        let _ = CopyLegacyOption::Binary;
        let _ = Ident::new("unused");
    }

    #[test]
    fn unsupported_options_are_refused() {
        let o = options("COPY t FROM STDIN (FORMAT binary)").expect("binary");
        assert!(o.binary && !o.csv);
        let e = options("COPY t FROM STDIN (FORMAT binary, DELIMITER ',')").expect_err("binary");
        assert_eq!(sqlstate(&e), "42601");
        let e = options("COPY t FROM STDIN (HEADER true)").expect_err("text header");
        assert_eq!(sqlstate(&e), "0A000");
    }

    #[test]
    fn text_lines_become_csv() {
        let mut out = Vec::new();
        text_line_to_csv(b"1\ta\\tb\t\\N\tq\"x", b'\t', "\\N", &mut out);
        assert_eq!(out, b"\"1\",\"a\tb\",\xff,\"q\"\"x\"\n");
    }

    #[test]
    fn the_spool_joins_lines_split_across_messages_and_stops_at_the_end_marker() {
        let o = options("COPY t FROM STDIN").expect("text");
        let mut spool = Spool::new(o, Vec::new()).expect("spool");
        spool.add(b"1\tx\n2\t").expect("add");
        spool.add(b"y\r\n\\.\n3\tignored\n").expect("add");
        spool.finish().expect("finish");
        let data = std::fs::read_to_string(spool.file.path()).expect("read");
        assert_eq!(data, "\"1\",\"x\"\n\"2\",\"y\"\n");
    }

    #[test]
    fn a_last_line_without_newline_is_kept() {
        let o = options("COPY t FROM STDIN").expect("text");
        let mut spool = Spool::new(o, Vec::new()).expect("spool");
        spool.add(b"1\tx").expect("add");
        spool.finish().expect("finish");
        let data = std::fs::read_to_string(spool.file.path()).expect("read");
        assert_eq!(data, "\"1\",\"x\"\n");
    }

    #[test]
    fn fields_are_written_as_postgresql_writes_them() {
        let text = options("COPY t TO STDOUT").expect("text");
        assert_eq!(text.field(None), "\\N");
        assert_eq!(text.field(Some("a\tb\\c\nd")), "a\\tb\\\\c\\nd");
        let csv = options("COPY t TO STDOUT (FORMAT csv)").expect("csv");
        assert_eq!(csv.field(None), "");
        assert_eq!(csv.field(Some("")), "\"\"");
        assert_eq!(csv.field(Some("a,\"b")), "\"a,\"\"b\"");
        assert_eq!(csv.field(Some("plain")), "plain");
    }
}
