// The matvec's sums, shared by mul_mat.wgsl's `matvec` and matvec_fused.wgsl
// so that a fused dispatch gives, to the bit, what separate ones give.
// One workgroup of WG invocations takes one weight row and every column of
// x (m <= MAX_COLS): each invocation dequantizes its groups of 4 elements
// once and dots them with every column, so a decode step of m sequences
// reads each weight row once, not m times. Column c's sum is the same
// sequence of operations whatever m is.
// The including shader declares `p` (fields k, m), `x: array<f32>` ([k, m]
// f32), `const WG`, and includes TYPE_FILE (dequant4, dequant1) and
// reduce.wgsl before this file.

// Columns one dispatch takes: ops/mul_mat.rs's MATVEC_MAX_M.
const MAX_COLS: u32 = 8u;

// The pipeline's column bound: m rounded up to 1, 2, 4 or 8 (set by the
// launcher), so every loop over columns has a constant trip count once the
// pipeline is made, unrolls, and keeps the sums in registers (with only
// MAX_COLS, lavapipe ran a one-column decode 3.5x slower).
override COLS: u32 = MAX_COLS;

// This invocation's partial sums of the row at byte `rb` of W with x's
// columns 0..p.m (the rest stay 0). One group of 4 weights per step: 2 or 4
// consecutive groups per step measured slower on an H100 (Q4_0 4096x4096:
// 249 GB/s at 1, 229 at 2, 157 at 4; llama2-7b q4_0 decode 86, 80, 51 t/s).
fn partials(lid: u32, rb: u32) -> array<f32, MAX_COLS> {
    var s: array<f32, MAX_COLS>;
    let k4 = p.k / 4u;
    for (var q = lid; q < k4; q += WG) {
        let e = q * 4u;
        let w = dequant4(rb, e);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                let xb = c * p.k + e;
                s[c] += dot(w, vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]));
            }
        }
    }
    for (var e = k4 * 4u + lid; e < p.k; e += WG) {
        let w = dequant1(rb, e);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                s[c] += w * x[c * p.k + e];
            }
        }
    }
    return s;
}
