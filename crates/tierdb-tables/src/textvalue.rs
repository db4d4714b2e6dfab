//! Values of the types whose text form needs more than `str::parse`, as CSV files and
//! PostgreSQL's COPY write them: BYTEA. (Dates, times and timestamps are read by
//! `textin::parse`, as statements read them.)

/// BYTEA in PostgreSQL's hex format (`\x0a0b`, as COPY and psql write it); text without the
/// `\x` prefix is taken as its UTF-8 bytes. `None` for a bad hex digit or an odd count.
pub fn bytea(text: &str) -> Option<Vec<u8>> {
    let Some(hex) = text.strip_prefix("\\x") else {
        return Some(text.as_bytes().to_vec());
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytea_hex_and_raw() {
        assert_eq!(bytea("\\x00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(bytea("\\x"), Some(vec![]));
        assert_eq!(bytea("ab"), Some(b"ab".to_vec()));
        assert_eq!(bytea("\\x0"), None);
        assert_eq!(bytea("\\xzz"), None);
    }
}
