// The positions that sort each line of x along the middle dim of x viewed as (outer, len,
// inner), stably, NaN above every number: one thread per element counts the elements that go
// before it (smaller, or equal at a lower position; larger when descending) and, in the last
// pass, writes its own position at that rank. Long lines take several passes over the other
// elements [lo, hi), the counts kept in `cnt` between them. out holds i64 (two words).
// params: elements (of the block), len, inner, descending, lo, hi, x base, out base, cnt base,
// last pass.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read_write> cnt: array<u32>;

// The sort key: the float's order, NaN (all NaNs alike) above +inf.
fn key(v: f32) -> i32 {
    if is_nan(v) {
        return 0x7fffffff;
    }
    return order(v);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let l = t / inner % len;
    // the line's first element, relative to the block
    let line = t / (inner * len) * len * inner + t % inner;
    let k = key(x[params[6] + line + l * inner]);
    var r = 0u;
    if params[4] > 0u {
        r = cnt[params[8] + t];
    }
    for (var m = params[4]; m < params[5]; m++) {
        let km = key(x[params[6] + line + m * inner]);
        var before = km < k;
        if params[3] == 1u {
            before = km > k;
        }
        if km == k && m < l {
            before = true;
        }
        r += select(0u, 1u, before);
    }
    if params[9] == 1u {
        let dst = params[7] + line + r * inner;
        out[2u * dst] = l;
        out[2u * dst + 1u] = 0u;
    } else {
        cnt[params[8] + t] = r;
    }
}
