//! The precision policy: how much an operator may round `f32` work, per
//! backend and per operator family, and the reduced-precision switches of
//! `f16`/`bf16` GEMMs (PyTorch's `torch.backends.*.fp32_precision`,
//! `allow_tf32`, `set_float32_matmul_precision`,
//! `allow_fp16_reduced_precision_reduction`,
//! `allow_bf16_reduced_precision_reduction`, `allow_fp16_accumulation`).
//!
//! # The `fp32_precision` hierarchy
//!
//! Three levels, each `"ieee"`, `"tf32"`, `"bf16"` or `"none"` (inherit
//! from the parent):
//!
//! 1. global (`torch.backends.fp32_precision`), default `"ieee"`; it has
//!    no parent, so `"none"` is refused there;
//! 2. per backend, by [`DeviceType`] (`torch.backends.cuda.fp32_precision`
//!    and the like), default `"none"`;
//! 3. per operator family of a backend (`torch.backends.cuda.matmul.
//!    fp32_precision`), default `"none"`. Families are an open set of
//!    names: [`MATMUL`] is the first; `"conv"` or any later one works the
//!    same with no change here.
//!
//! [`effective`] walks from the family up to the first level that is not
//! `"none"`: that is how an operator of that family on that backend may
//! treat `f32` inputs. What each mode does to the numbers (`docs/NUMERICS.md`):
//! `ieee` keeps `f32` (24-bit significands), `tf32` rounds inputs to 10
//! explicit mantissa bits (round to nearest even) and accumulates in
//! `f32`, `bf16` rounds inputs to bfloat16 (7 explicit bits).
//!
//! # Legacy switches, mapped onto the hierarchy
//!
//! - [`set_allow_tf32`]`(ty, true)` sets `ty`'s `matmul` family to `"tf32"`,
//!   `false` to `"ieee"` (PyTorch's `torch.backends.cuda.matmul.allow_tf32`);
//!   [`allow_tf32`] is whether the effective `matmul` precision is `tf32`.
//! - [`set_float32_matmul_precision`]`("highest" | "high" | "medium")` sets
//!   the `matmul` family of every device type to `"ieee"`, `"tf32"` or
//!   `"bf16"`. [`float32_matmul_precision`] maps the effective `matmul`
//!   precision back, and, like PyTorch when the legacy and new APIs are
//!   mixed, is an error when backends disagree.
//!
//! # Reduced-precision GEMM switches (per backend)
//!
//! PyTorch's defaults: `allow_fp16_reduced_precision_reduction = true`
//! (split-K partial sums of an `f16` GEMM may be rounded to `f16`),
//! `allow_bf16_reduced_precision_reduction = true` (the same in `bf16`),
//! `allow_fp16_accumulation = false` (accumulate `f16` GEMMs in `f32`).
//!
//! [`matmul_mode`] gathers everything a matmul kernel needs into one
//! [`MatmulMode`], and [`MatmulMode::plan`] turns it into kernel
//! parameters for one input type ([`MatmulPlan`]).
//!
//! # Threads and scoped overrides (Note [Precision scopes])
//!
//! The settings are process-wide, as PyTorch's are: the setters change
//! them for every thread (behind a lock; readers take a shared lock).
//! A [`Scope`] is different: [`Scope::enter`] overrides settings on the
//! calling thread only, until its [`PrecisionGuard`] drops, which restores
//! exactly what was there (scopes nest). Thread-local, because a scope in
//! a test or a critical section must not change what other threads'
//! operators compute meanwhile; an operator resolves its mode on the
//! thread that calls it, before it launches, so the override reaches the
//! kernel even when the work runs on another thread. The guard is not
//! `Send` (it must drop on the thread it was made on).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::{LazyLock, PoisonError, RwLock};

use crate::core::DeviceType;
use crate::{Error, Result};

/// The operator family of matrix multiplications (`mm`, `bmm`, `linear`,
/// `matmul`).
pub const MATMUL: &str = "matmul";

/// One level's `fp32_precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp32Precision {
    /// Full `f32` ("ieee").
    Ieee,
    /// Inputs rounded to TensorFloat-32 (10 explicit mantissa bits),
    /// accumulated in `f32` ("tf32").
    Tf32,
    /// Inputs rounded to bfloat16 (7 explicit mantissa bits), accumulated
    /// in `f32` ("bf16").
    Bf16,
    /// Inherit from the parent level ("none").
    None,
}

impl Fp32Precision {
    /// Every value, in the order error messages list them.
    pub const ALL: [Fp32Precision; 4] = [
        Fp32Precision::Ieee,
        Fp32Precision::Tf32,
        Fp32Precision::Bf16,
        Fp32Precision::None,
    ];

    /// The name PyTorch uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Fp32Precision::Ieee => "ieee",
            Fp32Precision::Tf32 => "tf32",
            Fp32Precision::Bf16 => "bf16",
            Fp32Precision::None => "none",
        }
    }
}

impl fmt::Display for Fp32Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// At most this many characters of a bad value are quoted in an error.
const QUOTE: usize = 32;

fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(QUOTE).collect();
    if s.chars().count() > QUOTE {
        q.push_str("...");
    }
    format!("{q:?}")
}

impl FromStr for Fp32Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Fp32Precision> {
        Fp32Precision::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "invalid fp32_precision {}: expected one of \"ieee\", \"tf32\", \"bf16\", \"none\"",
                    quote(s)
                ))
            })
    }
}

/// The legacy setting of `set_float32_matmul_precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Float32MatmulPrecision {
    /// `f32` internally ("highest" = `ieee`).
    Highest,
    /// TensorFloat-32 internally ("high" = `tf32`).
    High,
    /// bfloat16 internally ("medium" = `bf16`).
    Medium,
}

impl Float32MatmulPrecision {
    /// The name PyTorch uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Float32MatmulPrecision::Highest => "highest",
            Float32MatmulPrecision::High => "high",
            Float32MatmulPrecision::Medium => "medium",
        }
    }

    /// The `fp32_precision` it stands for.
    pub fn fp32(self) -> Fp32Precision {
        match self {
            Float32MatmulPrecision::Highest => Fp32Precision::Ieee,
            Float32MatmulPrecision::High => Fp32Precision::Tf32,
            Float32MatmulPrecision::Medium => Fp32Precision::Bf16,
        }
    }

    fn from_fp32(p: Fp32Precision) -> Float32MatmulPrecision {
        match p {
            Fp32Precision::Tf32 => Float32MatmulPrecision::High,
            Fp32Precision::Bf16 => Float32MatmulPrecision::Medium,
            Fp32Precision::Ieee | Fp32Precision::None => Float32MatmulPrecision::Highest,
        }
    }
}

impl fmt::Display for Float32MatmulPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Float32MatmulPrecision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Float32MatmulPrecision> {
        match s {
            "highest" => Ok(Float32MatmulPrecision::Highest),
            "high" => Ok(Float32MatmulPrecision::High),
            "medium" => Ok(Float32MatmulPrecision::Medium),
            _ => Err(Error::invalid(format!(
                "invalid float32 matmul precision {}: expected one of \"highest\", \"high\", \"medium\"",
                quote(s)
            ))),
        }
    }
}

/// A value a setter accepts: an [`Fp32Precision`] or its name.
pub trait IntoFp32Precision {
    /// The precision, or an error naming the valid values.
    fn into_fp32_precision(self) -> Result<Fp32Precision>;
}

impl IntoFp32Precision for Fp32Precision {
    fn into_fp32_precision(self) -> Result<Fp32Precision> {
        Ok(self)
    }
}

impl IntoFp32Precision for &str {
    fn into_fp32_precision(self) -> Result<Fp32Precision> {
        self.parse()
    }
}

impl IntoFp32Precision for &String {
    fn into_fp32_precision(self) -> Result<Fp32Precision> {
        self.parse()
    }
}

/// Checks an operator family's name: lower-case ASCII letters, digits,
/// `_` and `.`, 1 to 64 characters.
fn check_family(family: &str) -> Result<()> {
    let ok = !family.is_empty()
        && family.len() <= 64
        && family
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "invalid operator family {}: expected 1 to 64 lower-case letters, digits, '_' or '.' \
             (such as \"matmul\")",
            quote(family)
        )))
    }
}

fn check_global(p: Fp32Precision) -> Result<Fp32Precision> {
    if p == Fp32Precision::None {
        return Err(Error::invalid(
            "invalid global fp32_precision \"none\": the global level has no parent to inherit \
             from; expected one of \"ieee\", \"tf32\", \"bf16\"",
        ));
    }
    Ok(p)
}

/// One setting a scope overrides or a setter changes.
#[derive(Clone, Debug, PartialEq)]
enum Key {
    Global,
    Backend(DeviceType),
    Family(DeviceType, String),
    Fp16Reduction(DeviceType),
    Bf16Reduction(DeviceType),
    Fp16Accumulation(DeviceType),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Precision(Fp32Precision),
    Flag(bool),
}

/// The process-wide settings.
#[derive(Debug)]
struct Settings {
    global: Fp32Precision,
    backend: [Fp32Precision; DeviceType::COUNT],
    family: HashMap<(DeviceType, String), Fp32Precision>,
    fp16_reduction: [bool; DeviceType::COUNT],
    bf16_reduction: [bool; DeviceType::COUNT],
    fp16_accumulation: [bool; DeviceType::COUNT],
}

impl Settings {
    fn defaults() -> Settings {
        Settings {
            global: Fp32Precision::Ieee,
            backend: [Fp32Precision::None; DeviceType::COUNT],
            family: HashMap::new(),
            fp16_reduction: [true; DeviceType::COUNT],
            bf16_reduction: [true; DeviceType::COUNT],
            fp16_accumulation: [false; DeviceType::COUNT],
        }
    }

    fn get(&self, key: &Key) -> Value {
        let slot = |ty: &DeviceType| usize::from(ty.code());
        match key {
            Key::Global => Value::Precision(self.global),
            Key::Backend(ty) => Value::Precision(self.backend[slot(ty)]),
            Key::Family(ty, f) => Value::Precision(
                self.family
                    .get(&(*ty, f.clone()))
                    .copied()
                    .unwrap_or(Fp32Precision::None),
            ),
            Key::Fp16Reduction(ty) => Value::Flag(self.fp16_reduction[slot(ty)]),
            Key::Bf16Reduction(ty) => Value::Flag(self.bf16_reduction[slot(ty)]),
            Key::Fp16Accumulation(ty) => Value::Flag(self.fp16_accumulation[slot(ty)]),
        }
    }

    fn set(&mut self, key: Key, value: Value) {
        let slot = |ty: DeviceType| usize::from(ty.code());
        match (key, value) {
            (Key::Global, Value::Precision(p)) => self.global = p,
            (Key::Backend(ty), Value::Precision(p)) => self.backend[slot(ty)] = p,
            (Key::Family(ty, f), Value::Precision(p)) => {
                if p == Fp32Precision::None {
                    self.family.remove(&(ty, f));
                } else {
                    self.family.insert((ty, f), p);
                }
            }
            (Key::Fp16Reduction(ty), Value::Flag(b)) => self.fp16_reduction[slot(ty)] = b,
            (Key::Bf16Reduction(ty), Value::Flag(b)) => self.bf16_reduction[slot(ty)] = b,
            (Key::Fp16Accumulation(ty), Value::Flag(b)) => self.fp16_accumulation[slot(ty)] = b,
            // Keys and values are paired by this module's functions only.
            _ => {}
        }
    }
}

static SETTINGS: LazyLock<RwLock<Settings>> = LazyLock::new(|| RwLock::new(Settings::defaults()));

thread_local! {
    /// This thread's scope overrides, innermost last.
    static SCOPES: RefCell<Vec<(Key, Value)>> = const { RefCell::new(Vec::new()) };
}

/// The value of `key` on this thread: the innermost scope's override, or
/// the process-wide setting.
fn lookup(key: &Key) -> Value {
    let scoped = SCOPES.with(|s| {
        s.borrow()
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    });
    scoped.unwrap_or_else(|| {
        SETTINGS
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
    })
}

fn precision_of(key: &Key) -> Fp32Precision {
    match lookup(key) {
        Value::Precision(p) => p,
        Value::Flag(_) => Fp32Precision::None,
    }
}

fn flag_of(key: &Key) -> bool {
    matches!(lookup(key), Value::Flag(true))
}

fn write(key: Key, value: Value) {
    SETTINGS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .set(key, value);
}

/// Sets the global `fp32_precision` (`torch.backends.fp32_precision`); not
/// `"none"`.
pub fn set_global_fp32_precision(p: impl IntoFp32Precision) -> Result<()> {
    let p = check_global(p.into_fp32_precision()?)?;
    write(Key::Global, Value::Precision(p));
    Ok(())
}

/// The global `fp32_precision` (default `ieee`).
pub fn global_fp32_precision() -> Fp32Precision {
    precision_of(&Key::Global)
}

/// Sets `ty`'s backend-level `fp32_precision` (`"none"` inherits the
/// global one).
pub fn set_backend_fp32_precision(ty: DeviceType, p: impl IntoFp32Precision) -> Result<()> {
    write(Key::Backend(ty), Value::Precision(p.into_fp32_precision()?));
    Ok(())
}

/// `ty`'s backend-level `fp32_precision` as set (default `none`).
pub fn backend_fp32_precision(ty: DeviceType) -> Fp32Precision {
    precision_of(&Key::Backend(ty))
}

/// Sets the `fp32_precision` of operator family `family` on `ty`
/// (`torch.backends.cuda.matmul.fp32_precision = "tf32"` is
/// `set_fp32_precision(DeviceType::Cuda, "matmul", "tf32")`).
pub fn set_fp32_precision(ty: DeviceType, family: &str, p: impl IntoFp32Precision) -> Result<()> {
    check_family(family)?;
    let p = p.into_fp32_precision()?;
    write(Key::Family(ty, family.to_owned()), Value::Precision(p));
    Ok(())
}

/// The `fp32_precision` of `family` on `ty` as set (default `none`).
pub fn fp32_precision(ty: DeviceType, family: &str) -> Result<Fp32Precision> {
    check_family(family)?;
    Ok(precision_of(&Key::Family(ty, family.to_owned())))
}

/// The precision an operator of `family` on `ty` runs with: the first of
/// family, backend and global that is not `none` (on this thread, with its
/// scopes). Never `None`.
pub fn effective(ty: DeviceType, family: &str) -> Result<Fp32Precision> {
    check_family(family)?;
    Ok(resolve(ty, family))
}

fn resolve(ty: DeviceType, family: &str) -> Fp32Precision {
    [
        Key::Family(ty, family.to_owned()),
        Key::Backend(ty),
        Key::Global,
    ]
    .iter()
    .map(precision_of)
    .find(|&p| p != Fp32Precision::None)
    .unwrap_or(Fp32Precision::Ieee)
}

/// `torch.backends.cuda.matmul.allow_tf32 = allow` for `ty`: its `matmul`
/// family becomes `tf32` or `ieee`.
pub fn set_allow_tf32(ty: DeviceType, allow: bool) {
    let p = if allow {
        Fp32Precision::Tf32
    } else {
        Fp32Precision::Ieee
    };
    write(Key::Family(ty, MATMUL.to_owned()), Value::Precision(p));
}

/// Whether `ty`'s matmuls may use TF32 (default false).
pub fn allow_tf32(ty: DeviceType) -> bool {
    resolve(ty, MATMUL) == Fp32Precision::Tf32
}

/// `torch.set_float32_matmul_precision`: `"highest"`, `"high"` or
/// `"medium"`, for the `matmul` family of every device type.
pub fn set_float32_matmul_precision(precision: &str) -> Result<()> {
    let p = precision.parse::<Float32MatmulPrecision>()?.fp32();
    let mut s = SETTINGS.write().unwrap_or_else(PoisonError::into_inner);
    for ty in DeviceType::ALL {
        s.set(Key::Family(ty, MATMUL.to_owned()), Value::Precision(p));
    }
    Ok(())
}

/// `torch.get_float32_matmul_precision`: the effective `matmul` precision
/// of every device type, by its legacy name. When device types differ
/// (set per backend), there is no one answer: an error lists them.
pub fn float32_matmul_precision() -> Result<Float32MatmulPrecision> {
    let each: Vec<(DeviceType, Fp32Precision)> = DeviceType::ALL
        .into_iter()
        .map(|ty| (ty, resolve(ty, MATMUL)))
        .collect();
    let first = each[0].1;
    if each.iter().all(|&(_, p)| p == first) {
        return Ok(Float32MatmulPrecision::from_fp32(first));
    }
    let list: Vec<String> = each
        .iter()
        .map(|(ty, p)| format!("{}: {p}", ty.name_lower()))
        .collect();
    Err(Error::invalid(format!(
        "the float32 matmul precision differs between device types ({}); ask per device type with \
         keel::precision::effective(device_type, \"matmul\")",
        list.join(", ")
    )))
}

/// `allow_fp16_reduced_precision_reduction` for `ty` (default true).
pub fn set_allow_fp16_reduced_precision_reduction(ty: DeviceType, allow: bool) {
    write(Key::Fp16Reduction(ty), Value::Flag(allow));
}

/// Whether `f16` GEMMs on `ty` may round split-K partial sums to `f16`.
pub fn allow_fp16_reduced_precision_reduction(ty: DeviceType) -> bool {
    flag_of(&Key::Fp16Reduction(ty))
}

/// `allow_bf16_reduced_precision_reduction` for `ty` (default true).
pub fn set_allow_bf16_reduced_precision_reduction(ty: DeviceType, allow: bool) {
    write(Key::Bf16Reduction(ty), Value::Flag(allow));
}

/// Whether `bf16` GEMMs on `ty` may round split-K partial sums to `bf16`.
pub fn allow_bf16_reduced_precision_reduction(ty: DeviceType) -> bool {
    flag_of(&Key::Bf16Reduction(ty))
}

/// `allow_fp16_accumulation` for `ty` (default false).
pub fn set_allow_fp16_accumulation(ty: DeviceType, allow: bool) {
    write(Key::Fp16Accumulation(ty), Value::Flag(allow));
}

/// Whether `f16` GEMMs on `ty` may accumulate in `f16`.
pub fn allow_fp16_accumulation(ty: DeviceType) -> bool {
    flag_of(&Key::Fp16Accumulation(ty))
}

/// Puts every setting back to PyTorch's defaults (process-wide; scopes
/// on any thread stay as they are).
pub fn reset_to_defaults() {
    *SETTINGS.write().unwrap_or_else(PoisonError::into_inner) = Settings::defaults();
}

/// How a kernel rounds values to a narrower format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Keep `f32`.
    None,
    /// To TensorFloat-32: 10 explicit mantissa bits, round to nearest even.
    Tf32,
    /// To bfloat16: 7 explicit mantissa bits, round to nearest even.
    Bf16,
    /// To IEEE half: 10 explicit mantissa bits, 5 exponent bits.
    F16,
}

impl Rounding {
    /// A short name (for profiler arguments).
    pub fn as_str(self) -> &'static str {
        match self {
            Rounding::None => "none",
            Rounding::Tf32 => "tf32",
            Rounding::Bf16 => "bf16",
            Rounding::F16 => "f16",
        }
    }
}

/// The element type of a matmul's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulInput {
    /// `f32` inputs: the `fp32_precision` decides their rounding.
    F32,
    /// `f16` inputs.
    F16,
    /// `bf16` inputs.
    Bf16,
}

/// Everything the policy says about a matmul on one backend, resolved on
/// the calling thread: what a kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulMode {
    /// The effective `fp32_precision` of `matmul` (never `None`).
    pub fp32: Fp32Precision,
    /// `allow_fp16_reduced_precision_reduction`.
    pub fp16_reduced_precision_reduction: bool,
    /// `allow_bf16_reduced_precision_reduction`.
    pub bf16_reduced_precision_reduction: bool,
    /// `allow_fp16_accumulation`.
    pub fp16_accumulation: bool,
}

/// What a matmul kernel does for one input type under a [`MatmulMode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulPlan {
    /// How inputs are rounded before they are multiplied.
    pub input_rounding: Rounding,
    /// Whether products are accumulated in `f16` (else `f32`).
    pub accumulate_in_f16: bool,
    /// How split-K partial sums are rounded before they are combined.
    pub partial_rounding: Rounding,
}

impl MatmulMode {
    /// The plan for inputs of type `input`.
    pub fn plan(&self, input: MatmulInput) -> MatmulPlan {
        match input {
            MatmulInput::F32 => MatmulPlan {
                input_rounding: match self.fp32 {
                    Fp32Precision::Tf32 => Rounding::Tf32,
                    Fp32Precision::Bf16 => Rounding::Bf16,
                    Fp32Precision::Ieee | Fp32Precision::None => Rounding::None,
                },
                accumulate_in_f16: false,
                partial_rounding: Rounding::None,
            },
            MatmulInput::F16 => MatmulPlan {
                input_rounding: Rounding::F16,
                accumulate_in_f16: self.fp16_accumulation,
                partial_rounding: if self.fp16_reduced_precision_reduction {
                    Rounding::F16
                } else {
                    Rounding::None
                },
            },
            MatmulInput::Bf16 => MatmulPlan {
                input_rounding: Rounding::Bf16,
                accumulate_in_f16: false,
                partial_rounding: if self.bf16_reduced_precision_reduction {
                    Rounding::Bf16
                } else {
                    Rounding::None
                },
            },
        }
    }

    /// The mode as `key=value` pairs, for a profiler span's arguments.
    pub fn describe(&self) -> String {
        format!(
            "fp32_precision={} allow_fp16_reduced_precision_reduction={} \
             allow_bf16_reduced_precision_reduction={} allow_fp16_accumulation={}",
            self.fp32,
            self.fp16_reduced_precision_reduction,
            self.bf16_reduced_precision_reduction,
            self.fp16_accumulation
        )
    }
}

/// The [`MatmulMode`] of `ty` on this thread.
pub fn matmul_mode(ty: DeviceType) -> MatmulMode {
    MatmulMode {
        fp32: resolve(ty, MATMUL),
        fp16_reduced_precision_reduction: allow_fp16_reduced_precision_reduction(ty),
        bf16_reduced_precision_reduction: allow_bf16_reduced_precision_reduction(ty),
        fp16_accumulation: allow_fp16_accumulation(ty),
    }
}

/// Thread-local overrides, built then entered (Note [Precision scopes]):
///
/// ```
/// use keel::DeviceType;
/// use keel::precision::{self, Fp32Precision, Scope};
///
/// let _g = Scope::new()
///     .fp32_precision(DeviceType::Cpu, "matmul", "bf16")?
///     .enter();
/// assert_eq!(precision::effective(DeviceType::Cpu, "matmul")?, Fp32Precision::Bf16);
/// # Ok::<(), keel::Error>(())
/// ```
#[derive(Debug, Default, Clone)]
#[must_use = "a scope does nothing until entered"]
pub struct Scope {
    entries: Vec<(Key, Value)>,
}

impl Scope {
    /// An empty scope.
    pub fn new() -> Scope {
        Scope::default()
    }

    /// Overrides the global `fp32_precision` (not `"none"`).
    pub fn global_fp32_precision(mut self, p: impl IntoFp32Precision) -> Result<Scope> {
        let p = check_global(p.into_fp32_precision()?)?;
        self.entries.push((Key::Global, Value::Precision(p)));
        Ok(self)
    }

    /// Overrides `ty`'s backend-level `fp32_precision`.
    pub fn backend_fp32_precision(
        mut self,
        ty: DeviceType,
        p: impl IntoFp32Precision,
    ) -> Result<Scope> {
        let p = p.into_fp32_precision()?;
        self.entries.push((Key::Backend(ty), Value::Precision(p)));
        Ok(self)
    }

    /// Overrides the `fp32_precision` of `family` on `ty`.
    pub fn fp32_precision(
        mut self,
        ty: DeviceType,
        family: &str,
        p: impl IntoFp32Precision,
    ) -> Result<Scope> {
        check_family(family)?;
        let p = p.into_fp32_precision()?;
        self.entries
            .push((Key::Family(ty, family.to_owned()), Value::Precision(p)));
        Ok(self)
    }

    /// Overrides `allow_tf32` of `ty` (its `matmul` family).
    pub fn allow_tf32(mut self, ty: DeviceType, allow: bool) -> Scope {
        let p = if allow {
            Fp32Precision::Tf32
        } else {
            Fp32Precision::Ieee
        };
        self.entries
            .push((Key::Family(ty, MATMUL.to_owned()), Value::Precision(p)));
        self
    }

    /// Overrides the float32 matmul precision of every device type.
    pub fn float32_matmul_precision(mut self, precision: &str) -> Result<Scope> {
        let p = precision.parse::<Float32MatmulPrecision>()?.fp32();
        for ty in DeviceType::ALL {
            self.entries
                .push((Key::Family(ty, MATMUL.to_owned()), Value::Precision(p)));
        }
        Ok(self)
    }

    /// Overrides `allow_fp16_reduced_precision_reduction` of `ty`.
    pub fn allow_fp16_reduced_precision_reduction(mut self, ty: DeviceType, allow: bool) -> Scope {
        self.entries
            .push((Key::Fp16Reduction(ty), Value::Flag(allow)));
        self
    }

    /// Overrides `allow_bf16_reduced_precision_reduction` of `ty`.
    pub fn allow_bf16_reduced_precision_reduction(mut self, ty: DeviceType, allow: bool) -> Scope {
        self.entries
            .push((Key::Bf16Reduction(ty), Value::Flag(allow)));
        self
    }

    /// Overrides `allow_fp16_accumulation` of `ty`.
    pub fn allow_fp16_accumulation(mut self, ty: DeviceType, allow: bool) -> Scope {
        self.entries
            .push((Key::Fp16Accumulation(ty), Value::Flag(allow)));
        self
    }

    /// Applies the overrides to this thread until the guard drops.
    pub fn enter(self) -> PrecisionGuard {
        let depth = SCOPES.with(|s| {
            let mut s = s.borrow_mut();
            let depth = s.len();
            s.extend(self.entries);
            depth
        });
        PrecisionGuard {
            depth,
            _not_send: PhantomData,
        }
    }
}

/// Restores this thread's precision settings when dropped (see [`Scope`]).
#[derive(Debug)]
#[must_use = "the overrides end when the guard drops"]
pub struct PrecisionGuard {
    depth: usize,
    _not_send: PhantomData<*const ()>,
}

impl Drop for PrecisionGuard {
    fn drop(&mut self) {
        // Dropping an outer guard first also ends the inner scopes; an
        // inner guard dropped after it then finds nothing to remove.
        SCOPES.with(|s| s.borrow_mut().truncate(self.depth));
    }
}
