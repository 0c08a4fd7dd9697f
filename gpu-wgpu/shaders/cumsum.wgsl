// Inclusive prefix sums along the middle dim of x viewed as (outer, len, inner): one thread per
// (outer, inner) line of a block of outer rows, over the indices [lo, hi) of one pass (x and out
// are bound in pieces); a longer line takes several passes, each starting from the running sum
// the pass before left in `acc`.
// params: lines (of the block), len, inner, lo, hi, x base, out base, acc base.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> acc: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let lo = params[3];
    // the line's element at index lo, relative to the bound pieces
    let base = t / inner * len * inner + t % inner;
    var s = 0.0;
    if lo > 0u {
        s = acc[params[7] + t];
    }
    for (var l = lo; l < params[4]; l++) {
        let at = base + (l - lo) * inner;
        s = s + x[params[5] + at];
        out[params[6] + at] = s;
    }
    acc[params[7] + t] = s;
}
