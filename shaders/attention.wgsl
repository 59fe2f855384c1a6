// Attention of a batch of queries over cache rows kv_start .. kv_start + n_kv.
// One workgroup per (query token i, head h, split s): scores of a chunk of
// CHUNK cache rows go to workgroup memory, an online (running-max) softmax in
// f32 folds each chunk into the output accumulators; a row whose logits are
// all -inf yields zeros. GQA/MQA: h_kv = h / (n_head / n_head_kv).
// Split KV (n_split > 1, a decode over a long span: few (token, head) pairs,
// many cells): split s takes cells s * split_len .. (s + 1) * split_len and
// writes its running max, sum and unnormalized accumulators to `out` as
// partials, [2 + head_dim, n_split, n_head, m]; attention_combine.wgsl folds
// them into the output. With n_split = 1 `out` is the output itself.
// Bindings, in order:
//   0 q:      [head_dim, n_head, m] f32
//   1 k:      [head_dim * n_head_kv, n_rows] f32, or f16 packed two to a u32 (KV_F16),
//             or Q8_0/Q4_0 bytes (KV_Q, kv_quant.wgsl; read element by element)
//   2 v:      like k
//   3 mask:   [n_kv, m] f32
//   4 out:    [head_dim * n_head, m] f32; with n_split > 1 the partials,
//             [2 + head_dim, n_split, n_head, m] f32
//   5 params: uniform Params
// SHADER_F16 (F16 caches only): k and v are bound as `array<f16>`.
// WINDOW (two-window SelfExtend): bindings 4..6 are the distant half,
//   4 q2:       like q, rotated at the grouped query positions
//   5 k2:       like k, rotated at the grouped key positions
//   6 mask_far: like mask
// then 7 out, 8 params; a pair the mask hides and mask_far lets through is
// scored q2 · k2 + mask_far, and one softmax runs over the merged logits.
// The chunk's max logit goes through reduce.wgsl (subgroups with
// USE_SUBGROUPS, else a tree in workgroup memory).
#include "index.wgsl"
#include "reduce.wgsl"
#include "common.wgsl"
#include "kv_quant.wgsl"

override KV_F16: bool = false;

struct Params {
    head_dim: u32,
    n_head: u32,
    n_head_kv: u32,
    m: u32,
    kv_start: u32,
    n_kv: u32,
    scale: f32,
    softcap: f32,
    // Cells per split and splits per (token, head); 1 split: the output.
    split_len: u32,
    n_split: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
#ifdef SHADER_F16
@group(0) @binding(1) var<storage, read> k: array<f16>;
@group(0) @binding(2) var<storage, read> v: array<f16>;
#else
@group(0) @binding(1) var<storage, read> k: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<u32>;
#endif
@group(0) @binding(3) var<storage, read> mask: array<f32>;
#ifdef WINDOW
@group(0) @binding(4) var<storage, read> q2: array<f32>;
#ifdef SHADER_F16
@group(0) @binding(5) var<storage, read> k2: array<f16>;
#else
@group(0) @binding(5) var<storage, read> k2: array<u32>;
#endif
@group(0) @binding(6) var<storage, read> mask_far: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;
#else
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#endif

const WG: u32 = 128u;
const CHUNK: u32 = 256u;
const MAX_HEAD_DIM: u32 = 512u;
const PER_THREAD: u32 = MAX_HEAD_DIM / WG;
// Below every finite logit; -inf logits (masked) stay below it.
const NEG_INF: f32 = -3.4028235e38;

var<workgroup> qs: array<f32, MAX_HEAD_DIM>;
#ifdef WINDOW
var<workgroup> qs2: array<f32, MAX_HEAD_DIM>;

#ifdef SHADER_F16
fn k2_at(i: u32) -> f32 {
    return f32(k2[i]);
}
#else
fn k2_at(i: u32) -> f32 {
    if (KV_Q != 0u) {
        return kv_quant_at(2u, i);
    }
    let w = k2[select(i, i >> 1u, KV_F16)];
    if (KV_F16) {
        return unpack2x16float(w)[i & 1u];
    }
    return bitcast<f32>(w);
}
#endif
#endif
var<workgroup> sc: array<f32, CHUNK>;
var<workgroup> chunk_max: f32;

#ifdef SHADER_F16
fn kv_at(buf_is_v: bool, i: u32) -> f32 {
    if (buf_is_v) {
        return f32(v[i]);
    }
    return f32(k[i]);
}
#else
// Word w of k (which = 0), v (1) or k2 (2).
fn kv_word(which: u32, w: u32) -> u32 {
#ifdef WINDOW
    if (which == 2u) {
        return k2[w];
    }
#endif
    if (which == 1u) {
        return v[w];
    }
    return k[w];
}

// Element i of a quantized k, v or k2: its block's scale and level byte.
fn kv_quant_at(which: u32, i: u32) -> f32 {
    let j = i % KVQ_BLOCK;
    let b0 = (i / KVQ_BLOCK) * kvq_type_size();
    let d = unpack2x16float((kv_word(which, b0 >> 2u) >> ((b0 & 2u) * 8u)) & 0xffffu).x;
    let lb = b0 + kvq_level_byte(j);
    let byte = (kv_word(which, lb >> 2u) >> ((lb & 3u) * 8u)) & 0xffu;
    return kvq_value(d, byte, j);
}

fn kv_at(buf_is_v: bool, i: u32) -> f32 {
    if (KV_Q != 0u) {
        return kv_quant_at(select(0u, 1u, buf_is_v), i);
    }
    var w: u32;
    if (buf_is_v) {
        w = v[select(i, i >> 1u, KV_F16)];
    } else {
        w = k[select(i, i >> 1u, KV_F16)];
    }
    if (KV_F16) {
        return unpack2x16float(w)[i & 1u];
    }
    return bitcast<f32>(w);
}
#endif

@compute @workgroup_size(WG)
fn main(inv: Inv, ln: Lane) {
    let gs = group_index(inv); // (token * n_head + h) * n_split + split
    if (gs >= p.m * p.n_head * p.n_split) {
        return;
    }
    let g = gs / p.n_split; // token * n_head + h
    let j_begin = (gs % p.n_split) * p.split_len;
    let j_end = min(j_begin + p.split_len, p.n_kv);
    let tok = g / p.n_head;
    let h = g % p.n_head;
    let h_kv = h / (p.n_head / p.n_head_kv);
    let hd = p.head_dim;
    let row_len = hd * p.n_head_kv;
    for (var d = inv.lid.x; d < hd; d += WG) {
        qs[d] = q[g * hd + d];
#ifdef WINDOW
        qs2[d] = q2[g * hd + d];
#endif
    }
    var acc: array<f32, PER_THREAD>;
    var run_max = NEG_INF;
    var run_sum = 0.0;
    workgroupBarrier();
    for (var j0 = j_begin; j0 < j_end; j0 += CHUNK) {
        let n_chunk = min(CHUNK, j_end - j0);
        // Logits of this chunk.
        var local_max = NEG_INF;
        for (var jj = inv.lid.x; jj < n_chunk; jj += WG) {
            let j = j0 + jj;
            let kb = (p.kv_start + j) * row_len + h_kv * hd;
            var bias = mask[tok * p.n_kv + j];
            var s = 0.0;
#ifdef WINDOW
            let near = bias > NEG_INF;
            if (!near) {
                bias = mask_far[tok * p.n_kv + j];
            }
            if (near) {
                for (var d = 0u; d < hd; d++) {
                    s += qs[d] * kv_at(false, kb + d);
                }
            } else if (bias > NEG_INF) {
                for (var d = 0u; d < hd; d++) {
                    s += qs2[d] * k2_at(kb + d);
                }
            }
#else
            // A masked cell's logit is -inf whatever the dot: its K row is
            // not read (the span is padded past the used cells and holds
            // other sequences' cells).
            if (bias > NEG_INF) {
                for (var d = 0u; d < hd; d++) {
                    s += qs[d] * kv_at(false, kb + d);
                }
            }
#endif
            if (p.softcap > 0.0) {
                s = p.softcap * tanh_safe(s / p.softcap);
            }
            s = s * p.scale + bias;
            sc[jj] = s;
            local_max = max(local_max, s);
        }
        let cm = wg_max(ln, local_max);
        if (inv.lid.x == 0u) {
            chunk_max = cm;
        }
        // Uniform for the barriers under the branch below.
        let new_max = max(run_max, workgroupUniformLoad(&chunk_max));
        if (new_max > NEG_INF) {
            // Rescale what was summed so far to the new max.
            let corr = exp(run_max - new_max);
            run_sum *= corr;
            for (var t = 0u; t < PER_THREAD; t++) {
                acc[t] *= corr;
            }
            for (var jj = inv.lid.x; jj < n_chunk; jj += WG) {
                sc[jj] = exp(sc[jj] - new_max);
            }
            workgroupBarrier();
            for (var jj = 0u; jj < n_chunk; jj++) {
                let pj = sc[jj];
                run_sum += pj;
                if (pj != 0.0) {
                    let vb = (p.kv_start + j0 + jj) * row_len + h_kv * hd;
                    for (var t = 0u; t < PER_THREAD; t++) {
                        let d = inv.lid.x + t * WG;
                        if (d < hd) {
                            acc[t] += pj * kv_at(true, vb + d);
                        }
                    }
                }
            }
            run_max = new_max;
        }
        workgroupBarrier();
    }
    if (p.n_split > 1u) {
        // Partials: max, sum, then the accumulators as they are.
        let pb = gs * (hd + 2u);
        if (inv.lid.x == 0u) {
            out[pb] = run_max;
            out[pb + 1u] = run_sum;
        }
        for (var t = 0u; t < PER_THREAD; t++) {
            let d = inv.lid.x + t * WG;
            if (d < hd) {
                out[pb + 2u + d] = acc[t];
            }
        }
        return;
    }
    for (var t = 0u; t < PER_THREAD; t++) {
        let d = inv.lid.x + t * WG;
        if (d < hd) {
            var o = 0.0;
            if (run_sum > 0.0) {
                o = acc[t] / run_sum;
            }
            out[g * hd + d] = o;
        }
    }
}
