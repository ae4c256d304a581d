//! Tensors in and out through DLPack (feature `dlpack`), the exchange
//! format of PyTorch, JAX, CuPy, NumPy and Rust's array crates, through
//! the `dlpark` crate's managed tensors (DLPack 1.x, versioned).
//!
//! | Keel device | [`Tensor::to_dlpack`] | [`Tensor::from_dlpack`] |
//! |---|---|---|
//! | `cpu` | no copy: the tensor's host memory | a copy into Keel's memory (Keel's host blocks are its allocator's) |
//! | `cuda:N` | no copy: the device pointer | no copy: the producer's memory, kept alive by its DLPack tensor until Keel's buffer drops |
//! | Vulkan, wgpu, others | an error: DLPack names memory by an address, and these APIs have none to give | an error for such a DLPack device |
//!
//! Exporting waits for the tensor's device first (`keel::synchronize`),
//! so the consumer sees finished data; the exported tensor aliases Keel's
//! memory, which the tensor keeps alive until the consumer drops the
//! DLPack tensor. Only contiguous, row-major DLPack tensors are imported
//! (strides absent, or the row-major ones); others are an error naming
//! their strides. Keel's dtypes map to DLPack's one to one (f32, f16,
//! bf16, i32, u32, u8); another DLPack dtype is an error naming it.

use std::ffi::c_void;

pub use dlpark;
use dlpark::SafeManagedTensorVersioned;
use dlpark::ffi::{DataType, DeviceType as DlDevice};
use dlpark::prelude::TensorView;
use dlpark::traits::{RowMajorCompactLayout, TensorLike};

use crate::{Buffer, DType, Device, DeviceType, Error, Result, Tensor};

/// DLPack's name of a Keel dtype.
fn data_type(dtype: DType) -> DataType {
    match dtype {
        DType::F32 => DataType::F32,
        DType::F16 => DataType::F16,
        DType::BF16 => DataType::BF16,
        DType::I32 => DataType::I32,
        DType::U32 => DataType::U32,
        DType::U8 => DataType::U8,
    }
}

/// The Keel dtype of a DLPack one.
fn dtype_of(t: &DataType) -> Result<DType> {
    DType::ALL
        .into_iter()
        .find(|d| {
            let dl = data_type(*d);
            dl.code == t.code && dl.bits == t.bits && dl.lanes == t.lanes
        })
        .ok_or_else(|| {
            Error::invalid(format!(
                "a DLPack tensor: expected f32, f16, bf16, i32, u32 or u8, found {:?} of {} bits x {} lanes",
                t.code, t.bits, t.lanes
            ))
        })
}

/// What a DLPack tensor exported by Keel holds: the tensor (so its memory
/// lives as long as the consumer's handle) and where its data is.
struct Exported {
    tensor: Tensor,
    data: *mut c_void,
    device: dlpark::ffi::Device,
}

impl TensorLike<RowMajorCompactLayout> for Exported {
    type Error = Error;

    fn data_ptr(&self) -> *mut c_void {
        self.data
    }

    fn memory_layout(&self) -> RowMajorCompactLayout {
        RowMajorCompactLayout::new(self.tensor.shape().iter().map(|&d| d as i64).collect())
    }

    fn device(&self) -> Result<dlpark::ffi::Device> {
        Ok(self.device)
    }

    fn data_type(&self) -> Result<DataType> {
        Ok(data_type(self.tensor.dtype()))
    }

    fn byte_offset(&self) -> u64 {
        0
    }
}

impl Tensor {
    /// This tensor as a DLPack tensor, with no copy (CPU and CUDA; see the
    /// [module docs](crate::dlpack)). Waits for the tensor's device
    /// first.
    pub fn to_dlpack(&self) -> Result<SafeManagedTensorVersioned> {
        let d = self.device();
        let (data, device) = match d.device_type() {
            DeviceType::Cpu => (
                keel_device::interop::cpu::host_pointer(self.buffer())?.cast(),
                dlpark::ffi::Device::CPU,
            ),
            #[cfg(feature = "cuda")]
            DeviceType::Cuda => (
                keel_device::interop::cuda::buffer(self.buffer())? as *mut c_void,
                dlpark::ffi::Device::cuda(usize::try_from(d.index()).unwrap_or(0)),
            ),
            _ => {
                return Err(Error::invalid(format!(
                    "DLPack export: expected a tensor on the CPU or a CUDA device, found one on {d} (DLPack names memory by address; copy it to cpu first)"
                )));
            }
        };
        crate::synchronize(d)?;
        SafeManagedTensorVersioned::new(Exported {
            tensor: self.clone(),
            data,
            device,
        })
    }

    /// A DLPack tensor as a Keel tensor: CUDA memory without a copy, host
    /// memory copied (see the [module docs](crate::dlpack)).
    pub fn from_dlpack(t: SafeManagedTensorVersioned) -> Result<Tensor> {
        let dtype = dtype_of(t.data_type())?;
        let shape: Vec<usize> = t
            .shape()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                Error::invalid(format!(
                    "a DLPack tensor: expected sizes >= 0, found shape {:?}",
                    t.shape()
                ))
            })?;
        if let Some(strides) = t.strides()
            && !row_major(&shape, strides)
        {
            return Err(Error::invalid(format!(
                "a DLPack tensor: expected a contiguous row-major layout, found shape {shape:?} with strides {strides:?}"
            )));
        }
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a DLPack tensor: shape {shape:?} holds too many bytes"
                ))
            })?;
        let dl = t.dl_tensor();
        let device = dl.device;
        match device.device_type {
            DlDevice::Cpu | DlDevice::CudaHost => {
                // The producer's memory is its own; Keel's host blocks are
                // its allocator's: one copy.
                let data = if bytes == 0 {
                    &[][..]
                } else {
                    t.as_slice_untyped()
                };
                let cpu = Device::cpu();
                let stream = crate::default_stream(cpu)?;
                Tensor::from_buffer(Buffer::from_slice(&stream, data)?, dtype, &shape)
            }
            #[cfg(feature = "cuda")]
            DlDevice::Cuda => {
                let index = crate::DeviceIndex::try_from(device.device_id).map_err(|_| {
                    Error::invalid(format!(
                        "a DLPack tensor: expected a CUDA device index, found {}",
                        device.device_id
                    ))
                })?;
                let keel = Device::new(DeviceType::Cuda, index)?;
                let ptr = (dl.data as u64).wrapping_add(dl.byte_offset);
                // SAFETY: the DLPack tensor describes `bytes` bytes of
                // device memory at `ptr` on this device, which stay
                // allocated while the tensor (handed to Keel as the
                // buffer's owner) lives.
                let buffer = unsafe {
                    keel_device::interop::cuda::adopt_owned_buffer(
                        keel,
                        ptr,
                        bytes,
                        Some(Box::new(Owner(t))),
                    )
                }?;
                Tensor::from_buffer(buffer, dtype, &shape)
            }
            other => Err(Error::invalid(format!(
                "a DLPack tensor: expected one on the CPU or a CUDA device, found one on {other:?} (device {})",
                device.device_id
            ))),
        }
    }
}

/// Whether `strides` (in elements) are the row-major strides of `shape`
/// (dimensions of size 1 may have any stride, as DLPack allows, and an
/// empty tensor any strides at all).
fn row_major(shape: &[usize], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut want = 1i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != want {
            return false;
        }
        want = want.saturating_mul(d as i64);
    }
    true
}

/// A DLPack tensor owning memory Keel adopted: dropped (calling its
/// deleter) when Keel's last handle to the memory drops.
#[cfg(feature = "cuda")]
struct Owner(#[allow(dead_code, reason = "held for its deleter")] SafeManagedTensorVersioned);

// SAFETY: DLPack's deleter may be called from any thread (the protocol
// hands tensors across frameworks and threads; PyTorch's takes the GIL),
// and Keel only holds the tensor, never reads through it.
#[cfg(feature = "cuda")]
unsafe impl Send for Owner {}
// SAFETY: as above; shared references give no access to the tensor.
#[cfg(feature = "cuda")]
unsafe impl Sync for Owner {}

#[cfg(test)]
mod tests {
    use super::row_major;

    #[test]
    fn row_major_strides() {
        assert!(row_major(&[2, 3], &[3, 1]));
        assert!(!row_major(&[2, 3], &[1, 2]));
        assert!(row_major(&[1, 3], &[99, 1]));
        assert!(row_major(&[], &[]));
        assert!(row_major(&[0, 5], &[0, 0]));
    }
}
