// LayerNorm (center) or RMSNorm of rows of x, as core's host kernels compute them: one
// workgroup per row, the row's sums reduced across the workgroup. mode 0 writes the output
// (x - mean) * rstd [* w] [+ b]; mode 1 the input's gradient for g: with h = g [* w],
// rstd * (h - h_mean - (x - mean) * rstd * hy_mean), h_mean the mean of h (0 for RMSNorm),
// hy_mean = sum(h (x - mean)) * rstd / cols; mode 2 each row's (mean, rstd). Bindings a mode
// does not read are bound to x. Every invocation meets every barrier (no early return): a
// workgroup past the last row computes on the last and writes nothing. params: rows, cols,
// mode, center, has_w, has_b, the f32 bits of eps, then the first element of x, of g and of
// out in their bindings.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> sh: array<f32, 256>;

// The sum of every invocation's v.
fn group_sum(v: f32, lane: u32) -> f32 {
    sh[lane] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if lane < s {
            sh[lane] += sh[lane + s];
        }
        workgroupBarrier();
    }
    let total = sh[0];
    workgroupBarrier();
    return total;
}

fn h_at(gi: u32, j: u32) -> f32 {
    if params[4] == 1u {
        return g[gi] * w[j];
    }
    return g[gi];
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let rows = params[0];
    let cols = params[1];
    let mode = params[2];
    let row = wid.x + wid.y * nwg.x;
    let lane = lid.x;
    let r = min(row, rows - 1u);
    let xs = params[7] + r * cols;
    let gs = params[8] + r * cols;
    let n = f32(cols);
    var s = 0.0;
    if params[3] == 1u {
        for (var j = lane; j < cols; j += 256u) {
            s += x[xs + j];
        }
    }
    let mean = select(0.0, group_sum(s, lane) / n, params[3] == 1u);
    var q = 0.0;
    for (var j = lane; j < cols; j += 256u) {
        let d = x[xs + j] - mean;
        q += d * d;
    }
    let rstd = 1.0 / sqrt(group_sum(q, lane) / n + bitcast<f32>(params[6]));
    var hs = 0.0;
    var hy = 0.0;
    if mode == 1u {
        for (var j = lane; j < cols; j += 256u) {
            let h = h_at(gs + j, j);
            hs += h;
            hy += h * (x[xs + j] - mean);
        }
    }
    let h_mean = select(0.0, group_sum(hs, lane) / n, params[3] == 1u);
    let hy_mean = group_sum(hy, lane) * rstd / n;
    if row >= rows {
        return;
    }
    if mode == 2u {
        if lane == 0u {
            out[params[9] + 2u * r] = mean;
            out[params[9] + 2u * r + 1u] = rstd;
        }
        return;
    }
    let os = params[9] + r * cols;
    for (var j = lane; j < cols; j += 256u) {
        if mode == 1u {
            let h = h_at(gs + j, j);
            out[os + j] = rstd * (h - h_mean - (x[xs + j] - mean) * rstd * hy_mean);
        } else {
            var y = (x[xs + j] - mean) * rstd;
            if params[4] == 1u {
                y = y * w[j];
            }
            if params[5] == 1u {
                y = y + b[j];
            }
            out[os + j] = y;
        }
    }
}
