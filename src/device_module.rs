//! Device modules: a backend registers a typed module under its device
//! type's name, and users reach it with [`device_module`], the way
//! `torch._register_device_module("npu", ...)` makes `torch.npu.*`.
//!
//! ```
//! # fn main() -> keel::Result<()> {
//! #[derive(Debug)]
//! struct CpuModule { lanes: usize }
//! keel::register_device_module("cpu", CpuModule { lanes: 8 })?;
//! assert_eq!(keel::device_module::<CpuModule>("cpu")?.lanes, 8);
//! assert!(keel::device_module::<String>("cpu").is_err()); // another type
//! # Ok(()) }
//! ```

use std::any::{Any, type_name};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::core::DeviceType;
use crate::{Error, Result};

struct Module {
    value: Arc<dyn Any + Send + Sync>,
    type_name: &'static str,
}

static MODULES: RwLock<Option<HashMap<DeviceType, Module>>> = RwLock::new(None);

/// Registers `module` as the device module of device type `name` (`cuda`,
/// `npu` once the PrivateUse1 backend is named, ...). One module per
/// device type: a second registration is an error, as in PyTorch.
pub fn register_device_module<M: Any + Send + Sync>(name: &str, module: M) -> Result<()> {
    let ty = DeviceType::from_name(name)?;
    let mut modules = MODULES.write().unwrap_or_else(PoisonError::into_inner);
    let modules = modules.get_or_insert_with(HashMap::new);
    if let Some(old) = modules.get(&ty) {
        return Err(Error::invalid(format!(
            "The runtime module of '{ty}' has already been registered with '{}'",
            old.type_name
        )));
    }
    modules.insert(
        ty,
        Module {
            value: Arc::new(module),
            type_name: type_name::<M>(),
        },
    );
    Ok(())
}

/// The device module registered for device type `name`, as type `M`.
pub fn device_module<M: Any + Send + Sync>(name: &str) -> Result<Arc<M>> {
    let ty = DeviceType::from_name(name)?;
    let modules = MODULES.read().unwrap_or_else(PoisonError::into_inner);
    let module = modules
        .as_ref()
        .and_then(|m| m.get(&ty))
        .ok_or_else(|| Error::invalid(format!("no device module is registered for '{ty}'")))?;
    Arc::clone(&module.value).downcast::<M>().map_err(|_| {
        Error::invalid(format!(
            "device module of '{ty}': expected type {}, found {}",
            type_name::<M>(),
            module.type_name
        ))
    })
}
