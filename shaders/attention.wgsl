// Attention of a batch of queries over cache rows kv_start .. kv_start + n_kv.
// GQA/MQA: query head h reads KV head h_kv = h / group, group = n_head /
// n_head_kv. One workgroup per (query token, KV head, sub-group of HPW of its
// query heads, split s): the group's heads share each K and V row the
// workgroup reads, so a token's K/V is read once per KV head, not once per
// query head (n_sub = ceil(group / HPW) times where the group is larger than
// one workgroup takes; the last sub-group may hold fewer heads than HPW).
// Scores of a chunk of CHUNK cache rows, one row per head, go to workgroup
// memory; an online (running-max) softmax in f32, per head, folds each chunk
// into that head's accumulators; a head whose logits are all -inf yields
// zeros.
// Split KV (n_split > 1, a decode over a long span: few workgroups, many
// cells): split s takes cells s * split_len .. (s + 1) * split_len and writes
// each head's running max, sum and unnormalized accumulators to `out` as
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
// The chunk's max logit of each head goes through reduce.wgsl (subgroups
// with USE_SUBGROUPS, else a tree in workgroup memory).
#include "index.wgsl"
#include "reduce.wgsl"
#include "common.wgsl"
#include "kv_quant.wgsl"

override KV_F16: bool = false;
// Query heads a workgroup takes (of one KV head's group): at most G_MAX, and
// HPW * head_dim (twice that with WINDOW) at most QS_MAX.
override HPW: u32 = 1u;

struct Params {
    head_dim: u32,
    n_head: u32,
    n_head_kv: u32,
    m: u32,
    kv_start: u32,
    n_kv: u32,
    scale: f32,
    softcap: f32,
    // Cells per split and splits per workgroup's span; 1 split: the output.
    split_len: u32,
    n_split: u32,
    // Workgroups per (token, KV head): ceil(group / HPW).
    n_sub: u32,
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
const CHUNK: u32 = 128u;
const MAX_HEAD_DIM: u32 = 512u;
const PER_THREAD: u32 = MAX_HEAD_DIM / WG;
// Most heads a workgroup takes, and the f32 of their queries it keeps.
const G_MAX: u32 = 8u;
const QS_MAX: u32 = 1024u;
// Below every finite logit; -inf logits (masked) stay below it.
const NEG_INF: f32 = -3.4028235e38;

// [head_dim, HPW] the workgroup's queries; WINDOW: then [head_dim, HPW] q2.
var<workgroup> qs: array<f32, QS_MAX>;
#ifdef WINDOW

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
// [CHUNK, HPW]: the chunk's logits, then weights, of each head.
var<workgroup> sc: array<f32, G_MAX * CHUNK>;

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
    // ((token * n_head_kv + h_kv) * n_sub + sub) * n_split + split
    let gs = group_index(inv);
    if (gs >= p.m * p.n_head_kv * p.n_sub * p.n_split) {
        return;
    }
    let w = gs / p.n_split;
    let j_begin = (gs % p.n_split) * p.split_len;
    let j_end = min(j_begin + p.split_len, p.n_kv);
    let sub = w % p.n_sub;
    let h_kv = (w / p.n_sub) % p.n_head_kv;
    let tok = w / (p.n_sub * p.n_head_kv);
    let group = p.n_head / p.n_head_kv;
    let h0 = h_kv * group + sub * HPW; // the first head
    let ng = min(HPW, group - sub * HPW); // heads past ng: zeros, not written
    let hd = p.head_dim;
    let row_len = hd * p.n_head_kv;
    for (var i = inv.lid.x; i < HPW * hd; i += WG) {
        let g = i / hd;
        let qi = (tok * p.n_head + h0 + g) * hd + i % hd;
        qs[i] = 0.0;
#ifdef WINDOW
        qs[HPW * hd + i] = 0.0;
#endif
        if (g < ng) {
            qs[i] = q[qi];
#ifdef WINDOW
            qs[HPW * hd + i] = q2[qi];
#endif
        }
    }
    var acc: array<f32, G_MAX * PER_THREAD>;
    var run_max: array<f32, G_MAX>;
    var run_sum: array<f32, G_MAX>;
    for (var g = 0u; g < HPW; g++) {
        run_max[g] = NEG_INF;
    }
    workgroupBarrier();
    for (var j0 = j_begin; j0 < j_end; j0 += CHUNK) {
        let n_chunk = min(CHUNK, j_end - j0);
        // Logits of this chunk, each K row read once for the HPW heads.
        var local_max: array<f32, G_MAX>;
        for (var g = 0u; g < HPW; g++) {
            local_max[g] = NEG_INF;
        }
        for (var jj = inv.lid.x; jj < n_chunk; jj += WG) {
            let j = j0 + jj;
            let kb = (p.kv_start + j) * row_len + h_kv * hd;
            var bias = mask[tok * p.n_kv + j];
            var s: array<f32, G_MAX>;
#ifdef WINDOW
            let near = bias > NEG_INF;
            if (!near) {
                bias = mask_far[tok * p.n_kv + j];
            }
            if (near) {
                for (var d = 0u; d < hd; d++) {
                    let kd = kv_at(false, kb + d);
                    for (var g = 0u; g < HPW; g++) {
                        s[g] += qs[g * hd + d] * kd;
                    }
                }
            } else if (bias > NEG_INF) {
                for (var d = 0u; d < hd; d++) {
                    let kd = k2_at(kb + d);
                    for (var g = 0u; g < HPW; g++) {
                        s[g] += qs[(HPW + g) * hd + d] * kd;
                    }
                }
            }
#else
            // A masked cell's logit is -inf whatever the dot: its K row is
            // not read (the span is padded past the used cells and holds
            // other sequences' cells).
            if (bias > NEG_INF) {
                for (var d = 0u; d < hd; d++) {
                    let kd = kv_at(false, kb + d);
                    for (var g = 0u; g < HPW; g++) {
                        s[g] += qs[g * hd + d] * kd;
                    }
                }
            }
#endif
            for (var g = 0u; g < HPW; g++) {
                var x = s[g];
                if (p.softcap > 0.0) {
                    x = p.softcap * tanh_safe(x / p.softcap);
                }
                x = x * p.scale + bias;
                sc[g * CHUNK + jj] = x;
                local_max[g] = max(local_max[g], x);
            }
        }
        // Each head's new running max (every invocation gets it), its
        // accumulators rescaled to it. While a head has seen only masked
        // cells its max stays NEG_INF: the correction is exp(0) = 1 on zero
        // sums and its weights exp(-inf) = 0.
        var new_max: array<f32, G_MAX>;
        for (var g = 0u; g < HPW; g++) {
            new_max[g] = max(run_max[g], wg_max(ln, local_max[g]));
            let corr = exp(run_max[g] - new_max[g]);
            run_sum[g] *= corr;
            for (var t = 0u; t < PER_THREAD; t++) {
                acc[g * PER_THREAD + t] *= corr;
            }
            run_max[g] = new_max[g];
        }
        for (var jj = inv.lid.x; jj < n_chunk; jj += WG) {
            for (var g = 0u; g < HPW; g++) {
                sc[g * CHUNK + jj] = exp(sc[g * CHUNK + jj] - new_max[g]);
            }
        }
        workgroupBarrier();
        // Each V row read once for the HPW heads.
        for (var jj = 0u; jj < n_chunk; jj++) {
            var pj: array<f32, G_MAX>;
            var any = false;
            for (var g = 0u; g < HPW; g++) {
                pj[g] = sc[g * CHUNK + jj];
                run_sum[g] += pj[g];
                any = any || pj[g] != 0.0;
            }
            if (any) {
                let vb = (p.kv_start + j0 + jj) * row_len + h_kv * hd;
                for (var t = 0u; t < PER_THREAD; t++) {
                    let d = inv.lid.x + t * WG;
                    if (d < hd) {
                        let vd = kv_at(true, vb + d);
                        for (var g = 0u; g < HPW; g++) {
                            acc[g * PER_THREAD + t] += pj[g] * vd;
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var g = 0u; g < ng; g++) {
        let row = tok * p.n_head + h0 + g; // token * n_head + h
        if (p.n_split > 1u) {
            // Partials: max, sum, then the accumulators as they are.
            let pb = (row * p.n_split + gs % p.n_split) * (hd + 2u);
            if (inv.lid.x == 0u) {
                out[pb] = run_max[g];
                out[pb + 1u] = run_sum[g];
            }
            for (var t = 0u; t < PER_THREAD; t++) {
                let d = inv.lid.x + t * WG;
                if (d < hd) {
                    out[pb + 2u + d] = acc[g * PER_THREAD + t];
                }
            }
        } else {
            for (var t = 0u; t < PER_THREAD; t++) {
                let d = inv.lid.x + t * WG;
                if (d < hd) {
                    var o = 0.0;
                    if (run_sum[g] > 0.0) {
                        o = acc[g * PER_THREAD + t] / run_sum[g];
                    }
                    out[row * hd + d] = o;
                }
            }
        }
    }
}

// ---- Tiles: entry `tile` (not with WINDOW) ----
// One workgroup per (tile of TQ consecutive tokens, KV head, sub-group of
// HPW query heads, split s). Its R = TQ * HPW query rows (row r: token
// tok0 + r / HPW, head h0 + r % HPW) share every chunk of CT cells it loads
// into workgroup memory, so the span's K/V is read once a tile, not once a
// token, and read coalesced (consecutive invocations, consecutive
// elements of a row). A chunk:
//   K loaded transposed, [hd][CT + 1] (a score step's invocations read
//   consecutive words);
//   the R x CT scores, one (row, cell) pair an invocation at a time; a
//   pair the mask hides is its bias (-inf), its dot not taken;
//   one online-softmax step a row (running max, sum and the accumulators'
//   correction), while V is loaded over K's room, [CT][hd];
//   the accumulators [R, hd], T_ACC an invocation, rescaled and summed.
// A tile of one token (TQ = 1: decode) loads only the K/V rows its mask
// lets through, as `main` reads them; a larger tile (prefill) loads every
// cell of its span, so the work counters model n_kv cells a tile, and a
// row's weight of 0 for a cell it does not see keeps that cell's V out of
// its sums (an inf or NaN in another sequence's row stays there). Split
// KV as in `main`: split s takes cells s * split_len .. (s + 1) *
// split_len and writes partials for attention_combine.wgsl. f32
// throughout, as `main`; the launcher takes TQ and CT from head_dim so
// that every array fits.
override TQ: u32 = 1u;
override CT: u32 = 32u;
const T_QS: u32 = 2048u; // R * head_dim
const T_KV: u32 = 4352u; // (CT + 1) * head_dim, head_dim <= 256
const T_SS: u32 = 1024u; // R * CT
const T_ROWS: u32 = 64u; // R
const T_ACC: u32 = T_QS / WG;

var<workgroup> t_q: array<f32, T_QS>;
var<workgroup> t_kv: array<f32, T_KV>;
var<workgroup> t_s: array<f32, T_SS>;
var<workgroup> t_max: array<f32, T_ROWS>;
var<workgroup> t_sum: array<f32, T_ROWS>;
var<workgroup> t_corr: array<f32, T_ROWS>;

// Whether a tile loads cell j's K/V row: every cell, unless the tile is
// one token and its mask hides the cell.
fn t_loads(tok0: u32, j: u32) -> bool {
    return TQ > 1u || mask[tok0 * p.n_kv + j] > NEG_INF;
}

@compute @workgroup_size(WG)
fn tile(inv: Inv) {
    // ((tile * n_head_kv + h_kv) * n_sub + sub) * n_split + split
    let gs = group_index(inv);
    if (gs >= (p.m + TQ - 1u) / TQ * p.n_head_kv * p.n_sub * p.n_split) {
        return;
    }
    let w = gs / p.n_split;
    let split = gs % p.n_split;
    let j_begin = split * p.split_len;
    let j_end = min(j_begin + p.split_len, p.n_kv);
    let sub = w % p.n_sub;
    let h_kv = (w / p.n_sub) % p.n_head_kv;
    let tok0 = w / (p.n_sub * p.n_head_kv) * TQ;
    let h0 = h_kv * (p.n_head / p.n_head_kv) + sub * HPW;
    let ng = min(HPW, p.n_head / p.n_head_kv - sub * HPW);
    let hd = p.head_dim;
    let row_len = hd * p.n_head_kv;
    let rows = TQ * HPW;
    let lid = inv.lid.x;
    let cs = CT + 1u;
    for (var i = lid; i < rows * hd; i += WG) {
        let r = i / hd;
        let tok = tok0 + r / HPW;
        var x = 0.0;
        if (tok < p.m && r % HPW < ng) {
            x = q[(tok * p.n_head + h0 + r % HPW) * hd + i % hd];
        }
        t_q[i] = x;
    }
    for (var r = lid; r < rows; r += WG) {
        t_max[r] = NEG_INF;
        t_sum[r] = 0.0;
    }
    var acc: array<f32, T_ACC>;
    workgroupBarrier();
    for (var j0 = j_begin; j0 < j_end; j0 += CT) {
        let n_chunk = min(CT, j_end - j0);
        let kb = (p.kv_start + j0) * row_len + h_kv * hd;
        for (var i = lid; i < CT * hd; i += WG) {
            let c = i / hd;
            var x = 0.0;
            if (c < n_chunk && t_loads(tok0, j0 + c)) {
                x = kv_at(false, kb + c * row_len + i % hd);
            }
            t_kv[(i % hd) * cs + c] = x;
        }
        workgroupBarrier();
        for (var i = lid; i < rows * CT; i += WG) {
            let r = i / CT;
            let c = i % CT;
            let tok = tok0 + r / HPW;
            var x = 0.0;
            if (c < n_chunk && tok < p.m) {
                x = mask[tok * p.n_kv + j0 + c];
                if (x > NEG_INF) {
                    var s = 0.0;
                    for (var d = 0u; d < hd; d++) {
                        s += t_q[r * hd + d] * t_kv[d * cs + c];
                    }
                    if (p.softcap > 0.0) {
                        s = p.softcap * tanh_safe(s / p.softcap);
                    }
                    x += s * p.scale;
                }
            }
            t_s[i] = x;
        }
        workgroupBarrier();
        // A row's new running max; while it has seen only masked cells
        // it stays NEG_INF, its correction exp(0) = 1 on zero sums and its
        // weights exp(-inf) = 0.
        for (var r = lid; r < rows; r += WG) {
            var mx = t_max[r];
            for (var c = 0u; c < n_chunk; c++) {
                mx = max(mx, t_s[r * CT + c]);
            }
            var sum = 0.0;
            for (var c = 0u; c < n_chunk; c++) {
                let e = exp(t_s[r * CT + c] - mx);
                t_s[r * CT + c] = e;
                sum += e;
            }
            let corr = exp(t_max[r] - mx);
            t_sum[r] = t_sum[r] * corr + sum;
            t_max[r] = mx;
            t_corr[r] = corr;
        }
        for (var i = lid; i < CT * hd; i += WG) {
            let c = i / hd;
            var x = 0.0;
            if (c < n_chunk && t_loads(tok0, j0 + c)) {
                x = kv_at(true, kb + c * row_len + i % hd);
            }
            t_kv[i] = x;
        }
        workgroupBarrier();
        for (var t = 0u; t < T_ACC; t++) {
            let o = lid + t * WG;
            if (o < rows * hd) {
                let r = o / hd;
                var a = acc[t] * t_corr[r];
                // A cell the row does not see weighs 0, whatever its V
                // (which a larger tile loads for its other rows): an inf
                // or NaN there must not reach the row (`main` skips it).
                for (var c = 0u; c < n_chunk; c++) {
                    let wt = t_s[r * CT + c];
                    a += select(0.0, wt * t_kv[c * hd + o % hd], wt != 0.0);
                }
                acc[t] = a;
            }
        }
        workgroupBarrier();
    }
    for (var t = 0u; t < T_ACC; t++) {
        let o = lid + t * WG;
        let r = o / hd;
        let tok = tok0 + r / HPW;
        if (o < rows * hd && tok < p.m && r % HPW < ng) {
            let row = tok * p.n_head + h0 + r % HPW; // token * n_head + h
            if (p.n_split > 1u) {
                // Partials: max, sum, then the accumulators as they are.
                let pb = (row * p.n_split + split) * (hd + 2u);
                if (o % hd == 0u) {
                    out[pb] = t_max[r];
                    out[pb + 1u] = t_sum[r];
                }
                out[pb + 2u + o % hd] = acc[t];
            } else {
                var x = 0.0;
                if (t_sum[r] > 0.0) {
                    x = acc[t] / t_sum[r];
                }
                out[row * hd + o % hd] = x;
            }
        }
    }
}
