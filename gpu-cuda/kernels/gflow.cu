// gflow's CUDA kernels, compiled at run time by NVRTC for the device's architecture.
// Every kernel loops grid-stride over its work, so any launch size covers any tensor.
// Float kernels exist for f32 and f64 (suffix _f32, _f64); data movement works on 2-, 4- and
// 8-byte words (suffix _w2, _w4, _w8), so it serves every dtype. Casts are convert.cu's.

typedef long long i64;
typedef unsigned long long u64;

#define FOR_EACH(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

// Threads per block of the block-wide kernels (the launch uses exactly this many).
#define BLOCK 256

// The shapes and strides of the strided and broadcasting kernels, passed by value: a kernel
// parameter (constant memory, `__grid_constant__` so that its address is taken without a
// copy), so that a launch uploads nothing (an upload from pageable memory waits for the
// stream). The host coalesces dims and checks the count.
#define META_LEN 128
struct Meta {
    i64 v[META_LEN];
};

__device__ __forceinline__ float g_exp(float x) { return expf(x); }
__device__ __forceinline__ double g_exp(double x) { return exp(x); }
__device__ __forceinline__ float g_log(float x) { return logf(x); }
__device__ __forceinline__ double g_log(double x) { return log(x); }
__device__ __forceinline__ float g_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double g_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float g_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double g_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float g_erf(float x) { return erff(x); }
__device__ __forceinline__ double g_erf(double x) { return erf(x); }
__device__ __forceinline__ float g_sin(float x) { return sinf(x); }
__device__ __forceinline__ double g_sin(double x) { return sin(x); }
__device__ __forceinline__ float g_cos(float x) { return cosf(x); }
__device__ __forceinline__ double g_cos(double x) { return cos(x); }
__device__ __forceinline__ float g_floor(float x) { return floorf(x); }
__device__ __forceinline__ double g_floor(double x) { return floor(x); }
__device__ __forceinline__ float g_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double g_ceil(double x) { return ceil(x); }
// rint rounds to the nearest integer, ties to even (the default rounding mode)
__device__ __forceinline__ float g_round(float x) { return rintf(x); }
__device__ __forceinline__ double g_round(double x) { return rint(x); }
__device__ __forceinline__ float g_trunc(float x) { return truncf(x); }
__device__ __forceinline__ double g_trunc(double x) { return trunc(x); }
// C's fmod is exact; copysign gives a zero quotient its sign
__device__ __forceinline__ float g_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double g_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float g_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double g_copysign(double a, double b) { return copysign(a, b); }
__device__ __forceinline__ float g_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double g_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float g_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double g_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float g_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double g_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float pos_inf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double pos_inf(double) {
    return __longlong_as_double(0x7ff0000000000000ULL);
}
__device__ __forceinline__ float neg_inf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double neg_inf(double) {
    return __longlong_as_double(0xfff0000000000000ULL);
}

// op: a UNARY_* code (the constants before this source are written from gflow's enums);
// UNARY_AFFINE is a * x + b.
template <typename T> __device__ T unary_value(int op, T x, T a, T b) {
    const T c = T(0.7978845608028654);
    const T k = T(0.044715);
    const T inv_sqrt2 = T(0.7071067811865476);
    const T inv_sqrt_2pi = T(0.3989422804014327);
    switch (op) {
    case UNARY_NEG: return -x;
    case UNARY_EXP: return g_exp(x);
    case UNARY_LOG: return g_log(x);
    case UNARY_SQRT: return g_sqrt(x);
    case UNARY_SQUARE: return x * x;
    case UNARY_RELU: return x < T(0) ? T(0) : x;  // NaN and -0 kept, as PyTorch's
    case UNARY_GELU: return T(0.5) * x * (T(1) + g_tanh(c * (x + k * x * x * x)));
    case UNARY_SIGMOID: return T(1) / (T(1) + g_exp(-x));
    case UNARY_TANH: return g_tanh(x);
    case UNARY_STEP: return x <= T(0) ? T(0) : T(1);  // 1 at NaN: relu's gradient passes
    case UNARY_GELU_GRAD: {
        T t = g_tanh(c * (x + k * x * x * x));
        return T(0.5) * (T(1) + t) +
               T(0.5) * x * c * (T(1) + T(3) * k * x * x) * (T(1) - t * t);
    }
    case UNARY_ABS: return x < T(0) ? -x : x;
    case UNARY_RSQRT: return g_rsqrt(x);
    case UNARY_SIN: return g_sin(x);
    case UNARY_COS: return g_cos(x);
    case UNARY_SILU: return x / (T(1) + g_exp(-x));
    case UNARY_ERF: return g_erf(x);
    case UNARY_GELU_ERF: return T(0.5) * x * (T(1) + g_erf(x * inv_sqrt2));
    case UNARY_SIGN: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case UNARY_SILU_GRAD: {
        T g = T(1) / (T(1) + g_exp(-x));
        return g * (T(1) + x * (T(1) - g));
    }
    case UNARY_GELU_ERF_GRAD:
        return T(0.5) * (T(1) + g_erf(x * inv_sqrt2)) + x * inv_sqrt_2pi * g_exp(T(-0.5) * x * x);
    case UNARY_FLOOR: return g_floor(x);
    case UNARY_CEIL: return g_ceil(x);
    case UNARY_ROUND: return g_round(x);
    case UNARY_TRUNC: return g_trunc(x);
    case UNARY_LOG1P: return g_log1p(x);
    case UNARY_EXPM1: return g_expm1(x);
    default: return a * x + b;
    }
}

// The remainder with the divisor's sign, from the exact fmod (PyTorch's CPU formula).
template <typename T> __device__ __forceinline__ T python_mod(T a, T b) {
    T r = g_fmod(a, b);
    return (r != T(0) && ((b < T(0)) != (r < T(0)))) ? r + b : r;
}

// floor(a / b) from the exact remainder, as PyTorch's CPU (c10's div_floor_floating).
template <typename T> __device__ __forceinline__ T floor_divide(T a, T b) {
    if (b == T(0)) return a / b;
    T r = g_fmod(a, b);
    T div = (a - r) / b;
    if (r != T(0) && ((b < T(0)) != (r < T(0)))) div -= T(1);
    if (div == T(0)) return g_copysign(T(0), a / b);
    T f = g_floor(div);
    return div - f > T(0.5) ? f + T(1) : f;
}

// op: a BINARY_* code. Maximum and minimum are NaN if either input is (as PyTorch), else the
// larger (smaller), `a` of equals (-0 and 0: the first operand, as PyTorch's CPU and the CPU's).
template <typename T> __device__ __forceinline__ T binary_value(int op, T a, T b) {
    switch (op) {
    case BINARY_ADD: return a + b;
    case BINARY_SUB: return a - b;
    case BINARY_MUL: return a * b;
    case BINARY_DIV: return a / b;
    case BINARY_MAXIMUM: return (a != a || b != b) ? a + b : (b > a ? b : a);
    case BINARY_FMOD: return g_fmod(a, b);
    case BINARY_REMAINDER: return python_mod(a, b);
    case BINARY_FLOOR_DIVIDE: return floor_divide(a, b);
    default: return (a != a || b != b) ? a + b : (b < a ? b : a);
    }
}

// op: a REDUCE_* code. Max and min as the CPU's: a NaN wins (and stays), else the larger
// (smaller), `a` of equals (-0 and 0: the earlier element, the lower thread).
template <typename T> __device__ __forceinline__ T combine(int op, T a, T b) {
    switch (op) {
    case REDUCE_SUM: return a + b;
    case REDUCE_MAX: return (b > a || b != b) && a == a ? b : a;
    default: return (b < a || b != b) && a == a ? b : a;
    }
}

template <typename T> __device__ __forceinline__ T identity(int op) {
    switch (op) {
    case REDUCE_SUM: return T(0);
    case REDUCE_MAX: return neg_inf(T(0));
    default: return pos_inf(T(0));
    }
}

// The reduction of every thread's `v` over the block, returned to all threads (`sh` holds
// BLOCK values).
template <typename T> __device__ T block_reduce(int op, T v, T *sh) {
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = combine(op, sh[t], sh[t + s]);
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

template <typename T>
__device__ void unary_k(const T *x, T *out, u64 n, int op, T a, T b) {
    FOR_EACH(i, n) out[i] = unary_value(op, x[i], a, b);
}

// Each block's sum of the squares of its grid-stride share of x, into partial[blockIdx.x].
template <typename T> __device__ void sum_squares_k(const T *x, T *partial, u64 n) {
    __shared__ T sh[BLOCK];
    T s = T(0);
    FOR_EACH(i, n) s += x[i] * x[i];
    s = block_reduce(REDUCE_SUM, s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// g * op(x) for op an activation's derivative: its input gradient in one pass.
template <typename T> __device__ void unary_mul_k(const T *x, const T *g, T *out, u64 n, int op) {
    FOR_EACH(i, n) out[i] = g[i] * unary_value(op, x[i], T(1), T(0));
}

template <typename T> __device__ void binary_flat_k(const T *a, const T *b, T *out, u64 n, int op) {
    FOR_EACH(i, n) out[i] = binary_value(op, a[i], b[i]);
}

// meta: out shape, a's strides, b's strides (nd each; a stride is 0 where the input broadcasts).
template <typename T>
__device__ void binary_bcast_k(const T *a, const T *b, T *out, u64 n, int op, int nd,
                               const i64 *meta) {
    FOR_EACH(i, n) {
        u64 rem = i, ai = 0, bi = 0;
        for (int d = nd - 1; d >= 0; --d) {
            u64 c = rem % (u64)meta[d];
            rem /= (u64)meta[d];
            ai += c * (u64)meta[nd + d];
            bi += c * (u64)meta[2 * nd + d];
        }
        out[i] = binary_value(op, a[ai], b[bi]);
    }
}

// x viewed as (rows, count), each row cut into `parts` pieces: block b reduces piece b % parts
// of row b / parts into out[b] (a second pass over (rows, parts) finishes rows cut in pieces).
template <typename T>
__device__ void reduce_rows_k(const T *x, T *out, u64 rows, u64 count, u64 parts, int op) {
    __shared__ T sh[BLOCK];
    u64 per = (count + parts - 1) / parts;
    for (u64 b = blockIdx.x; b < rows * parts; b += gridDim.x) {
        u64 r = b / parts, lo = b % parts * per;
        u64 hi = lo + per < count ? lo + per : count;
        T acc = identity<T>(op);
        for (u64 j = lo + threadIdx.x; j < hi; j += BLOCK) acc = combine(op, acc, x[r * count + j]);
        acc = block_reduce(op, acc, sh);
        if (threadIdx.x == 0) out[b] = acc;
    }
}

// x viewed as (outer, count, inner), reduced over count: one thread per output.
template <typename T>
__device__ void reduce_strided_k(const T *x, T *out, u64 outer, u64 count, u64 inner, int op) {
    FOR_EACH(o, outer * inner) {
        u64 base = o / inner * count * inner + o % inner;
        T acc = identity<T>(op);
        for (u64 j = 0; j < count; ++j) acc = combine(op, acc, x[base + j * inner]);
        out[o] = acc;
    }
}

template <typename T> __device__ __forceinline__ T softmax_value(T x, T m, T s, int log_) {
    return log_ ? x - m - g_log(s) : g_exp(x - m) / s;
}

// x viewed as (lines, len): one block per line.
template <typename T> __device__ void softmax_rows_k(const T *x, T *out, u64 lines, u64 len, int log_) {
    __shared__ T sh[BLOCK];
    for (u64 r = blockIdx.x; r < lines; r += gridDim.x) {
        const T *row = x + r * len;
        T m = neg_inf(T(0));
        for (u64 j = threadIdx.x; j < len; j += BLOCK) m = combine(REDUCE_MAX, m, row[j]);
        m = block_reduce(REDUCE_MAX, m, sh);
        T s = T(0);
        for (u64 j = threadIdx.x; j < len; j += BLOCK) s += g_exp(row[j] - m);
        s = block_reduce(REDUCE_SUM, s, sh);
        for (u64 j = threadIdx.x; j < len; j += BLOCK)
            out[r * len + j] = softmax_value(row[j], m, s, log_);
    }
}

// x viewed as (outer, len, inner), softmax over len: one thread per line.
template <typename T>
__device__ void softmax_strided_k(const T *x, T *out, u64 outer, u64 len, u64 inner, int log_) {
    FOR_EACH(o, outer * inner) {
        u64 base = o / inner * len * inner + o % inner;
        T m = neg_inf(T(0));
        for (u64 j = 0; j < len; ++j) m = combine(REDUCE_MAX, m, x[base + j * inner]);
        T s = T(0);
        for (u64 j = 0; j < len; ++j) s += g_exp(x[base + j * inner] - m);
        for (u64 j = 0; j < len; ++j)
            out[base + j * inner] = softmax_value(x[base + j * inner], m, s, log_);
    }
}

// out (rows, len) += src rows at the rows `idx` names (core checks the indices; one outside
// 0..rows adds nothing).
template <typename T>
__device__ void scatter_add_rows_k(const T *src, const i64 *idx, T *out, u64 n_idx, u64 len,
                                   u64 rows) {
    FOR_EACH(i, n_idx * len) {
        i64 r = idx[i / len];
        if (r >= 0 && (u64)r < rows) atomicAdd(&out[(u64)r * len + i % len], src[i]);
    }
}

// The elements addressed by (shape, strides) from `base` (meta: shape, strides; nd each),
// gathered contiguously (put 0), or the contiguous x written to them (put 1).
template <typename W>
__device__ void strided_k(const W *x, W *out, u64 n, int nd, const i64 *meta, u64 base, int put) {
    FOR_EACH(i, n) {
        u64 rem = i, off = base;
        for (int d = nd - 1; d >= 0; --d) {
            off += rem % (u64)meta[d] * (u64)meta[nd + d];
            rem /= (u64)meta[d];
        }
        if (put) out[off] = x[i];
        else out[i] = x[off];
    }
}

// out[r, :] = table[idx[r], :] (core checks the indices; one outside 0..rows gives a zero row).
template <typename W>
__device__ void gather_rows_k(const W *table, const i64 *idx, W *out, u64 n_idx, u64 len,
                              u64 rows) {
    FOR_EACH(i, n_idx * len) {
        i64 r = idx[i / len];
        out[i] = r >= 0 && (u64)r < rows ? table[(u64)r * len + i % len] : W(0);
    }
}

// The offsets in each of k inputs of output element i under broadcasting (meta: the output
// shape, then each input's element strides, nd each; 0 where the input broadcasts).
__device__ __forceinline__ void bcast_at(u64 i, int nd, const i64 *meta, int k, u64 *off) {
    for (int j = 0; j < k; ++j) off[j] = 0;
    for (int d = nd - 1; d >= 0; --d) {
        u64 c = i % (u64)meta[d];
        i /= (u64)meta[d];
        for (int j = 0; j < k; ++j) off[j] += c * (u64)meta[(j + 1) * nd + d];
    }
}

// op: a CMP_* code (NaN compares unequal to everything).
template <typename T> __device__ __forceinline__ bool compare_value(int op, T a, T b) {
    switch (op) {
    case CMP_EQ: return a == b;
    case CMP_NE: return a != b;
    case CMP_LT: return a < b;
    case CMP_LE: return a <= b;
    case CMP_GT: return a > b;
    default: return a >= b;
    }
}

// out (a Bool word per element) = a op b, broadcast (meta: out shape, a's and b's strides).
template <typename T>
__device__ void compare_k(const T *a, const T *b, unsigned *out, u64 n, int op, int nd,
                          const i64 *meta) {
    FOR_EACH(i, n) {
        u64 off[2];
        bcast_at(i, nd, meta, 2, off);
        out[i] = compare_value(op, a[off[0]], b[off[1]]) ? 1u : 0u;
    }
}

// torch.where: out = cond ? a : b, broadcast (meta: out shape, cond's, a's and b's strides).
template <typename W>
__device__ void where_k(const unsigned *cond, const W *a, const W *b, W *out, u64 n, int nd,
                        const i64 *meta) {
    FOR_EACH(i, n) {
        u64 off[3];
        bcast_at(i, nd, meta, 3, off);
        out[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
    }
}

// x with the elements outside the lower (upper) triangle of its last two dims (rows, cols)
// from diagonal k zeroed; x's first element sits at global (row, column) (orow, ocol).
template <typename W>
__device__ void triangle_k(const W *x, W *out, u64 n, u64 rows, u64 cols, i64 k, int upper,
                           u64 orow, u64 ocol) {
    FOR_EACH(i, n) {
        i64 d = (i64)(i % cols + ocol) - (i64)(i / cols % rows + orow);
        bool keep = upper ? d >= k : d <= k;
        out[i] = keep ? x[i] : W(0);
    }
}

// The index of the largest (max) or smallest element along the middle dim of x viewed as
// (outer, len, inner), one thread per line: the first NaN wins, else the lowest index among
// equals (PyTorch's).
template <typename T>
__device__ void arg_reduce_k(const T *x, i64 *out, u64 outer, u64 len, u64 inner, int max) {
    FOR_EACH(o, outer * inner) {
        u64 base = o / inner * len * inner + o % inner, best = 0;
        T b = x[base];
        for (u64 l = 1; l < len; ++l) {
            T v = x[base + l * inner];
            bool better = b != b ? false : (v != v ? true : (max ? v > b : v < b));
            if (better) {
                best = l;
                b = v;
            }
        }
        out[o] = (i64)best;
    }
}

// Inclusive prefix sums along the middle dim of x viewed as (outer, len, inner), one thread per
// line, accumulated in double for float (as PyTorch's CPU; a NaN or inf reaches only the sums
// from it on).
template <typename T>
__device__ void cumsum_k(const T *x, T *out, u64 outer, u64 len, u64 inner) {
    FOR_EACH(o, outer * inner) {
        u64 base = o / inner * len * inner + o % inner;
        double s = 0;
        for (u64 l = 0; l < len; ++l) {
            s += (double)x[base + l * inner];
            out[base + l * inner] = (T)s;
        }
    }
}

// The positions that sort each line along the middle dim of x viewed as (outer, len, inner),
// stably, NaN above every number (PyTorch's sort(stable=True)): one thread per element counts
// the elements that go before it and writes its own position at that rank.
template <typename T>
__device__ void argsort_k(const T *x, i64 *out, u64 n, u64 len, u64 inner, int desc) {
    FOR_EACH(t, n) {
        u64 l = t / inner % len, line = t / (inner * len) * len * inner + t % inner, r = 0;
        T v = x[line + l * inner];
        bool vn = v != v;
        for (u64 m = 0; m < len; ++m) {
            T w = x[line + m * inner];
            bool wn = w != w;
            bool lt = !wn && (vn || w < v), gt = wn ? !vn : (!vn && w > v);
            bool eq = wn ? vn : (!vn && w == v);
            r += (desc ? gt : lt) || (eq && m < l);
        }
        out[line + r * inner] = (i64)l;
    }
}

// Rows of a table holding global rows start..start + rows, picked by global indices: zero rows
// for indices outside them (a table split over its rows).
template <typename W>
__device__ void gather_rows_partial_k(const W *table, const i64 *idx, W *out, u64 n_idx, u64 len,
                                      u64 rows, i64 start) {
    FOR_EACH(i, n_idx * len) {
        i64 r = idx[i / len] - start;
        out[i] = r >= 0 && (u64)r < rows ? table[(u64)r * len + i % len] : W(0);
    }
}

// torch.gather along dim: out[o] = x at o's coordinates (in idx's shape) with dim's replaced by
// idx[o], zero where idx[o] is outside 0..dim_len (meta: idx's shape, then x's strides).
template <typename W>
__device__ void gather_dim_k(const W *x, const i64 *idx, W *out, u64 n, int nd, int dim,
                             u64 dim_len, const i64 *meta) {
    FOR_EACH(o, n) {
        i64 i = idx[o];
        bool inside = i >= 0 && (u64)i < dim_len;
        u64 rem = o, off = 0;
        for (int d = nd - 1; d >= 0; --d) {
            u64 c = rem % (u64)meta[d];
            rem /= (u64)meta[d];
            off += (d == dim ? (u64)i : c) * (u64)meta[nd + d];
        }
        out[o] = inside ? x[off] : W(0);
    }
}

// One Adam or AdamW step in place (core's host update: the same operations in the same order;
// the constants are gflow's AdamStep, each rounded once to T).
template <typename T>
__device__ void adam_k(T *p, const T *g, T *m, T *v, u64 n, T lr, T b1, T b2, T c1, T c2, T k1,
                       T k2, T eps, T wd, T shrink, int decoupled) {
    FOR_EACH(i, n) {
        T gi = g[i], pi = p[i];
        if (decoupled) pi = pi * shrink;
        else gi = gi + wd * pi;
        T mi = b1 * m[i] + c1 * gi;
        T vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr * (mi * k1) / (g_sqrt(vi * k2) + eps);
    }
}

// LayerNorm (center) or RMSNorm of (rows, cols) x, as core's host kernels compute them: the
// mean (0 for RMSNorm) and 1 / sqrt(mean((x - mean)^2) + eps) of one row, by the whole block.
template <typename T>
__device__ void norm_row_stats(const T *row, u64 cols, T eps, int center, T *sh, T *mean,
                               T *rstd) {
    T m = T(0);
    if (center) {
        T s = T(0);
        for (u64 j = threadIdx.x; j < cols; j += BLOCK) s += row[j];
        m = block_reduce(REDUCE_SUM, s, sh) / T(cols);
    }
    T q = T(0);
    for (u64 j = threadIdx.x; j < cols; j += BLOCK) {
        T d = row[j] - m;
        q += d * d;
    }
    q = block_reduce(REDUCE_SUM, q, sh);
    *mean = m;
    *rstd = T(1) / g_sqrt(q / T(cols) + eps);
}

// out = (x - mean) * rstd [* w] [+ b], one block per row.
template <typename T>
__device__ void norm_k(const T *x, const T *w, const T *b, T *out, u64 rows, u64 cols, T eps,
                       int center, int has_w, int has_b) {
    __shared__ T sh[BLOCK];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *row = x + r * cols;
        T m, rs;
        norm_row_stats(row, cols, eps, center, sh, &m, &rs);
        for (u64 j = threadIdx.x; j < cols; j += BLOCK) {
            T y = (row[j] - m) * rs;
            if (has_w) y = y * w[j];
            if (has_b) y = y + b[j];
            out[r * cols + j] = y;
        }
    }
}

// The input's gradient for the output gradient g, as core's host kernel: with h = g [* w],
// rstd * (h - h_mean - (x - mean) * rstd * hy_mean), h_mean the row mean of h (0 for RMSNorm)
// and hy_mean = sum(h (x - mean)) * rstd / cols. One block per row.
template <typename T>
__device__ void norm_input_grad_k(const T *x, const T *g, const T *w, T *dx, u64 rows, u64 cols,
                                  T eps, int center, int has_w) {
    __shared__ T sh[BLOCK];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *row = x + r * cols;
        const T *grow = g + r * cols;
        T m, rs;
        norm_row_stats(row, cols, eps, center, sh, &m, &rs);
        T hs = T(0), hy = T(0);
        for (u64 j = threadIdx.x; j < cols; j += BLOCK) {
            T h = has_w ? grow[j] * w[j] : grow[j];
            hs += h;
            hy += h * (row[j] - m);
        }
        hs = block_reduce(REDUCE_SUM, hs, sh);
        hy = block_reduce(REDUCE_SUM, hy, sh);
        T h_mean = center ? hs / T(cols) : T(0);
        T hy_mean = hy * rs / T(cols);
        for (u64 j = threadIdx.x; j < cols; j += BLOCK) {
            T h = has_w ? grow[j] * w[j] : grow[j];
            dx[r * cols + j] = rs * (h - h_mean - (row[j] - m) * rs * hy_mean);
        }
    }
}

// Each row's (mean, rstd) into stats (2 per row), one block per row.
template <typename T>
__device__ void norm_stats_k(const T *x, T *stats, u64 rows, u64 cols, T eps, int center) {
    __shared__ T sh[BLOCK];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        T m, rs;
        norm_row_stats(x + r * cols, cols, eps, center, sh, &m, &rs);
        if (threadIdx.x == 0) {
            stats[2 * r] = m;
            stats[2 * r + 1] = rs;
        }
    }
}

// The weight's and bias's gradients in parts of part_len rows: out (parts, 2, cols) holds each
// part's column sums of g * (x - mean) * rstd, then of g (summed over parts after).
template <typename T>
__device__ void norm_param_part_k(const T *x, const T *g, const T *stats, T *out, u64 rows,
                                  u64 cols, u64 parts, u64 part_len) {
    FOR_EACH(t, parts * cols) {
        u64 p = t / cols, c = t % cols;
        u64 end = (p + 1) * part_len < rows ? (p + 1) * part_len : rows;
        T dw = T(0), db = T(0);
        for (u64 r = p * part_len; r < end; ++r) {
            T gv = g[r * cols + c];
            dw += gv * (x[r * cols + c] - stats[2 * r]) * stats[2 * r + 1];
            db += gv;
        }
        out[p * 2 * cols + c] = dw;
        out[p * 2 * cols + cols + c] = db;
    }
}

// Fused attention (FlashAttention's order), one thread per query row for the output and the
// query gradient, one per key row for the key and value gradients: a block's ATT_ROWS threads
// take consecutive rows of one problem and stage tiles of ATT_TILE rows of the other side in
// shared memory, so the (seq_q, seq_k) scores are never stored. Widths are unlimited: a
// thread's accumulator holds ATT_COLS<T> columns, wider outputs run in chunks of columns (the
// scores recomputed per chunk), and dot products run over staged chunks of that many columns.

// Threads per block of the attention kernels (the launch uses exactly this many).
#define ATT_ROWS 64
// Rows of the other operand staged per tile (each thread keeps that many scores).
#define ATT_TILE 32
// Columns per staged chunk and per accumulator: 64 floats or 32 doubles (a tile is 8 KiB).
template <typename T> constexpr int ATT_COLS = sizeof(T) == 4 ? 64 : 32;

// Where one operand keeps each problem's rows (core's cpu/attention.rs `Rows`): problem p's row
// i starts at at + (p / per) * batch + (p % per) * head + i * row, its elements contiguous.
struct AttRows {
    u64 at, per, batch, head, row;
};

// The first element of problem p's row i.
__device__ __forceinline__ u64 att_at(const AttRows &r, u64 p, u64 i) {
    return r.at + p / r.per * r.batch + p % r.per * r.head + i * r.row;
}

// An attention's operands (the output gradient shares the output's places, the forward's
// log-sum-exp follows its output) and sizes: heads problems of seq_q queries against seq_k
// keys, q and k head_dim wide, v and the output v_dim wide; causal: query i sees keys 0..=i.
struct AttLayout {
    AttRows q, k, v, out, lse, dq, dk, dv;
    u64 heads, seq_q, seq_k, head_dim, v_dim, causal;
};

// Rows r0.. (of n, `row` apart from x) and columns c0.. (of cols) into sh (ATT_TILE rows of
// ATT_COLS<T>), zero outside, between barriers: every thread of the block calls it.
template <typename T>
__device__ __forceinline__ void att_load(T *sh, const T *x, u64 row, u64 r0, u64 n, u64 c0,
                                         u64 cols) {
    constexpr int W = ATT_COLS<T>;
    __syncthreads();
#pragma unroll 4
    for (int e = threadIdx.x; e < ATT_TILE * W; e += ATT_ROWS) {
        u64 r = r0 + e / W, c = c0 + e % W;
        sh[e] = r < n && c < cols ? x[r * row + c] : T(0);
    }
    __syncthreads();
}

// s[j] += x . sh[j] over one staged chunk, x this thread's row from the chunk's first column
// (`left` of its columns remain).
template <typename T>
__device__ __forceinline__ void att_dots(T *s, const T *sh, const T *x, u64 left) {
    constexpr int W = ATT_COLS<T>;
    int m = left < (u64)W ? (int)left : W;
    for (int c = 0; c < m; ++c) {
        T xc = x[c];
#pragma unroll
        for (int j = 0; j < ATT_TILE; ++j) s[j] += xc * sh[j * W + c];
    }
}

// acc[c] += sum_j pt[j * ATT_ROWS] * sh[j][c]: this thread's weights (its column of a shared
// ATT_TILE x ATT_ROWS array, so that the loop over j needs no unrolling) times a staged tile.
template <typename T>
__device__ __forceinline__ void att_madd(T *acc, const T *pt, const T *sh) {
    constexpr int W = ATT_COLS<T>;
#pragma unroll 1
    for (int j = 0; j < ATT_TILE; ++j) {
        T w = pt[j * ATT_ROWS];
#pragma unroll
        for (int c = 0; c < W; ++c) acc[c] += w * sh[j * W + c];
    }
}

// The dot products of this thread's row x (width cols) with the tile of rows r0.. (of n, `row`
// apart from y) into s[ATT_TILE]: chunk by chunk through sh.
template <typename T>
__device__ __forceinline__ void att_scores(T *s, T *sh, const T *x, bool live, const T *y,
                                           u64 row, u64 r0, u64 n, u64 cols) {
    constexpr int W = ATT_COLS<T>;
#pragma unroll
    for (int j = 0; j < ATT_TILE; ++j) s[j] = T(0);
    for (u64 d0 = 0; d0 < cols; d0 += W) {
        att_load(sh, y, row, r0, n, d0, cols);
        if (live) att_dots(s, sh, x + d0, cols - d0);
    }
}

// The keys the block of query rows from r0 sees: all, or those up to its last row when causal
// (a row sees fewer; the kernels mask them).
__device__ __forceinline__ u64 att_keys(const AttLayout &a, u64 r0) {
    u64 last = r0 + ATT_ROWS < a.seq_q ? r0 + ATT_ROWS : a.seq_q;
    return a.causal && last < a.seq_k ? last : a.seq_k;
}

// The output (and with save each row's log-sum-exp max + log(sum)) by an online softmax over
// tiles of keys: the running max m, sum l and output columns acc rescaled by exp(m_old - m).
template <typename T>
__device__ void attention_k(const T *q, const T *k, const T *v, T *out, const AttLayout &a,
                            T scale, int save) {
    constexpr int W = ATT_COLS<T>;
    __shared__ T ks[ATT_TILE * W];
    __shared__ T vs[ATT_TILE * W];
    __shared__ T ps[ATT_TILE * ATT_ROWS];
    T *pt = ps + threadIdx.x;
    u64 blocks = (a.seq_q + ATT_ROWS - 1) / ATT_ROWS;
    for (u64 b = blockIdx.x; b < a.heads * blocks; b += gridDim.x) {
        u64 p = b / blocks, r0 = b % blocks * ATT_ROWS, i = r0 + threadIdx.x;
        bool live = i < a.seq_q;
        u64 keys = att_keys(a, r0);
        const T *qi = q + (live ? att_at(a.q, p, i) : 0);
        const T *kp = k + att_at(a.k, p, 0), *vp = v + att_at(a.v, p, 0);
        for (u64 c0 = 0; c0 == 0 || c0 < a.v_dim; c0 += W) {
            T m = neg_inf(T(0)), l = T(0), acc[W];
#pragma unroll
            for (int c = 0; c < W; ++c) acc[c] = T(0);
            for (u64 j0 = 0; j0 < keys; j0 += ATT_TILE) {
                T s[ATT_TILE];
                att_scores(s, ks, qi, live, kp, a.k.row, j0, a.seq_k, a.head_dim);
                att_load(vs, vp, a.v.row, j0, a.seq_k, c0, a.v_dim);
                if (!live) continue;
                T mt = m;
#pragma unroll
                for (int j = 0; j < ATT_TILE; ++j) {
                    bool seen = j0 + j < a.seq_k && (!a.causal || j0 + j <= i);
                    s[j] = seen ? s[j] * scale : neg_inf(T(0));
                    mt = s[j] > mt || s[j] != s[j] ? s[j] : mt;
                }
                if (mt == neg_inf(T(0))) continue; // no key seen yet
                T f = g_exp(m - mt);
                l *= f;
#pragma unroll
                for (int c = 0; c < W; ++c) acc[c] *= f;
#pragma unroll
                for (int j = 0; j < ATT_TILE; ++j) {
                    T pj = g_exp(s[j] - mt);
                    l += pj;
                    pt[j * ATT_ROWS] = pj;
                }
                att_madd(acc, pt, vs);
                m = mt;
            }
            if (!live) continue;
            T *o = out + att_at(a.out, p, i) + c0;
#pragma unroll
            for (int c = 0; c < W; ++c)
                if (c0 + c < a.v_dim) o[c] = acc[c] / l;
            if (save && c0 == 0) out[att_at(a.lse, p, i)] = m + g_log(l);
        }
    }
}

// The query gradient, one thread per query row: D = g . out (into dsum, for the key side),
// then over the keys the row sees p = exp(scale q.k - lse), ds = p (g.v - D), dq += ds k;
// dq *= scale. q, k, v, g, out and lse as the layout says; dq into grads.
template <typename T>
__device__ void attention_dq_k(const T *q, const T *k, const T *v, const T *g, const T *out,
                               const T *lse, T *grads, T *dsum, const AttLayout &a, T scale) {
    constexpr int W = ATT_COLS<T>;
    __shared__ T ks[ATT_TILE * W];
    __shared__ T vs[ATT_TILE * W];
    __shared__ T ps[ATT_TILE * ATT_ROWS];
    T *pt = ps + threadIdx.x;
    u64 blocks = (a.seq_q + ATT_ROWS - 1) / ATT_ROWS;
    for (u64 b = blockIdx.x; b < a.heads * blocks; b += gridDim.x) {
        u64 p = b / blocks, r0 = b % blocks * ATT_ROWS, i = r0 + threadIdx.x;
        bool live = i < a.seq_q;
        u64 keys = att_keys(a, r0);
        const T *qi = q + (live ? att_at(a.q, p, i) : 0);
        const T *gi = g + (live ? att_at(a.out, p, i) : 0);
        const T *kp = k + att_at(a.k, p, 0), *vp = v + att_at(a.v, p, 0);
        T di = T(0), li = T(0);
        if (live) {
            const T *oi = out + att_at(a.out, p, i);
            for (u64 c = 0; c < a.v_dim; ++c) di += gi[c] * oi[c];
            dsum[p * a.seq_q + i] = di;
            li = lse[att_at(a.lse, p, i)];
        }
        for (u64 c0 = 0; c0 < a.head_dim; c0 += W) {
            T acc[W];
#pragma unroll
            for (int c = 0; c < W; ++c) acc[c] = T(0);
            for (u64 j0 = 0; j0 < keys; j0 += ATT_TILE) {
                T s[ATT_TILE], dp[ATT_TILE];
                att_scores(s, ks, qi, live, kp, a.k.row, j0, a.seq_k, a.head_dim);
                att_scores(dp, vs, gi, live, vp, a.v.row, j0, a.seq_k, a.v_dim);
                // one chunk of k columns is still staged; wider k is staged again by columns
                if (a.head_dim > (u64)W) att_load(ks, kp, a.k.row, j0, a.seq_k, c0, a.head_dim);
                if (!live) continue;
#pragma unroll
                for (int j = 0; j < ATT_TILE; ++j) {
                    bool seen = j0 + j < a.seq_k && (!a.causal || j0 + j <= i);
                    pt[j * ATT_ROWS] = seen ? g_exp(s[j] * scale - li) * (dp[j] - di) : T(0);
                }
                att_madd(acc, pt, ks);
            }
            if (!live) continue;
            T *o = grads + att_at(a.dq, p, i) + c0;
#pragma unroll
            for (int c = 0; c < W; ++c)
                if (c0 + c < a.head_dim) o[c] = acc[c] * scale;
        }
    }
}

// The key and value gradients, one thread per key row j, over the query rows that see it (all,
// or i >= j when causal): p and ds as attention_dq_k's (D from its dsum), dv += p g,
// dk += ds q; dk *= scale. Columns of dk and dv in chunks of ATT_COLS<T> together.
template <typename T>
__device__ void attention_dkv_k(const T *q, const T *k, const T *v, const T *g, const T *lse,
                                const T *dsum, T *grads, const AttLayout &a, T scale) {
    constexpr int W = ATT_COLS<T>;
    __shared__ T qs[ATT_TILE * W];
    __shared__ T gs[ATT_TILE * W];
    __shared__ T ls[ATT_TILE];
    __shared__ T ds_[ATT_TILE];
    __shared__ T ps[ATT_TILE * ATT_ROWS];
    T *pt = ps + threadIdx.x;
    u64 blocks = (a.seq_k + ATT_ROWS - 1) / ATT_ROWS;
    u64 cols = a.head_dim > a.v_dim ? a.head_dim : a.v_dim;
    for (u64 b = blockIdx.x; b < a.heads * blocks; b += gridDim.x) {
        u64 p = b / blocks, j0 = b % blocks * ATT_ROWS, j = j0 + threadIdx.x;
        bool live = j < a.seq_k;
        const T *kj = k + (live ? att_at(a.k, p, j) : 0);
        const T *vj = v + (live ? att_at(a.v, p, j) : 0);
        const T *qp = q + att_at(a.q, p, 0), *gp = g + att_at(a.out, p, 0);
        const T *lp = lse + att_at(a.lse, p, 0), *dp_ = dsum + p * a.seq_q;
        // queries before the block's first key see none of its keys
        u64 first = a.causal ? j0 : 0;
        for (u64 c0 = 0; c0 < cols; c0 += W) {
            T dk[W], dv[W];
#pragma unroll
            for (int c = 0; c < W; ++c) dk[c] = dv[c] = T(0);
            for (u64 i0 = first; i0 < a.seq_q; i0 += ATT_TILE) {
                T s[ATT_TILE], dp[ATT_TILE];
                att_scores(s, qs, kj, live, qp, a.q.row, i0, a.seq_q, a.head_dim);
                att_scores(dp, gs, vj, live, gp, a.out.row, i0, a.seq_q, a.v_dim);
                // one chunk of q and g columns is still staged; wider ones by columns again
                if (a.head_dim > (u64)W) att_load(qs, qp, a.q.row, i0, a.seq_q, c0, a.head_dim);
                if (a.v_dim > (u64)W) att_load(gs, gp, a.out.row, i0, a.seq_q, c0, a.v_dim);
                __syncthreads();
                for (int e = threadIdx.x; e < ATT_TILE; e += ATT_ROWS) {
                    u64 r = i0 + e;
                    ls[e] = r < a.seq_q ? lp[r * a.lse.row] : T(0);
                    ds_[e] = r < a.seq_q ? dp_[r] : T(0);
                }
                __syncthreads();
                if (!live) continue;
#pragma unroll
                for (int r = 0; r < ATT_TILE; ++r) {
                    bool seen = i0 + r < a.seq_q && (!a.causal || j <= i0 + r);
                    s[r] = seen ? g_exp(s[r] * scale - ls[r]) : T(0);
                    dp[r] = seen ? s[r] * (dp[r] - ds_[r]) : T(0);
                    pt[r * ATT_ROWS] = s[r];
                }
                att_madd(dv, pt, gs);
#pragma unroll
                for (int r = 0; r < ATT_TILE; ++r) pt[r * ATT_ROWS] = dp[r];
                att_madd(dk, pt, qs);
            }
            if (!live) continue;
            T *ok = grads + att_at(a.dk, p, j) + c0;
            T *ov = grads + att_at(a.dv, p, j) + c0;
#pragma unroll
            for (int c = 0; c < W; ++c) {
                if (c0 + c < a.head_dim) ok[c] = dk[c] * scale;
                if (c0 + c < a.v_dim) ov[c] = dv[c];
            }
        }
    }
}

#define FLOAT_KERNELS(T, S)                                                                      \
    extern "C" __global__ void unary_##S(const T *x, T *out, u64 n, int op, T a, T b) {          \
        unary_k<T>(x, out, n, op, a, b);                                                         \
    }                                                                                            \
    extern "C" __global__ void sum_squares_##S(const T *x, T *partial, u64 n) {                  \
        sum_squares_k<T>(x, partial, n);                                                         \
    }                                                                                            \
    extern "C" __global__ void unary_mul_##S(const T *x, const T *g, T *out, u64 n, int op) {    \
        unary_mul_k<T>(x, g, out, n, op);                                                        \
    }                                                                                            \
    extern "C" __global__ void binary_flat_##S(const T *a, const T *b, T *out, u64 n, int op) {  \
        binary_flat_k<T>(a, b, out, n, op);                                                      \
    }                                                                                            \
    extern "C" __global__ void binary_bcast_##S(const T *a, const T *b, T *out, u64 n, int op,   \
                                                int nd, const __grid_constant__ Meta meta) {    \
        binary_bcast_k<T>(a, b, out, n, op, nd, meta.v);                                        \
    }                                                                                            \
    extern "C" __global__ void reduce_rows_##S(const T *x, T *out, u64 rows, u64 count,          \
                                               u64 parts, int op) {                              \
        reduce_rows_k<T>(x, out, rows, count, parts, op);                                        \
    }                                                                                            \
    extern "C" __global__ void reduce_strided_##S(const T *x, T *out, u64 outer, u64 count,      \
                                                  u64 inner, int op) {                           \
        reduce_strided_k<T>(x, out, outer, count, inner, op);                                    \
    }                                                                                            \
    extern "C" __global__ void softmax_rows_##S(const T *x, T *out, u64 lines, u64 len,          \
                                                int log_) {                                      \
        softmax_rows_k<T>(x, out, lines, len, log_);                                             \
    }                                                                                            \
    extern "C" __global__ void softmax_strided_##S(const T *x, T *out, u64 outer, u64 len,       \
                                                   u64 inner, int log_) {                        \
        softmax_strided_k<T>(x, out, outer, len, inner, log_);                                   \
    }                                                                                            \
    extern "C" __global__ void scatter_add_rows_##S(const T *src, const i64 *idx, T *out,        \
                                                    u64 n_idx, u64 len, u64 rows) {              \
        scatter_add_rows_k<T>(src, idx, out, n_idx, len, rows);                                  \
    }                                                                                            \
    extern "C" __global__ void arg_reduce_##S(const T *x, i64 *out, u64 outer, u64 len,          \
                                              u64 inner, int max) {                              \
        arg_reduce_k<T>(x, out, outer, len, inner, max);                                         \
    }                                                                                            \
    extern "C" __global__ void cumsum_##S(const T *x, T *out, u64 outer, u64 len, u64 inner) {   \
        cumsum_k<T>(x, out, outer, len, inner);                                                  \
    }                                                                                            \
    extern "C" __global__ void argsort_##S(const T *x, i64 *out, u64 n, u64 len, u64 inner,      \
                                           int desc) {                                           \
        argsort_k<T>(x, out, n, len, inner, desc);                                               \
    }                                                                                            \
    extern "C" __global__ void adam_##S(T *p, const T *g, T *m, T *v, u64 n, T lr, T b1, T b2,   \
                                        T c1, T c2, T k1, T k2, T eps, T wd, T shrink,           \
                                        int decoupled) {                                         \
        adam_k<T>(p, g, m, v, n, lr, b1, b2, c1, c2, k1, k2, eps, wd, shrink, decoupled);        \
    }                                                                                            \
    extern "C" __global__ void compare_##S(const T *a, const T *b, unsigned *out, u64 n, int op, \
                                           int nd, const __grid_constant__ Meta meta) {         \
        compare_k<T>(a, b, out, n, op, nd, meta.v);                                             \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(ATT_ROWS)                                      \
        attention_##S(const T *q, const T *k, const T *v, T *out,                                \
                      const __grid_constant__ AttLayout a, T scale, int save) {                  \
        attention_k<T>(q, k, v, out, a, scale, save);                                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(ATT_ROWS)                                      \
        attention_dq_##S(const T *q, const T *k, const T *v, const T *g, const T *out,           \
                         const T *lse, T *grads, T *dsum, const __grid_constant__ AttLayout a,   \
                         T scale) {                                                              \
        attention_dq_k<T>(q, k, v, g, out, lse, grads, dsum, a, scale);                          \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(ATT_ROWS)                                      \
        attention_dkv_##S(const T *q, const T *k, const T *v, const T *g, const T *lse,          \
                          const T *dsum, T *grads, const __grid_constant__ AttLayout a,          \
                          T scale) {                                                             \
        attention_dkv_k<T>(q, k, v, g, lse, dsum, grads, a, scale);                              \
    }                                                                                            \
    extern "C" __global__ void norm_##S(const T *x, const T *w, const T *b, T *out, u64 rows,    \
                                        u64 cols, T eps, int center, int has_w, int has_b) {     \
        norm_k<T>(x, w, b, out, rows, cols, eps, center, has_w, has_b);                          \
    }                                                                                            \
    extern "C" __global__ void norm_input_grad_##S(const T *x, const T *g, const T *w, T *dx,    \
                                                   u64 rows, u64 cols, T eps, int center,        \
                                                   int has_w) {                                  \
        norm_input_grad_k<T>(x, g, w, dx, rows, cols, eps, center, has_w);                       \
    }                                                                                            \
    extern "C" __global__ void norm_stats_##S(const T *x, T *stats, u64 rows, u64 cols, T eps,   \
                                              int center) {                                      \
        norm_stats_k<T>(x, stats, rows, cols, eps, center);                                      \
    }                                                                                            \
    extern "C" __global__ void norm_param_part_##S(const T *x, const T *g, const T *stats, T *out, \
                                                   u64 rows, u64 cols, u64 parts,                \
                                                   u64 part_len) {                               \
        norm_param_part_k<T>(x, g, stats, out, rows, cols, parts, part_len);                     \
    }

#define WORD_KERNELS(W, S)                                                                       \
    extern "C" __global__ void strided_##S(const W *x, W *out, u64 n, int nd,                   \
                                           const __grid_constant__ Meta meta, u64 base, int put) {\
        strided_k<W>(x, out, n, nd, meta.v, base, put);                                          \
    }                                                                                            \
    extern "C" __global__ void gather_rows_##S(const W *table, const i64 *idx, W *out,          \
                                               u64 n_idx, u64 len, u64 rows) {                   \
        gather_rows_k<W>(table, idx, out, n_idx, len, rows);                                     \
    }                                                                                            \
    extern "C" __global__ void triangle_##S(const W *x, W *out, u64 n, u64 rows, u64 cols,      \
                                            i64 k, int upper, u64 orow, u64 ocol) {             \
        triangle_k<W>(x, out, n, rows, cols, k, upper, orow, ocol);                              \
    }                                                                                            \
    extern "C" __global__ void gather_rows_partial_##S(const W *table, const i64 *idx, W *out,  \
                                                       u64 n_idx, u64 len, u64 rows, i64 start) {\
        gather_rows_partial_k<W>(table, idx, out, n_idx, len, rows, start);                      \
    }                                                                                            \
    extern "C" __global__ void gather_dim_##S(const W *x, const i64 *idx, W *out, u64 n, int nd, \
                                              int dim, u64 dim_len,                              \
                                              const __grid_constant__ Meta meta) {               \
        gather_dim_k<W>(x, idx, out, n, nd, dim, dim_len, meta.v);                              \
    }                                                                                            \
    extern "C" __global__ void where_##S(const unsigned *cond, const W *a, const W *b, W *out,  \
                                         u64 n, int nd, const __grid_constant__ Meta meta) {    \
        where_k<W>(cond, a, b, out, n, nd, meta.v);                                             \
    }

FLOAT_KERNELS(float, f32)
FLOAT_KERNELS(double, f64)
WORD_KERNELS(unsigned short, w2)
WORD_KERNELS(unsigned int, w4)
WORD_KERNELS(unsigned long long, w8)
