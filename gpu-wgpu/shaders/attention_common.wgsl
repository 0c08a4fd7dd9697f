// Fused attention's shared part (attention.wgsl, attention_dq.wgsl, attention_dkdv.wgsl): one
// invocation per row of one operand, a workgroup of WG consecutive rows of ONE problem, which
// stage TK rows of another operand at a time in workgroup memory, CW columns at a time (zero
// past the rows and columns that exist); an invocation keeps CW columns of its own row and of
// its accumulator as vec4s in private memory, so any width runs in chunks of CW columns. Each
// kernel file defines `fetch(slot, i)`, the element `i` of the operand in `slot`.
//
// params: 0 problems in this window, 1 problems per batch row, 2 seq_q, 3 seq_k, 4 head_dim,
// 5 v_dim, 6 the scale's f32 bits, 7 causal, 8 the first column of this dispatch's chunk, 9
// and 10 the block of keys (queries for dk, dv) this dispatch visits, 11 whether it is the
// first block (accumulators start at zero), 12 whether the last (results finished), 13 save
// (forward only), then per operand slot from 14: its first element in the window, its batch
// row, head and row strides (problem p's row r starts at base + (p / per) * batch + (p % per)
// * head + r * row, as core's `Rows`).
const WG: u32 = 64u;
const TK: u32 = 32u;
const CW: u32 = 64u;
// CW / 4: vec4s per chunk
const V4: u32 = 16u;

var<workgroup> tile: array<f32, 2048>;

// Where one invocation works: its problem, its workgroup's first row, its row (clamped to the
// last, so that an invocation past the end computes on a real row), and whether that row is
// its own (else it writes nothing).
struct Place {
    p: u32,
    r0: u32,
    row: u32,
    live: bool,
}

fn place(wid: vec3<u32>, nwg: vec3<u32>, lane: u32, rows: u32) -> Place {
    let blocks = (rows + WG - 1u) / WG;
    let total = params[0] * blocks;
    let g = wid.x + wid.y * nwg.x;
    let gg = min(g, total - 1u);
    let r0 = (gg % blocks) * WG;
    let i = r0 + lane;
    return Place(gg / blocks, r0, min(i, rows - 1u), g < total && i < rows);
}

// The first element of row r of problem p of the operand in `slot`.
fn at(slot: u32, p: u32, r: u32) -> u32 {
    let o = 14u + 4u * slot;
    let per = params[1];
    return params[o] + (p / per) * params[o + 1u] + (p % per) * params[o + 2u] + r * params[o + 3u];
}

// vec4s holding columns c0.. of a `width` wide row in one chunk, in whole groups of four
// (the padding is zero on both sides of a product).
fn quads(width: u32, c0: u32) -> u32 {
    let n = min(width - min(c0, width), CW);
    return (n + 15u) / 16u * 4u;
}

// Columns c0.. of a `width` wide row in one chunk.
fn cols(width: u32, c0: u32) -> u32 {
    return min(width - min(c0, width), CW);
}

// Stages rows r0..r0 + TK (those below nr) of problem p of operand `slot`, columns c0..c0 + CW
// (those below width), in `tile`; zero elsewhere. Every invocation of the workgroup calls it.
fn stage(slot: u32, p: u32, r0: u32, nr: u32, c0: u32, width: u32, lane: u32) {
    workgroupBarrier();
    for (var e = lane; e < TK * CW; e += WG) {
        let j = e / CW;
        let c = e % CW;
        var x = 0.0;
        if r0 + j < nr && c0 + c < width {
            x = fetch(slot, at(slot, p, r0 + j) + c0 + c);
        }
        tile[e] = x;
    }
    workgroupBarrier();
}

fn pick(slot: u32, base: u32, c: u32, n: u32) -> f32 {
    if c < n {
        return fetch(slot, base + c);
    }
    return 0.0;
}

// Columns c0..c0 + CW (those below width) of row r of problem p of operand `slot`; zero past.
fn own(slot: u32, p: u32, r: u32, c0: u32, width: u32) -> array<vec4<f32>, 16> {
    var a: array<vec4<f32>, 16>;
    let base = at(slot, p, r) + c0;
    let n = cols(width, c0);
    for (var x = 0u; x < V4; x++) {
        let c = 4u * x;
        a[x] = vec4(pick(slot, base, c, n), pick(slot, base, c + 1u, n), pick(slot, base, c + 2u, n),
            pick(slot, base, c + 3u, n));
    }
    return a;
}

// Four columns of row j of the tile.
fn tv(j: u32, x: u32) -> vec4<f32> {
    let b = j * CW + 4u * x;
    return vec4(tile[b], tile[b + 1u], tile[b + 2u], tile[b + 3u]);
}

// The product of `a`'s first n4 vec4s with tile row j.
fn dot_tile(a: ptr<function, array<vec4<f32>, 16>>, j: u32, n4: u32) -> f32 {
    var s = 0.0;
    for (var x = 0u; x < n4; x += 4u) {
        s += dot((*a)[x], tv(j, x)) + dot((*a)[x + 1u], tv(j, x + 1u))
            + dot((*a)[x + 2u], tv(j, x + 2u)) + dot((*a)[x + 3u], tv(j, x + 3u));
    }
    return s;
}

// a += f * tile row j, over a's first n4 vec4s.
fn add_tile(a: ptr<function, array<vec4<f32>, 16>>, f: f32, j: u32, n4: u32) {
    for (var x = 0u; x < n4; x += 4u) {
        (*a)[x] += f * tv(j, x);
        (*a)[x + 1u] += f * tv(j, x + 1u);
        (*a)[x + 2u] += f * tv(j, x + 2u);
        (*a)[x + 3u] += f * tv(j, x + 3u);
    }
}

// Column c of a chunk held as vec4s.
fn col(a: ptr<function, array<vec4<f32>, 16>>, c: u32) -> f32 {
    return (*a)[c / 4u][c % 4u];
}
