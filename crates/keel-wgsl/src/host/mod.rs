//! Placeholder until the host end lands.
use crate::ir::Program;
/// Why a launch failed.
#[derive(Clone, Debug, PartialEq)]
pub struct HostError(pub String);
impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for HostError {}
/// Options.
#[derive(Clone, Debug, Default)]
pub struct HostOptions {
    /// Threads.
    pub threads: usize,
}
/// Runs `program`.
pub fn run(
    program: &Program,
    _grid: [u32; 3],
    _buffers: &mut [&mut [u8]],
    _params: &[u8],
    _options: &HostOptions,
) -> Result<(), HostError> {
    Err(HostError(format!("{}: not yet", program.name)))
}
