//! `--nproc-per-node`: a number, or torchrun's `auto` (one process per GPU, else one per CPU),
//! `gpu` (one per GPU; an error without one) and `cpu` (one per CPU).

use std::path::Path;

/// What `--nproc-per-node` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nproc {
    /// This many processes.
    Count(usize),
    /// One per GPU if there is one, else one per CPU (torchrun's `auto`).
    Auto,
    /// One per GPU.
    Gpu,
    /// One per CPU.
    Cpu,
}

/// Parses `N`, `auto`, `gpu` or `cpu` (clap's value parser).
pub fn parse(s: &str) -> Result<Nproc, String> {
    match s {
        "auto" => Ok(Nproc::Auto),
        "gpu" => Ok(Nproc::Gpu),
        "cpu" => Ok(Nproc::Cpu),
        _ => s
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .map(Nproc::Count)
            .ok_or_else(|| format!("{s:?} is not a positive number, auto, gpu or cpu")),
    }
}

impl Nproc {
    /// The number of processes on this host.
    ///
    /// # Errors
    /// `gpu` on a host with no GPU.
    pub fn resolve(self) -> Result<usize, String> {
        let cpus = || std::thread::available_parallelism().map_or(1, usize::from);
        match self {
            Nproc::Count(n) => Ok(n),
            Nproc::Cpu => Ok(cpus()),
            Nproc::Auto => Ok(Some(gpu_count()).filter(|&g| g > 0).unwrap_or_else(cpus)),
            Nproc::Gpu => match gpu_count() {
                0 => Err(
                    "--nproc-per-node gpu: this host has no GPU (no CUDA device is \
                          visible and no GPU render node is present)"
                        .into(),
                ),
                g => Ok(g),
            },
        }
    }
}

/// The GPUs of this host: the devices `CUDA_VISIBLE_DEVICES` names when it is set, else the
/// NVIDIA devices (`/dev/nvidiaN`), else other GPUs' render nodes (`/dev/dri/renderD*`, the
/// GPUs wgpu drives).
pub fn gpu_count() -> usize {
    let names = |dir: &str| -> Vec<String> {
        std::fs::read_dir(Path::new(dir)).map_or_else(
            |_| vec![],
            |d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            },
        )
    };
    count_gpus(
        std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
        &names("/dev"),
        &names("/dev/dri"),
    )
}

/// [`gpu_count`] from its inputs.
fn count_gpus(visible: Option<&str>, dev: &[String], dri: &[String]) -> usize {
    if let Some(v) = visible {
        // CUDA stops at the first invalid entry (such as -1, the usual "none").
        return v
            .split(',')
            .map(str::trim)
            .take_while(|e| !e.is_empty() && !e.starts_with('-'))
            .count();
    }
    let numbered = |names: &[String], prefix: &str| {
        names
            .iter()
            .filter(|n| {
                n.strip_prefix(prefix)
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            })
            .count()
    };
    match numbered(dev, "nvidia") {
        0 => numbered(dri, "renderD"),
        n => n,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn counts_gpus_as_cuda_and_the_render_nodes_show_them() {
        let dev = s(&["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"]);
        let dri = s(&["card0", "renderD128", "renderD129", "renderD130"]);
        assert_eq!(count_gpus(None, &dev, &dri), 2);
        assert_eq!(count_gpus(None, &s(&["null"]), &dri), 3);
        assert_eq!(count_gpus(None, &s(&["null"]), &s(&["card0"])), 0);
        assert_eq!(count_gpus(Some("0,3,5"), &dev, &dri), 3);
        assert_eq!(count_gpus(Some(""), &dev, &dri), 0);
        assert_eq!(count_gpus(Some("-1"), &dev, &dri), 0);
        assert_eq!(count_gpus(Some("GPU-8f2a,GPU-11bc"), &dev, &dri), 2);
    }

    #[test]
    fn parses_numbers_and_torchruns_words() {
        assert_eq!(parse("4"), Ok(Nproc::Count(4)));
        assert_eq!(parse("auto"), Ok(Nproc::Auto));
        assert_eq!(parse("gpu"), Ok(Nproc::Gpu));
        assert_eq!(parse("cpu"), Ok(Nproc::Cpu));
        for bad in ["0", "-1", "many", ""] {
            assert!(parse(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert!(Nproc::Cpu.resolve().unwrap() >= 1);
    }
}
