//! A training-loop-shaped program whose tensors total more than the GPU it runs on: four
//! layers of weights, activations allocated every step (forward), read back in reverse
//! (backward), weights updated in place. Run (on the simulator, or the GPU) with no hints and with the
//! advisor; each run prints its own report, and both must compute the same weights.
//!
//! `cargo run --release -p unimem-tensor --example training_loop` (add `-- cuda` on a GPU; `-- --telemetry PREFIX` writes
//! each run's telemetry log to PREFIX.POLICY.jsonl)

mod common;

use unimem_core::config::PolicyName;
use unimem_core::units::{Bytes, Nanos};
use unimem_tensor::cuda::{load_kernels, CudaFunction, LaunchConfig};
use unimem_tensor::{launch_cpu, launch_cuda, Result, Tensor};

/// The layers as CUDA kernels, for `-- cuda` (the same arithmetic as the CPU bodies, without
/// contraction into fused multiply-adds, so both runs compute the same bits).
const KERNELS: &str = r#"
extern "C" __global__ void forward(const float* x, const float* w, float* y,
                                   unsigned long long n, unsigned long long nw) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float v = __fadd_rn(__fmul_rn(x[i], 0.5f), w[i % nw]);
        y[i] = v > 0.0f ? v : 0.0f;
    }
}
extern "C" __global__ void backward(const float* a, float* w, unsigned long long nw) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < nw;
         i += (unsigned long long)gridDim.x * blockDim.x)
        w[i] = __fsub_rn(w[i], __fmul_rn(1e-4f, a[2 * i]));
}
"#;

/// The compiled layers.
struct Gpu {
    forward: CudaFunction,
    backward: CudaFunction,
}

fn gpu_kernels() -> Result<Option<Gpu>> {
    if !common::on_gpu() {
        return Ok(None);
    }
    let mut f = load_kernels(0, KERNELS, &["forward", "backward"])?.into_iter();
    Ok(f.next().zip(f.next()).map(|(forward, backward)| Gpu { forward, backward }))
}

fn grid(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).min(4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

const LAYERS: usize = 4;
const WEIGHT: u64 = 1 << 20; // f32 elements per layer: 4 MiB
const ACT: u64 = 2 << 20; // f32 elements per activation: 8 MiB
const STEPS: u64 = 4;
const BUDGET: u64 = 28 << 20; // the program touches 16 + 32 MiB per step

/// A kernel's time with its data resident: its bytes at ~2.6 TB/s of HBM.
fn dur(bytes: u64) -> u64 {
    bytes * 10 / 26
}

fn train(policy: PolicyName, gpu: Option<&Gpu>) -> Result<Vec<f32>> {
    let rt = common::runtime(BUDGET, policy)?;
    let weights: Vec<Tensor<f32>> = (0..LAYERS)
        .map(|l| Tensor::from_fn(&rt, &format!("w{l}"), &[WEIGHT], |i| ((i[0] % 7) as f32 + l as f32) * 0.01))
        .collect::<Result<_>>()?;
    let input = Tensor::<f32>::from_fn(&rt, "input", &[ACT], |i| (i[0] % 13) as f32 * 0.1)?;
    for _ in 0..STEPS {
        rt.step()?;
        // Forward: each layer's activation from the previous one and its weights.
        let mut acts: Vec<Tensor<f32>> = Vec::new();
        for (l, w) in weights.iter().enumerate() {
            let prev = acts.last().unwrap_or(&input).clone();
            let out = Tensor::<f32>::uninit(&rt, &format!("act{l}"), &[ACT])?;
            let args = [prev.read(), w.read(), out.write()];
            if let Some(gpu) = gpu {
                // SAFETY: forward(x, w, y, n, nw) reads x and w and writes y, as declared.
                unsafe { launch_cuda(&rt, "forward", &gpu.forward, grid(ACT), &args, &[ACT, WEIGHT])? };
            } else {
                launch_cpu(&rt, "forward", dur(ACT * 12), &args, |io| {
                    let (x, w): (Vec<f32>, Vec<f32>) = (io.read(0)?, io.read(1)?);
                    let y: Vec<f32> =
                        x.iter().enumerate().map(|(i, v)| (v * 0.5 + w[i % w.len()]).max(0.0)).collect();
                    io.write(2, &y)
                })?;
            }
            acts.push(out);
        }
        // Backward, in reverse: each layer reads its activation and updates its weights.
        for (l, w) in weights.iter().enumerate().rev() {
            let act = &acts[l];
            let args = [act.read(), w.read_write()];
            if let Some(gpu) = gpu {
                // SAFETY: backward(a, w, nw) reads a and updates w, as declared.
                unsafe { launch_cuda(&rt, "backward", &gpu.backward, grid(WEIGHT), &args, &[WEIGHT])? };
            } else {
                launch_cpu(&rt, "backward", dur(ACT * 4 + WEIGHT * 8), &args, |io| {
                    let (a, mut w): (Vec<f32>, Vec<f32>) = (io.read(0)?, io.read(1)?);
                    for (i, g) in a.iter().step_by(2).enumerate() {
                        w[i % WEIGHT as usize] -= 1e-4 * g;
                    }
                    io.write(1, &w)
                })?;
            }
        }
        // The activations are freed as the step ends (dropped here).
    }
    let stats = rt.synchronize()?;
    let s = &stats.backend_stats;
    println!(
        "{:<8} time {:>10}  GPU faults {:>6}  H2D {:>10}  D2H {:>10}  prefetched {:>10}  peak resident {:>10} of {}",
        policy.as_str(),
        Nanos(stats.elapsed_ns).to_string(),
        s.gpu_faults,
        Bytes(s.h2d_bytes).to_string(),
        Bytes(s.d2h_bytes).to_string(),
        Bytes(s.prefetch_h2d_bytes).to_string(),
        Bytes(s.peak_device_bytes).to_string(),
        Bytes(BUDGET)
    );
    // The first elements of the last layer's weights, to compare the runs.
    weights[LAYERS - 1].narrow(0, 0, 8)?.to_vec()
}

fn main() -> Result<()> {
    println!(
        "training loop: {LAYERS} layers, {} of weights, {} of activations per step, {STEPS} steps, on a GPU (simulated unless `cuda` is given) of {}",
        Bytes(LAYERS as u64 * WEIGHT * 4),
        Bytes(LAYERS as u64 * ACT * 4),
        Bytes(BUDGET)
    );
    let gpu = gpu_kernels()?;
    let none = train(PolicyName::None, gpu.as_ref())?;
    let advisor = train(PolicyName::Advisor, gpu.as_ref())?;
    assert_eq!(none, advisor, "both runs compute the same weights");
    println!("same weights either way: {:?}", &advisor[..4]);
    Ok(())
}
