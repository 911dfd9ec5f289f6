//! Tests on a real GPU: `cargo test -p unimem-core --features gpu-tests` on a machine with an
//! NVIDIA GPU (the project runs them on the H200 through `shared/gpu/pack.sh`). They allocate
//! at most 4 GiB of managed memory, far below free device memory, and never write a range that
//! holds read-mostly duplicates.
#![cfg(feature = "gpu-tests")]

use unimem_core::backend::cuda::{
    discard_and_prefetch_batch, discard_batch, prefetch_batch, probe, CudaDevice, Kernels, ManagedBuffer,
    TouchMode,
};
use unimem_core::backend::{Advice, Location};
use unimem_core::Error;

const GIB: u64 = 1 << 30;

fn device() -> CudaDevice {
    CudaDevice::open(0).expect("these tests need a CUDA device")
}

/// Fills a buffer with its word index (from the host) and returns the sum of the words.
fn fill(buf: &mut ManagedBuffer) -> u64 {
    // SAFETY: no device work is using the buffer.
    let bytes = unsafe { buf.host_bytes() };
    let words: &mut [u32] = bytemuck_words(bytes);
    let mut sum = 0u64;
    for (i, w) in words.iter_mut().enumerate() {
        *w = i as u32;
        sum += i as u32 as u64;
    }
    sum
}

fn bytemuck_words(bytes: &mut [u8]) -> &mut [u32] {
    assert_eq!(bytes.as_ptr() as usize % 4, 0);
    // SAFETY: managed allocations are page aligned; any bit pattern is a valid u32.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / 4) }
}

fn host_sum(buf: &mut ManagedBuffer) -> u64 {
    // SAFETY: callers synchronise first.
    bytemuck_words(unsafe { buf.host_bytes() }).iter().map(|&w| w as u64).sum()
}

#[test]
fn capabilities_are_probed() {
    let dev = device();
    let c = dev.capabilities();
    assert!(c.managed_memory && c.concurrent_managed_access, "{c:?}");
    assert!(c.total_bytes > 0 && c.free_bytes <= c.total_bytes);
    eprintln!("{c:?}");
}

#[test]
fn oversubscription_is_refused_before_any_allocation() {
    let dev = device();
    let (free, _) = dev.mem_info().unwrap();
    let e = ManagedBuffer::alloc(&dev, free).unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e}");
    assert!(e.to_string().contains("can hang the GPU"), "{e}");
    assert!(e.to_string().contains(r#"oversubscribe = "allow""#), "names the key: {e}");
}

#[test]
fn advice_and_prefetch_show_in_range_attributes() {
    let dev = device();
    let s = dev.new_stream().unwrap();
    let buf = ManagedBuffer::alloc(&dev, 64 << 20).unwrap();
    buf.advise(0, buf.len(), Advice::SetReadMostly).unwrap();
    assert!(buf.attributes(0, buf.len()).unwrap().read_mostly);
    buf.advise(0, buf.len(), Advice::UnsetReadMostly).unwrap();
    assert!(!buf.attributes(0, buf.len()).unwrap().read_mostly);
    buf.advise(0, buf.len(), Advice::SetPreferredLocation(Location::Host)).unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().preferred, Some(Location::Host));
    buf.advise(0, buf.len(), Advice::UnsetPreferredLocation).unwrap();
    buf.prefetch(0, buf.len(), Location::Device, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().last_prefetch, Some(Location::Device));
    prefetch_batch(&dev, &[(buf.ptr(), 32 << 20), (buf.ptr() + (32 << 20), 32 << 20)], Location::Host, &s)
        .unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().last_prefetch, Some(Location::Host));
    assert!(buf.prefetch(0, buf.len() + 1, Location::Device, &s).is_err(), "ranges are checked");
}

/// 4 GiB through every placement: GPU faults, prefetch both ways, GPU writes evicted back,
/// read-mostly duplicates (read only), remote access, and discard. Checksums on both sides.
#[test]
fn data_survives_prefetch_evict_duplicate_remote_and_discard_cycles() {
    let dev = device();
    let k = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();
    let mut a = ManagedBuffer::alloc(&dev, 2 * GIB).unwrap();
    let mut b = ManagedBuffer::alloc(&dev, 2 * GIB).unwrap();
    let words = a.len() / 4;
    let sum_a = fill(&mut a);
    let sum_b = fill(&mut b);

    // GPU reads fault the host data in.
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    // Prefetch both ways, then a GPU write that is evicted back to the host.
    prefetch_batch(&dev, &[(b.ptr(), b.len())], Location::Device, &s).unwrap();
    k.add_u32(&s, b.ptr(), words, 3).unwrap();
    b.prefetch(0, b.len(), Location::Host, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut b), sum_b + 3 * words, "device writes survived the eviction");
    // Read-mostly: duplicates on the device, read there, dropped by a prefetch to the host.
    a.advise(0, a.len(), Advice::SetReadMostly).unwrap();
    a.prefetch(0, a.len(), Location::Device, &s).unwrap();
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    a.prefetch(0, a.len(), Location::Host, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut a), sum_a);
    a.advise(0, a.len(), Advice::UnsetReadMostly).unwrap(); // before any GPU write
                                                            // Remote: host-preferred and mapped; GPU reads and writes in place.
    a.advise(0, a.len(), Advice::SetPreferredLocation(Location::Host)).unwrap();
    a.advise(0, a.len(), Advice::SetAccessedByDevice).unwrap();
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    k.add_u32(&s, a.ptr(), words, 1).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut a), sum_a + words);
    a.advise(0, a.len(), Advice::UnsetAccessedByDevice).unwrap();
    a.advise(0, a.len(), Advice::UnsetPreferredLocation).unwrap();
    // Discard: the contents are dead; new data written afterwards is intact, on both sides.
    assert!(discard_batch(&dev, &[(b.ptr(), b.len())], &s).unwrap(), "CUDA 13 has the discard call");
    discard_and_prefetch_batch(&dev, &[(b.ptr(), b.len())], Location::Device, &s).unwrap();
    s.synchronize().unwrap();
    let sum_b2 = fill(&mut b);
    k.add_u32(&s, b.ptr(), words, 2).unwrap();
    assert_eq!(k.sum_u32(&s, b.ptr(), words).unwrap(), sum_b2 + 2 * words);
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut b), sum_b2 + 2 * words);
}

#[test]
fn touch_kernel_spins_for_its_duration_when_data_is_resident() {
    let dev = device();
    let k = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();
    let buf = ManagedBuffer::alloc(&dev, 256 << 20).unwrap();
    buf.prefetch(0, buf.len(), Location::Device, &s).unwrap();
    k.touch(&s, &[(buf.ptr(), buf.len(), TouchMode::Write)], 4096, 0).unwrap();
    s.synchronize().unwrap();
    let t0 = std::time::Instant::now();
    k.touch(&s, &[(buf.ptr(), buf.len(), TouchMode::Read)], 4096, 2_000_000).unwrap();
    s.synchronize().unwrap();
    let took = t0.elapsed().as_micros();
    assert!((2_000..4_000).contains(&took), "a 2 ms kernel on resident data took {took} us");
}

#[test]
fn probe_measures_and_writes_a_valid_profile() {
    let dev = device();
    let r = probe::run(&dev, 512 << 20).unwrap();
    for m in &r.measurements {
        assert!(m.value.is_finite() && m.value >= 0.0, "{m:?}");
        eprintln!("{:<50} {:>10.2} {:<5} (profile {:?})", m.name, m.value, m.unit, m.profile_value);
    }
    r.profile.validate("probe").unwrap();
    assert!(r.profile.prefetch_h2d_rate_gbps > r.profile.gpu_fault_rate_gbps, "prefetch beats faults");
    let streaming = r.measurements.iter().find(|m| m.name.starts_with("streaming read")).unwrap().value;
    assert!(streaming > 3.0 * r.profile.gpu_fault_rate_gbps, "pipelined prefetch {streaming} GB/s vs faults");
}
