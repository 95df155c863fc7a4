//! Points in time as people type them in `--since` and `?since=`: an RFC 3339 time
//! (`2026-12-01T08:00:00Z`), a UTC date (`2026-12-01`), or an age (`90m`, `24h`,
//! `7d`, `2w`: that long before now).

use chrono::{NaiveDate, TimeDelta};

use crate::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a time: use RFC 3339 (2026-12-01T08:00:00Z), a date (2026-12-01) or an age (90m, 24h, 7d, 2w)")]
pub struct TimeArgError {
    pub value: String,
}

/// Reads a time argument relative to `now`.
///
/// # Errors
/// A value in none of the three forms.
pub fn parse_time(value: &str, now: Timestamp) -> Result<Timestamp, TimeArgError> {
    let value = value.trim();
    let err = || TimeArgError { value: value.to_owned() };
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(crate::truncate_micros(t.with_timezone(&chrono::Utc)));
    }
    if let Ok(date) = NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        return Ok(date.and_hms_opt(0, 0, 0).ok_or_else(err)?.and_utc());
    }
    let age = parse_age(value).ok_or_else(err)?;
    now.checked_sub_signed(age).ok_or_else(err)
}

/// `90s`, `90m`, `24h`, `7d`, `2w`.
pub fn parse_age(value: &str) -> Option<TimeDelta> {
    let split = value.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = value.split_at(split);
    let n: i64 = digits.parse().ok()?;
    match unit {
        "s" => TimeDelta::try_seconds(n),
        "m" => TimeDelta::try_minutes(n),
        "h" => TimeDelta::try_hours(n),
        "d" => TimeDelta::try_days(n),
        "w" => TimeDelta::try_weeks(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_three_forms_are_read() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 12, 10, 12, 0, 0).unwrap();
        assert_eq!(parse_time("2026-12-01T08:00:00+08:00", now).unwrap(), chrono::Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        assert_eq!(parse_time("2026-12-01", now).unwrap(), chrono::Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        assert_eq!(parse_time("7d", now).unwrap(), chrono::Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap());
        assert_eq!(parse_time("90m", now).unwrap(), chrono::Utc.with_ymd_and_hms(2026, 12, 10, 10, 30, 0).unwrap());
        assert!(parse_time("yesterday", now).is_err());
        assert!(parse_time("7y", now).is_err());
    }
}
