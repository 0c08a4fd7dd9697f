"""Results PyTorch gives (values recorded from torch 2.x), which gflow must give too: powers
with tensor and integer exponents, Python numbers with Bool tensors, printing, NumPy dtypes
gflow lacks, batched ``matmul`` broadcasting, ``expand`` of any dtype, reductions and
``flatten`` of 0-d tensors, ``scatter_add``, functional norms, and error classes."""

import numpy as np
import pytest

import gflow as flow


def close(t, want, dtype):
    assert t.dtype == dtype, (t.dtype, dtype)
    np.testing.assert_allclose(np.asarray(t.numpy(), dtype=np.float64), want, rtol=1e-6,
                               atol=1e-6)


def test_pow_with_a_tensor_exponent_broadcasts_promotes_and_differentiates():
    a = flow.tensor([[1.5, -2.0, 0.0]], requires_grad=True)
    b = flow.tensor([[2.0], [3.0], [0.5]], requires_grad=True)
    y = a ** b
    # torch: tensor([[2.2500, 4.0000, 0.0000], [3.3750, -8.0000, 0.0000], [1.2247, nan, 0.]])
    want = [[2.25, 4.0, 0.0], [3.375, -8.0, 0.0], [1.5 ** 0.5, np.nan, 0.0]]
    close(y, want, flow.float32)
    y.sum().backward()
    # torch: a.grad = b * a^(b-1) summed over rows: tensor([[10.1582, nan, inf]]) (nan from
    # the negative base's root, inf from 0.5 * 0^-0.5)
    ga = a.grad.numpy()
    assert np.isclose(ga[0, 0], 2 * 1.5 + 3 * 1.5 ** 2 + 0.5 * 1.5 ** -0.5)
    assert np.isnan(ga[0, 1]) and ga[0, 2] == np.inf
    # torch: b.grad = sum(a^b ln a), zero where a == 0 (b >= 0); nan where a < 0
    assert np.isnan(b.grad.numpy()).all()
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    e = flow.tensor([3.0, 0.5], dtype=flow.float64)
    z = x.pow(e)
    assert z.dtype == flow.float64
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 0.5 * 2 ** -0.5], rtol=1e-6)
    close(flow.pow(x.detach(), 2), [1.0, 4.0], flow.float32)


def test_integer_powers_stay_integers():
    i = flow.tensor([1, 2, 3, -2])
    close(i ** 2, [1, 4, 9, 4], flow.int64)  # torch: tensor([1, 4, 9, 4])
    close(i.int() ** 3, [1, 8, 27, -8], flow.int32)
    close(i ** 2.0, [1, 4, 9, 4], flow.float32)  # a float exponent: the default float
    close(flow.tensor([True, False]) ** 2, [1, 0], flow.int64)
    close(i ** flow.tensor([3, 2, 1, 3]), [1, 4, 3, -8], flow.int64)
    y = flow.tensor([7, 1, -1, 2, 0]) ** flow.tensor([15, -2, -3, -1, -1])
    assert y.dtype == flow.int64 and y.tolist() == [7 ** 15, 1, -1, 0, 0]
    with pytest.raises(ValueError, match="negative integer powers"):
        i ** -1
    # torch: 2 ** tensor([1, 2]) is tensor([2, 4]); 2.0 ** it tensor([2., 4.])
    close(2 ** flow.tensor([1, 2]), [2, 4], flow.int64)
    close(2.0 ** flow.tensor([1, 2]), [2.0, 4.0], flow.float32)
    # a negative base: (-2) ** tensor([2., 3.]) is tensor([4., -8.])
    close((-2) ** flow.tensor([2.0, 3.0]), [4.0, -8.0], flow.float32)
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    (3 ** x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 * np.log(3), 9 * np.log(3)], rtol=1e-6)


def test_python_ints_with_bool_tensors_give_int64():
    m = flow.tensor([True, False])
    # torch: m + 2 is tensor([3, 2]); m * -3 tensor([-3, 0]); m == 2 all False
    close(m + 2, [3, 2], flow.int64)
    close(2 + m, [3, 2], flow.int64)
    close(m * -3, [-3, 0], flow.int64)
    close(m == 2, [False, False], flow.bool)
    close(m < 2, [True, True], flow.bool)
    close(m / 2, [0.5, 0.0], flow.float32)
    close(m + True, [True, True], flow.bool)
    close(m + 2.5, [3.5, 2.5], flow.float32)
    close(flow.where(m, m, 5), [1, 5], flow.int64)


def test_print_formats_numbers_as_pytorch_and_oneflow():
    # the values as PyTorch (and OneFlow, whose formatter is PyTorch's) print them; the dtype
    # always, as OneFlow (the seeds' outputs show dtype=oneflow.float32)
    f32 = ", dtype=flow.float32)"
    assert str(flow.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000]" + f32
    assert str(flow.tensor([1.0, 2.0])) == "tensor([1., 2.]" + f32
    assert str(flow.tensor([1e10, 1.0])) == "tensor([1.0000e+10, 1.0000e+00]" + f32
    assert str(flow.tensor([2.9186e-01, 4.7072e-04])) == "tensor([0.2919, 0.0005]" + f32
    assert str(flow.tensor([2.9186e-01, 4.7072e-05])) == "tensor([2.9186e-01, 4.7072e-05]" + f32
    assert str(flow.tensor([float("inf"), 1.0])) == "tensor([inf, 1.]" + f32
    assert str(flow.tensor([-0.5, float("nan")])) == "tensor([-0.5000,     nan]" + f32
    assert str(flow.tensor([True, False])) == "tensor([ True, False], dtype=flow.bool)"
    assert str(flow.tensor([1.5], dtype=flow.float64)) == "tensor([1.5000], dtype=flow.float64)"
    assert str(flow.tensor(3.25)) == "tensor(3.2500" + f32
    assert str(flow.zeros(0, 3)) == "tensor([], size=(0, 3)" + f32
    assert str(flow.ones(2, requires_grad=True)) == (
        "tensor([1., 1.], dtype=flow.float32, requires_grad=True)")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16", "uint32", "uint64"])
def test_numpy_dtypes_gflow_lacks_are_a_type_error_naming_them(dtype):
    a = np.array([1, 2], dtype=dtype)
    with pytest.raises(TypeError, match=dtype):
        flow.tensor(a)
    with pytest.raises(TypeError, match=dtype):
        flow.from_numpy(a)
    assert flow.tensor(a, dtype=flow.int64).tolist() == [1, 2]


def test_matmul_broadcasts_batch_dims():
    rng = np.random.default_rng(0)
    for sa, sb in [((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((3,), (5, 3, 4)),
                   ((5, 2, 3), (3,)), ((1, 2, 3), (4, 3, 2))]:
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        ta, tb = flow.tensor(a, requires_grad=True), flow.tensor(b, requires_grad=True)
        y = ta @ tb
        want = np.matmul(a, b)
        assert tuple(y.shape) == want.shape
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
        y.sum().backward()
        assert tuple(ta.grad.shape) == sa and tuple(tb.grad.shape) == sb
    # (2, 3) @ (5, 3, 4): a's gradient sums the batch, sum_k ones(2, 4) @ b[k]^T
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3, 4)).astype(np.float32)
    ta = flow.tensor(a, requires_grad=True)
    (ta @ flow.tensor(b)).sum().backward()
    want = sum(np.ones((2, 4), np.float32) @ b[k].T for k in range(5))
    np.testing.assert_allclose(ta.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def test_expand_keeps_any_dtype_and_adds_leading_dims():
    i = flow.tensor([[1], [2]])
    assert i.expand(2, 2, 3).tolist() == [[[1, 1, 1], [2, 2, 2]]] * 2
    assert i.expand(-1, 3).dtype == flow.int64
    assert flow.tensor([True, False]).expand(2, 2).tolist() == [[True, False]] * 2


def test_zero_d_reductions_take_dim_0_and_flatten_to_one_element():
    x = flow.tensor(2.5)
    assert x.sum(0).item() == 2.5 and x.sum(-1, keepdim=True).shape == ()
    assert x.amax(0).item() == 2.5
    assert x.flatten().shape == (1,) and x.flatten().tolist() == [2.5]
    with pytest.raises(flow.Error, match="start_dim cannot come after end_dim"):
        flow.zeros(2, 3, 4).flatten(2, 1)


def test_scatter_add():
    x = flow.zeros(3, 2)
    idx = flow.tensor([[0, 1], [0, 0], [2, 1]])
    src = flow.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    y = x.scatter_add(0, idx, src)
    # torch: tensor([[4., 4.], [0., 8.], [5., 0.]])
    assert y.tolist() == [[4.0, 4.0], [0.0, 8.0], [5.0, 0.0]]
    assert flow.scatter_add(x, 0, idx, src).tolist() == y.tolist()
    (y * flow.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    assert src.grad.tolist() == [[1.0, 4.0], [1.0, 2.0], [5.0, 4.0]]


def test_functional_layer_norm_and_rms_norm():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 5))
    w, b = rng.standard_normal(5), rng.standard_normal(5)
    for dtype, tol in [(flow.float32, 1e-5), (flow.float64, 1e-12)]:
        x = flow.tensor(a, dtype=dtype)
        tw, tb = flow.tensor(w, dtype=dtype), flow.tensor(b, dtype=dtype)
        mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
        ln = (a - mean) / np.sqrt(var + 1e-5)
        y = flow.nn.functional.layer_norm(x, (5,), tw, tb)
        assert y.dtype == dtype
        np.testing.assert_allclose(y.numpy(), ln * w + b, rtol=tol, atol=tol)
        np.testing.assert_allclose(flow.nn.functional.layer_norm(x, 5).numpy(), ln, rtol=tol,
                                   atol=tol)
        m2, v2 = a.mean((-2, -1), keepdims=True), a.var((-2, -1), keepdims=True)
        np.testing.assert_allclose(flow.nn.functional.layer_norm(x, (3, 5)).numpy(),
                                   (a - m2) / np.sqrt(v2 + 1e-5), rtol=tol, atol=tol)
        eps = float(np.finfo(np.float32 if dtype == flow.float32 else np.float64).eps)
        rms = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps)
        np.testing.assert_allclose(flow.nn.functional.rms_norm(x, (5,), tw).numpy(), rms * w,
                                   rtol=tol, atol=tol)
        rms2 = a / np.sqrt((a * a).mean((-2, -1), keepdims=True) + 1e-6)
        np.testing.assert_allclose(flow.nn.functional.rms_norm(x, [3, 5], eps=1e-6).numpy(),
                                   rms2, rtol=tol, atol=tol)


def test_gflow_errors_are_runtime_errors():
    with pytest.raises(RuntimeError):
        flow.zeros(2, 3) + flow.zeros(4)
    with pytest.raises(IndexError):
        flow.zeros(2, 3).index_select(0, flow.tensor([5]))


def test_maximum_keeps_the_first_of_equal_zeros_and_sends_nan_gradients_to_both():
    a = flow.tensor([0.0, -0.0, float("nan"), 1.0], requires_grad=True)
    b = flow.tensor([-0.0, 0.0, 1.0, float("nan")], requires_grad=True)
    y = flow.maximum(a, b)
    # torch (CPU): tensor([0., -0., nan, nan]), signs of the first operand
    assert list(np.signbit(y.detach().numpy()[:2])) == [False, True]
    y.sum().backward()
    # torch: ties split the gradient, a NaN sends all of it to both inputs
    assert a.grad.tolist() == [0.5, 0.5, 1.0, 1.0] and b.grad.tolist() == [0.5, 0.5, 1.0, 1.0]


def test_logsumexp_of_integers_is_float32():
    y = flow.tensor([1, 2, 3]).logsumexp(0)
    assert y.dtype == flow.float32 and abs(y.item() - 3.4076059) < 1e-5
    assert flow.tensor([True, False]).logsumexp(0).dtype == flow.float32


def test_matmul_of_a_0d_tensor_is_an_error_not_a_crash():
    with pytest.raises(RuntimeError):
        flow.tensor(2.0) @ flow.ones(3)
    with pytest.raises(RuntimeError):
        flow.ones(3) @ flow.tensor(2.0)


def test_cross_entropy_over_extra_dims_with_ignore_index_and_reductions():
    F = flow.nn.functional
    x = flow.tensor([[[1.0, 2.0], [0.5, -1.0], [0.0, 3.0]],
                     [[2.0, 0.0], [1.0, 1.0], [-1.0, 0.5]]], requires_grad=True)  # (N, C, d)
    t = flow.tensor([[0, 2], [1, -100]])
    # torch: 0.7852815, 2.3558445, [[0.6802697, 0.3265626], [1.3490121, 0.]]
    loss = F.cross_entropy(x, t)
    assert abs(loss.item() - 0.7852815) < 1e-6
    assert abs(F.cross_entropy(x, t, reduction="sum").item() - 2.3558445) < 1e-5
    np.testing.assert_allclose(F.cross_entropy(x, t, reduction="none").numpy(),
                               [[0.6802697, 0.3265626], [1.3490121, 0.0]], rtol=1e-6)
    loss.backward()
    np.testing.assert_allclose(
        x.grad.numpy(),
        [[[-0.16450654, 0.08846264], [0.10239863, 0.00440429], [0.06210791, -0.09286694]],
         [[0.23512819, 0.0], [-0.24683452, 0.0], [0.01170634, 0.0]]], rtol=1e-5, atol=1e-7)
    assert abs(flow.nn.CrossEntropyLoss(reduction="sum")(x, t).item() - 2.3558445) < 1e-5
    # unbatched logits (C,) with a 0-d target: 0.4643688
    assert abs(F.cross_entropy(flow.tensor([1.0, 2.0, 0.5]), flow.tensor(1)).item()
               - 0.4643688) < 1e-6


def test_attention_on_3d_inputs_is_one_head():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 8), (2, 6, 8),
                                                                      (2, 6, 8)))
    s = q @ np.swapaxes(k, 1, 2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    got = flow.nn.functional.scaled_dot_product_attention(flow.tensor(q), flow.tensor(k),
                                                          flow.tensor(v))
    assert tuple(got.shape) == (2, 4, 8)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_max_with_a_dim_sends_the_gradient_to_the_index():
    x = flow.tensor([[1.0, 3.0], [1.0, 2.0]], requires_grad=True)
    values, indices = x.max(0)
    assert values.tolist() == [1.0, 3.0] and indices.tolist() == [0, 0]
    values.sum().backward()
    # torch: tensor([[1., 1.], [0., 0.]]) (amax would split the tie)
    assert x.grad.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    y = flow.tensor([[2.0, 2.0, 1.0]], requires_grad=True)
    v, i = y.min(1, keepdim=True)
    assert v.tolist() == [[1.0]] and i.tolist() == [[2]]
    (v * 3).sum().backward()
    assert y.grad.tolist() == [[0.0, 0.0, 3.0]]
    z = flow.tensor([[2.0, 2.0, 1.0]], requires_grad=True)
    z.amax(1).sum().backward()
    assert z.grad.tolist() == [[0.5, 0.5, 0.0]]


def test_full_and_where_of_python_numbers_take_pytorchs_dtypes():
    assert flow.full((2,), 3).dtype == flow.int64 and flow.full((2,), 3).tolist() == [3, 3]
    assert flow.full((2,), True).dtype == flow.bool
    assert flow.full((2,), 3.0).dtype == flow.float32
    assert flow.full((2,), 3, dtype=flow.float64).dtype == flow.float64
    c = flow.tensor([True, False])
    assert flow.where(c, 1, 0).dtype == flow.int64 and flow.where(c, 1, 0).tolist() == [1, 0]
    assert flow.where(c, 1.0, 0).dtype == flow.float32
    assert flow.where(c, True, False).dtype == flow.bool


def test_logical_operators_of_bool_tensors():
    a, b = flow.tensor([True, True, False]), flow.tensor([True, False, False])
    assert (~a).tolist() == [False, False, True]
    assert (a & b).tolist() == [True, False, False] and (a | b).tolist() == [True, True, False]
    assert (a ^ b).tolist() == [False, True, False]
    assert (~flow.tensor([0, 5])).tolist() == [-1, -6]  # torch: bitwise not
    assert flow.tensor([0.0, 2.0]).logical_not().tolist() == [True, False]
    assert flow.logical_and(flow.tensor([1, 0]), flow.tensor([2.0, 3.0])).tolist() == [True, False]
    with pytest.raises(TypeError):
        flow.tensor([1.0]) & flow.tensor([1.0])


def test_setitem_and_bool_mask_indexing():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    t = flow.tensor(x)
    t[0] = 7.0
    t[:, 1] = flow.tensor([8.0, 9.0])
    t[1, ::2] = 0
    assert t.tolist() == [[7.0, 8.0, 7.0], [0.0, 9.0, 0.0]]
    t = flow.tensor(x)
    t[t > 3] = -1.0
    assert t.tolist() == [[1.0, 2.0, 3.0], [-1.0, -1.0, -1.0]]
    i = flow.tensor(x).long()
    i[i > 3] = 2.7  # torch: cast to the tensor's dtype (2)
    assert i.dtype == flow.int64 and i.tolist() == [[1, 2, 3], [2, 2, 2]]
    b = flow.zeros(3, dtype=flow.bool)
    b[1] = True
    assert b.tolist() == [False, True, False]
    with pytest.raises(ValueError, match="repeated"):
        t[[0, 0]] = 1.0
    # x[mask]: the true positions' elements (rows for a mask of the leading dims)
    t = flow.tensor(x)
    assert t[t > 2].tolist() == [3.0, 4.0, 5.0, 6.0]
    assert t[flow.tensor([False, True])].tolist() == [[4.0, 5.0, 6.0]]
    assert t[np.array([True, False])].tolist() == [[1.0, 2.0, 3.0]]
    assert tuple(t[t > 100].shape) == (0,)
    with pytest.raises(IndexError):
        t[flow.tensor([True, False, True])]
    # gradients: torch gives a.grad [[1, 0, 0], [8, 10, 12]] and v.grad [2, 3]
    a = flow.tensor(x, requires_grad=True)
    v = flow.tensor([10.0, 20.0], requires_grad=True)
    c = a * 1
    c[0, 1:] = v
    c[1] = c[1] * 2
    (c * flow.tensor(x)).sum().backward()
    assert a.grad.tolist() == [[1.0, 0.0, 0.0], [8.0, 10.0, 12.0]]
    assert v.grad.tolist() == [2.0, 3.0]
    a = flow.tensor(x, requires_grad=True)
    (a[a > 2] * 2).sum().backward()
    assert a.grad.tolist() == [[0.0, 0.0, 2.0], [2.0, 2.0, 2.0]]
    # a global tensor, every rank calling
    g = flow.tensor(x).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(0))
    g[:, 0] = 0.0
    g[g > 4] = 1.0
    assert g.is_global and g.numpy().tolist() == [[0.0, 2.0, 3.0], [0.0, 1.0, 1.0]]


def test_mse_loss_reductions_and_dropout():
    a = flow.tensor([[1.0, 2.0], [3.0, 5.0]])
    b = flow.tensor([[0.0, 2.0], [1.0, 1.0]])
    F = flow.nn.functional
    assert F.mse_loss(a, b).item() == 5.25
    assert F.mse_loss(a, b, reduction="sum").item() == 21.0
    assert F.mse_loss(a, b, reduction="none").tolist() == [[1.0, 0.0], [4.0, 16.0]]
    assert flow.nn.MSELoss(reduction="sum")(a, b).item() == 21.0
    d = flow.nn.Dropout(0.5)
    y = d(flow.ones(2000)).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, 2.0} and 0.8 < y.mean() < 1.2
    d.eval()
    assert d(a).tolist() == a.tolist() and F.dropout(a, 0.3, training=False).tolist() == a.tolist()
    with pytest.raises(ValueError):
        flow.nn.Dropout(1.5)


def test_clamp_with_tensor_bounds_and_cat_skipping_empty_1d():
    x = flow.tensor([-2.0, 0.5, 3.0], requires_grad=True)
    y = x.clamp(min=flow.tensor([0.0, 1.0, 1.0]), max=flow.tensor(2.0))
    assert y.tolist() == [0.0, 1.0, 2.0]  # torch: tensor([0., 1., 2.])
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    assert flow.tensor([1, 5]).clamp(max=flow.tensor(3)).tolist() == [1, 3]
    assert flow.clamp(flow.tensor([-2.0, 2.0]), -1, 1).tolist() == [-1.0, 1.0]
    # torch: cat([ones(1, 3), zeros(0)]) skips the empty 1-D tensor (its dtype still counts)
    c = flow.cat([flow.ones(1, 3, dtype=flow.int32), flow.zeros(0)])
    assert tuple(c.shape) == (1, 3) and c.dtype == flow.float32


def test_subtraction_with_a_bool_tensor_is_refused_as_in_pytorch():
    m = flow.tensor([True, False])
    for f in [lambda: m - 1, lambda: 1.5 - m, lambda: flow.ones(2) - m, lambda: m.sub(m),
              lambda: flow.tensor([1, 2]) - True, lambda: flow.sub(flow.ones(2), m)]:
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            f()
    assert (flow.ones(2) - m.float()).tolist() == [0.0, 1.0]


def test_grad_fn_tells_recorded_results_from_leaves():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    assert x.grad_fn is None and (x * 2).grad_fn is not None
    assert flow.tensor([1.0]).grad_fn is None and (x.detach() * 2).grad_fn is None
    with flow.no_grad():
        assert (x * 2).grad_fn is None


def test_pytorch_keyword_names_and_alpha():
    x = flow.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert [t.tolist() for t in x.split(split_size=2, dim=1)] == [[[1.0, 2.0]], [[3.0, 4.0]]]
    assert flow.where(condition=x > 2, input=x, other=flow.zeros(1)).tolist() == [
        [0.0, 0.0, 3.0, 4.0]]
    assert flow.matmul(input=x, other=x.t()).tolist() == [[30.0]]
    assert x.pow(exponent=2).tolist() == [[1.0, 4.0, 9.0, 16.0]]
    # torch: x.add(1, alpha=3) is x + 3; torch.sub(x, x, alpha=2) is -x
    assert x.add(1, alpha=3).tolist() == [[4.0, 5.0, 6.0, 7.0]]
    assert flow.sub(x, x, alpha=2).tolist() == [[-1.0, -2.0, -3.0, -4.0]]
    assert flow.add(x, x, alpha=0.5).tolist() == [[1.5, 3.0, 4.5, 6.0]]


def test_floor_division_remainder_and_rounding_modes():
    a, b = flow.tensor([7, -7, 5, -5]), flow.tensor([2, 2, -3, -3])
    # torch: [3, -4, -2, 1], [1, 1, -1, -2], trunc [3, -3, -1, 1]
    assert (a // b).dtype == flow.int64 and (a // b).tolist() == [3, -4, -2, 1]
    assert (a % b).tolist() == [1, 1, -1, -2] and flow.remainder(a, b).tolist() == [1, 1, -1, -2]
    assert a.div(b, rounding_mode="trunc").tolist() == [3, -3, -1, 1]
    assert (a.float() // b).dtype == flow.float32 and (a.float() // b).tolist() == [3, -4, -2, 1]
    assert (a.float() % 2.5).tolist() == [2.0, 0.5, 0.0, 0.0]
    assert (7 // a).tolist() == [1, -1, 1, -2]
    assert flow.div(flow.tensor([-7.5, 7.5]), 2, rounding_mode="floor").tolist() == [-4.0, 3.0]
    with pytest.raises(ValueError, match="rounding_mode"):
        a.div(b, rounding_mode="round")


def test_negation_abs_and_relu_of_bool_tensors_are_refused_as_in_pytorch():
    m = flow.tensor([True, False])
    for f in [lambda: -m, lambda: m.neg(), lambda: m.abs(), lambda: m.relu(),
              lambda: flow.nn.functional.relu(m)]:
        with pytest.raises(RuntimeError):
            f()
    assert (-flow.tensor([1, -2])).tolist() == [-1, 2] and m.long().abs().tolist() == [1, 0]


def test_mean_of_integers_and_argmax_of_bools_are_refused_as_in_pytorch():
    with pytest.raises(RuntimeError, match="mean"):
        flow.tensor([1, 2]).mean()
    with pytest.raises(RuntimeError, match="mean"):
        flow.tensor([True, False]).mean(0)
    with pytest.raises(RuntimeError, match="bool"):
        flow.tensor([True, False]).argmax()
    assert flow.tensor([1, 2]).float().mean().item() == 1.5
    assert flow.tensor([False, True]).max(0).indices.item() == 1  # max(dim) takes Bool
