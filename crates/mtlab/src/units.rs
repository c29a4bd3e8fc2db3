//! Byte sizes as people write them: `512KiB`, `2MiB`, `64k`, `1TiB`, `1048576`; and instants as
//! RFC 3339 text (studies, reports).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("`{0}` is not a size: write a number with an optional unit, like 512KiB, 2MiB or 65536")]
    Garbage(String),
    #[error("`{0}` is too large")]
    Overflow(String),
    #[error("the size must be greater than zero (got `{0}`)")]
    Zero(String),
}

/// Parses a positive byte size. Units are powers of 1024 (`k`, `KiB`, `KB`
/// all mean 1024), case-insensitive; a trailing `B` is optional.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(SizeError::Garbage(text.to_string()));
    }
    let n: u64 = num.parse().map_err(|_| SizeError::Overflow(text.to_string()))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(SizeError::Garbage(text.to_string())),
    };
    let v = n.checked_mul(1u64 << shift).ok_or_else(|| SizeError::Overflow(text.to_string()))?;
    if v == 0 {
        return Err(SizeError::Zero(text.to_string()));
    }
    Ok(v)
}

/// Bytes for people: rounded to one decimal in the largest unit that keeps
/// the number at least 1 (`1.5 KiB`). For sizes that must parse back, use
/// [`format_size`].
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A size as the shortest exact unit: 524288 -> "512KiB".
pub fn format_size(v: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{}{unit}", v >> shift);
        }
    }
    format!("{v}B")
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert!(matches!(parse_size("0"), Err(SizeError::Zero(_))));
        assert!(matches!(parse_size("0KiB"), Err(SizeError::Zero(_))));
        assert!(matches!(parse_size("lots"), Err(SizeError::Garbage(_))));
        assert!(matches!(parse_size("12 parsecs"), Err(SizeError::Garbage(_))));
        assert!(matches!(parse_size("99999999999999999999"), Err(SizeError::Overflow(_))));
        assert_eq!(format_size(512 << 10), "512KiB");
        assert_eq!(format_size(3 << 20), "3MiB");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
