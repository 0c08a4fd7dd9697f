// The index of the largest (smallest) f32 along the middle dim of x viewed as (outer, len,
// inner), one thread per (outer, inner) line of a block of outer rows, over the indices
// [lo, hi) of one pass: longer lines take several passes, each starting from the index and
// value the earlier ones left in `out` and `best_val` (so x is bound in pieces). The first NaN
// wins, else the lowest index among equals (PyTorch's). out holds i64 (two words).
// params: lines (of the block), len, inner, lo, hi, max, x base, out base, best_val base.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read_write> best_val: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let inner = params[2];
    let lo = params[3];
    // x[line, lo] in the bound piece; x[line, l] is at base + (l - lo) * inner
    let base = params[6] + t / inner * params[1] * inner + t % inner;
    let o = params[7] + t;
    let v0 = params[8] + t;
    var best = lo;
    var b = x[base];
    if lo > 0u {
        best = out[2u * o];
        b = best_val[v0];
    }
    for (var l = lo; l < params[4]; l++) {
        let v = x[base + (l - lo) * inner];
        var better = false;
        if is_nan(b) {
            better = false;
        } else if is_nan(v) {
            better = true;
        } else if params[5] == 1u {
            better = v > b;
        } else {
            better = v < b;
        }
        if better {
            best = l;
            b = v;
        }
    }
    out[2u * o] = best;
    out[2u * o + 1u] = 0u;
    best_val[v0] = b;
}
