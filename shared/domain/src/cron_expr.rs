//! Cron expressions as users write them, read in an IANA time zone.
//!
//! The `cron` crate reads day-of-week numbers the Quartz way (1 = Sunday). A 5-field
//! crontab means the Unix way (0 or 7 = Sunday, 1 = Monday), so numeric day-of-week
//! values of 5-field expressions are rewritten to names before parsing; 6- and
//! 7-field expressions (with seconds) are passed through unchanged.
//!
//! # Daylight-saving time
//! Fires are found on the local wall clock, then placed on the time line:
//! - a wall time that does not exist (spring forward, e.g. 02:30 on the night clocks
//!   jump from 02:00 to 03:00) fires once, at the first valid instant after it (03:00);
//! - a wall time that happens twice (fall back, e.g. 01:30 when 02:00 returns to 01:00)
//!   fires once, at its first occurrence; the repeated hour's wall times are not fired
//!   again.
//!
//! [`CronSchedule::next_after`] and [`CronSchedule::upcoming`] are the only ways to
//! compute fires; the planner, backfill and `ax cron preview` all use them, so the
//! preview always agrees with what fires.

use std::str::FromStr;

use chrono::{TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::Timestamp;

/// A parsed expression bound to its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    schedule: cron::Schedule,
    zone: Tz,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CronError {
    #[error("cron expression {expr:?} has {fields} fields; expected 5 (crontab), 6 or 7 (with seconds)")]
    FieldCount { expr: String, fields: usize },
    #[error("cron expression {expr:?} is invalid: {reason}")]
    Expression { expr: String, reason: String },
    #[error("time zone {zone:?} is not an IANA zone name (e.g. Asia/Shanghai, UTC)")]
    Zone { zone: String },
}

impl CronError {
    /// The definition field at fault, relative to the trigger.
    pub fn field(&self) -> &'static str {
        match self {
            CronError::Zone { .. } => "timezone",
            _ => "cron",
        }
    }
}

impl CronSchedule {
    /// # Errors
    /// A wrong field count, an expression `cron` refuses, or an unknown zone.
    pub fn parse(expr: &str, zone: &str) -> Result<Self, CronError> {
        let zone: Tz = zone.parse().map_err(|_| CronError::Zone { zone: zone.to_owned() })?;
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let normalized = match fields.len() {
            5 => {
                let dow = unix_day_of_week_to_names(fields[4])
                    .ok_or_else(|| CronError::Expression { expr: expr.to_owned(), reason: "day of week must be 0-7 or a name".into() })?;
                format!("0 {} {} {} {} {}", fields[0], fields[1], fields[2], fields[3], dow)
            }
            6 | 7 => fields.join(" "),
            n => return Err(CronError::FieldCount { expr: expr.to_owned(), fields: n }),
        };
        let schedule = cron::Schedule::from_str(&normalized)
            .map_err(|err| CronError::Expression { expr: expr.to_owned(), reason: err.to_string() })?;
        Ok(Self { schedule, zone })
    }

    /// The first fire strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // Walk the wall clock: the cron crate iterates a naive calendar (read as UTC),
        // which has no gaps or repeats; each wall time is then placed in the zone.
        let mut wall = after.with_timezone(&self.zone).naive_local();
        for _ in 0..10_000 {
            let next_wall = self.schedule.after(&Utc.from_utc_datetime(&wall)).next()?.naive_utc();
            if let Some(instant) = self.place(next_wall, after) {
                return Some(instant);
            }
            wall = next_wall;
        }
        None
    }

    /// The last fire strictly before `before`.
    pub fn previous_before(&self, before: Timestamp) -> Option<Timestamp> {
        let local = before.with_timezone(&self.zone);
        self.schedule.after(&local).next_back().map(|t| t.with_timezone(&Utc))
    }

    /// The next `count` fires after `after`, in UTC.
    pub fn upcoming(&self, after: Timestamp, count: usize) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(next) => {
                    out.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        out
    }

    /// Every fire in `(from, to]`, at most `limit`.
    pub fn fires_between(&self, from: Timestamp, to: Timestamp, limit: usize) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let mut cursor = from;
        while out.len() < limit {
            match self.next_after(cursor) {
                Some(next) if next <= to => {
                    out.push(next);
                    cursor = next;
                }
                _ => break,
            }
        }
        out
    }

    /// The instant of a wall time: its only one, its first if repeated, the first valid
    /// instant after the gap if skipped. `None` if that instant is not after `after`
    /// (the wall time's first occurrence already passed).
    fn place(&self, wall: chrono::NaiveDateTime, after: Timestamp) -> Option<Timestamp> {
        use chrono::offset::LocalResult;
        let instant = match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            LocalResult::Ambiguous(first, second) => {
                let (first, second) = (first.with_timezone(&Utc), second.with_timezone(&Utc));
                if first > after {
                    first
                } else if second > after && after.with_timezone(&self.zone).naive_local() < wall {
                    // `after` lies inside the repeated hour, before this wall time's
                    // second occurrence, and the first occurrence was never seen: fire once.
                    second
                } else {
                    return None;
                }
            }
            LocalResult::None => {
                // Skipped by a spring-forward gap: the first wall minute that exists.
                let mut probe = wall;
                loop {
                    probe += chrono::TimeDelta::minutes(1);
                    probe = probe.with_second(0)?;
                    if let Some(t) = self.zone.from_local_datetime(&probe).earliest() {
                        break t.with_timezone(&Utc);
                    }
                    if probe - wall > chrono::TimeDelta::hours(3) {
                        return None;
                    }
                }
            }
        };
        (instant > after).then_some(instant)
    }

    pub fn zone(&self) -> Tz {
        self.zone
    }
}

/// Rewrites Unix day-of-week numbers (0-7, Sunday = 0 or 7) to names the `cron`
/// crate reads unambiguously. `None` for a number out of range.
fn unix_day_of_week_to_names(field: &str) -> Option<String> {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    let mut out = String::with_capacity(field.len() * 2);
    let mut number = String::new();
    let mut after_slash = false;
    let flush = |number: &mut String, out: &mut String, after_slash: bool| -> Option<()> {
        if number.is_empty() {
            return Some(());
        }
        if after_slash {
            out.push_str(number);
        } else {
            let n: usize = number.parse().ok()?;
            out.push_str(NAMES.get(n)?);
        }
        number.clear();
        Some(())
    };
    for ch in field.chars() {
        if ch.is_ascii_digit() {
            number.push(ch);
            continue;
        }
        flush(&mut number, &mut out, after_slash)?;
        match ch {
            '/' => after_slash = true,
            ',' => after_slash = false,
            _ => {}
        }
        out.push(ch);
    }
    flush(&mut number, &mut out, after_slash)?;
    // "FRI-SUN" (from 5-7 or 5-0) wraps past Saturday; spell it as two pieces.
    Some(out.replace("-SUN", "-SAT,SUN"))
}

#[cfg(test)]
mod tests {
    use chrono::{Datelike, TimeZone, Timelike, Weekday};

    use super::*;

    #[test]
    fn the_previous_fire_is_strictly_before() {
        let monthly = CronSchedule::parse("0 9 1 * *", "UTC").unwrap();
        let fire = Utc.with_ymd_and_hms(2027, 1, 1, 9, 0, 0).unwrap();
        assert_eq!(monthly.previous_before(fire), Some(Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()));
        let later = Utc.with_ymd_and_hms(2027, 1, 15, 0, 0, 0).unwrap();
        assert_eq!(monthly.previous_before(later), Some(fire));
    }

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Timestamp {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn five_fields_fire_at_second_zero_in_the_zone() {
        let s = CronSchedule::parse("0 2 * * *", "Asia/Shanghai").unwrap();
        let next = s.next_after(at(2026, 6, 1, 0, 0)).unwrap();
        // 02:00 in Shanghai is 18:00 UTC the day before.
        assert_eq!(next, at(2026, 6, 1, 18, 0));
    }

    #[test]
    fn unix_day_of_week_numbers_mean_what_crontab_means() {
        // 2026-06-01 is a Monday.
        let monday = CronSchedule::parse("0 9 * * 1", "UTC").unwrap();
        assert_eq!(monday.next_after(at(2026, 5, 30, 0, 0)).unwrap().weekday(), Weekday::Mon);
        for sunday in ["0 9 * * 0", "0 9 * * 7"] {
            let s = CronSchedule::parse(sunday, "UTC").unwrap();
            assert_eq!(s.next_after(at(2026, 6, 1, 0, 0)).unwrap().weekday(), Weekday::Sun);
        }
        let weekdays = CronSchedule::parse("0 9 * * 1-5", "UTC").unwrap();
        let days: Vec<Weekday> = weekdays.upcoming(at(2026, 5, 31, 12, 0), 5).iter().map(|t| t.weekday()).collect();
        assert_eq!(days, [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri]);
        let weekend = CronSchedule::parse("0 9 * * 6-7", "UTC").unwrap();
        let days: Vec<Weekday> = weekend.upcoming(at(2026, 6, 1, 0, 0), 2).iter().map(|t| t.weekday()).collect();
        assert_eq!(days, [Weekday::Sat, Weekday::Sun]);
    }

    #[test]
    fn six_fields_carry_seconds() {
        let s = CronSchedule::parse("*/15 * * * * *", "UTC").unwrap();
        let fires = s.upcoming(at(2026, 6, 1, 0, 0), 3);
        assert_eq!(fires.iter().map(|t| t.second()).collect::<Vec<_>>(), [15, 30, 45]);
    }

    fn local(zone: &str, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Timestamp {
        let tz: Tz = zone.parse().unwrap();
        tz.with_ymd_and_hms(y, mo, d, h, mi, 0).earliest().unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_wall_time_skipped_by_spring_forward_fires_once_at_the_first_valid_instant() {
        // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
        let s = CronSchedule::parse("30 2 * * *", "America/New_York").unwrap();
        let fires = s.upcoming(local("America/New_York", 2026, 3, 7, 12, 0), 3);
        assert_eq!(fires[0], at(2026, 3, 8, 7, 0), "03:00 EDT");
        assert_eq!(fires[1], at(2026, 3, 9, 6, 30), "02:30 EDT the day after");
        // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let s = CronSchedule::parse("15 2 * * *", "Europe/Berlin").unwrap();
        let fires = s.upcoming(at(2026, 3, 28, 12, 0), 2);
        assert_eq!(fires, [at(2026, 3, 29, 1, 0), at(2026, 3, 30, 0, 15)]);
    }

    #[test]
    fn a_wall_time_repeated_by_fall_back_fires_once() {
        // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
        let s = CronSchedule::parse("30 1 * * *", "America/New_York").unwrap();
        let fires = s.upcoming(at(2026, 10, 31, 12, 0), 2);
        assert_eq!(fires, [at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)], "01:30 EDT once, then 01:30 EST next day");
        // Every 20 minutes through the repeated hour: each wall time once.
        let s = CronSchedule::parse("*/20 * * * *", "Europe/Berlin").unwrap();
        // Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET.
        let fires = s.fires_between(at(2026, 10, 24, 23, 50), at(2026, 10, 25, 2, 0), 100);
        let distinct: std::collections::HashSet<_> = fires.iter().collect();
        assert_eq!(distinct.len(), fires.len(), "no instant twice");
        let walls: Vec<String> = fires.iter().map(|t| t.with_timezone(&s.zone()).format("%H:%M").to_string()).collect();
        let mut sorted = walls.clone();
        sorted.dedup();
        assert_eq!(walls, sorted, "no wall time twice: {walls:?}");
    }

    #[test]
    fn a_schedule_starting_inside_the_repeated_hour_fires_its_next_wall_time_once() {
        let s = CronSchedule::parse("45 1 * * *", "America/New_York").unwrap();
        // Registered at 01:40 EST, the second pass through 01:xx: 01:45 EDT passed before
        // it existed, so 01:45 EST is its one fire of that wall time; then the next day.
        let fires = s.upcoming(at(2026, 11, 1, 6, 40), 2);
        assert_eq!(fires, [at(2026, 11, 1, 6, 45), at(2026, 11, 2, 6, 45)]);
        // Seen from its first occurrence (the planner's view after firing it), the
        // second occurrence is never fired.
        assert_eq!(s.next_after(at(2026, 11, 1, 5, 45)), Some(at(2026, 11, 2, 6, 45)));
    }

    #[test]
    fn bad_expressions_and_zones_say_which_field() {
        assert_eq!(CronSchedule::parse("0 2 * *", "UTC").unwrap_err().field(), "cron");
        assert_eq!(CronSchedule::parse("0 25 * * *", "UTC").unwrap_err().field(), "cron");
        assert_eq!(CronSchedule::parse("0 2 * * 8", "UTC").unwrap_err().field(), "cron");
        assert_eq!(CronSchedule::parse("0 2 * * *", "Mars/Olympus").unwrap_err().field(), "timezone");
    }
}
