//! What a kernel receives and returns: [`Arg`], [`OpCall`],
//! [`KernelOutcome`], and operator schemas ([`OpSchema`]).

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::Buffer;
use crate::core::{Device, Stream};
use crate::kernel::Kernel;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// One argument of an operator call.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A floating-point scalar (`Scalar` in a schema: `alpha`, a fill
    /// value, `low`/`high` of a random operator).
    Scalar(f64),
    /// An integer (`int` in a schema: a dimension, a seed, an offset).
    Int(i64),
}

impl<'a> From<&'a Tensor> for Arg<'a> {
    fn from(t: &'a Tensor) -> Arg<'a> {
        Arg::Tensor(t)
    }
}

impl From<f64> for Arg<'_> {
    fn from(v: f64) -> Self {
        Arg::Scalar(v)
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

/// The kind of one schema argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A tensor (`Tensor`).
    Tensor,
    /// A floating-point scalar (`Scalar`).
    Scalar,
    /// An integer (`int`).
    Int,
}

impl ArgKind {
    #[inline]
    pub(crate) fn of(arg: &Arg<'_>) -> ArgKind {
        match arg {
            Arg::Tensor(_) => ArgKind::Tensor,
            Arg::Scalar(_) => ArgKind::Scalar,
            Arg::Int(_) => ArgKind::Int,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ArgKind::Tensor => "Tensor",
            ArgKind::Scalar => "Scalar",
            ArgKind::Int => "int",
        }
    }
}

/// An operator's signature: its arguments, which one it writes in place
/// (`fill_`, `copy_`), and whether its tensors must share one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSchema {
    /// The operator's name (`add`, `fill_`, ...).
    pub name: String,
    /// The arguments, by name and kind, in order.
    pub args: Vec<(String, ArgKind)>,
    /// The argument an in-place operator writes (and returns); `None` for
    /// an operator that returns new tensors.
    pub mutates: Option<usize>,
    /// Whether every tensor argument must be on one device (true but for
    /// `copy_`, whose source may be anywhere).
    pub same_device: bool,
}

impl OpSchema {
    /// A functional operator whose tensors share one device.
    pub fn new(name: &str, args: &[(&str, ArgKind)]) -> OpSchema {
        OpSchema {
            name: name.to_owned(),
            args: args.iter().map(|(n, k)| ((*n).to_owned(), *k)).collect(),
            mutates: None,
            same_device: true,
        }
    }

    /// The same schema, writing argument `index` in place.
    pub fn in_place(mut self, index: usize) -> OpSchema {
        self.mutates = Some(index);
        self
    }

    /// The same schema, allowing tensors on different devices.
    pub fn any_device(mut self) -> OpSchema {
        self.same_device = false;
        self
    }

    /// The error for `args` that do not match the schema.
    #[cold]
    pub(crate) fn mismatch(&self, args: &[Arg<'_>]) -> Error {
        let names: Vec<&str> = args.iter().map(|a| ArgKind::of(a).name()).collect();
        Error::invalid(format!(
            "{}: expected arguments {self}, found ({})",
            self.name,
            names.join(", ")
        ))
    }
}

impl fmt::Display for OpSchema {
    /// PyTorch's schema notation: `add(Tensor self, Tensor other)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, (name, kind)) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let mark = if self.mutates == Some(i) { "(a!)" } else { "" };
            write!(f, "{}{mark} {name}", kind.name())?;
        }
        f.write_str(")")
    }
}

/// One call of an operator, as a kernel sees it.
pub struct OpCall<'a> {
    /// The operator's schema.
    pub schema: &'a OpSchema,
    /// The arguments, checked against the schema.
    pub args: &'a [Arg<'a>],
    /// The device the call dispatched on (the tensors' device; for
    /// `copy_`, the destination's).
    pub device: Device,
    /// The current stream of `device`: where a kernel enqueues its work.
    pub stream: Stream,
}

impl fmt::Debug for OpCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpCall")
            .field("schema", &self.schema)
            .field("args", &self.args)
            .field("device", &self.device)
            .field("stream", &self.stream)
            .finish()
    }
}

impl<'a> OpCall<'a> {
    /// The operator's name.
    pub fn op(&self) -> &str {
        &self.schema.name
    }

    /// Argument `i` as a tensor (an error names the operator otherwise).
    #[inline]
    pub fn tensor(&self, i: usize) -> Result<&'a Tensor> {
        match self.args.get(i) {
            Some(Arg::Tensor(t)) => Ok(t),
            _ => Err(self.bad_arg(i, "a tensor")),
        }
    }

    /// Argument `i` as a scalar (an `int` argument converts).
    pub fn scalar(&self, i: usize) -> Result<f64> {
        match self.args.get(i) {
            Some(Arg::Scalar(v)) => Ok(*v),
            Some(Arg::Int(v)) => Ok(*v as f64),
            _ => Err(self.bad_arg(i, "a scalar")),
        }
    }

    /// Argument `i` as an integer.
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.args.get(i) {
            Some(Arg::Int(v)) => Ok(*v),
            _ => Err(self.bad_arg(i, "an int")),
        }
    }

    /// A new, uninitialised output tensor for this call: on its device,
    /// its block belonging to the call's stream ([`Tensor::empty_on`]).
    pub fn empty(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::empty_on(shape, dtype, &self.stream)
    }

    /// A new, uninitialised output of `like`'s shape and dtype for this
    /// call ([`OpCall::empty`] without recomputing the size).
    #[inline]
    pub fn empty_like(&self, like: &Tensor) -> Result<Tensor> {
        Tensor::empty_like_on(like, &self.stream)
    }

    #[cold]
    fn bad_arg(&self, i: usize, what: &str) -> Error {
        Error::invalid(format!(
            "{}: expected argument {i} to be {what} (schema {})",
            self.op(),
            self.schema
        ))
    }

    /// Launches `kernel` on the call's stream.
    pub(crate) fn launch_kernel(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&Buffer],
        params: &[u8],
    ) -> Result<()> {
        self.stream.launch(kernel, grid, buffers, params)
    }

    /// A call of the same operator with other arguments on another
    /// device (what a fallback makes).
    pub fn with_args<'b>(
        &'b self,
        args: &'b [Arg<'b>],
        device: Device,
        stream: Stream,
    ) -> OpCall<'b> {
        OpCall {
            schema: self.schema,
            args,
            device,
            stream,
        }
    }
}

/// An operator's results: almost always one tensor, held inline (no
/// allocation); `smallvec::SmallVec` derefs to a slice, and converts from
/// a `Vec` (`outs.into()`).
pub type Outputs = SmallVec<[Tensor; 1]>;

/// What a kernel did.
#[derive(Debug)]
pub enum KernelOutcome {
    /// It enqueued the work; these are the operator's results (for an
    /// in-place operator, the tensor it wrote).
    Done(Outputs),
    /// It does not handle these arguments (a dtype it has no code for:
    /// Keel's GPU kernels are `f32`-only); the device type's fallback runs
    /// instead, or the call fails with this reason when there is none.
    Declined(String),
}

impl KernelOutcome {
    /// `Done` with one result, the usual case.
    #[inline]
    pub fn one(t: Tensor) -> KernelOutcome {
        KernelOutcome::Done(SmallVec::from_buf([t]))
    }
}

/// A kernel for one operator on one device type.
pub type OpKernel = Arc<dyn Fn(&OpCall<'_>) -> Result<KernelOutcome> + Send + Sync>;

/// A fallback for one device type: runs any operator that has no kernel
/// there (or whose kernel declined). [`cpu_fallback`](super::cpu_fallback)
/// is the usual one.
pub type Fallback = Arc<dyn Fn(&OpCall<'_>) -> Result<Outputs> + Send + Sync>;

/// The dtype every tensor argument of `call` has (all tensors of such a
/// call share one dtype), or an error naming the first that differs.
#[inline]
pub(crate) fn common_dtype(call: &OpCall<'_>) -> Result<DType> {
    let mut dtype = None;
    for a in call.args {
        if let Arg::Tensor(t) = a {
            match dtype {
                None => dtype = Some(t.dtype()),
                Some(d) if d == t.dtype() => {}
                Some(d) => return Err(dtype_mismatch(call, d, t.dtype())),
            }
        }
    }
    dtype.ok_or_else(|| Error::invalid(format!("{}: expected a tensor argument", call.op())))
}

/// The two tensors of a call that takes exactly two, and their dtype
/// (both have it); otherwise [`common_dtype`]'s error, then
/// [`OpCall::tensor`]'s, as a kernel checking them in that order reports.
#[inline]
pub(crate) fn two_tensors<'a>(call: &OpCall<'a>) -> Result<(&'a Tensor, &'a Tensor, DType)> {
    match call.args {
        [Arg::Tensor(a), Arg::Tensor(b)] if a.dtype() == b.dtype() => Ok((a, b, a.dtype())),
        _ => two_tensors_slow(call),
    }
}

#[cold]
#[inline(never)]
fn two_tensors_slow<'a>(call: &OpCall<'a>) -> Result<(&'a Tensor, &'a Tensor, DType)> {
    let dtype = common_dtype(call)?;
    Ok((call.tensor(0)?, call.tensor(1)?, dtype))
}

#[cold]
fn dtype_mismatch(call: &OpCall<'_>, d: DType, found: DType) -> Error {
    Error::invalid(format!(
        "{}: expected every tensor to have dtype {d}, found {found}",
        call.op()
    ))
}
