//! Eight threads hammering guards never see each other's device or stream:
//! the current device and streams are per thread.

use std::sync::Barrier;

use keel_device::testing::FakeGuardImpl;
use keel_device::{Device, DeviceGuard, DeviceType, MultiStreamGuard, Stream, StreamGuard};

const TY: DeviceType = DeviceType::Cuda;

#[test]
fn eight_threads_hammering_guards() {
    FakeGuardImpl::register(TY).expect("fake in the cuda slot");
    let barrier = Barrier::new(8);
    std::thread::scope(|scope| {
        for t in 0..8i16 {
            let barrier = &barrier;
            scope.spawn(move || {
                let mine = Device::new(TY, t).expect("valid");
                let fake = FakeGuardImpl::global(TY);
                barrier.wait();
                for round in 0..2_000i64 {
                    let id = 2 * (round * 8 + i64::from(t)) + 2;
                    {
                        let _g = DeviceGuard::new(mine).expect("guard");
                        assert_eq!(fake.device_index(), t, "thread {t} round {round}");
                        let _s = StreamGuard::new(Stream::new(mine, id)).expect("stream guard");
                        assert_eq!(fake.current_stream_id(t), id);
                        let other = Device::new(TY, (t + 1) % 8).expect("valid");
                        let _m =
                            MultiStreamGuard::new(&[Stream::new(other, id + 1)]).expect("multi");
                        assert_eq!(fake.current_stream_id((t + 1) % 8), id + 1);
                        assert_eq!(keel_device::current_device(TY), Ok(mine));
                        std::thread::yield_now();
                        assert_eq!(keel_device::current_stream(mine).map(|s| s.id()), Ok(id));
                    }
                    assert_eq!(fake.device_index(), 0, "thread {t} restored");
                    for i in 0..8 {
                        assert_eq!(fake.current_stream_id(i), 0, "thread {t} device {i}");
                    }
                }
            });
        }
    });
}
