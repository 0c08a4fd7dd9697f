// Attention's backward, first pass: one invocation per query row i, its workgroup's rows
// staging TK keys (and values) at a time: D_i = g_i . out_i (written to `dd` for the second
// pass), and over the keys row i sees, s = scale q_i . k_j, p = exp(s - lse_i), dp = g_i . v_j,
// dq_i += p (dp - D_i) k_j over columns c0..c0 + CW of dq; the last dispatch multiplies by
// the scale. One dispatch visits keys k0..k1; between dispatches dq waits in its output.
// Slots: 0 q, 1 k, 2 v, 3 g, 4 o, 5 lse, 6 dd, 7 dq.
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read> o: array<f32>;
@group(0) @binding(6) var<storage, read> lse: array<f32>;
@group(0) @binding(7) var<storage, read_write> dd: array<f32>;
@group(0) @binding(8) var<storage, read_write> dq: array<f32>;

fn fetch(slot: u32, i: u32) -> f32 {
    switch slot {
        case 0u: {
            return q[i];
        }
        case 1u: {
            return k[i];
        }
        case 2u: {
            return v[i];
        }
        case 3u: {
            return g[i];
        }
        default: {
            return dq[i];
        }
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let seq_q = params[2];
    let hd = params[4];
    let dv = params[5];
    let scale = bitcast<f32>(params[6]);
    let c0 = params[8];
    let k0 = params[9];
    let k1 = params[10];
    let lane = lid.x;
    let pl = place(wid, nwg, lane, seq_q);
    let p = pl.p;
    let row = pl.row;
    var kend = k1;
    var seen = k1;
    if params[7] == 1u {
        kend = min(k1, min(pl.r0 + WG, seq_q));
        seen = min(k1, row + 1u);
    }
    let gb = at(3u, p, row);
    let ob = at(4u, p, row);
    var d = 0.0;
    for (var y = 0u; y < dv; y++) {
        d += g[gb + y] * o[ob + y];
    }
    if pl.live && params[11] == 1u && c0 == 0u {
        dd[at(6u, p, row)] = d;
    }
    let ls = lse[at(5u, p, row)];
    let n4 = quads(hd, c0);
    var acc: array<vec4<f32>, 16>;
    if params[11] == 0u {
        acc = own(7u, p, row, c0, hd);
    }
    var qc = own(0u, p, row, 0u, hd);
    var gc = own(3u, p, row, 0u, dv);
    for (var t0 = k0; t0 < kend; t0 += TK) {
        var dp: array<f32, 32>;
        for (var y0 = 0u; y0 < dv; y0 += CW) {
            stage(2u, p, t0, k1, y0, dv, lane);
            if dv > CW {
                gc = own(3u, p, row, y0, dv);
            }
            let y4 = quads(dv, y0);
            for (var j = 0u; j < TK; j++) {
                dp[j] += dot_tile(&gc, j, y4);
            }
        }
        var s: array<f32, 32>;
        for (var h0 = 0u; h0 < hd; h0 += CW) {
            stage(1u, p, t0, k1, h0, hd, lane);
            if hd > CW {
                qc = own(0u, p, row, h0, hd);
            }
            let h4 = quads(hd, h0);
            for (var j = 0u; j < TK; j++) {
                s[j] += dot_tile(&qc, j, h4);
            }
        }
        // with one chunk of head_dim the tile still holds the keys' columns c0 = 0..
        if hd > CW {
            stage(1u, p, t0, k1, c0, hd, lane);
        }
        for (var j = 0u; j < TK; j++) {
            if t0 + j < seen {
                let pr = exp(scale * s[j] - ls);
                add_tile(&acc, pr * (dp[j] - d), j, n4);
            }
        }
    }
    if !pl.live {
        return;
    }
    var f = 1.0;
    if params[12] == 1u {
        f = scale;
    }
    let at_dq = at(7u, p, row) + c0;
    let n = cols(hd, c0);
    for (var c = 0u; c < n; c++) {
        dq[at_dq + c] = col(&acc, c) * f;
    }
}
