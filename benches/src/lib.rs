//! unimem's criterion benchmarks live in `benches/` of this crate; this library is empty.
