//! Device and stream guards with c10's semantics, on the fake backend
//! (c10's `FakeGuardImpl`) in the registry's `cuda` and `vulkan` slots:
//! the registry forms, the inline forms, events on the fake backend, and
//! guards on several threads.

mod device_guard;
mod fake_events;
mod guard_threads;
mod inline_device_guard;
mod inline_stream_guard;
