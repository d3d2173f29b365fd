/* compare part of the native core: one deterministic pass over two buffers of one dtype. */
#include "tp.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "compare.c reads elements as little-endian bytes and assumes a little-endian host"
#endif

/* Work is split into chunks of a fixed number of elements, whatever the thread
 * count, and per-chunk partial results are combined in chunk order: that is
 * what makes every result independent of `threads` and of buffer alignment.
 * A chunk of float32 is 128 KiB per side, so both sides stay in L2. */
#define CHUNK_ELEMENTS 32768
/* Sums of squares are accumulated in LANES interleaved partial sums (element k
 * of a chunk goes to lane k % LANES), which lets the compiler vectorise them
 * without reassociating floating-point additions. */
#define LANES 8
/* float64/complex128 sums of squares can overflow double; an overflowing chunk
 * is summed again with every value multiplied by 2^-SUM_SCALE_EXPONENT. */
#define SUM_SCALE_EXPONENT 600

/* Hot loops get an AVX2 clone chosen at load time; the default clone serves
 * other CPUs. Floating-point contraction is off (below), so both clones
 * compute bit-identical results. Sanitizer builds skip cloning. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define HOT_LOOP
#endif
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The element loops compute divisions and products for every element and then
 * select, so they vectorise; under the default -ftrapping-math GCC refuses to
 * evaluate an operation whose result is discarded. Results are unchanged:
 * this only drops the assumption that floating-point exceptions trap.
 * Contraction into fused multiply-adds would change the sums' last bits
 * between machines, so it is off whatever -std the file is built with. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

typedef struct {
    double rtol;
    double atol;
    int equal_nan;
} tolerance;

/* Sum of squares and how it is scaled: level 1 means the value is the sum of
 * (x * 2^-SUM_SCALE_EXPONENT)^2. */
typedef struct {
    double value;
    int level;
} scaled_sum;

/* What one chunk (or, after combining, the whole buffer) contributes. */
typedef struct {
    int64_t first_mismatch; /* element index, -1 when none */
    uint64_t mismatch_count;
    double max_abs; /* largest finite absolute error, -1 when none was finite */
    double max_rel; /* largest finite relative error, -1 when none was finite */
    scaled_sum diff_squares; /* sum of |a - b|^2 over elements with a and b finite */
    scaled_sum base_squares; /* sum of |a|^2 over the same elements */
} partial;

typedef void (*chunk_kernel)(const unsigned char *baseline, const unsigned char *candidate,
                             size_t count, const tolerance *tol, partial *out);

typedef struct {
    const char *name;
    size_t itemsize;
    chunk_kernel exact;     /* mismatch = element bytes differ */
    chunk_kernel tolerance; /* mismatch = not close; integer dtypes reuse `exact` */
    chunk_kernel rescaled;  /* only the two sums, at level 1; NULL when they cannot overflow */
} dtype_info;

/* ---- element loaders: exact conversion of one little-endian element ---- */

static ALWAYS_INLINE float float_from_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static ALWAYS_INLINE uint32_t bits_of_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static ALWAYS_INLINE uint16_t load_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Normal numbers
 * are rebiased to binary32; exponent 31 (Inf/NaN) maps to 255 keeping the
 * payload; subnormals are mantissa * 2^-24, exact in binary32. Branch-free so
 * the loops that call it vectorise. */
static ALWAYS_INLINE float half_to_float(uint16_t half)
{
    uint32_t sign = (uint32_t)(half >> 15) << 31;
    uint32_t exponent = (half >> 10) & 0x1fu;
    uint32_t mantissa = half & 0x3ffu;
    uint32_t normal = ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
    uint32_t special = 0x7f800000u | (mantissa << 13);
    uint32_t subnormal = bits_of_float((float)(int32_t)mantissa * 0x1p-24f);
    uint32_t magnitude = exponent == 0 ? subnormal : (exponent == 31 ? special : normal);
    return float_from_bits(sign | magnitude);
}

static ALWAYS_INLINE double load_float16(const unsigned char *p)
{
    return half_to_float(load_u16(p));
}

/* bfloat16 is the upper half of a binary32. */
static ALWAYS_INLINE double load_bfloat16(const unsigned char *p)
{
    return float_from_bits((uint32_t)load_u16(p) << 16);
}

static ALWAYS_INLINE double load_float32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static ALWAYS_INLINE double load_float64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define DEFINE_INTEGER_LOADER(NAME, CTYPE)                      \
    static ALWAYS_INLINE double NAME(const unsigned char *p)    \
    {                                                           \
        CTYPE v;                                                \
        memcpy(&v, p, sizeof v);                                \
        return (double)v;                                       \
    }
DEFINE_INTEGER_LOADER(load_uint8, uint8_t)
DEFINE_INTEGER_LOADER(load_int8, int8_t)
DEFINE_INTEGER_LOADER(load_int16, int16_t)
DEFINE_INTEGER_LOADER(load_uint16, uint16_t)
DEFINE_INTEGER_LOADER(load_int32, int32_t)
DEFINE_INTEGER_LOADER(load_uint32, uint32_t)
DEFINE_INTEGER_LOADER(load_int64, int64_t)
DEFINE_INTEGER_LOADER(load_uint64, uint64_t)

/* float8 formats have 256 values each: decoded once into tables. */
static double float8_e4m3fn_values[256];
static double float8_e5m2_values[256];
static double float8_e4m3fnuz_values[256];
static double float8_e5m2fnuz_values[256];
static double float8_e8m0fnu_values[256];

/* Value of a sign/exponent/mantissa byte with IEEE-style subnormals
 * (exponent field 0). Special encodings are handled by the callers. */
static double decode_minifloat(unsigned byte, int mantissa_bits, int bias)
{
    int exponent_bits = 7 - mantissa_bits;
    unsigned mantissa = byte & ((1u << mantissa_bits) - 1u);
    unsigned exponent = (byte >> mantissa_bits) & ((1u << exponent_bits) - 1u);
    double magnitude = exponent == 0
                           ? ldexp((double)mantissa, 1 - bias - mantissa_bits)
                           : ldexp((double)((1u << mantissa_bits) | mantissa),
                                   (int)exponent - bias - mantissa_bits);
    return (byte & 0x80u) ? -magnitude : magnitude;
}

static void build_float8_tables(void)
{
    for (unsigned byte = 0; byte < 256; byte++) {
        /* e4m3fn: bias 7, no infinities, S.1111.111 is NaN. */
        float8_e4m3fn_values[byte] = (byte & 0x7fu) == 0x7fu ? NAN : decode_minifloat(byte, 3, 7);
        /* e5m2: bias 15, IEEE-like: exponent 31 is Inf (mantissa 0) or NaN. */
        float8_e5m2_values[byte] = (byte & 0x7cu) != 0x7cu ? decode_minifloat(byte, 2, 15)
                                   : (byte & 0x03u) == 0   ? ((byte & 0x80u) ? -INFINITY : INFINITY)
                                                           : NAN;
        /* *fnuz: 0x80 (negative zero's encoding) is the only NaN; no Inf. */
        float8_e4m3fnuz_values[byte] = byte == 0x80u ? NAN : decode_minifloat(byte, 3, 8);
        float8_e5m2fnuz_values[byte] = byte == 0x80u ? NAN : decode_minifloat(byte, 2, 16);
        /* e8m0fnu: unsigned power of two 2^(e-127); 0xFF is NaN. */
        float8_e8m0fnu_values[byte] = byte == 0xffu ? NAN : ldexp(1.0, (int)byte - 127);
    }
}

static ALWAYS_INLINE double load_float8_e4m3fn(const unsigned char *p)
{
    return float8_e4m3fn_values[*p];
}
static ALWAYS_INLINE double load_float8_e5m2(const unsigned char *p)
{
    return float8_e5m2_values[*p];
}
static ALWAYS_INLINE double load_float8_e4m3fnuz(const unsigned char *p)
{
    return float8_e4m3fnuz_values[*p];
}
static ALWAYS_INLINE double load_float8_e5m2fnuz(const unsigned char *p)
{
    return float8_e5m2fnuz_values[*p];
}
static ALWAYS_INLINE double load_float8_e8m0fnu(const unsigned char *p)
{
    return float8_e8m0fnu_values[*p];
}

/* ---- exact mismatch: the element's bytes differ ---- */

static ALWAYS_INLINE int bytes_differ_1(const unsigned char *a, const unsigned char *b)
{
    return a[0] != b[0];
}

static ALWAYS_INLINE int bytes_differ_2(const unsigned char *a, const unsigned char *b)
{
    return load_u16(a) != load_u16(b);
}

static ALWAYS_INLINE int bytes_differ_4(const unsigned char *a, const unsigned char *b)
{
    uint32_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    return x != y;
}

static ALWAYS_INLINE int bytes_differ_8(const unsigned char *a, const unsigned char *b)
{
    uint64_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    return x != y;
}

static ALWAYS_INLINE int bytes_differ_16(const unsigned char *a, const unsigned char *b)
{
    return bytes_differ_8(a, b) | bytes_differ_8(a + 8, b + 8);
}

/* ---- per-element rules shared by all kernels ---- */

static ALWAYS_INLINE int is_finite(double x)
{
    return fabs(x) <= DBL_MAX; /* false for Inf and NaN; a plain compare vectorises */
}

/* torch.isclose(a, b): equal, or both NaN under equal_nan, or a finite
 * difference within atol + rtol * |b|. */
static ALWAYS_INLINE int not_close(int equal, int both_nan, double abs_error, double modulus_b,
                                   const tolerance *tol)
{
    int close = equal | (tol->equal_nan & both_nan) |
                (is_finite(abs_error) & (abs_error <= tol->atol + tol->rtol * modulus_b));
    return !close;
}

/* Per-lane accumulators of one chunk. */
typedef struct {
    double max_abs[LANES];
    double max_rel[LANES];
    double diff_squares[LANES];
    double base_squares[LANES];
} lanes;

static ALWAYS_INLINE void lanes_init(lanes *l)
{
    for (int j = 0; j < LANES; j++) {
        l->max_abs[j] = -1.0;
        l->max_rel[j] = -1.0;
        l->diff_squares[j] = 0.0;
        l->base_squares[j] = 0.0;
    }
}

/* abs/rel error of one element: rel = abs/|a| where |a| > 0, else abs (the
 * division always runs, on 1.0 when |a| is not positive, so it vectorises).
 * Only finite values raise the maxima. */
static ALWAYS_INLINE void add_errors(lanes *l, int j, double abs_error, double modulus_a)
{
    double rel_error = abs_error / (modulus_a > 0.0 ? modulus_a : 1.0);
    l->max_abs[j] = is_finite(abs_error) & (abs_error > l->max_abs[j]) ? abs_error : l->max_abs[j];
    l->max_rel[j] = is_finite(rel_error) & (rel_error > l->max_rel[j]) ? rel_error : l->max_rel[j];
}

static ALWAYS_INLINE void add_squares(lanes *l, int j, int both_finite, double diff_square,
                                      double base_square)
{
    l->diff_squares[j] += both_finite ? diff_square : 0.0;
    l->base_squares[j] += both_finite ? base_square : 0.0;
}

static ALWAYS_INLINE double lane_max(const double *v)
{
    double m = v[0];
    for (int j = 1; j < LANES; j++)
        m = v[j] > m ? v[j] : m;
    return m;
}

/* Fixed pairwise order: ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). */
static ALWAYS_INLINE double lane_sum(const double *v)
{
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

static ALWAYS_INLINE void lanes_finish(const lanes *l, partial *out)
{
    out->max_abs = lane_max(l->max_abs);
    out->max_rel = lane_max(l->max_rel);
    out->diff_squares.value = lane_sum(l->diff_squares);
    out->diff_squares.level = 0;
    out->base_squares.value = lane_sum(l->base_squares);
    out->base_squares.level = 0;
}

/* Mismatch flags of a block of LANES elements: count them and remember the
 * first; the branch is taken only in blocks that hold a mismatch. */
static ALWAYS_INLINE void note_mismatches(const int *flags, size_t block_start, partial *out)
{
    int block_count = 0;
    for (int j = 0; j < LANES; j++)
        block_count += flags[j];
    if (block_count == 0)
        return;
    out->mismatch_count += (uint64_t)block_count;
    if (out->first_mismatch >= 0)
        return;
    for (int j = 0; j < LANES; j++) {
        if (flags[j]) {
            out->first_mismatch = (int64_t)(block_start + (size_t)j);
            return;
        }
    }
}

/* ---- real dtypes (floating, integer, bool) ---- */

typedef double (*real_loader)(const unsigned char *);
typedef int (*bytes_comparer)(const unsigned char *, const unsigned char *);

static ALWAYS_INLINE int real_element(const unsigned char *pa, const unsigned char *pb,
                                      real_loader load, bytes_comparer differ, int use_tolerance,
                                      const tolerance *tol, lanes *l, int j)
{
    double x = load(pa), y = load(pb);
    double abs_error = fabs(x - y);
    int both_finite = is_finite(x) & is_finite(y);
    add_errors(l, j, abs_error, fabs(x));
    add_squares(l, j, both_finite, abs_error * abs_error, x * x);
    if (use_tolerance)
        return not_close(x == y, (x != x) & (y != y), abs_error, fabs(y), tol);
    return differ(pa, pb);
}

static ALWAYS_INLINE void real_chunk(const unsigned char *a, const unsigned char *b,
                                     size_t count, size_t size, real_loader load,
                                     bytes_comparer differ, int use_tolerance,
                                     const tolerance *tol, partial *out)
{
    lanes l;
    lanes_init(&l);
    out->first_mismatch = -1;
    out->mismatch_count = 0;
    size_t i = 0;
    for (; i + LANES <= count; i += LANES) {
        int flags[LANES];
        for (int j = 0; j < LANES; j++)
            flags[j] = real_element(a + (i + (size_t)j) * size, b + (i + (size_t)j) * size,
                                    load, differ, use_tolerance, tol, &l, j);
        note_mismatches(flags, i, out);
    }
    if (i < count) {
        int flags[LANES] = {0};
        for (int j = 0; i + (size_t)j < count; j++)
            flags[j] = real_element(a + (i + (size_t)j) * size, b + (i + (size_t)j) * size,
                                    load, differ, use_tolerance, tol, &l, j);
        note_mismatches(flags, i, out);
    }
    lanes_finish(&l, out);
}

/* Both sums again with every value scaled by 2^-SUM_SCALE_EXPONENT (exact for
 * normal numbers), for a chunk whose unscaled sums overflowed. */
static ALWAYS_INLINE void real_rescaled_chunk(const unsigned char *a, const unsigned char *b,
                                              size_t count, size_t size, real_loader load,
                                              partial *out)
{
    const double scale = ldexp(1.0, -SUM_SCALE_EXPONENT);
    lanes l;
    lanes_init(&l);
    for (size_t i = 0; i < count; i++) {
        double x = load(a + i * size) * scale, y = load(b + i * size) * scale;
        double diff = x - y;
        add_squares(&l, (int)(i % LANES), is_finite(x) & is_finite(y), diff * diff, x * x);
    }
    lanes_finish(&l, out);
    out->diff_squares.level = 1;
    out->base_squares.level = 1;
}

/* ---- complex dtypes: (real, imaginary) pairs ---- */

/* The modulus is sqrt(re^2 + im^2) evaluated in double. complex32/complex64
 * components are float16/float32, whose squares are exact in double and
 * cannot overflow. complex128 components are first scaled by the power of two
 * that brings the larger one into [0.5, 1): exact, so the result is the same
 * wherever the unscaled formula does not overflow or underflow, and it never
 * does. (libm's hypot is not used: its last bit differs between platforms.) */
static ALWAYS_INLINE double modulus_narrow(double re, double im)
{
    return sqrt(re * re + im * im);
}

static ALWAYS_INLINE double modulus_wide(double re, double im)
{
    double larger = fmax(fabs(re), fabs(im)); /* fmax ignores a NaN */
    if (!is_finite(larger))
        return sqrt(re * re + im * im);
    int exponent;
    (void)frexp(larger, &exponent);
    double scaled_re = ldexp(re, -exponent), scaled_im = ldexp(im, -exponent);
    return ldexp(sqrt(scaled_re * scaled_re + scaled_im * scaled_im), exponent);
}

typedef double (*modulus_fn)(double, double);

static ALWAYS_INLINE int complex_element(const unsigned char *pa, const unsigned char *pb,
                                         size_t half, real_loader load, modulus_fn modulus,
                                         bytes_comparer differ, int use_tolerance,
                                         const tolerance *tol, lanes *l, int j)
{
    double xr = load(pa), xi = load(pa + half), yr = load(pb), yi = load(pb + half);
    double dr = xr - yr, di = xi - yi;
    double abs_error = modulus(dr, di);
    int both_finite = is_finite(xr) & is_finite(xi) & is_finite(yr) & is_finite(yi);
    add_errors(l, j, abs_error, modulus(xr, xi));
    add_squares(l, j, both_finite, dr * dr + di * di, xr * xr + xi * xi);
    if (use_tolerance) {
        int x_nan = (xr != xr) | (xi != xi), y_nan = (yr != yr) | (yi != yi);
        return not_close((xr == yr) & (xi == yi), x_nan & y_nan, abs_error, modulus(yr, yi), tol);
    }
    return differ(pa, pb);
}

static ALWAYS_INLINE void complex_chunk(const unsigned char *a, const unsigned char *b,
                                        size_t count, size_t half, real_loader load,
                                        modulus_fn modulus, bytes_comparer differ,
                                        int use_tolerance, const tolerance *tol, partial *out)
{
    size_t size = 2 * half;
    lanes l;
    lanes_init(&l);
    out->first_mismatch = -1;
    out->mismatch_count = 0;
    size_t i = 0;
    for (; i + LANES <= count; i += LANES) {
        int flags[LANES];
        for (int j = 0; j < LANES; j++)
            flags[j] = complex_element(a + (i + (size_t)j) * size, b + (i + (size_t)j) * size,
                                       half, load, modulus, differ, use_tolerance, tol, &l, j);
        note_mismatches(flags, i, out);
    }
    if (i < count) {
        int flags[LANES] = {0};
        for (int j = 0; i + (size_t)j < count; j++)
            flags[j] = complex_element(a + (i + (size_t)j) * size, b + (i + (size_t)j) * size,
                                       half, load, modulus, differ, use_tolerance, tol, &l, j);
        note_mismatches(flags, i, out);
    }
    lanes_finish(&l, out);
}

static ALWAYS_INLINE void complex_rescaled_chunk(const unsigned char *a, const unsigned char *b,
                                                 size_t count, size_t half, real_loader load,
                                                 partial *out)
{
    const double scale = ldexp(1.0, -SUM_SCALE_EXPONENT);
    size_t size = 2 * half;
    lanes l;
    lanes_init(&l);
    for (size_t i = 0; i < count; i++) {
        const unsigned char *pa = a + i * size, *pb = b + i * size;
        double xr = load(pa) * scale, xi = load(pa + half) * scale;
        double yr = load(pb) * scale, yi = load(pb + half) * scale;
        double dr = xr - yr, di = xi - yi;
        int both_finite = is_finite(xr) & is_finite(xi) & is_finite(yr) & is_finite(yi);
        add_squares(&l, (int)(i % LANES), both_finite, dr * dr + di * di, xr * xr + xi * xi);
    }
    lanes_finish(&l, out);
    out->diff_squares.level = 1;
    out->base_squares.level = 1;
}

/* ---- one typed kernel per dtype and mode ---- */

#define KERNEL_PARAMS                                                                \
    const unsigned char *a, const unsigned char *b, size_t count, const tolerance *tol, \
        partial *out

#define DEFINE_REAL_KERNEL(NAME, SIZE, LOAD, DIFFER, USE_TOLERANCE)              \
    HOT_LOOP static void NAME(KERNEL_PARAMS)                                     \
    {                                                                            \
        real_chunk(a, b, count, SIZE, LOAD, DIFFER, USE_TOLERANCE, tol, out);    \
    }

#define DEFINE_INTEGER_KERNELS(TYPE, SIZE) \
    DEFINE_REAL_KERNEL(exact_##TYPE, SIZE, load_##TYPE, bytes_differ_##SIZE, 0)

#define DEFINE_FLOAT_KERNELS(TYPE, SIZE)                                         \
    DEFINE_REAL_KERNEL(exact_##TYPE, SIZE, load_##TYPE, bytes_differ_##SIZE, 0)  \
    DEFINE_REAL_KERNEL(tolerance_##TYPE, SIZE, load_##TYPE, bytes_differ_##SIZE, 1)

#define DEFINE_COMPLEX_KERNELS(TYPE, HALF, LOAD, MODULUS, SIZE)                         \
    HOT_LOOP static void exact_##TYPE(KERNEL_PARAMS)                                    \
    {                                                                                   \
        complex_chunk(a, b, count, HALF, LOAD, MODULUS, bytes_differ_##SIZE, 0, tol, out); \
    }                                                                                   \
    HOT_LOOP static void tolerance_##TYPE(KERNEL_PARAMS)                                \
    {                                                                                   \
        complex_chunk(a, b, count, HALF, LOAD, MODULUS, bytes_differ_##SIZE, 1, tol, out); \
    }

DEFINE_INTEGER_KERNELS(uint8, 1)
DEFINE_INTEGER_KERNELS(int8, 1)
DEFINE_INTEGER_KERNELS(int16, 2)
DEFINE_INTEGER_KERNELS(uint16, 2)
DEFINE_INTEGER_KERNELS(int32, 4)
DEFINE_INTEGER_KERNELS(uint32, 4)
DEFINE_INTEGER_KERNELS(int64, 8)
DEFINE_INTEGER_KERNELS(uint64, 8)
DEFINE_FLOAT_KERNELS(float16, 2)
DEFINE_FLOAT_KERNELS(bfloat16, 2)
DEFINE_FLOAT_KERNELS(float32, 4)
DEFINE_FLOAT_KERNELS(float64, 8)
DEFINE_FLOAT_KERNELS(float8_e4m3fn, 1)
DEFINE_FLOAT_KERNELS(float8_e5m2, 1)
DEFINE_FLOAT_KERNELS(float8_e4m3fnuz, 1)
DEFINE_FLOAT_KERNELS(float8_e5m2fnuz, 1)
DEFINE_FLOAT_KERNELS(float8_e8m0fnu, 1)
DEFINE_COMPLEX_KERNELS(complex32, 2, load_float16, modulus_narrow, 4)
DEFINE_COMPLEX_KERNELS(complex64, 4, load_float32, modulus_narrow, 8)
DEFINE_COMPLEX_KERNELS(complex128, 8, load_float64, modulus_wide, 16)

static void rescaled_float64(KERNEL_PARAMS)
{
    (void)tol;
    real_rescaled_chunk(a, b, count, 8, load_float64, out);
}

static void rescaled_complex128(KERNEL_PARAMS)
{
    (void)tol;
    complex_rescaled_chunk(a, b, count, 8, load_float64, out);
}

/* Sorted by how often they occur in training state; the error message lists
 * them in this order. */
static const dtype_info dtypes[] = {
    {"float32", 4, exact_float32, tolerance_float32, NULL},
    {"bfloat16", 2, exact_bfloat16, tolerance_bfloat16, NULL},
    {"float16", 2, exact_float16, tolerance_float16, NULL},
    {"float64", 8, exact_float64, tolerance_float64, rescaled_float64},
    {"int64", 8, exact_int64, exact_int64, NULL},
    {"int32", 4, exact_int32, exact_int32, NULL},
    {"int16", 2, exact_int16, exact_int16, NULL},
    {"int8", 1, exact_int8, exact_int8, NULL},
    {"uint8", 1, exact_uint8, exact_uint8, NULL},
    {"uint16", 2, exact_uint16, exact_uint16, NULL},
    {"uint32", 4, exact_uint32, exact_uint32, NULL},
    {"uint64", 8, exact_uint64, exact_uint64, NULL},
    /* torch stores bool as one byte 0 or 1: compared and converted as uint8. */
    {"bool", 1, exact_uint8, exact_uint8, NULL},
    {"complex32", 4, exact_complex32, tolerance_complex32, NULL},
    {"complex64", 8, exact_complex64, tolerance_complex64, NULL},
    {"complex128", 16, exact_complex128, tolerance_complex128, rescaled_complex128},
    {"float8_e4m3fn", 1, exact_float8_e4m3fn, tolerance_float8_e4m3fn, NULL},
    {"float8_e5m2", 1, exact_float8_e5m2, tolerance_float8_e5m2, NULL},
    {"float8_e4m3fnuz", 1, exact_float8_e4m3fnuz, tolerance_float8_e4m3fnuz, NULL},
    {"float8_e5m2fnuz", 1, exact_float8_e5m2fnuz, tolerance_float8_e5m2fnuz, NULL},
    {"float8_e8m0fnu", 1, exact_float8_e8m0fnu, tolerance_float8_e8m0fnu, NULL},
};
#define DTYPE_COUNT (sizeof dtypes / sizeof dtypes[0])

/* ---- the pass over all chunks, split across threads ---- */

typedef enum {
    PASS_FIND_DIFFERING_CHUNK, /* exact mode: memcmp per chunk */
    PASS_MEASURE,              /* per-chunk partials with the mode's kernel */
} pass_kind;

typedef struct {
    const dtype_info *dtype;
    chunk_kernel kernel;
    const unsigned char *baseline;
    const unsigned char *candidate;
    size_t element_count;
    const tolerance *tol;
    partial *partials; /* one per chunk, written by PASS_MEASURE */
} pass_input;

typedef struct {
    const pass_input *input;
    pass_kind kind;
    size_t first_chunk;
    size_t end_chunk;
    unsigned char *differs; /* set by PASS_FIND_DIFFERING_CHUNK */
} worker;

static void measure_chunk(const pass_input *in, size_t chunk)
{
    size_t start = chunk * CHUNK_ELEMENTS;
    size_t count = in->element_count - start < CHUNK_ELEMENTS ? in->element_count - start
                                                               : CHUNK_ELEMENTS;
    size_t offset = start * in->dtype->itemsize;
    partial *out = &in->partials[chunk];
    in->kernel(in->baseline + offset, in->candidate + offset, count, in->tol, out);
    if (out->first_mismatch >= 0)
        out->first_mismatch += (int64_t)start;
    chunk_kernel rescaled = in->dtype->rescaled;
    if (rescaled != NULL && (isinf(out->diff_squares.value) || isinf(out->base_squares.value))) {
        partial scaled;
        rescaled(in->baseline + offset, in->candidate + offset, count, in->tol, &scaled);
        if (isinf(out->diff_squares.value))
            out->diff_squares = scaled.diff_squares;
        if (isinf(out->base_squares.value))
            out->base_squares = scaled.base_squares;
    }
}

static void run_worker(worker *w)
{
    const pass_input *in = w->input;
    size_t chunk_bytes = (size_t)CHUNK_ELEMENTS * in->dtype->itemsize;
    size_t total_bytes = in->element_count * in->dtype->itemsize;
    for (size_t chunk = w->first_chunk; chunk < w->end_chunk; chunk++) {
        if (w->kind == PASS_MEASURE) {
            measure_chunk(in, chunk);
            continue;
        }
        size_t offset = chunk * chunk_bytes;
        size_t length = total_bytes - offset < chunk_bytes ? total_bytes - offset : chunk_bytes;
        if (memcmp(in->baseline + offset, in->candidate + offset, length) != 0) {
            *w->differs = 1;
            return; /* the measuring pass covers every chunk anyway */
        }
    }
}

static void *worker_main(void *arg)
{
    run_worker(arg);
    return NULL;
}

/* Runs one pass over `chunk_count` chunks on `threads` threads, each taking a
 * contiguous range (the caller's thread takes the first); differs[t] is worker
 * t's flag. Returns 0, or an errno value with `failed_call` naming the call
 * that failed; every thread started is joined before returning. */
static int run_pass(const pass_input *in, pass_kind kind, size_t chunk_count, size_t threads,
                    unsigned char *differs, const char **failed_call)
{
    worker workers_on_stack[8];
    worker *workers = workers_on_stack;
    pthread_t *ids = NULL;
    if (threads > 1) {
        if (threads > sizeof workers_on_stack / sizeof workers_on_stack[0])
            workers = PyMem_RawMalloc(threads * sizeof *workers);
        ids = PyMem_RawMalloc(threads * sizeof *ids);
        if (workers == NULL || ids == NULL) {
            if (workers != workers_on_stack)
                PyMem_RawFree(workers);
            PyMem_RawFree(ids);
            *failed_call = "malloc";
            return ENOMEM;
        }
    }
    size_t per_worker = chunk_count / threads, remainder = chunk_count % threads;
    for (size_t t = 0, next = 0; t < threads; t++) {
        workers[t].input = in;
        workers[t].kind = kind;
        workers[t].first_chunk = next;
        next += per_worker + (t < remainder ? 1 : 0);
        workers[t].end_chunk = next;
        workers[t].differs = &differs[t];
        differs[t] = 0;
    }
    int error = 0;
    size_t started = 1;
    for (; started < threads; started++) {
        error = pthread_create(&ids[started], NULL, worker_main, &workers[started]);
        if (error != 0) {
            *failed_call = "pthread_create";
            break;
        }
    }
    if (error == 0)
        run_worker(&workers[0]);
    for (size_t t = 1; t < started; t++) {
        int join_error = pthread_join(ids[t], NULL);
        if (join_error != 0 && error == 0) {
            error = join_error;
            *failed_call = "pthread_join";
        }
    }
    if (workers != workers_on_stack)
        PyMem_RawFree(workers);
    PyMem_RawFree(ids);
    return error;
}

/* ---- combining partials in chunk order ---- */

/* Adds a scaled sum, moving the total to level 1 when either side is scaled
 * or when the unscaled total overflows. */
static void add_scaled(scaled_sum *total, scaled_sum term)
{
    const double scale = ldexp(1.0, -SUM_SCALE_EXPONENT);
    if (term.level > total->level) {
        total->value = total->value * scale * scale;
        total->level = 1;
    } else if (term.level < total->level) {
        term.value = term.value * scale * scale;
    }
    double sum = total->value + term.value;
    if (isinf(sum) && total->level == 0) {
        sum = total->value * scale * scale + term.value * scale * scale;
        total->level = 1;
    }
    total->value = sum;
}

/* Adds the partials of chunks that follow those already in `total`, in chunk
 * order; `index_offset` turns their first mismatch into an index of the whole. */
static void combine_into(partial *total, const partial *partials, size_t chunk_count,
                         size_t index_offset)
{
    for (size_t c = 0; c < chunk_count; c++) {
        const partial *p = &partials[c];
        if (total->first_mismatch < 0 && p->first_mismatch >= 0)
            total->first_mismatch = p->first_mismatch + (int64_t)index_offset;
        total->mismatch_count += p->mismatch_count;
        total->max_abs = p->max_abs > total->max_abs ? p->max_abs : total->max_abs;
        total->max_rel = p->max_rel > total->max_rel ? p->max_rel : total->max_rel;
        add_scaled(&total->diff_squares, p->diff_squares);
        add_scaled(&total->base_squares, p->base_squares);
    }
}

#define EMPTY_TOTAL {-1, 0, -1.0, -1.0, {0.0, 0}, {0.0, 0}}

static partial combine(const partial *partials, size_t chunk_count)
{
    partial total = EMPTY_TOTAL;
    combine_into(&total, partials, chunk_count, 0);
    return total;
}

static double relative_rms(scaled_sum diff_squares, scaled_sum base_squares)
{
    if (diff_squares.value == 0.0)
        return 0.0;
    if (base_squares.value == 0.0)
        return INFINITY;
    double ratio = sqrt(diff_squares.value) / sqrt(base_squares.value);
    return ldexp(ratio, SUM_SCALE_EXPONENT * (diff_squares.level - base_squares.level));
}

/* ---- Python entry point ---- */

static const dtype_info *find_dtype(const char *name)
{
    for (size_t i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    return NULL;
}

static PyObject *supported_dtype_names(void)
{
    PyObject *names = PyList_New((Py_ssize_t)DTYPE_COUNT);
    if (names == NULL)
        return NULL;
    for (size_t i = 0; i < DTYPE_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(dtypes[i].name);
        if (name == NULL) {
            Py_DECREF(names);
            return NULL;
        }
        PyList_SET_ITEM(names, (Py_ssize_t)i, name);
    }
    PyObject *separator = PyUnicode_FromString(", ");
    PyObject *joined = separator != NULL ? PyUnicode_Join(separator, names) : NULL;
    Py_XDECREF(separator);
    Py_DECREF(names);
    return joined;
}

/* None, or a real number stored in *value; 0 on success, -1 with TypeError. */
static int parse_optional_real(PyObject *object, const char *what, int *given, double *value)
{
    *given = object != Py_None;
    if (!*given)
        return 0;
    if (!PyFloat_Check(object) && !PyLong_Check(object)) {
        PyErr_Format(PyExc_TypeError, "%s must be a real number or None, got %.100s", what,
                     Py_TYPE(object)->tp_name);
        return -1;
    }
    *value = PyFloat_AsDouble(object);
    return *value == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int get_buffer(PyObject *object, const char *what, Py_buffer *view)
{
    if (!PyObject_CheckBuffer(object)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must support the buffer protocol (bytes, memoryview, mmap, array), "
                     "got %.100s",
                     what, Py_TYPE(object)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_BufferError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "%s must be a C-contiguous buffer; pass a contiguous copy instead", what);
        return -1;
    }
    return 0;
}

static PyObject *thread_error(int error, const char *failed_call)
{
    errno = error;
    return PyErr_Format(PyExc_OSError, "compare could not run its threads: %s failed: %s",
                        failed_call, strerror(error));
}

/* The documented result tuple of a combined total. Byte-identical buffers have
 * no error, though under tolerance their NaNs can still be mismatches. */
static PyObject *result_tuple(const partial *total, int identical)
{
    if (identical)
        return Py_BuildValue("(LKddd)", (long long)total->first_mismatch,
                             (unsigned long long)total->mismatch_count, 0.0, 0.0, 0.0);
    return Py_BuildValue("(LKddd)", (long long)total->first_mismatch,
                         (unsigned long long)total->mismatch_count,
                         total->max_abs < 0.0 ? INFINITY : total->max_abs,
                         total->max_rel < 0.0 ? INFINITY : total->max_rel,
                         relative_rms(total->diff_squares, total->base_squares));
}

static PyObject *compare_buffers(const dtype_info *dtype, const Py_buffer *baseline,
                                 const Py_buffer *candidate, const tolerance *tol,
                                 size_t threads)
{
    size_t element_count = (size_t)baseline->len / dtype->itemsize;
    size_t chunk_count = (element_count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
    /* More threads than chunks would idle. */
    size_t workers = threads < chunk_count ? threads : (chunk_count > 0 ? chunk_count : 1);
    partial *partials = PyMem_Malloc((chunk_count > 0 ? chunk_count : 1) * sizeof *partials);
    unsigned char *differs = PyMem_Malloc(workers);
    if (partials == NULL || differs == NULL) {
        PyMem_Free(partials);
        PyMem_Free(differs);
        return PyErr_NoMemory();
    }
    pass_input in = {
        .dtype = dtype,
        .kernel = tol != NULL ? dtype->tolerance : dtype->exact,
        .baseline = baseline->buf,
        .candidate = candidate->buf,
        .element_count = element_count,
        .tol = tol,
        .partials = partials,
    };
    const char *failed_call = NULL;
    int error = 0;
    int identical = 0;
    partial total = {-1, 0, 0.0, 0.0, {0.0, 0}, {0.0, 0}};
    Py_BEGIN_ALLOW_THREADS
    if (tol == NULL) {
        error = run_pass(&in, PASS_FIND_DIFFERING_CHUNK, chunk_count, workers, differs,
                         &failed_call);
        identical = error == 0 && memchr(differs, 1, workers) == NULL;
    }
    if (error == 0 && !identical) {
        error = run_pass(&in, PASS_MEASURE, chunk_count, workers, differs, &failed_call);
        if (error == 0) {
            total = combine(partials, chunk_count);
            /* Only when no element gave a finite error (e.g. all NaN) can the
             * zero error of byte-identical buffers differ from the rule. */
            if (total.max_abs < 0.0)
                identical = memcmp(baseline->buf, candidate->buf, (size_t)baseline->len) == 0;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(partials);
    PyMem_Free(differs);
    if (error != 0)
        return thread_error(error, failed_call);
    return result_tuple(&total, identical);
}

/* Arguments shared by compare and compare_accumulate, checked and converted. */
typedef struct {
    const dtype_info *dtype;
    tolerance tol;
    int use_tolerance;
    size_t threads;
    Py_buffer baseline;
    Py_buffer candidate;
} compare_arguments;

/* Fills `out` (both buffers exported on success: release them with
 * release_arguments); 0 on success, -1 with an exception set. */
static int parse_arguments(const char *dtype_name, PyObject *baseline_object,
                           PyObject *candidate_object, PyObject *rtol_object,
                           PyObject *atol_object, PyObject *equal_nan_object, Py_ssize_t threads,
                           compare_arguments *out)
{
    out->dtype = find_dtype(dtype_name);
    if (out->dtype == NULL) {
        PyObject *names = supported_dtype_names();
        if (names != NULL)
            PyErr_Format(PyExc_ValueError, "unknown dtype '%s'; supported dtypes: %U",
                         dtype_name, names);
        Py_XDECREF(names);
        return -1;
    }
    tolerance *tol = &out->tol;
    *tol = (tolerance){0.0, 0.0, 0};
    int rtol_given, atol_given;
    if (parse_optional_real(rtol_object, "rtol", &rtol_given, &tol->rtol) < 0 ||
        parse_optional_real(atol_object, "atol", &atol_given, &tol->atol) < 0)
        return -1;
    if (rtol_given != atol_given) {
        PyErr_SetString(PyExc_ValueError,
                        "give both rtol and atol for a tolerance comparison, or neither for an "
                        "exact one");
        return -1;
    }
    if (rtol_given && !(isfinite(tol->rtol) && tol->rtol >= 0.0 && isfinite(tol->atol) &&
                        tol->atol >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "rtol and atol must be finite and non-negative");
        return -1;
    }
    out->use_tolerance = rtol_given;
    if (!PyBool_Check(equal_nan_object)) {
        PyErr_Format(PyExc_TypeError, "equal_nan must be True or False, got %.100s",
                     Py_TYPE(equal_nan_object)->tp_name);
        return -1;
    }
    tol->equal_nan = equal_nan_object == Py_True;
    if (threads < 1) {
        PyErr_Format(PyExc_ValueError, "threads must be at least 1, got %zd", threads);
        return -1;
    }
    out->threads = (size_t)threads;

    if (get_buffer(baseline_object, "baseline", &out->baseline) < 0)
        return -1;
    if (get_buffer(candidate_object, "candidate", &out->candidate) < 0) {
        PyBuffer_Release(&out->baseline);
        return -1;
    }
    const char *problem = NULL;
    if (out->baseline.len != out->candidate.len) {
        PyErr_Format(PyExc_ValueError,
                     "baseline and candidate must have the same byte length, got %zd and %zd "
                     "bytes",
                     out->baseline.len, out->candidate.len);
        problem = "length";
    } else if ((size_t)out->baseline.len % out->dtype->itemsize != 0) {
        PyErr_Format(PyExc_ValueError,
                     "byte lengths must be a multiple of the %s element size %zu, got %zd and "
                     "%zd bytes",
                     out->dtype->name, out->dtype->itemsize, out->baseline.len,
                     out->candidate.len);
        problem = "itemsize";
    }
    if (problem != NULL) {
        PyBuffer_Release(&out->baseline);
        PyBuffer_Release(&out->candidate);
        return -1;
    }
    return 0;
}

static void release_arguments(compare_arguments *arguments)
{
    PyBuffer_Release(&arguments->baseline);
    PyBuffer_Release(&arguments->candidate);
}

static PyObject *compare(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"dtype", "baseline", "candidate", "rtol",
                               "atol", "equal_nan", "threads", NULL};
    const char *dtype_name;
    PyObject *baseline_object, *candidate_object;
    PyObject *rtol_object = Py_None, *atol_object = Py_None, *equal_nan_object = Py_False;
    Py_ssize_t threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOO|$OOOn:compare", keywords, &dtype_name,
                                     &baseline_object, &candidate_object, &rtol_object,
                                     &atol_object, &equal_nan_object, &threads))
        return NULL;
    compare_arguments arguments;
    if (parse_arguments(dtype_name, baseline_object, candidate_object, rtol_object, atol_object,
                        equal_nan_object, threads, &arguments) < 0)
        return NULL;
    PyObject *result = compare_buffers(arguments.dtype, &arguments.baseline,
                                       &arguments.candidate,
                                       arguments.use_tolerance ? &arguments.tol : NULL,
                                       arguments.threads);
    release_arguments(&arguments);
    return result;
}

/* ---- streaming: one comparison fed block by block ---- */

/* The running state of a streamed comparison, as the Python tuple
 * (element_count, first_mismatch_index, mismatch_count, max_abs_error,
 *  max_rel_error, diff_squares, diff_scaled, base_squares, base_scaled, identical):
 * the combined partial of the chunks seen so far (maxima -1.0 while no finite
 * value was seen; a sum is "scaled" as described for float64 overflow) and
 * whether every byte so far was equal. */
typedef struct {
    size_t element_count;
    partial total;
    int identical;
} stream_state;

#define STATE_FIELDS 10

static PyObject *state_tuple(const stream_state *state)
{
    const partial *t = &state->total;
    return Py_BuildValue("(nLKdddOdOO)", (Py_ssize_t)state->element_count,
                         (long long)t->first_mismatch, (unsigned long long)t->mismatch_count,
                         t->max_abs, t->max_rel, t->diff_squares.value,
                         t->diff_squares.level ? Py_True : Py_False, t->base_squares.value,
                         t->base_squares.level ? Py_True : Py_False,
                         state->identical ? Py_True : Py_False);
}

static int state_error(const char *detail)
{
    PyErr_Format(PyExc_ValueError,
                 "state must be a tuple returned by compare_accumulate (%s); start a new "
                 "comparison with state=None",
                 detail);
    return -1;
}

static int state_integer(PyObject *item, long long minimum, long long *value)
{
    if (!PyLong_Check(item) || PyBool_Check(item))
        return state_error("an int field holds something else");
    *value = PyLong_AsLongLong(item);
    if (*value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return state_error("an int field is out of range");
    }
    return *value < minimum ? state_error("an int field is out of range") : 0;
}

static int state_float(PyObject *item, double *value)
{
    if (!PyFloat_Check(item))
        return state_error("a float field holds something else");
    *value = PyFloat_AS_DOUBLE(item);
    return 0;
}

static int state_flag(PyObject *item, int *value)
{
    if (!PyBool_Check(item))
        return state_error("a bool field holds something else");
    *value = item == Py_True;
    return 0;
}

/* Parses a state tuple; None is the state before the first block. */
static int parse_state(PyObject *object, stream_state *state)
{
    *state = (stream_state){0, EMPTY_TOTAL, 1};
    if (object == Py_None)
        return 0;
    if (!PyTuple_Check(object) || PyTuple_GET_SIZE(object) != STATE_FIELDS)
        return state_error("not a tuple of 10 fields");
    PyObject **item = &PyTuple_GET_ITEM(object, 0);
    long long element_count, first, count;
    partial *t = &state->total;
    if (state_integer(item[0], 0, &element_count) < 0 || state_integer(item[1], -1, &first) < 0 ||
        state_integer(item[2], 0, &count) < 0 || state_float(item[3], &t->max_abs) < 0 ||
        state_float(item[4], &t->max_rel) < 0 || state_float(item[5], &t->diff_squares.value) < 0 ||
        state_flag(item[6], &t->diff_squares.level) < 0 ||
        state_float(item[7], &t->base_squares.value) < 0 ||
        state_flag(item[8], &t->base_squares.level) < 0 ||
        state_flag(item[9], &state->identical) < 0)
        return -1;
    if (first >= element_count || count > element_count)
        return state_error("its counts exceed its element count");
    state->element_count = (size_t)element_count;
    t->first_mismatch = first;
    t->mismatch_count = (uint64_t)count;
    return 0;
}

static PyObject *compare_accumulate(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"dtype", "baseline", "candidate", "state", "rtol",
                               "atol", "equal_nan", "threads", NULL};
    const char *dtype_name;
    PyObject *baseline_object, *candidate_object, *state_object = Py_None;
    PyObject *rtol_object = Py_None, *atol_object = Py_None, *equal_nan_object = Py_False;
    Py_ssize_t threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOO|O$OOOn:compare_accumulate", keywords,
                                     &dtype_name, &baseline_object, &candidate_object,
                                     &state_object, &rtol_object, &atol_object,
                                     &equal_nan_object, &threads))
        return NULL;
    stream_state state;
    if (parse_state(state_object, &state) < 0)
        return NULL;
    if (state.element_count % CHUNK_ELEMENTS != 0) {
        PyErr_Format(PyExc_ValueError,
                     "the blocks before this one hold %zu elements, not a multiple of %d: only "
                     "the last block may end inside a chunk",
                     state.element_count, CHUNK_ELEMENTS);
        return NULL;
    }
    compare_arguments arguments;
    if (parse_arguments(dtype_name, baseline_object, candidate_object, rtol_object, atol_object,
                        equal_nan_object, threads, &arguments) < 0)
        return NULL;
    size_t element_count = (size_t)arguments.baseline.len / arguments.dtype->itemsize;
    size_t chunk_count = (element_count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
    size_t workers = arguments.threads < chunk_count ? arguments.threads
                                                     : (chunk_count > 0 ? chunk_count : 1);
    partial *partials = PyMem_Malloc((chunk_count > 0 ? chunk_count : 1) * sizeof *partials);
    unsigned char *differs = PyMem_Malloc(workers);
    if (partials == NULL || differs == NULL) {
        PyMem_Free(partials);
        PyMem_Free(differs);
        release_arguments(&arguments);
        return PyErr_NoMemory();
    }
    const tolerance *tol = arguments.use_tolerance ? &arguments.tol : NULL;
    pass_input in = {
        .dtype = arguments.dtype,
        .kernel = tol != NULL ? arguments.dtype->tolerance : arguments.dtype->exact,
        .baseline = arguments.baseline.buf,
        .candidate = arguments.candidate.buf,
        .element_count = element_count,
        .tol = tol,
        .partials = partials,
    };
    const char *failed_call = NULL;
    int error;
    /* Unlike compare, every block is measured even when its bytes are equal:
     * its sum of squared baseline values is needed if a later block differs. */
    Py_BEGIN_ALLOW_THREADS
    error = run_pass(&in, PASS_MEASURE, chunk_count, workers, differs, &failed_call);
    if (error == 0) {
        uint64_t count_before = state.total.mismatch_count;
        combine_into(&state.total, partials, chunk_count, state.element_count);
        if (state.identical)
            state.identical = tol == NULL ? state.total.mismatch_count == count_before
                                          : memcmp(arguments.baseline.buf, arguments.candidate.buf,
                                                   (size_t)arguments.baseline.len) == 0;
        state.element_count += element_count;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(partials);
    PyMem_Free(differs);
    release_arguments(&arguments);
    if (error != 0)
        return thread_error(error, failed_call);
    return state_tuple(&state);
}

static PyObject *compare_finish(PyObject *self, PyObject *state_object)
{
    (void)self;
    stream_state state;
    if (parse_state(state_object, &state) < 0)
        return NULL;
    return result_tuple(&state.total, state.identical);
}

PyMethodDef tp_compare_methods[] = {
    {"compare", (PyCFunction)(void (*)(void))compare, METH_VARARGS | METH_KEYWORDS,
     "compare(dtype, baseline, candidate, *, rtol=None, atol=None, equal_nan=False, threads=1)\n"
     "--\n\n"
     "Compare two buffers of little-endian `dtype` elements in one deterministic pass.\n\n"
     "Exact when rtol and atol are None (an element mismatches when its bytes differ),\n"
     "else torch.isclose(baseline, candidate, rtol, atol, equal_nan) per element\n"
     "(integer and bool dtypes stay exact). Returns (first_mismatch_index,\n"
     "mismatch_count, max_abs_error, max_rel_error, relative_rms_error); see the\n"
     "'Compare core' section of docs/design.md."},
    {"compare_accumulate", (PyCFunction)(void (*)(void))compare_accumulate,
     METH_VARARGS | METH_KEYWORDS,
     "compare_accumulate(dtype, baseline, candidate, state=None, *, rtol=None, atol=None,\n"
     "                   equal_nan=False, threads=1)\n"
     "--\n\n"
     "Compare the next block of two buffers streamed block by block; returns the new state.\n\n"
     "Pass the returned state with the next block (every block but the last must hold a\n"
     "multiple of 32768 elements), and give the final state to compare_finish: the result\n"
     "is bit-identical to one compare() over the concatenated blocks."},
    {"compare_finish", compare_finish, METH_O,
     "compare_finish(state)\n"
     "--\n\n"
     "The compare() result tuple of a streamed comparison's final state."},
    {NULL, NULL, 0, NULL},
};

int tp_compare_init(PyObject *module)
{
    (void)module;
    build_float8_tables();
    return 0;
}
