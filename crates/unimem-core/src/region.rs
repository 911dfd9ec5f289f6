//! Regions (managed allocations) and the registry that finds them by id or by address.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;

use crate::error::{Error, Result};

pub use crate::ids::RegionId;

/// One managed allocation: where it lives in the address space, how large it is, what it is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Stable id.
    pub id: RegionId,
    /// Base device/host virtual address (managed memory has one address on both sides).
    pub addr: u64,
    /// Size in bytes (> 0).
    pub bytes: u64,
    /// Name shown in reports and telemetry (tensor name, trace name, or `region#N`).
    pub name: Arc<str>,
}

impl Region {
    /// Checks that `offset..offset+len` lies inside the region.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(()),
            _ => Err(Error::OutOfRange { region: self.id, offset, len, size: self.bytes }),
        }
    }
}

/// Concurrent map of live regions: id -> region (dashmap, so many host threads can look up at
/// once) and address -> region (an ordered map, for attributing a faulting address).
#[derive(Debug, Default)]
pub struct Registry {
    next_id: AtomicU64,
    by_id: DashMap<RegionId, Region>,
    by_addr: RwLock<BTreeMap<u64, RegionId>>,
    live_bytes: AtomicU64,
}

impl Registry {
    /// An empty registry; ids start at 1.
    pub fn new() -> Self {
        Self { next_id: AtomicU64::new(1), ..Default::default() }
    }

    /// Reserves a fresh id (ids are never reused).
    pub fn next_id(&self) -> RegionId {
        RegionId(self.next_id.fetch_add(1, Ordering::Relaxed).max(1))
    }

    /// Records a region. Fails if the id is taken or the address range overlaps a live region.
    pub fn insert(&self, region: Region) -> Result<()> {
        if region.bytes == 0 {
            return Err(Error::Allocation { bytes: 0, reason: "regions must be at least 1 byte".into() });
        }
        let mut by_addr = self.by_addr.write().unwrap_or_else(|e| e.into_inner());
        if let Some((&base, &other)) = by_addr.range(..region.addr.saturating_add(region.bytes)).next_back() {
            let other_end = self.by_id.get(&other).map(|r| r.addr + r.bytes).unwrap_or(base);
            if other_end > region.addr {
                return Err(Error::InvalidArgument(format!(
                    "region {} at {:#x} overlaps live region {other}",
                    region.id, region.addr
                )));
            }
        }
        if self.by_id.contains_key(&region.id) {
            return Err(Error::InvalidArgument(format!("region id {} is already registered", region.id)));
        }
        by_addr.insert(region.addr, region.id);
        self.live_bytes.fetch_add(region.bytes, Ordering::Relaxed);
        self.by_id.insert(region.id, region);
        Ok(())
    }

    /// Removes a region and returns it.
    pub fn remove(&self, id: RegionId) -> Result<Region> {
        let mut by_addr = self.by_addr.write().unwrap_or_else(|e| e.into_inner());
        let (_, region) = self.by_id.remove(&id).ok_or(Error::UnknownRegion(id))?;
        by_addr.remove(&region.addr);
        self.live_bytes.fetch_sub(region.bytes, Ordering::Relaxed);
        Ok(region)
    }

    /// The region with this id (a clone: regions are small and immutable).
    pub fn get(&self, id: RegionId) -> Result<Region> {
        self.by_id.get(&id).map(|r| r.clone()).ok_or(Error::UnknownRegion(id))
    }

    /// The region containing `addr`, and the offset of `addr` inside it.
    pub fn find_address(&self, addr: u64) -> Option<(Region, u64)> {
        let by_addr = self.by_addr.read().unwrap_or_else(|e| e.into_inner());
        let (&base, &id) = by_addr.range(..=addr).next_back()?;
        let region = self.by_id.get(&id)?.clone();
        (addr < base + region.bytes).then(|| (region, addr - base))
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when no region is live.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Sum of the sizes of live regions.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(reg: &Registry, addr: u64, bytes: u64) -> Region {
        Region { id: reg.next_id(), addr, bytes, name: "t".into() }
    }

    #[test]
    fn lookup_by_id_and_address() {
        let reg = Registry::new();
        let a = region(&reg, 0x1000, 0x100);
        let b = region(&reg, 0x2000, 0x1000);
        reg.insert(a.clone()).unwrap();
        reg.insert(b.clone()).unwrap();
        assert_eq!(reg.get(a.id).unwrap(), a);
        assert_eq!(reg.find_address(0x10ff).map(|(r, o)| (r.id, o)), Some((a.id, 0xff)));
        assert_eq!(reg.find_address(0x1100), None, "one past the end belongs to nobody");
        assert_eq!(reg.find_address(0x2800).map(|(r, o)| (r.id, o)), Some((b.id, 0x800)));
        assert_eq!(reg.live_bytes(), 0x1100);
        reg.remove(a.id).unwrap();
        assert!(reg.find_address(0x1000).is_none());
        assert!(matches!(reg.get(a.id), Err(Error::UnknownRegion(_))));
        assert_eq!(reg.live_bytes(), 0x1000);
    }

    #[test]
    fn rejects_overlap_and_empty() {
        let reg = Registry::new();
        reg.insert(region(&reg, 0x1000, 0x1000)).unwrap();
        assert!(reg.insert(region(&reg, 0x1800, 0x10)).is_err());
        assert!(reg.insert(region(&reg, 0x800, 0x900)).is_err());
        assert!(reg.insert(region(&reg, 0x3000, 0)).is_err());
        reg.insert(region(&reg, 0x2000, 0x10)).unwrap();
    }

    #[test]
    fn concurrent_inserts_stay_consistent() {
        let reg = Arc::new(Registry::new());
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let reg = reg.clone();
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let r = region(&reg, (t * 1000 + i) * 0x1_0000, 0x100);
                        reg.insert(r).unwrap();
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(reg.len(), 2000);
        assert_eq!(reg.live_bytes(), 2000 * 0x100);
        let (r, off) = reg.find_address(3 * 1000 * 0x1_0000 + 0x42).unwrap();
        assert_eq!((r.addr, off), (3000 * 0x1_0000, 0x42));
    }
}
