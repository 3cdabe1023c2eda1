//! Durations (`-d`, `+DUR`) and `--prepare WHEN` / `--activate WHEN`: parsing
//! the specs, and turning them into delays from launch against a given wall
//! clock and time zone (tests inject both; wprof passes `chrono::Local::now()`).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, NaiveTime, TimeZone};

/// `1500` (milliseconds), `500ms`, `5s`, `2m`, `1h`, `250us`; at most
/// `u64::MAX` nanoseconds (584 years), so every duration has a count of
/// nanoseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (examples: 1500, 500ms, 5s, 2m)"))?;
    let unit_ns: u64 = match unit {
        "" | "ms" => 1_000_000,
        "us" => 1_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "unknown duration unit `{unit}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    let ns = value
        .checked_mul(unit_ns)
        .ok_or_else(|| format!("duration too large: `{text}` (the most is about 584 years)"))?;
    Ok(Duration::from_nanos(ns))
}

/// A point in time as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// `@now`
    Now,
    /// `@HH:MM[:SS]`: today, local time.
    TimeOfDay(NaiveTime),
    /// `@YYYY-MM-DDTHH:MM[:SS]`: local time.
    DateTime(NaiveDateTime),
    /// `+DUR`: this long after launch.
    After(Duration),
    /// `/DUR`: the next multiple of DUR since the Unix epoch, so hosts with
    /// synchronized clocks start together.
    Aligned(Duration),
}

/// `When` from its command-line spelling.
pub fn parse_when(text: &str) -> Result<When, String> {
    let bad = |why: &str| {
        format!(
            "`{text}` is not a time: {why} (use @now, @14:30, @2026-06-10T14:30:00, +30s or /10s)"
        )
    };
    let (sign, rest) = text.split_at(text.chars().next().map_or(0, char::len_utf8));
    match sign {
        "@" if rest == "now" => Ok(When::Now),
        "@" if rest.contains('T') => NaiveDateTime::parse_from_str(rest, "%Y-%m-%dT%H:%M:%S")
            .or_else(|_| NaiveDateTime::parse_from_str(rest, "%Y-%m-%dT%H:%M"))
            .map(When::DateTime)
            .map_err(|e| bad(&e.to_string())),
        "@" => NaiveTime::parse_from_str(rest, "%H:%M:%S")
            .or_else(|_| NaiveTime::parse_from_str(rest, "%H:%M"))
            .map(When::TimeOfDay)
            .map_err(|e| bad(&e.to_string())),
        "+" => parse_duration(rest).map(When::After).map_err(|e| bad(&e)),
        "/" => match parse_duration(rest).map_err(|e| bad(&e))? {
            zero if zero.is_zero() => Err(bad("the interval must not be 0")),
            every => Ok(When::Aligned(every)),
        },
        _ => Err(bad("it must start with @, + or /")),
    }
}

impl fmt::Display for When {
    /// The canonical spelling, as saved in the capture.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::Now => write!(f, "@now"),
            When::TimeOfDay(time) => write!(f, "@{}", time.format("%H:%M:%S")),
            When::DateTime(at) => write!(f, "@{}", at.format("%Y-%m-%dT%H:%M:%S")),
            When::After(d) => write!(f, "+{}ms", d.as_millis()),
            When::Aligned(d) => write!(f, "/{}ms", d.as_millis()),
        }
    }
}

impl When {
    /// How long after `launch` this is; past absolute times are errors.
    pub fn delay<Tz: TimeZone>(&self, launch: &DateTime<Tz>) -> Result<Duration, String> {
        let at_local = |at: NaiveDateTime| {
            launch
                .timezone()
                .from_local_datetime(&at)
                .earliest()
                .ok_or_else(|| format!("{self} does not exist in the local time zone"))
        };
        let target = match self {
            When::Now => return Ok(Duration::ZERO),
            When::After(d) => return Ok(*d),
            When::Aligned(every) => return Ok(until_aligned(launch, *every)),
            When::TimeOfDay(time) => at_local(launch.date_naive().and_time(*time))?,
            When::DateTime(at) => at_local(*at)?,
        };
        (target.clone() - launch.clone())
            .to_std()
            .map_err(|_| past(self, &target))
    }
}

fn past<Tz: TimeZone>(when: &When, target: &DateTime<Tz>) -> String {
    let hint = match when {
        When::TimeOfDay(_) => " (a time of day means today; there is no roll-over to tomorrow)",
        _ => "",
    };
    format!(
        "{when} is in the past ({}){hint}",
        target.naive_local().format("%Y-%m-%d %H:%M:%S")
    )
}

/// From `launch` to the next multiple of `every` since the epoch (zero when
/// `launch` is exactly on one).
fn until_aligned<Tz: TimeZone>(launch: &DateTime<Tz>, every: Duration) -> Duration {
    let since_epoch = launch
        .timestamp_nanos_opt()
        .map_or(0, |ns| u128::try_from(ns).unwrap_or(0));
    let every_ns = every.as_nanos();
    let wait = (every_ns - since_epoch % every_ns) % every_ns;
    Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// When to load and attach, and when to start recording, as delays from launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub prepare: Duration,
    pub activate: Duration,
}

/// The schedule of `--prepare` / `--activate` (either may be absent: a
/// missing prepare is launch, a missing activate is as soon as prepared).
pub fn schedule<Tz: TimeZone>(
    prepare: Option<&When>,
    activate: Option<&When>,
    launch: &DateTime<Tz>,
) -> Result<Schedule, String> {
    let prepare_delay = prepare.map_or(Ok(Duration::ZERO), |w| w.delay(launch))?;
    let activate_delay = activate.map_or(Ok(prepare_delay), |w| w.delay(launch))?;
    if activate_delay < prepare_delay {
        let (p, a) = (prepare.expect("set"), activate.expect("set"));
        return Err(format!(
            "--prepare {p} and --activate {a} are inverted: preparing comes first"
        ));
    }
    Ok(Schedule {
        prepare: prepare_delay,
        activate: activate_delay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    /// 2026-06-10 14:30:10.250 at UTC+02:00.
    fn launch() -> DateTime<FixedOffset> {
        FixedOffset::east_opt(2 * 3600)
            .unwrap()
            .with_ymd_and_hms(2026, 6, 10, 14, 30, 10)
            .unwrap()
            + chrono::Duration::milliseconds(250)
    }

    fn delay(text: &str) -> Result<Duration, String> {
        parse_when(text)?.delay(&launch())
    }

    /// Every spelling parses and prints back canonically.
    #[test]
    fn parses_and_prints_every_form() {
        for (text, canonical) in [
            ("@now", "@now"),
            ("@14:31", "@14:31:00"),
            ("@14:31:05", "@14:31:05"),
            ("@2026-06-11T08:00", "@2026-06-11T08:00:00"),
            ("+30s", "+30000ms"),
            ("+1500", "+1500ms"),
            ("/10s", "/10000ms"),
        ] {
            assert_eq!(parse_when(text).unwrap().to_string(), canonical, "{text}");
            assert_eq!(parse_when(canonical), parse_when(text), "{canonical}");
        }
    }

    /// Junk, bad units, impossible times and a zero interval are rejected.
    #[test]
    fn rejects_malformed_specs() {
        for text in [
            "",
            "now",
            "14:30",
            "@25:00",
            "@14:3x",
            "+5x",
            "/0",
            "@2026-13-01T00:00",
        ] {
            let error = parse_when(text).unwrap_err();
            assert!(error.contains(&format!("`{text}`")), "{error}");
        }
    }

    /// Absolute times are local to the injected zone and measured from launch.
    #[test]
    fn absolute_times_are_local() {
        assert_eq!(delay("@now"), Ok(Duration::ZERO));
        assert_eq!(delay("@14:31"), Ok(Duration::from_millis(49_750)));
        assert_eq!(
            delay("@2026-06-11T14:30:10"),
            Ok(Duration::from_secs(86_400) - Duration::from_millis(250))
        );
    }

    /// A time of day already past today is an error, not tomorrow.
    #[test]
    fn past_times_are_errors() {
        let error = delay("@14:30").unwrap_err();
        assert!(error.contains("no roll-over"), "{error}");
        assert!(
            delay("@2026-06-09T23:00")
                .unwrap_err()
                .contains("in the past")
        );
    }

    /// `/DUR` waits for the next epoch-aligned boundary of the wall clock.
    #[test]
    fn aligned_boundaries() {
        // 14:30:10.250 local is 12:30:10.250 UTC: the next 10 s boundary is 9.75 s away.
        assert_eq!(delay("/10s"), Ok(Duration::from_millis(9_750)));
        assert_eq!(delay("/250ms"), Ok(Duration::ZERO));
        assert_eq!(delay("/1m"), Ok(Duration::from_millis(49_750)));
    }

    /// Prepare defaults to launch, activate to prepare; inverted specs fail.
    #[test]
    fn schedules() {
        let when = |t: &str| parse_when(t).unwrap();
        let plan = |p: Option<&str>, a: Option<&str>| {
            schedule(p.map(when).as_ref(), a.map(when).as_ref(), &launch())
        };
        assert_eq!(plan(None, None), Ok(Schedule::default()));
        let secs = Duration::from_secs;
        assert_eq!(
            plan(Some("+1s"), None),
            Ok(Schedule {
                prepare: secs(1),
                activate: secs(1)
            })
        );
        assert_eq!(
            plan(None, Some("+2s")),
            Ok(Schedule {
                prepare: secs(0),
                activate: secs(2)
            })
        );
        let error = plan(Some("+5s"), Some("+2s")).unwrap_err();
        assert!(error.contains("inverted"), "{error}");
        assert!(plan(Some("@14:00"), Some("+2s")).is_err());
    }

    /// Bare numbers are milliseconds; units are honoured; junk is rejected.
    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
    }

    /// Durations past `u64::MAX` ns are errors, not overflows: `-d`, `+DUR`
    /// and a capture's saved settings all parse through here.
    #[test]
    fn durations_too_large_are_errors() {
        for text in [
            "999999999999999999h",
            "5124096h",
            "18446744073709551615m",
            "18446744073709551615s",
            "18446744073709551615",
            "18446744073709551615us",
        ] {
            let error = parse_duration(text).unwrap_err();
            assert_eq!(
                error,
                format!("duration too large: `{text}` (the most is about 584 years)")
            );
        }
        assert_eq!(
            parse_duration("5124095h"),
            Ok(Duration::from_secs(5_124_095 * 3600))
        );
        let error = parse_when("+999999999999999999h").unwrap_err();
        assert!(error.contains("duration too large"), "{error}");
    }
}
