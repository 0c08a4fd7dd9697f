// Attention's backward, second pass: one invocation per key row j, its workgroup's rows
// staging TK query rows (and their output gradients) at a time, with each query's lse and
// D_i = g_i . out_i (from the first pass): over the queries that see key j (all, or i >= j
// when causal), s = scale q_i . k_j, p = exp(s - lse_i), dp = g_i . v_j; dv_j += p g_i and
// dk_j += p (dp - D_i) q_i over columns c0..c0 + CW of each; the last dispatch multiplies dk
// by the scale. One dispatch visits queries i0..i1; between dispatches dk and dv wait in the
// output. Slots: 0 q, 1 k, 2 v, 3 g, 4 lse, 5 dd, 6 dk, 7 dv.
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read> dd: array<f32>;
@group(0) @binding(7) var<storage, read_write> dk: array<f32>;
@group(0) @binding(8) var<storage, read_write> dv: array<f32>;

// The tile's queries' lse and D.
var<workgroup> tl: array<f32, 32>;
var<workgroup> td: array<f32, 32>;

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
        case 6u: {
            return dk[i];
        }
        default: {
            return dv[i];
        }
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let hd = params[4];
    let vd = params[5];
    let scale = bitcast<f32>(params[6]);
    let causal = params[7] == 1u;
    let c0 = params[8];
    let i0 = params[9];
    let i1 = params[10];
    let lane = lid.x;
    let pl = place(wid, nwg, lane, params[3]);
    let p = pl.p;
    let row = pl.row;
    var istart = i0;
    if causal {
        istart = max(i0, pl.r0);
    }
    let k4 = quads(hd, c0);
    let v4 = quads(vd, c0);
    var adk: array<vec4<f32>, 16>;
    var adv: array<vec4<f32>, 16>;
    if params[11] == 0u {
        adk = own(6u, p, row, c0, hd);
        adv = own(7u, p, row, c0, vd);
    }
    var kc = own(1u, p, row, 0u, hd);
    var vc = own(2u, p, row, 0u, vd);
    for (var t0 = istart; t0 < i1; t0 += TK) {
        if lane < TK {
            var a = 0.0;
            var b = 0.0;
            if t0 + lane < i1 {
                a = lse[at(4u, p, t0 + lane)];
                b = dd[at(5u, p, t0 + lane)];
            }
            tl[lane] = a;
            td[lane] = b;
        }
        workgroupBarrier();
        var s: array<f32, 32>;
        for (var h0 = 0u; h0 < hd; h0 += CW) {
            stage(0u, p, t0, i1, h0, hd, lane);
            if hd > CW {
                kc = own(1u, p, row, h0, hd);
            }
            let h4 = quads(hd, h0);
            for (var j = 0u; j < TK; j++) {
                s[j] += dot_tile(&kc, j, h4);
            }
        }
        var dp: array<f32, 32>;
        for (var y0 = 0u; y0 < vd; y0 += CW) {
            stage(3u, p, t0, i1, y0, vd, lane);
            if vd > CW {
                vc = own(2u, p, row, y0, vd);
            }
            let y4 = quads(vd, y0);
            for (var j = 0u; j < TK; j++) {
                dp[j] += dot_tile(&vc, j, y4);
            }
        }
        var pr: array<f32, 32>;
        var ds: array<f32, 32>;
        for (var j = 0u; j < TK; j++) {
            let i = t0 + j;
            if i < i1 && (!causal || i >= row) {
                pr[j] = exp(scale * s[j] - tl[j]);
                ds[j] = pr[j] * (dp[j] - td[j]);
            }
        }
        // with one chunk of v_dim the tile still holds the gradients' columns c0 = 0..
        if vd > CW {
            stage(3u, p, t0, i1, c0, vd, lane);
        }
        for (var j = 0u; j < TK; j++) {
            add_tile(&adv, pr[j], j, v4);
        }
        stage(0u, p, t0, i1, c0, hd, lane);
        for (var j = 0u; j < TK; j++) {
            add_tile(&adk, ds[j], j, k4);
        }
    }
    if !pl.live {
        return;
    }
    var f = 1.0;
    if params[12] == 1u {
        f = scale;
    }
    let at_dk = at(6u, p, row) + c0;
    let nk = cols(hd, c0);
    for (var c = 0u; c < nk; c++) {
        dk[at_dk + c] = col(&adk, c) * f;
    }
    let at_dv = at(7u, p, row) + c0;
    let nv = cols(vd, c0);
    for (var c = 0u; c < nv; c++) {
        dv[at_dv + c] = col(&adv, c);
    }
}
