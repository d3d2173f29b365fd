/* Digest version 2's lane hash: 8 lanes of 64-bit accumulators fed by 32x32->64-bit multiplies,
 * one stripe per step, so it vectorises (docs/design.md, "Digest version 2"). Four
 * implementations of one function: portable scalar, AVX2 and AVX-512 on x86-64 (chosen at run
 * time), NEON on arm64. They perform the same integer operations, so give the same bits.
 * The x86 ones also have fused loops that summarise each stripe's floating elements right
 * after hashing it (summary_simd.h), for digest_summary. */
#include "summary_simd.h" /* first: it includes Python.h */
#include "digest.h"

#ifdef SUMMARY_HAVE_X86 /* x86-64 with GCC or clang; immintrin.h is included */
#define V2_HAVE_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__BYTE_ORDER__) &&                    \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define V2_HAVE_NEON 1
#include <arm_neon.h>
#endif

#define V2_LANES 8
#define V2_ROTATION 27

/* The first 32 outputs of splitmix64 seeded with 0xB7E151628AED2A6A (the first
 * 64 fraction bits of e); docs/design.md shows how to regenerate them.
 * 0..7: lane secrets; 8..15: initial accumulators; 16..23: secrets folding the
 * lanes into four words; 24..31: secrets of the last two folds. */
static const uint64_t v2_secret[32] = {
    0x567D3963A8866CCDu, 0xDE1A18403914E4AAu, 0x1D49E1771463104Cu, 0xB005338B00ED2584u,
    0x43E2EBF499C03482u, 0x77BAFDDCCC2D5817u, 0x50A41BCD67D98852u, 0xC818DBBD3E52C6E3u,
    0x81AAE2E46CC953DDu, 0x03BB9A3CCB9E5B3Cu, 0x4E1A3A70FE3D2878u, 0xFB26837CE27A9DBDu,
    0x6C68088B629ECB5Fu, 0xED9E737369DF4B6Cu, 0x798DB35D819FD1A4u, 0x124ED8475547CE61u,
    0x8FBC0860B24F99EDu, 0x4E5482E4758AE430u, 0x62920672235E6CF3u, 0xB4DB2776A74DAC52u,
    0x9151A2454855032Cu, 0x25A7CA5DAD2FD35Du, 0x9FA788D9116F61C9u, 0x481E74181627721Fu,
    0x19F76E093A4ACEE1u, 0x0AD0B40A232D812Au, 0x4E934407DFD33477u, 0x868BAD1B082CA628u,
    0xE4AA2416FF661458u, 0xDF735C1B0DE4EF93u, 0x8165F8E231D12F80u, 0x92429298CA774488u,
};

static void v2_start(digest_lanes *lanes)
{
    for (int lane = 0; lane < V2_LANES; lane++)
        lanes->acc[lane] = v2_secret[8 + lane];
}

/* The step of lane l over stripe words d[0..7]:
 *     x = d[l] ^ secret[l]
 *     acc[l] = rotl(acc[l], 27) + d[l ^ 1] + lo32(x) * hi32(x)
 * The product mixes the lane's word; the neighbour's raw word is added too, so no
 * word is lost when a product is zero, and a changed word always changes the
 * state. The rotation makes each step a bijection of the accumulator that does
 * not commute with the next one: reordered stripes change the result. */
static void v2_absorb_scalar(digest_lanes *lanes, const unsigned char *p, size_t stripes)
{
    uint64_t acc[V2_LANES];
    memcpy(acc, lanes->acc, sizeof acc);
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {
        uint64_t words[V2_LANES];
        for (int lane = 0; lane < V2_LANES; lane++)
            words[lane] = digest_load_le64(p + 8 * lane);
        for (int lane = 0; lane < V2_LANES; lane++) {
            uint64_t x = words[lane] ^ v2_secret[lane];
            uint64_t product = (x & 0xFFFFFFFFu) * (x >> 32);
            acc[lane] = digest_rotl64(acc[lane], V2_ROTATION) + words[lane ^ 1] + product;
        }
    }
    memcpy(lanes->acc, acc, sizeof acc);
}

/* Four 64-bit folds of the eight lanes, then two folds with the tag and length,
 * then two outputs that each depend on every lane. */
static void v2_finish(const digest_lanes *lanes, uint64_t tag, uint64_t length,
                      unsigned char out[16])
{
    const uint64_t *k = v2_secret;
    const uint64_t *acc = lanes->acc;
    uint64_t folded[4];
    for (int i = 0; i < 4; i++)
        folded[i] = digest_mum(acc[i] ^ k[16 + i], acc[i + 4] ^ k[20 + i]);
    uint64_t left = digest_mum(folded[0] ^ tag ^ k[24], folded[1] ^ k[25]);
    uint64_t right = digest_mum(folded[2] ^ length ^ k[26], folded[3] ^ k[27]);
    digest_store_le64(out, digest_mum(left ^ k[28], right ^ k[29]));
    digest_store_le64(out + 8, digest_mum(left ^ k[30], right ^ k[31]));
}

static const digest_hasher v2_scalar = {
    .path = "scalar",
    .supported = digest_always_supported,
    .start = v2_start,
    .absorb = v2_absorb_scalar,
    .finish = v2_finish,
};

#ifdef V2_HAVE_X86

/* Lanes 0-3 in one register, 4-7 in the other; l ^ 1 is the other 64-bit half
 * of the same 128-bit block, so one in-lane shuffle brings each lane its neighbour. */
__attribute__((target("avx2"))) static inline __m256i v2_avx2_step(__m256i acc, __m256i words,
                                                                    __m256i secret)
{
    __m256i x = _mm256_xor_si256(words, secret);
    __m256i product = _mm256_mul_epu32(x, _mm256_srli_epi64(x, 32));
    __m256i neighbour = _mm256_shuffle_epi32(words, _MM_SHUFFLE(1, 0, 3, 2));
    __m256i rotated = _mm256_or_si256(_mm256_slli_epi64(acc, V2_ROTATION),
                                      _mm256_srli_epi64(acc, 64 - V2_ROTATION));
    return _mm256_add_epi64(rotated, _mm256_add_epi64(neighbour, product));
}

/* The AVX2 loop's registers: accumulators and secrets. */
typedef struct {
    __m256i acc_low, acc_high, secret_low, secret_high;
} v2_avx2_state;

__attribute__((target("avx2"))) static inline v2_avx2_state v2_avx2_load(const digest_lanes *lanes)
{
    v2_avx2_state state = {
        _mm256_loadu_si256((const __m256i *)(const void *)lanes->acc),
        _mm256_loadu_si256((const __m256i *)(const void *)(lanes->acc + 4)),
        _mm256_loadu_si256((const __m256i *)(const void *)v2_secret),
        _mm256_loadu_si256((const __m256i *)(const void *)(v2_secret + 4)),
    };
    return state;
}

__attribute__((target("avx2"))) static inline void v2_avx2_stripe(v2_avx2_state *state,
                                                                  const unsigned char *p)
{
    __m256i words_low = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i words_high = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    state->acc_low = v2_avx2_step(state->acc_low, words_low, state->secret_low);
    state->acc_high = v2_avx2_step(state->acc_high, words_high, state->secret_high);
}

__attribute__((target("avx2"))) static inline void v2_avx2_store(digest_lanes *lanes,
                                                                 const v2_avx2_state *state)
{
    _mm256_storeu_si256((__m256i *)(void *)lanes->acc, state->acc_low);
    _mm256_storeu_si256((__m256i *)(void *)(lanes->acc + 4), state->acc_high);
}

__attribute__((target("avx2"))) static void v2_absorb_avx2(digest_lanes *lanes,
                                                           const unsigned char *p, size_t stripes)
{
    v2_avx2_state state = v2_avx2_load(lanes);
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES)
        v2_avx2_stripe(&state, p);
    v2_avx2_store(lanes, &state);
}

/* Fused: each stripe hashed, then its 64 / ELEMENT_BYTES elements summarised in
 * groups of 8, in order. */
#define V2_AVX2_FUSED(NAME, ELEMENT_BYTES, GROUP)                                             \
    SUMMARY_AVX2 static void NAME(digest_lanes *lanes, struct summary_lanes *sums,            \
                                  const unsigned char *p, size_t stripes)                     \
    {                                                                                         \
        v2_avx2_state state = v2_avx2_load(lanes);                                            \
        avx2_acc v = avx2_acc_load(sums);                                                     \
        for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {                      \
            v2_avx2_stripe(&state, p);                                                        \
            for (size_t g = 0; g < DIGEST_STRIPE_BYTES / (8 * (ELEMENT_BYTES)); g++)          \
                GROUP(&v, sums, p + g * 8 * (ELEMENT_BYTES));                                 \
        }                                                                                     \
        v2_avx2_store(lanes, &state);                                                         \
        avx2_acc_store(sums, &v);                                                             \
    }

V2_AVX2_FUSED(v2_avx2_float16, 2, avx2_group_float16)
V2_AVX2_FUSED(v2_avx2_bfloat16, 2, avx2_group_bfloat16)
V2_AVX2_FUSED(v2_avx2_float32, 4, avx2_group_float32)
V2_AVX2_FUSED(v2_avx2_float64, 8, avx2_group_float64)

static int v2_avx2_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

static const digest_hasher v2_avx2 = {
    .path = "avx2",
    .supported = v2_avx2_supported,
    .start = v2_start,
    .absorb = v2_absorb_avx2,
    .finish = v2_finish,
    .absorb_with_stats = {v2_avx2_float16, v2_avx2_bfloat16, v2_avx2_float32, v2_avx2_float64},
};

/* One register holds all eight lanes of a stripe. */
__attribute__((target("avx512f"))) static inline __m512i v2_avx512_stripe(__m512i acc,
                                                                          __m512i secret,
                                                                          const unsigned char *p)
{
    __m512i words = _mm512_loadu_si512((const void *)p);
    __m512i x = _mm512_xor_si512(words, secret);
    __m512i product = _mm512_mul_epu32(x, _mm512_srli_epi64(x, 32));
    __m512i neighbour = _mm512_shuffle_epi32(words, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2));
    return _mm512_add_epi64(_mm512_rol_epi64(acc, V2_ROTATION),
                            _mm512_add_epi64(neighbour, product));
}

__attribute__((target("avx512f"))) static void v2_absorb_avx512(digest_lanes *lanes,
                                                                const unsigned char *p,
                                                                size_t stripes)
{
    __m512i acc = _mm512_loadu_si512((const void *)lanes->acc);
    const __m512i secret = _mm512_loadu_si512((const void *)v2_secret);
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES)
        acc = v2_avx512_stripe(acc, secret, p);
    _mm512_storeu_si512((void *)lanes->acc, acc);
}

#define V2_AVX512_FUSED(NAME, ELEMENT_BYTES, GROUP)                                           \
    SUMMARY_AVX512 static void NAME(digest_lanes *lanes, struct summary_lanes *sums,          \
                                    const unsigned char *p, size_t stripes)                   \
    {                                                                                         \
        __m512i acc = _mm512_loadu_si512((const void *)lanes->acc);                           \
        const __m512i secret = _mm512_loadu_si512((const void *)v2_secret);                   \
        avx512_acc v = avx512_acc_load(sums);                                                 \
        for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {                      \
            acc = v2_avx512_stripe(acc, secret, p);                                           \
            for (size_t g = 0; g < DIGEST_STRIPE_BYTES / (8 * (ELEMENT_BYTES)); g++)          \
                GROUP(&v, sums, p + g * 8 * (ELEMENT_BYTES));                                 \
        }                                                                                     \
        _mm512_storeu_si512((void *)lanes->acc, acc);                                         \
        avx512_acc_store(sums, &v);                                                           \
    }

V2_AVX512_FUSED(v2_avx512_float16, 2, avx512_group_float16)
V2_AVX512_FUSED(v2_avx512_bfloat16, 2, avx512_group_bfloat16)
V2_AVX512_FUSED(v2_avx512_float32, 4, avx512_group_float32)
V2_AVX512_FUSED(v2_avx512_float64, 8, avx512_group_float64)

static int v2_avx512_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static const digest_hasher v2_avx512 = {
    .path = "avx512",
    .supported = v2_avx512_supported,
    .start = v2_start,
    .absorb = v2_absorb_avx512,
    .finish = v2_finish,
    .absorb_with_stats = {v2_avx512_float16, v2_avx512_bfloat16, v2_avx512_float32,
                          v2_avx512_float64},
};

#endif /* V2_HAVE_X86 */

#ifdef V2_HAVE_NEON

/* Two lanes per register (0-1, 2-3, 4-5, 6-7); l ^ 1 is the register's other half. */
static void v2_absorb_neon(digest_lanes *lanes, const unsigned char *p, size_t stripes)
{
    uint64x2_t acc[4], secret[4];
    for (int i = 0; i < 4; i++) {
        acc[i] = vld1q_u64(lanes->acc + 2 * i);
        secret[i] = vld1q_u64(v2_secret + 2 * i);
    }
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {
        for (int i = 0; i < 4; i++) {
            uint64x2_t words = vreinterpretq_u64_u8(vld1q_u8(p + 16 * i));
            uint64x2_t x = veorq_u64(words, secret[i]);
            uint64x2_t product = vmull_u32(vmovn_u64(x), vshrn_n_u64(x, 32));
            uint64x2_t neighbour = vextq_u64(words, words, 1);
            uint64x2_t rotated =
                vsriq_n_u64(vshlq_n_u64(acc[i], V2_ROTATION), acc[i], 64 - V2_ROTATION);
            acc[i] = vaddq_u64(rotated, vaddq_u64(neighbour, product));
        }
    }
    for (int i = 0; i < 4; i++)
        vst1q_u64(lanes->acc + 2 * i, acc[i]);
}

static const digest_hasher v2_neon = {
    .path = "neon",
    .supported = digest_always_supported,
    .start = v2_start,
    .absorb = v2_absorb_neon,
    .finish = v2_finish,
};

#endif /* V2_HAVE_NEON */

const digest_hasher *const digest_v2_hashers[] = {
    &v2_scalar,
#ifdef V2_HAVE_X86
    &v2_avx2,
    &v2_avx512,
#endif
#ifdef V2_HAVE_NEON
    &v2_neon,
#endif
    NULL,
};
