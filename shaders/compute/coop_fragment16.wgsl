// matmul_coop's fragments on devices with 16 x 16 x 16 f16 cooperative
// matrices at subgroup scope and subgroups of 32 (NVIDIA's tensor cores):
// four subgroups make the kernel's 128 invocations. After
// coop_matrix.wgsl.

const FRAG: u32 = 16u;
const SUBGROUP: u32 = 32u;
alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias FragC = coop_mat16x16<f32, C>;
