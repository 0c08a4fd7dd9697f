//! Where fused attention's operands lie ([`AttentionLayout`]): each operand's rows per
//! (batch, head) problem ([`AttentionRows`]), for dense (heads, seq, dim) operands and for one
//! packed (batch, seq, heads, 3, head_dim) projection, so every backend's kernels read and
//! write both in place, and check a buffer against its layout the same way.

use super::AttentionDims;
use crate::error::{Error, Result};

/// Where one operand of attention keeps each problem's rows: problem `p` (head `p % per` of
/// batch row `p / per`) starts at `at + (p / per) * batch + (p % per) * head`, its rows `row`
/// apart, each row's elements contiguous. Dense (problems, rows, width) data is one case, a
/// (batch, seq, heads, width) tensor or a packed (batch, seq, heads, 3, head_dim) projection
/// others.
///
/// ```
/// use gflow_core::backend::AttentionRows;
/// // k of a packed (2, 5, 3, 3, 4) qkv: head 1 of batch row 1, row 2
/// let k = AttentionRows::interleaved(5, 3, 12, 4);
/// assert_eq!(k.start(4) + 2 * k.row, ((5 + 2) * 3 + 1) * 12 + 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionRows {
    /// The first problem's first element.
    pub at: usize,
    /// Problems per batch row.
    pub per: usize,
    /// Elements from one batch row to the next.
    pub batch: usize,
    /// Elements from one head to the next within a batch row.
    pub head: usize,
    /// Elements from one row to the next.
    pub row: usize,
}

impl AttentionRows {
    /// Contiguous (problems, rows, width) data, from element `at`, problems `stride` apart.
    pub fn dense(at: usize, stride: usize, width: usize) -> AttentionRows {
        AttentionRows {
            at,
            per: 1,
            batch: stride,
            head: 0,
            row: width,
        }
    }

    /// (batch, seq, heads, lanes) data of which each head reads its row's elements from `at`
    /// on among its `lanes`.
    pub fn interleaved(seq: usize, heads: usize, lanes: usize, at: usize) -> AttentionRows {
        AttentionRows {
            at,
            per: heads.max(1),
            batch: seq * heads * lanes,
            head: lanes,
            row: heads * lanes,
        }
    }

    /// The first element of problem `p`.
    pub fn start(&self, p: usize) -> usize {
        self.at + (p / self.per) * self.batch + (p % self.per) * self.head
    }

    /// Elements a buffer holds at least for `problems` problems of `rows` rows of `width`
    /// elements laid out so (the end of the farthest row).
    pub fn needs(&self, (problems, rows, width): (usize, usize, usize)) -> usize {
        if problems == 0 || rows == 0 || width == 0 {
            return 0;
        }
        self.at
            + ((problems - 1) / self.per) * self.batch
            + (self.per - 1).min(problems - 1) * self.head
            + (rows - 1) * self.row
            + width
    }

    /// Checks that a buffer of `len` elements, `name` to `op`, holds `size` = (problems, rows,
    /// width) laid out so.
    ///
    /// # Errors
    /// A `ShapeMismatch` naming the buffer, what its places need and what it holds.
    pub fn check(
        &self,
        op: &'static str,
        name: &str,
        len: usize,
        size: (usize, usize, usize),
    ) -> Result<()> {
        let need = self.needs(size);
        if len >= need {
            return Ok(());
        }
        let (problems, rows, width) = size;
        Err(Error::ShapeMismatch {
            op,
            shapes: vec![vec![len], vec![problems, rows, width]],
            reason: format!(
                "{name} holds {len} elements; {problems} problems of {rows} rows of {width} \
                 laid out as {self:?} need {need}"
            ),
        })
    }
}

/// Where attention's operands lie: q, k, v and the output (the output gradient shares the
/// output's places), each query row's log-sum-exp (one element per row), and the backward's
/// `dq`, `dk`, `dv` in its one output buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLayout {
    /// The queries.
    pub q: AttentionRows,
    /// The keys.
    pub k: AttentionRows,
    /// The values.
    pub v: AttentionRows,
    /// The output (and its gradient).
    pub out: AttentionRows,
    /// Each query row's log-sum-exp, in a buffer of its own.
    pub lse: AttentionRows,
    /// `dq`, `dk`, `dv` in the backward's output.
    pub grads: [AttentionRows; 3],
}

impl AttentionLayout {
    /// Separate dense (heads, seq, dim) q, k, v and output; the gradients one after another,
    /// `dq` (heads, seq_q, head_dim), `dk` (heads, seq_k, head_dim), `dv` (heads, seq_k, v_dim).
    pub fn dense(d: &AttentionDims) -> AttentionLayout {
        let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let (dq, dk) = (d.heads * tq * hd, d.heads * tk * hd);
        AttentionLayout {
            q: AttentionRows::dense(0, tq * hd, hd),
            k: AttentionRows::dense(0, tk * hd, hd),
            v: AttentionRows::dense(0, tk * dv, dv),
            out: AttentionRows::dense(0, tq * dv, dv),
            lse: AttentionRows::dense(0, tq, 1),
            grads: [
                AttentionRows::dense(0, tq * hd, hd),
                AttentionRows::dense(dq, tk * hd, hd),
                AttentionRows::dense(dq + dk, tk * dv, dv),
            ],
        }
    }

    /// One (batch, seq, heads, 3, head_dim) tensor holding each head's q, k and v side by
    /// side, `heads` per batch row, a (batch, seq, heads, head_dim) output and a (batch, seq,
    /// heads) log-sum-exp; the gradients where q, k and v are.
    pub fn packed(d: &AttentionDims, heads: usize) -> AttentionLayout {
        let (t, hd) = (d.seq_q, d.head_dim);
        let part = |i| AttentionRows::interleaved(t, heads, 3 * hd, i * hd);
        AttentionLayout {
            q: part(0),
            k: part(1),
            v: part(2),
            out: AttentionRows::interleaved(t, heads, hd, 0),
            lse: AttentionRows::interleaved(t, heads, 1, 0),
            grads: [part(0), part(1), part(2)],
        }
    }

    /// Checks that buffers of `q`, `k`, `v` elements (and, when given, of the output
    /// gradient's, the output's and the log-sum-exp's) hold `d`'s problems laid out so: a
    /// `ShapeMismatch` of `op` naming the first that does not.
    ///
    /// # Errors
    /// The first buffer shorter than its places need.
    pub fn check(
        &self,
        op: &'static str,
        d: &AttentionDims,
        [q, k, v]: [usize; 3],
        saved: Option<[usize; 3]>,
    ) -> Result<()> {
        let (n, tq, tk) = (d.heads, d.seq_q, d.seq_k);
        let mut operands = vec![
            ("q", q, self.q, (n, tq, d.head_dim)),
            ("k", k, self.k, (n, tk, d.head_dim)),
            ("v", v, self.v, (n, tk, d.v_dim)),
        ];
        if let Some([g, out, lse]) = saved {
            operands.extend([
                ("the output gradient", g, self.out, (n, tq, d.v_dim)),
                ("the output", out, self.out, (n, tq, d.v_dim)),
                ("the log-sum-exp", lse, self.lse, (n, tq, 1)),
            ]);
        }
        operands
            .into_iter()
            .try_for_each(|(name, len, rows, size)| rows.check(op, name, len, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(heads: usize, (tq, tk): (usize, usize), (hd, dv): (usize, usize)) -> AttentionDims {
        AttentionDims {
            heads,
            seq_q: tq,
            seq_k: tk,
            head_dim: hd,
            v_dim: dv,
            scale: 0.5,
            causal: true,
        }
    }

    /// The first element of problem `p`'s row `i` under `r`.
    fn at(r: &AttentionRows, p: usize, i: usize) -> usize {
        r.start(p) + i * r.row
    }

    #[test]
    fn packed_places_are_the_qkv_and_output_elements() {
        // (batch 2, seq 5, heads 3, 3, head_dim 4)
        let (b, t, h, hd) = (2, 5, 3, 4);
        let lay = AttentionLayout::packed(&dims(b * h, (t, t), (hd, hd)), h);
        for (bi, ti, hi) in [(0, 0, 0), (1, 4, 2), (1, 2, 0), (0, 3, 1)] {
            let p = bi * h + hi;
            let row = (bi * t + ti) * h + hi;
            for (c, r) in [lay.q, lay.k, lay.v].iter().enumerate() {
                assert_eq!(at(r, p, ti), (row * 3 + c) * hd);
            }
            assert_eq!(lay.grads, [lay.q, lay.k, lay.v]);
            assert_eq!(at(&lay.out, p, ti), row * hd);
            assert_eq!(at(&lay.lse, p, ti), row);
        }
        // the last row ends each buffer
        assert_eq!(lay.q.needs((6, 5, 4)), b * t * h * 3 * hd - 2 * hd);
        assert_eq!(lay.v.needs((6, 5, 4)), b * t * h * 3 * hd);
        assert_eq!(lay.out.needs((6, 5, 4)), b * t * h * hd);
        assert_eq!(lay.lse.needs((6, 5, 1)), b * t * h);
    }

    #[test]
    fn dense_gradients_lie_one_after_another() {
        let (n, tq, tk, hd, dv) = (3, 5, 7, 4, 6);
        let d = dims(n, (tq, tk), (hd, dv));
        let lay = AttentionLayout::dense(&d);
        let (nq, nk, nv) = (n * tq * hd, n * tk * hd, n * tk * dv);
        let [dq, dk, dvs] = lay.grads;
        assert_eq!(dq.needs((n, tq, hd)), nq);
        assert_eq!(at(&dk, 0, 0), nq);
        assert_eq!(dk.needs((n, tk, hd)), nq + nk);
        assert_eq!(at(&dvs, 0, 0), nq + nk);
        assert_eq!(dvs.needs((n, tk, dv)), nq + nk + nv);
        assert_eq!(at(&lay.v, 2, 3), (2 * tk + 3) * dv);
        assert_eq!(lay.lse.needs((n, tq, 1)), n * tq);
    }

    #[test]
    fn a_short_buffer_is_named() {
        let d = dims(2, (4, 4), (3, 3));
        let lay = AttentionLayout::dense(&d);
        let full = 2 * 4 * 3;
        assert!(
            lay.check("attention", &d, [full; 3], Some([full, full, 8]))
                .is_ok()
        );
        let err = lay.check("attention", &d, [full, full - 1, full], None);
        assert!(
            matches!(err, Err(Error::ShapeMismatch { reason, .. }) if reason.starts_with("k "))
        );
        let err = lay.check("attention", &d, [full; 3], Some([full, full, 7]));
        assert!(
            matches!(err, Err(Error::ShapeMismatch { reason, .. }) if reason.starts_with("the log"))
        );
    }
}
