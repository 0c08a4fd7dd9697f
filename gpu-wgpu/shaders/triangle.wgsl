// The lower (upper) triangle of the last two dims: x copied with the elements outside it
// zeroed, one thread per word (any dtype, `elem_words` words per element), on a piece of the
// buffers (so buffers past one binding go in pieces). params: n_words (of the piece),
// elem_words, rows, cols, k (i32 bits), upper, origin row, origin col (the global position of
// the buffer's first element, for a piece of a split matrix), the piece's first word, x base,
// out base.
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = flat(gid, nwg);
    if t >= params[0] {
        return;
    }
    let i = (params[8] + t) / params[1];
    let cols = params[3];
    let r = (i / cols) % params[2];
    let c = i % cols;
    let diff = i32(c + params[7]) - i32(r + params[6]);
    let k = bitcast<i32>(params[4]);
    let keep = select(diff <= k, diff >= k, params[5] == 1u);
    out[params[10] + t] = select(0u, x[params[9] + t], keep);
}
