//! [`DType`]: the element types a [`Tensor`](super::Tensor) holds, and
//! [`Element`], the host types that stand for them.

use std::fmt;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::autocast::AutocastDtype;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float (PyTorch's `torch.float32`).
    F32,
    /// 16-bit IEEE float (`torch.float16`), [`half::f16`] on the host.
    F16,
    /// bfloat16 (`torch.bfloat16`), [`half::bf16`] on the host.
    BF16,
    /// 32-bit signed integer (`torch.int32`).
    I32,
    /// 32-bit unsigned integer (`torch.uint32`).
    U32,
    /// 8-bit unsigned integer (`torch.uint8`).
    U8,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::U8,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Keel's short name (`f32`, `bf16`, ...), as Rust spells the type.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::U8 => "u8",
        }
    }

    /// The C type name PyTorch's profiler writes in "Input type" (`float`,
    /// `c10::Half`, ...).
    pub const fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "c10::Half",
            DType::BF16 => "c10::BFloat16",
            DType::I32 => "int",
            DType::U32 => "unsigned int",
            DType::U8 => "unsigned char",
        }
    }
}

impl DType {
    /// The autocast dtype this is (`f32`, `f16`, `bf16`); `None` for the
    /// integer dtypes, which autocast leaves alone.
    pub const fn autocast(self) -> Option<AutocastDtype> {
        match self {
            DType::F32 => Some(AutocastDtype::F32),
            DType::F16 => Some(AutocastDtype::F16),
            DType::BF16 => Some(AutocastDtype::Bf16),
            _ => None,
        }
    }
}

impl From<AutocastDtype> for DType {
    /// The tensor dtype of an autocast dtype.
    fn from(d: AutocastDtype) -> DType {
        match d {
            AutocastDtype::F32 => DType::F32,
            AutocastDtype::F16 => DType::F16,
            AutocastDtype::Bf16 => DType::BF16,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A host type standing for a [`DType`] (`f32`, [`half::f16`],
/// [`half::bf16`], `i32`, `u32`, `u8`): what [`Tensor::from_slice`]
/// takes and [`Tensor::to_vec`] returns. Sealed: Keel's CPU kernels are
/// written for exactly these.
///
/// [`Tensor::from_slice`]: super::Tensor::from_slice
/// [`Tensor::to_vec`]: super::Tensor::to_vec
pub trait Element: Pod + PartialOrd + Send + Sync + fmt::Debug + sealed::Sealed {
    /// The dtype this type stands for.
    const DTYPE: DType;
    /// The value as an `f64` (exact for every type but large `u32`/`i32`
    /// sums, which stay exact too: f64 holds 53 bits).
    fn to_f64(self) -> f64;
    /// The value nearest `v` (floats round, integers truncate toward zero
    /// and saturate, as Rust's `as` does).
    fn from_f64(v: f64) -> Self;
    /// `self + other` (integers wrap, as PyTorch's do).
    fn add(self, other: Self) -> Self;
    /// `self * other` (integers wrap).
    fn mul(self, other: Self) -> Self;
}

macro_rules! float_element {
    ($t:ty, $d:expr, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            #[inline]
            fn to_f64(self) -> f64 {
                $to(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            #[inline]
            fn add(self, other: Self) -> Self {
                Self::from_f64(self.to_f64() + other.to_f64())
            }
            #[inline]
            fn mul(self, other: Self) -> Self {
                Self::from_f64(self.to_f64() * other.to_f64())
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            #[inline]
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline]
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
        }
    };
}

impl sealed::Sealed for f32 {}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn add(self, other: Self) -> Self {
        self + other
    }
    #[inline]
    fn mul(self, other: Self) -> Self {
        self * other
    }
}
float_element!(f16, DType::F16, f16::to_f64, f16::from_f64);
float_element!(bf16, DType::BF16, bf16::to_f64, bf16_from_f64);

/// `v` rounded to bf16, to nearest even. `half`'s `bf16::from_f64` is off
/// by one unit for some values (found by the GPU conversion kernels'
/// tests: -0.90820336 became -0.90625, not -0.91015625), so: to f32
/// rounding to odd (an inexact result keeps a sticky last bit, so the
/// second rounding cannot meet a false tie), then `bf16::from_f32`.
/// (Call it as `<bf16 as Element>::from_f64`: `half`'s inherent method of
/// the same name wins over the trait's in `bf16::from_f64(..)`.)
fn bf16_from_f64(v: f64) -> bf16 {
    let f = v as f32;
    if f.is_finite() && f64::from(f) != v {
        let bits = f.to_bits();
        // The neighbour toward zero, then its last bit set.
        let toward_zero = if f64::from(f).abs() > v.abs() {
            bits - 1
        } else {
            bits
        };
        return bf16::from_f32(f32::from_bits(toward_zero | 1));
    }
    bf16::from_f32(f)
}
int_element!(i32, DType::I32);
int_element!(u32, DType::U32);
int_element!(u8, DType::U8);
