//! Kernel launches: the one helper every kernel goes through, and launch shapes.

use cudarc::driver::{CudaFunction, DeviceRepr, LaunchArgs, LaunchConfig};
use gflow_core::{Error, Result};

use crate::{CudaBackend, device_error};

/// Threads per block (the source's `BLOCK`).
const BLOCK: u32 = 256;
/// Most blocks of one launch (kernels loop grid-stride over the rest).
pub(crate) const MAX_BLOCKS: usize = 1 << 16;

impl CudaBackend {
    /// A compiled kernel by name.
    fn function(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| Error::Internal(format!("no CUDA kernel {name}")))
    }

    /// Launches kernel `name` on the backend's stream with `cfg`; `args` pushes its arguments
    /// in order.
    ///
    /// # Safety
    /// `args` must push exactly the kernel's parameters (types and order), and the kernel must
    /// address only elements inside the buffers pushed.
    pub(crate) unsafe fn launch<'a>(
        &'a self,
        name: &str,
        cfg: LaunchConfig,
        args: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<()> {
        let mut l = self.stream.launch_builder(self.function(name)?);
        args(&mut l);
        // SAFETY: the caller's contract above.
        unsafe { l.launch(cfg) }.map(drop).map_err(device_error)
    }
}

/// A launch of about one thread per element (grid-stride beyond `MAX_BLOCKS` blocks).
pub(crate) fn threads(n: usize) -> LaunchConfig {
    blocks(n.div_ceil(BLOCK as usize))
}

/// A launch of `n` blocks of `BLOCK` threads (at most `MAX_BLOCKS`; kernels loop over the rest).
pub(crate) fn blocks(n: usize) -> LaunchConfig {
    blocks_of(n, BLOCK)
}

/// A launch of `n` blocks of `threads` threads each, for kernels written for that block size
/// (at most `MAX_BLOCKS` blocks; kernels loop over the rest).
pub(crate) fn blocks_of(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Values one [`Meta`] holds (the source's `META_LEN`).
pub(crate) const META_LEN: usize = 128;

/// The shapes and strides of a strided or broadcasting kernel, passed by value as a kernel
/// parameter (the source's `struct Meta`): a launch uploads nothing, where an upload from
/// pageable host memory waits for the stream, serialising host and device.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Meta([i64; META_LEN]);

// SAFETY: a plain array of i64, laid out as the source's `struct Meta { i64 v[META_LEN]; }`.
unsafe impl DeviceRepr for Meta {}

impl Meta {
    /// `values` in order, or `Device` when there are more than [`META_LEN`].
    pub(crate) fn new(op: &str, values: impl IntoIterator<Item = usize>) -> Result<Meta> {
        let mut m = [0i64; META_LEN];
        for (n, v) in values.into_iter().enumerate() {
            if n == META_LEN {
                return Err(device_error(format!(
                    "{op}: a CUDA launch takes at most {META_LEN} shape and stride values \
                     (a tensor of too many dims that do not merge)"
                )));
            }
            m[n] = v as i64;
        }
        Ok(Meta(m))
    }
}

/// `shape` with the dims no array of `strides` tells apart merged (each array steps over
/// dim `d` exactly as over `shape[d + 1]` steps of dim `d + 1`) and dims of one element
/// dropped: the same elements in the same row-major order, with fewer dims to decompose.
pub(crate) fn merge_dims(shape: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut dims: Vec<usize> = vec![];
    let mut steps: Vec<Vec<usize>> = vec![vec![]; strides.len()];
    for (d, &len) in shape.iter().enumerate() {
        if len == 1 {
            continue;
        }
        let k = dims.len();
        if k > 0
            && strides
                .iter()
                .zip(&steps)
                .all(|(x, y)| y[k - 1] == x[d] * len)
        {
            dims[k - 1] *= len;
            for (y, x) in steps.iter_mut().zip(strides) {
                y[k - 1] = x[d];
            }
            continue;
        }
        dims.push(len);
        for (y, x) in steps.iter_mut().zip(strides) {
            y.push(x[d]);
        }
    }
    (dims, steps)
}

#[cfg(test)]
mod tests {
    use super::{META_LEN, merge_dims};

    #[test]
    fn the_source_holds_as_many_meta_values_as_the_host_sends() {
        let line = format!("#define META_LEN {META_LEN}\n");
        assert!(crate::device::SOURCE[0].contains(&line));
    }

    #[test]
    fn dims_merge_where_every_array_is_contiguous_across_them() {
        // (2, 3, 4) contiguous with a (3, 4) broadcast over the first dim: the last two merge
        let (d, s) = merge_dims(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 4, 1]]);
        assert_eq!((d, s), (vec![2, 12], vec![vec![12, 1], vec![0, 1]]));
        // a transpose's strides merge nothing; dims of one element go
        let (d, s) = merge_dims(&[3, 1, 4], &[vec![1, 9, 3]]);
        assert_eq!((d, s), (vec![3, 4], vec![vec![1, 3]]));
        // one element: no dims at all
        assert_eq!(merge_dims(&[1, 1], &[vec![1, 1]]).0, Vec::<usize>::new());
    }
}
