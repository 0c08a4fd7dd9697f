//! Plain safetensors files both ways with Python, and the header and index readers fuzzed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use gflow::prelude::*;
use gflow::{StateDict, checkpoint};
use proptest::prelude::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/python_model.safetensors"
);

/// The values benches/peers/make_safetensors_fixture.py writes.
fn python_weight() -> Vec<f32> {
    (0..15).map(|i| i as f32 * 0.25 - 1.0).collect()
}

#[test]
fn a_file_written_by_python_loads_into_a_tensor_parallel_model() {
    let out = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        // Tensor parallel: the weight's rows (and the bias) split over the two ranks.
        let model = nn::Sequential::new().add(nn::Linear::from_tensors(
            Tensor::zeros(&[5, 3], (&p, Sbp::split(0)))?,
            Some(Tensor::zeros(&[5], (&p, Sbp::split(0)))?),
        )?);
        let steps = Tensor::from_vec(vec![0i64; 2], &[2], (&p, Sbp::broadcast()))?;
        let mut sd = model.state_dict();
        sd.insert("steps", &steps);
        checkpoint::load_safetensors(FIXTURE, &mut sd)?;
        let local = model.parameters()[0].to_local()?.to_vec_cast::<f32>()?;
        Ok((
            model.parameters()[0].to_vec_cast::<f32>()?,
            model.parameters()[1].to_vec_cast::<f32>()?,
            steps.to_vec_cast::<i64>()?,
            local,
        ))
    })
    .unwrap();
    for (w, b, s, _) in &out {
        assert_eq!(w, &python_weight());
        assert_eq!(b, &[0.5, -1.5, 2.0, 3.25, -0.125]);
        assert_eq!(s, &[7, 11]);
    }
    // Rank 1 holds rows 3..5 of the split weight.
    assert_eq!(out[1].3, python_weight()[9..].to_vec());
}

#[test]
fn a_file_written_by_gflow_loads_in_python() {
    let Ok(v) = Command::new("python3").arg("--version").output() else {
        eprintln!(
            "SKIPPED LOUDLY: python3 is absent, so the Python side of safetensors is untested"
        );
        return;
    };
    assert!(v.status.success());
    let path = std::env::temp_dir().join(format!("gflow-st-{}.safetensors", std::process::id()));
    gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let w = Tensor::from_vec(python_weight(), &[5, 3], (&p, Sbp::split(1)))?;
        let mut sd = StateDict::new();
        sd.insert("w", &w);
        sd.insert("i", &Tensor::from_vec(vec![3i64, -4], &[2], Device::Cpu)?);
        sd.insert_value("step", 12);
        checkpoint::save_safetensors(&sd, &path)
    })
    .unwrap();
    let script = "import sys, numpy as np\nfrom safetensors.numpy import load_file\nfrom safetensors import safe_open\n\
        t = load_file(sys.argv[1])\n\
        assert t['w'].dtype == np.float32 and t['w'].shape == (5, 3), t['w']\n\
        assert (t['w'].ravel() == np.arange(15, dtype=np.float32) * 0.25 - 1.0).all()\n\
        assert t['i'].tolist() == [3, -4]\n\
        assert safe_open(sys.argv[1], 'np').metadata()['gflow.value.step'] == '12'\n\
        print('python ok')";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("python ok"),
        "{stdout}\n{} (scripts/test.sh installs the python safetensors module)",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&path).ok();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_bytes_never_panic_the_readers(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = checkpoint::index::Index::parse(&bytes);
        let _ = checkpoint::shard::header(&bytes);
    }

    #[test]
    fn truncated_or_mutated_real_files_never_panic(cut in 0usize..400, flip in 0usize..400, bit in 0u8..8) {
        let mut st = std::fs::read(FIXTURE).unwrap();
        if let Some(b) = st.get_mut(flip) { *b ^= 1 << bit; }
        st.truncate(cut.min(st.len()));
        let _ = checkpoint::shard::header(&st);
        let index = br#"{"format":"gflow-checkpoint","version":1,"tensors":{"a":{"shape":[4,3],"dtype":"F32","chunks":[{"file":"rank-00000.safetensors","offset":80,"box":[[0,4],[0,3]]}]}},"values":{"step":3}}"#;
        prop_assert!(checkpoint::index::Index::parse(index).is_ok());
        let mut ix = index.to_vec();
        if let Some(b) = ix.get_mut(flip % index.len()) { *b ^= 1 << bit; }
        ix.truncate(cut.min(ix.len()));
        let _ = checkpoint::index::Index::parse(&ix);
    }
}
