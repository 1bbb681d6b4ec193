//! Time as stored and shown: RFC 3339 UTC with milliseconds, and human durations.

use std::time::{Duration, SystemTime};

/// Now, as stored in the database and the event log (`2026-11-22T08:00:00.123Z`).
pub fn now_rfc3339() -> String {
    to_rfc3339(SystemTime::now())
}

/// The latest time RFC 3339 can write (9999-12-31T23:59:59.999Z), as seconds since 1970.
const LAST_WRITABLE_SECS: u64 = 253_402_300_799;

/// A point in time as RFC 3339 UTC with milliseconds. Times before 1970 or past the year
/// 9999 are written as the nearest one that can be (never a panic).
pub fn to_rfc3339(t: SystemTime) -> String {
    let last = SystemTime::UNIX_EPOCH + Duration::from_millis(LAST_WRITABLE_SECS * 1000 + 999);
    let t = t.clamp(SystemTime::UNIX_EPOCH, last);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The longest duration accepted anywhere (a hundred years): past it, adding it to now
/// would overflow, and it is a typo rather than a limit.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now - d`, when that is not before 1970 (stored times start there).
pub fn before_now(d: Duration) -> Result<SystemTime, String> {
    SystemTime::now()
        .checked_sub(d)
        .filter(|t| *t >= SystemTime::UNIX_EPOCH)
        .ok_or_else(|| format!("{} ago is before 1970", short_duration(d)))
}

/// Parses a stored timestamp.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

/// Parses a duration given by a user: `90s`, `10m`, `1h30m`, `250ms`, or a bare number of
/// seconds.
/// At most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err("empty duration".into());
    }
    let too_long = || {
        format!(
            "invalid duration `{s}`: longer than {} years",
            MAX_DURATION.as_secs() / (365 * 24 * 3600)
        )
    };
    if let Ok(secs) = trimmed.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!(
                "invalid duration `{s}`: must be a non-negative number"
            ));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(too_long());
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    let d = humantime::parse_duration(trimmed)
        .map_err(|e| format!("invalid duration `{s}` ({e}); use e.g. 90s, 10m, 1h30m, 250ms"))?;
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

/// A short human rendering of a duration: `850ms`, `12s`, `4m05s`, `3h12m`, `2d04h`.
pub fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3_600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600)
    }
}

/// How long ago a stored timestamp was, or `None` when it does not parse or lies ahead.
pub fn age_of(stamp: &str) -> Option<Duration> {
    SystemTime::now().duration_since(parse_rfc3339(stamp)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_parses_back() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let s = to_rfc3339(t);
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_rfc3339(&s), Some(t));
    }

    #[test]
    fn out_of_range_durations_and_times_are_errors_not_panics() {
        assert!(parse_duration("18446744073709551615s").is_err());
        assert!(parse_duration("18446744073709551615").is_err());
        assert!(parse_duration("1e300").is_err());
        assert!(before_now(Duration::from_secs(500_000 * 3600)).is_err());
        assert!(before_now(Duration::from_secs(3600)).is_ok());
        let before_1970 = SystemTime::UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(to_rfc3339(before_1970), "1970-01-01T00:00:00.000Z");
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(LAST_WRITABLE_SECS * 2);
        assert_eq!(to_rfc3339(far), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 1h30m "), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-3").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn short_rendering() {
        assert_eq!(short_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(short_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(short_duration(Duration::from_secs(3 * 3600 + 720)), "3h12m");
        assert_eq!(
            short_duration(Duration::from_secs(2 * 86400 + 4 * 3600)),
            "2d04h"
        );
    }
}
