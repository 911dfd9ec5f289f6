//! A tensor larger than the GPU streamed through a kernel in chunks: each kernel sums one
//! chunk (a view, no copy) into an output element. Run (on the simulator, or the GPU) with no hints and with
//! the advisor; each run prints its own report, and both must compute the same sums.
//!
//! `cargo run --release -p unimem-tensor --example streaming` (add `-- cuda` on a GPU; `-- --telemetry PREFIX` writes
//! each run's telemetry log to PREFIX.POLICY.jsonl)

mod common;

use unimem_core::config::PolicyName;
use unimem_core::units::{Bytes, Nanos};
use unimem_tensor::cuda::{load_kernels, CudaFunction, LaunchConfig};
use unimem_tensor::{launch_cpu, launch_cuda, Result, Tensor};

/// The chunk sum as a CUDA kernel, for `-- cuda`: one block, a fixed order of additions, so
/// every run computes the same bits.
const KERNELS: &str = r#"
extern "C" __global__ void sum_chunk(const float* x, double* out, unsigned long long n) {
    __shared__ double part[256];
    double s = 0.0;
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}
"#;

fn gpu_kernel() -> Result<Option<CudaFunction>> {
    if !common::on_gpu() {
        return Ok(None);
    }
    Ok(load_kernels(0, KERNELS, &["sum_chunk"])?.pop())
}

const ELEMS: u64 = 32 << 20; // f32: 128 MiB
const CHUNK: u64 = 2 << 20; // 8 MiB per kernel
const BUDGET: u64 = 32 << 20;
const PASSES: u64 = 2;

fn stream(policy: PolicyName, gpu: Option<&CudaFunction>) -> Result<Vec<f64>> {
    let rt = common::runtime(BUDGET, policy)?;
    let data = Tensor::<f32>::from_fn(&rt, "data", &[ELEMS], |i| (i[0] % 1000) as f32)?;
    let chunks = ELEMS / CHUNK;
    let sums = Tensor::<f64>::zeros(&rt, "sums", &[chunks])?;
    let t0 = rt.synchronize()?.elapsed_ns;
    for _ in 0..PASSES {
        rt.step()?;
        for c in 0..chunks {
            let chunk = data.narrow(0, c * CHUNK, (c + 1) * CHUNK)?;
            let out = sums.narrow(0, c, c + 1)?;
            let args = [chunk.read(), out.write()];
            if let Some(f) = gpu {
                let one_block =
                    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                // SAFETY: sum_chunk(x, out, n) reads the chunk and writes one element, as declared.
                unsafe { launch_cuda(&rt, "sum_chunk", f, one_block, &args, &[CHUNK])? };
            } else {
                // 8 MiB read at ~2.6 TB/s.
                launch_cpu(&rt, "sum_chunk", 3_200, &args, |io| {
                    let x: Vec<f32> = io.read(0)?;
                    io.write(1, &[x.iter().map(|&v| v as f64).sum::<f64>()])
                })?;
            }
        }
    }
    let stats = rt.synchronize()?;
    let s = &stats.backend_stats;
    let secs = (stats.elapsed_ns - t0) as f64 / 1e9;
    println!(
        "{:<8} time {:>10}  effective {:>6.1} GB/s  GPU faults {:>5}  H2D {:>10}  prefetched {:>10}",
        policy.as_str(),
        Nanos(stats.elapsed_ns - t0).to_string(),
        (ELEMS * 4 * PASSES) as f64 / secs / 1e9,
        s.gpu_faults,
        Bytes(s.h2d_bytes).to_string(),
        Bytes(s.prefetch_h2d_bytes).to_string(),
    );
    sums.to_vec()
}

fn main() -> Result<()> {
    println!(
        "streaming: {} read in {} chunks, {PASSES} passes, on a GPU (simulated unless `cuda` is given) of {}",
        Bytes(ELEMS * 4),
        Bytes(CHUNK * 4),
        Bytes(BUDGET)
    );
    let gpu = gpu_kernel()?;
    let none = stream(PolicyName::None, gpu.as_ref())?;
    let advisor = stream(PolicyName::Advisor, gpu.as_ref())?;
    assert_eq!(none, advisor, "both runs compute the same sums");
    println!("same sums either way: total {}", advisor.iter().sum::<f64>());
    Ok(())
}
