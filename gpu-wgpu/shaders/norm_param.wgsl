// The weight's and bias's gradients of a LayerNorm or RMSNorm in parts of part_len rows: one
// thread per (part, column) writes its part's sum of g * (x - mean) * rstd to dw (parts, cols)
// and of g to db (parts, cols), each row's (mean, rstd) read from stats (summed over parts
// after). params: threads (parts x cols), rows, cols, part_len, then the first element of x,
// of g, of stats and of dw and db in their bindings.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> stats: array<f32>;
@group(0) @binding(4) var<storage, read_write> dw_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> db_out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let cols = params[2];
    let p = t / cols;
    let c = t % cols;
    let first = p * params[3];
    let end = min(params[1], first + params[3]);
    var dw = 0.0;
    var db = 0.0;
    for (var r = first; r < end; r++) {
        let gv = g[params[5] + r * cols + c];
        let st = params[6] + 2u * r;
        dw += gv * (x[params[4] + r * cols + c] - stats[st]) * stats[st + 1u];
        db += gv;
    }
    dw_out[params[7] + p * cols + c] = dw;
    db_out[params[7] + p * cols + c] = db;
}
