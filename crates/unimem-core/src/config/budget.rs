//! The device-memory budget: absolute bytes or a percent of a total.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::units::{parse_bytes, Bytes};

/// How much device memory the working set may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// An absolute number of bytes (> 0).
    Bytes(u64),
    /// A percent (0 < p <= 100) of the device, or of a trace's peak live bytes in a replay.
    Percent(f64),
}

impl Budget {
    /// Parses `"8GiB"`, `"512MiB"`, `"4096"` or `"50%"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let budget = if let Some(p) = t.strip_suffix('%') {
            let v: f64 =
                p.trim().parse().map_err(|_| format!("`{text}` is not a percent; write e.g. \"50%\""))?;
            Budget::Percent(v)
        } else {
            Budget::Bytes(parse_bytes(t).map_err(|e| format!("{e}, or a percent such as \"50%\""))?)
        };
        budget.check()?;
        Ok(budget)
    }

    fn check(&self) -> Result<(), String> {
        match *self {
            Budget::Bytes(0) => {
                Err("a budget of 0 bytes leaves no device memory; use a size > 0 or a percent in (0, 100]"
                    .into())
            }
            Budget::Percent(p) if !(p > 0.0 && p <= 100.0) => {
                Err(format!("{p}% is out of range; a percent budget must be in (0, 100]"))
            }
            _ => Ok(()),
        }
    }

    /// The budget in bytes, given the total a percent refers to (at least one page).
    pub fn resolve(&self, total: u64) -> u64 {
        let bytes = match *self {
            Budget::Bytes(b) => b,
            Budget::Percent(p) => (total as f64 * p / 100.0).round() as u64,
        };
        bytes.max(crate::seam::PAGE_SIZE)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Budget::Bytes(b) => write!(f, "{}", Bytes(b)).map(|_| ()),
            Budget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Budget::parse(s)
    }
}

impl Serialize for Budget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Budget::Bytes(b) => s.serialize_str(&exact_units(b)),
            Budget::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

/// Bytes in the largest binary unit that divides them exactly: `8GiB`, `1536MiB`, `4097`.
fn exact_units(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b > 0 && b % (1u64 << shift) == 0 {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// A size as a config value gives it: an integer of bytes, or text (`"8GiB"`, `"50%"`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Raw {
    /// Bytes.
    Int(i64),
    /// Bytes with a unit, or a percent.
    Text(String),
}

impl Raw {
    /// Reads either form; `expected` says what is allowed when it is neither.
    pub(super) fn read<'de, D: Deserializer<'de>>(d: D, expected: &str) -> Result<Self, D::Error> {
        Raw::deserialize(d).map_err(|_| serde::de::Error::custom(expected))
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Raw::read(d, "expected bytes (e.g. \"8GiB\" or 4096) or a percent (e.g. \"50%\")")?;
        match raw {
            Raw::Int(n) if n < 0 => {
                Err(serde::de::Error::custom(format!("{n} is negative; a budget must be > 0")))
            }
            Raw::Int(n) => {
                let b = Budget::Bytes(n as u64);
                b.check().map_err(serde::de::Error::custom)?;
                Ok(b)
            }
            Raw::Text(t) => Budget::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves() {
        assert_eq!(Budget::parse("50%"), Ok(Budget::Percent(50.0)));
        assert_eq!(Budget::parse("8GiB"), Ok(Budget::Bytes(8 << 30)));
        assert_eq!(Budget::parse("50%").unwrap().resolve(1000 << 20), 500 << 20);
        assert_eq!(Budget::Bytes(10).resolve(0), 4096, "never below one page");
        assert_eq!(exact_units(8 << 30), "8GiB");
        assert_eq!(exact_units(1536 << 20), "1536MiB");
        assert_eq!(exact_units(4097), "4097");
        let round_trip: Budget = toml::Value::try_from(Budget::Bytes(3 << 20)).unwrap().try_into().unwrap();
        assert_eq!(round_trip, Budget::Bytes(3 << 20));
    }

    #[test]
    fn rejects_zero_and_over_100_percent() {
        assert!(Budget::parse("0").unwrap_err().contains("0 bytes"));
        assert!(Budget::parse("0%").unwrap_err().contains("(0, 100]"));
        assert!(Budget::parse("150%").unwrap_err().contains("(0, 100]"));
        assert!(Budget::parse("-5%").is_err());
        assert!(Budget::parse("lots").unwrap_err().contains("percent"));
    }
}
