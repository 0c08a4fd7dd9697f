// Casts between dtypes by bits (compiled after gflow.cu, whose u64, i64 and FOR_EACH it uses;
// the DTYPE_* codes come before both). Exact and the same on every device: bit for bit the
// host's casts (the `half` crate's), which are round to nearest even, float to integer
// truncating toward zero (saturating, NaN 0), to Bool x != 0 (NaN true), and NaN kept NaN with
// the quiet bit set and the source payload's high bits. Sources: F32, F64, F16, BF16, I32;
// targets: every dtype (16-bit as unsigned short, Bool as a 32-bit word).

// A value unpacked: its class, sign and, finite and nonzero, the value m * 2^e; for NaN, m
// holds the payload at its top bits.
#define CV_ZERO 0
#define CV_FINITE 1
#define CV_INF 2
#define CV_NAN 3
struct Unpacked {
    int cls;
    unsigned sign;
    u64 m;
    int e;
};

// The index of m's highest set bit (m nonzero).
__device__ __forceinline__ int top_bit(u64 m) {
    int p = 0;
    for (int s = 32; s > 0; s >>= 1)
        if (m >> (p + s)) p += s;
    return p;
}

// The float of bits b in a format of `man` mantissa and `expb` exponent bits.
__device__ Unpacked unpack_float(u64 b, int man, int expb) {
    Unpacked u;
    u.sign = (unsigned)(b >> (man + expb)) & 1u;
    u64 f = b & ((1ULL << man) - 1);
    int ef = (int)(b >> man) & ((1 << expb) - 1);
    int bias = (1 << (expb - 1)) - 1;
    u.m = f;
    u.e = 0;
    if (ef == (1 << expb) - 1) {
        u.cls = f == 0 ? CV_INF : CV_NAN;
        u.m = f << (64 - man);
    } else if (ef == 0) {
        u.cls = f == 0 ? CV_ZERO : CV_FINITE;
        u.e = 1 - bias - man;
    } else {
        u.cls = CV_FINITE;
        u.m = f | (1ULL << man);
        u.e = ef - bias - man;
    }
    return u;
}

__device__ Unpacked unpack_int(i64 v) {
    Unpacked u;
    u.sign = v < 0 ? 1u : 0u;
    u.m = v < 0 ? ~(u64)v + 1 : (u64)v;
    u.e = 0;
    u.cls = v == 0 ? CV_ZERO : CV_FINITE;
    return u;
}

// m shifted right by s (1..64) bits, rounded to nearest even.
__device__ __forceinline__ u64 round_shift(u64 m, int s) {
    if (s == 64) return m > (1ULL << 63) ? 1 : 0;
    u64 q = m >> s, rest = m & ((1ULL << s) - 1), mid = 1ULL << (s - 1);
    return q + ((rest > mid || (rest == mid && (q & 1))) ? 1 : 0);
}

// The bits of the float nearest u in a format of `man` mantissa and `expb` exponent bits:
// subnormal results where the exponent is too small, infinity past the largest finite value
// (a carry out of the mantissa rounds into the exponent and up to infinity).
__device__ u64 pack_float(Unpacked u, int man, int expb) {
    u64 emax = (1ULL << expb) - 1, sign = (u64)u.sign << (man + expb);
    if (u.cls == CV_ZERO) return sign;
    if (u.cls == CV_INF) return sign | (emax << man);
    if (u.cls == CV_NAN) return sign | (emax << man) | (1ULL << (man - 1)) | (u.m >> (64 - man));
    // normalise: m's top bit at 63, the value m * 2^e in [2^(63 + e), 2^(64 + e))
    int p = top_bit(u.m);
    u64 m = u.m << (63 - p);
    int e = u.e - (63 - p);
    int bias = (1 << (expb - 1)) - 1;
    int be = 63 + e + bias;
    if (be >= (int)emax) return sign | (emax << man);
    u64 bits;
    if (be >= 1) {
        bits = ((u64)(be - 1) << man) + round_shift(m, 63 - man);
    } else {
        int s = 63 - man + 1 - be;
        bits = s > 64 ? 0 : round_shift(m, s);
    }
    if (bits >= (emax << man)) bits = emax << man;
    return sign | bits;
}

// trunc(u) as a signed integer of `bits` bits (32, 64), saturating, NaN 0.
__device__ i64 pack_int(Unpacked u, int bits) {
    u64 lim = 1ULL << (bits - 1);
    if (u.cls == CV_ZERO || u.cls == CV_NAN) return 0;
    u64 t;
    bool sat = u.cls == CV_INF;
    if (!sat) {
        int p = top_bit(u.m);
        if (u.e >= 0) {
            sat = p + u.e >= 63;
            t = sat ? 0 : u.m << u.e;
        } else {
            t = -u.e >= 64 ? 0 : u.m >> -u.e;
        }
        sat = sat || t >= lim;
    }
    if (sat) return u.sign ? (i64)(0 - lim) : (i64)(lim - 1);
    return u.sign ? (i64)(0 - t) : (i64)t;
}

// The (man, expb) of a float dtype.
__device__ __forceinline__ void float_format(int d, int *man, int *expb) {
    switch (d) {
    case DTYPE_F16: *man = 10; *expb = 5; break;
    case DTYPE_BF16: *man = 7; *expb = 8; break;
    case DTYPE_F64: *man = 52; *expb = 11; break;
    default: *man = 23; *expb = 8;
    }
}

// Element i of x (of dtype `from`) unpacked.
__device__ Unpacked load_value(const void *x, u64 i, int from) {
    switch (from) {
    case DTYPE_I32: return unpack_int(((const int *)x)[i]);
    case DTYPE_F16: return unpack_float(((const unsigned short *)x)[i], 10, 5);
    case DTYPE_BF16: return unpack_float(((const unsigned short *)x)[i], 7, 8);
    case DTYPE_F64: return unpack_float(((const u64 *)x)[i], 52, 11);
    default: return unpack_float(((const unsigned *)x)[i], 23, 8);
    }
}

// u converted as the host converts a `from` value to `to`. The host takes F64 and I32 to the
// 16-bit floats through f32 (two roundings), as PyTorch's CPU casts.
__device__ Unpacked host_route(Unpacked u, int from, int to) {
    if ((from == DTYPE_F64 || from == DTYPE_I32) && (to == DTYPE_F16 || to == DTYPE_BF16))
        return unpack_float(pack_float(u, 23, 8), 23, 8);
    return u;
}

// x (n elements of dtype `from`) cast to dtype `to` into out.
extern "C" __global__ void convert(const void *x, void *out, u64 n, int from, int to) {
    FOR_EACH(i, n) {
        Unpacked u = host_route(load_value(x, i, from), from, to);
        int man, expb;
        float_format(to, &man, &expb);
        switch (to) {
        case DTYPE_F16:
        case DTYPE_BF16:
            ((unsigned short *)out)[i] = (unsigned short)pack_float(u, man, expb);
            break;
        case DTYPE_F32: ((unsigned *)out)[i] = (unsigned)pack_float(u, man, expb); break;
        case DTYPE_F64: ((u64 *)out)[i] = pack_float(u, man, expb); break;
        case DTYPE_I32: ((int *)out)[i] = (int)pack_int(u, 32); break;
        case DTYPE_I64: ((i64 *)out)[i] = pack_int(u, 64); break;
        default: ((unsigned *)out)[i] = u.cls != CV_ZERO ? 1u : 0u;
        }
    }
}
