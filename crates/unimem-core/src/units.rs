//! Byte quantities as users write them: `"8GiB"`, `"512 MiB"`, `"1.5GB"`, `4096`.

use std::fmt;

/// Parses a byte quantity. Accepts a plain integer (bytes) or a number followed by a unit:
/// `B`, `KB`/`MB`/`GB`/`TB` (powers of 1000) or `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024).
/// Units are case-insensitive; whitespace between number and unit is allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("`{text}` is negative; a byte size must be positive"));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    if num.is_empty() {
        return Err(format!("`{text}` is not a byte size; write e.g. `8GiB`, `512MiB` or `4096`"));
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`; allowed: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
            ))
        }
    };
    let too_large = || format!("`{text}` is too large; a byte size is at most 2^64-1 bytes (16 EiB)");
    if !num.contains('.') {
        // Whole numbers exactly: 2^64 must not round to 2^64-1 as a float would.
        let value: u128 = num.parse().map_err(|_| too_large())?;
        return u64::try_from(value * mult as u128).map_err(|_| too_large());
    }
    let value: f64 = num.parse().map_err(|_| format!("`{num}` is not a number in `{text}`"))?;
    let bytes = (value * mult as f64).round();
    // 2^64 as a float: the first value that does not fit.
    if !bytes.is_finite() || bytes >= 18_446_744_073_709_551_616.0 {
        return Err(too_large());
    }
    Ok(bytes as u64)
}

/// Formats bytes with a binary unit, three significant digits: `1.50 GiB`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < UNITS.len() {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{v:.2} {}", UNITS[i])
        }
    }
}

/// Formats nanoseconds with a readable unit: `812 ns`, `15.8 us`, `3.20 ms`, `1.25 s`.
pub struct Nanos(pub u64);

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        if n < 1e3 {
            write!(f, "{} ns", self.0)
        } else if n < 1e6 {
            write!(f, "{:.1} us", n / 1e3)
        } else if n < 1e9 {
            write!(f, "{:.2} ms", n / 1e6)
        } else {
            write!(f, "{:.2} s", n / 1e9)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("8GiB"), Ok(8 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("2kib"), Ok(2048));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("allowed"));
        assert!(parse_bytes("1.2.3GiB").is_err());
        assert!(parse_bytes("1e300TiB").is_err());
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_bytes("18446744073709551616").unwrap_err().contains("too large"));
        assert!(parse_bytes("99999999999999999999999999999999999999999").unwrap_err().contains("too large"));
        assert!(parse_bytes("16777216TiB").unwrap_err().contains("too large"), "2^64 bytes");
        assert!(parse_bytes("16777215.99999TiB").is_ok());
        assert!(parse_bytes("-5GiB").unwrap_err().contains("positive"));
    }

    #[test]
    fn formats() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(3 << 29).to_string(), "1.50 GiB");
        assert_eq!(Nanos(15_800).to_string(), "15.8 us");
        assert_eq!(Nanos(3_200_000).to_string(), "3.20 ms");
    }
}
