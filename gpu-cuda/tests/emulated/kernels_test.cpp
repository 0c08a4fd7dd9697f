// The CUDA kernels (kernels/gflow.cu) run on the CPU: blocks one after another, the threads of
// a block as real threads meeting at a barrier for __syncthreads (prelude.h), each kernel
// checked against a plain loop. The Rust test emulated_kernels.rs builds and runs this, with
// the kernel constants gflow writes from its enums (UNARY_*, REDUCE_*) included first.
#include <algorithm>
#include "prelude.h"
#include "../../kernels/gflow.cu"
int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { fails++; printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
bool close(double a, double b, double t = 1e-5) { return std::fabs(a - b) <= t * (1 + std::fabs(b)); }
double red(int op, double w, double v) { return op == REDUCE_SUM ? w + v : (op == REDUCE_MAX ? std::max(w, v) : std::min(w, v)); }
// One fused attention case: dense (problems, seq, dim) operands or one packed (batch, seq,
// heads, 3, dim) qkv; the forward (with and without the log-sum-exp) and both gradient kernels
// against the definition in f64 loops. Buffers start as NaN, so an element left unwritten
// shows; `grid` below the block count makes the kernels loop over blocks.
struct AttCase { int batch, heads, tq, tk, hd, dv; bool causal, packed; unsigned grid; };
template <typename T> void attention_case(const AttCase &t, double tol) {
  const int P = t.batch * t.heads, tq = t.tq, tk = t.tk, hd = t.hd, dv = t.dv, H = t.heads;
  const size_t nq = (size_t)P * tq * hd, nk = (size_t)P * tk * hd, nv = (size_t)P * tk * dv;
  const size_t no = (size_t)P * tq * dv, nl = (size_t)P * tq;
  // the element of (problem p, row i, column c) of q (0), k (1), v (2), the output (3) and the
  // log-sum-exp (4), written out for each layout
  auto at = [&](int part, int p, int i, int c) -> size_t {
    if (t.packed) {
      size_t row = (size_t)(p / H * tq + i) * H + p % H;
      return part < 3 ? (row * 3 + part) * hd + c : part == 3 ? row * hd + c : row;
    }
    switch (part) {
    case 0: return ((size_t)p * tq + i) * hd + c;
    case 1: return ((size_t)p * tk + i) * hd + c;
    case 2: return ((size_t)p * tk + i) * dv + c;
    case 3: return ((size_t)p * tq + i) * dv + c;
    default: return (size_t)p * tq + i;
    }
  };
  // the gradient of part (q, k, v) at (p, i, c) in the one gradient buffer
  auto grad_at = [&](int part, int p, int i, int c) -> size_t {
    return t.packed ? at(part, p, i, c) : (part == 0 ? 0 : part == 1 ? nq : nq + nk) + at(part, p, i, c);
  };
  size_t nin = t.packed ? 3 * nq : nq + nk + nv;
  std::vector<T> in(nin), g(no);
  for (size_t e = 0; e < nin; ++e) in[e] = (T)(1.5 * std::sin(0.37 * e + 0.1 * hd));
  for (size_t e = 0; e < no; ++e) g[e] = (T)std::cos(0.23 * e + 1);
  const T *q = in.data(), *k = t.packed ? in.data() : in.data() + nq, *v = t.packed ? in.data() : in.data() + nq + nk;
  double scale = 1 / std::sqrt((double)(hd > 0 ? hd : 1));
  // the definition, in f64
  std::vector<double> out(no, 0), lse(nl), dq(nq, 0), dk(nk, 0), dvv(nv, 0);
  auto val = [&](const T *x, int part, int p, int i, int c) { return (double)x[at(part, p, i, c)]; };
  for (int p = 0; p < P; ++p) for (int i = 0; i < tq; ++i) {
    int n = t.causal ? std::min(i + 1, tk) : tk;
    std::vector<double> s(n), pr(n), dp(n);
    double m = -INFINITY, z = 0, rowsum = 0;
    for (int j = 0; j < n; ++j) { s[j] = 0; for (int c = 0; c < hd; ++c) s[j] += val(q, 0, p, i, c) * val(k, 1, p, j, c); s[j] *= scale; m = std::max(m, s[j]); }
    for (int j = 0; j < n; ++j) z += std::exp(s[j] - m);
    lse[p * tq + i] = m + std::log(z);
    for (int j = 0; j < n; ++j) {
      pr[j] = std::exp(s[j] - lse[p * tq + i]); dp[j] = 0;
      for (int c = 0; c < dv; ++c) { out[((size_t)p * tq + i) * dv + c] += pr[j] * val(v, 2, p, j, c); dp[j] += (double)g[at(3, p, i, c)] * val(v, 2, p, j, c); }
      rowsum += pr[j] * dp[j];
    }
    for (int j = 0; j < n; ++j) {
      double ds = pr[j] * (dp[j] - rowsum);
      for (int c = 0; c < hd; ++c) { dq[((size_t)p * tq + i) * hd + c] += scale * ds * val(k, 1, p, j, c); dk[((size_t)p * tk + j) * hd + c] += scale * ds * val(q, 0, p, i, c); }
      for (int c = 0; c < dv; ++c) dvv[((size_t)p * tk + j) * dv + c] += pr[j] * g[at(3, p, i, c)];
    }
  }
  // the kernels' layout, as the backend builds it
  AttLayout a{};
  if (t.packed) {
    auto part = [&](int c) { return AttRows{(u64)c * hd, (u64)H, (u64)tq * H * 3 * hd, 3 * (u64)hd, (u64)H * 3 * hd}; };
    a.q = a.dq = part(0); a.k = a.dk = part(1); a.v = a.dv = part(2);
    a.out = AttRows{0, (u64)H, (u64)tq * H * hd, (u64)hd, (u64)H * hd};
    a.lse = AttRows{0, (u64)H, (u64)tq * H, 1, (u64)H};
  } else {
    a.q = a.dq = AttRows{0, 1, (u64)tq * hd, 0, (u64)hd};
    a.k = AttRows{0, 1, (u64)tk * hd, 0, (u64)hd}; a.dk = AttRows{nq, 1, (u64)tk * hd, 0, (u64)hd};
    a.v = AttRows{0, 1, (u64)tk * dv, 0, (u64)dv}; a.dv = AttRows{nq + nk, 1, (u64)tk * dv, 0, (u64)dv};
    a.out = AttRows{0, 1, (u64)tq * dv, 0, (u64)dv};
    a.lse = AttRows{0, 1, (u64)tq, 0, 1};
  }
  a.heads = P; a.seq_q = tq; a.seq_k = tk; a.head_dim = hd; a.v_dim = dv; a.causal = t.causal;
  AttLayout saving = a; saving.lse.at = no;
  char what[160];
  snprintf(what, sizeof what, "attention %s f%d %dx%d (%d, %d) (%d, %d) causal %d", t.packed ? "packed" : "dense",
           (int)(8 * sizeof(T)), t.batch, H, tq, tk, hd, dv, (int)t.causal);
  // the forward, saving and not (nothing written past the output then)
  for (int save = 0; save < 2; ++save) {
    std::vector<T> o(no + nl + 1, (T)NAN);
    launch_threads(t.grid, ATT_ROWS, [&] {
      if constexpr (sizeof(T) == 4) attention_f32(q, k, v, o.data(), save ? saving : a, (T)scale, save);
      else attention_f64(q, k, v, o.data(), save ? saving : a, (T)scale, save);
    });
    int bad = 0;
    for (int p = 0; p < P; ++p) for (int i = 0; i < tq; ++i) {
      for (int c = 0; c < dv; ++c) bad += !close(o[at(3, p, i, c)], out[((size_t)p * tq + i) * dv + c], tol);
      if (save) bad += !close(o[no + at(4, p, i, 0)], lse[p * tq + i], tol);
    }
    for (size_t e = save ? no + nl : no; e < o.size(); ++e) bad += !std::isnan(o[e]);
    CHECK(bad == 0, "%s save %d: %d elements differ", what, save, bad);
  }
  // the gradients from the reference's output and log-sum-exp
  std::vector<T> ot(no), lt(nl), grads(nin, (T)NAN), dsum(std::max<size_t>(nl, 1));
  for (int p = 0; p < P; ++p) for (int i = 0; i < tq; ++i) {
    for (int c = 0; c < dv; ++c) ot[at(3, p, i, c)] = (T)out[((size_t)p * tq + i) * dv + c];
    lt[at(4, p, i, 0)] = (T)lse[p * tq + i];
  }
  launch_threads(t.grid, ATT_ROWS, [&] {
    if constexpr (sizeof(T) == 4) attention_dq_f32(q, k, v, g.data(), ot.data(), lt.data(), grads.data(), dsum.data(), a, (T)scale);
    else attention_dq_f64(q, k, v, g.data(), ot.data(), lt.data(), grads.data(), dsum.data(), a, (T)scale);
  });
  launch_threads(t.grid, ATT_ROWS, [&] {
    if constexpr (sizeof(T) == 4) attention_dkv_f32(q, k, v, g.data(), lt.data(), dsum.data(), grads.data(), a, (T)scale);
    else attention_dkv_f64(q, k, v, g.data(), lt.data(), dsum.data(), grads.data(), a, (T)scale);
  });
  int bad = 0;
  for (int p = 0; p < P; ++p) {
    for (int i = 0; i < tq; ++i) for (int c = 0; c < hd; ++c) bad += !close(grads[grad_at(0, p, i, c)], dq[((size_t)p * tq + i) * hd + c], tol);
    for (int j = 0; j < tk; ++j) {
      for (int c = 0; c < hd; ++c) bad += !close(grads[grad_at(1, p, j, c)], dk[((size_t)p * tk + j) * hd + c], tol);
      for (int c = 0; c < dv; ++c) bad += !close(grads[grad_at(2, p, j, c)], dvv[((size_t)p * tk + j) * dv + c], tol);
    }
  }
  CHECK(bad == 0, "%s gradients: %d elements differ", what, bad);
}
int main() {
  // unary, affine, grid-stride over 1000 elements with 2 blocks
  { std::vector<float> x(1000), o(1000); for (int i = 0; i < 1000; ++i) x[i] = (i % 37) / 9.0f - 2;
    launch(2, [&] { unary_f32(x.data(), o.data(), 1000, UNARY_AFFINE, 2.0f, 0.5f); });
    for (int i = 0; i < 1000; ++i) CHECK(o[i] == 2 * x[i] + 0.5f, "affine %d", i);
    std::vector<double> xd{1.0}, od(1); launch(1, [&] { unary_f64(xd.data(), od.data(), 1, UNARY_GELU, 0, 0); });
    CHECK(std::fabs(od[0] - 0.84119199060777) < 1e-9, "gelu %f", od[0]); }
  // every unary op against its definition, in f64 (derivatives by central differences)
  { std::vector<double> x{-2.5, -0.5, 0.0, 0.25, 1.5, 3.0}, o(6);
    auto gelu = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
    auto silu = [](double v) { return v / (1 + std::exp(-v)); };
    auto gelu_erf = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
    auto diff = [](auto f, double v) { return (f(v + 1e-6) - f(v - 1e-6)) / 2e-6; };
    for (int op = 0; op <= UNARY_EXPM1; ++op) {
      launch(1, [&] { unary_f64(x.data(), o.data(), 6, op, 0, 0); });
      for (int i = 0; i < 6; ++i) {
        double v = x[i], w;
        bool fd = false;
        switch (op) {
        case UNARY_NEG: w = -v; break; case UNARY_EXP: w = std::exp(v); break; case UNARY_LOG: w = std::log(v); break;
        case UNARY_SQRT: w = std::sqrt(v); break; case UNARY_SQUARE: w = v * v; break; case UNARY_RELU: w = v < 0 ? 0 : v; break;
        case UNARY_GELU: w = gelu(v); break; case UNARY_SIGMOID: w = 1 / (1 + std::exp(-v)); break;
        case UNARY_TANH: w = std::tanh(v); break; case UNARY_STEP: w = !(v <= 0); break;
        case UNARY_GELU_GRAD: w = diff(gelu, v); fd = true; break;
        case UNARY_ABS: w = std::fabs(v); break; case UNARY_RSQRT: w = 1 / std::sqrt(v); break;
        case UNARY_SIN: w = std::sin(v); break; case UNARY_COS: w = std::cos(v); break;
        case UNARY_SILU: w = silu(v); break; case UNARY_ERF: w = std::erf(v); break;
        case UNARY_GELU_ERF: w = gelu_erf(v); break; case UNARY_SIGN: w = (v > 0) - (v < 0); break;
        case UNARY_SILU_GRAD: w = diff(silu, v); fd = true; break;
        case UNARY_FLOOR: w = std::floor(v); break; case UNARY_CEIL: w = std::ceil(v); break;
        // ties to even: -2.5 -> -2, -0.5 -> -0, 1.5 -> 2
        case UNARY_ROUND: w = v == -2.5 ? -2.0 : v == -0.5 ? 0.0 : v == 1.5 ? 2.0 : std::round(v); break;
        case UNARY_TRUNC: w = std::trunc(v); break;
        case UNARY_LOG1P: w = std::log1p(v); break; case UNARY_EXPM1: w = std::expm1(v); break;
        default: w = diff(gelu_erf, v); fd = true;
        }
        CHECK(o[i] == w || close(o[i], w, fd ? 1e-6 : 1e-12) || (std::isnan(o[i]) && std::isnan(w)), "unary op %d at %f: %f vs %f", op, v, o[i], w);
      } } }
  // maximum and minimum, NaN if either is
  { std::vector<float> a{1, -2, NAN, 4}, b{3, -5, 0, NAN}, o(4);
    launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 4, BINARY_MAXIMUM); });
    CHECK(o[0] == 3 && o[1] == -2 && std::isnan(o[2]) && std::isnan(o[3]), "maximum %f %f %f %f", o[0], o[1], o[2], o[3]);
    launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 4, BINARY_MINIMUM); });
    CHECK(o[0] == 1 && o[1] == -5 && std::isnan(o[2]) && std::isnan(o[3]), "minimum %f %f %f %f", o[0], o[1], o[2], o[3]); }
  // fmod, remainder and floor division: exact where a - floor(a / b) * b is not (1e8 % 3 in
  // f32), the signs both ways, infinite divisors, zero divisors
  { std::vector<float> a{1e8f, -1e8f, 123456789.f, -5.5f, 5.f, -5.f, 5.f, -7.5f},
                       b{3, 3, 7, 2, INFINITY, INFINITY, 0, -2}, o(8);
    launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 8, BINARY_FMOD); });
    CHECK(o[0] == 1 && o[1] == -1 && o[2] == 4 && o[3] == -1.5f && o[4] == 5 && o[5] == -5 && std::isnan(o[6]) && o[7] == -1.5f,
          "fmod %f %f %f %f %f %f %f %f", o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]);
    launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 8, BINARY_REMAINDER); });
    CHECK(o[0] == 1 && o[1] == 2 && o[2] == 4 && o[3] == 0.5f && o[4] == 5 && std::isinf(o[5]) && std::isnan(o[6]) && o[7] == -1.5f,
          "remainder %f %f %f %f %f %f %f %f", o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]);
    launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 8, BINARY_FLOOR_DIVIDE); });
    CHECK(o[2] == 17636684 && o[3] == -3 && o[4] == 0 && o[5] == -1 && std::isinf(o[6]) && o[7] == 3,
          "floor_divide %f %f %f %f %f %f", o[2], o[3], o[4], o[5], o[6], o[7]); }
  // binary broadcast: a (3,1,4) + b (5,1) -> (3,5,4)
  { std::vector<double> a(12), b(5), o(60); for (int i = 0; i < 12; ++i) a[i] = i; for (int i = 0; i < 5; ++i) b[i] = 100 * i;
    Meta meta{{3, 5, 4, /*a*/ 4, 0, 1, /*b*/ 0, 1, 0}};
    launch(1, [&] { binary_bcast_f64(a.data(), b.data(), o.data(), 60, 1, 3, meta); });
    for (int i = 0; i < 3; ++i) for (int j = 0; j < 5; ++j) for (int k = 0; k < 4; ++k)
      CHECK(o[(i * 5 + j) * 4 + k] == a[i * 4 + k] - b[j], "bcast %d %d %d", i, j, k); }
  // reduce rows (block per row) with rows > grid, and count > BLOCK
  { int rows = 5, count = 700; std::vector<double> x(rows * count), o(rows);
    for (int i = 0; i < rows * count; ++i) x[i] = std::sin(i);
    for (int op = 0; op <= REDUCE_MIN; ++op) {
      launch(2, [&] { reduce_rows_f64(x.data(), o.data(), rows, count, 1, op); });
      for (int r = 0; r < rows; ++r) { double w = op == REDUCE_SUM ? 0 : (op == REDUCE_MAX ? -INFINITY : INFINITY); for (int j = 0; j < count; ++j) w = red(op, w, x[r * count + j]);
        CHECK(close(o[r], w, 1e-12), "rows op %d r %d %f %f", op, r, o[r], w); } } }
  // a row cut in 7 parts, then the parts reduced
  { int count = 5000; std::vector<float> x(count), part(7), o(1); for (int i = 0; i < count; ++i) x[i] = std::sin(i * 0.3f);
    for (int op = 0; op <= REDUCE_MIN; ++op) {
      launch(3, [&] { reduce_rows_f32(x.data(), part.data(), 1, count, 7, op); });
      launch(1, [&] { reduce_rows_f32(part.data(), o.data(), 1, 7, 1, op); });
      double w = op == REDUCE_SUM ? 0 : (op == REDUCE_MAX ? -INFINITY : INFINITY); for (int j = 0; j < count; ++j) w = red(op, w, (double)x[j]);
      CHECK(close(o[0], w, 1e-4), "parts op %d %f %f", op, o[0], w); } }
  // reduce strided (outer 3, count 4, inner 5)
  { std::vector<float> x(60), o(15); for (int i = 0; i < 60; ++i) x[i] = std::cos(i);
    for (int op = 0; op <= REDUCE_MIN; ++op) {
      launch(1, [&] { reduce_strided_f32(x.data(), o.data(), 3, 4, 5, op); });
      for (int a = 0; a < 3; ++a) for (int c = 0; c < 5; ++c) { float w = op == REDUCE_SUM ? 0 : (op == REDUCE_MAX ? -INFINITY : INFINITY); for (int j = 0; j < 4; ++j) { float v = x[(a * 4 + j) * 5 + c]; w = red(op, w, v); }
        CHECK(close(o[a * 5 + c], w), "strided op %d", op); } } }
  // softmax rows and strided, log and not
  { int lines = 3, len = 300; std::vector<double> x(lines * len), o(lines * len);
    for (int i = 0; i < lines * len; ++i) x[i] = 40 * std::sin(i * 0.7);
    for (int lg = 0; lg < 2; ++lg) {
      launch(2, [&] { softmax_rows_f64(x.data(), o.data(), lines, len, lg); });
      for (int r = 0; r < lines; ++r) { double m = -INFINITY, s = 0; for (int j = 0; j < len; ++j) m = std::max(m, x[r * len + j]); for (int j = 0; j < len; ++j) s += std::exp(x[r * len + j] - m);
        for (int j = 0; j < len; ++j) { double w = lg ? x[r * len + j] - m - std::log(s) : std::exp(x[r * len + j] - m) / s; CHECK(close(o[r * len + j], w, 1e-12), "softmax rows"); } }
      // as (outer 1, len 3, inner 300): softmax over the first dim
      launch(1, [&] { softmax_strided_f64(x.data(), o.data(), 1, 3, 300, lg); });
      for (int c = 0; c < 300; ++c) { double m = -INFINITY, s = 0; for (int j = 0; j < 3; ++j) m = std::max(m, x[j * 300 + c]); for (int j = 0; j < 3; ++j) s += std::exp(x[j * 300 + c] - m);
        for (int j = 0; j < 3; ++j) { double w = lg ? x[j * 300 + c] - m - std::log(s) : std::exp(x[j * 300 + c] - m) / s; CHECK(close(o[j * 300 + c], w, 1e-12), "softmax strided"); } } } }
  // max and min as the CPU's: a NaN anywhere in a line wins (rows longer than a block, a row
  // cut in parts, strided lines, softmax's line max), else the earliest of equal zeros
  { auto cpu = [](int op, double w, double v) { return (op == REDUCE_MAX ? v > w : v < w) || (v != v && w == w) ? v : w; };
    auto same = [](double g, double w) { return (g != g && w != w) || (g == w && std::signbit(g) == std::signbit(w)); };
    int rows = 4, count = 600; std::vector<double> x(rows * count), o(rows), part(7 * rows), o2(rows), os(8);
    for (int i = 0; i < rows * count; ++i) x[i] = std::sin(i);
    x[0 * count + 0] = NAN; x[1 * count + 517] = NAN; x[2 * count + 599] = NAN; x[2 * count + 3] = NAN;
    for (int op = REDUCE_MAX; op <= REDUCE_MIN; ++op) {
      launch(2, [&] { reduce_rows_f64(x.data(), o.data(), rows, count, 1, op); });
      launch(3, [&] { reduce_rows_f64(x.data(), part.data(), rows, count, 7, op); });
      launch(1, [&] { reduce_rows_f64(part.data(), o2.data(), rows, 7, 1, op); });
      for (int r = 0; r < rows; ++r) { double w = op == REDUCE_MAX ? -INFINITY : INFINITY; for (int j = 0; j < count; ++j) w = cpu(op, w, x[r * count + j]);
        CHECK(same(o[r], w) && same(o2[r], w), "NaN rows op %d r %d: %f %f, want %f", op, r, o[r], o2[r], w); }
      // (outer 2, count 300, inner 4) strided: lines with a NaN first, last, and none
      launch(1, [&] { reduce_strided_f64(x.data(), os.data(), 2, 300, 4, op); });
      for (int l = 0; l < 8; ++l) { double w = op == REDUCE_MAX ? -INFINITY : INFINITY; for (int j = 0; j < 300; ++j) w = cpu(op, w, x[(l / 4 * 300 + j) * 4 + l % 4]);
        CHECK(same(os[l], w), "NaN strided op %d line %d: %f, want %f", op, l, os[l], w); } }
    // equal zeros: the earlier wins in rows (threads' shares) and in strided lines
    std::vector<double> z{-0.0, 0.0, -0.0, 0.0, -0.0, -0.0, -1, 1, 0.0, -1, 1, 0.0}, oz(4);
    for (int op = REDUCE_MAX; op <= REDUCE_MIN; ++op) {
      launch(1, [&] { reduce_rows_f64(z.data(), oz.data(), 4, 3, 1, op); });
      for (int r = 0; r < 4; ++r) { double w = op == REDUCE_MAX ? -INFINITY : INFINITY; for (int j = 0; j < 3; ++j) w = cpu(op, w, z[r * 3 + j]);
        CHECK(same(oz[r], w), "zeros rows op %d r %d: %f, want %f", op, r, oz[r], w); }
      launch(1, [&] { reduce_strided_f64(z.data(), oz.data(), 1, 4, 3, op); });
      for (int c = 0; c < 3; ++c) { double w = op == REDUCE_MAX ? -INFINITY : INFINITY; for (int j = 0; j < 4; ++j) w = cpu(op, w, z[j * 3 + c]);
        CHECK(same(oz[c], w), "zeros strided op %d c %d: %f, want %f", op, c, oz[c], w); } }
    // maximum and minimum of equal zeros: the first operand (the CPU's and PyTorch's CPU)
    { std::vector<float> a{-0.0f, 0.0f}, b{0.0f, -0.0f}, ob(2);
      launch(1, [&] { binary_flat_f32(a.data(), b.data(), ob.data(), 2, BINARY_MAXIMUM); });
      CHECK(std::signbit(ob[0]) && !std::signbit(ob[1]), "maximum of zeros");
      launch(1, [&] { binary_flat_f32(a.data(), b.data(), ob.data(), 2, BINARY_MINIMUM); });
      CHECK(std::signbit(ob[0]) && !std::signbit(ob[1]), "minimum of zeros"); }
    // softmax: a line with a NaN is NaN, the others untouched
    std::vector<double> so(rows * count);
    for (int lg = 0; lg < 2; ++lg) {
      launch(2, [&] { softmax_rows_f64(x.data(), so.data(), rows, count, lg); });
      for (int r = 0; r < rows; ++r) for (int j = 0; j < count; ++j) CHECK(std::isnan(so[r * count + j]) == (r < 3), "softmax rows NaN r %d j %d", r, j);
      launch(1, [&] { softmax_strided_f64(x.data(), so.data(), 2, 300, 4, lg); });
      for (int l = 0; l < 8; ++l) { bool nan = false; for (int j = 0; j < 300; ++j) nan |= std::isnan(x[(l / 4 * 300 + j) * 4 + l % 4]);
        for (int j = 0; j < 300; ++j) CHECK(std::isnan(so[(l / 4 * 300 + j) * 4 + l % 4]) == nan, "softmax strided NaN line %d", l); } } }
  // strided gather (permute 2x3x4 -> [2,0,1]) and put (cat)
  { std::vector<unsigned> x(24), o(24); for (int i = 0; i < 24; ++i) x[i] = i;
    Meta meta{{4, 2, 3, /*strides*/ 1, 12, 4}};
    launch(1, [&] { strided_w4(x.data(), o.data(), 24, 3, meta, 0, 0); });
    for (int c = 0; c < 4; ++c) for (int a = 0; a < 2; ++a) for (int b = 0; b < 3; ++b) CHECK(o[(c * 2 + a) * 3 + b] == x[a * 12 + b * 4 + c], "permute");
    std::vector<unsigned long long> y{7, 8}, z(6, 0); Meta m2{{2, 1, 3, 1}};
    launch(1, [&] { strided_w8(y.data(), z.data(), 2, 2, m2, 2, 1); });
    CHECK(z[2] == 7 && z[5] == 8 && z[0] == 0, "put"); }
  // gather / scatter-add rows with repeated indices; indices outside 0..rows (core refuses them
  // first) read and write nothing: a zero row, no add
  { std::vector<long long> idx{4, 0, 2, 4, 1, 4}; std::vector<double> src(18), out(15, 0);
    for (int i = 0; i < 18; ++i) src[i] = i + 1;
    launch(1, [&] { scatter_add_rows_f64(src.data(), idx.data(), out.data(), 6, 3, 5); });
    for (int c = 0; c < 3; ++c) CHECK(out[4 * 3 + c] == src[c] + src[9 + c] + src[15 + c], "scatter");
    std::vector<unsigned> t(15), g(18); for (int i = 0; i < 15; ++i) t[i] = 10 * i + 1;
    launch(1, [&] { gather_rows_w4(t.data(), idx.data(), g.data(), 6, 3, 5); });
    for (int r = 0; r < 6; ++r) for (int c = 0; c < 3; ++c) CHECK(g[r * 3 + c] == t[idx[r] * 3 + c], "gather");
    std::vector<long long> bad{-1, 5, 1}; std::vector<double> o2(15, 0);
    launch(1, [&] { scatter_add_rows_f64(src.data(), bad.data(), o2.data(), 3, 3, 5); });
    for (int i = 0; i < 15; ++i) CHECK(o2[i] == (i >= 3 && i < 6 ? src[6 + i - 3] : 0), "scatter outside %d", i);
    launch(1, [&] { gather_rows_w4(t.data(), bad.data(), g.data(), 3, 3, 5); });
    for (int c = 0; c < 3; ++c) CHECK(g[c] == 0 && g[3 + c] == 0 && g[6 + c] == t[3 + c], "gather outside %d", c); }
  // binary flat f32
  { std::vector<float> a{1, 2, 3}, b{4, 5, 6}, o(3); launch(1, [&] { binary_flat_f32(a.data(), b.data(), o.data(), 3, 3); });
    CHECK(o[0] == 0.25f && o[2] == 0.5f, "div"); }
  // triangle: a (2, 3, 4) batch, 4- and 8-byte words, every k and side, origins of a piece
  { std::vector<unsigned> x(24), o(24); std::vector<unsigned long long> xw(24), ow(24);
    for (int i = 0; i < 24; ++i) { x[i] = i + 1; xw[i] = (1ULL << 40) + i; }
    for (int k = -3; k <= 4; ++k) for (int up = 0; up < 2; ++up) for (int orr = 0; orr < 3; orr += 2) {
      launch(2, [&] { triangle_w4(x.data(), o.data(), 24, 3, 4, k, up, orr, 1); });
      launch(1, [&] { triangle_w8(xw.data(), ow.data(), 24, 3, 4, k, up, orr, 1); });
      for (int i = 0; i < 24; ++i) {
        long long d = (long long)(i % 4 + 1) - (long long)(i / 4 % 3 + orr);
        bool keep = up ? d >= k : d <= k;
        CHECK(o[i] == (keep ? x[i] : 0u) && ow[i] == (keep ? xw[i] : 0ULL), "triangle k=%d up=%d at %d", k, up, i);
      } } }
  // arg_reduce over each dim of (3, 4, 5), ties to the lowest index, the first NaN wins
  { std::vector<double> x(60); std::vector<long long> o(20);
    for (int i = 0; i < 60; ++i) x[i] = (i * 37) % 11;
    x[17] = NAN; x[42] = NAN;
    int shape[3] = {3, 4, 5};
    for (int dim = 0; dim < 3; ++dim) for (int mx = 0; mx < 2; ++mx) {
      long long outer = 1, inner = 1, len = shape[dim];
      for (int d = 0; d < dim; ++d) outer *= shape[d];
      for (int d = dim + 1; d < 3; ++d) inner *= shape[d];
      launch(1, [&] { arg_reduce_f64(x.data(), o.data(), outer, len, inner, mx); });
      for (long long l = 0; l < outer * inner; ++l) {
        long long base = l / inner * len * inner + l % inner, best = -1;
        for (long long j = 0; j < len && best < 0; ++j) if (std::isnan(x[base + j * inner])) best = j;
        if (best < 0) { best = 0;
          for (long long j = 1; j < len; ++j) { double v = x[base + j * inner], b = x[base + best * inner];
            if (mx ? v > b : v < b) best = j; } }
        CHECK(o[l] == best, "arg_reduce dim %d max %d line %lld: %lld vs %lld", dim, mx, l, o[l], best);
      } }
    std::vector<float> xf{3, 1, 3, 0, 1, 0}; std::vector<long long> of(2);
    launch(1, [&] { arg_reduce_f32(xf.data(), of.data(), 2, 3, 1, 1); });
    CHECK(of[0] == 0 && of[1] == 1, "arg_reduce f32 ties %lld %lld", of[0], of[1]); }
  // cumsum along each dim of (3, 4, 5): a NaN and an inf reach only the sums from them on
  { std::vector<double> x(60), o(60);
    for (int i = 0; i < 60; ++i) x[i] = (i * 37) % 11 - 5;
    x[17] = NAN; x[42] = INFINITY;
    int shape[3] = {3, 4, 5};
    for (int dim = 0; dim < 3; ++dim) {
      long long outer = 1, inner = 1, len = shape[dim];
      for (int d = 0; d < dim; ++d) outer *= shape[d];
      for (int d = dim + 1; d < 3; ++d) inner *= shape[d];
      launch(2, [&] { cumsum_f64(x.data(), o.data(), outer, len, inner); });
      for (long long l = 0; l < outer * inner; ++l) {
        long long base = l / inner * len * inner + l % inner; double s = 0;
        for (long long j = 0; j < len; ++j) { s += x[base + j * inner]; double g = o[base + j * inner];
          CHECK(g == s || (std::isnan(g) && std::isnan(s)), "cumsum dim %d line %lld at %lld: %f vs %f", dim, l, j, g, s); }
      } } }
  // argsort over each dim of (3, 4, 5), both orders, against std::stable_sort (NaN largest)
  { std::vector<double> x(60); std::vector<long long> o(60);
    for (int i = 0; i < 60; ++i) x[i] = (i * 37) % 3 - 1;  // ties in every line
    x[17] = NAN; x[42] = NAN; x[3] = -0.0;
    int shape[3] = {3, 4, 5};
    for (int dim = 0; dim < 3; ++dim) for (int desc = 0; desc < 2; ++desc) {
      long long len = shape[dim], inner = 1;
      for (int d = dim + 1; d < 3; ++d) inner *= shape[d];
      launch(2, [&] { argsort_f64(x.data(), o.data(), 60, len, inner, desc); });
      for (long long line = 0; line < 60 / len; ++line) {
        long long base = line / inner * len * inner + line % inner;
        std::vector<long long> want(len);
        for (long long j = 0; j < len; ++j) want[j] = j;
        auto key = [&](long long j) { double v = x[base + j * inner]; return std::isnan(v) ? INFINITY : v; };
        auto nan = [&](long long j) { return std::isnan(x[base + j * inner]); };
        std::stable_sort(want.begin(), want.end(), [&](long long p, long long q) {
          if (nan(p) != nan(q)) return desc ? nan(p) : nan(q);
          return desc ? key(p) > key(q) : key(p) < key(q); });
        for (long long j = 0; j < len; ++j)
          CHECK(o[base + j * inner] == want[j], "argsort dim %d desc %d line %lld at %lld: %lld vs %lld", dim, desc, line, j, o[base + j * inner], want[j]);
      } } }
  // compare: a (3, 1, 4) against b (5, 1) -> (3, 5, 4), every op, ties and a NaN
  { std::vector<float> a(12), b(5); std::vector<unsigned> o(60);
    for (int i = 0; i < 12; ++i) a[i] = (i % 5) - 2; for (int i = 0; i < 5; ++i) b[i] = i - 2;
    a[7] = NAN;
    Meta meta{{3, 5, 4, /*a*/ 4, 0, 1, /*b*/ 0, 1, 0}};
    for (int op = 0; op <= CMP_GE; ++op) {
      launch(2, [&] { compare_f32(a.data(), b.data(), o.data(), 60, op, 3, meta); });
      for (int i = 0; i < 3; ++i) for (int j = 0; j < 5; ++j) for (int k = 0; k < 4; ++k) {
        float p = a[i * 4 + k], q = b[j]; bool w;
        switch (op) { case CMP_EQ: w = p == q; break; case CMP_NE: w = p != q; break; case CMP_LT: w = p < q; break;
        case CMP_LE: w = p <= q; break; case CMP_GT: w = p > q; break; default: w = p >= q; }
        CHECK(o[(i * 5 + j) * 4 + k] == (unsigned)w, "compare op %d at %d %d %d", op, i, j, k);
      } } }
  // where: cond (2, 1), a (3) of 8-byte words, b (2, 3) -> (2, 3); a 0-d b with 4-byte words
  { std::vector<unsigned> cond{1, 0}; std::vector<unsigned long long> a{1, 2, 3}, b{10, 20, 30, 40, 50, 60}, o(6);
    Meta meta{{2, 3, /*cond*/ 1, 0, /*a*/ 0, 1, /*b*/ 3, 1}};
    launch(1, [&] { where_w8(cond.data(), a.data(), b.data(), o.data(), 6, 2, meta); });
    for (int i = 0; i < 6; ++i) CHECK(o[i] == (i < 3 ? a[i] : b[i]), "where w8 at %d: %llu", i, o[i]);
    std::vector<unsigned> a4{5, 6, 7}, s{9}, o4(6);
    Meta meta4{{2, 3, /*cond*/ 1, 0, /*a*/ 0, 1, /*b*/ 0, 0}};
    std::vector<unsigned> c2{0, 7};
    launch(1, [&] { where_w4(c2.data(), a4.data(), s.data(), o4.data(), 6, 2, meta4); });
    for (int i = 0; i < 6; ++i) CHECK(o4[i] == (i < 3 ? 9u : a4[i % 3]), "where w4 at %d: %u", i, o4[i]); }
  // 16-bit words (F16/BF16 bits, NaN and -0.0 patterns among them) through every moving
  // kernel, against plain loops
  { std::vector<unsigned short> x(24); for (int i = 0; i < 24; ++i) x[i] = (unsigned short)(0x7c01 + i * 0x9e37);
    x[3] = 0x8000; x[4] = 0xffc1;
    std::vector<unsigned short> o(24); Meta meta{{4, 2, 3, /*strides*/ 1, 12, 4}};
    launch(1, [&] { strided_w2(x.data(), o.data(), 24, 3, meta, 0, 0); });
    for (int c = 0; c < 4; ++c) for (int a = 0; a < 2; ++a) for (int b = 0; b < 3; ++b) CHECK(o[(c * 2 + a) * 3 + b] == x[a * 12 + b * 4 + c], "permute w2");
    std::vector<long long> idx{4, 0, 2, 4, 1, 7}; std::vector<unsigned short> g(18), p(18);
    launch(1, [&] { gather_rows_w2(x.data(), idx.data(), g.data(), 5, 3, 8); });
    for (int r = 0; r < 5; ++r) for (int c = 0; c < 3; ++c) CHECK(g[r * 3 + c] == x[idx[r] * 3 + c], "gather w2");
    launch(2, [&] { gather_rows_partial_w2(x.data() + 6, idx.data(), p.data(), 6, 3, 4, 2); });
    for (int r = 0; r < 6; ++r) for (int c = 0; c < 3; ++c) {
      long long l = idx[r] - 2; unsigned short w = l >= 0 && l < 4 ? x[6 + l * 3 + c] : 0;
      CHECK(p[r * 3 + c] == w, "gather_rows_partial w2 %d %d", r, c); }
    std::vector<long long> gi{2, 0, 3, 1}; Meta gm{{2, 2, /*x strides*/ 3, 1}}; std::vector<unsigned short> gd(4);
    launch(1, [&] { gather_dim_w2(x.data(), gi.data(), gd.data(), 4, 2, 1, 3, gm); });
    CHECK(gd[0] == x[2] && gd[1] == x[0] && gd[2] == 0 && gd[3] == x[4], "gather_dim w2");
    std::vector<unsigned> cond{1, 0}; std::vector<unsigned short> w(6);
    Meta wm{{2, 3, /*cond*/ 1, 0, /*a*/ 0, 1, /*b*/ 3, 1}};
    launch(1, [&] { where_w2(cond.data(), x.data(), x.data() + 10, w.data(), 6, 2, wm); });
    for (int i = 0; i < 6; ++i) CHECK(w[i] == (i < 3 ? x[i] : x[10 + i]), "where w2 at %d", i);
    for (int k = -2; k <= 2; ++k) for (int up = 0; up < 2; ++up) {
      launch(1, [&] { triangle_w2(x.data(), o.data(), 24, 3, 4, k, up, 1, 0); });
      for (int i = 0; i < 24; ++i) {
        long long d = (long long)(i % 4) - (long long)(i / 4 % 3 + 1);
        CHECK(o[i] == ((up ? d >= k : d <= k) ? x[i] : 0), "triangle w2 k=%d up=%d at %d", k, up, i);
      } } }
  // gather_rows_partial from global rows 5..9 (zero rows outside); gather_dim along dim 1
  { std::vector<unsigned> t(12); for (int i = 0; i < 12; ++i) t[i] = 100 + i;
    std::vector<long long> idx{5, 4, 8, 9, 6, -1}; std::vector<unsigned> o(18);
    launch(2, [&] { gather_rows_partial_w4(t.data(), idx.data(), o.data(), 6, 3, 4, 5); });
    for (int r = 0; r < 6; ++r) for (int c = 0; c < 3; ++c) {
      long long l = idx[r] - 5; unsigned w = l >= 0 && l < 4 ? t[l * 3 + c] : 0;
      CHECK(o[r * 3 + c] == w, "gather_rows_partial %d %d: %u", r, c, o[r * 3 + c]); }
    // x (2, 3) f64 words, idx (2, 2) along dim 1 with one index outside
    std::vector<unsigned long long> x{1, 2, 3, 4, 5, 6}, g(4); std::vector<long long> gi{2, 0, 3, 1};
    Meta meta{{2, 2, /*x strides*/ 3, 1}};
    launch(1, [&] { gather_dim_w8(x.data(), gi.data(), g.data(), 4, 2, 1, 3, meta); });
    CHECK(g[0] == 3 && g[1] == 1 && g[2] == 0 && g[3] == 5, "gather_dim %llu %llu %llu %llu", g[0], g[1], g[2], g[3]); }
  // Adam and AdamW steps in place over 1000 elements with 2 blocks, against the update written
  // out (hand-worked: the first step moves each weight by lr against its gradient's sign)
  for (int decoupled = 0; decoupled <= 1; ++decoupled) {
    int n = 1000; std::vector<double> p(n), g(n), m(n, 0.0), v(n, 0.0);
    for (int i = 0; i < n; ++i) { p[i] = std::sin(i); g[i] = std::cos(3.0 * i); }
    std::vector<double> p0 = p;
    double lr = 0.01, b1 = 0.9, b2 = 0.999, wd = 0.1;
    for (int step = 1; step <= 2; ++step) {
      double k1 = 1 / (1 - std::pow(b1, step)), k2 = 1 / (1 - std::pow(b2, step));
      std::vector<double> wp = p, wm = m, wv = v;
      for (int i = 0; i < n; ++i) {
        double gi = g[i];
        if (decoupled) wp[i] *= 1 - lr * wd; else gi += wd * wp[i];
        wm[i] = b1 * wm[i] + (1 - b1) * gi; wv[i] = b2 * wv[i] + (1 - b2) * gi * gi;
        wp[i] -= lr * (wm[i] * k1) / (std::sqrt(wv[i] * k2) + 1e-8);
      }
      launch(2, [&] { adam_f64(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, 1 - b1, 1 - b2, k1, k2, 1e-8, wd, 1 - lr * wd, decoupled); });
      for (int i = 0; i < n; ++i)
        CHECK(close(p[i], wp[i], 1e-14) && close(m[i], wm[i], 1e-14) && close(v[i], wv[i], 1e-14), "adam %d step %d at %d: %f vs %f", decoupled, step, i, p[i], wp[i]);
      if (step == 1 && !decoupled)
        for (int i = 0; i < n; ++i) {
          double gi = g[i] + wd * p0[i];
          CHECK(std::fabs(gi) < 1e-6 || close(p[i], p0[i] - (gi > 0 ? lr : -lr), 1e-6), "adam's first step at %d", i);
        }
    }
  }
  // each block's sum of squares over its grid-stride share
  { const int n = 1000; std::vector<double> x(n), part(3);
    for (int i = 0; i < n; ++i) x[i] = std::sin(i * 0.7);
    launch(3, [&] { sum_squares_f64(x.data(), part.data(), n); });
    double want = 0; for (int i = 0; i < n; ++i) want += x[i] * x[i];
    CHECK(close(part[0] + part[1] + part[2], want, 1e-13), "sum_squares");
    double b0 = 0; for (int i = 0; i < n; ++i) if ((i / 256) % 3 == 0) b0 += x[i] * x[i];
    CHECK(close(part[0], b0, 1e-13), "sum_squares block 0: %f vs %f", part[0], b0); }
  // g * op(x) in one pass equals the product of g and unary's op(x)
  { std::vector<double> x(300), g(300), d(300), o(300);
    for (int i = 0; i < 300; ++i) { x[i] = 3 * std::sin(i * 0.7); g[i] = std::cos(i * 0.3); }
    for (int op : {UNARY_GELU_GRAD, UNARY_GELU_ERF_GRAD, UNARY_SILU_GRAD}) {
      launch(1, [&] { unary_f64(x.data(), d.data(), 300, op, 0, 0); });
      launch(1, [&] { unary_mul_f64(x.data(), g.data(), o.data(), 300, op); });
      for (int i = 0; i < 300; ++i) CHECK(close(o[i], g[i] * d[i], 1e-15), "unary_mul op %d at %d", op, i); } }
  // LayerNorm and RMSNorm (rows of 300: more than a block's threads), with and without the
  // affine: the output, the input's gradient and the parameters' against their definitions
  { const int rows = 3, cols = 300; const double eps = 1e-5;
    std::vector<double> x(rows * cols), g(rows * cols), w(cols), b(cols), o(rows * cols), dx(rows * cols);
    for (int i = 0; i < rows * cols; ++i) { x[i] = 3 * std::sin(i * 0.37) + (i / cols); g[i] = std::cos(i * 0.11); }
    for (int j = 0; j < cols; ++j) { w[j] = 0.5 + 0.01 * j; b[j] = 0.1 * std::sin(j); }
    for (int center = 0; center < 2; ++center) for (int aff = 0; aff < 2; ++aff) {
      launch(2, [&] { norm_f64(x.data(), w.data(), b.data(), o.data(), rows, cols, eps, center, aff, aff); });
      launch(2, [&] { norm_input_grad_f64(x.data(), g.data(), w.data(), dx.data(), rows, cols, eps, center, aff); });
      std::vector<double> stats(2 * rows), part(2 * 2 * cols);
      launch(1, [&] { norm_stats_f64(x.data(), stats.data(), rows, cols, eps, center); });
      launch(2, [&] { norm_param_part_f64(x.data(), g.data(), stats.data(), part.data(), rows, cols, 2, 2); });
      std::vector<double> dw(cols, 0), db(cols, 0);
      for (int r = 0; r < rows; ++r) {
        double mu = 0, var = 0, hm = 0, hy = 0;
        if (center) { for (int j = 0; j < cols; ++j) mu += x[r * cols + j]; mu /= cols; }
        for (int j = 0; j < cols; ++j) var += (x[r * cols + j] - mu) * (x[r * cols + j] - mu);
        double sd = std::sqrt(var / cols + eps);
        auto yh = [&](int j) { return (x[r * cols + j] - mu) / sd; };
        auto h = [&](int j) { return g[r * cols + j] * (aff ? w[j] : 1.0); };
        for (int j = 0; j < cols; ++j) { hm += h(j) / cols; hy += h(j) * yh(j) / cols; dw[j] += g[r * cols + j] * yh(j); db[j] += g[r * cols + j]; }
        CHECK(close(stats[2 * r], mu, 1e-12) && close(stats[2 * r + 1], 1 / sd, 1e-12), "norm stats row %d", r);
        for (int j = 0; j < cols; ++j) {
          double want = aff ? yh(j) * w[j] + b[j] : yh(j);
          CHECK(close(o[r * cols + j], want, 1e-12), "norm center %d affine %d at %d,%d: %f vs %f", center, aff, r, j, o[r * cols + j], want);
          double want_dx = (h(j) - (center ? hm : 0.0) - yh(j) * hy) / sd;
          CHECK(close(dx[r * cols + j], want_dx, 1e-11), "norm grad center %d affine %d at %d,%d: %f vs %f", center, aff, r, j, dx[r * cols + j], want_dx);
        }
      }
      for (int j = 0; j < cols; ++j)
        CHECK(close(part[j] + part[2 * cols + j], dw[j], 1e-12) && close(part[cols + j] + part[3 * cols + j], db[j], 1e-12), "norm params at %d", j);
    }
  }
  // fused attention: odd sizes; rows past one block (64) and keys past one tile (32); more
  // queries than keys and the reverse; q/k and v widths past a thread's column chunk (64
  // floats, 32 doubles) and none at all; packed qkv; blocks looped over by a smaller grid
  for (bool causal : {false, true}) {
    const AttCase cases[] = {
      {1, 3, 70, 90, 70, 130, causal, false, 2}, {1, 2, 5, 3, 4, 3, causal, false, 1},
      {2, 1, 3, 100, 5, 7, causal, false, 1},   {1, 2, 5, 4, 3, 0, causal, false, 1},
      {1, 1, 4, 6, 0, 2, causal, false, 1},     {2, 3, 67, 67, 8, 8, causal, true, 5},
      {1, 2, 40, 40, 40, 40, causal, true, 3},  {3, 1, 1, 1, 5, 5, causal, true, 2},
    };
    for (const AttCase &c : cases) { attention_case<float>(c, 2e-4); attention_case<double>(c, 1e-10); }
  }
  printf("fails: %d\n", fails);
  return fails != 0;
}
