// out[o] = sum or max of x over the reduced dimensions. params: n_out, op (0 sum, 1 max), ndim,
// count (elements reduced per output), then shape[ndim], reduced[ndim] (1 or 0), strides[ndim],
// the bits of -inf (the start of a max), and the first element of x and of out in their
// bindings (pieces of large tensors start anywhere).
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = flat(gid, nwg);
    if o >= params[0] {
        return;
    }
    let nd = params[2];
    // base offset from the kept coordinates (the output keeps reduced dims as size 1)
    var rest = o;
    var base = params[5u + 3u * nd];
    for (var d = nd; d > 0u; d--) {
        let k = d - 1u;
        if params[4u + nd + k] == 0u {
            let size = params[4u + k];
            base += (rest % size) * params[4u + 2u * nd + k];
            rest = rest / size;
        }
    }
    var acc: f32;
    var comp = 0.0;
    if params[1] == 0u {
        acc = 0.0;
    } else {
        acc = bitcast<f32>(params[4u + 3u * nd]);
    }
    for (var r = 0u; r < params[3]; r++) {
        var rr = r;
        var off = base;
        for (var d = nd; d > 0u; d--) {
            let k = d - 1u;
            if params[4u + nd + k] == 1u {
                let size = params[4u + k];
                off += (rr % size) * params[4u + 2u * nd + k];
                rr = rr / size;
            }
        }
        let v = x[off];
        if params[1] == 0u {
            // Kahan summation: one thread may add millions of elements
            let y = v - comp;
            let t = acc + y;
            comp = (t - acc) - y;
            acc = t;
        } else {
            acc = max(acc, v);
        }
    }
    out[params[6u + 3u * nd] + o] = acc;
}
