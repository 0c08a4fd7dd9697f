//! Plain safetensors files of every dtype both ways with Python's `safetensors`: Python writes
//! F32 F64 F16 BF16 I64 I32 BOOL tensors (0-d, empty, shorter than the rank count, uneven),
//! gflow loads them into split, broadcast and partial layouts of 3 ranks, saves them back, and
//! Python reads back the very bytes it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use gflow::prelude::*;
use gflow::{StateDict, checkpoint};

/// The tensors: (name, dtype, shape). Python fills tensor `k` with element `i` =
/// ((i * 5 + k) % 9) - 4 (Bool: > 0), the values `expected` computes.
const TENSORS: [(&str, DType, &[usize]); 9] = [
    ("f32", DType::F32, &[7, 5]),
    ("f64", DType::F64, &[2, 3]),
    ("f16", DType::F16, &[5]),
    ("bf16", DType::BF16, &[3, 1]),
    ("i64", DType::I64, &[]),
    ("i32", DType::I32, &[0, 4]),
    ("bool", DType::Bool, &[4, 2]),
    ("half_scalar", DType::BF16, &[]),
    ("empty_bool", DType::Bool, &[3, 0]),
];

/// What Python writes for tensor `k` of `n` elements.
fn expected(k: usize, n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i * 5 + k) % 9) as f64 - 4.0;
            if dtype == DType::Bool {
                f64::from(x > 0.0)
            } else {
                x
            }
        })
        .collect()
}

const WRITE: &str = r#"
import sys, numpy as np
from safetensors.numpy import save_file
tensors = eval(sys.argv[2])
out = {}
for k, (name, dt, shape) in enumerate(tensors):
    n = int(np.prod(shape)) if shape else 1
    v = ((np.arange(n) * 5 + k) % 9 - 4).reshape(shape)
    if dt == 'BF16':
        # numpy has no bfloat16: the top half of the f32 bits (exact for small integers).
        bits = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        out[name] = np.array(bits)
    else:
        out[name] = np.array(v.astype({'F32': np.float32, 'F64': np.float64, 'F16': np.float16,
                              'I64': np.int64, 'I32': np.int32}[dt]) if dt != 'BOOL' else (v > 0))
save_file(out, sys.argv[1])
# Patch the BF16 tensors' dtype in the header (same element size as the uint16 written).
import json, struct
raw = open(sys.argv[1], 'rb').read()
hl = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + hl])
for name, dt, shape in tensors:
    if dt == 'BF16':
        h[name]['dtype'] = 'BF16'
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * (hl - len(hb))
assert len(hb) == hl
open(sys.argv[1], 'wb').write(raw[:8] + hb + raw[8 + hl:])
print('written')
"#;

const READ: &str = r#"
import sys, json, struct, numpy as np
a, b = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
def tensors(raw):
    hl = struct.unpack('<Q', raw[:8])[0]
    h = json.loads(raw[8:8 + hl])
    h.pop('__metadata__', None)
    return {k: (v['dtype'], v['shape'], raw[8 + hl + v['data_offsets'][0]: 8 + hl + v['data_offsets'][1]]) for k, v in h.items()}
ta, tb = tensors(a), tensors(b)
assert set(ta) == set(tb), (set(ta), set(tb))
for k in ta:
    assert ta[k] == tb[k], (k, ta[k][:2], tb[k][:2], ta[k][2][:16], tb[k][2][:16])
# Python's own (validating) parser reads gflow's file, BF16 included.
from safetensors import deserialize
parsed = {name: (t['dtype'].upper(), list(t['shape']), bytes(t['data'])) for name, t in deserialize(b)}
assert parsed == {k: (v[0], v[1], v[2]) for k, v in tb.items()}, parsed.keys()
print('same bytes')
"#;

fn st_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::Bool => "BOOL",
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_dtype_round_trips_with_python() {
    let ok = Command::new("python3")
        .args(["-c", "import safetensors, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return gflow::backend::say_skipped(
            "every_dtype_round_trips_with_python",
            &"python3 with safetensors and numpy is absent",
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix("gflow-st-dtypes-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let (from_py, from_gflow) = (dir.join("py.safetensors"), dir.join("gflow.safetensors"));
    let spec: Vec<String> = TENSORS
        .iter()
        .map(|(n, d, s)| format!("('{n}', '{}', {s:?})", st_name(*d)))
        .collect();
    let spec = format!("[{}]", spec.join(", "));
    let out = Command::new("python3")
        .args(["-c", WRITE])
        .arg(&from_py)
        .arg(&spec)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let layouts: [fn(usize) -> Sbp; 4] = [
        |nd| {
            if nd == 0 {
                Sbp::broadcast()
            } else {
                Sbp::split(0)
            }
        },
        |nd| {
            if nd < 2 {
                Sbp::broadcast()
            } else {
                Sbp::split(1)
            }
        },
        |_| Sbp::partial_max(),
        |_| Sbp::partial_sum(),
    ];
    for (li, layout) in layouts.iter().enumerate() {
        gflow::simulate(3, |_| {
            let p = Placement::new("cpu", [2, 0, 1])?;
            let mut sd = StateDict::new();
            let mut ts = vec![];
            for (name, dtype, shape) in TENSORS {
                let n: usize = shape.iter().product();
                let t = Tensor::zeros(shape, (&p, Sbp::broadcast()))?
                    .to_dtype(dtype)?
                    .to_global(&p, layout(shape.len()))?;
                sd.insert(name, &t);
                ts.push((t, n, dtype));
            }
            checkpoint::load_safetensors(&from_py, &mut sd)?;
            for (k, (t, n, dtype)) in ts.iter().enumerate() {
                assert_eq!(t.dtype(), *dtype);
                assert_eq!(
                    t.to_vec_cast::<f64>()?,
                    expected(k, *n, *dtype),
                    "layout {li}: {}",
                    TENSORS[k].0
                );
            }
            if li == 0 {
                checkpoint::save_safetensors(&sd, &from_gflow)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let out = Command::new("python3")
        .args(["-c", READ])
        .arg(&from_py)
        .arg(&from_gflow)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("same bytes"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
