//! Element types a tensor can hold: plain numbers with a fixed little-endian byte form.

use std::fmt::Debug;

use half::{bf16, f16};

/// A tensor element: a number with a fixed size and little-endian byte form.
pub trait Element: Copy + Debug + PartialEq + Send + Sync + 'static {
    /// Name in messages (`"f32"`).
    const NAME: &'static str;
    /// Size in bytes.
    const BYTES: usize;
    /// Writes the little-endian bytes into `out` (`BYTES` long).
    fn write_le(self, out: &mut [u8]);
    /// Reads from little-endian bytes (`BYTES` long).
    fn read_le(bytes: &[u8]) -> Self;
    /// The value as `f64`, for approximate comparisons and summaries.
    fn to_f64(self) -> f64;
    /// Zero.
    fn zero() -> Self;
}

macro_rules! element {
    ($($t:ty => $name:literal, $zero:expr;)*) => {$(
        impl Element for $t {
            const NAME: &'static str = $name;
            const BYTES: usize = std::mem::size_of::<$t>();
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("callers pass BYTES bytes"))
            }
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            fn zero() -> Self {
                $zero
            }
        }
    )*};
}

element! {
    f32 => "f32", 0.0;
    f64 => "f64", 0.0;
    f16 => "f16", f16::ZERO;
    bf16 => "bf16", bf16::ZERO;
    i8 => "i8", 0;
    i16 => "i16", 0;
    i32 => "i32", 0;
    u8 => "u8", 0;
    u16 => "u16", 0;
    u32 => "u32", 0;
}

// 64-bit integers have no lossless `f64::from`; summaries and comparisons accept the rounding.
macro_rules! element_64 {
    ($($t:ty => $name:literal;)*) => {$(
        impl Element for $t {
            const NAME: &'static str = $name;
            const BYTES: usize = 8;
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("callers pass BYTES bytes"))
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn zero() -> Self {
                0
            }
        }
    )*};
}

element_64! {
    i64 => "i64";
    u64 => "u64";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Element>(v: T) {
        let mut b = vec![0; T::BYTES];
        v.write_le(&mut b);
        assert_eq!(T::read_le(&b), v, "{}", T::NAME);
    }

    #[test]
    fn every_element_type_round_trips() {
        round_trip(1.5f32);
        round_trip(-2.25f64);
        round_trip(f16::from_f32(0.5));
        round_trip(bf16::from_f32(-3.0));
        round_trip(-7i8);
        round_trip(-300i16);
        round_trip(-70000i32);
        round_trip(-(1i64 << 40));
        round_trip(200u8);
        round_trip(60000u16);
        round_trip(4_000_000_000u32);
        round_trip(1u64 << 60);
        assert_eq!((f16::BYTES, bf16::BYTES, u64::BYTES), (2, 2, 8));
    }
}
