// Sum, max or min of x over the reduced dimensions, each output's elements cut in `parts` runs of
// `part_len` (one thread per run, so no thread loops over more than part_len elements: lavapipe
// ends an invocation's loops after 65535 iterations). out[o * parts + p] = run p of output o.
// params: threads (outputs x parts), op (a REDUCE_* code), ndim, count (elements reduced per
// output), then shape[ndim], reduced[ndim] (1 or 0), strides[ndim], the bits of the start of a
// max or min (-inf or +inf), the first element of x and of out in their bindings (pieces of large tensors start
// anywhere), part_len, parts.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let nd = params[2];
    let part_len = params[7u + 3u * nd];
    let parts = params[8u + 3u * nd];
    let o = t / parts;
    let first = t % parts * part_len;
    let end = min(params[3], first + part_len);
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
    var block = 0.0;
    if params[1] == REDUCE_SUM {
        acc = 0.0;
    } else {
        acc = bitcast<f32>(params[4u + 3u * nd]);
    }
    for (var r = first; r < end; r++) {
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
        if params[1] == REDUCE_SUM {
            // Sums of blocks of 1024, then of the blocks: one thread may add millions of
            // elements, and the error grows with the block length plus the block count, not
            // with their product. (Kahan's compensation is not used: shader compilers may
            // simplify it away, and Mesa's does.)
            block += v;
            if ((r - first) & 1023u) == 1023u {
                acc += block;
                block = 0.0;
            }
        } else {
            // the CPU's max (min): a NaN wins and stays, else the earlier of equals (-0 or 0)
            let ov = order(v);
            let oa = order(acc);
            let better = select((ov < oa), (ov > oa), params[1] == REDUCE_MAX);
            if !is_nan(acc) && (is_nan(v) || better) {
                acc = v;
            }
        }
    }
    if params[1] == REDUCE_SUM {
        acc += block;
    }
    // (a max or min plus 0.0 would turn -0 into 0)
    out[params[6u + 3u * nd] + t] = acc;
}
