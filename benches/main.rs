//! `gflow-bench`: benchmarks printing one JSON line per measurement, in the format of
//! `docs/benchmarks.md` (median of the slowest rank over runs after warm-ups).
//!
//! Run: `cargo run --release --bin gflow-bench -- WHAT [--ranks N] [--mib M] [--runs R] [--sizes a,b]`
//! where WHAT is `boxing` (to_global S(0)->B and P->B as simulated ranks; under `gflow-launch`,
//! four `to_global`s each against its raw collective of the same bytes, `vs_collective` the
//! ratio, `--sizes` and `--ops` as for `collectives`), `matmul` (CPU f32 matmul) or `dispatch`
//! (the overhead of a global op that needs no communication) or `collectives` (run it under
//! `gflow-launch`; rank 0 appends JSON lines to `--out FILE`, default stdout) or `train` (steps/s
//! of a data-parallel MLP, 3 layers of `--width` (1024) at global batch `--batch` (256); under
//! `gflow-launch`, or as simulated ranks without it) or `ops` (the transformer operators, fwd
//! and fwd+bwd, against `benches/peers/torch_ops_bench.py`: `--act b,t,d --attn b,h,t,d --mm n
//! --small`) or `gpt` (tokens/s and MFU of `examples/gpt`, see `benches/gpt.rs`) or `weighted`
//! (`train` on a mixed wgpu + CPU placement, balanced splits against `Placement::with_weights`
//! by measured speed, see `benches/weighted.rs`).

use std::time::Instant;

mod checkpoint;
mod gpt;
mod ops;
mod weighted;

/// Large buffers in shared memory: collectives between processes of one host copy once.
#[global_allocator]
static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;

use gflow::prelude::*;

/// What `gflow-bench` measures (`gpt` and `checkpoint` take their own flags: `gflow-bench gpt
/// --help`, `gflow-bench checkpoint --help`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum What {
    /// `to_global` S(0)->B and P->B (simulated ranks; under `gflow-launch`, four conversions
    /// each against its raw collective).
    Boxing,
    /// f32 matmul on `--device`.
    Matmul,
    /// The overhead of a global op that needs no communication.
    Dispatch,
    /// The collectives and point to point, under `gflow-launch`.
    Collectives,
    /// Steps/s of a data-parallel MLP.
    Train,
    /// The transformer operators, forward and forward+backward.
    Ops,
    /// `train` on a mixed wgpu + CPU placement, balanced against weighted splits.
    Weighted,
}

/// `gflow-bench` flags (each benchmark reads the ones it names).
#[derive(clap::Parser, Debug)]
#[command(
    name = "gflow-bench",
    about = "gflow's benchmarks: one JSON line per measurement",
    after_help = "Also: `gflow-bench gpt ...` (tokens/s and MFU of the GPT) and \
                  `gflow-bench checkpoint ...` (save and load against torch DCP), each with its own flags."
)]
struct Args {
    /// The benchmark.
    #[arg(value_enum, default_value_t = What::Boxing)]
    what: What,
    /// Append rank 0's JSON lines to this file (default: stdout).
    #[arg(long)]
    out: Option<String>,
    /// Ranks as threads (when not under `gflow-launch`).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// `boxing` as threads: the tensor's MiB.
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Timed runs (after two warm-ups).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Sizes: matrix sides for `matmul`, MiB (or KiB with `--kib`) for `collectives` and
    /// launched `boxing`.
    #[arg(long, value_delimiter = ',', default_values_t = [256, 1024, 2048])]
    sizes: Vec<usize>,
    /// `train`/`weighted`: the MLP's width.
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// `train`/`weighted`: the global batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// `collectives` and launched `boxing`: the operations to time (all when empty:
    /// all_reduce, all_gather, reduce_scatter, all_to_all, p2p); `ops`: the operators.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// `matmul`: the backend (`cpu`, `wgpu` or `cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// `collectives`: `--sizes` in KiB rather than MiB (latency-bound messages).
    #[arg(long)]
    kib: bool,
    /// `ops`: activations (batch, seq, width).
    #[arg(long, value_delimiter = ',', num_args = 1, default_values_t = [8, 1024, 768])]
    act: Vec<usize>,
    /// `ops`: attention (batch, heads, seq, head_dim).
    #[arg(long, value_delimiter = ',', num_args = 1, default_values_t = [8, 12, 256, 64])]
    attn: Vec<usize>,
    /// `ops`: the matmul's m = k = n.
    #[arg(long, default_value_t = 1024)]
    mm: usize,
    /// `ops`: a quarter of the batch and sequence (and of `--mm`), for a quick run.
    #[arg(long)]
    small: bool,
}

impl Args {
    /// The `ops` sizes the flags give, or what is wrong with them.
    fn op_sizes(&self) -> Result<ops::OpSizes> {
        let bad = |flag: &'static str, want: usize, got: &[usize]| gflow::Error::InvalidArgument {
            op: flag,
            reason: format!("{want} sizes expected (like 8,1024,768), got {got:?}"),
        };
        if self.act.len() != 3 {
            return Err(bad("--act", 3, &self.act));
        }
        if self.attn.len() != 4 {
            return Err(bad("--attn", 4, &self.attn));
        }
        let (mut act, mut attn, mut mm) = (self.act.clone(), self.attn.clone(), self.mm);
        if self.small {
            act[0] = (act[0] / 4).max(1);
            act[1] = (act[1] / 4).max(1);
            attn[0] = (attn[0] / 4).max(1);
            attn[2] = (attn[2] / 4).max(1);
            mm /= 4;
        }
        Ok(ops::OpSizes { act, attn, mm })
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the collective `op` (`all_reduce`, `all_gather`, `reduce_scatter`, else all_to_all) of
/// `src` on `world`, each member's part `small.len()` elements: `src` reduced into `dst`, the
/// first part of `src` gathered into `dst`, the first `world.len()` parts of `src` reduced and
/// scattered into `small`, or sent one part to each member into `dst`.
fn raw_collective(
    c: &dyn gflow::Communicator,
    world: &[usize],
    op: &str,
    src: &[f32],
    dst: &mut [f32],
    small: &mut [f32],
) -> Result<()> {
    let (n, part) = (world.len(), small.len());
    let sizes = vec![part * 4; n];
    match op {
        // src reduced into dst, as MPI's Allreduce(src, dst) (Gloo's script copies src into
        // dst and reduces that in place).
        "all_reduce" => c.all_reduce_into(
            world,
            bytemuck::cast_slice(src),
            bytemuck::cast_slice_mut(dst),
            DType::F32,
            gflow::ReduceOp::Sum,
        )?,
        "all_gather" => c.all_gather_into(
            world,
            bytemuck::cast_slice(&src[..part]),
            &sizes,
            bytemuck::cast_slice_mut(&mut dst[..part * n]),
        )?,
        "reduce_scatter" => c.reduce_scatter_into(
            world,
            bytemuck::cast_slice(&src[..part * n]),
            &sizes,
            DType::F32,
            gflow::ReduceOp::Sum,
            bytemuck::cast_slice_mut(small),
        )?,
        _ => {
            let sends: Vec<&[u8]> = src[..part * n]
                .chunks(part.max(1))
                .map(bytemuck::cast_slice)
                .take(n)
                .collect();
            c.all_to_all_into(
                world,
                &sends,
                &sizes,
                bytemuck::cast_slice_mut(&mut dst[..part * n]),
            )?;
        }
    }
    Ok(())
}

/// Times `f` on every rank (a barrier before each run) and returns the median of the slowest
/// rank's times.
fn time_collective(env: &Env, runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let world: Vec<usize> = (0..env.world_size()).collect();
    let mut times = vec![];
    for i in 0..runs + 2 {
        env.comm().barrier(&world)?;
        let t = Instant::now();
        f()?;
        let mut dt = [t.elapsed().as_secs_f64()];
        env.comm().all_reduce(
            &world,
            bytemuck::cast_slice_mut(&mut dt),
            DType::F64,
            gflow::ReduceOp::Max,
        )?;
        if i >= 2 {
            times.push(dt[0]);
        }
    }
    Ok(median(times))
}

/// The bytes each host sends to the other hosts in one run of `f` (hosts in the order of their
/// lowest rank), summed from every rank's `comm_stats().bytes_sent_off_host`: what shows a
/// hierarchical collective crossing the network once per host.
fn host_bytes_sent(env: &Env, mut f: impl FnMut() -> Result<()>) -> Result<Vec<u64>> {
    let world: Vec<usize> = (0..env.world_size()).collect();
    env.comm().barrier(&world)?;
    gflow::reset_comm_stats();
    f()?;
    let mine = gflow::comm_stats().bytes_sent_off_host;
    let all = env
        .comm()
        .all_gather(&world, &mine.to_le_bytes(), &vec![8; world.len()])?;
    let mut per_host: Vec<(usize, u64)> = vec![];
    for (rank, b) in all.chunks_exact(8).enumerate() {
        let (host, sent) = (
            env.comm().host_of(rank),
            u64::from_le_bytes(b.try_into().unwrap_or_default()),
        );
        match per_host.iter_mut().find(|(h, _)| *h == host) {
            Some(e) => e.1 += sent,
            None => per_host.push((host, sent)),
        }
    }
    Ok(per_host.into_iter().map(|(_, b)| b).collect())
}

fn boxing(a: &Args) -> Result<()> {
    if gflow::launched() {
        return boxing_processes(a);
    }
    let n = a.ranks;
    let elems = a.mib * (1 << 20) / 4;
    let bytes = elems * 4;
    // Peer in the same run: one memcpy of the buffer on this machine.
    let src = vec![1.0f32; elems];
    let mut dst = vec![0.0f32; elems];
    let mut t = vec![];
    for _ in 0..a.runs + 2 {
        let s = Instant::now();
        dst.copy_from_slice(&src);
        t.push(s.elapsed().as_secs_f64());
        std::hint::black_box(&mut dst);
    }
    let memcpy = median(t[2..].to_vec());
    println!(
        "{{\"system\": \"memcpy\", \"op\": \"copy\", \"ranks\": 1, \"bytes\": {bytes}, \"median_s\": {memcpy:.6}, \"gbs\": {:.3}}}",
        bytes as f64 / memcpy / 1e9
    );
    let results = gflow::simulate(n, |env| {
        let p = Placement::new("cpu", (0..n).collect::<Vec<_>>())?;
        let s0 = Tensor::randn(&[elems / 1024, 1024], (&p, Sbp::split(0)))?;
        let t_s2b = time_collective(&env, a.runs, || {
            s0.to_global(&p, Sbp::broadcast()).map(drop)
        })?;
        let ps = s0.to_global(&p, Sbp::partial_sum())?;
        let t_p2b = time_collective(&env, a.runs, || {
            ps.to_global(&p, Sbp::broadcast()).map(drop)
        })?;
        Ok((t_s2b, t_p2b))
    })?;
    let (s2b, p2b) = results[0];
    let nf = n as f64;
    for (op, t, factor) in [
        ("to_global_s0_to_b", s2b, (nf - 1.0) / nf),
        ("to_global_p_to_b", p2b, 2.0 * (nf - 1.0) / nf),
    ] {
        println!(
            "{{\"system\": \"gflow-inproc\", \"op\": \"{op}\", \"ranks\": {n}, \"bytes\": {bytes}, \"median_s\": {t:.6}, \"busbw_gbs\": {:.3}}}",
            factor * bytes as f64 / t / 1e9
        );
    }
    Ok(())
}

/// `boxing` under `gflow-launch`: each `to_global` that is one collective, timed against that
/// collective of the same bytes on the same links in the same run (the goal: at most 1.1x it).
/// The pairs: partial_sum -> broadcast and all_reduce, split(0) -> broadcast and all_gather,
/// partial_sum -> split(0) and reduce_scatter, split(0) -> split(1) and all_to_all; `bytes` as
/// the collectives' rows count them (per rank, or the gathered or scattered buffer). Rank 0
/// writes one line per pair with both times and `vs_collective`, the ratio.
fn boxing_processes(a: &Args) -> Result<()> {
    let env = gflow::init()?;
    let n = env.world_size();
    let world: Vec<usize> = (0..n).collect();
    let p = Placement::new("cpu", world.clone())?;
    let system = system_name();
    let nf = n as f64;
    let mut lines = vec![];
    for &size in &a.sizes {
        let width = 256 * n;
        // Elements whose split over the ranks (and into rows of `width`) is exact.
        let count = ((if a.kib { size << 10 } else { size << 20 }) / 4 / width).max(1) * width;
        let bytes = count * 4;
        let part = count / n;
        let src: Vec<f32> = (0..count).map(|i| (i % 97) as f32).collect();
        let mut dst = vec![0f32; count];
        let mut small = vec![0f32; part];
        let local =
            |data: &[f32], shape: &[usize]| Tensor::from_vec(data.to_vec(), shape, Device::Cpu);
        let rows = count / 256;
        // Each rank's whole buffer as a summand; a split(0) tensor whose rank holds `part`
        // (gathered: `count`); a split(0) one whose rank holds `count` (exchanged: `count`).
        let partial = local(&src, &[rows, 256])?.to_global(&p, Sbp::partial_sum())?;
        let split = local(&src[..part], &[rows / n, 256])?.to_global(&p, Sbp::split(0))?;
        let wide = local(&src, &[count / width, width])?.to_global(&p, Sbp::split(0))?;
        let c = env.comm();
        let pairs: [(&str, &str, f64, &Tensor, NdSbp); 4] = [
            (
                "to_global_p_to_b",
                "all_reduce",
                2.0 * (nf - 1.0) / nf,
                &partial,
                Sbp::broadcast().into(),
            ),
            (
                "to_global_s0_to_b",
                "all_gather",
                (nf - 1.0) / nf,
                &split,
                Sbp::broadcast().into(),
            ),
            (
                "to_global_p_to_s0",
                "reduce_scatter",
                (nf - 1.0) / nf,
                &partial,
                Sbp::split(0).into(),
            ),
            (
                "to_global_s0_to_s1",
                "all_to_all",
                (nf - 1.0) / nf,
                &wide,
                Sbp::split(1).into(),
            ),
        ];
        let wanted = |raw: &str| a.ops.is_empty() || a.ops.iter().any(|o| o == raw);
        for (op, raw, factor, t, to) in pairs.into_iter().filter(|x| wanted(x.1)) {
            let t_box = time_collective(&env, a.runs, || t.to_global(&p, to.clone()).map(drop))?;
            let t_raw = time_collective(&env, a.runs, || {
                raw_collective(c, &world, raw, &src, &mut dst, &mut small)
            })?;
            lines.push(format!(
                "{{\"system\": \"{system}\", \"op\": \"{op}\", \"ranks\": {n}, \"bytes\": {bytes}, \"median_s\": {t_box:.6}, \"busbw_gbs\": {:.3}, \"collective\": \"{raw}\", \"collective_s\": {t_raw:.6}, \"vs_collective\": {:.3}}}",
                factor * bytes as f64 / t_box / 1e9,
                t_box / t_raw
            ));
        }
    }
    if env.rank() == 0 {
        emit(a, &lines)?;
    }
    Ok(())
}

/// Median seconds of `runs` calls of `f` after two warm-up calls.
fn timed(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t = vec![];
    for i in 0..runs + 2 {
        let s = Instant::now();
        f()?;
        if i >= 2 {
            t.push(s.elapsed().as_secs_f64());
        }
    }
    Ok(median(t))
}

fn print_matmul(system: &str, n: usize, med: f64) {
    println!(
        "{{\"system\": \"{system}\", \"op\": \"matmul_f32\", \"m\": {n}, \"k\": {n}, \"n\": {n}, \"median_s\": {med:.6}, \"gflops\": {:.1}}}",
        2.0 * (n as f64).powi(3) / med / 1e9
    );
}

/// Elementwise add of `bytes`-sized f32 operands (3 buffers moved) against a copy (2 moved).
fn print_add(system: &str, bytes: usize, add: f64, copy: f64) {
    let (add_gbs, copy_gbs) = (
        3.0 * bytes as f64 / add / 1e9,
        2.0 * bytes as f64 / copy / 1e9,
    );
    println!(
        "{{\"system\": \"{system}\", \"op\": \"add_f32\", \"bytes\": {bytes}, \"median_s\": {add:.6}, \"gbs\": {add_gbs:.2}, \"copy_gbs\": {copy_gbs:.2}, \"ratio\": {:.2}}}",
        add_gbs / copy_gbs
    );
}

fn matmul(a: &Args) -> Result<()> {
    match a.device.as_str() {
        "wgpu" => {
            let b = gflow_wgpu::WgpuBackend::new()?;
            eprintln!("wgpu adapter: {}", b.adapter());
            return matmul_on(a, "gflow-wgpu", &b, |b, x| b.copy(x));
        }
        "cuda" => {
            let b = gflow_cuda::CudaBackend::new()?;
            eprintln!("cuda device: {}", b.device_name());
            return matmul_on(a, "gflow-cuda", &b, |b, x| b.copy(x));
        }
        _ => {}
    }
    for &n in &a.sizes {
        let x = Tensor::randn(&[n, n], Device::Cpu)?;
        let w = Tensor::randn(&[n, n], Device::Cpu)?;
        print_matmul("gflow-cpu", n, timed(a.runs, || x.matmul(&w).map(drop))?);
        // elementwise add against a memcpy of one operand (the bandwidth peer)
        let src: Vec<f32> = x.to_vec()?;
        let mut dst = vec![0f32; src.len()];
        let add = timed(a.runs, || (&x + &w).map(drop))?;
        let copy = timed(a.runs, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            Ok(())
        })?;
        print_add("gflow-cpu", n * n * 4, add, copy);
    }
    Ok(())
}

/// f32 matmul GFLOP/s and elementwise add GB/s of a device backend's kernels on
/// device-resident buffers (no staging), with a device-to-device copy's GB/s as the bandwidth
/// peer. `copy` is its device-to-device copy.
fn matmul_on<B: gflow::backend::Backend>(
    a: &Args,
    system: &str,
    b: &B,
    copy: impl Fn(&B, &B::Storage) -> Result<B::Storage>,
) -> Result<()> {
    use gflow::backend::{BinaryOp, MatmulDims};
    // each timed call waits for the device to finish
    let time = |f: &mut dyn FnMut() -> Result<()>| timed(a.runs, || f().and_then(|()| b.sync()));
    for &n in &a.sizes {
        let data: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let x = b.upload(&gflow::HostData::F32(data))?;
        let dims = MatmulDims {
            batch: 1,
            m: n,
            k: n,
            n,
            b_batched: false,
            a_trans: false,
            b_trans: false,
        };
        print_matmul(system, n, time(&mut || b.matmul(&x, &x, dims).map(drop))?);
        let add = time(&mut || {
            b.binary(BinaryOp::Add, &x, &[n * n], &x, &[n * n], &[n * n])
                .map(drop)
        })?;
        let copy = time(&mut || copy(b, &x).map(drop))?;
        print_add(system, n * n * 4, add, copy);
    }
    Ok(())
}

fn dispatch(a: &Args) -> Result<()> {
    let iters = 20_000;
    let n = a.ranks.max(1);
    let per_op = gflow::simulate(n, |env| {
        let p = Placement::new("cpu", (0..n).collect::<Vec<_>>())?;
        let x = Tensor::randn(&[8, 8], (&p, Sbp::split(0)))?;
        let y = Tensor::randn(&[8, 8], (&p, Sbp::split(0)))?;
        let mut t = vec![];
        for _ in 0..a.runs + 2 {
            let s = Instant::now();
            for _ in 0..iters {
                std::hint::black_box((&x + &y)?);
            }
            t.push(s.elapsed().as_secs_f64() / iters as f64);
        }
        let _ = env;
        Ok(median(t[2..].to_vec()))
    })?;
    let worst = per_op.into_iter().fold(0.0, f64::max);
    println!(
        "{{\"system\": \"gflow-sim\", \"op\": \"dispatch_add_8x8_s0\", \"ranks\": {n}, \"median_s\": {worst:.9}}}"
    );
    Ok(())
}

/// The `system` label of a launched run: the links its rank 0 used, as the transport reports
/// them (`gflow-shm` on one host, `gflow-quic` when every peer is over QUIC, `gflow-shm+quic`
/// for some of each, `gflow-tcp`, `gflow-shm+tcp`), with `-ring`, `-direct` or `-doubling` when
/// `GFLOW_COLLECTIVES` forces a schedule. Call after `gflow::init`.
fn system_name() -> String {
    system_label(&gflow::link_kinds())
}

/// [`system_name`] for the link kinds `kinds` (shared memory first; a world of one is `shm`).
fn system_label(kinds: &[&str]) -> String {
    let mut kinds = kinds.to_vec();
    kinds.sort_by_key(|k| (*k != "shm", *k));
    let links = if kinds.is_empty() {
        "shm".to_string()
    } else {
        kinds.join("+")
    };
    let base = format!("gflow-{links}");
    match std::env::var("GFLOW_COLLECTIVES").ok().as_deref() {
        Some(s @ ("ring" | "direct" | "doubling")) => format!("{base}-{s}"),
        _ => base,
    }
}

fn collectives(a: &Args) -> Result<()> {
    let env = gflow::init()?;
    let (n, me) = (env.world_size(), env.rank());
    let world: Vec<usize> = (0..n).collect();
    let transport = system_name();
    let mut lines = vec![];
    for &size in &a.sizes {
        let bytes = if a.kib { size << 10 } else { size << 20 };
        let count = bytes / 4;
        let src: Vec<f32> = (0..count).map(|i| (i % 97) as f32).collect();
        let part = count / n;
        let mut dst = vec![0f32; count];
        let mut small = vec![0f32; part];
        let nf = n as f64;
        let ops: [(&str, f64); 4] = [
            ("all_reduce", 2.0 * (nf - 1.0) / nf),
            ("all_gather", (nf - 1.0) / nf),
            ("reduce_scatter", (nf - 1.0) / nf),
            ("all_to_all", (nf - 1.0) / nf),
        ];
        let wanted = |op: &str| a.ops.is_empty() || a.ops.iter().any(|o| o == op);
        for (op, factor) in ops.into_iter().filter(|(op, _)| wanted(op)) {
            let mut run = || raw_collective(env.comm(), &world, op, &src, &mut dst, &mut small);
            let t = time_collective(&env, a.runs, &mut run)?;
            let per_host = host_bytes_sent(&env, &mut run)?;
            lines.push(format!(
                "{{\"system\": \"{transport}\", \"op\": \"{op}\", \"ranks\": {n}, \"bytes\": {bytes}, \"median_s\": {t:.6}, \"busbw_gbs\": {:.3}, \"host_bytes_sent\": {per_host:?}}}",
                factor * bytes as f64 / t / 1e9
            ));
        }
        // Point to point: rank 0 streams the buffer to rank 1, the others wait.
        if n >= 2 && wanted("p2p") {
            let t = time_collective(&env, a.runs, || {
                let c = env.comm();
                match me {
                    0 => c.send(1, gflow::CommOp::P2p.into(), bytemuck::cast_slice(&src))?,
                    1 => c.recv_into(
                        0,
                        gflow::CommOp::P2p.into(),
                        bytemuck::cast_slice_mut(&mut dst),
                    )?,
                    _ => {}
                }
                Ok(())
            })?;
            lines.push(format!(
                "{{\"system\": \"{transport}\", \"op\": \"p2p\", \"ranks\": 2, \"bytes\": {bytes}, \"median_s\": {t:.6}, \"gbs\": {:.3}}}",
                bytes as f64 / t / 1e9
            ));
        }
    }
    if me == 0 {
        emit(a, &lines)?;
    }
    Ok(())
}

/// Steps/s of data-parallel training: Linear-ReLU-Linear-ReLU-Linear of width `a.width`, MSE,
/// SGD; the batch split(0) over the ranks, the parameters broadcast (so each step all-reduces
/// the gradients through boxing).
fn train(a: &Args) -> Result<()> {
    let (w, b, runs) = (a.width, a.batch, a.runs);
    let step_all = |env: Env| -> Result<Option<String>> {
        let world: Vec<usize> = (0..env.world_size()).collect();
        let p = Placement::new("cpu", world)?;
        let model = nn::Sequential::new()
            .add(nn::Linear::new(w, w, true)?)
            .add(nn::ReLU)
            .add(nn::Linear::new(w, w, true)?)
            .add(nn::ReLU)
            .add(nn::Linear::new(w, w, true)?)
            .to_global(&p, Sbp::broadcast())?;
        let mut opt = optim::Sgd::new(model.parameters(), 0.01);
        let x = Tensor::randn(&[b, w], (&p, Sbp::split(0)))?;
        let y = Tensor::randn(&[b, w], (&p, Sbp::split(0)))?;
        let t = time_collective(&env, runs, || {
            let loss = nn::functional::mse_loss(&model.forward(&x)?, &y)?;
            loss.backward()?;
            opt.step()?;
            opt.zero_grad();
            Ok(())
        })?;
        let system = if gflow::launched() {
            system_name()
        } else {
            "gflow-inproc".to_string()
        };
        Ok((env.rank() == 0).then(|| {
            format!(
                "{{\"system\": \"{system}\", \"op\": \"train_mlp_3x{w}_b{b}\", \"ranks\": {}, \"median_s\": {t:.6}, \"steps_per_s\": {:.3}}}",
                env.world_size(),
                1.0 / t
            )
        }))
    };
    let lines: Vec<String> = if gflow::launched() {
        step_all(gflow::init()?)?.into_iter().collect()
    } else {
        gflow::simulate(a.ranks, step_all)?
            .into_iter()
            .flatten()
            .collect()
    };
    emit(a, &lines)
}

/// Writes JSON lines to `--out` (appending) or stdout.
fn emit(a: &Args, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let text = lines.join("\n") + "\n";
    match &a.out {
        Some(path) => {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| gflow::Error::Environment {
                    reason: format!("cannot write {path}: {e}"),
                })
        }
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("checkpoint") {
        return checkpoint::main();
    }
    if let Some(r) = std::env::args()
        .nth(1)
        .filter(|w| w == "gpt")
        .map(|_| gpt::main(std::env::args().skip(2)))
    {
        return r.unwrap_or_else(|e| {
            eprintln!("gflow-bench: {e}");
            std::process::exit(1)
        });
    }
    let args = <Args as clap::Parser>::parse();
    let r = match args.what {
        What::Boxing => boxing(&args),
        What::Matmul => matmul(&args),
        What::Dispatch => dispatch(&args),
        What::Collectives => collectives(&args),
        What::Train => train(&args),
        What::Ops => args.op_sizes().and_then(|sizes| ops::ops(&args, &sizes)),
        What::Weighted => weighted::weighted(&args),
    };
    if let Err(e) = r {
        eprintln!("gflow-bench: {e}");
        std::process::exit(1);
    }
}
