//! Host buffers kept for reuse by outputs that are written whole, as a caching allocator keeps
//! blocks: a boxing step's collective writes every byte of its output, so a buffer of the same
//! dtype and length that a dropped tensor gave back serves it without being zeroed first. (The
//! zeroing was a memset of the whole output, a fifth of a `to_global` over shared memory; see
//! `benches/MEASURED.md`.) Only lengths that such outputs asked for are kept, at most
//! [`MAX_HELD`] buffers and [`MAX_BYTES`] in all, so a training step's boxing outputs recycle
//! from one step to the next while other tensors are freed as before.

use std::sync::{Mutex, MutexGuard};

use crate::dtype::DType;
use crate::storage::HostData;

/// Smaller buffers are zeroed and freed as before (zeroing them is cheap).
pub(crate) const MIN_BYTES: usize = 1 << 20;
/// At most this many buffers are kept.
const MAX_HELD: usize = 8;
/// At most this many bytes are kept.
const MAX_BYTES: usize = 256 << 20;
/// How many distinct (dtype, length) requests are remembered.
const WANTED: usize = 16;

struct Pool {
    /// Recent requests of [`for_overwrite`], oldest first.
    wanted: Vec<(DType, usize)>,
    held: Vec<HostData>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    wanted: Vec::new(),
    held: Vec::new(),
    bytes: 0,
});

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` elements of `dtype` whose values are unspecified (a dropped tensor's, or zeros): for an
/// output every element of which is written before anything reads it.
pub(crate) fn for_overwrite(dtype: DType, n: usize) -> HostData {
    if n.saturating_mul(dtype.size()) >= MIN_BYTES {
        let mut pool = pool();
        if let Some(i) = pool
            .held
            .iter()
            .position(|h| h.dtype() == dtype && h.len() == n)
        {
            pool.bytes -= n * dtype.size();
            return pool.held.remove(i);
        }
        if !pool.wanted.contains(&(dtype, n)) {
            if pool.wanted.len() == WANTED {
                pool.wanted.remove(0);
            }
            pool.wanted.push((dtype, n));
        }
    }
    HostData::filled(dtype, n, 0.0)
}

/// Frees every buffer kept for reuse and forgets the lengths asked for (PyTorch's
/// `empty_cache`: memory back to the system between phases of a job); returns the bytes
/// freed. Boxing keeps buffers again as it asks for outputs.
///
/// ```
/// let freed = gflow_core::empty_cache();
/// assert_eq!(gflow_core::empty_cache(), 0, "nothing kept after {freed} bytes were freed");
/// ```
pub fn empty_cache() -> usize {
    let mut pool = pool();
    let freed = pool.bytes;
    pool.held.clear();
    pool.wanted.clear();
    pool.bytes = 0;
    freed
}

/// Keeps `data` for [`for_overwrite`] when an output of its dtype and length was asked for
/// recently (freeing the oldest kept buffers to make room); else it is freed.
pub(crate) fn give(data: HostData) {
    let bytes = data.as_bytes().len();
    if bytes < MIN_BYTES {
        return;
    }
    let mut pool = pool();
    if bytes > MAX_BYTES || !pool.wanted.contains(&(data.dtype(), data.len())) {
        return;
    }
    // The oldest buffers make room (their lengths are the likeliest to be done with).
    while pool.held.len() == MAX_HELD || pool.bytes + bytes > MAX_BYTES {
        let old = pool.held.remove(0);
        pool.bytes -= old.as_bytes().len();
    }
    pool.bytes += bytes;
    pool.held.push(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each test uses lengths of its own: the pool is one per process.
    #[test]
    fn a_buffer_given_back_serves_the_next_request_of_its_length_only() {
        let n = (MIN_BYTES / 4) + 17;
        let first = for_overwrite(DType::F32, n);
        assert_eq!((first.dtype(), first.len()), (DType::F32, n));
        let at = first.as_bytes().as_ptr();
        give(first);
        // Another length or dtype does not take it.
        assert_ne!(for_overwrite(DType::I32, n).as_bytes().as_ptr(), at);
        let again = for_overwrite(DType::F32, n);
        assert_eq!(again.as_bytes().as_ptr(), at);
        assert_eq!(again.len(), n);
    }

    #[test]
    fn lengths_never_asked_for_and_small_buffers_are_not_kept() {
        let n = (MIN_BYTES / 8) + 29;
        give(HostData::filled(DType::F64, n, 1.0));
        // Not asked for before it was given: freed, so this request gets zeros.
        assert!(
            for_overwrite(DType::F64, n)
                .to_f64_vec()
                .iter()
                .all(|&x| x == 0.0)
        );
        let small = for_overwrite(DType::F32, 100);
        assert!(small.to_f64_vec().iter().all(|&x| x == 0.0));
        give(HostData::filled(DType::F32, 100, 5.0));
        assert!(
            for_overwrite(DType::F32, 100)
                .to_f64_vec()
                .iter()
                .all(|&x| x == 0.0)
        );
    }
}
