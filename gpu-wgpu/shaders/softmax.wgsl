// (Log-)softmax along one dimension: one thread per line. params: lines, len, inner, log, the
// bits of -inf, and the first element of x and of out in their bindings (pieces of large
// tensors start anywhere). Line l starts at (l / inner) * len * inner + l % inner, elements
// `inner` apart.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let l = flat(gid, nwg);
    if l >= params[0] {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let start = (l / inner) * len * inner + l % inner;
    let xs = params[5] + start;
    let os = params[6] + start;
    var m = bitcast<f32>(params[4]);
    // the line's max, NaN if any element is (then the line is NaN, as on the CPU)
    for (var j = 0u; j < len; j++) {
        let v = x[xs + j * inner];
        if !is_nan(m) && (is_nan(v) || v > m) {
            m = v;
        }
    }
    var s = 0.0;
    for (var j = 0u; j < len; j++) {
        s += exp(x[xs + j * inner] - m);
    }
    let ls = log(s);
    for (var j = 0u; j < len; j++) {
        let v = x[xs + j * inner] - m;
        if params[3] == 1u {
            out[os + j * inner] = v - ls;
        } else {
            out[os + j * inner] = exp(v) / s;
        }
    }
}
