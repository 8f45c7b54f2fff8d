//! `%START_TIME%`: Envoy's default `2023-11-14T22:13:20.123Z`, or a `%START_TIME(…)%`
//! format, always in UTC as Envoy prints it.

use std::io::Write;
use std::time::SystemTime;

use crate::config::format::{TimeFormat, TimePiece};

const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A UTC time broken down.
struct Civil {
    epoch: u64,
    nanos: u32,
    year: i64,
    month: u32,
    day: u32,
    day_of_year: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
}

fn civil(time: SystemTime) -> Civil {
    // Times before 1970 print as 1970: a request never starts before then.
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let epoch = since.as_secs();
    let days = (epoch / 86_400) as i64;
    let in_day = epoch % 86_400;
    // Days to a proleptic Gregorian date (eras of 400 years from 0000-03-01).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_march = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_march + 2) / 153;
    let day = (doy_march - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = before[(month - 1) as usize] + day + u32::from(leap && month > 2);
    Civil {
        epoch,
        nanos: since.subsec_nanos(),
        year,
        month,
        day,
        day_of_year,
        weekday: (days + 4).rem_euclid(7) as usize,
        hour: in_day / 3_600,
        minute: in_day % 3_600 / 60,
        second: in_day % 60,
    }
}

/// Appends `time` in `format`, or in Envoy's default.
pub fn write(time: SystemTime, format: Option<&TimeFormat>, out: &mut Vec<u8>) {
    let c = civil(time);
    let Some(TimeFormat(pieces)) = format else {
        let _ = write!(
            out,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            c.year,
            c.month,
            c.day,
            c.hour,
            c.minute,
            c.second,
            c.nanos / 1_000_000
        );
        return;
    };
    for piece in pieces {
        let _ = match *piece {
            TimePiece::Char(ch) => write!(out, "{ch}"),
            TimePiece::Year => write!(out, "{:04}", c.year),
            TimePiece::Year2 => write!(out, "{:02}", c.year % 100),
            TimePiece::Month => write!(out, "{:02}", c.month),
            TimePiece::Day => write!(out, "{:02}", c.day),
            TimePiece::DaySpace => write!(out, "{:2}", c.day),
            TimePiece::DayOfYear => write!(out, "{:03}", c.day_of_year),
            TimePiece::Hour => write!(out, "{:02}", c.hour),
            TimePiece::Hour12 => write!(out, "{:02}", if c.hour.is_multiple_of(12) { 12 } else { c.hour % 12 }),
            TimePiece::Minute => write!(out, "{:02}", c.minute),
            TimePiece::Second => write!(out, "{:02}", c.second),
            TimePiece::AmPm => write!(out, "{}", if c.hour < 12 { "AM" } else { "PM" }),
            TimePiece::WeekdayShort => write!(out, "{}", &WEEKDAYS[c.weekday][..3]),
            TimePiece::WeekdayLong => write!(out, "{}", WEEKDAYS[c.weekday]),
            TimePiece::MonthShort => write!(out, "{}", &MONTHS[(c.month - 1) as usize][..3]),
            TimePiece::MonthLong => write!(out, "{}", MONTHS[(c.month - 1) as usize]),
            TimePiece::Epoch => write!(out, "{}", c.epoch),
            TimePiece::Offset => write!(out, "+0000"),
            TimePiece::Zone => write!(out, "UTC"),
            TimePiece::Fraction(digits) => fraction(c.nanos, digits, out),
            TimePiece::SecondsFraction(Some(0)) => write!(out, "{:02}", c.second),
            TimePiece::SecondsFraction(Some(digits)) => {
                let _ = write!(out, "{:02}.", c.second);
                fraction(c.nanos, digits, out)
            }
            TimePiece::SecondsFraction(None) => {
                let _ = write!(out, "{:02}", c.second);
                if c.nanos == 0 {
                    Ok(())
                } else {
                    let digits = format!("{:09}", c.nanos);
                    write!(out, ".{}", digits.trim_end_matches('0'))
                }
            }
        };
    }
}

/// The first `digits` (1–9) of the nanoseconds, truncated as Envoy truncates them.
fn fraction(nanos: u32, digits: u8, out: &mut Vec<u8>) -> std::io::Result<()> {
    let digits = u32::from(digits.clamp(1, 9));
    let value = nanos / 10u32.pow(9 - digits);
    write!(out, "{value:0width$}", width = digits as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::format::time_format;
    use std::time::Duration;

    fn at(format: Option<&str>) -> String {
        let time = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let format = format.map(|f| time_format(f).unwrap_or(TimeFormat(Vec::new())));
        let mut out = Vec::new();
        write(time, format.as_ref(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn default_and_custom_formats() {
        assert_eq!(at(None), "2023-11-14T22:13:20.123Z");
        assert_eq!(at(Some("%Y-%m-%dT%H:%M:%S.%3fZ")), "2023-11-14T22:13:20.123Z");
        assert_eq!(at(Some("%s.%f")), "1700000000.123456789");
        assert_eq!(at(Some("%E6S %a %b %e %j %z")), "20.123456 Tue Nov 14 318 +0000");
        assert_eq!(at(Some("%F %T %p %%")), "2023-11-14 22:13:20 PM %");
    }

    #[test]
    fn leap_years_and_march() {
        // 2024-02-29T00:00:00Z and 2024-03-01.
        let format = time_format("%F %j").ok();
        let mut out = Vec::new();
        write(SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_164_800), format.as_ref(), &mut out);
        out.push(b' ');
        write(SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_251_200), format.as_ref(), &mut out);
        assert_eq!(String::from_utf8(out).unwrap_or_default(), "2024-02-29 060 2024-03-01 061");
    }
}
