//! [`Tensor`]: a minimal tensor (not a framework): a shared [`Buffer`], a
//! [`DType`], a shape, contiguous and row-major, on one device.
//!
//! Tensors are what the operator dispatcher ([`crate::dispatch`]) takes
//! and returns. Cloning a tensor shares its buffer (like PyTorch's
//! `Tensor` handles); in-place operators (`fill_`, `copy_`) write the
//! shared buffer, so every clone sees the new values.
//!
//! Constructors build the data on the host and upload it on the current
//! stream of the target device; [`Tensor::to_vec`] reads on the current
//! stream of the tensor's device (waiting for it).
//!
//! ```
//! # fn main() -> keel::Result<()> {
//! use keel::{DType, Device, Tensor};
//! let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::cpu())?;
//! assert_eq!(t.shape(), &[2, 2]);
//! assert_eq!(t.dtype(), DType::F32);
//! assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! assert!(t.to_vec::<i32>().is_err()); // typed: checked against the dtype
//! # Ok(()) }
//! ```

mod dtype;

use std::fmt;

use std::sync::Arc;

pub use dtype::{DType, Element};
use half::{bf16, f16};

use crate::Buffer;
use crate::api::{current_stream, resolve};
use crate::core::{Device, Stream};
use crate::{Error, Result};

/// Dimensions a shape keeps inline (no allocation).
const INLINE_DIMS: usize = 4;

/// A shape: up to [`INLINE_DIMS`] dimensions inline (the unused ones 0),
/// more on the heap (creating a tensor is on every operator's path). One
/// shape has one representation, so the derived equality is the dims'.
#[derive(Clone, PartialEq, Eq)]
enum Shape {
    Inline([usize; INLINE_DIMS], u8),
    Heap(Box<[usize]>),
}

impl Shape {
    fn new(dims: &[usize]) -> Shape {
        if dims.len() <= INLINE_DIMS {
            let mut a = [0; INLINE_DIMS];
            a[..dims.len()].copy_from_slice(dims);
            Shape::Inline(a, dims.len() as u8)
        } else {
            Shape::Heap(dims.into())
        }
    }

    fn dims(&self) -> &[usize] {
        match self {
            Shape::Inline(a, n) => &a[..usize::from(*n)],
            Shape::Heap(b) => b,
        }
    }
}

// Note [One word per tensor]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A tensor is one `Arc` of a `TensorImpl` that holds the buffer itself
// (c10's layout: a `Tensor` is a pointer to its `TensorImpl`). An
// operator's output moves through several returns (the output made by
// `empty_like`, the kernel's outcome, the dispatcher's `Outputs`, the
// caller's `Result<Tensor>`), and a one-word tensor makes each of them a
// register move; a tensor is still one allocation. Buffers are not shared
// between tensors of different shapes (there are no views), so the buffer
// needs no reference count of its own.

/// A contiguous, row-major array of one dtype on one device: a shared
/// [`Buffer`], a [`DType`] and a shape. Clones share the buffer, so an
/// in-place operator's writes show in every clone. Constructors upload on
/// the current stream of the target device; [`to_vec`](Tensor::to_vec)
/// reads on the current stream of the tensor's device.
#[derive(Clone)]
pub struct Tensor(Arc<TensorImpl>);

/// What a [`Tensor`] handle points to (c10's `TensorImpl`): the buffer
/// itself, not a pointer to one, so making a tensor is one allocation,
/// and a tensor is one pointer wide: an operator's `Result<Tensor>` and its kernel's
/// outputs move as one word (Note [One word per tensor]).
struct TensorImpl {
    buffer: Buffer,
    dtype: DType,
    shape: Shape,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({:?}, {}, {})",
            self.shape(),
            self.imp().dtype,
            self.imp().buffer.device()
        )
    }
}

/// The bytes a contiguous tensor of `shape` and `dtype` holds.
fn bytes_of(shape: &[usize], dtype: DType) -> Result<usize> {
    numel_of(shape)?
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::invalid(format!("tensor shape {shape:?}: too many bytes")))
}

/// Elements in `shape`, or an error when the product overflows.
fn numel_of(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(format!(
                "tensor shape {shape:?}: expected a number of elements that fits in usize, found an overflow"
            ))
        })
}

/// `count` copies of `value` (as `dtype`), as little-endian bytes.
fn filled_bytes(dtype: DType, count: usize, value: f64) -> Vec<u8> {
    fn rep<T: Element>(count: usize, value: f64) -> Vec<u8> {
        bytemuck::cast_slice(&vec![<T as Element>::from_f64(value); count]).to_vec()
    }
    match dtype {
        DType::F32 => rep::<f32>(count, value),
        DType::F16 => rep::<f16>(count, value),
        DType::BF16 => rep::<bf16>(count, value),
        DType::I32 => rep::<i32>(count, value),
        DType::U32 => rep::<u32>(count, value),
        DType::U8 => rep::<u8>(count, value),
    }
}

fn arange_bytes(dtype: DType, n: usize) -> Vec<u8> {
    fn seq<T: Element>(n: usize) -> Vec<u8> {
        let v: Vec<T> = (0..n).map(|i| <T as Element>::from_f64(i as f64)).collect();
        bytemuck::cast_slice(&v).to_vec()
    }
    match dtype {
        DType::F32 => seq::<f32>(n),
        DType::F16 => seq::<f16>(n),
        DType::BF16 => seq::<bf16>(n),
        DType::I32 => seq::<i32>(n),
        DType::U32 => seq::<u32>(n),
        DType::U8 => seq::<u8>(n),
    }
}

impl Tensor {
    /// A tensor of `shape` and `dtype` over `buffer`, which must hold
    /// exactly `numel * dtype.size()` bytes. For kernels that made their
    /// output buffer themselves.
    pub fn from_buffer(buffer: Buffer, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let bytes = numel_of(shape)?.checked_mul(dtype.size());
        if bytes != Some(buffer.len()) {
            return Err(Error::invalid(format!(
                "tensor of shape {shape:?} and dtype {dtype}: expected a buffer of {} bytes, found {} bytes",
                bytes.map_or_else(|| "too many".to_owned(), |b| b.to_string()),
                buffer.len()
            )));
        }
        Ok(Tensor::new(buffer, dtype, Shape::new(shape)))
    }

    fn new(buffer: Buffer, dtype: DType, shape: Shape) -> Tensor {
        Tensor(Arc::new(TensorImpl {
            buffer,
            dtype,
            shape,
        }))
    }

    fn imp(&self) -> &TensorImpl {
        &self.0
    }

    /// An uninitialised tensor on `device` (like `torch.empty`: its bytes
    /// are whatever its block last held), for kernels about to write every
    /// element.
    pub fn empty(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let bytes = bytes_of(shape, dtype)?;
        Tensor::over(Buffer::empty(device, bytes)?, dtype, shape)
    }

    /// [`Tensor::empty`] for use on `stream`: its block belongs to `stream`
    /// (reused at once by later work there) rather than to the device's
    /// current stream, and no current-stream lookup is made.
    pub fn empty_on(shape: &[usize], dtype: DType, stream: &Stream) -> Result<Tensor> {
        let bytes = bytes_of(shape, dtype)?;
        Tensor::over(Buffer::empty_on(stream, bytes)?, dtype, shape)
    }

    /// A new, uninitialised tensor of `like`'s shape and dtype for use on
    /// `stream` (an operator's output): [`Tensor::empty_on`] without
    /// recomputing the size, which `like`'s buffer already has.
    pub(crate) fn empty_like_on(like: &Tensor, stream: &Stream) -> Result<Tensor> {
        let like = like.imp();
        let buffer = Buffer::empty_on(stream, like.buffer.len())?;
        Ok(Tensor::new(buffer, like.dtype, like.shape.clone()))
    }

    fn over(buffer: Buffer, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        Ok(Tensor::new(buffer, dtype, Shape::new(shape)))
    }

    fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize], device: Device) -> Result<Tensor> {
        let device = resolve(device)?;
        let stream = current_stream(device)?;
        let t = Tensor::empty(shape, dtype, device)?;
        if !bytes.is_empty() {
            t.imp().buffer.write(&stream, 0, bytes)?;
        }
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype, device)
    }

    /// A tensor of ones.
    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype, device)
    }

    /// A tensor with every element `value` (converted to `dtype` as
    /// [`Element::from_f64`] does).
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let n = numel_of(shape)?;
        Tensor::from_bytes(&filled_bytes(dtype, n, value), dtype, shape, device)
    }

    /// `0, 1, ..., n-1` as a 1-D tensor.
    pub fn arange(n: usize, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::from_bytes(&arange_bytes(dtype, n), dtype, &[n], device)
    }

    /// A tensor of `shape` holding `data` (row-major) on `device`.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        let n = numel_of(shape)?;
        if n != data.len() {
            return Err(Error::invalid(format!(
                "from_slice: expected {n} elements for shape {shape:?}, found {}",
                data.len()
            )));
        }
        Tensor::from_bytes(bytemuck::cast_slice(data), T::DTYPE, shape, device)
    }

    /// A copy on `device`, enqueued on `stream` (which must be on
    /// `device`); see [`Buffer::to`].
    pub fn to(&self, device: Device, stream: &Stream) -> Result<Tensor> {
        let buffer = self.imp().buffer.to(device, stream)?;
        Ok(Tensor::new(
            buffer,
            self.imp().dtype,
            self.imp().shape.clone(),
        ))
    }

    /// The elements, read on the current stream of the tensor's device.
    /// `T` must be the tensor's dtype (`f32` for [`DType::F32`], ...).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.imp().dtype {
            return Err(Error::invalid(format!(
                "to_vec: expected the element type of the tensor's dtype {}, found {}",
                self.imp().dtype,
                T::DTYPE
            )));
        }
        let bytes = self.to_bytes()?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The raw little-endian bytes, read on the current stream of the
    /// tensor's device.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.imp().buffer.is_empty() {
            return Ok(Vec::new());
        }
        self.imp().buffer.read(&current_stream(self.device())?)
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> Device {
        self.imp().buffer.device()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.imp().dtype
    }

    /// The shape (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        self.imp().shape.dims()
    }

    /// Whether `other` has the same shape (cheaper than comparing
    /// [`shape`](Tensor::shape)s).
    #[inline]
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.imp().shape == other.imp().shape
    }

    /// Elements (the product of the shape; 1 for a scalar).
    pub fn numel(&self) -> usize {
        self.imp().buffer.len() / self.imp().dtype.size()
    }

    /// The buffer holding the elements (shared by clones).
    pub fn buffer(&self) -> &Buffer {
        &self.imp().buffer
    }
}
