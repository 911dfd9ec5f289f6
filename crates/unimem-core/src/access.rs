//! What a kernel or the host touches: accesses and the bounded history the predictors learn from.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use crate::region::RegionId;

/// How a range is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AccessMode {
    /// Read only: the data must be valid where it is read.
    #[serde(rename = "r")]
    Read,
    /// Write only: the previous contents are dead, only the writer's copy is valid afterwards.
    #[serde(rename = "w")]
    Write,
    /// Read then write.
    #[serde(rename = "rw")]
    ReadWrite,
}

impl AccessMode {
    /// True if the old contents are needed.
    pub fn reads(self) -> bool {
        matches!(self, AccessMode::Read | AccessMode::ReadWrite)
    }

    /// True if the contents change.
    pub fn writes(self) -> bool {
        matches!(self, AccessMode::Write | AccessMode::ReadWrite)
    }

    /// The trace spelling: `r`, `w` or `rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::Read => "r",
            AccessMode::Write => "w",
            AccessMode::ReadWrite => "rw",
        }
    }
}

impl FromStr for AccessMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "r" => Ok(AccessMode::Read),
            "w" => Ok(AccessMode::Write),
            "rw" => Ok(AccessMode::ReadWrite),
            other => Err(format!("unknown access mode `{other}`; allowed: \"r\", \"w\", \"rw\"")),
        }
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A byte range of one region and how it is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RangeAccess {
    /// The region.
    pub region: RegionId,
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Read, write or both.
    pub mode: AccessMode,
}

impl RangeAccess {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Who touched the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Accessor {
    /// A GPU kernel.
    Device,
    /// The CPU.
    Host,
}

/// One recorded access: a range touched by a kernel or the host at a point of the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// What was touched and how.
    pub range: RangeAccess,
    /// Device or host.
    pub by: Accessor,
    /// Sequence number of the launch (or host access) it belongs to: the program's logical time.
    pub at: u64,
}

/// A bounded, append-only history of accesses (oldest dropped first). Appending is O(1) and
/// allocation-free once full, since it sits on the hot path of every launch.
#[derive(Debug, Clone)]
pub struct AccessHistory {
    buf: VecDeque<Access>,
    capacity: usize,
    total: u64,
}

impl AccessHistory {
    /// A history keeping the last `capacity` accesses (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self { buf: VecDeque::with_capacity(capacity), capacity, total: 0 }
    }

    /// Appends an access, dropping the oldest when full.
    pub fn record(&mut self, access: Access) {
        if self.buf.len() == self.capacity {
            self.buf.pop_front();
        }
        self.buf.push_back(access);
        self.total += 1;
    }

    /// Accesses kept, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Access> + ExactSizeIterator {
        self.buf.iter()
    }

    /// Number of accesses kept.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Number of accesses ever recorded (kept or dropped).
    pub fn total_recorded(&self) -> u64 {
        self.total
    }

    /// The most recent access to `region`, if still kept.
    pub fn last_for(&self, region: RegionId) -> Option<&Access> {
        self.buf.iter().rev().find(|a| a.range.region == region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(region: u64, at: u64) -> Access {
        Access {
            range: RangeAccess { region: RegionId(region), offset: 0, len: 8, mode: AccessMode::Read },
            by: Accessor::Device,
            at,
        }
    }

    #[test]
    fn keeps_the_last_capacity_accesses() {
        let mut h = AccessHistory::with_capacity(3);
        for i in 0..5 {
            h.record(acc(i % 2, i));
        }
        // Kept: at = 2, 3, 4; dropped 0 and 1.
        assert_eq!(h.iter().map(|a| a.at).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(h.total_recorded(), 5);
        assert_eq!(h.last_for(RegionId(1)).map(|a| a.at), Some(3));
        assert_eq!(h.last_for(RegionId(7)), None);
    }

    #[test]
    fn modes_round_trip() {
        for m in [AccessMode::Read, AccessMode::Write, AccessMode::ReadWrite] {
            assert_eq!(m.as_str().parse::<AccessMode>(), Ok(m));
        }
        assert!("x".parse::<AccessMode>().unwrap_err().contains("allowed"));
        assert!(AccessMode::ReadWrite.reads() && AccessMode::ReadWrite.writes());
        assert!(!AccessMode::Write.reads());
    }
}
