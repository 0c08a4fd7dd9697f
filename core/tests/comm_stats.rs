//! `comm_stats` sees what moves, and so proves what must not: a vocabulary-parallel loss never
//! gathers its logits, a vocabulary-parallel lookup never gathers its table, and `no_sync`
//! accumulates gradients with no communication, then boxes them once.

use gflow_core::nn::functional::cross_entropy;
use gflow_core::{
    CommStats, DType, Placement, Result, Sbp, Tensor, comm_stats, no_sync, reset_comm_stats,
    simulate,
};

/// What `f` moved on this rank.
fn moved(f: impl FnOnce() -> Result<()>) -> Result<CommStats> {
    reset_comm_stats();
    f()?;
    Ok(comm_stats())
}

/// A deterministic f32 matrix.
fn values(rows: usize, cols: usize, seed: f32) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| (i as f32 * 0.37 + seed).sin() * 3.0)
        .collect()
}

#[test]
fn a_vocabulary_parallel_loss_moves_statistics_not_logits() -> Result<()> {
    let (n, vocab) = (8, 4000);
    let logits_bytes = (n * vocab * 4) as u64;
    let stats = simulate(2, |_env| {
        let p = Placement::new("cpu", [0, 1])?;
        let logits =
            Tensor::from_vec(values(n, vocab, 0.5), &[n, vocab], (&p, [Sbp::broadcast()]))?
                .to_global(&p, [Sbp::split(1)])?
                .set_requires_grad(true);
        let targets: Vec<i64> = (0..n as i64).map(|i| (i * 997) % vocab as i64).collect();
        let targets = Tensor::from_vec(targets, &[n], (&p, [Sbp::broadcast()]))?;
        let st = moved(|| {
            let loss = cross_entropy(&logits, &targets)?;
            loss.backward()?;
            let g = logits.grad().expect("a gradient");
            assert_eq!(
                g.sbp().map(ToString::to_string).as_deref(),
                Some("(split(dim=1),)")
            );
            Ok(())
        })?;
        Ok(st)
    })?;
    for st in stats {
        assert!(st.collectives > 0, "{st:?}");
        assert!(
            st.bytes_sent * 20 < logits_bytes,
            "the loss sent {} bytes for {logits_bytes} bytes of logits",
            st.bytes_sent
        );
    }
    Ok(())
}

#[test]
fn a_vocabulary_parallel_lookup_moves_rows_not_the_table() -> Result<()> {
    let (vocab, dim, lookups) = (1000, 16, 6);
    let table_bytes = (vocab * dim * 4) as u64;
    let stats = simulate(2, |_env| {
        let p = Placement::new("cpu", [0, 1])?;
        let table = Tensor::from_vec(
            values(vocab, dim, 1.5),
            &[vocab, dim],
            (&p, [Sbp::broadcast()]),
        )?
        .to_global(&p, [Sbp::split(0)])?;
        let idx = Tensor::from_vec(
            vec![3i64, 999, 500, 501, 0, 3],
            &[lookups],
            (&p, [Sbp::broadcast()]),
        )?;
        let mut out = None;
        let st = moved(|| {
            let rows = table.gather_rows(&idx)?;
            out = Some(
                rows.to_global(&p, [Sbp::broadcast()])?
                    .to_local()?
                    .to_vec_cast::<f32>()?,
            );
            Ok(())
        })?;
        Ok((st, out.expect("rows")))
    })?;
    let full = values(vocab, dim, 1.5);
    for (st, rows) in stats {
        assert!(st.bytes_sent * 10 < table_bytes, "{st:?}");
        for (k, &i) in [3usize, 999, 500, 501, 0, 3].iter().enumerate() {
            assert_eq!(rows[k * dim..(k + 1) * dim], full[i * dim..(i + 1) * dim]);
        }
    }
    Ok(())
}

#[test]
fn no_sync_accumulates_without_communication_and_boxes_once() -> Result<()> {
    let (batch, d_in, d_out, micro) = (4, 3, 5, 3);
    let w0 = values(d_in, d_out, 2.0);
    let xs: Vec<Vec<f32>> = (0..micro).map(|m| values(batch, d_in, m as f32)).collect();
    // The reference: the sum over micro-batches of d(sum(x @ w)^2)/dw, in f64 on one device.
    let mut want = vec![0f64; d_in * d_out];
    for x in &xs {
        for b in 0..batch {
            for j in 0..d_out {
                let y: f64 = (0..d_in)
                    .map(|i| f64::from(x[b * d_in + i]) * f64::from(w0[i * d_out + j]))
                    .sum();
                for i in 0..d_in {
                    want[i * d_out + j] += 2.0 * y * f64::from(x[b * d_in + i]);
                }
            }
        }
    }
    let per_rank = simulate(2, |_env| {
        let p = Placement::new("cpu", [0, 1])?;
        let w = Tensor::from_vec(w0.clone(), &[d_in, d_out], (&p, [Sbp::broadcast()]))?
            .set_requires_grad(true);
        let losses = xs
            .iter()
            .map(|x| {
                let x = Tensor::from_vec(x.clone(), &[batch, d_in], (&p, [Sbp::broadcast()]))?
                    .to_global(&p, [Sbp::split(0)])?;
                x.matmul(&w)?.square()?.sum([0, 1], false)
            })
            .collect::<Result<Vec<_>>>()?;
        let quiet =
            moved(|| no_sync(|| losses[..micro - 1].iter().try_for_each(Tensor::backward)))?;
        let partial = w.grad().and_then(|g| g.sbp().map(ToString::to_string));
        let last = moved(|| losses[micro - 1].backward())?;
        let g = w.grad().expect("a gradient");
        Ok((
            quiet,
            partial,
            last,
            g.sbp().map(ToString::to_string),
            g.to_dtype(DType::F64)?.to_vec_cast::<f64>()?,
        ))
    })?;
    for (quiet, partial, last, sbp, got) in per_rank {
        assert_eq!(
            quiet.collectives, 0,
            "no_sync backward communicated: {quiet:?}"
        );
        assert_eq!(quiet.bytes_sent, 0);
        assert_eq!(partial.as_deref(), Some("(partial_sum,)"));
        assert_eq!(
            last.collectives, 1,
            "the accumulated gradient is boxed once: {last:?}"
        );
        assert_eq!(sbp.as_deref(), Some("(broadcast,)"));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
    Ok(())
}

#[test]
fn counts_are_per_rank() -> Result<()> {
    let stats = simulate(2, |_env| {
        let from = Placement::new("cpu", [0])?;
        let to = Placement::new("cpu", [1])?;
        let x = Tensor::ones(&[10], (&from, [Sbp::broadcast()]))?;
        moved(|| x.to_global(&to, [Sbp::broadcast()]).map(drop))
    })?;
    assert_eq!((stats[0].bytes_sent, stats[0].bytes_received), (40, 0));
    assert_eq!((stats[1].bytes_sent, stats[1].bytes_received), (0, 40));
    Ok(())
}
