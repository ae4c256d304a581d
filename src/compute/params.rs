//! Parameter blocks: each launch function declares its kernel's parameter
//! layout once ([`Launch`]), builds the block from it, and a test checks
//! every layout in [`KERNELS`](super::KERNELS) against its PTX entry
//! point, so the three cannot drift.
//!
//! Keel's convention: a kernel binds its buffers in order, then a
//! parameter block of 32-bit values. WGSL reads the block as a uniform
//! struct at `@binding(bindings)`; PTX takes the buffers as `.u64` device
//! pointers and then one `.u32`/`.f32` parameter per value; a Rust kernel
//! reads it with [`CpuInvocation::param_u32`](crate::kernel::CpuInvocation::param_u32).

use crate::Buffer;
use crate::core::Stream;
use crate::kernel::{Kernel, kernels};
use crate::{Error, Result};

/// The type of one 32-bit value of a parameter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// An unsigned 32-bit integer (PTX `.u32`, `.b32` or `.s32`).
    U32,
    /// A 32-bit float (PTX `.f32`).
    F32,
}

/// One value of a parameter block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param {
    /// A `u32`.
    U32(u32),
    /// An `f32`.
    F32(f32),
}

impl Param {
    fn ty(self) -> ParamType {
        match self {
            Param::U32(_) => ParamType::U32,
            Param::F32(_) => ParamType::F32,
        }
    }
}

/// A kernel with the parameter layout its launch code passes.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The kernel.
    pub kernel: Kernel,
    /// Its parameter block, value by value.
    pub params: &'static [ParamType],
}

impl Launch {
    /// The parameter block for `values`, which must match
    /// [`params`](Self::params) in number and type.
    pub fn block(&self, values: &[Param]) -> Result<Vec<u8>> {
        let found: Vec<ParamType> = values.iter().map(|v| v.ty()).collect();
        if found != self.params {
            return Err(Error::Kernel {
                kernel: self.kernel.name.to_owned(),
                message: format!("expected parameters {:?}, found {found:?}", self.params),
            });
        }
        Ok(values
            .iter()
            .flat_map(|v| match *v {
                Param::U32(u) => u.to_le_bytes(),
                Param::F32(f) => f.to_le_bytes(),
            })
            .collect())
    }

    /// Launches the kernel on `stream` over `grid` with `buffers` and the
    /// block built from `values`.
    pub fn launch(
        &self,
        stream: &Stream,
        grid: [u32; 3],
        buffers: &[&Buffer],
        values: &[Param],
    ) -> Result<()> {
        let block = self.block(values)?;
        stream.launch(&self.kernel, grid, buffers, &block)
    }
}

use ParamType::{F32, U32};

/// The largest number of workgroups in one grid dimension every backend
/// accepts (Vulkan's guaranteed `maxComputeWorkGroupCount`).
const MAX_GROUPS_X: u64 = 65_535;

/// A 2-D grid of 256-wide workgroups covering `n` elements, as the
/// kernels of `shaders/ops/` and `matmul_round_inputs` index them
/// (element `(group.y * groups.x + group.x) * 256 + local.x`).
pub fn elementwise_grid(n: u64) -> [u32; 3] {
    let groups = n.div_ceil(256).max(1);
    if groups <= MAX_GROUPS_X {
        [groups as u32, 1, 1]
    } else {
        let y = groups.div_ceil(MAX_GROUPS_X);
        [MAX_GROUPS_X as u32, u32::try_from(y).unwrap_or(u32::MAX), 1]
    }
}

/// [`kernels::VECTOR_ADD`]: `n`.
pub const VECTOR_ADD: Launch = Launch {
    kernel: kernels::VECTOR_ADD,
    params: &[U32],
};
/// [`kernels::SAXPY`]: `n`, `alpha`.
pub const SAXPY: Launch = Launch {
    kernel: kernels::SAXPY,
    params: &[U32, F32],
};
/// [`kernels::SPIN`]: `n`, `iters`.
pub const SPIN: Launch = Launch {
    kernel: kernels::SPIN,
    params: &[U32, U32],
};

/// A dispatcher elementwise kernel (`shaders/ops/`): 256-wide workgroups,
/// one WGSL source (the dispatcher's CPU kernels, in `dispatch/cpu.rs`,
/// cover every dtype on the host).
const fn op_kernel(name: &'static str, bindings: usize, wgsl: &'static str) -> Kernel {
    Kernel {
        name,
        workgroup_size: [256, 1, 1],
        bindings,
        wgsl: Some(wgsl),
        ptx: None,
        cpu: None,
        strict_float: false,
    }
}

/// The dispatcher's `add` (f32): bindings `a`, `b`, `out`; `n`.
pub const OP_ADD_F32: Launch = Launch {
    kernel: op_kernel("add_f32", 3, include_str!("../../shaders/ops/add.wgsl")),
    params: &[U32],
};
/// The dispatcher's `mul` (f32): bindings `a`, `b`, `out`; `n`.
pub const OP_MUL_F32: Launch = Launch {
    kernel: op_kernel("mul_f32", 3, include_str!("../../shaders/ops/mul.wgsl")),
    params: &[U32],
};
/// The dispatcher's `add.Scalar` (f32): bindings `x`, `out`; `n`, `s`.
pub const OP_ADD_SCALAR_F32: Launch = Launch {
    kernel: op_kernel(
        "add_scalar_f32",
        2,
        include_str!("../../shaders/ops/add_scalar.wgsl"),
    ),
    params: &[U32, F32],
};
/// The dispatcher's `mul.Scalar` (f32): bindings `x`, `out`; `n`, `s`.
pub const OP_MUL_SCALAR_F32: Launch = Launch {
    kernel: op_kernel(
        "mul_scalar_f32",
        2,
        include_str!("../../shaders/ops/mul_scalar.wgsl"),
    ),
    params: &[U32, F32],
};
/// The dispatcher's `fill_` (f32): binding `x`; `n`, `value`.
pub const OP_FILL_F32: Launch = Launch {
    kernel: op_kernel("fill_f32", 1, include_str!("../../shaders/ops/fill.wgsl")),
    params: &[U32, F32],
};

/// The dispatcher's conversions between f32 and f16/bf16 (`copy_`
/// between dtypes; the f16/bf16 matmul): bindings `x`, `out`; `n`,
/// `mode` (0 f16 -> f32, 1 bf16 -> f32, 2 f32 -> f16, 3 f32 -> bf16).
/// 16-bit values are packed two to a word (one invocation per pair).
pub const OP_CAST: Launch = Launch {
    kernel: op_kernel(
        "cast_f32_half",
        2,
        concat!(
            include_str!("../../shaders/compute/rounding.wgsl"),
            include_str!("../../shaders/ops/cast.wgsl")
        ),
    ),
    params: &[U32, U32],
};

/// A dispatcher kernel that needs WGSL's `f16` (chosen only where
/// [`f16_storage`](super::f16_storage) says the device stores it).
const fn wgsl_op_kernel(name: &'static str, bindings: usize, wgsl: &'static str) -> Kernel {
    op_kernel(name, bindings, wgsl)
}

/// f16 -> f32 reading `array<f16>` natively (`enable f16;`): bindings
/// `x`, `out`; `n`; one invocation per element. Bit for bit
/// [`OP_CAST`]'s mode 0; runs only where
/// [`f16_storage`](super::f16_storage) is true (WGSL on Vulkan and wgpu).
pub const OP_CAST_F16_WIDEN: Launch = Launch {
    kernel: wgsl_op_kernel(
        "cast_f16_widen",
        2,
        include_str!("../../shaders/ops/cast_f16_widen.wgsl"),
    ),
    params: &[U32],
};
/// f32 -> f16 writing `array<f16>` natively: bindings `x`, `out`; `n`;
/// one invocation per element. Bit for bit [`OP_CAST`]'s mode 2 (round
/// to nearest even, overflow to infinity, subnormals kept, NaN 0x7e00);
/// runs only where [`f16_storage`](super::f16_storage) is true.
pub const OP_CAST_F16_NARROW: Launch = Launch {
    kernel: wgsl_op_kernel(
        "cast_f16_narrow",
        2,
        concat!(
            include_str!("../../shaders/ops/cast_f16_narrow.wgsl"),
            include_str!("../../shaders/compute/rounding.wgsl")
        ),
    ),
    params: &[U32],
};

/// The parameter types of PTX entry `name` in `ptx`, as written
/// (`"u64"`, `"u32"`, `"f32"`, ...), in order.
pub fn ptx_entry_params(ptx: &str, name: &str) -> Result<Vec<String>, String> {
    // Without `//` comments, which may hold parentheses or commas.
    let code: String = ptx
        .lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    let body = loop {
        let at = rest
            .find(".entry")
            .ok_or_else(|| format!("no `.entry {name}` in the PTX"))?;
        let after = &rest[at + ".entry".len()..];
        let trimmed = after.trim_start();
        if let Some(tail) = trimmed.strip_prefix(name)
            && tail.trim_start().starts_with('(')
        {
            break tail;
        }
        rest = after;
    };
    let open = body.find('(').ok_or("no parameter list")?;
    let close = body.find(')').ok_or("an unclosed parameter list")?;
    body[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            // `.param .u64 name` (optionally with `.align N` or `.ptr`).
            p.split_whitespace()
                .filter(|w| w.starts_with('.') && *w != ".param" && *w != ".align")
                .find(|w| !w.starts_with(".ptr"))
                .map(|w| w.trim_start_matches('.').to_owned())
                .ok_or_else(|| format!("a parameter without a type: `{p}`"))
        })
        .collect()
}

/// Checks `launch` against the PTX CUDA runs for it: the buffers as
/// `.u64`, then one 32-bit parameter of the declared type per value; PTX
/// generated from WGSL then takes the WGSL struct's remaining (padding)
/// words and each buffer's length as `.u64`.
pub fn check_ptx(launch: &Launch) -> Result<(), String> {
    let k = &launch.kernel;
    let ptx = k.ptx_source().map_err(|e| e.to_string())?;
    let found = ptx_entry_params(&ptx, k.name)?;
    let mut expected: Vec<&[&str]> = std::iter::repeat_n(&["u64"][..], k.bindings)
        .chain(launch.params.iter().map(|t| match t {
            U32 => &["u32", "b32", "s32"][..],
            F32 => &["f32", "b32"][..],
        }))
        .collect();
    if k.ptx.is_none() {
        // Generated PTX declares every word `.b32`: the types come from
        // the WGSL struct instead.
        let wgsl = k.wgsl.unwrap_or_default();
        let words = crate::wgsl::param_words(wgsl, k.name).map_err(|e| e.to_string())?;
        let declared: Vec<Option<ParamType>> = words
            .iter()
            .map(|w| match w {
                Some(crate::wgsl::ir::Ty::F32) => Some(F32),
                Some(crate::wgsl::ir::Ty::U32 | crate::wgsl::ir::Ty::I32) => Some(U32),
                _ => None,
            })
            .collect();
        let passed: Vec<Option<ParamType>> = launch.params.iter().map(|&t| Some(t)).collect();
        if declared.len() < passed.len() || declared[..passed.len()] != passed[..] {
            return Err(format!(
                "kernel '{}': the launch code passes {:?}, but the WGSL parameter struct holds {declared:?}",
                k.name, launch.params
            ));
        }
        expected.extend(std::iter::repeat_n(
            &["b32"][..],
            words.len() - launch.params.len(),
        ));
        expected.extend(std::iter::repeat_n(&["u64"][..], k.bindings));
    }
    let ok = found.len() == expected.len()
        && found
            .iter()
            .zip(&expected)
            .all(|(f, e)| e.contains(&f.as_str()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "kernel '{}': the launch code passes {} buffers (.u64) and {:?}, but the PTX entry takes {found:?}",
            k.name, k.bindings, launch.params
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drifted_layout_is_reported() {
        let mut wrong = SAXPY;
        wrong.params = &[U32, U32, F32];
        let e = check_ptx(&wrong).expect_err("a drifted layout");
        assert!(e.contains("saxpy") && e.contains("struct holds"), "{e}");
        wrong.params = &[F32, F32];
        assert!(check_ptx(&wrong).is_err());
        let mut fewer_buffers = SAXPY;
        fewer_buffers.kernel.bindings = 1;
        assert!(check_ptx(&fewer_buffers).is_err());
    }

    #[test]
    fn the_parser_reads_entry_parameters() {
        let ptx = ".visible .entry other(.param .u32 a)\n{}\n.visible .entry k(\n\t.param .u64 k_0,\n\t.param .align 4 .f32 k_1\n)\n{}";
        assert_eq!(ptx_entry_params(ptx, "k").expect("k"), ["u64", "f32"]);
        assert_eq!(ptx_entry_params(ptx, "other").expect("other"), ["u32"]);
        assert!(ptx_entry_params(ptx, "missing").is_err());
    }

    #[test]
    fn a_block_must_match_its_layout() {
        let b = SAXPY
            .block(&[Param::U32(3), Param::F32(2.0)])
            .expect("block");
        assert_eq!(b, [3, 0, 0, 0, 0, 0, 0, 64]);
        let e = SAXPY
            .block(&[Param::U32(3)])
            .expect_err("too few")
            .to_string();
        assert!(
            e.contains("saxpy") && e.contains("expected parameters"),
            "{e}"
        );
    }
}
