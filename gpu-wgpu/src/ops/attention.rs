//! Fused scaled dot-product attention, forward and backward, on dense (heads, seq, dim)
//! operands and on one packed (batch, seq, heads, 3, head_dim) `qkv`, as core's CPU kernels
//! compute them (`core/src/cpu/attention.rs`): FlashAttention's order, one invocation per row,
//! a workgroup's rows staging tiles of the other operand in workgroup memory
//! (`shaders/attention_common.wgsl`). The forward (`shaders/attention.wgsl`) runs an online
//! softmax per query row; the backward runs one pass per query row for `dq` and each row's
//! `D = g . out` (`shaders/attention_dq.wgsl`), then one per key row for `dk` and `dv`
//! (`shaders/attention_dkdv.wgsl`).
//!
//! Each operand is described by core's `AttentionRows` (problem `p`'s row `r` at `at + (p
//! / per) * batch + (p % per) * head + r * row`), so both layouts run the same shaders. Widths
//! past [`CW`] run as one dispatch per chunk of [`CW`] output columns (the scores recomputed
//! for each); the keys (queries, for `dk` and `dv`) run in blocks per dispatch short enough
//! that no invocation loops more than [`LOOP_MAX`] times, the accumulators waiting in the
//! output between blocks. Operands past one binding run in windows of whole problems (whole
//! batch rows when packed); a problem (batch row) whose data exceeds one binding is a
//! `Device` error.

use gflow_core::backend::{AttentionDims, AttentionLayout as Layout, AttentionRows as Rows};
use gflow_core::{DType, Error, Result};

use crate::{LOOP_MAX, WgpuBackend, WgpuStorage, device_error};

/// Rows per workgroup (the shaders' `WG`).
const WG: usize = 64;
/// Rows per staged tile (`TK`).
const TK: usize = 32;
/// Columns per staged chunk and per accumulator (`CW`).
const CW: usize = 64;
/// Loop iterations of one invocation per staged chunk: loading its share of the tile, its own
/// row's chunk, and the products with the tile's rows (four vec4s per iteration).
const CHUNK_COST: usize = TK * CW / WG + CW / 4 + TK * (CW / 16 + 1);
/// Loop iterations outside the tiles: an invocation's own rows and accumulators loaded and
/// written, a few chunks each.
const SETUP_COST: usize = 8 * CW;

/// Contiguous (problems, rows, width) scratch laid out for a dispatch whose layout has `per`
/// problems per batch row (so that windows of whole batch rows cut it as they cut the rest).
fn dense_in(per: usize, rows: usize, width: usize) -> Rows {
    Rows {
        at: 0,
        per,
        batch: per * rows * width,
        head: rows * width,
        row: width,
    }
}

/// Elements from problem `p0`'s first to the end of the last of problems `p0..p0 + n` (`rows`
/// rows of `width` each) laid out as `r`; `p0` starts a batch row.
fn span(r: &Rows, n: usize, rows: usize, width: usize) -> usize {
    r.needs((n, rows, width)).saturating_sub(r.at)
}

/// One operand of a dispatch: its buffer and elements, where its rows lie, and each problem's
/// rows and width.
#[derive(Clone, Copy)]
struct Operand<'a> {
    buf: &'a wgpu::Buffer,
    len: usize,
    rows: Rows,
    count: usize,
    width: usize,
    /// The argument's name, for errors.
    name: &'static str,
}

/// One kernel's run: which shader, over which rows, and how far its blocks reach.
struct Launch<'a> {
    kernel: &'static str,
    dims: AttentionDims,
    /// Problems per batch row (a window holds whole batch rows).
    per: usize,
    /// Rows per problem with an invocation each.
    rows: usize,
    /// The range the blocks cover (keys, or queries for `dk` and `dv`), and per dispatch.
    reach: usize,
    block: usize,
    /// Chunks of [`CW`] output columns.
    chunks: usize,
    save: bool,
    operands: Vec<Operand<'a>>,
}

/// [`Backend::attention`](gflow_core::backend::Backend::attention) on this device.
pub(crate) fn attention(
    w: &WgpuBackend,
    q: &WgpuStorage,
    k: &WgpuStorage,
    v: &WgpuStorage,
    dims: AttentionDims,
    save: bool,
) -> Result<WgpuStorage> {
    let l = Layout::dense(&dims);
    l.check("attention", &dims, [q.len, k.len, v.len], None)?;
    w.attention_forward(&l, [q, k, v], dims, save)
}

/// [`Backend::attention_packed`](gflow_core::backend::Backend::attention_packed) on this
/// device.
pub(crate) fn attention_packed(
    w: &WgpuBackend,
    qkv: &WgpuStorage,
    dims: AttentionDims,
    heads: usize,
    save: bool,
) -> Result<WgpuStorage> {
    check_packed(&dims, heads)?;
    let l = Layout::packed(&dims, heads);
    l.check("attention_packed", &dims, [qkv.len; 3], None)?;
    w.attention_forward(&l, [qkv, qkv, qkv], dims, save)
}

/// [`Backend::attention_grad`](gflow_core::backend::Backend::attention_grad) on this device.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_grad(
    w: &WgpuBackend,
    q: &WgpuStorage,
    k: &WgpuStorage,
    v: &WgpuStorage,
    g: &WgpuStorage,
    out: &WgpuStorage,
    lse: &WgpuStorage,
    dims: AttentionDims,
) -> Result<WgpuStorage> {
    let l = Layout::dense(&dims);
    let saved = Some([g.len, out.len, lse.len]);
    l.check("attention_grad", &dims, [q.len, k.len, v.len], saved)?;
    w.attention_backward(&l, [q, k, v], [g, out, lse], dims)
}

/// [`Backend::attention_packed_grad`](gflow_core::backend::Backend::attention_packed_grad) on
/// this device.
pub(crate) fn attention_packed_grad(
    w: &WgpuBackend,
    qkv: &WgpuStorage,
    g: &WgpuStorage,
    out: &WgpuStorage,
    lse: &WgpuStorage,
    dims: AttentionDims,
    heads: usize,
) -> Result<WgpuStorage> {
    check_packed(&dims, heads)?;
    let l = Layout::packed(&dims, heads);
    let saved = Some([g.len, out.len, lse.len]);
    l.check("attention_packed_grad", &dims, [qkv.len; 3], saved)?;
    w.attention_backward(&l, [qkv, qkv, qkv], [g, out, lse], dims)
}

/// A packed layout's shape: `heads` per batch row dividing `dims.heads`, self-attention of
/// equal widths.
fn check_packed(d: &AttentionDims, heads: usize) -> Result<()> {
    if heads == 0 || !d.heads.is_multiple_of(heads) {
        return Err(Error::Internal(format!(
            "attention_packed: heads {heads} does not divide {} problems",
            d.heads
        )));
    }
    if d.seq_q != d.seq_k || d.head_dim != d.v_dim {
        return Err(Error::Internal(format!(
            "attention_packed: dims {d:?} are not self-attention of equal widths"
        )));
    }
    Ok(())
}

/// Rows per dispatch (keys, or queries for `dk` and `dv`) of a kernel whose tiles stage
/// `chunks` chunks of [`CW`] columns each plus `extra` iterations, after `setup` more than
/// [`SETUP_COST`], so that no invocation loops more than [`LOOP_MAX`] times; an error where
/// even one tile would.
fn block_len(chunks: usize, extra: usize, setup: usize) -> Result<usize> {
    let tile = chunks * CHUNK_COST + extra;
    let tiles = LOOP_MAX.saturating_sub(SETUP_COST + setup) / tile;
    if tiles == 0 {
        return Err(device_error(format!(
            "attention: {chunks} chunks of {CW} columns per tile exceed one invocation's \
             {LOOP_MAX} loop iterations"
        )));
    }
    Ok(tiles * TK)
}

impl WgpuBackend {
    /// The forward on `[q, k, v]` laid out as `l`: the output, then with `save` each query
    /// row's log-sum-exp.
    fn attention_forward(
        &self,
        l: &Layout,
        [q, k, v]: [&WgpuStorage; 3],
        d: AttentionDims,
        save: bool,
    ) -> Result<WgpuStorage> {
        let (n, tq, tk, hd, dv) = (d.heads, d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let out_len = n * tq * dv;
        let len = out_len + if save { n * tq } else { 0 };
        let out = self.new_storage(len, DType::F32)?;
        if n * tq == 0 {
            return Ok(out);
        }
        let hc = hd.div_ceil(CW);
        let block = block_len(hc, 2 * TK + CW / 4 + CHUNK_COST, 0)?;
        // between blocks each row's running max and sum wait in a scratch buffer
        let state = if tk > block {
            Some(self.new_storage(n * tq * 2, DType::F32)?)
        } else {
            None
        };
        let state_op = match &state {
            Some(s) => self.operand(s, dense_in(l.q.per, tq, 2), (tq, 2), "state")?,
            None => self.operand(&out, l.out, (tq, dv), "out")?,
        };
        let lse_op = if save {
            // the log-sum-exp follows the output in its buffer
            let saved = Rows {
                at: l.lse.at + out_len,
                ..l.lse
            };
            self.operand(&out, saved, (tq, 1), "out")?
        } else {
            self.operand(&out, l.out, (tq, dv), "out")?
        };
        let operands = vec![
            self.operand(q, l.q, (tq, hd), "q")?,
            self.operand(k, l.k, (tk, hd), "k")?,
            self.operand(v, l.v, (tk, dv), "v")?,
            self.operand(&out, l.out, (tq, dv), "out")?,
            lse_op,
            state_op,
        ];
        self.attention_launch(&Launch {
            kernel: "attention",
            dims: d,
            per: l.q.per,
            rows: tq,
            reach: tk,
            block,
            chunks: dv.div_ceil(CW).max(1),
            save,
            operands,
        })?;
        Ok(out)
    }

    /// The backward on `[q, k, v]` laid out as `l` for the output gradient `g`, given the
    /// forward's output and log-sum-exp: `dq`, `dk`, `dv` where `l.grads` puts them.
    fn attention_backward(
        &self,
        l: &Layout,
        [q, k, v]: [&WgpuStorage; 3],
        [g, out, lse]: [&WgpuStorage; 3],
        d: AttentionDims,
    ) -> Result<WgpuStorage> {
        let (n, tq, tk, hd, dv) = (d.heads, d.seq_q, d.seq_k, d.head_dim, d.v_dim);
        let grads = self.new_storage(n * (tq * hd + tk * hd + tk * dv), DType::F32)?;
        if n == 0 || (tq == 0 && tk == 0) {
            return Ok(grads);
        }
        let dd = self.new_storage(n * tq, DType::F32)?;
        let (hc, vc) = (hd.div_ceil(CW), dv.div_ceil(CW));
        let [oq, ok, ov, og] = [
            self.operand(q, l.q, (tq, hd), "q")?,
            self.operand(k, l.k, (tk, hd), "k")?,
            self.operand(v, l.v, (tk, dv), "v")?,
            self.operand(g, l.out, (tq, dv), "g")?,
        ];
        let olse = self.operand(lse, l.lse, (tq, 1), "lse")?;
        let odd = self.operand(&dd, dense_in(l.q.per, tq, 1), (tq, 1), "dd")?;
        let grad = |i: usize, count: usize, width: usize, name: &'static str| {
            self.operand(&grads, l.grads[i], (count, width), name)
        };
        self.attention_launch(&Launch {
            kernel: "attention_dq",
            dims: d,
            per: l.q.per,
            rows: tq,
            reach: tk,
            block: block_len(hc + vc, 2 * TK + CHUNK_COST, dv)?,
            chunks: hc.max(1),
            save: false,
            operands: vec![
                oq,
                ok,
                ov,
                og,
                self.operand(out, l.out, (tq, dv), "out")?,
                olse,
                odd,
                grad(0, tq, hd, "dq")?,
            ],
        })?;
        self.attention_launch(&Launch {
            kernel: "attention_dkdv",
            dims: d,
            per: l.q.per,
            rows: tk,
            reach: tq,
            block: block_len(hc + vc, 4 * TK + 3 * CHUNK_COST, 0)?,
            chunks: hc.max(vc).max(1),
            save: false,
            operands: vec![
                oq,
                ok,
                ov,
                og,
                olse,
                odd,
                grad(1, tk, hd, "dk")?,
                grad(2, tk, dv, "dv")?,
            ],
        })?;
        Ok(grads)
    }

    /// `s` as an operand laid out as `rows`, `(count, width)` per problem, checked to be f32.
    fn operand<'a>(
        &self,
        s: &'a WgpuStorage,
        rows: Rows,
        (count, width): (usize, usize),
        name: &'static str,
    ) -> Result<Operand<'a>> {
        self.need_f32(s, name)?;
        Ok(Operand {
            buf: &s.buf,
            len: s.len,
            rows,
            count,
            width,
            name,
        })
    }

    /// Runs `l` in windows of whole batch rows that every operand's binding holds, each over
    /// its column chunks and its blocks in order.
    fn attention_launch(&self, l: &Launch<'_>) -> Result<()> {
        let d = &l.dims;
        let problems = d.heads;
        let units = problems.div_ceil(l.per);
        let fit = self.units_per_window(l, problems)?;
        let groups_per_problem = l.rows.div_ceil(WG);
        let mut u0 = 0;
        while u0 < units {
            let p0 = u0 * l.per;
            let np = (fit * l.per).min(problems - p0);
            let mut bindings = Vec::with_capacity(l.operands.len());
            let mut words = Vec::with_capacity(4 * l.operands.len());
            for op in &l.operands {
                let span = span(&op.rows, np, op.count, op.width);
                let (b, base) = self.window(op.buf, op.rows.start(p0), span, 4)?;
                bindings.push(b);
                let strides = [op.rows.batch, op.rows.head, op.rows.row];
                words.push(base);
                words.extend(strides.map(|s| s as u32));
            }
            let blocks: Vec<usize> = (0..l.reach.max(1)).step_by(l.block).collect();
            for c in 0..l.chunks {
                for (i, &b0) in blocks.iter().enumerate() {
                    let b1 = (b0 + l.block).min(l.reach);
                    let mut params = vec![
                        np as u32,
                        l.per as u32,
                        d.seq_q as u32,
                        d.seq_k as u32,
                        d.head_dim as u32,
                        d.v_dim as u32,
                        (d.scale as f32).to_bits(),
                        u32::from(d.causal),
                        (c * CW) as u32,
                        b0 as u32,
                        b1 as u32,
                        u32::from(i == 0),
                        u32::from(i + 1 == blocks.len()),
                        u32::from(l.save),
                    ];
                    params.extend_from_slice(&words);
                    let groups = (np * groups_per_problem) as u64;
                    self.dispatch_groups(l.kernel, groups, &params, &bindings)?;
                }
            }
            u0 += fit;
        }
        Ok(())
    }

    /// Batch rows per window: as many as every operand's binding holds, checked to cover its
    /// buffer; an error where one batch row of an operand exceeds a binding.
    fn units_per_window(&self, l: &Launch<'_>, problems: usize) -> Result<usize> {
        let units = problems.div_ceil(l.per);
        let room = self.max_binding.saturating_sub(self.align) as usize / 4;
        let mut fit = units;
        for op in &l.operands {
            let all = op.rows.needs((problems, op.count, op.width));
            if all > op.len {
                return Err(Error::Internal(format!(
                    "{}: `{}` of {} elements does not hold {problems} problems of {} rows of {}",
                    l.kernel, op.name, op.len, op.count, op.width
                )));
            }
            let one = span(&op.rows, l.per.min(problems), op.count, op.width);
            if one > room {
                return Err(device_error(format!(
                    "{}: one batch row of `{}` ({} bytes) exceeds this adapter's storage \
                     binding limit of {} bytes",
                    l.kernel,
                    op.name,
                    one * 4,
                    self.max_binding
                )));
            }
            if op.rows.batch > 0 && one > 0 {
                fit = fit.min(1 + (room - one) / op.rows.batch);
            }
        }
        Ok(fit.max(1))
    }
}
