//! `gflow-bench checkpoint [--bytes B] [--ranks 1,2,4] [--runs R] [--dir D] [--out FILE]`
//! (`--help` lists them):
//! save and load GB/s of a model of B bytes (default 1 GiB: 8 f32 tensors of (rows, 1024),
//! split(0) over the ranks, as FSDP shards them) on 1, 2 and 4 processes under `gflow-launch`,
//! against a plain sequential write + fsync and read of the same bytes by one process in the
//! same run (the disk's limit). Loads read the page cache as the plain read does (nothing is
//! dropped between a save and its load: that would disturb other users of the machine).
//!
//! Without `--child` this process measures the plain baseline, then starts `gflow-launch`
//! (beside this binary) with this binary and `--child` for each process count and prints the
//! JSON lines rank 0 reports. Times are the slowest rank's, median of `--runs` after one warm-up.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use gflow::prelude::*;
use gflow::{StateDict, checkpoint};

/// The model's tensors: 8 of (rows, 1024) f32.
const TENSORS: usize = 8;
const COLS: usize = 1024;

/// `gflow-bench checkpoint` flags.
#[derive(clap::Parser, Debug)]
#[command(name = "gflow-bench checkpoint")]
struct Args {
    /// The model's bytes (8 f32 tensors of (rows, 1024)).
    #[arg(long, default_value_t = 1 << 30)]
    bytes: usize,
    /// The process counts to save and load on.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4])]
    ranks: Vec<usize>,
    /// Timed runs (after one warm-up).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Where the checkpoints go.
    #[arg(long, default_value_os_t = default_dir())]
    dir: PathBuf,
    /// Append the JSON lines to this file (default: stdout).
    #[arg(long)]
    out: Option<String>,
    /// One rank of a launched job (set by the parent, which starts `gflow-launch`).
    #[arg(long, hide = true)]
    child: bool,
}

fn bad(reason: String) -> gflow::Error {
    gflow::Error::InvalidArgument {
        op: "gflow-bench checkpoint",
        reason,
    }
}

/// A new directory in the system's temporary one.
fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("gflow-bench-ckpt-{}", std::process::id()))
}

/// The flags after `checkpoint`, checked.
fn parse() -> Result<Args> {
    let a = <Args as clap::Parser>::parse_from(
        std::iter::once("gflow-bench checkpoint".to_string()).chain(std::env::args().skip(2)),
    );
    if a.bytes < TENSORS * COLS * 4 {
        return Err(bad(format!(
            "--bytes {} is below the smallest model ({} bytes)",
            a.bytes,
            TENSORS * COLS * 4
        )));
    }
    if a.runs == 0 || a.ranks.contains(&0) {
        return Err(bad("--runs and every --ranks entry must be positive".into()));
    }
    Ok(a)
}

/// Rows per tensor so that the model holds about `bytes`.
fn rows(bytes: usize) -> usize {
    (bytes / (TENSORS * COLS * 4)).max(1)
}

fn json(system: &str, op: &str, ranks: usize, bytes: usize, t: f64) -> String {
    format!(
        "{{\"system\": \"{system}\", \"op\": \"{op}\", \"ranks\": {ranks}, \"bytes\": {bytes}, \"median_s\": {t:.6}, \"gbs\": {:.3}}}",
        bytes as f64 / t / 1e9
    )
}

fn io(path: &Path, e: std::io::Error) -> gflow::Error {
    gflow::Error::Checkpoint {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The disk's limit: one process writes `bytes` sequentially (4 MiB writes) and fsyncs, then
/// reads them back; median seconds of each over `runs` after a warm-up.
fn plain(dir: &Path, bytes: usize, runs: usize) -> Result<(f64, f64)> {
    let path = dir.join("plain.bin");
    let block = vec![0x5au8; 4 << 20];
    let mut back = vec![0u8; bytes];
    let (mut w, mut r) = (vec![], vec![]);
    for i in 0..=runs {
        let _ = std::fs::remove_file(&path);
        let t = Instant::now();
        let mut f = std::fs::File::create(&path).map_err(|e| io(&path, e))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len());
            f.write_all(&block[..n]).map_err(|e| io(&path, e))?;
            left -= n;
        }
        f.sync_all().map_err(|e| io(&path, e))?;
        let tw = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut f = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
        for chunk in back.chunks_mut(block.len()) {
            f.read_exact(chunk).map_err(|e| io(&path, e))?;
        }
        let tr = t.elapsed().as_secs_f64();
        if i > 0 {
            w.push(tw);
            r.push(tr);
        }
    }
    std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
    Ok((crate::median(w), crate::median(r)))
}

/// The model on `p`: `TENSORS` tensors split(0), filled with `fill` (the tensor's index when
/// `None`).
fn model(p: &Placement, rows: usize, fill: Option<f64>) -> Result<StateDict> {
    let mut sd = StateDict::new();
    for i in 0..TENSORS {
        let v = fill.unwrap_or(i as f64 + 1.0);
        let t = Tensor::full(&[rows, COLS], v, (p, Sbp::split(0)))?;
        sd.insert(&format!("layer{i}.weight"), &t);
    }
    Ok(sd)
}

/// One rank of the launched job: times saves and loads of the model, the slowest rank's time.
fn child(a: &Args) -> Result<()> {
    let env = gflow::init()?;
    let world: Vec<usize> = (0..env.world_size()).collect();
    let p = Placement::new("cpu", world.clone())?;
    let rows = rows(a.bytes);
    let bytes = TENSORS * rows * COLS * 4;
    let sd = model(&p, rows, None)?;
    let mut target = model(&p, rows, Some(0.0))?;
    let dir = a.dir.join(format!("ckpt-{}", world.len()));
    let slowest = |dt: f64| -> Result<f64> {
        let mut v = [dt];
        env.comm().all_reduce(
            &world,
            bytemuck::cast_slice_mut(&mut v),
            DType::F64,
            gflow::ReduceOp::Max,
        )?;
        Ok(v[0])
    };
    let (mut saves, mut loads) = (vec![], vec![]);
    for i in 0..=a.runs {
        if env.rank() == 0 {
            let _ = std::fs::remove_dir_all(&dir);
        }
        env.comm().barrier(&world)?;
        let t = Instant::now();
        checkpoint::save(&sd, &dir)?;
        let ts = slowest(t.elapsed().as_secs_f64())?;
        env.comm().barrier(&world)?;
        let t = Instant::now();
        checkpoint::load(&mut target, &dir)?;
        let tl = slowest(t.elapsed().as_secs_f64())?;
        if i > 0 {
            saves.push(ts);
            loads.push(tl);
        }
    }
    // The loads brought the values back (each tensor holds its index + 1).
    for i in 0..TENSORS {
        let t = target
            .get(&format!("layer{i}.weight"))
            .ok_or_else(|| bad("lost a tensor".into()))?;
        let got = t.to_local()?.to_vec::<f32>()?;
        if got.iter().any(|&x| x != i as f32 + 1.0) {
            return Err(gflow::Error::Internal(format!(
                "layer{i} loaded wrong values"
            )));
        }
    }
    if env.rank() == 0 {
        let _ = std::fs::remove_dir_all(&dir);
        let n = world.len();
        println!(
            "{}",
            json("gflow", "checkpoint_save", n, bytes, crate::median(saves))
        );
        println!(
            "{}",
            json("gflow", "checkpoint_load", n, bytes, crate::median(loads))
        );
    }
    Ok(())
}

/// The plain baseline, then one launched job per process count; prints every JSON line.
fn parent(a: &Args) -> Result<()> {
    std::fs::create_dir_all(&a.dir).map_err(|e| io(&a.dir, e))?;
    let bytes = TENSORS * rows(a.bytes) * COLS * 4;
    let (w, r) = plain(&a.dir, bytes, a.runs)?;
    let mut lines = vec![
        json("plain-sequential", "checkpoint_save", 1, bytes, w),
        json("plain-sequential", "checkpoint_load", 1, bytes, r),
    ];
    let me = std::env::current_exe().map_err(|e| bad(format!("cannot find this binary: {e}")))?;
    let launcher = me.with_file_name("gflow-launch");
    if !launcher.exists() {
        return Err(bad(format!(
            "{} is missing: build it (cargo build --release --bin gflow-launch)",
            launcher.display()
        )));
    }
    for &n in &a.ranks {
        let out = Command::new(&launcher)
            .args(["--nproc-per-node", &n.to_string()])
            .arg(&me)
            .args(["checkpoint", "--child", "--bytes", &a.bytes.to_string()])
            .args(["--runs", &a.runs.to_string(), "--dir"])
            .arg(&a.dir)
            .output()
            .map_err(|e| bad(format!("cannot run {}: {e}", launcher.display())))?;
        if !out.status.success() {
            return Err(bad(format!(
                "the {n}-process job failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.strip_prefix("[rank 0] "))
                .filter(|l| l.starts_with('{'))
                .map(String::from),
        );
    }
    let _ = std::fs::remove_dir_all(&a.dir);
    let text = lines.join("\n") + "\n";
    match &a.out {
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| io(Path::new(path), e)),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// `gflow-bench checkpoint ...`: exits non-zero with the error on failure.
pub fn main() {
    let r = parse().and_then(|a| if a.child { child(&a) } else { parent(&a) });
    if let Err(e) = r {
        eprintln!("gflow-bench checkpoint: {e}");
        std::process::exit(1);
    }
}
