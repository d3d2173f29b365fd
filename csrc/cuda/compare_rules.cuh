/* Element rules and reduction order of the compare core (docs/design.md, "Compare core"),
 * written once for the CUDA kernels and their host emulation (tests/gpu/emulate_kernels.cpp).
 *
 * Everything here computes exactly what src/_trainparity/compare.c computes: the
 * same IEEE double operations in the same order. On the device every rounding
 * operation is an explicit round-to-nearest intrinsic, which the compiler never
 * contracts into a fused multiply-add; on the host the file is built with
 * -ffp-contract=off. */
#ifndef TRAINPARITY_CUDA_COMPARE_RULES_CUH
#define TRAINPARITY_CUDA_COMPARE_RULES_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TP_RULE __host__ __device__ __forceinline__
#else
#define TP_RULE inline
#endif

namespace tp_rules {

/* Reduction order constants of the compare core. */
constexpr int CHUNK_ELEMENTS = 32768;
constexpr int LANES = 8;
constexpr int SUM_SCALE_EXPONENT = 600;
constexpr double SUM_SCALE = 0x1p-600;

TP_RULE double add(double a, double b)
{
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}

TP_RULE double subtract(double a, double b)
{
#if defined(__CUDA_ARCH__)
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}

TP_RULE double multiply(double a, double b)
{
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

TP_RULE double divide(double a, double b)
{
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}

/* False for Inf and NaN. */
TP_RULE bool is_finite(double x)
{
    return fabs(x) <= DBL_MAX;
}

TP_RULE float float_from_bits(uint32_t bits)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
#endif
}

TP_RULE uint32_t bits_of_float(float value)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(value);
#else
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
#endif
}

TP_RULE double double_from_bits(uint64_t bits)
{
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)bits);
#else
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
#endif
}

/* ---- dtypes: the raw element type (its bytes) and its exact double value ----
 *
 * Besides `value`, each dtype answers finite / NaN / zero from the raw bits with
 * integer operations; each answer equals the double test on `value` (the
 * encodings are IEEE: one encoding per finite value, conversion keeps Inf and
 * NaN), and integer work is far cheaper on a GPU than double-precision work.
 * `abs_error_can_overflow`: |x - y| of two finite values can be Inf (float64
 * only); otherwise it is finite exactly when both values are. */

template <typename Bits, Bits EXPONENT_MASK>
struct IeeeBits {
    static constexpr Bits MAGNITUDE_MASK = (Bits)((Bits) ~(Bits)0 >> 1);
    TP_RULE static bool finite(Bits bits) { return (bits & EXPONENT_MASK) != EXPONENT_MASK; }
    TP_RULE static bool nan(Bits bits) { return (Bits)(bits & MAGNITUDE_MASK) > EXPONENT_MASK; }
    TP_RULE static bool zero(Bits bits) { return (Bits)(bits & MAGNITUDE_MASK) == 0; }
};

struct Float16 : IeeeBits<uint16_t, 0x7c00u> {
    typedef uint16_t raw;
    static constexpr bool floating = true;
    static constexpr bool abs_error_can_overflow = false;
    static constexpr bool sums_can_overflow = false;
    /* IEEE binary16 rebiased to binary32 (compare.c's half_to_float). */
    TP_RULE static double value(raw half)
    {
        uint32_t sign = (uint32_t)(half >> 15) << 31;
        uint32_t exponent = (half >> 10) & 0x1fu;
        uint32_t mantissa = half & 0x3ffu;
        uint32_t normal = ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
        uint32_t special = 0x7f800000u | (mantissa << 13);
        uint32_t subnormal = bits_of_float((float)(int32_t)mantissa * 0x1p-24f);
        uint32_t magnitude = exponent == 0 ? subnormal : (exponent == 31 ? special : normal);
        return (double)float_from_bits(sign | magnitude);
    }
};

struct BFloat16 : IeeeBits<uint16_t, 0x7f80u> {
    typedef uint16_t raw;
    static constexpr bool floating = true;
    static constexpr bool abs_error_can_overflow = false;
    static constexpr bool sums_can_overflow = false;
    TP_RULE static double value(raw bits) { return (double)float_from_bits((uint32_t)bits << 16); }
};

struct Float32 : IeeeBits<uint32_t, 0x7f800000u> {
    typedef uint32_t raw;
    static constexpr bool floating = true;
    static constexpr bool abs_error_can_overflow = false;
    static constexpr bool sums_can_overflow = false;
    TP_RULE static double value(raw bits) { return (double)float_from_bits(bits); }
};

struct Float64 : IeeeBits<uint64_t, 0x7ff0000000000000u> {
    typedef uint64_t raw;
    static constexpr bool floating = true;
    static constexpr bool abs_error_can_overflow = true;
    /* Squares of float64 values can overflow a double sum (rescaled, see below). */
    static constexpr bool sums_can_overflow = true;
    TP_RULE static double value(raw bits) { return double_from_bits(bits); }
};

/* Integers and bool (one byte, 0 or 1): exact in every mode, converted to double
 * with round-to-nearest-even. */
template <typename Integer>
struct IntegerType {
    typedef Integer raw;
    static constexpr bool floating = false;
    static constexpr bool abs_error_can_overflow = false;
    static constexpr bool sums_can_overflow = false;
    TP_RULE static double value(raw v) { return (double)v; }
    TP_RULE static bool finite(raw) { return true; }
    TP_RULE static bool nan(raw) { return false; }
    TP_RULE static bool zero(raw v) { return v == 0; }
};

/* ---- per-element rules ---- */

struct Tolerance {
    double rtol;
    double atol;
    bool equal_nan;
};

/* What one thread has seen of a chunk, apart from the ordered sums: order-free. */
struct ElementStats {
    double max_abs;       /* largest finite absolute error, -1 when none */
    double max_rel;       /* largest finite relative error, -1 when none */
    uint32_t mismatches;
    int32_t first;        /* smallest mismatching index in the chunk, CHUNK_ELEMENTS when none */
    bool bytes_differ;
};

TP_RULE ElementStats empty_stats()
{
    ElementStats stats = {-1.0, -1.0, 0u, CHUNK_ELEMENTS, false};
    return stats;
}

/* Compares one element pair (index `index` in its chunk); adds it to `stats` and
 * returns its two sum terms, +0.0 unless both values are finite. */
template <class Dtype, bool TOLERANCE>
TP_RULE void measure_element(typename Dtype::raw a_raw, typename Dtype::raw b_raw, int index,
                             const Tolerance &tol, ElementStats &stats, double &diff_square,
                             double &base_square)
{
    double x = Dtype::value(a_raw), y = Dtype::value(b_raw);
    double abs_error = fabs(subtract(x, y));
    bool both_finite = Dtype::finite(a_raw) && Dtype::finite(b_raw);
    bool abs_finite = Dtype::abs_error_can_overflow ? is_finite(abs_error) : both_finite;
    if (abs_finite && abs_error > stats.max_abs)
        stats.max_abs = abs_error;
    /* |x| > 0: neither zero nor NaN. */
    double divisor = !Dtype::zero(a_raw) && !Dtype::nan(a_raw) ? fabs(x) : 1.0;
    /* The division only matters when it can raise the maximum. The product
     * max_rel * divisor - abs_error, rounded once by the fused multiply-add,
     * is positive only when abs_error < max_rel * divisor exactly, i.e. when
     * abs_error / divisor rounds to at most max_rel: skipping then changes
     * nothing. The reported value is always the IEEE quotient. */
    if (!(fma(stats.max_rel, divisor, -abs_error) > 0.0)) {
        double rel_error = divide(abs_error, divisor);
        if (is_finite(rel_error) && rel_error > stats.max_rel)
            stats.max_rel = rel_error;
    }
    diff_square = both_finite ? multiply(abs_error, abs_error) : 0.0;
    base_square = both_finite ? multiply(x, x) : 0.0;
    bool bytes_differ = a_raw != b_raw;
    stats.bytes_differ = stats.bytes_differ || bytes_differ;
    bool mismatch = bytes_differ;
    if (TOLERANCE && Dtype::floating) {
        /* torch.isclose(baseline, candidate, rtol, atol, equal_nan) in double;
         * x == y: the same non-NaN bits, or two zeros. */
        bool a_nan = Dtype::nan(a_raw), b_nan = Dtype::nan(b_raw);
        bool equal = !a_nan && !b_nan &&
                     (!bytes_differ || (Dtype::zero(a_raw) && Dtype::zero(b_raw)));
        double bound = add(tol.atol, multiply(tol.rtol, fabs(y)));
        bool close = equal || (tol.equal_nan && a_nan && b_nan) ||
                     (abs_finite && abs_error <= bound);
        mismatch = !close;
    }
    if (mismatch) {
        stats.mismatches++;
        if (index < stats.first)
            stats.first = index;
    }
}

/* The sum terms of one element with both values scaled by 2^-600, for a chunk
 * whose unscaled sums overflowed (float64 only). */
template <class Dtype>
TP_RULE void rescaled_terms(typename Dtype::raw a_raw, typename Dtype::raw b_raw,
                            double &diff_square, double &base_square)
{
    double x = multiply(Dtype::value(a_raw), SUM_SCALE);
    double y = multiply(Dtype::value(b_raw), SUM_SCALE);
    double diff = subtract(x, y);
    bool both_finite = is_finite(x) && is_finite(y);
    diff_square = both_finite ? multiply(diff, diff) : 0.0;
    base_square = both_finite ? multiply(x, x) : 0.0;
}

/* ---- the order of the sums within a chunk ----
 *
 * Element k of a chunk is added to lane k % 8, each lane in increasing k. The
 * kernels cut a chunk into rows of 8 elements (one per lane): a thread takes a
 * row, computes its 8 pairs of terms (row_terms), and the thread of lane l then
 * adds the lane-l terms of consecutive rows in row order. A missing element
 * (past the end of the last chunk) contributes +0.0, which leaves a sum of
 * non-negative terms unchanged. */

template <class Dtype, bool TOLERANCE, bool RESCALED>
TP_RULE void row_terms(const typename Dtype::raw *a_row, const typename Dtype::raw *b_row,
                       int valid, int first_index, const Tolerance &tol, ElementStats &stats,
                       double *diff_squares, double *base_squares)
{
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < LANES; i++) {
        diff_squares[i] = 0.0;
        base_squares[i] = 0.0;
        if (i < valid) {
            if (RESCALED)
                rescaled_terms<Dtype>(a_row[i], b_row[i], diff_squares[i], base_squares[i]);
            else
                measure_element<Dtype, TOLERANCE>(a_row[i], b_row[i], first_index + i, tol,
                                                  stats, diff_squares[i], base_squares[i]);
        }
    }
}

/* A chunk's sum from its lane sums: ((L0+L1)+(L2+L3))+((L4+L5)+(L6+L7)). */
TP_RULE double pairwise_lanes(const double *lane_sums)
{
    return add(add(add(lane_sums[0], lane_sums[1]), add(lane_sums[2], lane_sums[3])),
               add(add(lane_sums[4], lane_sums[5]), add(lane_sums[6], lane_sums[7])));
}

TP_RULE void merge_stats(ElementStats &into, const ElementStats &other)
{
    into.max_abs = other.max_abs > into.max_abs ? other.max_abs : into.max_abs;
    into.max_rel = other.max_rel > into.max_rel ? other.max_rel : into.max_rel;
    into.mismatches += other.mismatches;
    into.first = other.first < into.first ? other.first : into.first;
    into.bytes_differ = into.bytes_differ || other.bytes_differ;
}

/* ---- sums ---- */

/* A sum of squares; level 1 means it holds the sum of (x * 2^-600)^2. */
struct ScaledSum {
    double value;
    int level;
};

/* compare.c's add_scaled: the running total over chunks, in chunk order. */
TP_RULE void add_scaled(ScaledSum &total, ScaledSum term)
{
    if (term.level > total.level) {
        total.value = multiply(multiply(total.value, SUM_SCALE), SUM_SCALE);
        total.level = 1;
    } else if (term.level < total.level) {
        term.value = multiply(multiply(term.value, SUM_SCALE), SUM_SCALE);
    }
    double sum = add(total.value, term.value);
    if (isinf(sum) && total.level == 0) {
        sum = add(multiply(multiply(total.value, SUM_SCALE), SUM_SCALE),
                  multiply(multiply(term.value, SUM_SCALE), SUM_SCALE));
        total.level = 1;
    }
    total.value = sum;
}

/* What one chunk contributes: the partial result the kernels write per chunk. */
struct ChunkPartial {
    double max_abs;
    double max_rel;
    ScaledSum diff_squares;
    ScaledSum base_squares;
    int64_t first_mismatch; /* index in the whole buffer, -1 when none */
    uint32_t mismatch_count;
    uint32_t bytes_differ;
};

/* All chunks combined: counts, first index and maxima are order-free; the two
 * sums are added in chunk order. */
struct CompareTotal {
    int64_t first_mismatch;
    uint64_t mismatch_count;
    double max_abs;
    double max_rel;
    ScaledSum diff_squares;
    ScaledSum base_squares;
    uint32_t bytes_differ;
};

TP_RULE CompareTotal empty_total()
{
    CompareTotal total = {-1, 0u, -1.0, -1.0, {0.0, 0}, {0.0, 0}, 0u};
    return total;
}

/* Order-free part of adding one chunk's partial to a total. */
TP_RULE void merge_unordered(CompareTotal &total, const ChunkPartial &chunk)
{
    if (chunk.first_mismatch >= 0 &&
        (total.first_mismatch < 0 || chunk.first_mismatch < total.first_mismatch))
        total.first_mismatch = chunk.first_mismatch;
    total.mismatch_count += chunk.mismatch_count;
    total.max_abs = chunk.max_abs > total.max_abs ? chunk.max_abs : total.max_abs;
    total.max_rel = chunk.max_rel > total.max_rel ? chunk.max_rel : total.max_rel;
    total.bytes_differ |= chunk.bytes_differ;
}

/* Order-free part of merging two totals (the sums are not touched). */
TP_RULE void merge_unordered_totals(CompareTotal &total, const CompareTotal &other)
{
    if (other.first_mismatch >= 0 &&
        (total.first_mismatch < 0 || other.first_mismatch < total.first_mismatch))
        total.first_mismatch = other.first_mismatch;
    total.mismatch_count += other.mismatch_count;
    total.max_abs = other.max_abs > total.max_abs ? other.max_abs : total.max_abs;
    total.max_rel = other.max_rel > total.max_rel ? other.max_rel : total.max_rel;
    total.bytes_differ |= other.bytes_differ;
}

/* sqrt(D)/sqrt(B), scaled back by 2^(600 * (level_D - level_B)). Host only:
 * ldexp's rounding of a subnormal result is then glibc's, as in the C core. */
static inline double relative_rms(ScaledSum diff_squares, ScaledSum base_squares)
{
    if (diff_squares.value == 0.0)
        return 0.0;
    if (base_squares.value == 0.0)
        return INFINITY;
    double ratio = sqrt(diff_squares.value) / sqrt(base_squares.value);
    return ldexp(ratio, SUM_SCALE_EXPONENT * (diff_squares.level - base_squares.level));
}

/* The magnitudes of the result tuple from a total (host only, like relative_rms):
 * byte-identical buffers have none; no finite error means inf. */
static inline void result_magnitudes(const CompareTotal &total, double *max_abs, double *max_rel,
                                     double *rms)
{
    if (!total.bytes_differ) {
        *max_abs = *max_rel = *rms = 0.0;
        return;
    }
    *max_abs = total.max_abs < 0.0 ? INFINITY : total.max_abs;
    *max_rel = total.max_rel < 0.0 ? INFINITY : total.max_rel;
    *rms = relative_rms(total.diff_squares, total.base_squares);
}

} /* namespace tp_rules */

#endif
