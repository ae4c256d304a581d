//! [`save`] and [`load`]: named tensors in the safetensors format (the
//! `safetensors` crate), with per-device-type metadata hooks (c10's
//! `BackendMeta` registry, as the PrivateUse1 article registers them).
//!
//! A file holds each tensor's dtype, shape and bytes, as any safetensors
//! reader expects, and in the header's `__metadata__` (string to string):
//! `keel.<name>.device` (the device it was saved from, `npu:1`) and, for
//! a device type with a [`BackendMeta`] hook registered,
//! `keel.<name>.meta.<key>` for each entry the hook wrote. Loading puts
//! every tensor on the device asked for, whatever device it was saved
//! from, and hands the saved entries to the hook of the device type it
//! was saved from (when that hook is registered in the loading process;
//! otherwise they are ignored, so a file from a machine with an `npu`
//! loads on one without).
//!
//! ```
//! # fn main() -> keel::Result<()> {
//! use keel::{Device, Tensor};
//! let path = std::env::temp_dir().join(format!("keel-doc-{}.safetensors", std::process::id()));
//! let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::cpu())?;
//! keel::save(&path, &[("w", &w)])?;
//! let loaded = keel::load(&path, Device::cpu())?;
//! assert_eq!(loaded[0].0, "w");
//! assert_eq!(loaded[0].1.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! # std::fs::remove_file(&path).ok();
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use safetensors::tensor::{Dtype, TensorView};

use crate::Buffer;
use crate::api::{current_stream, resolve};
use crate::core::{Device, DeviceType};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// A device type's serialization hooks: what it writes about its tensors
/// into a file, and what it does with that when a file is loaded (c10's
/// `BackendMeta` get/set functions).
pub trait BackendMeta: Send + Sync {
    /// The entries to save for `tensor` (on a device of this type), saved
    /// as `name`.
    fn save(&self, name: &str, tensor: &Tensor) -> Result<BTreeMap<String, String>>;

    /// Called when a tensor saved from this device type is loaded (now on
    /// `tensor.device()`, maybe another type) with the entries `save`
    /// wrote; an error fails the load.
    fn load(&self, name: &str, tensor: &Tensor, meta: &BTreeMap<String, String>) -> Result<()>;
}

static HOOKS: RwLock<[Option<Arc<dyn BackendMeta>>; DeviceType::COUNT]> =
    RwLock::new([None, None, None, None, None]);

/// Registers (or replaces) the serialization hooks of device type `ty`.
pub fn register_backend_meta(ty: DeviceType, hooks: impl BackendMeta + 'static) {
    HOOKS.write().unwrap_or_else(PoisonError::into_inner)[usize::from(ty.code())] =
        Some(Arc::new(hooks));
}

fn hooks(ty: DeviceType) -> Option<Arc<dyn BackendMeta>> {
    HOOKS.read().unwrap_or_else(PoisonError::into_inner)[usize::from(ty.code())].clone()
}

fn to_safetensors(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::U8 => Dtype::U8,
    }
}

fn from_safetensors(name: &str, d: Dtype) -> Result<DType> {
    Ok(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::U8 => DType::U8,
        other => {
            return Err(Error::Serialization(format!(
                "tensor '{}': expected a dtype Keel has (F32, F16, BF16, I32, U32, U8), found {other:?}",
                short(name)
            )));
        }
    })
}

/// At most 40 characters of `s`, for messages.
fn short(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

const PREFIX: &str = "keel.";

/// Writes `tensors` to `path` in the safetensors format, with each
/// tensor's device and its device type's [`BackendMeta`] entries in the
/// header's `__metadata__`. Tensors are read on the current stream of
/// their devices. Names must be distinct.
pub fn save(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let mut metadata = HashMap::new();
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let device = t.device();
        if metadata
            .insert(format!("{PREFIX}{name}.device"), device.to_string())
            .is_some()
        {
            return Err(Error::Serialization(format!(
                "expected distinct tensor names, found '{}' twice",
                short(name)
            )));
        }
        if let Some(h) = hooks(device.device_type()) {
            for (k, v) in h.save(name, t)? {
                metadata.insert(format!("{PREFIX}{name}.meta.{k}"), v);
            }
        }
        let bytes = t.to_bytes()?;
        data.push((*name, to_safetensors(t.dtype()), t.shape().to_vec(), bytes));
    }
    let views = data
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (*name, v))
                .map_err(|e| Error::Serialization(format!("tensor '{}': {e}", short(name))))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, Some(metadata), path)
        .map_err(|e| Error::Serialization(format!("writing {}: {e}", path.display())))
}

/// Reads every tensor of the safetensors file at `path` onto `device`
/// (uploaded on its current stream), sorted by name; calls the
/// [`BackendMeta`] hook of the device type each was saved from. Any
/// safetensors file with Keel's dtypes loads (Keel's entries are optional).
pub fn load(path: impl AsRef<Path>, device: Device) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Serialization(format!("reading {}: {e}", path.display())))?;
    load_bytes(&bytes, device).map_err(|e| match e {
        Error::Serialization(m) => Error::Serialization(format!("{}: {m}", path.display())),
        other => other,
    })
}

/// [`load`] from bytes in memory.
pub fn load_bytes(bytes: &[u8], device: Device) -> Result<Vec<(String, Tensor)>> {
    let device = resolve(device)?;
    let bad = |e: safetensors::SafeTensorError| {
        Error::Serialization(format!("expected a safetensors file, found: {e}"))
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(bad)?;
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(bad)?;
    let meta: BTreeMap<String, String> = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let stream = current_stream(device)?;
    let mut out = Vec::new();
    let mut views = file.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in views {
        let dtype = from_safetensors(&name, view.dtype())?;
        let data = view.data();
        let buffer = Buffer::new(device, data.len())?;
        if !data.is_empty() {
            buffer.write(&stream, 0, data)?;
        }
        let tensor = Tensor::from_buffer(buffer, dtype, view.shape())?;
        let saved_from = meta.get(&format!("{PREFIX}{name}.device"));
        if let Some(from) = saved_from {
            let from: Device = from.parse().map_err(|e| {
                Error::Serialization(format!(
                    "tensor '{}': expected a device in {PREFIX}{}.device, found '{}' ({e})",
                    short(&name),
                    short(&name),
                    short(from)
                ))
            })?;
            if let Some(h) = hooks(from.device_type()) {
                let key = format!("{PREFIX}{name}.meta.");
                let entries: BTreeMap<String, String> = meta
                    .range(key.clone()..)
                    .take_while(|(k, _)| k.starts_with(&key))
                    .map(|(k, v)| (k[key.len()..].to_owned(), v.clone()))
                    .collect();
                h.load(&name, &tensor, &entries)?;
            }
        }
        out.push((name, tensor));
    }
    Ok(out)
}
