//! Reverse-mode automatic differentiation. Every differentiable operator records a `Node` on
//! its output (its inputs and a backward function) when gradients are enabled and an input
//! requires them; [`Tensor::backward`] walks the recorded graph from the output back to the
//! leaves. Backward functions are written with ordinary tensor operators, so on global tensors
//! they go through the same dispatch (signatures, cost choice, boxing) as the forward pass, and
//! a leaf's gradient is boxed to the leaf's own placement and SBP at the end: a broadcast weight
//! used with split data gets a `partial_sum` gradient from the backward matmul, which becomes
//! `broadcast` by an all-reduce, with no user code.
//!
//! The graph is freed as the backward pass consumes it (a second `backward` through the same
//! graph is an error, as in PyTorch). Recording is per thread, so each simulated rank has its
//! own `no_grad` state.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::LocalKey;

use crate::error::{Error, Result};
use crate::sbp::{NdSbp, Sbp};
use crate::tensor::{Target, Tensor};

/// How a tensor came to be.
pub(crate) enum GradFn {
    /// Made by the user (a leaf): its gradient accumulates in [`Tensor::grad`].
    Leaf,
    /// Recorded from an operation.
    Node(Arc<Node>),
    /// Recorded, and already consumed by a backward pass.
    Freed,
}

impl std::fmt::Debug for GradFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GradFn::Leaf => f.write_str("Leaf"),
            GradFn::Node(n) => write!(f, "Node({})", n.name),
            GradFn::Freed => f.write_str("Freed"),
        }
    }
}

/// What a backward function sees besides the output's gradient.
pub(crate) struct Ctx<'a> {
    /// The operation's inputs.
    pub inputs: &'a [Tensor],
    /// The operation's output (without its history).
    pub out: &'a Tensor,
    /// Which inputs need a gradient; others may be answered with `None`.
    pub needs: Vec<bool>,
}

/// A backward function: the gradients of the inputs (`None` for none) from the output's.
type BackwardFn = dyn Fn(&Ctx<'_>, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync;

/// One recorded operation.
pub(crate) struct Node {
    name: &'static str,
    inputs: Vec<Tensor>,
    backward: Box<BackwardFn>,
    /// Whether `backward` takes an output gradient that only broadcasts to the output's shape
    /// (see [`record_broadcasting`]).
    broadcast_grad: bool,
}

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
    static NO_SYNC: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (backward passes, for gradient accumulation) with leaf gradients kept in the layout
/// backward produced them in (e.g. `partial_sum` on a data-parallel weight), so nothing is
/// communicated; the next backward outside `no_sync` boxes each accumulated gradient to its
/// parameter's layout once, as DDP's `no_sync`. Applies to the calling thread (one rank).
///
/// ```
/// use gflow_core::{comm_stats, no_sync, reset_comm_stats, simulate, Placement, Sbp, Tensor};
/// let counts = simulate(2, |_env| {
///     let p = Placement::new("cpu", [0, 1])?;
///     let w = Tensor::ones(&[3, 2], (&p, [Sbp::broadcast()]))?.set_requires_grad(true);
///     let x = Tensor::ones(&[4, 3], (&p, [Sbp::split(0)]))?;
///     let loss = || x.matmul(&w)?.sum([0, 1], false);
///     let (l1, l2) = (loss()?, loss()?);
///     reset_comm_stats();
///     no_sync(|| l1.backward())?;              // the gradient stays partial: nothing moves
///     let quiet = comm_stats().collectives;
///     l2.backward()?;                          // one all-reduce of the accumulated gradient
///     Ok((quiet, comm_stats().collectives, w.grad().unwrap().to_vec::<f32>()?))
/// })?;
/// assert_eq!((counts[0].0, counts[0].1), (0, 1));
/// assert_eq!(counts[0].2, vec![8.0; 6]); // two passes of 4 rows of ones
/// # Ok::<(), gflow_core::Error>(())
/// ```
pub fn no_sync<T>(f: impl FnOnce() -> T) -> T {
    with_flag(&NO_SYNC, true, f)
}

/// Runs `f` without recording operations for autograd (like PyTorch's `torch.no_grad()`), e.g.
/// for evaluation or manual parameter updates. Applies to the calling thread (one rank).
pub fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    with_flag(&ENABLED, false, f)
}

/// Runs `f` with this thread's `flag` set to `value`, restoring it afterwards (also when `f`
/// panics).
fn with_flag<T>(flag: &'static LocalKey<Cell<bool>>, value: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|e| e.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|e| e.replace(value)));
    f()
}

/// Whether operations on this thread are being recorded.
pub fn is_grad_enabled() -> bool {
    ENABLED.with(Cell::get)
}

/// Records `out = name(inputs)` with `backward`, when recording is on and an input requires a
/// gradient; returns `out` either way. `backward` is handed a gradient of `out`'s shape, and
/// may answer an input's gradient with one that only broadcasts to the input's shape (size 1
/// where the input's size is larger, as `sum`'s: a value repeated along those dims), which the
/// engine expands only where a consumer needs the full shape.
pub(crate) fn record(
    out: Result<Tensor>,
    name: &'static str,
    inputs: &[&Tensor],
    backward: impl Fn(&Ctx<'_>, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Result<Tensor> {
    record_node(out, name, inputs, Box::new(backward), false)
}

/// [`record`] for a `backward` written with broadcasting operators, which takes an output
/// gradient that only broadcasts to the output's shape: a scalar loss's gradient reaches it
/// unexpanded (PyTorch's stride-0 view), saving a pass that writes the repeated value.
pub(crate) fn record_broadcasting(
    out: Result<Tensor>,
    name: &'static str,
    inputs: &[&Tensor],
    backward: impl Fn(&Ctx<'_>, &Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Result<Tensor> {
    record_node(out, name, inputs, Box::new(backward), true)
}

/// [`record`] and [`record_broadcasting`].
fn record_node(
    out: Result<Tensor>,
    name: &'static str,
    inputs: &[&Tensor],
    backward: Box<BackwardFn>,
    broadcast_grad: bool,
) -> Result<Tensor> {
    let out = out?;
    if !is_grad_enabled() || !inputs.iter().any(|t| t.requires_grad()) {
        return Ok(out);
    }
    out.set_requires_grad(true);
    *out.grad_fn_lock() = GradFn::Node(Arc::new(Node {
        name,
        inputs: inputs.iter().map(|t| (*t).clone()).collect(),
        backward,
        broadcast_grad,
    }));
    Ok(out)
}

/// Where tensors "like `t`" go: `t`'s device, or `t`'s placement with every axis broadcast.
pub(crate) fn target_like(t: &Tensor) -> Target {
    match t.dist() {
        None => Target::Local(t.device()),
        Some(d) => Target::Global(d.placement.clone(), NdSbp::broadcast(d.placement.ndim())),
    }
}

/// `sbp` with every partial axis made broadcast (the layout of a gradient flowing back into a
/// partial value: each summand's gradient is the whole output gradient).
pub(crate) fn partial_to_broadcast(sbp: &NdSbp) -> NdSbp {
    NdSbp::from(
        sbp.as_slice()
            .iter()
            .map(|s| match s {
                Sbp::Partial(_) => Sbp::Broadcast,
                other => *other,
            })
            .collect::<Vec<_>>(),
    )
}

/// Sums `g` (of a broadcast result's shape) down to `shape`, the shape of an input that was
/// broadcast: leading extra dims and dims where `shape` has size 1 are summed.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    sum_broadcast_to(g, g.shape(), shape)
}

/// [`sum_to`] for a gradient `g` of a result of shape `out` that `g` may only broadcast to
/// (see [`record`]): a dim summed where `g` has size 1 multiplies by `out`'s size there (the
/// sum of that many equal values), and a dim of `shape` larger than 1 where `g` has size 1
/// stays size 1, so the result broadcasts to `shape`.
pub(crate) fn sum_broadcast_to(g: &Tensor, out: &[usize], shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let pad = g.ndim().saturating_sub(shape.len());
    let summed = |d: usize| d < pad || (shape[d - pad] == 1 && g.shape()[d] != 1);
    let dims: Vec<usize> = (0..g.ndim()).filter(|&d| summed(d)).collect();
    // dims summed over where g holds one value for out's many (g and out right-aligned)
    let off = out.len().saturating_sub(g.ndim());
    let repeats: usize = (0..g.ndim())
        .filter(|&d| (d < pad || shape[d - pad] == 1) && g.shape()[d] == 1)
        .map(|d| out.get(d + off).copied().unwrap_or(1))
        .product();
    let mut reduced = if dims.is_empty() {
        g.clone()
    } else {
        g.sum(dims, true)?
    };
    if repeats != 1 {
        reduced = reduced.mul_scalar(repeats as f64)?;
    }
    // g's dims aligned to shape's, right to left; those g lacks are 1
    let lead = shape.len() - (g.ndim() - pad);
    let kept: Vec<usize> = (0..shape.len())
        .map(|d| {
            if d < lead || shape[d] == 1 {
                1
            } else {
                g.shape()[d - lead + pad]
            }
        })
        .collect();
    reduced.reshape(&kept)
}

/// Whether a gradient of shape `g` broadcasts to a tensor of `shape` without being summed:
/// as many dims, each equal or 1.
fn expandable(g: &[usize], shape: &[usize]) -> bool {
    g.len() == shape.len() && g.iter().zip(shape).all(|(&a, &b)| a == b || a == 1)
}

/// `g` expanded to `shape` where it only broadcasts to it (see [`record`]).
fn full(g: Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        Ok(g)
    } else {
        g.expand(shape)
    }
}

fn backward_error(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "backward",
        reason: reason.into(),
    }
}

impl Tensor {
    /// Computes the gradient of this scalar (one-element) tensor with respect to every leaf that
    /// requires one, accumulating into the leaves' [`Tensor::grad`]. On global tensors this is
    /// a collective (every rank of the world calls it, SPMD).
    ///
    /// # Errors
    /// `InvalidArgument` when this tensor does not require a gradient, has more than one
    /// element, or its graph was already consumed; errors of the backward operators.
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(backward_error(format!(
                "backward needs a one-element tensor, this one has shape {:?}; use backward_with",
                self.shape()
            )));
        }
        self.backward_with_options(None, false)
    }

    /// Backward pass seeded with `grad` (the gradient of some scalar with respect to this
    /// tensor; same shape).
    ///
    /// # Errors
    /// As [`Tensor::backward`]; `ShapeMismatch` when `grad`'s shape differs.
    pub fn backward_with(&self, grad: &Tensor) -> Result<()> {
        self.backward_with_options(Some(grad), false)
    }

    /// [`Tensor::backward`] (`grad` `None`) or [`Tensor::backward_with`], and with
    /// `retain_graph` (PyTorch's `retain_graph=True`) the graph is kept, so that a later
    /// backward through it (of this tensor or of another one sharing part of the graph) runs
    /// again and accumulates into the leaves once more. Without it, the graph is freed as the
    /// pass goes, and a second backward through it is an error.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![3.0f32], &[1], Device::Cpu)?.set_requires_grad(true);
    /// let y = x.mul(&x)?.sum(vec![], false)?;
    /// y.backward_with_options(None, true)?;
    /// y.backward()?; // the graph was kept: d(x^2)/dx = 6 accumulates twice
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, [12.0]);
    /// assert!(y.backward().is_err()); // freed by the second pass
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::backward`] and [`Tensor::backward_with`].
    pub fn backward_with_options(&self, grad: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        let seed = self.seed(grad)?;
        no_grad(|| {
            run_backward(
                &[(self.clone(), seed)],
                retain_graph,
                Sink::Accumulate(None),
            )
        })
    }

    /// [`Tensor::backward_with_options`] that accumulates only into `inputs` (leaves or not),
    /// as PyTorch's `backward(inputs=...)`: every other tensor's gradient stays as it was.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![3.0f32], &[1], Device::Cpu)?.set_requires_grad(true);
    /// let w = Tensor::from_vec(vec![2.0f32], &[1], Device::Cpu)?.set_requires_grad(true);
    /// x.mul(&w)?.sum(vec![], false)?.backward_inputs(None, &[w.clone()], false)?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, [3.0]);
    /// assert!(x.grad().is_none());
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::backward_with_options`]; `InvalidArgument` when an input does not require
    /// a gradient.
    pub fn backward_inputs(
        &self,
        grad: Option<&Tensor>,
        inputs: &[Tensor],
        retain_graph: bool,
    ) -> Result<()> {
        let seed = self.seed(grad)?;
        check_differentiable(inputs)?;
        let only: HashSet<usize> = inputs.iter().map(Tensor::key).collect();
        no_grad(|| {
            run_backward(
                &[(self.clone(), seed)],
                retain_graph,
                Sink::Accumulate(Some(&only)),
            )
        })
    }

    /// The backward seed: `grad`, or ones for a one-element tensor; checked against this
    /// tensor's shape and that it requires a gradient.
    fn seed(&self, grad: Option<&Tensor>) -> Result<Tensor> {
        let seed = match grad {
            Some(g) => g.clone(),
            None => {
                if self.numel() != 1 {
                    return Err(backward_error(format!(
                        "backward needs a one-element tensor, this one has shape {:?}; give \
                         a gradient",
                        self.shape()
                    )));
                }
                Tensor::full_dtype(self.shape(), 1.0, self.dtype(), target_like(self))?
            }
        };
        if !self.requires_grad() {
            return Err(backward_error(
                "the tensor does not require grad (no input had set_requires_grad(true), or it \
                 was computed under no_grad)",
            ));
        }
        if seed.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "backward",
                shapes: vec![self.shape().to_vec(), seed.shape().to_vec()],
                reason: "the seed gradient must have the tensor's shape".into(),
            });
        }
        Ok(seed.detach())
    }
}

/// The gradients of `outputs` (seeded by `grad_outputs`: `None` for ones, which needs a
/// one-element output) with respect to `inputs`, returned instead of accumulated: no tensor's
/// [`Tensor::grad`] changes, as PyTorch's `torch.autograd.grad`. An input the outputs do not
/// depend on gets `None` with `allow_unused`, else an error. Each gradient has its input's
/// placement and SBP. On global tensors a collective, as [`Tensor::backward`].
///
/// ```
/// use gflow_core::{Device, Tensor, autograd};
/// let x = Tensor::from_vec(vec![3.0f32], &[1], Device::Cpu)?.set_requires_grad(true);
/// let y = x.mul(&x)?.sum(vec![], false)?;
/// let g = autograd::grad(&[y], &[None], &[x.clone()], false, false)?;
/// assert_eq!(g[0].as_ref().unwrap().to_vec::<f32>()?, [6.0]);
/// assert!(x.grad().is_none());
/// # Ok::<(), gflow_core::Error>(())
/// ```
///
/// # Errors
/// `InvalidArgument` when the lists' lengths differ, an input does not require a gradient, or
/// (without `allow_unused`) one is not used; as [`Tensor::backward`] otherwise.
pub fn grad(
    outputs: &[Tensor],
    grad_outputs: &[Option<Tensor>],
    inputs: &[Tensor],
    retain_graph: bool,
    allow_unused: bool,
) -> Result<Vec<Option<Tensor>>> {
    if outputs.len() != grad_outputs.len() {
        return Err(backward_error(format!(
            "grad got {} outputs and {} grad_outputs: one each",
            outputs.len(),
            grad_outputs.len()
        )));
    }
    check_differentiable(inputs)?;
    let roots = outputs
        .iter()
        .zip(grad_outputs)
        .map(|(o, g)| Ok((o.clone(), o.seed(g.as_ref())?)))
        .collect::<Result<Vec<_>>>()?;
    let mut found = HashMap::new();
    let wanted: HashSet<usize> = inputs.iter().map(Tensor::key).collect();
    no_grad(|| run_backward(&roots, retain_graph, Sink::Capture(&wanted, &mut found)))?;
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| match found.get(&t.key()) {
            Some(g) => Ok(Some(in_layout_of(t, g.clone())?)),
            None if allow_unused => Ok(None),
            None => Err(backward_error(format!(
                "input {i} appears not to have been used in the graph (pass allow_unused to \
                 get None for it)"
            ))),
        })
        .collect()
}

/// Refuses inputs that take no gradient.
fn check_differentiable(inputs: &[Tensor]) -> Result<()> {
    match inputs.iter().position(|t| !t.requires_grad()) {
        Some(i) => Err(backward_error(format!(
            "input {i} does not require grad: only tensors that require grad can be \
             differentiated"
        ))),
        None => Ok(()),
    }
}

/// Where a backward pass puts the gradients it reaches.
enum Sink<'a> {
    /// Into `.grad`: of every leaf and every non-leaf that retains its gradient, or with a
    /// set, of just those tensors.
    Accumulate(Option<&'a HashSet<usize>>),
    /// Into the map, for the tensors of the set; no `.grad` changes.
    Capture(&'a HashSet<usize>, &'a mut HashMap<usize, Tensor>),
}

impl Sink<'_> {
    /// Takes `t`'s gradient `g` (made full-size only here, where this sink wants it: most
    /// tensors' gradients are not kept); `leaf`: `t` has no node.
    fn take(&mut self, t: &Tensor, g: &Tensor, leaf: bool) -> Result<()> {
        let wanted = match self {
            Sink::Accumulate(None) => leaf || t.retains_grad(),
            Sink::Accumulate(Some(set)) | Sink::Capture(set, _) => set.contains(&t.key()),
        };
        if !wanted {
            return Ok(());
        }
        let g = full(g.clone(), t.shape())?;
        match self {
            Sink::Capture(_, found) => {
                found.insert(t.key(), g);
                Ok(())
            }
            Sink::Accumulate(_) => accumulate(t, g),
        }
    }
}

/// The tensors reachable from `roots` through recorded nodes (those requiring a gradient),
/// each after all of its inputs.
fn topo_order(roots: &[Tensor]) -> Result<Vec<(Tensor, Option<Arc<Node>>)>> {
    let mut order = vec![];
    let mut seen = HashSet::new();
    let mut stack: Vec<(Tensor, Option<Option<Arc<Node>>>)> =
        roots.iter().rev().map(|r| (r.clone(), None)).collect();
    while let Some((t, visited)) = stack.pop() {
        if let Some(node) = visited {
            order.push((t, node));
            continue;
        }
        if !seen.insert(t.key()) {
            continue;
        }
        let node = match &*t.grad_fn_lock() {
            GradFn::Leaf => None,
            GradFn::Node(n) => Some(n.clone()),
            GradFn::Freed => {
                return Err(backward_error(
                    "trying to backward through the graph a second time (it was freed by the \
                     first backward)",
                ));
            }
        };
        let inputs: Vec<Tensor> = node.iter().flat_map(|n| n.inputs.clone()).collect();
        stack.push((t, Some(node)));
        for i in inputs.into_iter().rev() {
            if i.requires_grad() && !seen.contains(&i.key()) {
                stack.push((i, None));
            }
        }
    }
    Ok(order)
}

/// Backward from each `(root, seed)`, its gradients into `sink`.
fn run_backward(roots: &[(Tensor, Tensor)], retain_graph: bool, mut sink: Sink<'_>) -> Result<()> {
    let tensors: Vec<Tensor> = roots.iter().map(|(r, _)| r.clone()).collect();
    let order = topo_order(&tensors)?;
    let mut grads: HashMap<usize, Tensor> = HashMap::new();
    for (root, seed) in roots {
        let sum = match grads.remove(&root.key()) {
            Some(prev) => prev.add(seed)?,
            None => seed.clone(),
        };
        grads.insert(root.key(), sum);
    }
    for (t, node) in order.into_iter().rev() {
        let Some(g) = grads.remove(&t.key()) else {
            continue;
        };
        let Some(node) = node else {
            sink.take(&t, &g, true)?;
            continue;
        };
        if !retain_graph {
            *t.grad_fn_lock() = GradFn::Freed;
        }
        let g = if node.broadcast_grad {
            g
        } else {
            full(g, t.shape())?
        };
        sink.take(&t, &g, false)?;
        let ctx = Ctx {
            inputs: &node.inputs,
            out: &t.detach(),
            needs: node.inputs.iter().map(Tensor::requires_grad).collect(),
        };
        let gs = crate::profile::scope(
            || format!("backward {}", node.name),
            || (node.backward)(&ctx, &g),
        )?;
        for (input, gi) in node.inputs.iter().zip(gs) {
            let Some(gi) = gi.filter(|_| input.requires_grad()) else {
                continue;
            };
            if !expandable(gi.shape(), input.shape()) {
                return Err(Error::Internal(format!(
                    "backward of {}: gradient shape {:?} for an input of shape {:?}",
                    node.name,
                    gi.shape(),
                    input.shape()
                )));
            }
            let sum = match grads.remove(&input.key()) {
                Some(prev) => prev.add(&gi)?,
                None => gi,
            };
            grads.insert(input.key(), sum);
        }
    }
    Ok(())
}

/// Adds `g` to a leaf's gradient, boxed to the leaf's placement and SBP; under [`no_sync`] the
/// sum stays in the layout backward gave it, and the next accumulation outside boxes it once.
fn accumulate(leaf: &Tensor, g: Tensor) -> Result<()> {
    let layout = leaf.dist();
    let deferred = NO_SYNC.with(Cell::get);
    let sum = match leaf.grad() {
        // A gradient left unboxed by `no_sync`: add in the backward layout, box once below.
        Some(prev) if deferred || prev.dist() != layout => prev.add(&g)?,
        Some(prev) => prev.add(&in_layout_of(leaf, g)?)?,
        None => g,
    };
    leaf.set_grad(Some(if deferred {
        sum
    } else {
        in_layout_of(leaf, sum)?
    }));
    Ok(())
}

/// `g` boxed to `t`'s placement and SBP (as is for a local `t`).
fn in_layout_of(t: &Tensor, g: Tensor) -> Result<Tensor> {
    match t.dist() {
        Some(d) if g.dist() != Some(d) => g.into_global(d),
        _ => Ok(g),
    }
}
