//! Object ids and transaction ids, as ZODB defines them: 8 bytes, big-endian.
//!
//! A [`Tid`] is a ZODB `TimeStamp`: the first 4 bytes count minutes since 1900-01-01 UTC
//! (`((((year-1900)*12 + month-1)*31 + day-1)*24 + hour)*60 + minute`), the last 4 the
//! seconds within that minute in units of 60/2^32 s. Tids of one database strictly
//! increase: a new one is the current time, or the last tid plus one if the clock is behind.

use std::fmt;

use chrono::{Datelike, TimeZone, Timelike, Utc};

/// An object id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Oid(pub u64);

/// A transaction id (and an object revision's serial).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid(pub u64);

impl Oid {
    /// The root object.
    pub const ROOT: Oid = Oid(0);

    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(b: &[u8]) -> Option<Oid> {
        b.try_into()
            .ok()
            .map(|a: [u8; 8]| Oid(u64::from_be_bytes(a)))
    }
}

impl Tid {
    /// "No revision": the serial of an object not stored yet (ZODB's `z64`).
    pub const ZERO: Tid = Tid(0);
    pub const MAX: Tid = Tid(u64::MAX);

    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(b: &[u8]) -> Option<Tid> {
        b.try_into()
            .ok()
            .map(|a: [u8; 8]| Tid(u64::from_be_bytes(a)))
    }

    /// The tid of a moment, `secs` since the Unix epoch (UTC).
    pub fn from_unix(secs: f64) -> Tid {
        let whole = secs.floor();
        let nanos = ((secs - whole) * 1e9) as u32;
        let Some(t) = Utc
            .timestamp_opt(whole as i64, nanos.min(999_999_999))
            .single()
        else {
            return Tid::ZERO;
        };
        let minutes = ((((i64::from(t.year()) - 1900) * 12 + i64::from(t.month0())) * 31
            + i64::from(t.day0()))
            * 24
            + i64::from(t.hour()))
            * 60
            + i64::from(t.minute());
        let seconds = f64::from(t.second()) + f64::from(t.nanosecond()) / 1e9;
        let fraction = (seconds * (4_294_967_296.0 / 60.0)) as u64;
        Tid(((minutes.clamp(0, u32::MAX as i64) as u64) << 32) | fraction.min(u32::MAX as u64))
    }

    /// Seconds since the Unix epoch this tid stands for.
    pub fn to_unix(self) -> f64 {
        let mut minutes = (self.0 >> 32) as i64;
        let seconds = (self.0 & 0xffff_ffff) as f64 * (60.0 / 4_294_967_296.0);
        let minute = minutes % 60;
        minutes /= 60;
        let hour = minutes % 24;
        minutes /= 24;
        let day = minutes % 31 + 1;
        minutes /= 31;
        let month = minutes % 12 + 1;
        let year = minutes / 12 + 1900;
        match Utc
            .with_ymd_and_hms(
                year as i32,
                month as u32,
                day as u32,
                hour as u32,
                minute as u32,
                0,
            )
            .single()
        {
            Some(t) => t.timestamp() as f64 + seconds,
            None => 0.0,
        }
    }

    /// The next tid after `last` for a transaction committing now.
    pub fn next_after(last: Tid) -> Tid {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let t = Tid::from_unix(now);
        if t > last { t } else { Tid(last.0 + 1) }
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tid_round_trips_time_to_the_microsecond() {
        for secs in [0.0, 1_700_000_000.25, 1_800_000_123.999_99, 946_684_800.5] {
            let back = Tid::from_unix(secs).to_unix();
            assert!((back - secs).abs() < 1e-6, "{secs} -> {back}");
        }
    }

    #[test]
    fn tids_order_like_time_and_strictly_increase() {
        assert!(Tid::from_unix(1_700_000_000.0) < Tid::from_unix(1_700_000_000.001));
        assert!(Tid::from_unix(1_700_000_059.9) < Tid::from_unix(1_700_000_060.0));
        let far_future = Tid::from_unix(4_000_000_000.0);
        assert_eq!(Tid::next_after(far_future), Tid(far_future.0 + 1));
        let now = Tid::next_after(Tid::ZERO);
        assert!(now > Tid::ZERO && Tid::next_after(now) > now);
    }

    #[test]
    fn known_zodb_timestamp() {
        // 2000-01-01 00:00 UTC: ZODB counts (100 years * 12 months * 31 days) of minutes.
        let t = Tid::from_unix(946_684_800.0); // 2000-01-01T00:00:00Z
        assert_eq!(t.0 >> 32, (100 * 12 * 31) * 24 * 60);
        assert_eq!(t.0 & 0xffff_ffff, 0);
    }
}
