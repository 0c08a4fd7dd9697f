// out[i] = a[ia] op b[ib] with NumPy broadcasting. params: n, op (a BINARY_* code, or
// CMP_BASE + a CMP_* code: the comparison as 1.0 or 0.0, a Bool word), ndim, then out_shape[ndim],
// a_strides[ndim], b_strides[ndim] (element strides, 0 along broadcast dimensions), and the
// first element of a, b and out in their bindings (pieces of large tensors start anywhere).
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// The first comparison code (the backend's elementwise.rs has the same constant).
const CMP_BASE: u32 = 64u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i >= params[0] {
        return;
    }
    let nd = params[2];
    var rest = i;
    var ia = params[3u + 3u * nd];
    var ib = params[4u + 3u * nd];
    for (var d = nd; d > 0u; d--) {
        let size = params[3u + d - 1u];
        let c = rest % size;
        rest = rest / size;
        ia += c * params[3u + nd + d - 1u];
        ib += c * params[3u + 2u * nd + d - 1u];
    }
    let p = a[ia];
    let q = b[ib];
    var r: f32;
    let op = params[1];
    if op >= CMP_BASE {
        // NaN compares unequal to everything (by its bits: WGSL may assume no NaN)
        let nan = is_nan(p) || is_nan(q);
        var t: bool;
        switch op - CMP_BASE {
            case CMP_EQ: { t = !nan && p == q; }
            case CMP_NE: { t = nan || p != q; }
            case CMP_LT: { t = !nan && p < q; }
            case CMP_LE: { t = !nan && p <= q; }
            case CMP_GT: { t = !nan && p > q; }
            default: { t = !nan && p >= q; }
        }
        out[params[5u + 3u * nd] + i] = select(0.0, 1.0, t);
        return;
    }
    switch op {
        case BINARY_ADD: { r = p + q; }
        case BINARY_SUB: { r = p - q; }
        case BINARY_MUL: { r = p * q; }
        case BINARY_DIV: { r = p / q; }
        // The CPU's: NaN if either is (tested by its bits), else the larger (smaller), p when
        // they are equal (maximum(-0, 0) is -0, maximum(0, -0) is 0, as PyTorch's CPU).
        case BINARY_MAXIMUM: { r = select(select(p, q, order(q) > order(p)), p + q, is_nan(p) || is_nan(q)); }
        default: { r = select(select(p, q, order(q) < order(p)), p + q, is_nan(p) || is_nan(q)); }
    }
    out[params[5u + 3u * nd] + i] = r;
}
