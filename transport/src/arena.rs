//! A shared-memory arena for large buffers, and [`ShmAlloc`], the global allocator that fills it.
//!
//! `ShmAlloc` serves every allocation of [`ARENA_MIN`] bytes or more (alignment up to a page)
//! from one sparse `memfd` mapping per process, and everything smaller from the system
//! allocator. A process on the same host maps a peer's arena read-only
//! (`/proc/PID/fd/FD`, [`PeerArena`]), so a collective's payload moves with one copy, straight
//! out of the sender's own buffer, instead of two through a ring buffer (or a kernel copy by
//! `process_vm_readv`, which runs at a third of memcpy's speed when the two buffers' page
//! offsets differ; see `benches/MEASURED.md`). This is what `MPI_Alloc_mem` or XPMEM give MPI.
//!
//! A program opts in with
//! `#[global_allocator] static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;`. Without it every
//! payload goes through the rings, as before. A process that forks and keeps running without
//! `exec` must not use it: the child would share the parent's large blocks (its own new blocks
//! come from the system allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::File;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// Allocations of at least this many bytes live in the arena.
pub const ARENA_MIN: usize = 256 << 10;
const PAGE: usize = 4096;
/// Virtual sizes tried for the arena, largest first (sparse: a page exists once written).
/// Every process of a host also maps each peer's arena, so 256 GiB leaves room in the 128 TiB
/// of user address space for hundreds of ranks per host; a process whose large blocks outgrow
/// its arena gets the rest from the system allocator (sent as bytes).
#[cfg(target_os = "linux")]
const ARENA_SIZES: [usize; 3] = [1 << 38, 1 << 35, 1 << 33];
/// At most this many bytes of freed blocks keep their pages (so that reusing them skips page
/// faults and zeroing), and at most a [`KEEP_SHARE`]th of the host's memory; blocks freed
/// beyond that give their pages back to the system.
#[cfg(target_os = "linux")]
const KEEP_FREED: usize = 2 << 30;
#[cfg(target_os = "linux")]
const KEEP_SHARE: usize = 32;
/// Size classes: four per power of two from `ARENA_MIN` (at most 25 % rounding).
const CLASSES: usize = 4 * 24;
const MIN_LOG2: u32 = ARENA_MIN.trailing_zeros();

/// Where the arena is mapped ([`BASE`], [`END`]) and its file descriptor, for lock-free lookups.
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static FD: AtomicI32 = AtomicI32::new(-1);
static STATE: Mutex<State> = Mutex::new(State::Unopened);

// One static instance: boxing the arena would allocate inside the allocator.
#[allow(clippy::large_enum_variant)]
enum State {
    Unopened,
    Open(Arena),
    Failed,
}

struct Arena {
    base: usize,
    size: usize,
    /// Bytes handed out from the start so far.
    bump: usize,
    /// The process that opened it (a forked child allocates from the system).
    pid: u32,
    /// Free blocks per class: the address of the first (0: none). A free block holds the next
    /// block's address in its first word, and whether it kept its pages in the second.
    free: [usize; CLASSES],
    /// Bytes of free blocks that kept their pages.
    kept: usize,
    /// The most `kept` may reach.
    keep_max: usize,
}

/// How much of a block from the arena must be zeroed for `alloc_zeroed`.
enum Dirty {
    /// Never written (fresh pages of the file).
    Clean,
    /// Pages given back; only the free-list words were written since.
    Head,
    /// Reused with its old contents.
    All,
}

/// The class of a block of `size` bytes (`size >= ARENA_MIN`).
fn class_of(size: usize) -> usize {
    let e = usize::BITS - 1 - size.leading_zeros();
    let step = 1usize << (e - 2);
    let q = (size - (1usize << e)).div_ceil(step);
    (e - MIN_LOG2) as usize * 4 + q
}

/// The bytes a block of class `c` holds.
fn capacity(c: usize) -> usize {
    let e = c / 4 + MIN_LOG2 as usize;
    (1usize << e) + (c % 4) * (1usize << (e - 2))
}

/// Creates and maps the arena: a sparse memfd, shared so peers can map it too. Linux only, and
/// not under `GFLOW_PORTABLE=1` ([`crate::portable`]): elsewhere every block comes from the
/// system allocator and payloads move as bytes through the rings.
#[cfg(target_os = "linux")]
fn open() -> Option<Arena> {
    if crate::portable() {
        return None;
    }
    // SAFETY: plain system calls on a descriptor this function owns; the mapping is used only
    // through the allocator's bookkeeping.
    unsafe {
        let fd = libc::memfd_create(c"gflow-arena".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        for size in ARENA_SIZES {
            if libc::ftruncate(fd, size as libc::off_t) != 0 {
                continue;
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            );
            if p != libc::MAP_FAILED {
                FD.store(fd, Ordering::Release);
                BASE.store(p as usize, Ordering::Release);
                END.store(p as usize + size, Ordering::Release);
                return Some(Arena {
                    base: p as usize,
                    size,
                    bump: 0,
                    pid: std::process::id(),
                    free: [0; CLASSES],
                    kept: 0,
                    keep_max: keep_max(),
                });
            }
        }
        libc::close(fd);
        None
    }
}

/// No arena off Linux (no memfd, nor `/proc/PID/fd` for peers to map it by).
#[cfg(not(target_os = "linux"))]
fn open() -> Option<Arena> {
    None
}

/// [`KEEP_FREED`], or a [`KEEP_SHARE`]th of the host's memory if less (ranks share a host).
#[cfg(target_os = "linux")]
fn keep_max() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory =
        usize::try_from(pages.max(0)).unwrap_or(0) * usize::try_from(size.max(0)).unwrap_or(0);
    KEEP_FREED.min(memory / KEEP_SHARE)
}

impl Arena {
    /// A block for `size` bytes, or `None` (arena full, or a forked child).
    fn take(&mut self, size: usize) -> Option<(*mut u8, Dirty)> {
        let c = class_of(size);
        if c >= CLASSES || self.pid != std::process::id() {
            return None;
        }
        let cap = capacity(c);
        let head = self.free[c];
        if head != 0 {
            let words = head as *mut usize;
            // SAFETY: `head` is a free block of this class inside the mapping; its first two
            // words were written by `give`.
            let (next, kept) = unsafe { (*words, *words.add(1)) };
            self.free[c] = next;
            if kept == 1 {
                self.kept -= cap;
                return Some((head as *mut u8, Dirty::All));
            }
            return Some((head as *mut u8, Dirty::Head));
        }
        if self.size - self.bump < cap {
            return None;
        }
        let p = self.base + self.bump;
        self.bump += cap;
        Some((p as *mut u8, Dirty::Clean))
    }

    /// Puts the block at `p` (allocated for `size` bytes) on its free list.
    fn give(&mut self, p: *mut u8, size: usize) {
        let c = class_of(size);
        let cap = capacity(c);
        let keep = self.kept + cap <= self.keep_max;
        if keep {
            self.kept += cap;
        } else {
            // SAFETY: the block is ours, page-aligned and `cap` long inside the mapping; its
            // contents are dead. MADV_REMOVE frees the file's pages (reads give zeros).
            #[cfg(target_os = "linux")]
            unsafe {
                libc::madvise(p.cast(), cap, libc::MADV_REMOVE);
            }
        }
        let words = p as *mut usize;
        // SAFETY: a block is at least ARENA_MIN bytes, page-aligned: two words fit.
        unsafe {
            *words = self.free[c];
            *words.add(1) = usize::from(keep);
        }
        self.free[c] = p as usize;
    }
}

/// Runs `f` on the arena, opening it on first use; `None` when there is none.
fn with_arena<T>(f: impl FnOnce(&mut Arena) -> Option<T>) -> Option<T> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*state, State::Unopened) {
        *state = open().map_or(State::Failed, State::Open);
    }
    match &mut *state {
        State::Open(a) => f(a),
        _ => None,
    }
}

/// Whether `p` points into this process's arena.
fn in_arena(p: *const u8) -> bool {
    let p = p as usize;
    p >= BASE.load(Ordering::Acquire) && p < END.load(Ordering::Acquire)
}

fn large(layout: Layout) -> bool {
    layout.size() >= ARENA_MIN && layout.align() <= PAGE
}

/// The global allocator that puts large blocks into the shared arena (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmAlloc;

// SAFETY: blocks come either from `System` or from disjoint, page-aligned arena blocks of at
// least the requested size; every arena block is handed out once until freed, and a pointer is
// freed by the allocator it came from (the arena's address range decides).
unsafe impl GlobalAlloc for ShmAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if large(layout)
            && let Some((p, _)) = with_arena(|a| a.take(layout.size()))
        {
            return p;
        }
        // SAFETY: the caller's layout contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if large(layout)
            && let Some((p, dirty)) = with_arena(|a| a.take(layout.size()))
        {
            // SAFETY: `p` holds at least `layout.size()` bytes, ours alone.
            unsafe {
                match dirty {
                    Dirty::Clean => {}
                    Dirty::Head => p.write_bytes(0, 2 * size_of::<usize>()),
                    Dirty::All => p.write_bytes(0, layout.size()),
                }
            }
            return p;
        }
        // SAFETY: the caller's layout contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if in_arena(ptr) {
            with_arena(|a| {
                a.give(ptr, layout.size());
                Some(())
            });
        } else {
            // SAFETY: not an arena block, so the system allocator's, with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let here = in_arena(ptr);
        if !here && (new_size < ARENA_MIN || layout.align() > PAGE) {
            // SAFETY: the caller's contract; a system block stays with the system.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if here && new_size >= ARENA_MIN && class_of(new_size) == class_of(layout.size()) {
            return ptr;
        }
        // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a fresh block of the new size; the old one stays valid until freed below.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

/// Whether this program installed [`ShmAlloc`]: a large allocation lands in the arena.
pub fn installed() -> bool {
    locate(&vec![0u8; ARENA_MIN]).is_some()
}

/// Where `bytes` lie in this process's arena: (the arena's descriptor, offset), or `None`
/// when they are not in it (the program did not install [`ShmAlloc`], or a small buffer).
pub fn locate(bytes: &[u8]) -> Option<(i32, u64)> {
    let p = bytes.as_ptr();
    let base = BASE.load(Ordering::Acquire);
    (in_arena(p) && p as usize + bytes.len() <= END.load(Ordering::Acquire))
        .then(|| (FD.load(Ordering::Acquire), (p as usize - base) as u64))
}

/// A peer process's arena, mapped read-only into this one.
pub struct PeerArena {
    fd: i32,
    map: memmap2::Mmap,
}

impl PeerArena {
    /// Maps the arena that process `pid` holds open as descriptor `fd`.
    ///
    /// # Errors
    /// I/O errors opening or mapping it (the process is gone, or not this user's).
    pub fn open(pid: u32, fd: i32) -> std::io::Result<PeerArena> {
        let f = File::open(format!("/proc/{pid}/fd/{fd}"))?;
        // SAFETY: a read-only view; the peer writes a range only while no reference to it is
        // outstanding (the by-reference protocol of the links).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(PeerArena { fd, map })
    }

    /// The descriptor number this arena has in its process.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// `len` bytes at `offset`, or `None` past the end.
    pub fn bytes(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let at = usize::try_from(offset).ok()?;
        self.map.get(at..at.checked_add(len)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        for size in [
            ARENA_MIN,
            ARENA_MIN + 1,
            300_000,
            1 << 20,
            (1 << 20) + 1,
            5 << 20,
            123_456_789,
        ] {
            let c = class_of(size);
            assert!(capacity(c) >= size, "{size}: class {c}");
            assert!(
                c == 0 || capacity(c - 1) < size,
                "{size}: class {c} too big"
            );
            assert!(capacity(c) as f64 <= size as f64 * 1.25 + 1.0);
            assert_eq!(capacity(c) % PAGE, 0);
        }
    }

    /// Threads allocating, filling, checking and freeing blocks of random sizes at once never
    /// see another block's bytes (blocks are disjoint and reused only once freed).
    #[test]
    fn concurrent_blocks_are_disjoint() {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    let a = ShmAlloc;
                    let mut seed = t * 7919 + 1;
                    let mut live: Vec<(*mut u8, Layout, u8)> = vec![];
                    for i in 0..300 {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let size = ARENA_MIN + (seed >> 33) as usize % (3 << 20);
                        let layout = Layout::from_size_align(size, 64).unwrap();
                        let mark = (t * 64 + i % 64) as u8;
                        // SAFETY: a valid layout; the block is checked and freed below.
                        let p = unsafe { a.alloc(layout) };
                        assert!(!p.is_null());
                        // SAFETY: `p` holds `size` bytes, ours alone.
                        unsafe { p.write_bytes(mark, size) };
                        live.push((p, layout, mark));
                        if live.len() > 3 || i == 299 {
                            for (p, layout, mark) in live.drain(..) {
                                // SAFETY: as allocated above, not yet freed.
                                let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
                                assert!(
                                    bytes.iter().all(|&b| b == mark),
                                    "a block was overwritten"
                                );
                                // SAFETY: freed once, with its layout.
                                unsafe { a.dealloc(p, layout) };
                            }
                        }
                    }
                });
            }
        });
    }

    /// Blocks from the arena are distinct, keep their contents, are found by `locate` and
    /// readable through a peer mapping of the same file; freed blocks are reused.
    #[test]
    fn blocks_are_shared_and_reused() {
        let a = ShmAlloc;
        // Sizes no other test of this binary allocates, so the free list is this test's.
        const N: usize = 10_000_000;
        let layout = Layout::from_size_align(N, 8).unwrap();
        // SAFETY: valid layouts; every block is freed once with its layout.
        unsafe {
            let p = a.alloc_zeroed(layout);
            let q = a.alloc(layout);
            assert!(!p.is_null() && !q.is_null() && p != q);
            let ps = std::slice::from_raw_parts_mut(p, N);
            assert!(ps.iter().all(|&b| b == 0));
            ps.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i % 251) as u8);
            let (fd, at) = locate(ps).expect("in the arena");
            let peer = PeerArena::open(std::process::id(), fd).unwrap();
            assert_eq!(peer.bytes(at, N).unwrap(), &ps[..]);
            assert!(peer.bytes(u64::MAX - 4, 8).is_none());
            a.dealloc(p, layout);
            let again = a.alloc_zeroed(layout);
            assert_eq!(again, p, "a freed block of the class is reused");
            assert!(std::slice::from_raw_parts(again, N).iter().all(|&b| b == 0));
            *again.add(N - 1) = 7;
            let grown = a.realloc(again, layout, 10 << 20);
            assert_eq!(grown, again, "growing within the class keeps the block");
            let moved = a.realloc(
                grown,
                Layout::from_size_align(10 << 20, 8).unwrap(),
                20 << 20,
            );
            assert_ne!(moved, grown, "growing past the class moves the block");
            assert_eq!(*moved.add(N - 1), 7, "and keeps its contents");
            a.dealloc(moved, Layout::from_size_align(20 << 20, 8).unwrap());
            a.dealloc(q, layout);
            let small = Layout::from_size_align(64, 8).unwrap();
            let s = a.alloc(small);
            assert!(locate(std::slice::from_raw_parts(s, 64)).is_none());
            a.dealloc(s, small);
        }
    }
}
