// Shared by every kernel: the flat thread index over a 2-D grid of 256-thread workgroups
// (one dimension holds at most 65535 workgroups), and the parameter words.
@group(0) @binding(0) var<storage, read> params: array<u32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}
