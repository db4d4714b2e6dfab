//! Values of the types whose text form needs more than `str::parse`: BYTEA, read as
//! PostgreSQL's `byteain` reads it, for statements (`textin`'s casts from text) and for
//! CSV files and COPY (after COPY's own escapes are undone). Dates, times and timestamps
//! are read by `textin::parse`.

/// BYTEA text as PostgreSQL reads it:
/// - hex format: `\x` then pairs of hex digits (either case; whitespace between pairs);
/// - escape format, anything else: `\\` is one backslash, `\ooo` (three octal digits up
///   to `\377`) one byte, every other byte itself; any other backslash is an error.
///
/// The error is PostgreSQL's message (SQLSTATE 22P02 for the escape format, 22023 for the
/// hex format: [`bytea_error_code`]).
pub fn bytea_in(text: &str) -> Result<Vec<u8>, String> {
    let b = text.as_bytes();
    if let Some(hex) = text.strip_prefix("\\x") {
        let digits: Vec<u8> = hex.bytes().collect();
        let mut out = Vec::with_capacity(digits.len() / 2);
        let mut i = 0;
        while i < digits.len() {
            if digits[i].is_ascii_whitespace() {
                i += 1;
                continue;
            }
            let hi = hex_digit(digits[i])?;
            let lo = match digits.get(i + 1) {
                Some(d) => hex_digit(*d)?,
                None => return Err("invalid hexadecimal data: odd number of digits".into()),
            };
            out.push(hi << 4 | lo);
            i += 2;
        }
        return Ok(out);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if let Some(&[a, c, d]) = b.get(i + 1..i + 4)
            && (b'0'..=b'3').contains(&a)
            && (b'0'..=b'7').contains(&c)
            && (b'0'..=b'7').contains(&d)
        {
            out.push((a - b'0') << 6 | (c - b'0') << 3 | (d - b'0'));
            i += 4;
        } else {
            return Err("invalid input syntax for type bytea".into());
        }
    }
    Ok(out)
}

/// The SQLSTATE of a [`bytea_in`] error message, as PostgreSQL raises it.
pub fn bytea_error_code(message: &str) -> &'static str {
    if message.starts_with("invalid hexadecimal") {
        "22023"
    } else {
        "22P02"
    }
}

fn hex_digit(d: u8) -> Result<u8, String> {
    (d as char)
        .to_digit(16)
        .map(|v| v as u8)
        .ok_or_else(|| format!("invalid hexadecimal digit: \"{}\"", d as char))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each case is PostgreSQL 15's answer to `SELECT '<text>'::bytea`.
    #[test]
    fn hex_format() {
        assert_eq!(bytea_in("\\x00ff10"), Ok(vec![0, 255, 16]));
        assert_eq!(bytea_in("\\x"), Ok(vec![]));
        assert_eq!(bytea_in("\\xDEad BE ef"), Ok(vec![0xde, 0xad, 0xbe, 0xef]));
        assert_eq!(
            bytea_in("\\x0"),
            Err("invalid hexadecimal data: odd number of digits".into())
        );
        assert_eq!(
            bytea_in("\\xzz"),
            Err("invalid hexadecimal digit: \"z\"".into())
        );
        assert_eq!(
            bytea_error_code("invalid hexadecimal digit: \"z\""),
            "22023"
        );
    }

    #[test]
    fn escape_format() {
        assert_eq!(bytea_in("ab"), Ok(b"ab".to_vec()));
        assert_eq!(bytea_in(""), Ok(vec![]));
        assert_eq!(bytea_in("a\\\\b"), Ok(b"a\\b".to_vec()));
        assert_eq!(bytea_in("\\000\\377x"), Ok(vec![0, 255, b'x']));
        assert_eq!(bytea_in("é"), Ok("é".as_bytes().to_vec()));
        for bad in ["\\", "a\\b", "\\400", "\\12", "\\X00"] {
            assert_eq!(
                bytea_in(bad),
                Err("invalid input syntax for type bytea".into()),
                "{bad}"
            );
        }
        assert_eq!(
            bytea_error_code("invalid input syntax for type bytea"),
            "22P02"
        );
    }
}
