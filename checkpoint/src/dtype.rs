//! The one mapping between gflow's [`DType`] and safetensors' dtype names. Extend both
//! functions together when core gains a dtype; anything else is a typed error.

use gflow_core::DType;
use safetensors::Dtype;

/// The safetensors dtype of `d`, or `None` for a dtype with no safetensors counterpart.
pub fn to_safetensors(d: DType) -> Option<Dtype> {
    match d {
        DType::F32 => Some(Dtype::F32),
        DType::F64 => Some(Dtype::F64),
        DType::I64 => Some(Dtype::I64),
        DType::F16 => Some(Dtype::F16),
        DType::BF16 => Some(Dtype::BF16),
        DType::I32 => Some(Dtype::I32),
        DType::Bool => Some(Dtype::BOOL),
        _ => None,
    }
}

/// The gflow dtype of safetensors dtype `d`, or `None` for one gflow cannot hold.
pub fn from_safetensors(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F32 => Some(DType::F32),
        Dtype::F64 => Some(DType::F64),
        Dtype::I64 => Some(DType::I64),
        Dtype::F16 => Some(DType::F16),
        Dtype::BF16 => Some(DType::BF16),
        Dtype::I32 => Some(DType::I32),
        Dtype::BOOL => Some(DType::Bool),
        _ => None,
    }
}

/// `d`'s safetensors name (`"F32"`), as written in `index.json`.
pub fn name(d: Dtype) -> String {
    format!("{d:?}")
}

/// The safetensors dtype called `s`, among those gflow holds.
pub fn parse(s: &str) -> Option<Dtype> {
    DType::ALL
        .into_iter()
        .filter_map(to_safetensors)
        .find(|d| name(*d) == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            let st = to_safetensors(d).expect("mapped");
            assert_eq!(from_safetensors(st), Some(d));
            assert_eq!(parse(&name(st)), Some(st));
        }
        assert_eq!(name(Dtype::F32), "F32");
        assert_eq!(parse("U8"), None);
    }
}
