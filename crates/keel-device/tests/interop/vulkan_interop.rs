//! Vulkan: a program that made its own instance and device with ash gives
//! them to Keel (`keel_device::interop::vulkan`), runs Keel's work on
//! them, reads the native handles back, shares its own buffer and
//! semaphore with Keel, and takes its device back; and the conformance
//! suite, unchanged, on an adopted lavapipe device.
//!
//! Teardown order, as a program does it: drop Keel's buffers and pending
//! reads on the device, `release` it (Keel waits for its work and destroys
//! every object it made there), destroy the program's own objects, then
//! the device, then the instance. With the validation layer on, destroying
//! a device that still has Keel's objects would be reported to the
//! program's instance, which these tests check is silent.

use keel_device::backend::registry;
use keel_device::interop::vulkan::ash::vk;
use keel_device::interop::vulkan::{self as keel_vk, BUFFER_USAGE, ash};
use keel_device::testing::conformance::{Config, KernelSource};
use keel_device::testing::vulkan::{ProgramDevice, adopted_device, program_validation_messages};
use keel_device::testing::{child, conformance};
use keel_device::{Buffer, Device, DeviceType, Event, kernels};

const TY: DeviceType = DeviceType::Vulkan;

/// The program's device, or `None` (a skip, printed; a failure where
/// `KEEL_REQUIRE_BACKENDS` names vulkan) where no Vulkan device exists.
fn program_device() -> Option<ProgramDevice> {
    match ProgramDevice::create() {
        Ok(p) => Some(p),
        Err(reason) if conformance::required(TY) => {
            panic!("KEEL_REQUIRE_BACKENDS requires vulkan, but no program device opens: {reason}")
        }
        Err(reason) => {
            eprintln!("skipping: no Vulkan device for the program: {reason}");
            None
        }
    }
}

fn no_validation_errors() {
    let keel = keel_device::backend::vulkan::validation_messages();
    assert!(keel.is_empty(), "{keel:#?}");
    let program = program_validation_messages();
    assert!(
        program.is_empty(),
        "on the program's instance: {program:#?}"
    );
}

/// A buffer of the program's own: `size` bytes of host-visible, coherent
/// memory bound to a `vk::Buffer` with Keel's usage flags, mapped.
struct ProgramBuffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    mapped: *mut u8,
}

impl ProgramBuffer {
    fn new(p: &ProgramDevice, size: u64) -> ProgramBuffer {
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(BUFFER_USAGE)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a plain object creation on the program's live device;
        // destroyed by `destroy`.
        let buffer = unsafe { p.device.create_buffer(&info, None) }.expect("vkCreateBuffer");
        // SAFETY: `buffer` was just created on this device.
        let req = unsafe { p.device.get_buffer_memory_requirements(buffer) };
        // SAFETY: the physical device is the instance's.
        let props = unsafe {
            p.instance
                .get_physical_device_memory_properties(p.physical_device)
        };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_index = (0..props.memory_type_count)
            .find(|&i| {
                req.memory_type_bits & (1 << i) != 0
                    && props.memory_types[i as usize]
                        .property_flags
                        .contains(wanted)
            })
            .expect("a host-visible, coherent memory type");
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index);
        // SAFETY: the type index is one the buffer accepts; freed by
        // `destroy`.
        let memory = unsafe { p.device.allocate_memory(&alloc, None) }.expect("vkAllocateMemory");
        // SAFETY: the memory fits the buffer's requirements and neither is
        // bound yet; the mapping covers the whole allocation, host-visible.
        let mapped = unsafe {
            p.device
                .bind_buffer_memory(buffer, memory, 0)
                .expect("vkBindBufferMemory");
            p.device
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .expect("vkMapMemory")
        };
        ProgramBuffer {
            buffer,
            memory,
            size,
            mapped: mapped.cast(),
        }
    }

    /// The mapped bytes. Only read or written while no device work uses
    /// the buffer (the memory is coherent, so no flush is needed).
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `mapped` points at `size` mapped bytes of this buffer's
        // memory, alive until `destroy`; `&mut self` keeps the host
        // accesses exclusive, and callers synchronise with device work.
        unsafe { std::slice::from_raw_parts_mut(self.mapped, self.size as usize) }
    }

    /// Destroys the buffer and frees its memory.
    ///
    /// # Safety
    ///
    /// No work that uses the buffer is pending, and no Keel buffer wraps
    /// it any more.
    unsafe fn destroy(self, p: &ProgramDevice) {
        // SAFETY: the caller's promise.
        unsafe {
            p.device.unmap_memory(self.memory);
            p.device.destroy_buffer(self.buffer, None);
            p.device.free_memory(self.memory, None);
        }
    }
}

fn floats(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn vector_add(s: &keel_device::Stream, a: &Buffer, b: &Buffer, c: &Buffer, n: u32) {
    let k = kernels::VECTOR_ADD;
    s.launch(&k, k.grid_for(u64::from(n)), &[a, b, c], &n.to_le_bytes())
        .expect("vector_add");
}

/// The whole life of an adopted device: adoption (twice: one Keel
/// device), Keel's work on it (copies, a kernel, timed events, the
/// calibrated clock), the native handles against what the program made, a
/// program buffer read and written through Keel (bounded exactly as a
/// Keel buffer is), Keel waiting for the program's semaphore and the
/// program for Keel's, and the teardown.
#[test]
fn an_adopted_device_runs_keel_work_and_gives_its_handles_back() {
    let Some(p) = program_device() else {
        return;
    };
    let own = keel_device::device_count(TY);
    let d = p.adopt();
    assert_eq!(d.device_type(), TY);
    assert!(
        usize::try_from(d.index()).expect("index") >= own,
        "{d} numbered after Keel's {own} own devices"
    );
    assert_eq!(p.adopt(), d, "adopting the same VkDevice again");
    assert!(keel_device::device_count(TY) > usize::try_from(d.index()).expect("index"));
    keel_device::availability(TY).expect("Vulkan available");
    let props = keel_device::properties(d).expect("properties");
    let adopted = props
        .extra
        .iter()
        .find(|(k, _)| k == "adopted")
        .map(|(_, v)| v.clone())
        .expect("the adopted property");
    assert!(adopted.ends_with("(in use)"), "{adopted}");

    // The native device is the program's.
    let native = keel_vk::native_device(d).expect("native device");
    assert!(native.adopted);
    assert_eq!(native.instance.handle(), p.instance.handle());
    assert_eq!(native.device.handle(), p.device.handle());
    assert_eq!(native.physical_device, p.physical_device);
    assert_eq!(native.queue_family, p.queue_family);
    // SAFETY: queue 0 of the family was created with the device.
    let queue = unsafe { p.device.get_device_queue(p.queue_family, 0) };
    assert_eq!(native.queues, vec![queue]);

    // Keel's work: a round trip, a kernel between timed events.
    let s = keel_device::get_stream_from_pool(d, false).expect("pool stream");
    const N: u32 = 1000;
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..N).map(|i| (2 * i) as f32).collect();
    let a = Buffer::from_slice(&s, &xs).expect("a");
    let b = Buffer::from_slice(&s, &ys).expect("b");
    assert_eq!(a.read_as::<f32>(&s).expect("read a"), xs);
    let c = Buffer::new(d, 4 * N as usize).expect("c");
    let timed = props.timestamps.is_some();
    let mut start = Event::with_flag(TY, keel_device::EventFlag::Timing);
    let mut end = Event::with_flag(TY, keel_device::EventFlag::Timing);
    if timed {
        start.record(&s).expect("record start");
    }
    vector_add(&s, &a, &b, &c, N);
    end.record(&s).expect("record end");
    let sums: Vec<f32> = (0..N).map(|i| (3 * i) as f32).collect();
    assert_eq!(c.read_as::<f32>(&s).expect("read c"), sums);
    assert!(
        end.query().expect("query"),
        "the read waited for the kernel"
    );
    if timed {
        let ms = start.elapsed_time(&end).expect("elapsed time");
        assert!((0.0..10_000.0).contains(&ms), "{ms} ms");
    }
    // The calibrated clock exactly where the program enabled it.
    let clock = registry::timing(TY)
        .expect("timing")
        .sample_clock(d.index())
        .expect("sample the clock");
    assert_eq!(
        clock.is_some(),
        p.enabled.calibrated_timestamps.is_some(),
        "calibrated timestamps enabled: {:?}",
        p.enabled.calibrated_timestamps
    );

    // Native stream, event and buffer; the program waits for Keel.
    let ns = keel_vk::native_stream(&s).expect("native stream");
    assert_eq!(ns.queue, queue);
    let ne = keel_vk::native_event(&end)
        .expect("native event")
        .expect("a recorded event");
    assert_eq!(ne.semaphore, ns.semaphore, "recorded on the stream");
    assert!(0 < ne.value && ne.value <= ns.value, "{ne:?} {ns:?}");
    let semaphores = [ns.semaphore];
    let values = [ns.value];
    let wait = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&values);
    // SAFETY: the semaphore is Keel's stream's, alive while the device is
    // adopted; the program only waits on it.
    unsafe { p.device.wait_semaphores(&wait, 5_000_000_000) }.expect("the program waits for Keel");
    assert!(
        keel_vk::native_event(&Event::new(TY))
            .expect("unrecorded")
            .is_none()
    );
    let nb = keel_vk::native_buffer(&c).expect("native buffer");
    assert!(nb.buffer != vk::Buffer::null());
    assert_eq!((nb.offset, nb.len), (c.offset() as u64, 4 * u64::from(N)));
    assert!(nb.offset + nb.len <= nb.size, "{nb:?}");

    // The program's buffer through Keel: 64 floats of a 512-byte buffer
    // whose other bytes Keel must never touch.
    let mut pb = ProgramBuffer::new(&p, 512);
    pb.bytes().fill(0xAB);
    // SAFETY: `pb.buffer` is a buffer of the adopted device with
    // BUFFER_USAGE, exclusive to its one queue family, memory bound, and
    // destroyed only after the Keel buffer is dropped and its work is done.
    let kb = unsafe { keel_vk::adopt_buffer(d, pb.buffer, 256) }.expect("adopt the buffer");
    assert_eq!((kb.device(), kb.len(), kb.offset()), (d, 256, 0));
    assert_eq!(
        keel_vk::native_buffer(&kb).expect("native"),
        keel_vk::NativeBuffer {
            buffer: pb.buffer,
            offset: 0,
            len: 256,
            size: 256
        }
    );
    let values: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    kb.write(&s, 0, &values).expect("write through Keel");
    assert_eq!(kb.read_as::<f32>(&s).expect("read through Keel"), values);
    assert_eq!(pb.bytes()[..256], floats(&values), "the program sees it");
    assert!(pb.bytes()[256..].iter().all(|&x| x == 0xAB));
    // The program writes, Keel reads (nothing of Keel's in flight).
    pb.bytes()[..8].copy_from_slice(&floats(&[7.0, 8.0]));
    assert_eq!(
        kb.read_as::<f32>(&s).expect("read")[..3],
        [7.0, 8.0, values[2]]
    );
    // A launch over more elements than the buffer holds writes only the
    // buffer's 256 bytes, exactly as on a Keel buffer of that size: the
    // invocations past the end are clamped onto the last element (WGSL's
    // out-of-bounds rule, naga's `Restrict`), which holds whichever of
    // their sums landed last: a race, so any of them.
    let own_c = Buffer::new(d, 256).expect("a Keel buffer of the same size");
    vector_add(&s, &a, &b, &kb, 128);
    vector_add(&s, &a, &b, &own_c, 128);
    for (name, got) in [
        ("the adopted buffer", kb.read_as::<f32>(&s).expect("read")),
        ("Keel's buffer", own_c.read_as::<f32>(&s).expect("read")),
    ] {
        assert_eq!(got.len(), 64, "{name}");
        assert_eq!(got[..63], sums[..63], "{name}");
        assert!(
            sums[63..128].contains(&got[63]),
            "{name}: the last element holds {}, the sum of no invocation clamped onto it",
            got[63]
        );
    }
    assert!(
        pb.bytes()[256..].iter().all(|&x| x == 0xAB),
        "bytes past the adopted range are untouched"
    );
    // Reads past the end: the same error as for Keel's own buffer.
    let past = |b: &Buffer| b.read_async(&s, 250, 8).expect_err("past the end");
    assert_eq!(past(&kb).to_string(), past(&own_c).to_string());
    // Checked: a size past the buffer's memory requirements, a null handle.
    // SAFETY: `pb.buffer` is the device's (the size is checked and refused).
    let e = unsafe { keel_vk::adopt_buffer(d, pb.buffer, 1 << 20) }.expect_err("too large");
    assert!(
        e.to_string()
            .contains("expected a size of at most 512 bytes (the VkBuffer's memory requirements), found 1048576"),
        "{e}"
    );
    // SAFETY: a null handle is refused before any Vulkan call.
    let e = unsafe { keel_vk::adopt_buffer(d, vk::Buffer::null(), 16) }.expect_err("null");
    assert!(
        e.to_string()
            .contains("expected a VkBuffer handle for 16 bytes, found VK_NULL_HANDLE"),
        "{e}"
    );

    // Keel waits for the program: a write queued behind the program's
    // timeline semaphore runs only once the program signals it.
    let mut timeline = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut timeline);
    // SAFETY: a plain object creation on the live device; destroyed below,
    // after the wait completed.
    let program_sem = unsafe { p.device.create_semaphore(&info, None) }.expect("semaphore");
    // SAFETY: a timeline semaphore of the stream's device, alive until the
    // work that waits for it completed; the program signals value 1 below.
    unsafe { keel_vk::wait_semaphore(&s, program_sem, 1) }.expect("wait for the program");
    kb.write(&s, 0, &[42.0f32])
        .expect("write queued behind the wait");
    let mut written = Event::new(TY);
    written.record(&s).expect("record");
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !written.query().expect("query"),
        "Keel's write ran before the program signalled"
    );
    let signal = vk::SemaphoreSignalInfo::default()
        .semaphore(program_sem)
        .value(1);
    // SAFETY: the program's own semaphore, signalled from the host once.
    unsafe { p.device.signal_semaphore(&signal) }.expect("signal");
    written
        .synchronize()
        .expect("the write ran after the signal");
    // Read through Keel first: its readback's barrier makes the device's
    // writes visible to the host, the program's mapping included.
    assert_eq!(kb.read_as::<f32>(&s).expect("read")[0], 42.0);
    assert_eq!(pb.bytes()[..4], 42.0f32.to_le_bytes());

    // The program uses Keel's queue under Keel's lock; handing out handles
    // meanwhile takes no lock (it would wait for the closure forever).
    keel_vk::with_queue(d, 0, |q| {
        assert_eq!(keel_vk::native_stream(&s).expect("native").queue, q);
        assert_eq!(keel_vk::native_device(d).expect("native").queues, [q]);
        // SAFETY: the queue is held by `with_queue`; waiting for it to go
        // idle submits nothing.
        unsafe { p.device.queue_wait_idle(q) }
    })
    .expect("Keel's queue")
    .expect("vkQueueWaitIdle");
    let e = keel_vk::with_queue(d, 1, |_| ()).expect_err("one queue");
    assert!(
        e.to_string().contains(&format!(
            "expected a queue index below 1 (Keel's queues on {d}), found 1"
        )),
        "{e}"
    );

    // Teardown: a live Keel buffer keeps the device from being released
    // (its 4,000 bytes are a block of 4,096: blocks are multiples of 512).
    drop((a, b, own_c, kb));
    s.synchronize().expect("sync");
    // SAFETY: no other thread uses the device (this test is its only user).
    let e = unsafe { keel_vk::release(d) }.expect_err("c is alive");
    assert!(
        e.to_string().contains(&format!(
            "release {d}: expected every Buffer on it dropped, found 4096 bytes in live buffers"
        )),
        "{e}"
    );
    drop(c);
    // SAFETY: as above; nothing of Keel's on the device is left in use.
    unsafe { keel_vk::release(d) }.expect("release");
    // SAFETY: as above: releasing twice does nothing.
    unsafe { keel_vk::release(d) }.expect("released already");
    let released = |e: keel_device::Error| {
        let text = e.to_string();
        assert!(
            text.contains(&format!("{d} was released")),
            "after release: {text}"
        );
    };
    released(Buffer::new(d, 4).expect_err("no buffers after release"));
    released(s.synchronize().expect_err("no streams after release"));
    released(keel_device::synchronize(d).expect_err("no device work"));
    released(end.query().expect_err("no event queries"));
    released(keel_vk::native_device(d).expect_err("no handles"));
    let props = keel_device::properties(d).expect("properties still read");
    assert!(
        props
            .extra
            .iter()
            .any(|(k, v)| k == "adopted" && v.ends_with("(released)")),
        "{:?}",
        props.extra
    );
    drop((start, end, written));
    // The program's objects, then its device and instance: the validation
    // layer (when on) reports any object Keel left on the device.
    // SAFETY: the write that waited for it completed.
    unsafe { p.device.destroy_semaphore(program_sem, None) };
    // SAFETY: Keel's buffer over it is dropped and its work completed.
    unsafe { pb.destroy(&p) };
    // SAFETY: Keel released the device; the program's objects are gone.
    unsafe { p.destroy() };
    no_validation_errors();
}

/// Bad input to `adopt` is a clear error that creates nothing, and the
/// handle functions refuse what is not Vulkan's.
#[test]
fn bad_adoptions_and_foreign_objects_are_clear_errors() {
    let Some(p) = program_device() else {
        return;
    };
    let adopt = |a: keel_vk::Adoption<'_>| {
        // SAFETY: the program's live handles, which belong together; each
        // adoption here is refused by a check before Keel keeps anything.
        unsafe { keel_vk::adopt(&a) }
            .expect_err("refused")
            .to_string()
    };
    // SAFETY: the physical device is the instance's.
    let families = unsafe {
        p.instance
            .get_physical_device_queue_family_properties(p.physical_device)
    };
    let count = families.len();
    let e = adopt(keel_vk::Adoption {
        queue_family: 7 + count as u32,
        ..p.adoption()
    });
    assert_eq!(
        e,
        format!(
            "expected a queue family index below {count} (the physical device's queue family count), found {}",
            7 + count
        )
    );
    match families
        .iter()
        .position(|f| !f.queue_flags.contains(vk::QueueFlags::COMPUTE))
    {
        Some(i) => {
            let e = adopt(keel_vk::Adoption {
                queue_family: i as u32,
                ..p.adoption()
            });
            assert!(
                e.contains("expected a queue family with compute, found flags"),
                "{e}"
            );
        }
        None => eprintln!("every queue family here has compute: that error is not reached"),
    }
    let queues = families[p.queue_family as usize].queue_count;
    let e = adopt(keel_vk::Adoption {
        queue_index: queues,
        ..p.adoption()
    });
    assert_eq!(
        e,
        format!(
            "expected a queue index below {queues} (queue family {}'s queue count), found {queues}",
            p.queue_family
        )
    );
    let e = adopt(keel_vk::Adoption {
        physical_device: vk::PhysicalDevice::null(),
        ..p.adoption()
    });
    assert!(
        e.contains("expected one of the instance's") && e.contains("physical devices, found 0x0"),
        "{e}"
    );
    let e = adopt(keel_vk::Adoption {
        enabled: keel_vk::Requirements {
            calibrated_timestamps: Some(ash::khr::swapchain::NAME),
            ..p.enabled
        },
        ..p.adoption()
    });
    assert!(
        e.contains("expected calibrated_timestamps to name VK_KHR_calibrated_timestamps or VK_EXT_calibrated_timestamps, found VK_KHR_swapchain"),
        "{e}"
    );
    // Cooperative matrices said enabled on a device that does not offer
    // them (where it offers them, the program enabled them: `p.enabled`
    // is what `requirements` reported).
    if !p.enabled.cooperative_matrix {
        let e = adopt(keel_vk::Adoption {
            enabled: keel_vk::Requirements {
                cooperative_matrix: true,
                ..p.enabled
            },
            ..p.adoption()
        });
        assert!(
            e.contains("expected cooperative_matrix only where the physical device offers VK_KHR_cooperative_matrix"),
            "{e}"
        );
    }
    // Likewise the subgroup width the cooperative-matrix kernel asks for.
    if !p.enabled.subgroup_size_control {
        let e = adopt(keel_vk::Adoption {
            enabled: keel_vk::Requirements {
                subgroup_size_control: true,
                ..p.enabled
            },
            ..p.adoption()
        });
        assert!(
            e.contains("expected subgroup_size_control only with cooperative_matrix"),
            "{e}"
        );
    }
    // Nothing was adopted: the program's device is still its own alone.
    assert!(
        keel_device::devices(TY).into_iter().all(|d| {
            keel_vk::native_device(d).map_or(true, |n| n.device.handle() != p.device.handle())
        }),
        "a refused adoption left a Keel device"
    );

    // Not Vulkan's: other device types, buffers and events.
    let cpu = Device::cpu();
    let e = keel_vk::native_device(cpu).expect_err("cpu");
    assert_eq!(e.to_string(), "expected a Vulkan device, found cpu");
    let cpu_buffer = Buffer::new(cpu, 4).expect("cpu buffer");
    let e = keel_vk::native_buffer(&cpu_buffer).expect_err("cpu buffer");
    assert!(
        e.to_string()
            .contains("expected a buffer on a Vulkan device, found one on cpu:0"),
        "{e}"
    );
    let e = keel_vk::native_event(&Event::new(DeviceType::Cpu)).expect_err("cpu event");
    assert!(
        e.to_string()
            .contains("expected a Vulkan event, found a cpu event"),
        "{e}"
    );
    let cpu_stream = keel_device::current_stream(cpu).expect("cpu stream");
    let e = keel_vk::native_stream(&cpu_stream).expect_err("cpu stream");
    assert!(
        e.to_string()
            .contains("expected a stream of a Vulkan device, found one of cpu:0"),
        "{e}"
    );
    // Keel's own devices are never released.
    if let Some(own) =
        conformance::device(TY).filter(|d| keel_vk::native_device(*d).is_ok_and(|n| !n.adopted))
    {
        // SAFETY: refused before anything is destroyed.
        let e = unsafe { keel_vk::release(own) }.expect_err("Keel's own");
        assert!(e.to_string().contains("which Keel created"), "{e}");
        // Its handles given back to `adopt` name the same Keel device.
        let n = keel_vk::native_device(own).expect("native");
        // SAFETY: Keel's own live handles, which belong together.
        let again = unsafe {
            keel_vk::adopt(&keel_vk::Adoption {
                entry: &n.entry,
                instance: &n.instance,
                physical_device: n.physical_device,
                device: &n.device,
                queue_family: n.queue_family,
                queue_index: 0,
                enabled: keel_vk::Requirements::default(),
            })
        }
        .expect("Keel's own device");
        assert_eq!(again, own);
    }
    // SAFETY: nothing of Keel's was made on the program's device.
    unsafe { p.destroy() };
    no_validation_errors();
}

const PROBE: &str = "probe_an_adopted_device_where_keel_found_none";

/// Where Keel's own instance finds no device, a program's device makes
/// the backend usable: run in a child process whose environment hides the
/// driver from Keel's instance, then shows it to the program's.
#[test]
fn a_device_adopted_where_keel_found_none_makes_vulkan_usable() {
    if conformance::device(TY).is_none() {
        return;
    }
    let stdout = child::probe(
        module_path!(),
        PROBE,
        &[
            ("VK_ICD_FILENAMES", "/nonexistent/keel_no_driver.json"),
            ("VK_DRIVER_FILES", "/nonexistent/keel_no_driver.json"),
        ],
    );
    assert!(stdout.contains("probe ok"), "{stdout}");
}

#[test]
#[ignore = "run in a child process by a_device_adopted_where_keel_found_none_makes_vulkan_usable"]
fn probe_an_adopted_device_where_keel_found_none() {
    assert_eq!(keel_device::device_count(TY), 0);
    let reason = keel_device::availability(TY).expect_err("no driver for Keel");
    eprintln!("Keel's own instance: {reason}");
    for var in ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"] {
        // SAFETY: this probe runs alone in its process (the harness runs
        // one test), and Keel starts no thread that reads the environment.
        unsafe { std::env::remove_var(var) };
    }
    let p = ProgramDevice::create().expect("the program finds the driver");
    let d = p.adopt();
    assert_eq!(d, Device::new(TY, 0).expect("vulkan:0"));
    assert_eq!(keel_device::device_count(TY), 1);
    keel_device::availability(TY).expect("usable now");
    let s = keel_device::current_stream(d).expect("stream");
    let b = Buffer::from_slice(&s, &[1u32, 2, 3]).expect("buffer");
    assert_eq!(b.read_as::<u32>(&s).expect("read"), [1, 2, 3]);
    drop(b);
    // SAFETY: this thread is the device's only user.
    unsafe { keel_vk::release(d) }.expect("release");
    // SAFETY: released; the program made nothing else on it.
    unsafe { p.destroy() };
    no_validation_errors();
    println!("probe ok");
}

/// The suite on a program's lavapipe device, adopted once per process and
/// kept (never released), with every validation error on Keel's instance
/// or the program's failing the test that caused it.
/// The program's own command buffer, with scopes around its commands,
/// submitted on a Keel stream: ordered with Keel's work there (a fill of a
/// Keel buffer is what Keel reads next), and its scopes device spans on
/// the stream's lane, nested inside the submission's span, inside the
/// host range that submitted and waited.
#[test]
fn scopes_on_the_program_command_buffers_are_ordered_device_spans() {
    let Some(p) = program_device() else {
        return;
    };
    let d = p.adopt();
    let s = keel_device::get_stream_from_pool(d, false).expect("stream");
    let n = 1 << 20;
    let target = Buffer::new(d, 4 * n).expect("keel buffer");
    let range = keel_vk::native_buffer(&target).expect("native buffer");
    let device = &p.device;
    // SAFETY: plain object creation on the program's live device.
    let pool = unsafe {
        device.create_command_pool(
            &vk::CommandPoolCreateInfo::default()
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
                .queue_family_index(p.queue_family),
            None,
        )
    }
    .expect("pool");
    // SAFETY: one primary command buffer of that pool.
    let cb = unsafe {
        device.allocate_command_buffers(
            &vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1),
        )
    }
    .expect("command buffer")[0];
    let record = |scopes: &mut keel_vk::Scopes, value: u32| {
        // SAFETY: `cb` is the program's, idle (every earlier submission
        // of it completed), recorded here and submitted by the caller;
        // the fills stay inside the Keel buffer's range.
        unsafe {
            device
                .begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .expect("begin");
            scopes.begin("fills", cb).expect("scope");
            for half in 0..2u64 {
                scopes.begin(format!("half {half}"), cb).expect("scope");
                let size = range.len / 2;
                device.cmd_fill_buffer(cb, range.buffer, range.offset + half * size, size, value);
                scopes.end(cb).expect("end");
            }
            scopes.end(cb).expect("end");
            device.end_command_buffer(cb).expect("end cb");
        }
    };
    // Without a session: ordered, nothing recorded.
    let mut idle = keel_vk::Scopes::new(&s).expect("scopes");
    assert!(!idle.recording());
    record(&mut idle, 7);
    // SAFETY: `cb` is recorded and kept until the stream synchronises.
    unsafe { idle.submit(&[cb]) }.expect("submit");
    assert_eq!(
        target.read_as::<u32>(&s).expect("read")[n - 1],
        7,
        "ordered before Keel's read"
    );

    let _one = crate::session();
    let session = keel_device::profiler::start().expect("session");
    {
        let _frame = keel_device::profiler::range("frame");
        let mut scopes = keel_vk::Scopes::new(&s).expect("scopes");
        record(&mut scopes, 9);
        // SAFETY: as above.
        unsafe { scopes.submit(&[cb]) }.expect("submit");
        s.synchronize().expect("sync");
    }
    // A scope left open is refused before anything is submitted.
    let mut open = keel_vk::Scopes::new(&s).expect("scopes");
    // SAFETY: `cb` is idle; recorded and reset without being submitted.
    unsafe {
        device
            .begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
            .expect("begin");
        open.begin("left open", cb).expect("scope");
        device.end_command_buffer(cb).expect("end cb");
        let err = open.submit(&[cb]).expect_err("open scope");
        assert!(err.to_string().contains("\"left open\" open"), "{err}");
    }
    let trace = session.stop();
    trace.check().expect("well formed");
    // No `trace.dropped == 0`: a session records the whole process, and
    // this binary's other tests run meanwhile (one releases its adopted
    // device, whose pending spans then count as dropped, as they should).
    assert_eq!(target.read_as::<u32>(&s).expect("read")[0], 9);

    let frame = trace
        .spans
        .iter()
        .find(|x| x.name == "frame")
        .expect("host range");
    let name = d.to_string();
    let on_stream = |x: &&keel_device::profiler::Span| {
        matches!(trace.lanes[x.lane as usize].kind,
            keel_device::profiler::LaneKind::Stream { device, stream, .. }
                if trace.devices[device as usize].device == name && stream == s.id())
    };
    let span = |n: &str| {
        trace
            .spans
            .iter()
            .filter(on_stream)
            .find(|x| x.name == n)
            .unwrap_or_else(|| panic!("no device span {n}: {:#?}", trace.spans))
    };
    let (submit, fills, h0, h1) = (
        span("queue submit"),
        span("fills"),
        span("half 0"),
        span("half 1"),
    );
    let end = |x: &keel_device::profiler::Span| x.start_ns + x.dur_ns;
    for x in [fills, h0, h1] {
        assert_eq!(x.kind, keel_device::profiler::SpanKind::Annotation);
    }
    // Inside the host range that submitted and waited, within the
    // calibration's error bound.
    let bound = conformance::calibration_bound(&trace, d);
    assert!(frame.start_ns <= submit.start_ns + bound && end(submit) <= end(frame) + bound);
    assert!(
        submit.start_ns <= fills.start_ns && end(fills) <= end(submit),
        "{submit:?} {fills:?}"
    );
    assert!(fills.start_ns <= h0.start_ns && end(h0) <= h1.start_ns && end(h1) <= end(fills));
    drop(target);
    // SAFETY: the command buffer's submissions completed (synchronised).
    unsafe { device.destroy_command_pool(pool, None) };
    // SAFETY: no Keel object of the device is alive; no other thread uses it.
    unsafe { keel_vk::release(d) }.expect("release");
    // SAFETY: Keel released the device and it is idle.
    unsafe { p.destroy() };
    no_validation_errors();
}

mod adopted_vulkan_device {
    use super::*;
    keel_device::conformance_suite!(
        adopted_device,
        Config {
            kernel_source: KernelSource::Wgsl,
            slow_spin: (4096, 200_000),
            after: no_validation_errors,
            ..Config::default()
        }
    );
}
