//! Command-line values: durations, points in time (`--since 2h` or an RFC 3339 stamp), ids.

use crate::error::{CliError, CliResult};
use hr_shared::time;
use std::time::Duration;

/// A `--since` argument: a duration back from now, or an RFC 3339 time. Returned as the
/// stored RFC 3339 form, so it compares as a string against the database's timestamps.
pub fn since(s: &str) -> Result<String, String> {
    if let Ok(d) = time::parse_duration(s) {
        return time::before_now(d).map(time::to_rfc3339);
    }
    match time::parse_rfc3339(s.trim()) {
        Some(t) => Ok(time::to_rfc3339(t)),
        None => Err(format!(
            "`{s}` is neither a duration (e.g. 2h, 30m) nor an RFC 3339 time (e.g. 2026-11-22T08:00:00Z)"
        )),
    }
}

/// A duration back from now that stays after 1970 (`gc --older-than`).
pub fn age(s: &str) -> Result<Duration, String> {
    let d = time::parse_duration(s)?;
    time::before_now(d)?;
    Ok(d)
}

/// A timeout or an interval: a duration that is not zero.
pub fn nonzero(s: &str) -> Result<Duration, String> {
    match time::parse_duration(s)? {
        d if d.is_zero() => Err(format!("`{s}` is no time at all")),
        d => Ok(d),
    }
}

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Run,
    Approval,
}

/// Which kind of id `id` is, or a usage error saying what was expected.
pub fn id_kind(id: &str) -> CliResult<IdKind> {
    let upper = id.to_ascii_uppercase();
    if upper.starts_with(hr_shared::id::RUN_PREFIX) {
        Ok(IdKind::Run)
    } else if upper.starts_with(hr_shared::id::APPROVAL_PREFIX) {
        Ok(IdKind::Approval)
    } else {
        Err(CliError::usage(format!(
            "`{}` is not a run id (TR-…) or an approval id (AP-…)",
            hr_shared::sanitize::sanitize_line(id)
        )))
    }
}

/// An approval id, or a usage error.
pub fn approval_id(id: &str) -> CliResult<&str> {
    match id_kind(id)? {
        IdKind::Approval => Ok(id),
        IdKind::Run => Err(CliError::usage(format!(
            "`{id}` is a run id; give an approval id (AP-…): `monitor approvals --run {id}` lists them"
        ))),
    }
}

/// A run id, or a usage error.
pub fn run_id(id: &str) -> CliResult<&str> {
    match id_kind(id)? {
        IdKind::Run => Ok(id),
        IdKind::Approval => Err(CliError::usage(format!(
            "`{id}` is an approval id; give a run id (TR-…)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_times() {
        let ago = since("1h").unwrap();
        let now = time::now_rfc3339();
        assert!(ago < now, "{ago} < {now}");
        assert_eq!(
            since("2026-11-22T08:00:00Z").unwrap(),
            "2026-11-22T08:00:00.000Z"
        );
        assert!(since("yesterday-ish").is_err());
    }

    #[test]
    fn ids_are_told_apart() {
        assert_eq!(id_kind("TR-1").unwrap(), IdKind::Run);
        assert_eq!(id_kind("AP-1").unwrap(), IdKind::Approval);
        assert_eq!(id_kind("x").unwrap_err().code, 2);
        assert_eq!(approval_id("TR-1").unwrap_err().code, 2);
        assert_eq!(run_id("AP-1").unwrap_err().code, 2);
    }
}
