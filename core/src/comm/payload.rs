//! [`Payload`]: the bytes of one message, either one contiguous slice or equal runs at a fixed
//! stride of a larger buffer (a column block of a row-major matrix). A strided payload goes out
//! without being packed first: a link writes its runs one after another, and a receiver that
//! reads the sender's memory copies the runs itself, so an all-to-all between split dims moves
//! each byte once, as the raw collective of contiguous blocks does.

use std::borrow::Cow;

/// The bytes of one message: `count` runs of `run` bytes, `stride` bytes apart, of `span`
/// (which starts at the first run and ends with the last). A contiguous payload is one run.
///
/// ```
/// use gflow_core::comm::Payload;
/// let m = [0u8, 1, 2, 3, 4, 5, 6, 7];
/// // Columns 1..3 of a 2 x 4 matrix of bytes.
/// let p = Payload::strided(&m, 1, 2, 4, 2).unwrap();
/// assert_eq!(p.len(), 4);
/// assert_eq!(p.to_bytes().as_ref(), [1, 2, 5, 6]);
/// assert_eq!(Payload::from(&m[..3]).to_bytes().as_ref(), [0, 1, 2]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a> {
    span: &'a [u8],
    run: usize,
    stride: usize,
}

impl<'a> From<&'a [u8]> for Payload<'a> {
    fn from(bytes: &'a [u8]) -> Payload<'a> {
        Payload {
            span: bytes,
            run: bytes.len(),
            stride: bytes.len(),
        }
    }
}

impl<'a> Payload<'a> {
    /// `count` runs of `run` bytes of `buf`, the first at byte `at`, each `stride` bytes after
    /// the one before; `None` where a run would overlap the next or leave `buf`. No runs (or
    /// empty ones) are the empty payload, wherever `at` is.
    pub fn strided(
        buf: &'a [u8],
        at: usize,
        run: usize,
        stride: usize,
        count: usize,
    ) -> Option<Payload<'a>> {
        if count == 0 || run == 0 {
            return Some(Payload::from(&[][..]));
        }
        if count == 1 || run == stride {
            return buf
                .get(at..at.checked_add(run.checked_mul(count)?)?)
                .map(Payload::from);
        }
        if run > stride {
            return None;
        }
        let end = at.checked_add(stride.checked_mul(count - 1)?.checked_add(run)?)?;
        Some(Payload {
            span: buf.get(at..end)?,
            run,
            stride,
        })
    }

    /// The runs' layout within [`Payload::span`]: (run, stride) in bytes; equal for a
    /// contiguous payload.
    pub fn layout(&self) -> (usize, usize) {
        (self.run, self.stride)
    }

    /// The bytes from the first run's start to the last run's end (the runs and the gaps
    /// between them).
    pub fn span(&self) -> &'a [u8] {
        self.span
    }

    /// Whether the payload is one run.
    pub fn is_contiguous(&self) -> bool {
        self.run == self.stride
    }

    /// The payload's length in bytes (the runs together).
    pub fn len(&self) -> usize {
        match self.stride {
            0 => 0,
            s => (self.span.len() + s - self.run) / s * self.run,
        }
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.span.is_empty()
    }

    /// The payload as one slice, where it is contiguous.
    pub fn as_slice(&self) -> Option<&'a [u8]> {
        self.is_contiguous().then_some(self.span)
    }

    /// The runs, in order.
    pub fn runs(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (span, run) = (self.span, self.run);
        span.chunks(self.stride.max(1))
            .map(move |c| &c[..run.min(c.len())])
            .filter(|c| !c.is_empty())
    }

    /// The rest of the run that holds payload byte `at` (`at` < [`Payload::len`]): what a link
    /// writes next after `at` bytes.
    pub fn rest_of_run(&self, at: usize) -> &'a [u8] {
        let (k, o) = (at / self.run.max(1), at % self.run.max(1));
        &self.span[k * self.stride + o..k * self.stride + self.run]
    }

    /// The payload's bytes in one slice (borrowed where contiguous, packed where not).
    pub fn to_bytes(&self) -> Cow<'a, [u8]> {
        match self.as_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(self.runs().flatten().copied().collect()),
        }
    }

    /// Copies the payload into `out` (of [`Payload::len`] bytes), run by run.
    pub fn copy_to(&self, out: &mut [u8]) {
        for (o, r) in out.chunks_mut(self.run.max(1)).zip(self.runs()) {
            o.copy_from_slice(r);
        }
    }

    /// The `len` payload bytes from byte `at`, where they are the whole payload or lie within
    /// one run; `None` otherwise (a plan reads a strided input only whole).
    pub fn get(&self, at: usize, len: usize) -> Option<Payload<'a>> {
        if at == 0 && len == self.len() {
            return Some(*self);
        }
        if len == 0 {
            return (at <= self.len()).then_some(Payload::from(&[][..]));
        }
        let run = self.run.max(1);
        let (k, o) = (at / run, at % run);
        (o + len <= run && at + len <= self.len())
            .then(|| Payload::from(&self.span[k * self.stride + o..k * self.stride + o + len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn strided_runs_are_the_columns_of_a_matrix() {
        let m = bytes(3 * 5);
        let p = Payload::strided(&m, 2, 2, 5, 3).unwrap();
        assert_eq!(p.len(), 6);
        assert!(!p.is_contiguous());
        assert_eq!(p.span().len(), 2 * 5 + 2);
        let want = [2, 3, 7, 8, 12, 13];
        assert_eq!(p.to_bytes().as_ref(), want);
        let mut out = [0u8; 6];
        p.copy_to(&mut out);
        assert_eq!(out, want);
        assert_eq!(p.runs().count(), 3);
        // A link writing 3 bytes, then the rest.
        assert_eq!(p.rest_of_run(0), [2, 3]);
        assert_eq!(p.rest_of_run(3), [8]);
        assert_eq!(p.rest_of_run(4), [12, 13]);
    }

    #[test]
    fn degenerate_layouts_are_contiguous_and_bounds_are_checked() {
        let m = bytes(10);
        for (at, run, stride, count, want) in [
            (1, 4, 4, 2, &m[1..9]),
            (3, 2, 9, 1, &m[3..5]),
            (3, 0, 9, 4, &m[3..3]),
            (3, 2, 9, 0, &m[3..3]),
            (40, 0, 9, 4, &m[3..3]),
            (2, 3, 3, 2, &m[2..8]),
        ] {
            let p = Payload::strided(&m, at, run, stride, count).unwrap();
            assert!(p.is_contiguous());
            assert_eq!(p.as_slice(), Some(want));
            assert_eq!(p.len(), want.len());
        }
        assert!(
            Payload::strided(&m, 0, 3, 2, 2).is_none(),
            "overlapping runs"
        );
        assert!(Payload::strided(&m, 5, 2, 4, 2).is_none(), "past the end");
        assert!(Payload::strided(&m, 4, 2, 4, 2).is_some());
        assert!(Payload::strided(&m, usize::MAX, 2, 4, 2).is_none());
        assert_eq!(Payload::from(&m[..0]).len(), 0);
        assert!(Payload::from(&m[..0]).is_empty());
    }

    #[test]
    fn parts_are_whole_payloads_or_pieces_of_one_run() {
        let m = bytes(12);
        let p = Payload::strided(&m, 0, 3, 4, 3).unwrap();
        assert_eq!(
            p.get(0, 9).unwrap().to_bytes().as_ref(),
            p.to_bytes().as_ref()
        );
        assert_eq!(p.get(4, 2).unwrap().as_slice(), Some(&m[5..7]));
        assert!(p.get(2, 2).is_none(), "crosses a gap");
        assert!(p.get(8, 2).is_none(), "past the end");
        let c = Payload::from(&m[2..8]);
        assert_eq!(c.get(1, 4).unwrap().as_slice(), Some(&m[3..7]));
        assert!(c.get(3, 4).is_none());
    }
}
