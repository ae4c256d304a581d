//! Autocast (automatic mixed precision), per device type, as PyTorch's
//! `torch.autocast` and the PrivateUse1 seed list it: whether it is on
//! ([`is_autocast_enabled`], [`set_autocast_enabled`]), the dtype
//! lower-precision operators run in ([`get_autocast_dtype`],
//! [`set_autocast_dtype`]), the dtypes a backend supports
//! ([`get_amp_supported_dtype`], [`register_amp_supported_dtypes`] for a
//! third-party backend), an operator policy by operator name
//! ([`op_policy`], [`register_op_policy`]) and a scoped guard
//! ([`autocast`]).
//!
//! # What is per thread
//!
//! As in PyTorch, the on/off switch and the dtype are thread-local (each
//! thread starts disabled, with the default dtype: `f16` on GPU device
//! types, `bf16` on the CPU). The supported dtypes and the operator
//! policy are process-wide registries.
//!
//! # The operator policy
//!
//! [`CastPolicy::LowerPrecision`] operators (`matmul`, `mm`, `bmm`,
//! `linear`, `addmm`, the convolutions...) run `f32` inputs in the
//! autocast dtype; [`CastPolicy::Fp32`] operators (`sum`, `softmax`,
//! `log_softmax`, `exp`, `log`, the norms and losses...) run in `f32`;
//! [`CastPolicy::Promote`] operators (`cat`, `stack`, `add`...) run in the
//! autocast dtype promoted with their inputs' types (PyTorch's
//! `promote_type`); anything else runs as it is called
//! ([`CastPolicy::Unchanged`]). [`cast_dtype`] is what an operator asks
//! before it runs.
//!
//! The dtype here is [`AutocastDtype`] (`f32`, `f16`, `bf16`), the
//! floating types autocast deals in; the operator layer maps it onto its
//! tensor dtype.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, PoisonError, RwLock};

use crate::core::DeviceType;
use crate::{Error, Result};

/// The floating types autocast chooses between.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AutocastDtype {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
}

impl AutocastDtype {
    /// Every dtype.
    pub const ALL: [AutocastDtype; 3] =
        [AutocastDtype::F32, AutocastDtype::F16, AutocastDtype::Bf16];

    /// PyTorch's name (`torch.float16` is `"float16"`).
    pub fn as_str(self) -> &'static str {
        match self {
            AutocastDtype::F32 => "float32",
            AutocastDtype::F16 => "float16",
            AutocastDtype::Bf16 => "bfloat16",
        }
    }

    /// The type that holds every value of `self` and `other` (PyTorch's
    /// promotion: `f16` with `bf16` is `f32`, neither holding the other).
    pub fn promote(self, other: AutocastDtype) -> AutocastDtype {
        if self == other {
            self
        } else {
            AutocastDtype::F32
        }
    }
}

impl fmt::Display for AutocastDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AutocastDtype {
    type Err = Error;
    /// `"float32"`/`"f32"`/`"float"`, `"float16"`/`"f16"`/`"half"`,
    /// `"bfloat16"`/`"bf16"`.
    fn from_str(s: &str) -> Result<AutocastDtype> {
        match s {
            "float32" | "f32" | "float" => Ok(AutocastDtype::F32),
            "float16" | "f16" | "half" => Ok(AutocastDtype::F16),
            "bfloat16" | "bf16" => Ok(AutocastDtype::Bf16),
            _ => {
                let q: String = s.chars().take(32).collect();
                Err(Error::invalid(format!(
                    "invalid autocast dtype {q:?}: expected one of \"float32\", \"float16\", \"bfloat16\""
                )))
            }
        }
    }
}

/// How autocast treats an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CastPolicy {
    /// `f32` inputs run in the autocast dtype (`lower_precision_fp`).
    LowerPrecision,
    /// Inputs run in `f32` (`fp32`).
    Fp32,
    /// Inputs run in the widest of their types (`promote`).
    Promote,
    /// Autocast leaves the operator alone.
    Unchanged,
}

/// The default dtype of `ty`: `bf16` on the CPU, `f16` elsewhere.
pub fn default_autocast_dtype(ty: DeviceType) -> AutocastDtype {
    if ty == DeviceType::Cpu {
        AutocastDtype::Bf16
    } else {
        AutocastDtype::F16
    }
}

/// The built-in supported dtypes: both lower-precision types on the
/// built-in backends (the GPU backends emulate `f16` storage where the
/// device lacks it); nothing on PrivateUse1 until its backend registers.
fn builtin_supported(ty: DeviceType) -> Vec<AutocastDtype> {
    match ty {
        DeviceType::Cpu => vec![AutocastDtype::Bf16, AutocastDtype::F16],
        DeviceType::Cuda | DeviceType::Vulkan | DeviceType::Wgpu => {
            vec![AutocastDtype::F16, AutocastDtype::Bf16]
        }
        DeviceType::PrivateUse1 => Vec::new(),
    }
}

struct Registry {
    supported: HashMap<DeviceType, Vec<AutocastDtype>>,
    /// Per device type overrides of the policy.
    per_type: HashMap<(DeviceType, String), CastPolicy>,
    /// The policy every device type starts with.
    common: HashMap<String, CastPolicy>,
}

const LOWER: &[&str] = &[
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "addbmm",
    "baddbmm",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "prelu",
    "chain_matmul",
    "scaled_dot_product_attention",
];
const FP32: &[&str] = &[
    "sum",
    "softmax",
    "log_softmax",
    "exp",
    "log",
    "pow",
    "cumsum",
    "cumprod",
    "prod",
    "norm",
    "layer_norm",
    "group_norm",
    "mse_loss",
    "cross_entropy",
    "nll_loss",
    "binary_cross_entropy_with_logits",
    "softplus",
    "mean",
    "var",
    "std",
];
const PROMOTE: &[&str] = &[
    "cat",
    "stack",
    "add",
    "sub",
    "mul",
    "addcmul",
    "addcdiv",
    "index_put",
];

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(|| {
    let mut common = HashMap::new();
    for (names, p) in [
        (LOWER, CastPolicy::LowerPrecision),
        (FP32, CastPolicy::Fp32),
        (PROMOTE, CastPolicy::Promote),
    ] {
        for n in names {
            common.insert((*n).to_owned(), p);
        }
    }
    RwLock::new(Registry {
        supported: DeviceType::ALL
            .into_iter()
            .map(|ty| (ty, builtin_supported(ty)))
            .collect(),
        per_type: HashMap::new(),
        common,
    })
});

fn registry() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(PoisonError::into_inner)
}

/// The dtypes autocast may use on `ty` (the seed's
/// `get_amp_supported_dtype`).
pub fn get_amp_supported_dtype(ty: DeviceType) -> Vec<AutocastDtype> {
    registry().supported.get(&ty).cloned().unwrap_or_default()
}

/// Declares the dtypes autocast may use on a third-party backend's device
/// type (PrivateUse1 only; the built-in types declare theirs). Replaces an
/// earlier declaration.
pub fn register_amp_supported_dtypes(ty: DeviceType, dtypes: &[AutocastDtype]) -> Result<()> {
    if ty != DeviceType::PrivateUse1 {
        return Err(Error::invalid(format!(
            "only the PrivateUse1 device type registers its autocast dtypes; {} declares its own",
            ty.name_lower()
        )));
    }
    if dtypes.is_empty() {
        return Err(Error::invalid(
            "expected at least one autocast dtype to register, found none",
        ));
    }
    REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .supported
        .insert(ty, dtypes.to_vec());
    Ok(())
}

fn check_op(op: &str) -> Result<()> {
    let ok = !op.is_empty()
        && op.len() <= 64
        && op
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        let q: String = op.chars().take(32).collect();
        Err(Error::invalid(format!(
            "invalid operator name {q:?}: expected 1 to 64 ASCII letters, digits, '_' or '.'"
        )))
    }
}

/// Sets the policy of operator `op`: for every device type (`ty` = `None`),
/// or for one (which wins over the common one).
pub fn register_op_policy(ty: Option<DeviceType>, op: &str, policy: CastPolicy) -> Result<()> {
    check_op(op)?;
    let mut r = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
    match ty {
        Some(ty) => r.per_type.insert((ty, op.to_owned()), policy),
        None => r.common.insert(op.to_owned(), policy),
    };
    Ok(())
}

/// The policy of operator `op` on `ty` ([`CastPolicy::Unchanged`] for an
/// operator autocast does not know).
pub fn op_policy(ty: DeviceType, op: &str) -> CastPolicy {
    let r = registry();
    r.per_type
        .get(&(ty, op.to_owned()))
        .or_else(|| r.common.get(op))
        .copied()
        .unwrap_or(CastPolicy::Unchanged)
}

#[derive(Clone, Copy)]
struct State {
    enabled: bool,
    dtype: AutocastDtype,
}

thread_local! {
    static STATE: RefCell<[State; DeviceType::COUNT]> = RefCell::new(
        DeviceType::ALL.map(|ty| State { enabled: false, dtype: default_autocast_dtype(ty) }),
    );
}

fn slot(ty: DeviceType) -> usize {
    usize::from(ty.code())
}

fn state(ty: DeviceType) -> State {
    STATE.with(|s| s.borrow()[slot(ty)])
}

/// How many (thread, device type) pairs have autocast on: while none do,
/// every dispatch skips the thread-local read. A thread that exits with
/// autocast on leaves its count behind, which only costs that read.
static ENABLED_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

fn set_state(ty: DeviceType, st: State) {
    let was = STATE.with(|s| std::mem::replace(&mut s.borrow_mut()[slot(ty)], st).enabled);
    match (was, st.enabled) {
        (false, true) => {
            ENABLED_ANYWHERE.fetch_add(1, Ordering::Relaxed);
        }
        (true, false) => {
            ENABLED_ANYWHERE.fetch_sub(1, Ordering::Relaxed);
        }
        _ => {}
    }
}

/// Whether autocast is on for `ty` on this thread (default off).
pub fn is_autocast_enabled(ty: DeviceType) -> bool {
    // Relaxed suffices: this thread's own changes are in program order.
    ENABLED_ANYWHERE.load(Ordering::Relaxed) != 0 && state(ty).enabled
}

/// Turns autocast on or off for `ty` on this thread. Turning it on is an
/// error when the current dtype is not one `ty` supports.
pub fn set_autocast_enabled(ty: DeviceType, enabled: bool) -> Result<()> {
    let mut st = state(ty);
    if enabled {
        check_supported(ty, st.dtype)?;
    }
    st.enabled = enabled;
    set_state(ty, st);
    Ok(())
}

/// The dtype lower-precision operators run in on `ty` on this thread.
pub fn get_autocast_dtype(ty: DeviceType) -> AutocastDtype {
    state(ty).dtype
}

/// Sets the autocast dtype of `ty` on this thread; an error for a dtype
/// `ty` does not support (`f32` is never one: it is what autocast lowers
/// from).
pub fn set_autocast_dtype(ty: DeviceType, dtype: AutocastDtype) -> Result<()> {
    check_supported(ty, dtype)?;
    let mut st = state(ty);
    st.dtype = dtype;
    set_state(ty, st);
    Ok(())
}

fn check_supported(ty: DeviceType, dtype: AutocastDtype) -> Result<()> {
    let supported = get_amp_supported_dtype(ty);
    if supported.contains(&dtype) {
        return Ok(());
    }
    let list: Vec<&str> = supported.iter().map(|d| d.as_str()).collect();
    Err(Error::invalid(if list.is_empty() {
        format!(
            "autocast on {} supports no dtype: its backend declares them with \
             keel::autocast::register_amp_supported_dtypes",
            ty.name_lower()
        )
    } else {
        format!(
            "autocast on {} supports {}, found {dtype}",
            ty.name_lower(),
            list.join(", ")
        )
    }))
}

/// The type operator `op` runs in on `ty` for floating inputs of `inputs`
/// types, under this thread's autocast state (`None` for no inputs). With
/// autocast off, or for an operator it leaves alone, the inputs' common
/// type. Otherwise as PyTorch's autocast casts floating inputs:
/// lower-precision operators run in the autocast dtype whatever their
/// inputs, `f32` operators in `f32`, promote operators in the autocast
/// dtype promoted with every input's type (so `f16` inputs under a `bf16`
/// autocast run in `f32`).
pub fn cast_dtype(ty: DeviceType, op: &str, inputs: &[AutocastDtype]) -> Option<AutocastDtype> {
    let widest = inputs.iter().copied().reduce(AutocastDtype::promote)?;
    let st = state(ty);
    if !st.enabled {
        return Some(widest);
    }
    Some(match op_policy(ty, op) {
        CastPolicy::LowerPrecision => st.dtype,
        CastPolicy::Fp32 => AutocastDtype::F32,
        CastPolicy::Promote => widest.promote(st.dtype),
        CastPolicy::Unchanged => widest,
    })
}

/// `torch.autocast(device_type, dtype, enabled)`: sets autocast of `ty` on
/// this thread (and its dtype, when given) until the guard drops, which
/// restores both. An unsupported dtype is an error and changes nothing.
pub fn autocast(
    ty: DeviceType,
    enabled: bool,
    dtype: Option<AutocastDtype>,
) -> Result<AutocastGuard> {
    let before = state(ty);
    let dtype = dtype.unwrap_or(before.dtype);
    if enabled {
        check_supported(ty, dtype)?;
    }
    set_state(ty, State { enabled, dtype });
    Ok(AutocastGuard {
        ty,
        before,
        _not_send: PhantomData,
    })
}

/// Restores a device type's autocast state on drop (see [`autocast`]).
#[must_use = "autocast ends when the guard drops"]
pub struct AutocastGuard {
    ty: DeviceType,
    before: State,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for AutocastGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AutocastGuard")
            .field("device_type", &self.ty)
            .field("restores_enabled", &self.before.enabled)
            .field("restores_dtype", &self.before.dtype)
            .finish()
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        set_state(self.ty, self.before);
    }
}
