/* Internal interface of the digest: each version's lane hash (digest_v1.c, digest_v2.c) in one
 * shape, so that the chunking, threads and Python API (digest.c) serve every version. */
#ifndef TRAINPARITY_DIGEST_H
#define TRAINPARITY_DIGEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Every version consumes its input in stripes of 64 bytes, the last one zero-padded. */
#define DIGEST_STRIPE_BYTES 64
/* The most lanes any version has (version 1: 4, version 2: 8). */
#define DIGEST_MAX_LANES 8

typedef struct {
    uint64_t acc[DIGEST_MAX_LANES];
} digest_lanes;

/* A chunk's statistics lanes (summary.h), for the fused loops. */
struct summary_lanes;
/* The floating dtypes a fused loop may exist for, in summary.h's order
 * (SUMMARY_FLOAT16, SUMMARY_BFLOAT16, SUMMARY_FLOAT32, SUMMARY_FLOAT64). */
#define DIGEST_FUSED_DTYPES 4

/* One implementation of one version's lane hash H(message, tag, length). The
 * implementations of a version differ only in speed, never in a bit. */
typedef struct {
    const char *path; /* "scalar", "avx2", "avx512", "neon" */
    int (*supported)(void); /* whether this CPU runs it */
    void (*start)(digest_lanes *lanes);
    /* Absorbs `stripes` whole 64-byte stripes at p (any alignment). */
    void (*absorb)(digest_lanes *lanes, const unsigned char *p, size_t stripes);
    /* Folds the lanes, tag and length into the 16 output bytes. */
    void (*finish)(const digest_lanes *lanes, uint64_t tag, uint64_t length,
                   unsigned char out[16]);
    /* absorb, and in the same loop add the stripes' elements of one floating dtype to
     * a chunk's statistics (summary_simd.h's groups, so summary.c's bits), one stripe
     * after the other; NULL where this implementation has none. Runs only where the
     * statistics path of the same name is supported. */
    void (*absorb_with_stats[DIGEST_FUSED_DTYPES])(digest_lanes *lanes,
                                                   struct summary_lanes *sums,
                                                   const unsigned char *p, size_t stripes);
} digest_hasher;

/* Version 1's one implementation. */
extern const digest_hasher digest_v1_scalar;
/* Version 2's implementations compiled into this build, portable scalar first,
 * then faster ones; NULL-terminated. */
extern const digest_hasher *const digest_v2_hashers[];

static inline int digest_always_supported(void)
{
    return 1;
}

/* Folded multiply: the 128-bit product's low half XOR its high half. */
static inline uint64_t digest_mum(uint64_t a, uint64_t b)
{
    __extension__ typedef unsigned __int128 u128;
    u128 product = (u128)a * b;
    return (uint64_t)product ^ (uint64_t)(product >> 64);
}

static inline uint64_t digest_rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64u - r));
}

/* memcpy: inputs may sit at any alignment; compilers turn it into one load. */
static inline uint64_t digest_load_le64(const unsigned char *p)
{
    uint64_t word;
    memcpy(&word, p, sizeof word);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    return word;
}

static inline void digest_store_le64(unsigned char *p, uint64_t word)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    memcpy(p, &word, sizeof word);
}

#endif
