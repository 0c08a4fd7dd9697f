// Attention's forward, FlashAttention style: one invocation per query row, its workgroup's
// rows staging TK keys at a time (scores over head_dim in chunks of CW columns), then the
// same keys' values; an online softmax (running max m and sum l, the accumulator rescaled by
// exp(m_old - m_new)) over columns c0..c0 + CW of the output. A causal workgroup stops at the
// last key any of its rows sees and masks the rest per row. One dispatch visits keys k0..k1;
// between dispatches the unnormalised accumulator waits in `out` and (m, l) in `state`, and
// the last writes acc / l and, with save, the log-sum-exp m + ln(l) (chunk 0). `lse` and
// `state` are bound to the output where not used. Slots: 0 q, 1 k, 2 v, 3 out, 4 lse, 5 state.
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;

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
        default: {
            return out[i];
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
    // the keys any row of the workgroup sees in this block, and those this row sees
    var kend = k1;
    var seen = k1;
    if params[7] == 1u {
        kend = min(k1, min(pl.r0 + WG, seq_q));
        seen = min(k1, row + 1u);
    }
    let n4 = quads(dv, c0);
    var m = bitcast<f32>(0xff800000u);
    var l = 0.0;
    var acc: array<vec4<f32>, 16>;
    let st = at(5u, p, row);
    if params[11] == 0u {
        m = state[st];
        l = state[st + 1u];
        acc = own(3u, p, row, c0, dv);
    }
    var qc = own(0u, p, row, 0u, hd);
    for (var t0 = k0; t0 < kend; t0 += TK) {
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
        var mt = m;
        for (var j = 0u; j < TK; j++) {
            s[j] *= scale;
            if t0 + j < seen {
                mt = max(mt, s[j]);
            }
        }
        var corr = 1.0;
        if mt > m {
            corr = exp(m - mt);
        }
        l *= corr;
        for (var x = 0u; x < n4; x++) {
            acc[x] *= corr;
        }
        stage(2u, p, t0, k1, c0, dv, lane);
        for (var j = 0u; j < TK; j++) {
            if t0 + j < seen {
                let e = exp(s[j] - mt);
                l += e;
                add_tile(&acc, e, j, n4);
            }
        }
        m = mt;
    }
    if !pl.live {
        return;
    }
    let o = at(3u, p, row) + c0;
    let n = cols(dv, c0);
    if params[12] == 1u {
        for (var c = 0u; c < n; c++) {
            out[o + c] = col(&acc, c) / l;
        }
        if params[13] == 1u && c0 == 0u {
            lse[at(4u, p, row)] = m + log(l);
        }
    } else {
        for (var c = 0u; c < n; c++) {
            out[o + c] = col(&acc, c);
        }
        state[st] = m;
        state[st + 1u] = l;
    }
}
