// Row gather (any dtype, as words) and row scatter-add (f32), on a block of table rows
// [first_row, first_row + block_rows) and a block of indices [first_idx, first_idx + count) of
// the bound piece of the index list, so tables, index lists and outputs past one binding work
// in pieces. params: mode, count, row_words,
// block_rows, first_row (global: the table may hold rows from a start on), first_idx, src
// base, out base, accumulate. Indices are i64, read as
// their low word (core refuses ones outside the table; given one, no word is read or written
// for it).
// mode 0: out[r, c] = table[idx[r], c] for the block's indices that fall in its rows, one
//   thread per output word of the index block;
// mode 1: out[row, c] (+)= sum of src[i, c] over the block's indices with idx[i] == row, one
//   thread per output word of the row block (accumulate 1 adds to what is there).
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = flat(gid, nwg);
    let count = params[1];
    let rw = params[2];
    let first_row = params[4];
    let first_idx = params[5];
    let src_base = params[6];
    let out_base = params[7];
    if params[0] == 0u {
        if w >= count * rw {
            return;
        }
        let i = idx[2u * (first_idx + w / rw)];
        if i >= first_row && i < first_row + params[3] {
            out[out_base + w] = src[src_base + (i - first_row) * rw + w % rw];
        }
    } else {
        if w >= params[3] * rw {
            return;
        }
        let row = first_row + w / rw;
        var acc = 0.0;
        for (var i = 0u; i < count; i++) {
            if idx[2u * (first_idx + i)] == row {
                acc += bitcast<f32>(src[src_base + i * rw + w % rw]);
            }
        }
        if params[8] == 1u {
            acc += bitcast<f32>(out[out_base + w]);
        }
        out[out_base + w] = bitcast<u32>(acc);
    }
}
