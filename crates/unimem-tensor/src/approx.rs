//! Approximate comparisons for tests.

use crate::element::Element;

/// The largest absolute difference between two equally long slices (infinite if the lengths
/// differ).
pub fn max_abs_diff<T: Element>(a: &[T], b: &[T]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (x.to_f64() - y.to_f64()).abs()).fold(0.0, f64::max)
}

/// Panics, naming the first differing element, unless every element of `actual` is within
/// `tol` of `expected`.
#[track_caller]
pub fn assert_close<T: Element>(actual: &[T], expected: &[T], tol: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let d = (a.to_f64() - e.to_f64()).abs();
        assert!(d <= tol, "element {i}: {a:?} vs {e:?} (difference {d} > {tol})");
    }
}
