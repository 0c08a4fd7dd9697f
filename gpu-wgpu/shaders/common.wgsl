// Shared by every kernel: the flat thread index over a 2-D grid of 256-thread workgroups
// (one dimension holds at most 65535 workgroups), the parameter words, a NaN test and
// the order of floats as integers.
@group(0) @binding(0) var<storage, read> params: array<u32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// Whether v is NaN, by its bits: WGSL lets compilers assume no NaN, and Mesa's folds `v != v`
// to false (and its max and min may return the other operand).
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// The order of a float that is not NaN as an integer: -0 and 0 equal, subnormals kept. Max and
// min compare these: compilers may flush subnormals in float comparisons and turn a compare
// and select into max or min, which may return either of -0 and 0.
fn order(v: f32) -> i32 {
    let b = bitcast<i32>(v);
    return select(b, -(b & 0x7fffffff), b < 0);
}
