//! A generator of traces shaped like PyTorch profiler (Kineto) output, for
//! the import benchmark (`benches/profiler_import.rs`) and the big-file
//! measurement (`examples/big_trace.rs`); shared by `#[path]` so there is
//! one generator.
//!
//! Each training step is what Kineto writes for a small model: a Python
//! frame and a `ProfilerStep#N` span; per operator an `aten::` `cpu_op`
//! with shapes, its `cudaLaunchKernel` (`cuda_runtime`), the kernel on a
//! GPU stream with Kineto's arguments, and the `ac2g` flow written `f`
//! before `s`; every tenth operator a host-to-device copy. Times are
//! epoch microseconds with three decimals; the metadata (`process_labels`
//! "GPU 0", thread names) and `deviceProperties` are Kineto's.

use std::io::{self, Write};

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

const KERNELS: [&str; 4] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>, at::detail::Array<char*, 2>)",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_trt",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)",
];

const OPS: [&str; 4] = [
    "aten::add_",
    "aten::cudnn_batch_norm",
    "aten::cudnn_convolution",
    "aten::max_pool2d_with_indices",
];

/// Writes a Kineto-shaped trace of about `target_bytes` bytes to `out`
/// (rank `rank` in its `distributedInfo`); returns (bytes, events).
pub fn write_kineto(out: impl Write, target_bytes: u64, rank: u32) -> io::Result<(u64, u64)> {
    let mut w = Counting {
        inner: io::BufWriter::with_capacity(1 << 20, out),
        bytes: 0,
    };
    let pid = 4242 + rank;
    let tid = pid;
    let base: u64 = 1_695_835_545_000_000; // epoch us
    write!(
        w,
        "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n    {{\"id\": 0, \"name\": \"NVIDIA A100-SXM4-40GB\", \"totalGlobalMem\": 42314694656, \"computeMajor\": 8, \"computeMinor\": 0, \"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048, \"regsPerBlock\": 65536, \"regsPerMultiprocessor\": 65536, \"warpSize\": 32, \"sharedMemPerBlock\": 49152, \"sharedMemPerMultiprocessor\": 167936, \"numSms\": 108, \"sharedMemPerBlockOptin\": 166912}}\n  ],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": 8}},\n  \"traceEvents\": [\n"
    )?;
    let mut events = 0u64;
    for (p, name, args) in [
        (pid, "process_name", "{\"name\": \"python3.10\"}".to_owned()),
        (pid, "process_labels", "{\"labels\": \"CPU\"}".to_owned()),
        (0, "process_name", "{\"name\": \"python3.10\"}".to_owned()),
        (0, "process_labels", "{\"labels\": \"GPU 0\"}".to_owned()),
        (
            0,
            "process_sort_index",
            "{\"sort_index\": 5000000}".to_owned(),
        ),
    ] {
        writeln!(
            w,
            "  {{\"name\": \"{name}\", \"ph\": \"M\", \"ts\": {base}.000, \"pid\": {p}, \"tid\": 0, \"args\": {args}}},"
        )?;
        events += 1;
    }
    for (p, t, name) in [
        (pid, tid, format!("thread {tid} (python3.10)")),
        (0, 7, "stream 7 ".to_owned()),
        (0, 20, "stream 20 ".to_owned()),
    ] {
        writeln!(
            w,
            "  {{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": {base}.000, \"pid\": {p}, \"tid\": {t}, \"args\": {{\"name\": \"{name}\"}}}},"
        )?;
        events += 1;
    }
    let mut ts = base * 1000; // ns
    let mut correlation = 1u64;
    let mut external = 1u64;
    let mut step = 0u64;
    let us = |ns: u64| format!("{}.{:03}", ns / 1000, ns % 1000);
    while w.bytes < target_bytes {
        let ops = 50u64;
        let step_dur = ops * 40_000 + 20_000;
        writeln!(
            w,
            "  {{\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"train.py(42): train_step\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {{\"Python parent id\": 1, \"Python id\": {step}, \"Ev Idx\": {events}}}}},",
            us(ts),
            us(step_dur + 2_000)
        )?;
        writeln!(
            w,
            "  {{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#{step}\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"Record function id\": 0, \"Ev Idx\": {events}}}}},",
            us(ts + 1_000),
            us(step_dur)
        )?;
        events += 2;
        external += 1;
        let mut t = ts + 2_000;
        for op in 0..ops {
            let k = (op % 4) as usize;
            writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{}\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"Record function id\": 0, \"Ev Idx\": {events}, \"Input Dims\": [[32, 64, 56, 56], [64], [64]], \"Input type\": [\"float\", \"float\", \"float\"]}}}},",
                OPS[k],
                us(t),
                us(30_000)
            )?;
            writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"cbid\": 211, \"correlation\": {correlation}}}}},",
                us(t + 5_000),
                us(8_000)
            )?;
            let kt = t + 20_000;
            writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": 0, \"tid\": 7, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {correlation}, \"registers per thread\": 32, \"shared memory\": 0, \"blocks per SM\": 2.370370, \"warps per SM\": 75.851852, \"grid\": [256, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 100}}}},",
                KERNELS[k],
                us(kt),
                us(25_000)
            )?;
            writeln!(
                w,
                "  {{\"ph\": \"f\", \"id\": {correlation}, \"pid\": 0, \"tid\": 7, \"ts\": {}, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}},",
                us(kt)
            )?;
            writeln!(
                w,
                "  {{\"ph\": \"s\", \"id\": {correlation}, \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"cat\": \"ac2g\", \"name\": \"ac2g\"}},",
                us(t + 5_000)
            )?;
            events += 5;
            correlation += 1;
            if op % 10 == 0 {
                writeln!(
                    w,
                    "  {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaMemcpyAsync\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"cbid\": 41, \"correlation\": {correlation}}}}},",
                    us(t + 14_000),
                    us(4_000)
                )?;
                writeln!(
                    w,
                    "  {{\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoD (Pageable -> Device)\", \"pid\": 0, \"tid\": 20, \"ts\": {}, \"dur\": {}, \"args\": {{\"External id\": {external}, \"device\": 0, \"context\": 1, \"stream\": 20, \"correlation\": {correlation}, \"bytes\": 1048576, \"memory bandwidth (GB/s)\": 12.5}}}},",
                    us(t + 16_000),
                    us(3_000)
                )?;
                events += 2;
                correlation += 1;
            }
            external += 1;
            t += 40_000;
        }
        ts += step_dur + 10_000;
        step += 1;
    }
    // Kineto ends with the profiler's own span.
    writeln!(
        w,
        "  {{\"ph\": \"X\", \"cat\": \"Trace\", \"name\": \"PyTorch Profiler (0)\", \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\", \"ts\": {}, \"dur\": {}, \"args\": {{\"Op count\": 0}}}}",
        us(base * 1000),
        us(ts - base * 1000)
    )?;
    events += 1;
    write!(
        w,
        "  ],\n  \"traceName\": \"rank{rank}.pt.trace.json\",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": 1695835545000000000\n}}\n"
    )?;
    w.flush()?;
    Ok((w.bytes, events))
}
