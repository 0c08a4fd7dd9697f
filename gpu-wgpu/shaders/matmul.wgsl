// Batched C = A B, each thread a 4x4 block of C (register blocking). params: batch, m, k, n,
// b_batched, a_trans, b_trans, the first element of a, b and c in their bindings (a binding
// starts at an aligned offset, a piece of a large tensor anywhere), and c's row stride. A transposed
// operand is read with swapped strides.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    let m = params[1];
    let k = params[2];
    let n = params[3];
    let bm = (m + 3u) / 4u;
    let bn = (n + 3u) / 4u;
    if t >= params[0] * bm * bn {
        return;
    }
    let bi = t / (bm * bn);
    let i0 = (t / bn) % bm * 4u;
    let j0 = t % bn * 4u;
    let a_off = params[7] + bi * m * k;
    let b_off = params[8] + select(0u, bi * k * n, params[4] == 1u);
    // element (i, l) of A and (l, j) of B, as strides
    let a_si = select(k, 1u, params[5] == 1u);
    let a_sl = select(1u, m, params[5] == 1u);
    let b_sl = select(n, 1u, params[6] == 1u);
    let b_sj = select(1u, k, params[6] == 1u);
    var acc: array<array<f32, 4>, 4>;
    for (var l = 0u; l < k; l++) {
        var av: array<f32, 4>;
        var bv: array<f32, 4>;
        for (var r = 0u; r < 4u; r++) {
            let i = min(i0 + r, m - 1u);
            av[r] = a[a_off + i * a_si + l * a_sl];
            let j = min(j0 + r, n - 1u);
            bv[r] = b[b_off + l * b_sl + j * b_sj];
        }
        for (var r = 0u; r < 4u; r++) {
            for (var s = 0u; s < 4u; s++) {
                acc[r][s] += av[r] * bv[s];
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            if i0 + r < m && j0 + s < n {
                c[params[9] + (bi * m + i0 + r) * params[10] + j0 + s] = acc[r][s];
            }
        }
    }
}
