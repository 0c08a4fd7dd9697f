//! Counter-based random numbers (Philox 4x32-10, Salmon et al., SC'11). A value depends only on
//! (key, counter), so a global tensor's element can be computed by whichever rank holds it: the
//! same seed gives the same global tensor on any number of ranks, under any SBP.

/// The global random generator's whole state: the seed and how many random tensors were
/// made since seeding. Saving it with a checkpoint and restoring it with [`set_rng_state`]
/// makes a resumed run draw the same data, dropout masks and initialisations as an unbroken
/// one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RngState {
    /// The seed set by `manual_seed`.
    pub seed: u64,
    /// How many random tensors have been made since the last seeding.
    pub counter: u64,
}

/// The current env's random generator state (this rank's; every rank has the same after the
/// same global operations).
///
/// ```
/// gflow_core::manual_seed(3);
/// let s = gflow_core::rng::rng_state();
/// let a = gflow_core::Tensor::randn(&[4], gflow_core::Device::Cpu)?.to_vec::<f32>()?;
/// gflow_core::rng::set_rng_state(s);
/// let b = gflow_core::Tensor::randn(&[4], gflow_core::Device::Cpu)?.to_vec::<f32>()?;
/// assert_eq!(a, b);
/// # Ok::<(), gflow_core::Error>(())
/// ```
pub fn rng_state() -> RngState {
    crate::env::current().rng_state()
}

/// Restores the current env's random generator to `state` (from [`rng_state`]).
pub fn set_rng_state(state: RngState) {
    crate::env::current().set_rng_state(state);
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox 4x32 with 10 rounds: four random u32 from a 128-bit counter and a 64-bit key.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for _ in 0..10 {
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// Standard normal values for global element indices `start..start + out.len()` of the random
/// stream `stream` under `seed`. Elements come in groups of four per Philox call (two Box-Muller
/// pairs), so any sub-range gives the same values as the whole.
pub fn normal_f64(seed: u64, stream: u64, start: u64, out: &mut [f64]) {
    fill(seed, stream, start, out, box_muller);
}

/// Uniform values in [0, 1) for global element indices `start..start + out.len()` of the random
/// stream `stream` under `seed` (one Philox lane per element, so any sub-range agrees).
pub fn uniform_f64(seed: u64, stream: u64, start: u64, out: &mut [f64]) {
    fill(seed, stream, start, out, |r| {
        r.map(|x| (f64::from(x) + 0.5) / 4_294_967_296.0)
    });
}

/// Fills `out` with element `start + i` of the stream, four elements per Philox block.
fn fill(seed: u64, stream: u64, start: u64, out: &mut [f64], map: fn([u32; 4]) -> [f64; 4]) {
    let key = [seed as u32, (seed >> 32) as u32];
    let mut i = 0usize;
    while i < out.len() {
        let g = start + i as u64;
        let block = g / 4;
        let r = philox4x32_10(
            [
                block as u32,
                (block >> 32) as u32,
                stream as u32,
                (stream >> 32) as u32,
            ],
            key,
        );
        for v in map(r).iter().skip((g % 4) as usize) {
            if i >= out.len() {
                break;
            }
            out[i] = *v;
            i += 1;
        }
    }
}

/// Four normals from four uniform u32 (two Box-Muller transforms).
fn box_muller(r: [u32; 4]) -> [f64; 4] {
    // u in (0, 1]: never 0, so ln(u) is finite.
    let u = |x: u32| (f64::from(x) + 1.0) / 4_294_967_296.0;
    let tau = std::f64::consts::TAU;
    let (r0, r1) = ((-2.0 * u(r[0]).ln()).sqrt(), (-2.0 * u(r[2]).ln()).sqrt());
    let (t0, t1) = (tau * u(r[1]), tau * u(r[3]));
    [r0 * t0.cos(), r0 * t0.sin(), r1 * t1.cos(), r1 * t1.sin()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
    #[test]
    fn philox_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn sub_ranges_agree_and_moments_are_normal() {
        let mut all = vec![0.0; 10_000];
        normal_f64(7, 3, 0, &mut all);
        let mut part = vec![0.0; 13];
        normal_f64(7, 3, 5, &mut part);
        assert_eq!(&all[5..18], &part[..]);
        let mean = all.iter().sum::<f64>() / all.len() as f64;
        let var = all.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / all.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "var {var}");
        let mut other = vec![0.0; 4];
        normal_f64(7, 4, 0, &mut other);
        assert_ne!(&all[..4], &other[..]);
    }

    #[test]
    fn uniform_sub_ranges_agree_and_moments_are_uniform() {
        let mut all = vec![0.0; 10_000];
        uniform_f64(7, 3, 0, &mut all);
        let mut part = vec![0.0; 7];
        uniform_f64(7, 3, 3, &mut part);
        assert_eq!(&all[3..10], &part[..]);
        assert!(all.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = all.iter().sum::<f64>() / all.len() as f64;
        let var = all.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / all.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.01, "var {var}");
    }
}
