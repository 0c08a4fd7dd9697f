// Copies of a box between two strided layouts, any dtype, as 32-bit words (wpe words per
// element): one thread per element of the box. params: n, wpe, ndim, x base, out base, then
// extent[ndim], x strides[ndim], out strides[ndim] (in elements). out[out base + offset_out(e)] =
// x[x base + offset_x(e)]: a slice or permute (out contiguous), one input of a concatenation (x
// contiguous), or a block of either. The bases let pieces of large tensors be bound at aligned
// offsets.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if e >= params[0] {
        return;
    }
    let wpe = params[1];
    let nd = params[2];
    var rest = e;
    var src = params[3];
    var dst = params[4];
    for (var d = nd; d > 0u; d--) {
        let size = params[5u + d - 1u];
        let i = rest % size;
        src += i * params[5u + nd + d - 1u];
        dst += i * params[5u + 2u * nd + d - 1u];
        rest = rest / size;
    }
    for (var w = 0u; w < wpe; w++) {
        out[dst * wpe + w] = x[src * wpe + w];
    }
}
