//! CUDA virtual memory management: physical memory created on the device or in host memory
//! (`cuMemCreate`, `CU_MEM_LOCATION_TYPE_HOST_NUMA`) and mapped into reserved virtual ranges.
//! A physical allocation may be mapped at several addresses at once; a mapping is undone only
//! whole (`cuMemUnmap` takes the entire range one `cuMemMap` made). None of these calls is
//! ordered with a stream: the host makes them when the device no longer uses what they change.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;

use super::cuda_err;
use crate::error::Result;

/// Host time and count of each kind of mapping call, for the backend's log: create, map,
/// grant, unmap.
pub(crate) static CALL_NS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
pub(crate) static CALLS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

fn counted<T>(kind: usize, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let out = f();
    CALL_NS[kind].fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    CALLS[kind].fetch_add(1, Ordering::Relaxed);
    out
}

/// Where physical memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Device memory of this ordinal.
    Device(i32),
    /// Pinned host memory on this NUMA node; a device maps it and reads it over the link.
    HostNuma(i32),
}

fn prop(place: Place) -> sys::CUmemAllocationProp {
    let (type_, id) = match place {
        Place::Device(d) => (sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, d),
        Place::HostNuma(n) => (sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA, n),
    };
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType_enum(0),
        location: sys::CUmemLocation { type_, id },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The smallest size (and alignment) physical memory at `place` comes in.
pub(crate) fn granularity(place: Place) -> Result<u64> {
    let mut g = 0usize;
    let p = prop(place);
    let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    // SAFETY: one out-value and a property struct that outlives the call.
    unsafe { sys::cuMemGetAllocationGranularity(&mut g, &p, option) }
        .result()
        .map_err(cuda_err("cuMemGetAllocationGranularity", format!("{place:?}")))?;
    Ok(g as u64)
}

/// Physical memory, released on drop (the driver keeps it while a mapping of it remains).
#[derive(Debug)]
pub(crate) struct Physical {
    handle: sys::CUmemGenericAllocationHandle,
    bytes: u64,
}

impl Physical {
    /// `bytes` (a multiple of the place's granularity) of physical memory at `place`.
    pub(crate) fn create(place: Place, bytes: u64) -> Result<Self> {
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        let p = prop(place);
        // SAFETY: one out-handle and a property struct that outlives the call.
        counted(0, || unsafe { sys::cuMemCreate(&mut handle, bytes as usize, &p, 0) })
            .result()
            .map_err(cuda_err("cuMemCreate", format!("{bytes} bytes at {place:?}")))?;
        Ok(Self { handle, bytes })
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        // SAFETY: created above; a handle still mapped is kept alive by the driver until unmapped.
        unsafe { sys::cuMemRelease(self.handle) };
    }
}

/// A reserved virtual range, freed on drop (its owner unmaps what it mapped first).
#[derive(Debug)]
pub(crate) struct Reserved {
    va: u64,
    bytes: u64,
}

impl Reserved {
    /// Reserves `bytes` (a multiple of the granularity) of virtual addresses.
    pub(crate) fn new(bytes: u64) -> Result<Self> {
        let mut va = 0u64;
        // SAFETY: one out-pointer; no fixed address asked.
        unsafe { sys::cuMemAddressReserve(&mut va, bytes as usize, 0, 0, 0) }
            .result()
            .map_err(cuda_err("cuMemAddressReserve", format!("{bytes} bytes")))?;
        Ok(Self { va, bytes })
    }

    pub(crate) fn va(&self) -> u64 {
        self.va
    }

    /// Maps `bytes` of `physical` from `physical_offset` at `offset` in the range. The range
    /// there must be unmapped; access is not given yet ([`Reserved::grant`]).
    pub(crate) fn map(
        &self,
        offset: u64,
        bytes: u64,
        physical: &Physical,
        physical_offset: u64,
    ) -> Result<()> {
        debug_assert!(offset + bytes <= self.bytes && physical_offset + bytes <= physical.bytes);
        // SAFETY: the range lies inside the reservation and inside the physical allocation.
        counted(1, || unsafe {
            sys::cuMemMap(self.va + offset, bytes as usize, physical_offset as usize, physical.handle, 0)
        })
        .result()
        .map_err(cuda_err(
            "cuMemMap",
            format!("{bytes} bytes at offset {offset} of {} bytes at {physical_offset}", physical.bytes),
        ))
    }

    /// Gives `device` read-write access to `bytes` at `offset` (one or more whole mappings).
    pub(crate) fn grant(&self, offset: u64, bytes: u64, device: i32) -> Result<()> {
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: device,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range is mapped.
        counted(2, || unsafe { sys::cuMemSetAccess(self.va + offset, bytes as usize, &access, 1) })
            .result()
            .map_err(cuda_err("cuMemSetAccess", format!("{bytes} bytes at offset {offset}")))
    }

    /// Undoes the mappings covering exactly `bytes` at `offset`. Nothing on the device may be
    /// using them.
    pub(crate) fn unmap(&self, offset: u64, bytes: u64) -> Result<()> {
        // SAFETY: the range is one or more whole mappings made by `map`.
        counted(3, || unsafe { sys::cuMemUnmap(self.va + offset, bytes as usize) })
            .result()
            .map_err(cuda_err("cuMemUnmap", format!("{bytes} bytes at offset {offset}")))
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // SAFETY: reserved above; every mapping in it was undone by its owner.
        unsafe { sys::cuMemAddressFree(self.va, self.bytes as usize) };
    }
}
