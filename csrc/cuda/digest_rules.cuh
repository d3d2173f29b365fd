/* The lane hash of the digest (docs/design.md, "Digest"), written once for the CUDA
 * kernels and their host emulation (tests/gpu/emulate_kernels.cpp). */
#ifndef TRAINPARITY_CUDA_DIGEST_RULES_CUH
#define TRAINPARITY_CUDA_DIGEST_RULES_CUH

#include <stdint.h>

#if defined(__CUDACC__)
#define TP_DIGEST_RULE __host__ __device__ __forceinline__
#else
#define TP_DIGEST_RULE inline
#endif

namespace tp_digest {

constexpr uint64_t CHUNK_BYTES = 65536;
constexpr int LANES = 4;
constexpr uint64_t STRIPE_BYTES = 64;
constexpr uint64_t LANE_BYTES = 16;
constexpr unsigned LANE_ROTATION = 23;
constexpr uint64_t ROOT_TAG = ~(uint64_t)0;

/* K[0..19]: splitmix64 seeded with the first 64 fraction bits of pi. */
#define TP_DIGEST_SECRETS                                                                     \
    {0x2CB0F69F4ABEA221u, 0x9417034723148989u, 0xDD555950609DFE03u, 0xDBAFB150DEB12800u,     \
     0x7E789B2E6C442CB6u, 0xF41E5636C7E4F8C4u, 0x0959D150F8FBA7E4u, 0xA97316F13CDB9EEAu,     \
     0x74CD8258F9520068u, 0x55C74A62E116868Bu, 0xD2F4C799A2023CBDu, 0xDF98CB79A37B51B9u,     \
     0x396F5885524F3905u, 0xAF1D56386CA3B276u, 0xA9FFBE6B5104E85Au, 0x6BD0C51B9FD533B3u,     \
     0x980CE91C50AB4B56u, 0x28AC395780FE62C5u, 0x768912E3A6BCEDC7u, 0x50B3E8C9332C7C88u}

/* Folded multiply: the 128-bit product's low half XOR its high half. */
TP_DIGEST_RULE uint64_t mum(uint64_t a, uint64_t b)
{
#if defined(__CUDA_ARCH__)
    return (a * b) ^ __umul64hi(a, b);
#else
    unsigned __int128 product = (unsigned __int128)a * b;
    return (uint64_t)product ^ (uint64_t)(product >> 64);
#endif
}

TP_DIGEST_RULE uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64u - r));
}

/* One lane's step over its two words of a stripe; secret_first/second are
 * K[2l] and K[2l+1] of lane l. */
TP_DIGEST_RULE uint64_t lane_step(uint64_t acc, uint64_t first, uint64_t second,
                                  uint64_t secret_first, uint64_t secret_second)
{
    uint64_t mixed = mum(first ^ secret_first, second ^ secret_second ^ acc);
    return mixed + (rotl64(acc, LANE_ROTATION) ^ first ^ second);
}

/* The finaliser: the four lane accumulators, tag and length into two words,
 * whose little-endian bytes are the 16-byte hash. `k` is K[0..19]. */
TP_DIGEST_RULE void finish(const uint64_t *acc, uint64_t tag, uint64_t length, const uint64_t *k,
                           uint64_t *words)
{
    uint64_t left = mum(acc[0] ^ tag ^ k[8], acc[1] ^ k[9]);
    uint64_t right = mum(acc[2] ^ length ^ k[10], acc[3] ^ k[11]);
    words[0] = mum(left ^ k[12], right ^ k[13]);
    words[1] = mum(left ^ k[14], right ^ k[15]);
}

} /* namespace tp_digest */

#endif
