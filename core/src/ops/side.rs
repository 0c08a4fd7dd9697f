//! A kernel's second result: an `Op` has one output, so where one kernel computes two things
//! (attention's output and its log-sum-exp, its `dq` and `dk`/`dv`; a norm's input and
//! parameter gradients) the op's `compute` returns the first and leaves the rest here, on the
//! rank's thread, for the code that dispatched it (or the next op) to take. Each result is
//! tagged with what it is and, where another op takes it, the addresses of the local inputs it
//! came from (attention's, taken by the dispatching code right after the op, carry none); it is
//! taken only under the same tag. One slot: each is taken right after it is left.

use std::cell::RefCell;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::Buffer;

/// What a left result is, and the addresses of the local inputs it was computed from.
pub(super) type Tag = (&'static str, [usize; 2]);

thread_local! {
    static LEFT: RefCell<Option<(Tag, Vec<Buffer>)>> = const { RefCell::new(None) };
}

/// Where a local input's data lives, to tell the same component from another: its device
/// buffer where it has one (never downloaded for this: on a GPU that cost the norms' backward
/// two waits for the device and two copies of an activation per layer), else its host data.
///
/// # Errors
/// None today; a `Result` for the callers' `?`.
pub(super) fn address(b: &Buffer) -> Result<usize> {
    Ok(match b.device_copy() {
        Some(d) => Arc::as_ptr(d).cast::<()>() as usize,
        None => b.host()?.as_bytes().as_ptr() as usize,
    })
}

/// Leaves `results` under `tag` (replacing anything left before).
pub(super) fn leave(tag: Tag, results: Vec<Buffer>) {
    LEFT.with(|l| *l.borrow_mut() = Some((tag, results)));
}

/// The results left under `tag`, if those are what is left (the slot is emptied either way).
pub(super) fn take(tag: Tag) -> Option<Vec<Buffer>> {
    LEFT.with(|l| l.borrow_mut().take())
        .and_then(|(t, r)| (t == tag).then_some(r))
}
