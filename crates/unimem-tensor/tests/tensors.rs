//! Tensors on the simulator: creation, views, host guards, launches, and every misuse the
//! issue names giving a clear error.

use proptest::prelude::*;
use unimem_core::config::PolicyName;
use unimem_core::{CostModel, Runtime, SimBackend};
use unimem_tensor::{assert_close, bf16, f16, launch, launch_cpu, Tensor, TensorError};

fn runtime(budget: u64) -> Runtime {
    let gpu = SimBackend::new(CostModel::h200(), budget);
    Runtime::builder().backend(Box::new(gpu)).policy(PolicyName::Advisor).build().unwrap()
}

#[test]
fn every_element_type_round_trips_through_managed_memory() {
    let rt = runtime(64 << 20);
    macro_rules! check {
        ($($t:ty: $v:expr),*) => {$(
            let t = Tensor::<$t>::from_slice(&rt, stringify!($t), &[3], &[$v, $v, $v]).unwrap();
            assert_eq!(t.to_vec().unwrap(), vec![$v, $v, $v]);
            assert_eq!(Tensor::<$t>::zeros(&rt, "z", &[2]).unwrap().to_vec().unwrap().len(), 2);
        )*};
    }
    check!(f32: 1.5, f64: -2.5, i8: -3, i16: -300, i32: 7, i64: -(1 << 40), u8: 200, u16: 60000,
           u32: 4_000_000_000, u64: 1 << 60, f16: f16::from_f32(0.5), bf16: bf16::from_f32(-1.0));
}

#[test]
fn views_share_data_and_know_their_bytes() {
    let rt = runtime(64 << 20);
    let a = Tensor::<i32>::from_fn(&rt, "a", &[3, 4], |i| (i[0] * 10 + i[1]) as i32).unwrap();
    let row = a.narrow(0, 1, 2).unwrap();
    assert_eq!(row.to_vec().unwrap(), vec![10, 11, 12, 13]);
    assert_eq!(row.byte_range(), (16, 16), "row 1 of 4 i32s");
    let col = a.transpose(0, 1).unwrap().narrow(0, 2, 3).unwrap();
    assert_eq!(col.to_vec().unwrap(), vec![2, 12, 22]);
    assert_eq!(col.byte_range(), (8, 36), "from element 2 to element 22");
    assert_eq!(
        a.reshape(&[2, 6]).unwrap().narrow(0, 1, 2).unwrap().to_vec().unwrap(),
        vec![12, 13, 20, 21, 22, 23]
    );
    assert_eq!(col.region(), a.region());
}

#[test]
fn host_guards_read_and_write_back() {
    let rt = runtime(64 << 20);
    let mut a = Tensor::<f32>::zeros(&rt, "a", &[4]).unwrap();
    {
        let mut h = a.host_mut().unwrap();
        h[2] = 7.0;
    }
    assert_eq!(a.host().unwrap().to_vec(), vec![0.0, 0.0, 7.0, 0.0]);
    let mut h = a.host_mut().unwrap();
    h[0] = 1.0;
    h.commit().unwrap();
    assert_eq!(a.to_vec().unwrap()[0], 1.0);
}

#[test]
fn cpu_launches_compute_and_feed_the_runtime() {
    let rt = runtime(64 << 20);
    let x = Tensor::<f64>::from_fn(&rt, "x", &[1000], |i| i[0] as f64).unwrap();
    let y = Tensor::<f64>::uninit(&rt, "y", &[1000]).unwrap();
    launch_cpu(&rt, "square", 50_000, &[x.read(), y.write()], |io| {
        let v: Vec<f64> = io.read(0)?;
        io.write(1, &v.iter().map(|a| a * a).collect::<Vec<_>>())
    })
    .unwrap();
    let want: Vec<f64> = (0..1000).map(|i| (i * i) as f64).collect();
    assert_close(&y.to_vec().unwrap(), &want, 0.0);
    launch(&rt, "declared only", 1_000, &[y.read()]).unwrap();
    let stats = rt.synchronize().unwrap();
    assert_eq!(stats.backend_stats.kernels, 2);
    assert!(stats.elapsed_ns >= 51_000, "kernels are timed: {}", stats.elapsed_ns);
}

#[test]
fn misuse_is_a_clear_error() {
    let rt = runtime(64 << 20);
    // Shape mismatch.
    let e = Tensor::<f32>::from_slice(&rt, "bad", &[2, 2], &[1.0; 3]).unwrap_err();
    assert!(matches!(e, TensorError::ShapeMismatch { expected: 4, got: 3, .. }), "{e}");
    assert!(e.to_string().contains("`bad`"), "{e}");
    // Out-of-range slice.
    let a = Tensor::<f32>::zeros(&rt, "a", &[4, 4]).unwrap();
    let e = a.narrow(1, 2, 9).unwrap_err();
    assert!(e.to_string().contains("cannot narrow to 2..9"), "{e}");
    assert!(a.narrow(5, 0, 1).unwrap_err().to_string().contains("does not exist"));
    // Launching with a tensor held on the host.
    let guard = a.host().unwrap();
    let e = launch_cpu(&rt, "k", 1, &[a.read()], |_| Ok(())).unwrap_err();
    assert!(matches!(e, TensorError::HeldOnHost { .. }) && e.to_string().contains("`a`"), "{e}");
    drop(guard);
    launch_cpu(&rt, "k", 1, &[a.read()], |_| Ok(())).unwrap();
    // Element-type mismatch, writing a read-only argument, wrong length.
    let e = launch_cpu(&rt, "k", 1, &[a.read()], |io| io.read::<f64>(0).map(|_| ())).unwrap_err();
    assert!(e.to_string().contains("holds f32, not f64"), "{e}");
    let e = launch_cpu(&rt, "k", 1, &[a.read()], |io| io.write(0, &[0f32; 16])).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    let e = launch_cpu(&rt, "k", 1, &[a.write()], |io| io.write(0, &[0f32; 3])).unwrap_err();
    assert!(e.to_string().contains("expected 16 elements, got 3"), "{e}");
    // A strided view cannot be reshaped without a copy.
    let e = a.transpose(0, 1).unwrap().reshape(&[16]).unwrap_err();
    assert!(matches!(e, TensorError::NotContiguous { .. }), "{e}");
    // Another runtime's tensor.
    let other = runtime(64 << 20);
    let e = launch(&other, "k", 1, &[a.read()]).unwrap_err();
    assert!(matches!(e, TensorError::OtherRuntime { .. }), "{e}");
    // Use after the runtime is dropped.
    drop(rt);
    drop(other);
    let e = a.to_vec().unwrap_err();
    assert!(e.to_string().contains("after the runtime was dropped"), "{e}");
}

#[test]
fn display_summarises_large_tensors() {
    let rt = runtime(64 << 20);
    let t = Tensor::<f32>::from_fn(&rt, "big", &[1000, 1000], |i| i[1] as f32).unwrap();
    let shown = t.to_string();
    assert!(shown.contains("1000000 elements") && shown.contains("...") && shown.len() < 300, "{shown}");
    assert!(format!("{t:?}").contains("Tensor<f32>(`big`, shape [1000, 1000]"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any chain of narrowing and transposing gives the elements the reference index says,
    /// and its declared bytes lie inside the region.
    #[test]
    fn views_match_the_reference_index(
        shape in prop::collection::vec(1u64..5, 1..4),
        ops in prop::collection::vec((0usize..3, 0u64..5, 0u64..5, any::<bool>()), 0..4),
    ) {
        let rt = runtime(64 << 20);
        let total: u64 = shape.iter().product();
        let base = Tensor::<u32>::from_fn(&rt, "t", &shape, |i| {
            i.iter().zip(&shape).fold(0u64, |acc, (x, d)| acc * d + x) as u32
        }).unwrap();
        // Reference: the view as (for each view index) the base's flat index.
        let mut view = base.clone();
        let mut dims: Vec<u64> = shape.clone();
        let flat = |idx: &[u64]| idx.iter().zip(&shape).fold(0u64, |acc, (x, d)| acc * d + x);
        // Track the view as a function from view index to base index.
        let mut perm: Vec<usize> = (0..shape.len()).collect();
        let mut starts: Vec<u64> = vec![0; shape.len()];
        for (dim, a, b, transpose) in ops {
            let rank = dims.len();
            let dim = dim % rank;
            if transpose {
                let other = (dim + 1) % rank;
                view = view.transpose(dim, other).unwrap();
                dims.swap(dim, other);
                perm.swap(dim, other);
            } else {
                let (lo, hi) = (a.min(b).min(dims[dim]), a.max(b).min(dims[dim]));
                view = view.narrow(dim, lo, hi).unwrap();
                starts[perm[dim]] += lo;
                dims[dim] = hi - lo;
            }
        }
        let got = view.to_vec().unwrap();
        let mut want = Vec::new();
        if !dims.contains(&0) {
            let mut idx = vec![0u64; dims.len()];
            'all: loop {
                let mut base_idx = starts.clone();
                for (v, &p) in idx.iter().zip(&perm) {
                    base_idx[p] += v;
                }
                want.push(flat(&base_idx) as u32);
                let mut d = dims.len();
                loop {
                    if d == 0 { break 'all; }
                    d -= 1;
                    idx[d] += 1;
                    if idx[d] < dims[d] { break; }
                    idx[d] = 0;
                }
            }
        }
        prop_assert_eq!(got, want);
        let (off, len) = view.byte_range();
        prop_assert!(off + len <= total * 4, "span {}+{} outside {} bytes", off, len, total * 4);
    }
}

#[test]
fn cuda_launches_on_the_simulator_are_a_clear_error() {
    let rt = runtime(64 << 20);
    let a = Tensor::<f32>::zeros(&rt, "a", &[4]).unwrap();
    // A CudaFunction needs a driver to exist, so the refusal is checked one level down, on
    // the runtime call `launch_cuda` makes.
    let e = rt.launch_native("k", &[a.read().range()], |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("need the CUDA backend"), "{e}");
}
