//! Kernel launches: the one helper every kernel goes through, and launch shapes.

use cudarc::driver::{CudaFunction, LaunchArgs, LaunchConfig};
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
    LaunchConfig {
        grid_dim: (n.clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}
