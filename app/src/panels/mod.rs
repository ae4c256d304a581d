//! The app's panels. Each panel draws from the state it is handed and
//! reports what the user asked for; none reaches into another's state.

pub mod analysis;
pub mod details;
pub mod devices;
pub mod diff;
pub mod memory;
pub mod selection;
pub mod snapshot;
pub mod sources;
pub mod stats;
pub mod timeline;
