//! Device and stream guards on a real backend.

use super::*;

/// Guards and `set_current_stream` change the current device and stream,
/// and work follows them; guards restore on drop.
pub fn guards_switch_device_and_stream(d: Device, _cfg: &Config) {
    let ty = d.device_type();
    let s = pool(d);
    let before_device = crate::current_device(ty).expect("current");
    let before_stream = crate::current_stream(d).expect("current");
    {
        let _g = DeviceGuard::new(d).expect("device guard");
        assert_eq!(crate::current_device(ty), Ok(d));
        let sg = StreamGuard::new(s).expect("stream guard");
        assert_eq!(crate::current_stream(Device::current(ty)), Ok(s));
        assert_eq!(sg.original_stream().device().device_type(), ty);
        // Work on the current stream goes where the guard says.
        let cur = crate::current_stream(Device::current(ty)).expect("current");
        let b = Buffer::from_slice(&cur, &[42u32]).expect("upload");
        assert_eq!(b.read_as::<u32>(&s).expect("read"), [42]);
    }
    assert_eq!(crate::current_device(ty), Ok(before_device));
    assert_eq!(crate::current_stream(d), Ok(before_stream));
    crate::set_current_stream(s).expect("set");
    assert_eq!(crate::current_stream(d), Ok(s));
    crate::set_current_stream(before_stream).expect("restore");
    assert_eq!(crate::current_stream(d), Ok(before_stream));
    let count = crate::device_count(ty);
    // One past the last device: an error from the constructor (CPU) or
    // from the guard (every other backend).
    let e = Device::new(ty, count as i16)
        .and_then(DeviceGuard::new)
        .expect_err("no such device");
    assert!(e.to_string().contains("index"), "{e}");
}
