//! Kernels compiled at run time with NVRTC: touching managed ranges (as a trace's kernels do)
//! and simple word-wise updates and sums (for data-integrity tests and the probe).

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use super::{cuda_err, CudaDevice};
use crate::access::AccessMode;
use crate::error::{Error, Result};

/// Ranges one touch launch takes; longer lists are split over several launches. An arena
/// kernel's data is a range per 2 MiB block where blocks are not adjacent on the device
/// (ResNet-50's kernels average 52), and each launch costs the host a driver call and the
/// device a kernel's start, so a launch takes many: 64 make a 1,296-byte argument block, well
/// within the 4 KiB every CUDA device takes.
pub const MAX_TOUCH_RANGES: usize = 64;

/// The kernels' source, after `#define MAXR` ([`MAX_TOUCH_RANGES`]).
const SOURCE: &str = r#"
struct Ranges {
    unsigned long long ptr[MAXR];
    unsigned long long len[MAXR];
    unsigned int mode[MAXR];
    unsigned int n;
    unsigned int stride;
    unsigned long long spin_ns;
};

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Touches one byte every `stride` bytes of each range (mode 1 read, 2 write, 3 both), then each
// block spins for `spin_ns`: with the data resident the kernel takes about `spin_ns`, and time
// lost to faults during the touches adds on top. A write stores the byte it read back, so the
// page is written (dirty, on the device) but its data is unchanged: tensors' host-executed
// kernels rely on the touch leaving their inputs intact. The threads split evenly over the
// ranges, so that every range is touched at once: a thread walking the ranges one after
// another waits for each of its volatile loads in turn (a memory latency per range).
extern "C" __global__ void touch(Ranges r, unsigned long long sink) {
    unsigned int acc = 0;
    unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long nth = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long lanes = r.n ? nth / r.n : 0;  // threads per range
    if (lanes == 0) lanes = 1;                        // fewer threads than ranges: one each
    for (unsigned long long t = tid; r.n && t < lanes * r.n; t += nth) {
        unsigned int i = (unsigned int)(t % r.n);
        unsigned long long items = (r.len[i] + r.stride - 1) / r.stride;
        volatile unsigned char* base = (volatile unsigned char*)r.ptr[i];
        for (unsigned long long k = t / r.n; k < items; k += lanes) {
            unsigned char v = base[k * r.stride];
            acc += v;
            if (r.mode[i] & 2) base[k * r.stride] = v;
        }
    }
    if (r.spin_ns) {
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long t0 = now_ns();
            while (now_ns() - t0 < r.spin_ns) { }
        }
    }
    if (acc == 0xdeadbeefu) *(unsigned int*)sink = acc;  // keeps the reads alive
}

extern "C" __global__ void add_u32(unsigned long long p, unsigned long long n, unsigned int delta) {
    unsigned int* w = (unsigned int*)p;
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
         k += (unsigned long long)gridDim.x * blockDim.x)
        w[k] += delta;
}

// Copies `n` 16-byte words from `src` to `dst` (either side may be pinned host memory mapped
// into the device's address space, or managed memory).
extern "C" __global__ void copy_16(unsigned long long dst, unsigned long long src, unsigned long long n) {
    uint4* d = (uint4*)dst;
    const uint4* s = (const uint4*)src;
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
         k += (unsigned long long)gridDim.x * blockDim.x)
        d[k] = s[k];
}

extern "C" __global__ void sum_u32(unsigned long long p, unsigned long long n, unsigned long long out) {
    const unsigned int* w = (const unsigned int*)p;
    unsigned long long s = 0;
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
         k += (unsigned long long)gridDim.x * blockDim.x)
        s += w[k];
    atomicAdd((unsigned long long*)out, s);
}
"#;

/// How a touch accesses a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchMode {
    /// Loads only.
    Read = 1,
    /// Stores only.
    Write = 2,
    /// Loads and stores.
    ReadWrite = 3,
}

impl From<AccessMode> for TouchMode {
    fn from(m: AccessMode) -> Self {
        match m {
            AccessMode::Read => TouchMode::Read,
            AccessMode::Write => TouchMode::Write,
            AccessMode::ReadWrite => TouchMode::ReadWrite,
        }
    }
}

/// The kernel's argument block; the layout matches `struct Ranges` above.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TouchArgs {
    ptr: [u64; MAX_TOUCH_RANGES],
    len: [u64; MAX_TOUCH_RANGES],
    mode: [u32; MAX_TOUCH_RANGES],
    n: u32,
    stride: u32,
    spin_ns: u64,
}

// SAFETY: plain old data with the C layout the kernel declares.
unsafe impl DeviceRepr for TouchArgs {}

// A kernel's arguments must fit in 4 KiB on every device (the scratch word's 8 bytes too).
const _: () = assert!(std::mem::size_of::<TouchArgs>() + 8 <= 4096);

/// The loaded kernels and an 8-byte scratch word for their results.
#[derive(Debug)]
pub struct Kernels {
    touch: CudaFunction,
    add_u32: CudaFunction,
    sum_u32: CudaFunction,
    copy_16: CudaFunction,
    scratch: u64,
    grid: u32,
    ctx: Arc<cudarc::driver::CudaContext>,
}

impl Kernels {
    /// Compiles (NVRTC) and loads the kernels for `dev`.
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        // SAFETY: only tries to load the library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::BackendUnavailable {
                backend: "cuda".into(),
                reason: "NVRTC (libnvrtc) is not installed: unimem compiles its kernels at run time".into(),
            });
        }
        let (major, minor) = dev.capabilities().compute_capability;
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            ..Default::default()
        };
        let source = format!("#define MAXR {MAX_TOUCH_RANGES}\n{SOURCE}");
        let ptx = compile_ptx_with_opts(source, opts)
            .map_err(|e| Error::cuda("nvrtcCompileProgram", format!("{e:?}")))?;
        let ctx = dev.context().clone();
        let module = ctx.load_module(ptx).map_err(cuda_err("cuModuleLoadData", "unimem kernels"))?;
        let load = |name: &str| module.load_function(name).map_err(cuda_err("cuModuleGetFunction", name));
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_err("cuDeviceGetAttribute", "SM count"))?;
        ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "kernels"))?;
        // SAFETY: an 8-byte device allocation freed in drop.
        let scratch = unsafe { result::malloc_sync(8) }.map_err(cuda_err("cuMemAlloc", "scratch"))?;
        Ok(Self {
            touch: load("touch")?,
            add_u32: load("add_u32")?,
            sum_u32: load("sum_u32")?,
            copy_16: load("copy_16")?,
            scratch,
            grid: (sms.max(1) as u32) * 8,
            ctx,
        })
    }

    /// The device's multiprocessors (the default grid is 8 blocks per SM).
    pub fn sms(&self) -> u32 {
        self.grid / 8
    }

    fn cfg(&self) -> LaunchConfig {
        self.cfg_blocks(self.grid)
    }

    fn cfg_blocks(&self, blocks: u32) -> LaunchConfig {
        LaunchConfig { grid_dim: (blocks.max(1), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }

    /// Touches one byte every `stride` bytes of each `(address, len, mode)` range of managed
    /// memory, then spins `spin_ns` (in the last launch, when the ranges need several).
    pub fn touch(
        &self,
        stream: &CudaStream,
        ranges: &[(u64, u64, TouchMode)],
        stride: u32,
        spin_ns: u64,
    ) -> Result<()> {
        self.touch_with_blocks(stream, ranges, stride, spin_ns, self.grid)
    }

    /// [`Kernels::touch`] with `blocks` thread blocks of 256 threads (fewer blocks touch fewer
    /// pages at once: the fault-driven rate depends on it).
    pub fn touch_with_blocks(
        &self,
        stream: &CudaStream,
        ranges: &[(u64, u64, TouchMode)],
        stride: u32,
        spin_ns: u64,
        blocks: u32,
    ) -> Result<()> {
        let chunks: Vec<&[(u64, u64, TouchMode)]> =
            if ranges.is_empty() { vec![&[]] } else { ranges.chunks(MAX_TOUCH_RANGES).collect() };
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let mut args = TouchArgs {
                ptr: [0; MAX_TOUCH_RANGES],
                len: [0; MAX_TOUCH_RANGES],
                mode: [0; MAX_TOUCH_RANGES],
                n: chunk.len() as u32,
                stride: stride.max(1),
                spin_ns: if i == last { spin_ns } else { 0 },
            };
            for (j, &(p, l, m)) in chunk.iter().enumerate() {
                (args.ptr[j], args.len[j], args.mode[j]) = (p, l, m as u32);
            }
            let mut b = stream.launch_builder(&self.touch);
            b.arg(&args).arg(&self.scratch);
            // SAFETY: the arguments match the kernel's signature; the ranges are managed memory
            // the caller owns, live until the stream has run the kernel.
            unsafe { b.launch(self.cfg_blocks(blocks)) }.map_err(cuda_err("cuLaunchKernel", "touch"))?;
        }
        Ok(())
    }

    /// Adds `delta` to each of the `words` 32-bit words at `ptr` on the device.
    pub fn add_u32(&self, stream: &CudaStream, ptr: u64, words: u64, delta: u32) -> Result<()> {
        let mut b = stream.launch_builder(&self.add_u32);
        b.arg(&ptr).arg(&words).arg(&delta);
        // SAFETY: the caller owns `words` words of managed memory at `ptr`.
        unsafe { b.launch(self.cfg()) }.map_err(cuda_err("cuLaunchKernel", "add_u32")).map(|_| ())
    }

    /// Copies `bytes` (a multiple of 16) from `src` to `dst` with a kernel of `blocks` thread
    /// blocks: either side may be mapped pinned host memory, read or written over the link.
    pub fn copy(&self, stream: &CudaStream, dst: u64, src: u64, bytes: u64, blocks: u32) -> Result<()> {
        let n = bytes / 16;
        let mut b = stream.launch_builder(&self.copy_16);
        b.arg(&dst).arg(&src).arg(&n);
        // SAFETY: the caller owns `bytes` bytes at both addresses, live until the stream ran it.
        unsafe { b.launch(self.cfg_blocks(blocks)) }
            .map_err(cuda_err("cuLaunchKernel", "copy_16"))
            .map(|_| ())
    }

    /// Sums the `words` 32-bit words at `ptr` on the device (waits for `stream`).
    pub fn sum_u32(&self, stream: &CudaStream, ptr: u64, words: u64) -> Result<u64> {
        self.ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "sum"))?;
        let zero = [0u8; 8];
        // SAFETY: the scratch word is 8 bytes of device memory owned by self.
        unsafe { result::memcpy_htod_async(self.scratch, &zero, stream.cu_stream()) }
            .map_err(cuda_err("cuMemcpyHtoDAsync", "scratch"))?;
        let mut b = stream.launch_builder(&self.sum_u32);
        b.arg(&ptr).arg(&words).arg(&self.scratch);
        // SAFETY: the caller owns `words` words of managed memory at `ptr`.
        unsafe { b.launch(self.cfg()) }.map_err(cuda_err("cuLaunchKernel", "sum_u32"))?;
        let mut out = [0u8; 8];
        // SAFETY: as above; the copy completes before the synchronise returns.
        unsafe { result::memcpy_dtoh_async(&mut out, self.scratch, stream.cu_stream()) }
            .map_err(cuda_err("cuMemcpyDtoHAsync", "scratch"))?;
        stream.synchronize().map_err(cuda_err("cuStreamSynchronize", "sum"))?;
        Ok(u64::from_le_bytes(out))
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        let freed = self.ctx.bind_to_thread().and_then(|_| {
            // SAFETY: allocated in load, freed once.
            unsafe { result::free_sync(self.scratch) }
        });
        if let Err(e) = freed {
            tracing::warn!("freeing the kernels' scratch word failed: {e:?}");
        }
    }
}
