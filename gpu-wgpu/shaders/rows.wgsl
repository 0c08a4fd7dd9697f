// Row gather (any dtype, as words) and row scatter-add (f32). params: mode, count (indices),
// row_words, rows. Indices are i64, read as their low word (checked on the host beforehand).
// mode 0: out[r, c] = table[idx[r], c], one thread per output word.
// mode 1: out[row, c] = sum of src[i, c] over i with idx[i] == row, one thread per output word.
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat(gid, nwg);
    let count = params[1];
    let rw = params[2];
    if params[0] == 0u {
        if w >= count * rw {
            return;
        }
        let r = w / rw;
        out[w] = src[idx[2u * r] * rw + w % rw];
    } else {
        if w >= params[3] * rw {
            return;
        }
        let row = w / rw;
        var acc = 0.0;
        for (var i = 0u; i < count; i++) {
            if idx[2u * i] == row {
                acc += bitcast<f32>(src[i * rw + w % rw]);
            }
        }
        out[w] = bitcast<u32>(acc);
    }
}
