//! Fused attention's kernels, forward (with and without the saved log-sum-exp) and backward, in
//! both layouts (dense (heads, seq, dim) operands and one packed (batch, seq, heads, 3,
//! head_dim) `qkv`), against the definition computed here in f64 with naive loops.

use super::{buf, computed, expect_within, rounded, vals};
use crate::backend::{AttentionDims, Backend, Kernels, Resident};
use crate::dtype::DType;
use crate::error::Result;

/// One problem's operands, row-major: `q` (tq, hd), `k` (tk, hd), `v` (tk, dv), and the output
/// gradient `g` (tq, dv).
struct Problem {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    g: Vec<f64>,
}

/// One problem's results: the output (tq, dv), each row's log-sum-exp, and the gradients.
struct Solved {
    out: Vec<f64>,
    lse: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
}

/// The definition: `P = softmax(scale q kᵀ)` over the keys each query sees (`0..=i` when
/// causal), `O = P v`; `dV = Pᵀ dO`, `dP = dO vᵀ`, `dS = P (dP - rowsum(P dP))`, `dQ = scale dS
/// k`, `dK = scale dSᵀ q`.
fn solve(p: &Problem, d: &AttentionDims) -> Solved {
    let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    let mut s = Solved {
        out: vec![0.0; tq * dv],
        lse: vec![0.0; tq],
        dq: vec![0.0; tq * hd],
        dk: vec![0.0; tk * hd],
        dv: vec![0.0; tk * dv],
    };
    for i in 0..tq {
        let seen = if d.causal { (i + 1).min(tk) } else { tk };
        let scores: Vec<f64> = (0..seen)
            .map(|j| {
                d.scale
                    * (0..hd)
                        .map(|x| p.q[i * hd + x] * p.k[j * hd + x])
                        .sum::<f64>()
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = scores.iter().map(|x| (x - max).exp()).sum();
        s.lse[i] = max + sum.ln();
        let probs: Vec<f64> = scores.iter().map(|x| (x - s.lse[i]).exp()).collect();
        for (j, pj) in probs.iter().enumerate() {
            for y in 0..dv {
                s.out[i * dv + y] += pj * p.v[j * dv + y];
            }
        }
        let dps: Vec<f64> = (0..seen)
            .map(|j| {
                (0..dv)
                    .map(|y| p.g[i * dv + y] * p.v[j * dv + y])
                    .sum::<f64>()
            })
            .collect();
        let rowsum: f64 = probs.iter().zip(&dps).map(|(a, b)| a * b).sum();
        for j in 0..seen {
            let ds = probs[j] * (dps[j] - rowsum);
            for x in 0..hd {
                s.dq[i * hd + x] += d.scale * ds * p.k[j * hd + x];
                s.dk[j * hd + x] += d.scale * ds * p.q[i * hd + x];
            }
            for y in 0..dv {
                s.dv[j * dv + y] += probs[j] * p.g[i * dv + y];
            }
        }
    }
    s
}

fn dims(
    heads: usize,
    (tq, tk): (usize, usize),
    (hd, dv): (usize, usize),
    causal: bool,
) -> AttentionDims {
    AttentionDims {
        heads,
        seq_q: tq,
        seq_k: tk,
        head_dim: hd,
        v_dim: dv,
        scale: 1.0 / (hd as f64).sqrt(),
        causal,
    }
}

/// [`Kernels::attention`] and [`Kernels::attention_grad`] on (heads, seq, dim) operands: odd
/// sizes, more queries than keys and the reverse, rows and keys past a 64-row tile, and widths
/// past 128.
pub fn attentions<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let shapes = [
        (3, (5, 7), (4, 3)),
        (2, (70, 70), (16, 16)),
        (1, (130, 97), (40, 24)),
        (1, (9, 140), (8, 5)),
        (2, (3, 3), (150, 130)),
        (1, (1, 1), (1, 1)),
    ];
    for dtype in computed(b) {
        for (heads, seqs, widths) in shapes {
            for causal in [false, true] {
                let d = dims(heads, seqs, widths, causal);
                let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
                let seed = (tq * 7 + tk * 3 + hd) as u64;
                let q = rounded(dtype, &vals(heads * tq * hd, seed, false));
                let k = rounded(dtype, &vals(heads * tk * hd, seed + 1, false));
                let v = rounded(dtype, &vals(heads * tk * dv, seed + 2, false));
                let g = rounded(dtype, &vals(heads * tq * dv, seed + 3, false));
                let solved: Vec<Solved> = (0..heads)
                    .map(|h| {
                        let p = Problem {
                            q: q[h * tq * hd..(h + 1) * tq * hd].to_vec(),
                            k: k[h * tk * hd..(h + 1) * tk * hd].to_vec(),
                            v: v[h * tk * dv..(h + 1) * tk * dv].to_vec(),
                            g: g[h * tq * dv..(h + 1) * tq * dv].to_vec(),
                        };
                        solve(&p, &d)
                    })
                    .collect();
                let all = |f: fn(&Solved) -> &Vec<f64>| -> Vec<f64> {
                    solved.iter().flat_map(|s| f(s).iter().copied()).collect()
                };
                let (out, lse) = (all(|s| &s.out), all(|s| &s.lse));
                let what =
                    format!("attention {heads} x ({tq}, {tk}) x ({hd}, {dv}) causal {causal}");
                let tol = tolerance(dtype);
                let [qb, kb, vb] = [&q, &k, &v].map(|x| buf(dtype, x));
                let got = b.attention(&qb, &kb, &vb, d, false)?;
                expect_within(b, &what, &got, &out, dtype, tol)?;
                let saved = b.attention(&qb, &kb, &vb, d, true)?;
                let both: Vec<f64> = out.iter().chain(&lse).copied().collect();
                expect_within(b, &format!("{what} saving"), &saved, &both, dtype, tol)?;
                // the backward from the reference's output and log-sum-exp, as a backend's own
                let [ob, lb, gb] = [&out, &lse, &g].map(|x| buf(dtype, x));
                let grads = b.attention_grad(&qb, &kb, &vb, &gb, &ob, &lb, d)?;
                let want: Vec<f64> = [all(|s| &s.dq), all(|s| &s.dk), all(|s| &s.dv)].concat();
                expect_within(b, &format!("{what} gradients"), &grads, &want, dtype, tol)?;
            }
        }
    }
    Ok(())
}

/// [`Kernels::attention_packed`] and [`Kernels::attention_packed_grad`] on a packed (batch,
/// seq, heads, 3, head_dim) `qkv`: the output (batch, seq, heads, head_dim), the log-sum-exp
/// (batch, seq, heads) and the gradient in `qkv`'s layout.
pub fn packed_attentions<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    for dtype in computed(b) {
        for (batch, seq, heads, hd) in [
            (2, 33, 3, 8),
            (1, 129, 2, 64),
            (3, 1, 1, 5),
            (1, 70, 1, 136),
        ] {
            for causal in [false, true] {
                let d = dims(batch * heads, (seq, seq), (hd, hd), causal);
                let at = |bi: usize, t: usize, h: usize, c: usize| {
                    (((bi * seq + t) * heads + h) * 3 + c) * hd
                };
                let row = |bi: usize, t: usize, h: usize| ((bi * seq + t) * heads + h) * hd;
                let qkv = rounded(
                    dtype,
                    &vals(batch * seq * heads * 3 * hd, (seq + hd) as u64, false),
                );
                let g = rounded(
                    dtype,
                    &vals(batch * seq * heads * hd, (seq * hd) as u64, false),
                );
                let mut out = vec![0.0; batch * seq * heads * hd];
                let mut lse = vec![0.0; batch * seq * heads];
                let mut dqkv = vec![0.0; qkv.len()];
                for bi in 0..batch {
                    for h in 0..heads {
                        let rows = |c: usize, x: &[f64]| -> Vec<f64> {
                            (0..seq)
                                .flat_map(|t| x[at(bi, t, h, c)..at(bi, t, h, c) + hd].to_vec())
                                .collect()
                        };
                        let p = Problem {
                            q: rows(0, &qkv),
                            k: rows(1, &qkv),
                            v: rows(2, &qkv),
                            g: (0..seq)
                                .flat_map(|t| g[row(bi, t, h)..row(bi, t, h) + hd].to_vec())
                                .collect(),
                        };
                        let s = solve(&p, &d);
                        for t in 0..seq {
                            let (o, r) = (row(bi, t, h), t * hd);
                            out[o..o + hd].copy_from_slice(&s.out[r..r + hd]);
                            lse[(bi * seq + t) * heads + h] = s.lse[t];
                            for (c, part) in [&s.dq, &s.dk, &s.dv].into_iter().enumerate() {
                                let a = at(bi, t, h, c);
                                dqkv[a..a + hd].copy_from_slice(&part[r..r + hd]);
                            }
                        }
                    }
                }
                let what =
                    format!("packed attention ({batch}, {seq}, {heads}, {hd}) causal {causal}");
                let tol = tolerance(dtype);
                let qb = buf(dtype, &qkv);
                let got = b.attention_packed(&qb, d, heads, false)?;
                expect_within(b, &what, &got, &out, dtype, tol)?;
                let saved = b.attention_packed(&qb, d, heads, true)?;
                let both: Vec<f64> = out.iter().chain(&lse).copied().collect();
                expect_within(b, &format!("{what} saving"), &saved, &both, dtype, tol)?;
                let [gb, ob, lb] = [&g, &out, &lse].map(|x| buf(dtype, x));
                let grad = b.attention_packed_grad(&qb, &gb, &ob, &lb, d, heads)?;
                expect_within(b, &format!("{what} gradient"), &grad, &dqkv, dtype, tol)?;
            }
        }
    }
    Ok(())
}

/// Sums over up to a few hundred products of values in [-2, 2): f32 keeps about 1e-4.
fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-9 } else { 3e-4 }
}
