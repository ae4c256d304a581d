//! Port of c10's `Device_test.cpp`, plus Keel's checks and property tests
//! for device strings and stream values.

use keel_device::core::{StreamKind, pool_stream_id, stream_kind};
use keel_device::{Device, DeviceType, Error, Stream};
use proptest::prelude::*;

fn dev(ty: DeviceType, index: i16) -> Device {
    Device::new(ty, index).expect("valid device")
}

#[test]
fn basic_construction_valid_strings() {
    let valid = [
        ("cpu", DeviceType::Cpu, -1),
        ("cuda", DeviceType::Cuda, -1),
        ("cpu:0", DeviceType::Cpu, 0),
        ("cuda:0", DeviceType::Cuda, 0),
        ("cuda:1", DeviceType::Cuda, 1),
        ("vulkan:3", DeviceType::Vulkan, 3),
        ("wgpu:511", DeviceType::Wgpu, 511),
        ("privateuseone:2", DeviceType::PrivateUse1, 2),
    ];
    for (s, ty, index) in valid {
        let d: Device = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(d.device_type(), ty, "{s}");
        assert_eq!(d.index(), index, "{s}");
        assert_eq!(d.to_string(), s, "display round trip of {s}");
    }
}

#[test]
fn basic_construction_invalid_strings() {
    let invalid = [
        "cpu:x",
        "cpu:foo",
        "cuda:cuda",
        "cuda:",
        "cpu:0:0",
        "cpu:0:",
        "cpu:-1",
        "::",
        ":",
        "cpu:00",
        "cpu:01",
        " cpu",
        "cpu ",
        "cuda: 1",
        "cuda:+1",
        "cu da",
        "cuda:1x",
    ];
    for s in invalid {
        let err = s.parse::<Device>().expect_err(s);
        assert_eq!(err, Error::InvalidDeviceString(s.to_owned()), "{s}");
        assert_eq!(err.to_string(), format!("Invalid device string: '{s}'"));
    }
}

#[test]
fn empty_string_has_its_own_message() {
    let err = "".parse::<Device>().expect_err("empty");
    assert_eq!(err.to_string(), "Device string must not be empty");
}

#[test]
fn unknown_type_names_are_listed() {
    let err = "CUDA:0".parse::<Device>().expect_err("case sensitive");
    assert_eq!(
        err.to_string(),
        "Expected one of cpu, cuda, vulkan, wgpu, privateuseone device type at start of device string: CUDA"
    );
    let err = "npu"
        .parse::<Device>()
        .expect_err("not registered in this process");
    assert!(matches!(err, Error::UnknownDeviceType { ref found, .. } if found == "npu"));
}

#[test]
fn index_range_and_cpu_rule_are_always_checked() {
    assert!(Device::new(DeviceType::Cuda, 511).is_ok());
    let e = Device::new(DeviceType::Cuda, 512).expect_err("too big");
    assert_eq!(e.to_string(), "Device index must be at most 511, got 512");
    let e = Device::new(DeviceType::Cuda, -2).expect_err("negative");
    assert_eq!(
        e.to_string(),
        "Device index must be -1 or non-negative, got -2"
    );
    let e = Device::new(DeviceType::Cpu, 1).expect_err("cpu:1");
    assert_eq!(e.to_string(), "CPU device index must be -1 or zero, got 1");
    let e = "cpu:1".parse::<Device>().expect_err("cpu:1");
    assert_eq!(
        e.to_string(),
        "CPU device index must be -1 or zero, got 1 (in device string 'cpu:1')"
    );
    let e = "cuda:99999999999999999999999"
        .parse::<Device>()
        .expect_err("overflow");
    assert!(
        e.to_string()
            .starts_with("Device index must be at most 511"),
        "{e}"
    );
}

#[test]
fn device_type_names() {
    let names = [
        (DeviceType::Cpu, "cpu", "CPU"),
        (DeviceType::Cuda, "cuda", "CUDA"),
        (DeviceType::Vulkan, "vulkan", "VULKAN"),
        (DeviceType::Wgpu, "wgpu", "WGPU"),
        (DeviceType::PrivateUse1, "privateuseone", "PRIVATEUSEONE"),
    ];
    for (ty, lower, upper) in names {
        assert_eq!(ty.name(true), lower);
        assert_eq!(ty.name(false), upper);
        assert_eq!(ty.to_string(), lower);
        assert_eq!(lower.parse::<DeviceType>(), Ok(ty));
        assert!(
            upper.parse::<DeviceType>().is_err(),
            "{upper} must not parse"
        );
        assert_eq!(DeviceType::from_code(i64::from(ty.code())), Some(ty));
    }
    assert_eq!(DeviceType::from_code(5), None);
    assert_eq!(DeviceType::from_code(-1), None);
}

#[test]
fn devices_hash_and_compare_by_value() {
    use std::collections::HashSet;
    let set: HashSet<Device> = ["cuda:0", "cuda:0", "cuda:1", "cpu", "cpu:0"]
        .iter()
        .map(|s| s.parse().expect("valid"))
        .collect();
    assert_eq!(set.len(), 4);
    assert_ne!(
        Device::cpu(),
        dev(DeviceType::Cpu, 0),
        "index -1 differs from 0"
    );
    assert_eq!(Device::from(DeviceType::Vulkan).to_string(), "vulkan");
}

#[test]
fn stream_display_and_default() {
    let s = Stream::default_for(dev(DeviceType::Cuda, 0));
    assert_eq!(s.to_string(), "stream 0 on device cuda:0");
    assert!(s.is_default());
    assert_eq!(s.kind(), StreamKind::Default);
    let p = Stream::new(
        dev(DeviceType::Vulkan, 2),
        pool_stream_id(1, 3).expect("in range"),
    );
    assert_eq!(p.to_string(), "stream 99 on device vulkan:2");
}

#[test]
fn stream_id_encoding_is_c10s() {
    assert_eq!(pool_stream_id(0, 0), Some(1));
    assert_eq!(pool_stream_id(1, 0), Some(3));
    assert_eq!(pool_stream_id(0, 1), Some(33));
    assert_eq!(pool_stream_id(3, 31), Some((31 << 5) | (3 << 1) | 1));
    assert_eq!(pool_stream_id(4, 0), None);
    assert_eq!(pool_stream_id(0, 32), None);
    for level in 0..4 {
        for index in 0..32 {
            let id = pool_stream_id(level, index).expect("in range");
            assert_eq!(
                stream_kind(id),
                StreamKind::Pool {
                    level: level as u8,
                    index: index as u8
                }
            );
        }
    }
    assert_eq!(stream_kind(2), StreamKind::Other, "even ids are external");
}

#[test]
fn pack3_unpack3_and_hash() {
    let s = Stream::new(dev(DeviceType::Vulkan, 3), 99);
    let p = s.pack3();
    assert_eq!((p.stream_id, p.device_index, p.device_type), (99, 3, 2));
    assert_eq!(
        Stream::unpack3(p.stream_id, p.device_index, p.device_type),
        Ok(s)
    );
    let e = Stream::unpack3(1, 0, 42).expect_err("bad type code");
    assert_eq!(
        e.to_string(),
        "unpack3: expected a device type code in 0..5, found 42"
    );
    assert!(Stream::unpack3(1, 600, 1).is_err(), "bad index");
    assert_eq!(s.hash_u64(), (2u64 << 56) | (3u64 << 48) | 99);
    // Index -1 no longer clobbers the type bits (c10 sign-extends it).
    let current = Stream::new(Device::current(DeviceType::Cuda), 5);
    assert_eq!(current.hash_u64() >> 56, 1);
    assert_eq!((current.hash_u64() >> 48) & 0xFF, 0xFF);
}

fn device_strategy() -> impl Strategy<Value = Device> {
    (0usize..5, -1i16..=511)
        .prop_filter_map("cpu rule", |(t, i)| Device::new(DeviceType::ALL[t], i).ok())
}

proptest! {
    #[test]
    fn display_parse_round_trip(d in device_strategy()) {
        let s = d.to_string();
        prop_assert_eq!(s.parse::<Device>(), Ok(d));
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        let _ = s.parse::<Device>();
    }

    #[test]
    fn grammar_like_strings_never_panic(s in "[a-zA-Z_:0-9 +-]{0,12}") {
        match s.parse::<Device>() {
            Ok(d) => prop_assert_eq!(d.to_string(), s),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn pack3_round_trip(d in device_strategy(), id in any::<i64>()) {
        let s = Stream::new(d, id);
        let p = s.pack3();
        prop_assert_eq!(Stream::unpack3(p.stream_id, p.device_index, p.device_type), Ok(s));
    }
}
