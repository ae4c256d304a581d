// matmul_coop's fragments on devices with 8 x 8 x 8 f16 cooperative
// matrices at subgroup scope and subgroups of 8 (Mesa's lavapipe: 26.1
// and 26.2 have them, 25.0 not): sixteen subgroups make the kernel's 128
// invocations. After coop_matrix.wgsl.

const FRAG: u32 = 8u;
const SUBGROUP: u32 = 8u;
alias FragA = coop_mat8x8<f16, A>;
alias FragB = coop_mat8x8<f16, B>;
alias FragC = coop_mat8x8<f32, C>;
