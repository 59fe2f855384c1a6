// Where an invocation is in its dispatch (no bindings). Launchers spread n
// workgroups over x and y (x at most max_compute_workgroups_per_dimension),
// so the flat workgroup index is wid.x + wid.y * nwg.x; the kernel returns
// early past its last row / element.
struct Inv {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
}

// The flat workgroup index: the row, or (token, head), of a kernel with one
// workgroup per row.
fn group_index(inv: Inv) -> u32 {
    return inv.wid.x + inv.wid.y * inv.nwg.x;
}

// The flat invocation index of a kernel of `wg` invocations per workgroup
// and one invocation per element.
fn global_index(inv: Inv, wg: u32) -> u32 {
    return group_index(inv) * wg + inv.lid.x;
}
