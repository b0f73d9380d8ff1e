//! Durations written with a unit: `"500ms"`, `"30s"`, `"5m"`, `"1h"`.
//!
//! A bare number is refused on purpose: "30" could mean seconds or
//! milliseconds depending on who wrote the example, and a flow timeout off
//! by 1000x fails silently.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("duration {0:?} is empty")]
    Empty(String),
    #[error("duration {0:?} has no unit (use ms, s, m or h, like \"30s\")")]
    NoUnit(String),
    #[error("duration {0:?} does not start with a whole number (like \"30s\")")]
    NoNumber(String),
    #[error("duration {0:?} has unknown unit {1:?} (use us, ms, s, m or h)")]
    BadUnit(String, String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses `<digits><unit>` with unit `us`, `ms`, `s`, `m` or `h`; surrounding
/// spaces and one space before the unit are allowed.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty(text.to_owned()));
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(DurationError::NoNumber(text.to_owned()));
    }
    let unit = unit.trim_start();
    if unit.is_empty() {
        return Err(DurationError::NoUnit(text.to_owned()));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| DurationError::Overflow(text.to_owned()))?;
    let micros_per: u64 = match unit {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" | "min" => 60_000_000,
        "h" => 3_600_000_000,
        other => return Err(DurationError::BadUnit(text.to_owned(), other.to_owned())),
    };
    n.checked_mul(micros_per)
        .map(Duration::from_micros)
        .ok_or_else(|| DurationError::Overflow(text.to_owned()))
}

/// Formats a duration the way an operator would write it (largest exact unit).
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    for (unit, per) in [
        ("h", 3_600_000_000u128),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us != 0 && us.is_multiple_of(per) {
            return format!("{}{unit}", us / per);
        }
    }
    format!("{us}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration(" 2 s "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            parse_duration("30"),
            Err(DurationError::NoUnit("30".into()))
        );
        assert_eq!(parse_duration(""), Err(DurationError::Empty("".into())));
        assert_eq!(
            parse_duration("s"),
            Err(DurationError::NoNumber("s".into()))
        );
        assert_eq!(
            parse_duration("-5s"),
            Err(DurationError::NoNumber("-5s".into()))
        );
        assert_eq!(
            parse_duration("1.5s"),
            Err(DurationError::BadUnit("1.5s".into(), ".5s".into()))
        );
        assert_eq!(
            parse_duration("3d"),
            Err(DurationError::BadUnit("3d".into(), "d".into()))
        );
        assert!(matches!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("18446744073709551615h"),
            Err(DurationError::Overflow(_))
        ));
        assert_eq!(
            DurationError::NoUnit("30".into()).to_string(),
            "duration \"30\" has no unit (use ms, s, m or h, like \"30s\")"
        );
    }

    #[test]
    fn formats_back() {
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::ZERO), "0us");
    }
}
