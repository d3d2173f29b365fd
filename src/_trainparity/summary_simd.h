/* The statistics of one group of 8 elements of a floating dtype, for x86 vector units: the
 * loops of summary.c and the fused digest+statistics stripe loops of digest_v2.c are built
 * from these, so both add in the same order.
 *
 * Each group's elements are converted exactly to double, element j of the group into lane
 * j: the same additions in the same order as summary.c's portable loops, so the same bits.
 * A group with a NaN or an Inf (rare) is counted apart; its non-finite elements add +0.0,
 * as in the portable loops. Only the sums depend on the order; maxima and counts are exact
 * in any order. */
#ifndef TRAINPARITY_SUMMARY_SIMD_H
#define TRAINPARITY_SUMMARY_SIMD_H

#include "summary.h"

#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SUMMARY_HAVE_X86 1
#include <immintrin.h>

#define SUMMARY_AVX2 __attribute__((target("avx2,f16c")))
#define SUMMARY_AVX512 __attribute__((target("avx512f,avx512dq,f16c")))

/* NaN and Inf counts of a group from its NaN and finite bit masks (`width` lanes). */
static inline void summary_count_specials(summary_lanes *acc, unsigned nan_bits,
                                          unsigned finite_bits, unsigned width)
{
    unsigned all = (1u << width) - 1u;
    acc->nan_count += (uint64_t)__builtin_popcount(nan_bits & all);
    acc->inf_count += (uint64_t)__builtin_popcount(~(finite_bits | nan_bits) & all);
}

/* ---- AVX2: lanes 0-3 in one register, 4-7 in the other ---- */

typedef struct {
    __m256d sum[2], squares[2], max_abs[2];
} avx2_acc;

SUMMARY_AVX2 static inline avx2_acc avx2_acc_load(const summary_lanes *acc)
{
    avx2_acc v;
    for (int half = 0; half < 2; half++) {
        v.sum[half] = _mm256_loadu_pd(acc->sum + 4 * half);
        v.squares[half] = _mm256_loadu_pd(acc->squares + 4 * half);
        v.max_abs[half] = _mm256_loadu_pd(acc->max_abs + 4 * half);
    }
    return v;
}

SUMMARY_AVX2 static inline void avx2_acc_store(summary_lanes *acc, const avx2_acc *v)
{
    for (int half = 0; half < 2; half++) {
        _mm256_storeu_pd(acc->sum + 4 * half, v->sum[half]);
        _mm256_storeu_pd(acc->squares + 4 * half, v->squares[half]);
        _mm256_storeu_pd(acc->max_abs + 4 * half, v->max_abs[half]);
    }
}

SUMMARY_AVX2 static inline void avx2_add4(avx2_acc *v, int half, summary_lanes *acc,
                                          __m256d value)
{
    __m256d magnitude = _mm256_andnot_pd(_mm256_set1_pd(-0.0), value);
    __m256d finite = _mm256_cmp_pd(magnitude, _mm256_set1_pd(INFINITY), _CMP_LT_OQ);
    unsigned finite_bits = (unsigned)_mm256_movemask_pd(finite);
    if (finite_bits != 0xFu)
        summary_count_specials(
            acc, (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(value, value, _CMP_UNORD_Q)),
            finite_bits, 4);
    __m256d kept = _mm256_and_pd(value, finite);
    v->sum[half] = _mm256_add_pd(v->sum[half], kept);
    v->squares[half] = _mm256_add_pd(v->squares[half], _mm256_mul_pd(kept, kept));
    v->max_abs[half] = _mm256_max_pd(v->max_abs[half], _mm256_and_pd(magnitude, finite));
}

/* Eight binary32 values (exact conversions of float16, bfloat16 or float32). */
SUMMARY_AVX2 static inline void avx2_add8_singles(avx2_acc *v, summary_lanes *acc, __m256 singles)
{
    avx2_add4(v, 0, acc, _mm256_cvtps_pd(_mm256_castps256_ps128(singles)));
    avx2_add4(v, 1, acc, _mm256_cvtps_pd(_mm256_extractf128_ps(singles, 1)));
}

SUMMARY_AVX2 static inline __m256 summary_load8_float32(const unsigned char *p)
{
    return _mm256_loadu_ps((const float *)(const void *)p);
}

SUMMARY_AVX2 static inline __m256 summary_load8_float16(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

SUMMARY_AVX2 static inline __m256 summary_load8_bfloat16(const unsigned char *p)
{
    __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
}

SUMMARY_AVX2 static inline void avx2_group_float16(avx2_acc *v, summary_lanes *acc,
                                                   const unsigned char *p)
{
    avx2_add8_singles(v, acc, summary_load8_float16(p));
}

SUMMARY_AVX2 static inline void avx2_group_bfloat16(avx2_acc *v, summary_lanes *acc,
                                                    const unsigned char *p)
{
    avx2_add8_singles(v, acc, summary_load8_bfloat16(p));
}

SUMMARY_AVX2 static inline void avx2_group_float32(avx2_acc *v, summary_lanes *acc,
                                                   const unsigned char *p)
{
    avx2_add8_singles(v, acc, summary_load8_float32(p));
}

SUMMARY_AVX2 static inline void avx2_group_float64(avx2_acc *v, summary_lanes *acc,
                                                   const unsigned char *p)
{
    avx2_add4(v, 0, acc, _mm256_loadu_pd((const double *)(const void *)p));
    avx2_add4(v, 1, acc, _mm256_loadu_pd((const double *)(const void *)(p + 32)));
}

/* ---- AVX-512: all eight lanes in one register ---- */

typedef struct {
    __m512d sum, squares, max_abs;
} avx512_acc;

SUMMARY_AVX512 static inline avx512_acc avx512_acc_load(const summary_lanes *acc)
{
    avx512_acc v = {_mm512_loadu_pd(acc->sum), _mm512_loadu_pd(acc->squares),
                    _mm512_loadu_pd(acc->max_abs)};
    return v;
}

SUMMARY_AVX512 static inline void avx512_acc_store(summary_lanes *acc, const avx512_acc *v)
{
    _mm512_storeu_pd(acc->sum, v->sum);
    _mm512_storeu_pd(acc->squares, v->squares);
    _mm512_storeu_pd(acc->max_abs, v->max_abs);
}

/* vfpclasspd categories: quiet NaN, +Inf, -Inf, signalling NaN. */
#define SUMMARY_NOT_FINITE 0x99
/* vrangepd: the operand of larger magnitude, sign cleared (max_abs is never negative). */
#define SUMMARY_MAX_MAGNITUDE 0x0B

/* Few vector operations per group, so that a fused loop is not bound by them: one
 * classification finds the (rare) non-finite elements, and vrangepd keeps the
 * largest magnitude without a separate |x|. */
SUMMARY_AVX512 static inline void avx512_add8(avx512_acc *v, summary_lanes *acc, __m512d value)
{
    __mmask8 special = _mm512_fpclass_pd_mask(value, SUMMARY_NOT_FINITE);
    if (special != 0) {
        unsigned nan_bits = (unsigned)_mm512_cmp_pd_mask(value, value, _CMP_UNORD_Q);
        summary_count_specials(acc, nan_bits, (unsigned)(__mmask8)~special, 8);
        value = _mm512_maskz_mov_pd((__mmask8)~special, value);
    }
    v->sum = _mm512_add_pd(v->sum, value);
    v->squares = _mm512_add_pd(v->squares, _mm512_mul_pd(value, value));
    v->max_abs = _mm512_range_pd(v->max_abs, value, SUMMARY_MAX_MAGNITUDE);
}

SUMMARY_AVX512 static inline void avx512_group_float16(avx512_acc *v, summary_lanes *acc,
                                                       const unsigned char *p)
{
    avx512_add8(v, acc, _mm512_cvtps_pd(summary_load8_float16(p)));
}

SUMMARY_AVX512 static inline void avx512_group_bfloat16(avx512_acc *v, summary_lanes *acc,
                                                        const unsigned char *p)
{
    avx512_add8(v, acc, _mm512_cvtps_pd(summary_load8_bfloat16(p)));
}

SUMMARY_AVX512 static inline void avx512_group_float32(avx512_acc *v, summary_lanes *acc,
                                                       const unsigned char *p)
{
    avx512_add8(v, acc, _mm512_cvtps_pd(summary_load8_float32(p)));
}

SUMMARY_AVX512 static inline void avx512_group_float64(avx512_acc *v, summary_lanes *acc,
                                                       const unsigned char *p)
{
    avx512_add8(v, acc, _mm512_loadu_pd((const double *)(const void *)p));
}

#endif /* x86-64 */

#endif
