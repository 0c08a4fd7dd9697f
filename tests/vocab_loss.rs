//! The vocabulary-parallel loss at scale (`examples/vocab_loss`): `cross_entropy` on logits
//! (4, 200000) split over the classes on 4 processes equals the float64 reference, its gradient
//! stays split, and each rank's peak resident memory stays well under 100 MB (a one-hot over the
//! classes, or gathering the logits, would not).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::process::Command;

use common::{example, launcher, sorted_lines};

#[test]
fn cross_entropy_over_200k_classes_stays_split_and_small() {
    if !cfg!(target_os = "linux") {
        return gflow::backend::say_skipped("vocab_loss", &"peak RSS is read from /proc (Linux)");
    }
    let out = Command::new(launcher())
        .args(["--nproc-per-node", "4"])
        .arg(example("vocab_loss"))
        .env("GFLOW_TIMEOUT_SECS", "60")
        .output()
        .expect("run launcher");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = sorted_lines(&out);
    assert_eq!(lines.len(), 4, "{lines:?}");
    for l in &lines {
        let word = |key: &str| -> String {
            let mut it = l.split_whitespace();
            it.find(|w| *w == key).and(it.next()).unwrap().to_string()
        };
        let (got, want): (f64, f64) = (
            word("loss").parse().unwrap(),
            word("reference").parse().unwrap(),
        );
        assert!((got - want).abs() < 1e-4 * want.abs(), "{l}");
        assert_eq!(word("grad_sbp"), "(split(dim=1),)", "{l}");
        let rss: f64 = word("peak_rss_mb").parse().unwrap();
        assert!(rss < 100.0, "peak RSS {rss} MB: {l}");
    }
}
