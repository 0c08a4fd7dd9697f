// Batched C = A B for real GPUs: each 256-thread workgroup computes a 64x64 tile of C, each
// thread a 4x4 block of it in registers (vec4 rows). K advances 16 at a time through workgroup
// memory: every thread loads 4 elements of the A tile and 4 of the B tile (consecutive threads
// read consecutive addresses whether an operand is transposed or not), then multiplies vec4
// columns of A by vec4 rows of B. params: batch, m, k, n, b_batched, a_trans, b_trans, the first
// element of a, b and c in their bindings (pieces of large tensors start anywhere), and c's row
// stride.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// [16 k][16 vec4 of rows] and [16 k][16 vec4 of columns]
var<workgroup> a_tile: array<vec4<f32>, 256>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let m = params[1];
    let k = params[2];
    let n = params[3];
    let tiles_m = (m + 63u) / 64u;
    let tiles_n = (n + 63u) / 64u;
    let w = wg.x + wg.y * nwg.x;
    if w >= params[0] * tiles_m * tiles_n {
        return;
    }
    let bi = w / (tiles_m * tiles_n);
    let i_base = (w / tiles_n) % tiles_m * 64u;
    let j_base = w % tiles_n * 64u;
    let a_off = params[7] + bi * m * k;
    let b_off = params[8] + select(0u, bi * k * n, params[4] == 1u);
    let a_trans = params[5] == 1u;
    let b_trans = params[6] == 1u;
    let a_si = select(k, 1u, a_trans);
    let a_sl = select(1u, m, a_trans);
    let b_sl = select(n, 1u, b_trans);
    let b_sj = select(1u, k, b_trans);
    let tx = li % 16u;
    let ty = li / 16u;
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < k; k0 += 16u) {
        for (var e = 0u; e < 4u; e++) {
            let idx = li + e * 256u;
            // A tile element (row, kk): along k in memory unless A is transposed
            let row = select(idx / 16u, idx % 64u, a_trans);
            let kk = select(idx % 16u, idx / 64u, a_trans);
            let i = i_base + row;
            let l = k0 + kk;
            var v = 0.0;
            if i < m && l < k {
                v = a[a_off + i * a_si + l * a_sl];
            }
            a_tile[kk * 16u + row / 4u][row % 4u] = v;
            // B tile element (kk, col): along n in memory unless B is transposed
            let col = select(idx % 64u, idx / 16u, b_trans);
            let kb = select(idx / 64u, idx % 16u, b_trans);
            let j = j_base + col;
            let lb = k0 + kb;
            var u = 0.0;
            if j < n && lb < k {
                u = b[b_off + lb * b_sl + j * b_sj];
            }
            b_tile[kb * 16u + col / 4u][col % 4u] = u;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let av = a_tile[kk * 16u + ty];
            let bv = b_tile[kk * 16u + tx];
            acc[0] += av.x * bv;
            acc[1] += av.y * bv;
            acc[2] += av.z * bv;
            acc[3] += av.w * bv;
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r++) {
        let i = i_base + ty * 4u + r;
        for (var s = 0u; s < 4u; s++) {
            let j = j_base + tx * 4u + s;
            if i < m && j < n {
                c[params[9] + (bi * m + i) * params[10] + j] = acc[r][s];
            }
        }
    }
}
