//! Tensors through DLPack (feature `dlpack`): to and from `ndarray`
//! through `dlpark`, with no copy where DLPack allows (the CPU export, and
//! both ways on CUDA).

use dlpark::SafeManagedTensorVersioned;
use dlpark::prelude::TensorView;
use keel::{DType, Device, DeviceType, Tensor};
use ndarray::{Array2, ArrayViewD};

#[test]
fn a_cpu_tensor_is_exported_in_place() {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::cpu())
        .expect("tensor");
    let dl = t.to_dlpack().expect("export");
    assert_eq!(dl.shape(), [2, 3]);
    assert_eq!(
        dl.data_ptr().cast::<u8>(),
        keel::interop::cpu::host_pointer(t.buffer()).expect("pointer"),
        "no copy"
    );
    let view = ArrayViewD::<f32>::try_from(&dl).expect("an ndarray view");
    assert_eq!(view.shape(), [2, 3]);
    assert_eq!(view[[1, 2]], 6.0);
    // Keel's write shows through the DLPack tensor, which keeps the
    // memory alive after Keel's last handle.
    let s = keel::default_stream(Device::cpu()).expect("stream");
    t.buffer().write(&s, 4, &[20.0f32]).expect("write");
    s.synchronize().expect("sync");
    drop(t);
    let view = ArrayViewD::<f32>::try_from(&dl).expect("an ndarray view");
    assert_eq!(
        view.iter().copied().collect::<Vec<_>>(),
        [1.0, 20.0, 3.0, 4.0, 5.0, 6.0]
    );
}

#[test]
fn ndarray_arrays_come_in_and_bad_ones_are_clear_errors() {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as i32);
    let dl = SafeManagedTensorVersioned::new(a.clone()).expect("dlpack");
    let t = Tensor::from_dlpack(dl).expect("import");
    assert_eq!(t.shape(), [3, 4]);
    assert_eq!(t.dtype(), DType::I32);
    assert_eq!(t.device().device_type(), DeviceType::Cpu);
    assert_eq!(
        t.to_vec::<i32>().expect("read"),
        a.iter().copied().collect::<Vec<_>>()
    );

    // A transposed view is strided: refused, naming its strides.
    let transposed = a.t().to_owned();
    let strided = a.clone().reversed_axes();
    assert_eq!(strided, transposed);
    let err = Tensor::from_dlpack(SafeManagedTensorVersioned::new(strided).expect("dlpack"))
        .expect_err("strided");
    assert!(
        err.to_string()
            .contains("expected a contiguous row-major layout"),
        "{err}"
    );
    assert!(err.to_string().contains("strides [1, 4]"), "{err}");

    let f64s = Array2::<f64>::zeros((2, 2));
    let err = Tensor::from_dlpack(SafeManagedTensorVersioned::new(f64s).expect("dlpack"))
        .expect_err("f64");
    assert!(err.to_string().contains("found Float of 64 bits"), "{err}");

    // An empty array is an empty tensor.
    let empty = Array2::<f32>::zeros((0, 5));
    let t = Tensor::from_dlpack(SafeManagedTensorVersioned::new(empty).expect("dlpack"))
        .expect("empty");
    assert_eq!((t.shape(), t.numel()), (&[0usize, 5][..], 0));
}

#[test]
fn gpu_apis_without_addresses_are_refused_and_cuda_goes_both_ways() {
    for ty in [DeviceType::Vulkan, DeviceType::Wgpu] {
        let Some(d) = keel::devices(ty).into_iter().next() else {
            continue;
        };
        let t = Tensor::zeros(&[4], DType::F32, d).expect("tensor");
        let Err(err) = t.to_dlpack() else {
            panic!("{d}: exported without an address");
        };
        assert!(err.to_string().contains("copy it to cpu first"), "{err}");
    }
    let Some(d) = keel::devices(DeviceType::Cuda).into_iter().next() else {
        println!("skipped the CUDA round trip: no CUDA device");
        return;
    };
    let t = Tensor::from_slice(&[1.5f32, 2.5, 3.5], &[3], d).expect("cuda tensor");
    let dl = t.to_dlpack().expect("export");
    let ptr = dl.data_ptr() as u64;
    assert_eq!(
        ptr,
        keel::interop::cuda::buffer(t.buffer()).expect("pointer")
    );
    let back = Tensor::from_dlpack(dl).expect("import");
    assert_eq!(
        keel::interop::cuda::buffer(back.buffer()).expect("pointer"),
        ptr,
        "no copy"
    );
    drop(t);
    assert_eq!(back.to_vec::<f32>().expect("read"), [1.5, 2.5, 3.5]);
}
