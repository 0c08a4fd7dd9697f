//! `LOCAL_RANK % count` in real processes (API.md, "Devices: one device per rank"): gflow-launch
//! starts a job of two nodes on this host, three ranks per node, each rank computes on a
//! `"wgpu"` placement and reports the device its component was computed on; the test checks
//! ordinal = `LOCAL_RANK % count` (not `RANK`), `count` the wgpu adapters the rank sees.
//!
//! One software adapter (lavapipe, as in CI) makes every ordinal 0. For a count of two the test
//! gives the ranks a second real Vulkan driver: lavapipe's library copied to a file of its own
//! and named by a second ICD manifest (`VK_DRIVER_FILES`), so the Vulkan loader opens two
//! drivers and wgpu enumerates two adapters through its ordinary path, each a device of its own
//! that computes. Skips loudly (that part, or all without an adapter) where lavapipe's manifest
//! or any adapter is missing, unless `GFLOW_REQUIRE_BACKEND` names wgpu.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

mod common;

use gflow::prelude::*;
use gflow::{DeviceType, backend};

/// The rank program (run by the launcher through this test binary; ignored otherwise): computes
/// on its own wgpu device, checks the job's sum, and prints one `device-report` line.
#[test]
#[ignore = "a rank of the launched job in `ordinal_is_local_rank_mod_count`"]
fn rank_reports_its_device() {
    let Ok(local) = std::env::var("LOCAL_RANK") else {
        return backend::say_skipped("rank_reports_its_device", &"not started by gflow-launch");
    };
    let local: usize = local.parse().unwrap();
    let env = gflow::init().unwrap();
    let world = env.world_size();
    let p = Placement::new("wgpu", (0..world).collect::<Vec<_>>()).unwrap();
    let x = Tensor::ones(&[world * 2], (&p, Sbp::split(0))).unwrap();
    let y = (&x + &x).unwrap();
    let mine = y.to_local().unwrap();
    let resident = mine.resident_on().unwrap_or("host").to_string();
    // every rank computed its part: the job's sum is 2 * 2 * world
    let total = y
        .sum([0], false)
        .unwrap()
        .to_global(&p, Sbp::broadcast())
        .unwrap()
        .to_local()
        .unwrap()
        .to_vec_cast::<f32>()
        .unwrap();
    let count = gflow::devices()
        .iter()
        .filter(|d| d.device_type == DeviceType::Wgpu)
        .count();
    println!(
        "device-report rank={} local_rank={local} count={count} device={} resident={resident} sum={}",
        env.rank(),
        mine.device(),
        total[0]
    );
}

/// Starts node `node` of a 2-node job of `per_node` ranks per node on this host.
fn node(node: usize, per_node: usize, port: &str, vk: &[(&str, String)]) -> Child {
    let token = format!("local-rank-devices-{}-{port}", std::process::id());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gflow-launch"));
    for k in [
        "LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        cmd.env_remove(k);
    }
    cmd.args(["--nnodes", "2", "--node-rank", &node.to_string()])
        .args(["--nproc-per-node", &per_node.to_string()])
        .args(["--master-addr", "127.0.0.1", "--master-port", port])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rank_reports_its_device",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env("GFLOW_TIMEOUT_SECS", "120")
        .env("GFLOW_JOB_TOKEN", token)
        .env_remove("GFLOW_DEVICE_OVERRIDE")
        .envs(vk.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One report: (rank, local rank, count, device, resident, sum).
type Report = (usize, usize, usize, String, String, f32);

/// Runs the 2 x 3 job with the Vulkan variables `vk` and returns every rank's report.
fn run_job(vk: &[(&str, String)]) -> Vec<Report> {
    let (per_node, port) = (3, common::free_port());
    let kids: Vec<Child> = (0..2).map(|n| node(n, per_node, &port, vk)).collect();
    let mut reports = vec![];
    for k in kids {
        let out = k.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        for l in stdout.lines().filter_map(|l| {
            l.split_once("device-report ")
                .map(|(_, r)| r.trim().to_string())
        }) {
            let f: Vec<&str> = l
                .split(' ')
                .map(|kv| kv.split_once('=').unwrap().1)
                .collect();
            reports.push((
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
                f[4].to_string(),
                f[5].parse().unwrap(),
            ));
        }
    }
    reports.sort_by_key(|r| r.0);
    assert_eq!(
        reports.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..2 * per_node).collect::<Vec<_>>(),
        "one report per rank: {reports:?}"
    );
    reports
}

/// Checks every report against `LOCAL_RANK % count` and returns the ordinals used.
fn check(reports: &[Report], want_count: usize) -> Vec<usize> {
    let world = reports.len();
    let mut used = vec![];
    for (rank, local, count, device, resident, sum) in reports {
        assert_eq!(*count, want_count, "rank {rank}: {reports:?}");
        assert_eq!(*local, rank % 3, "rank {rank}: the launcher's LOCAL_RANK");
        let want = format!("wgpu:{}", local % count);
        assert_eq!(
            device, &want,
            "rank {rank} (local rank {local}): {reports:?}"
        );
        assert_eq!(resident, &want, "rank {rank}: where its result lives");
        assert_eq!(*sum, 4.0 * world as f32, "rank {rank}: the job's sum");
        used.push(local % count);
    }
    used
}

/// lavapipe's library, from its ICD manifest, where Mesa installed one.
fn lavapipe() -> Option<PathBuf> {
    let dirs = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    let manifest = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lvp_icd"))
        })?;
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(manifest).ok()?).ok()?;
    let lib = PathBuf::from(m["ICD"]["library_path"].as_str()?);
    lib.exists().then_some(lib)
}

/// A directory removed when dropped (also when the test fails).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two ICD manifests in `dir`: lavapipe's library, and a copy of it in a file of its own.
fn two_lavapipes(lib: &Path, dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let copy = dir.join("libvulkan_lvp_second.so");
    std::fs::copy(lib, &copy).unwrap();
    let mut files = vec![];
    for (name, l) in [("first.json", lib), ("second.json", copy.as_path())] {
        let json = serde_json::json!({
            "file_format_version": "1.0.0",
            "ICD": {"library_path": l.to_str().unwrap(), "api_version": "1.1.0"}
        });
        std::fs::write(dir.join(name), json.to_string()).unwrap();
        files.push(dir.join(name).to_string_lossy().into_owned());
    }
    files.join(":")
}

#[test]
fn ordinal_is_local_rank_mod_count() {
    let n = gflow::devices()
        .iter()
        .filter(|d| d.device_type == DeviceType::Wgpu)
        .count();
    if n == 0 {
        assert!(
            !backend::required("wgpu"),
            "wgpu is required but has no adapter"
        );
        return backend::say_skipped("ordinal_is_local_rank_mod_count", &"no wgpu adapter here");
    }
    // The host's own adapters.
    check(&run_job(&[]), n);

    // Two real drivers: two adapters, local ranks 0, 1, 2 on ordinals 0, 1, 0 on each node.
    let Some(lib) = lavapipe() else {
        assert!(
            !backend::required("wgpu"),
            "no lavapipe manifest for a second driver"
        );
        return backend::say_skipped(
            "ordinal_is_local_rank_mod_count (two adapters)",
            &"no lavapipe ICD manifest: LOCAL_RANK % count is tested with this host's count only",
        );
    };
    let dir = TempDir(std::env::temp_dir().join(format!("gflow-two-lvp-{}", std::process::id())));
    let files = two_lavapipes(&lib, &dir.0);
    let vk = [
        ("VK_DRIVER_FILES", files.clone()),
        ("VK_ICD_FILENAMES", files),
    ];
    let reports = run_job(&vk);
    let used = check(&reports, 2);
    assert_eq!(used, vec![0, 1, 0, 0, 1, 0], "{reports:?}");
}
