// Each workgroup's sum of the squares of its grid-stride share of x (threads of all
// workgroups striding together), reduced across the workgroup into partial[group]. Every
// invocation meets every barrier (no early return). params: n, the threads in all, the first
// element of x in its binding, where this dispatch's first partial goes.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;

var<workgroup> sh: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    var s = 0.0;
    for (var i = flat(gid, nwg); i < params[0]; i += params[1]) {
        let v = x[params[2] + i];
        s += v * v;
    }
    sh[lid.x] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if lid.x < k {
            sh[lid.x] += sh[lid.x + k];
        }
        workgroupBarrier();
    }
    if lid.x == 0u {
        partial[params[3] + wid.x + wid.y * nwg.x] = sh[0];
    }
}
