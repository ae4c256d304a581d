//! Placeholder until the PTX end lands.
use crate::ir::Program;
/// Why PTX could not be printed.
#[derive(Clone, Debug, PartialEq)]
pub struct PtxError(pub String);
impl std::fmt::Display for PtxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for PtxError {}
/// Prints `program` as PTX.
pub fn emit(program: &Program) -> Result<String, PtxError> {
    Err(PtxError(format!("{}: not yet", program.name)))
}
