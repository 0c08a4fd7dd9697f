//! The CUDA kernels' logic, checked on any machine: `tests/emulated/*.cpp` include
//! `kernels/gflow.cu` (and `kernels/convert.cu`) with a small CPU stand-in for CUDA
//! (`prelude.h`: blocks in turn, a block's threads as OS threads meeting at a barrier for
//! `__syncthreads`). `kernels_test.cpp` compares every kernel with a plain loop;
//! `convert_test.cpp` compares the casts with the host's (`HostData::cast`, the `half` crate's
//! conversions) bit for bit, on cases this file writes. What it cannot see (NVRTC
//! compilation, cuBLAS, real memory) the conformance suite checks where a driver is.
#![allow(clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use gflow_core::backend::{KernelLang, kernel_constants};
use gflow_core::{DType, HostData, bf16, f16};

/// `tests/emulated/<cpp>` built with g++ (the kernel codes NVRTC gets before the source
/// included first), or `None` after a loud skip where there is no g++.
fn build(test: &str, cpp: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emulated");
    let bin = std::env::temp_dir().join(format!("gflow-cuda-{test}-{}", std::process::id()));
    let codes = bin.with_extension("h");
    std::fs::write(&codes, kernel_constants(KernelLang::Cuda)).expect("write the kernel codes");
    let built = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", "-include"])
        .arg(&codes)
        .arg("-o")
        .arg(&bin)
        .arg(dir.join(cpp))
        .output();
    let _ = std::fs::remove_file(&codes);
    let built = match built {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            gflow_core::backend::say_skipped(
                test,
                &"no g++ on this machine to build the emulated CUDA kernels",
            );
            return None;
        }
        Err(e) => panic!("g++: {e}"),
    };
    assert!(
        built.status.success(),
        "the kernels do not build as C++: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(bin)
}

/// Runs `bin` with the files `args` (then deletes them all); it must exit 0 and report no
/// failure.
fn run_clean(bin: &Path, args: &[&Path]) -> String {
    let ran = Command::new(bin)
        .args(args)
        .output()
        .expect("run the emulated kernels");
    for f in args.iter().chain([&bin]) {
        let _ = std::fs::remove_file(f);
    }
    let out = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert!(ran.status.success(), "emulated kernels disagree:\n{out}");
    assert!(out.contains("fails: 0"), "{out}");
    out
}

#[test]
fn kernels_match_plain_loops_on_the_cpu() {
    if let Some(bin) = build("kernels_match_plain_loops_on_the_cpu", "kernels_test.cpp") {
        run_clean(&bin, &[]);
    }
}

/// A xorshift generator: bit patterns over every exponent, sign and payload.
struct Bits(u64);

impl Bits {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// F32 edge values: signed zeros, infinities, NaNs (quiet, signalling, payloads), f32 and
/// 16-bit subnormals and their rounding ties, ties of both 16-bit formats, values rounding up
/// past their largest finite values, and the integer limits.
fn edge_f32() -> Vec<f32> {
    let mut v: Vec<f32> = [
        0x0000_0000,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0xffbf_ffff,
        0xffc0_1234,
        0x7fff_ffff,
        0x0000_0001,
        0x807f_ffff,
        0x0080_0000,
        0x7f7f_ffff,
        0xff7f_8000,
        0x7f7f_7fff,
        0x3f80_8000, // 1 + 2^-8: a BF16 tie to even (down)
        0x3f81_8000, // 1 + 3 * 2^-8: a BF16 tie to even (up)
        0x3f80_1000, // 1 + 2^-11: an F16 tie (down)
        0x3f80_3000, // 1 + 3 * 2^-11: an F16 tie (up)
        0x3f80_1001,
        0x3380_0000, // 2^-24: the smallest F16 subnormal
        0x3300_0000, // 2^-25: a tie to zero
        0x3340_0000, // 3 * 2^-26
        0x33c0_0000, // 3 * 2^-25: a tie to 2 * 2^-24
        0x387f_c000, // the largest F16 subnormal rounding into the normals
        0x387f_e000,
    ]
    .iter()
    .map(|&b: &u32| f32::from_bits(b))
    .collect();
    v.extend([
        65504.0,
        65519.0,
        65519.99,
        65520.0,
        -65520.0,
        1e6,
        -1.5,
        2.5,
        -2.5,
        0.1,
        -0.7,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        9.223_372e18,
        -9.3e18,
        1e20,
        3.4e38,
    ]);
    let mut r = Bits(0x9e37_79b9_7f4a_7c15);
    v.extend((0..4000).map(|_| f32::from_bits(r.next() as u32)));
    v
}

/// F64 inputs: the F32 edges nudged, values whose two roundings through f32 differ from one
/// (the host's route to 16-bit), NaNs with payloads only in the low word, random bits.
fn edge_f64() -> Vec<f64> {
    let mut v: Vec<f64> = edge_f32()[..45]
        .iter()
        .map(|&x| f64::from(x) * 1.000_000_1)
        .collect();
    v.extend([
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        1.0 + 2f64.powi(-8) + 2f64.powi(-35),
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::from_bits(0xfff8_0000_0000_0000),
        f64::from_bits(0x0000_0000_0000_0001),
        f64::MAX,
        -1e300,
        5e-324,
        2_147_483_647.5,
        -2_147_483_648.9,
        -2_147_483_649.0,
    ]);
    let mut r = Bits(0x2545_f491_4f6c_dd1d);
    v.extend((0..4000).map(|_| f64::from_bits(r.next())));
    // random values in the 16-bit ranges, where random bits seldom land
    v.extend((0..2000).map(|_| {
        let b = r.next();
        f64::from_bits((b & 0x800f_ffff_ffff_ffff) | ((0x3e0 + (b >> 52) % 0x40) << 52))
    }));
    v
}

/// I32 inputs: limits, ties and inexact values of F32, F16 and BF16 (bits below the top 21
/// included: the route through f32 keeps them), random values of every magnitude.
fn edge_i32() -> Vec<i32> {
    let mut v = vec![
        0,
        1,
        -1,
        255,
        257,
        259,
        -2049,
        65504,
        65519,
        65520,
        (1 << 24) + 1,
        (1 << 24) + 3,
        0x0100_8000,
        0x0101_0000,
        0x0101_0001,
        0x0103_0000,
        -0x0101_0001,
        0x7fff_ff80,
        i32::MAX,
        i32::MIN,
        -123_456_789,
    ];
    let mut r = Bits(0x1234_5678_9abc_def1);
    v.extend((0..3000).map(|_| {
        let b = r.next();
        (b as i32) >> (b >> 59)
    }));
    v
}

/// The bytes of `h` as the device holds them (Bool as 32-bit words).
fn device_bytes(h: &HostData) -> Vec<u8> {
    match h {
        HostData::Bool(v) => v.iter().flat_map(|&b| u32::from(b).to_ne_bytes()).collect(),
        _ => h.as_bytes().to_vec(),
    }
}

/// The cases: every source dtype CUDA casts from (every 16-bit pattern for F16 and BF16) to
/// every dtype, with the host's result.
fn cases() -> Vec<u8> {
    let every16: Vec<u16> = (0..=u16::MAX).collect();
    let sources = [
        HostData::F32(edge_f32()),
        HostData::F64(edge_f64()),
        HostData::F16(every16.iter().map(|&b| f16::from_bits(b)).collect()),
        HostData::BF16(every16.iter().map(|&b| bf16::from_bits(b)).collect()),
        HostData::I32(edge_i32()),
    ];
    let mut out = Vec::new();
    for x in &sources {
        for to in DType::ALL {
            if to == x.dtype() {
                continue;
            }
            out.extend((x.dtype().code() as u32).to_ne_bytes());
            out.extend((to.code() as u32).to_ne_bytes());
            out.extend((x.len() as u64).to_ne_bytes());
            out.extend(device_bytes(x));
            out.extend(device_bytes(&x.cast(to)));
        }
    }
    out
}

#[test]
fn casts_match_the_hosts_bit_for_bit() {
    let test = "casts_match_the_hosts_bit_for_bit";
    if let Some(bin) = build(test, "convert_test.cpp") {
        let data = bin.with_extension("cases");
        std::fs::write(&data, cases()).expect("write the cases");
        eprintln!("{}", run_clean(&bin, &[&data]));
    }
}
