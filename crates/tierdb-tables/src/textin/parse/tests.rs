//! Each case's answer is PostgreSQL 15's for the same text.

use super::*;

fn utc(text: &str) -> String {
    let w = timestamp(text, TIMESTAMPTZ).unwrap();
    let micros = instant_micros(&w, &"+00:00".parse().unwrap());
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .naive_utc()
        .to_string()
}

fn in_zone(text: &str, zone: &str) -> String {
    let w = timestamp(text, TIMESTAMPTZ).unwrap();
    let micros = instant_micros(&w, &zone.parse().unwrap());
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .naive_utc()
        .to_string()
}

fn code(e: TableError) -> &'static str {
    e.sqlstate()
}

#[test]
fn timestamps_in_postgresql_forms() {
    assert_eq!(utc("2024-05-17 10:00"), "2024-05-17 10:00:00");
    assert_eq!(utc("2024-05-17T10:00:01.5"), "2024-05-17 10:00:01.500");
    assert_eq!(utc(" 2024-05-17 "), "2024-05-17 00:00:00");
    assert_eq!(utc("2024-05-17 10:00:00+02"), "2024-05-17 08:00:00");
    assert_eq!(utc("2024-05-17 10:00:00 +05:30"), "2024-05-17 04:30:00");
    assert_eq!(utc("2024-05-17 10:00:00-0330"), "2024-05-17 13:30:00");
    assert_eq!(utc("2024-05-17 10:00:00Z"), "2024-05-17 10:00:00");
    assert_eq!(utc("2024-05-17 10:00:00 UTC"), "2024-05-17 10:00:00");
    assert_eq!(
        utc("2024-01-17 10:00:00 America/New_York"),
        "2024-01-17 15:00:00"
    );
    assert_eq!(utc("2024-05-17 24:00:00"), "2024-05-18 00:00:00");
    assert_eq!(utc("2024-05-17 10:0"), "2024-05-17 10:00:00");
    assert_eq!(
        utc("2024-05-17 10:00:00.1234565"),
        "2024-05-17 10:00:00.123456"
    );
    assert_eq!(
        utc("2024-05-17 10:00:00.12345651"),
        "2024-05-17 10:00:00.123457"
    );
    assert_eq!(utc("2024-05-17 23:59:60"), "2024-05-18 00:00:00");
    assert_eq!(utc("epoch"), "1970-01-01 00:00:00");
}

#[test]
fn wall_clock_time_is_read_in_the_session_zone() {
    assert_eq!(
        in_zone("2024-01-01 10:00:00", "America/New_York"),
        "2024-01-01 15:00:00"
    );
    assert_eq!(
        in_zone("2024-07-01 10:00", "America/New_York"),
        "2024-07-01 14:00:00"
    );
    // A written offset wins over the session's zone.
    assert_eq!(
        in_zone("2024-07-01 10:00+00", "America/New_York"),
        "2024-07-01 10:00:00"
    );
    // Clocks skipped 02:00-03:00 on 2024-03-10: PostgreSQL reads 02:30 as EST (07:30 UTC).
    assert_eq!(
        in_zone("2024-03-10 02:30", "America/New_York"),
        "2024-03-10 07:30:00"
    );
    // 01:30 happened twice on 2024-11-03: PostgreSQL takes the later, EST (06:30 UTC).
    assert_eq!(
        in_zone("2024-11-03 01:30", "America/New_York"),
        "2024-11-03 06:30:00"
    );
}

#[test]
fn bad_timestamps_fail_as_postgresql_fails() {
    for text in [
        "noon",
        "2024-05",
        "24-05-17",
        "2024-05-17 10",
        "2024-05-17 10:",
    ] {
        let e = timestamp(text, TIMESTAMP).unwrap_err();
        assert_eq!(code(e), "22007", "{text}");
    }
    for text in [
        "2024-02-30",
        "2024-13-01",
        "2024-05-17 25:00",
        "2024-05-17 10:60",
    ] {
        let e = timestamp(text, TIMESTAMP).unwrap_err();
        assert_eq!(code(e), "22008", "{text}");
        assert!(e_text(text).contains("date/time field value out of range"));
    }
    let e = timestamp("2024-05-17 10:00 Mars/Olympus", TIMESTAMPTZ).unwrap_err();
    assert_eq!(e.to_string(), "time zone \"mars/olympus\" not recognized");
    let e = timestamp("abc", TIMESTAMPTZ).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid input syntax for type timestamp with time zone: \"abc\""
    );
}

fn e_text(text: &str) -> String {
    timestamp(text, TIMESTAMP).unwrap_err().to_string()
}

#[test]
fn times_and_dates() {
    assert_eq!(time("10:11").unwrap(), 36_660_000_000);
    assert_eq!(time("10:11:12.5").unwrap(), 36_672_500_000);
    assert_eq!(time("10:11:12+02").unwrap(), 36_672_000_000);
    assert_eq!(time("2024-01-01 10:11:12").unwrap(), 36_672_000_000);
    assert_eq!(code(time("25:00").unwrap_err()), "22008");
    assert_eq!(code(time("noon").unwrap_err()), "22007");
    let e = time("24:00:00").unwrap_err().to_string();
    assert!(e.contains("23:59:59.999999"), "{e}");
    assert_eq!(date("1970-01-02").unwrap(), 1);
    assert_eq!(date("2024-01-02 10:00").unwrap(), 19724);
    assert_eq!(code(date("2024-02-30").unwrap_err()), "22008");
    assert_eq!(code(date("x").unwrap_err()), "22007");
}

#[test]
fn numeric_text_with_exponents_and_rounding() {
    let n = |t: &str, s: i8| numeric(t, s).unwrap();
    assert_eq!(n("1e5", 0), "100000");
    assert_eq!(n("1E+2", 2), "100.00");
    assert_eq!(n("-1.5e-3", 4), "-0.0015");
    assert_eq!(n("-1.5e-3", 2), "0.00");
    assert_eq!(n("1.235", 2), "1.24");
    assert_eq!(n("-1.235", 2), "-1.24");
    assert_eq!(n("1.234", 2), "1.23");
    assert_eq!(n("9.995", 2), "10.00");
    assert_eq!(n("+.5", 0), "1");
    assert_eq!(n("5.", 1), "5.0");
    assert_eq!(n(" 007 ", 0), "7");
    assert_eq!(n("5e-3", 2), "0.01");
    assert_eq!(n("1e-999", 2), "0.00");
    for bad in ["", "abc", "1e", "1.2.3", "--1", "1e+", ".", "1 2"] {
        assert_eq!(code(numeric(bad, 2).unwrap_err()), "22P02", "{bad:?}");
    }
    assert_eq!(code(numeric("NaN", 2).unwrap_err()), "0A000");
    assert_eq!(code(numeric("1e2000", 2).unwrap_err()), "22003");
}
