// Workgroup-wide reductions of one f32 per invocation; every invocation gets
// the result. The including kernel declares `const WG: u32` (its workgroup
// size, a power of two), takes a `ln: Lane` entry-point argument, and calls
// these in workgroup-uniform control flow (they contain barriers and leave
// `red` free for the next call).
//
// With USE_SUBGROUPS: subgroupAdd/subgroupMax within each subgroup, one
// partial per subgroup through workgroup memory, then each subgroup folds
// those partials (a lane takes every sg_size-th one, then the subgroup op
// again). The subgroup size is not known at compile time: this works for any
// size, several subgroups per workgroup or one larger than the workgroup.
// Without: a tree in workgroup memory.

var<workgroup> red: array<f32, WG>;

struct Lane {
    @builtin(local_invocation_index) lid: u32,
#ifdef USE_SUBGROUPS
    @builtin(subgroup_invocation_id) sg_inv: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
#endif
}

#ifdef USE_SUBGROUPS
fn wg_sum(ln: Lane, v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (ln.sg_inv == 0u) {
        red[ln.sg_id] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = ln.sg_inv; i < ln.n_sg; i += ln.sg_size) {
        t += red[i];
    }
    workgroupBarrier();
    return subgroupAdd(t);
}

fn wg_max(ln: Lane, v: f32) -> f32 {
    let s = subgroupMax(v);
    if (ln.sg_inv == 0u) {
        red[ln.sg_id] = s;
    }
    workgroupBarrier();
    var t = red[0]; // not a constant: logits may be -inf
    for (var i = ln.sg_inv; i < ln.n_sg; i += ln.sg_size) {
        t = max(t, red[i]);
    }
    workgroupBarrier();
    return subgroupMax(t);
}
#else
fn wg_sum(ln: Lane, v: f32) -> f32 {
    red[ln.lid] = v;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st >>= 1u) {
        if (ln.lid < st) {
            red[ln.lid] += red[ln.lid + st];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn wg_max(ln: Lane, v: f32) -> f32 {
    red[ln.lid] = v;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st >>= 1u) {
        if (ln.lid < st) {
            red[ln.lid] = max(red[ln.lid], red[ln.lid + st]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
#endif
