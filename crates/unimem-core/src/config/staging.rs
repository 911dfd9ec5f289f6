//! The pinned staging memory for staged evictions: `auto`, bytes, or a percent of the budget.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::budget::Raw;
use crate::units::parse_bytes;

/// How much pinned host memory evictions may be staged in (`0`: none, evictions migrate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Staging {
    /// As much as the program's data: a replay's peak live bytes (every byte off the device,
    /// and a clean copy of every byte restored); in a program, whose peak is not known, no
    /// bound of its own (the backends pin it as it is used, up to half the host's memory).
    Auto,
    /// An absolute number of bytes.
    Bytes(u64),
    /// A percent (0 to 1000) of the device budget.
    Percent(f64),
}

impl Staging {
    /// Parses `"auto"`, `"4GiB"`, `"0"` or `"100%"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t == "auto" {
            return Ok(Staging::Auto);
        }
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 =
                p.trim().parse().map_err(|_| format!("`{text}` is not a percent; write e.g. \"100%\""))?;
            if !(0.0..=1000.0).contains(&v) {
                return Err(format!("{v}% is out of range; a percent of the budget must be in [0, 1000]"));
            }
            return Ok(Staging::Percent(v));
        }
        parse_bytes(t)
            .map(Staging::Bytes)
            .map_err(|e| format!("{e}, a percent of the budget such as \"100%\", or \"auto\""))
    }

    /// The staging memory in bytes, given the budget and, where known, the data's peak live
    /// bytes (`u64::MAX` for `auto` without it: the backend's own cap applies).
    pub fn resolve(&self, budget: u64, peak: Option<u64>) -> u64 {
        match *self {
            Staging::Auto => peak.map_or(u64::MAX, |p| p.max(budget)),
            Staging::Bytes(b) => b,
            Staging::Percent(p) => (budget as f64 * p / 100.0).round() as u64,
        }
    }
}

impl fmt::Display for Staging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Staging::Auto => write!(f, "auto"),
            Staging::Bytes(b) => write!(f, "{}", crate::units::Bytes(b)),
            Staging::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for Staging {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Staging::Auto => s.serialize_str("auto"),
            Staging::Bytes(b) => s.serialize_str(&b.to_string()),
            Staging::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

impl<'de> Deserialize<'de> for Staging {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Raw::read(
            d,
            "expected \"auto\", bytes (e.g. \"8GiB\", or 0 for none) or a percent of the budget (e.g. \"100%\")",
        )?;
        match raw {
            Raw::Int(n) if n < 0 => {
                Err(serde::de::Error::custom(format!("{n} is negative; use 0 for no staging")))
            }
            Raw::Int(n) => Ok(Staging::Bytes(n as u64)),
            Raw::Text(t) => Staging::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves() {
        assert_eq!(Staging::parse("100%"), Ok(Staging::Percent(100.0)));
        assert_eq!(Staging::parse("0"), Ok(Staging::Bytes(0)));
        assert_eq!(Staging::parse("4GiB").unwrap().resolve(1 << 30, None), 4 << 30);
        assert_eq!(Staging::parse("150%").unwrap().resolve(2 << 30, Some(9 << 30)), 3 << 30);
        // `auto`: the data's peak where known (never below the budget), else unbounded.
        assert_eq!(Staging::parse(" auto ").unwrap().resolve(2 << 30, Some(5 << 30)), 5 << 30);
        assert_eq!(Staging::Auto.resolve(2 << 30, Some(1 << 30)), 2 << 30);
        assert_eq!(Staging::Auto.resolve(2 << 30, None), u64::MAX);
        assert!(Staging::parse("2000%").unwrap_err().contains("[0, 1000]"));
        assert!(Staging::parse("-1%").unwrap_err().contains("[0, 1000]"));
        assert!(Staging::parse("lots").unwrap_err().contains("percent"));
        for s in [Staging::Percent(50.0), Staging::Auto] {
            let round_trip: Staging = toml::Value::try_from(s).unwrap().try_into().unwrap();
            assert_eq!(round_trip, s);
        }
    }
}
