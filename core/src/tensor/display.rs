//! `Display`: the values as PyTorch prints them (summarised past 1000 elements), then the
//! placement and SBP of a global tensor. Printing a global tensor gathers its value, so every
//! rank of its placement must print it (as in OneFlow).

use std::fmt;

use crate::storage::HostData;

use super::Tensor;

const SUMMARY_THRESHOLD: usize = 1000;
const EDGE: usize = 3;

fn write_values(f: &mut fmt::Formatter<'_>, data: &HostData, shape: &[usize]) -> fmt::Result {
    let summarise = data.len() > SUMMARY_THRESHOLD;
    let int = matches!(data, HostData::I64(_));
    let fmt_one = |i: usize| -> String {
        match data.get_f64(i) {
            Some(v) if int => format!("{v}"),
            Some(v) => format!("{v:.4}"),
            None => "?".into(),
        }
    };
    let width = (0..data.len())
        .filter(|i| !summarise || *i < 64 || *i + 64 > data.len())
        .map(|i| fmt_one(i).len())
        .max()
        .unwrap_or(1);
    fn rec(
        f: &mut fmt::Formatter<'_>,
        shape: &[usize],
        offset: usize,
        depth: usize,
        summarise: bool,
        width: usize,
        one: &dyn Fn(usize) -> String,
    ) -> fmt::Result {
        if shape.is_empty() {
            return f.write_str(&one(offset));
        }
        let n = shape[0];
        let inner: usize = shape[1..].iter().product();
        let idx: Vec<Option<usize>> = if summarise && n > 2 * EDGE {
            (0..EDGE)
                .map(Some)
                .chain([None])
                .chain((n - EDGE..n).map(Some))
                .collect()
        } else {
            (0..n).map(Some).collect()
        };
        f.write_str("[")?;
        for (k, i) in idx.iter().enumerate() {
            if k > 0 {
                if shape.len() > 1 {
                    f.write_str(",")?;
                    for _ in 0..shape.len() - 1 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{:w$}", "", w = 8 + depth)?;
                } else {
                    f.write_str(", ")?;
                }
            }
            match i {
                None => f.write_str("...")?,
                Some(i) if shape.len() == 1 => write!(f, "{:>width$}", one(offset + i))?,
                Some(i) => rec(
                    f,
                    &shape[1..],
                    offset + i * inner,
                    depth + 1,
                    summarise,
                    width,
                    one,
                )?,
            }
        }
        f.write_str("]")
    }
    rec(f, shape, 0, 0, summarise, width, &fmt_one)
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor(")?;
        match self.dist() {
            None => match self.read() {
                Some(d) => match d.host() {
                    Ok(h) => write_values(f, h, self.shape())?,
                    Err(e) => write!(f, "<{e}>")?,
                },
                None => f.write_str("[]")?,
            },
            Some(dist) => {
                match self.to_host() {
                    Ok(d) => write_values(f, &d, self.shape())?,
                    Err(e) => write!(f, "<{e}>")?,
                }
                write!(f, ", placement={}, sbp={}", dist.placement, dist.nd_sbp)?;
            }
        }
        write!(f, ", dtype={})", self.dtype())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, Tensor};

    #[test]
    fn prints_like_pytorch() -> crate::Result<()> {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.5], &[2, 2], Device::Cpu)?;
        assert_eq!(
            t.to_string(),
            "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]], dtype=f32)"
        );
        let big = Tensor::zeros(&[2000], Device::Cpu)?;
        assert_eq!(
            big.to_string(),
            "tensor([0.0000, 0.0000, 0.0000, ..., 0.0000, 0.0000, 0.0000], dtype=f32)"
        );
        Ok(())
    }
}
