//! COPY's binary format in (`COPY t FROM STDIN (FORMAT binary)`, what pgx's `CopyFrom`
//! and pgjdbc's `CopyManager` with binary send), decoded into the import path's
//! [`CopyText`](tierdb_tables::import::Format::CopyText) records: each value's PostgreSQL
//! text, so it is read, checked and rejected by the same rules as text COPY. Pure
//! functions: tested without a socket.
//!
//! The stream, all integers big-endian (PostgreSQL's `copy.sgml`):
//!
//! | bytes            | field           | meaning                                         |
//! |------------------|-----------------|-------------------------------------------------|
//! | 0..11            | signature       | `PGCOPY\n\xff\r\n\0`                            |
//! | 11..15           | flags           | i32; bit 16: every tuple carries an OID (refused) |
//! | 15..19           | extension       | i32 length `n` of a header extension, skipped    |
//! | 19..19+n         | extension data  |                                                 |
//! | tuple            | field count     | i16: the table's listed columns; -1 ends the data |
//! | per field        | length, bytes   | i32 length (-1: NULL), then the value's `*_send` form |
//!
//! 1. A tuple is decoded only once all of its bytes arrived (CopyData messages split the
//!    stream anywhere).
//! 2. A value is the binary form of the column's type (pgx and pgjdbc send the types the
//!    table's columns are described as): BOOLEAN 1 byte, SMALLINT/INT/BIGINT 2/4/8, REAL and
//!    DOUBLE 4/8 (IEEE 754), NUMERIC `numeric_send` (`numparams.rs`), DATE i32 days and
//!    TIMESTAMP/TIMESTAMPTZ i64 microseconds from 2000-01-01 (TIMESTAMPTZ in UTC), TIME
//!    i64 microseconds, UUID 16 bytes, BYTEA the bytes, JSONB a version byte 1 then text,
//!    text types UTF-8.
//! 3. Bad data is 22P04 (bad_copy_file_format) with PostgreSQL's message; a value whose
//!    length does not fit its type 22P03 (invalid_binary_representation); text that is not
//!    UTF-8 22021. Nothing is copied.

use tierdb_tables::catalog::ColumnType;
use tierdb_tables::import::COPY_NULL;

/// What is wrong with the data, as PostgreSQL's SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadData {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl std::fmt::Display for BadData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BadData {}

fn bad(code: &'static str, message: impl Into<String>) -> BadData {
    BadData {
        code,
        message: message.into(),
    }
}

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Tuples,
    /// The -1 trailer was read: what follows is ignored, as PostgreSQL ignores it.
    Ended,
}

/// The binary stream of one COPY, decoded as it arrives.
#[derive(Debug)]
pub(crate) struct BinaryIn {
    types: Vec<ColumnType>,
    buf: Vec<u8>,
    state: State,
}

impl BinaryIn {
    /// For a COPY of columns of `types`, in the order the data sends them.
    pub(crate) fn new(types: Vec<ColumnType>) -> Self {
        BinaryIn {
            types,
            buf: Vec::new(),
            state: State::Header,
        }
    }

    /// Adds a CopyData message's bytes; appends every tuple now complete to `out` as a
    /// CopyText record.
    pub(crate) fn add(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), BadData> {
        if self.state == State::Ended {
            return Ok(());
        }
        self.buf.extend_from_slice(data);
        let mut at = 0;
        loop {
            match self.state {
                State::Header => match header_len(&self.buf)? {
                    Some(n) => {
                        at = n;
                        self.state = State::Tuples;
                    }
                    None => break,
                },
                State::Tuples => match self.tuple(&self.buf[at..], out)? {
                    Some(Step::Tuple(n)) => at += n,
                    Some(Step::End) => {
                        self.state = State::Ended;
                        break;
                    }
                    None => break,
                },
                State::Ended => break,
            }
        }
        self.buf.drain(..at);
        if self.state == State::Ended {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// At CopyDone: the data must have ended with its trailer or a whole tuple.
    pub(crate) fn finish(&self) -> Result<(), BadData> {
        match self.state {
            State::Header => Err(bad("22P04", "COPY file signature not recognized")),
            State::Tuples if !self.buf.is_empty() => {
                Err(bad("22P04", "unexpected EOF in COPY data"))
            }
            _ => Ok(()),
        }
    }

    /// One tuple from the start of `b` (rule 1): `None` until all of it is there.
    fn tuple(&self, b: &[u8], out: &mut Vec<u8>) -> Result<Option<Step>, BadData> {
        let Some(count) = b.get(..2) else {
            return Ok(None);
        };
        let count = i16::from_be_bytes([count[0], count[1]]);
        if count == -1 {
            return Ok(Some(Step::End));
        }
        if count as usize != self.types.len() || count < 0 {
            return Err(bad(
                "22P04",
                format!("row field count is {count}, expected {}", self.types.len()),
            ));
        }
        // The fields' extents first: nothing is written for a tuple not all here.
        let mut fields = Vec::with_capacity(self.types.len());
        let mut at = 2;
        for _ in 0..self.types.len() {
            let Some(len) = b.get(at..at + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4;
            if len == -1 {
                fields.push(None);
                continue;
            }
            let Ok(len) = usize::try_from(len) else {
                return Err(bad("22P04", format!("invalid field size {len}")));
            };
            if b.len() < at + len {
                return Ok(None);
            }
            fields.push(Some(&b[at..at + len]));
            at += len;
        }
        let mut record = Vec::with_capacity(at + 2 * fields.len());
        for (i, (field, ty)) in fields.into_iter().zip(&self.types).enumerate() {
            if i > 0 {
                record.push(b',');
            }
            match field {
                None => record.push(COPY_NULL),
                Some(v) => {
                    let text = value_text(*ty, v)?;
                    record.push(b'"');
                    for &c in text.as_bytes() {
                        if c == b'"' {
                            record.push(b'"');
                        }
                        record.push(c);
                    }
                    record.push(b'"');
                }
            }
        }
        record.push(b'\n');
        out.extend_from_slice(&record);
        Ok(Some(Step::Tuple(at)))
    }
}

enum Step {
    /// A tuple of this many bytes was decoded.
    Tuple(usize),
    End,
}

/// The header's length once all of it arrived.
fn header_len(b: &[u8]) -> Result<Option<usize>, BadData> {
    let signature = &b[..b.len().min(SIGNATURE.len())];
    if signature != &SIGNATURE[..signature.len()] {
        return Err(bad("22P04", "COPY file signature not recognized"));
    }
    let Some(fixed) = b.get(11..19) else {
        return Ok(None);
    };
    let flags = i32::from_be_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]);
    if flags & (1 << 16) != 0 {
        return Err(bad(
            "0A000",
            "COPY binary data with OIDs is not supported (tables have no OIDs)",
        ));
    }
    // PostgreSQL's reader: the high half other than bit 16 is critical (copyfromparse.c).
    if (flags & !(1 << 16)) >> 16 != 0 {
        return Err(bad(
            "22P04",
            "unrecognized critical flags in COPY file header",
        ));
    }
    let ext = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let Ok(ext) = usize::try_from(ext) else {
        return Err(bad("22P04", "invalid COPY file header (missing length)"));
    };
    Ok((b.len() >= 19 + ext).then_some(19 + ext))
}

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_DAYS: i64 = 10_957;

/// A value's PostgreSQL text from its binary form (rule 2).
fn value_text(ty: ColumnType, v: &[u8]) -> Result<String, BadData> {
    let size = |n: usize| -> Result<(), BadData> {
        if v.len() == n {
            Ok(())
        } else {
            Err(bad(
                "22P03",
                format!(
                    "incorrect binary data format: a {} value is {n} bytes, not {}",
                    ty.sql(),
                    v.len()
                ),
            ))
        }
    };
    let int = |v: &[u8]| -> i64 {
        v.iter().fold(
            if v.first().is_some_and(|b| b & 0x80 != 0) {
                -1i64
            } else {
                0
            },
            |acc, &b| (acc << 8) | i64::from(b),
        )
    };
    let utf8 = |v: &[u8]| -> Result<String, BadData> {
        String::from_utf8(v.to_vec()).map_err(|_| {
            bad(
                "22021",
                "invalid byte sequence for encoding \"UTF8\" in COPY binary data",
            )
        })
    };
    Ok(match ty {
        ColumnType::Boolean => {
            size(1)?;
            if v[0] != 0 { "t" } else { "f" }.to_string()
        }
        ColumnType::Int16 => {
            size(2)?;
            int(v).to_string()
        }
        ColumnType::Int32 => {
            size(4)?;
            int(v).to_string()
        }
        ColumnType::Int64 => {
            size(8)?;
            int(v).to_string()
        }
        ColumnType::Float32 => {
            size(4)?;
            float_text(
                f64::from(f32::from_be_bytes([v[0], v[1], v[2], v[3]])),
                || f32::from_be_bytes([v[0], v[1], v[2], v[3]]).to_string(),
            )
        }
        ColumnType::Float64 => {
            size(8)?;
            let x = f64::from_be_bytes(v.try_into().unwrap_or([0; 8]));
            float_text(x, || x.to_string())
        }
        ColumnType::Decimal { .. } | ColumnType::Numeric => {
            crate::numparams::binary_text(v).map_err(|e| bad("22P03", e))?
        }
        ColumnType::Date32 => {
            size(4)?;
            let days = int(v);
            match days {
                d if d == i64::from(i32::MAX) => "infinity".into(),
                d if d == i64::from(i32::MIN) => "-infinity".into(),
                d => date_text(d + PG_EPOCH_DAYS)?,
            }
        }
        ColumnType::Timestamp | ColumnType::TimestampTz => {
            size(8)?;
            let micros = int(v);
            match micros {
                i64::MAX => "infinity".into(),
                i64::MIN => "-infinity".into(),
                m => {
                    let days = m.div_euclid(86_400_000_000);
                    let time = time_text(m.rem_euclid(86_400_000_000));
                    let date = date_text(days + PG_EPOCH_DAYS)?;
                    // An instant: stated in UTC, so the session's zone is not applied.
                    let zone = if ty == ColumnType::TimestampTz {
                        "+00"
                    } else {
                        ""
                    };
                    let (date, era) = match date.strip_suffix(" BC") {
                        Some(d) => (d.to_string(), " BC"),
                        None => (date, ""),
                    };
                    format!("{date} {time}{zone}{era}")
                }
            }
        }
        ColumnType::Time => {
            size(8)?;
            let m = int(v);
            if !(0..=86_400_000_000).contains(&m) {
                return Err(bad("22P03", format!("time out of range: {m} microseconds")));
            }
            time_text(m)
        }
        ColumnType::Uuid => {
            size(16)?;
            let bytes: [u8; 16] = v.try_into().unwrap_or([0; 16]);
            uuid::Uuid::from_bytes(bytes).hyphenated().to_string()
        }
        ColumnType::Binary => {
            let mut s = String::with_capacity(2 + 2 * v.len());
            s.push_str("\\x");
            for b in v {
                s.push_str(&format!("{b:02x}"));
            }
            s
        }
        ColumnType::Jsonb => match v.split_first() {
            Some((1, text)) => utf8(text)?,
            Some((version, _)) => {
                return Err(bad(
                    "22P03",
                    format!("unsupported jsonb version number {version}"),
                ));
            }
            None => return Err(bad("22P03", "a binary jsonb value is empty")),
        },
        ColumnType::Utf8
        | ColumnType::Varchar { .. }
        | ColumnType::Char { .. }
        | ColumnType::VarcharUnbounded
        | ColumnType::Json => utf8(v)?,
    })
}

/// A float's text as PostgreSQL's input reads it back exactly.
fn float_text(x: f64, finite: impl Fn() -> String) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        finite()
    }
}

/// `YYYY-MM-DD` of days since 1970-01-01; years before 1 as PostgreSQL writes them (`BC`).
fn date_text(days: i64) -> Result<String, BadData> {
    let date = i32::try_from(days)
        .ok()
        .and_then(|d| chrono::NaiveDate::from_num_days_from_ce_opt(d.checked_add(719_163)?))
        .ok_or_else(|| bad("22008", "date out of range in COPY binary data"))?;
    use chrono::Datelike;
    let (year, era) = match date.year() {
        y if y <= 0 => (1 - y, " BC"),
        y => (y, ""),
    };
    Ok(format!(
        "{year:04}-{:02}-{:02}{era}",
        date.month(),
        date.day()
    ))
}

/// `HH:MM:SS.ffffff` of microseconds since midnight (`24:00:00` is midnight's end).
fn time_text(m: i64) -> String {
    let (s, us) = (m / 1_000_000, m % 1_000_000);
    format!("{:02}:{:02}:{:02}.{us:06}", s / 3600, (s / 60) % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary COPY stream of `tuples` (None: NULL).
    fn stream(tuples: &[Vec<Option<Vec<u8>>>]) -> Vec<u8> {
        let mut b = SIGNATURE.to_vec();
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        for t in tuples {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            for f in t {
                match f {
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        b.extend_from_slice(v);
                    }
                }
            }
        }
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b
    }

    fn decode(types: Vec<ColumnType>, data: &[u8], split: usize) -> Result<String, BadData> {
        let mut d = BinaryIn::new(types);
        let mut out = Vec::new();
        for chunk in data.chunks(split.max(1)) {
            d.add(chunk, &mut out)?;
        }
        d.finish()?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn tuples_split_anywhere_decode_to_text_records() {
        let data = stream(&[
            vec![
                Some(20i32.to_be_bytes().to_vec()),
                Some(b"say \"hi\"".to_vec()),
                None,
            ],
            vec![Some((-7i32).to_be_bytes().to_vec()), Some(Vec::new()), None],
        ]);
        let types = vec![ColumnType::Int32, ColumnType::Utf8, ColumnType::TimestampTz];
        for split in [1, 3, 7, data.len()] {
            assert_eq!(
                decode(types.clone(), &data, split).expect("decodes"),
                "\"20\",\"say \"\"hi\"\"\",\u{fffd}\n\"-7\",\"\",\u{fffd}\n",
                "split {split}"
            );
        }
    }

    #[test]
    fn values_are_postgresqls_text() {
        let micros: i64 = 768_484_800_123_456; // 2024-05-08 12:00:00.123456 after 2000-01-01
        assert_eq!(
            value_text(ColumnType::TimestampTz, &micros.to_be_bytes()).expect("ts"),
            "2024-05-08 12:00:00.123456+00"
        );
        assert_eq!(
            value_text(ColumnType::Timestamp, &(-1i64).to_be_bytes()).expect("ts"),
            "1999-12-31 23:59:59.999999"
        );
        assert_eq!(
            value_text(ColumnType::Date32, &(-730_120i32).to_be_bytes()).expect("date"),
            "0001-12-31 BC"
        );
        assert_eq!(
            value_text(ColumnType::Time, &3_723_000_001i64.to_be_bytes()).expect("time"),
            "01:02:03.000001"
        );
        assert_eq!(
            value_text(ColumnType::Float64, &f64::NEG_INFINITY.to_be_bytes()).expect("inf"),
            "-Infinity"
        );
        assert_eq!(
            value_text(ColumnType::Float32, &0.1f32.to_be_bytes()).expect("real"),
            "0.1"
        );
        assert_eq!(
            value_text(ColumnType::Int16, &(-2i16).to_be_bytes()).expect("smallint"),
            "-2"
        );
        assert_eq!(
            value_text(ColumnType::Binary, &[0, 0xff]).expect("bytea"),
            "\\x00ff"
        );
        assert_eq!(
            value_text(ColumnType::Jsonb, b"\x01{\"a\": 1}").expect("jsonb"),
            "{\"a\": 1}"
        );
        let mut u = [0u8; 16];
        u[15] = 1;
        assert_eq!(
            value_text(ColumnType::Uuid, &u).expect("uuid"),
            "00000000-0000-0000-0000-000000000001"
        );
        // numeric_send of 12.50: 2 digits, weight 0, positive, dscale 2: 12, 5000.
        let n = [0, 2, 0, 0, 0, 0, 0, 2, 0, 12, 0x13, 0x88];
        assert_eq!(
            value_text(ColumnType::Numeric, &n).expect("numeric"),
            "12.50"
        );
    }

    #[test]
    fn bad_streams_get_postgresqls_codes() {
        let types = vec![ColumnType::Int32];
        let e = decode(types.clone(), b"PGCOPX\n", 100).expect_err("signature");
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22P04", "COPY file signature not recognized")
        );
        let two = stream(&[vec![Some(1i32.to_be_bytes().to_vec()), None]]);
        let e = decode(types.clone(), &two, 100).expect_err("count");
        assert_eq!(e.message, "row field count is 2, expected 1");
        let short = stream(&[vec![Some(vec![0, 1])]]);
        assert_eq!(
            decode(types.clone(), &short, 100).expect_err("size").code,
            "22P03"
        );
        let cut = &stream(&[vec![Some(1i32.to_be_bytes().to_vec())]])[..22];
        assert_eq!(
            decode(types.clone(), cut, 100).expect_err("eof").message,
            "unexpected EOF in COPY data"
        );
        let text = stream(&[vec![Some(vec![0xc3, 0x28])]]);
        assert_eq!(
            decode(vec![ColumnType::Utf8], &text, 100)
                .expect_err("utf8")
                .code,
            "22021"
        );
    }
}
