/* The lane hashes of digest versions 1 and 2 (docs/design.md, "Digest"), written once for the
 * CUDA kernels and their host emulation (tests/gpu/emulate_kernels.cpp).
 *
 * Both versions cut a message into 64-byte stripes; each lane is a sequential chain over the
 * stripes that reads one 16-byte block of each stripe (block_of(lane)) as two little-endian
 * words. A version is a traits struct (V1, V2) with the same members, so one kernel and one
 * emulation serve both. */
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
constexpr uint64_t STRIPE_BYTES = 64;
constexpr uint64_t BLOCK_BYTES = 16; /* what one lane reads of each stripe */
constexpr int BLOCKS_PER_STRIPE = 4;
constexpr uint64_t ROOT_TAG = ~(uint64_t)0;

/* Version 1's K[0..19]: splitmix64 seeded with the first 64 fraction bits of pi. */
#define TP_DIGEST_V1_SECRETS                                                                  \
    {0x2CB0F69F4ABEA221u, 0x9417034723148989u, 0xDD555950609DFE03u, 0xDBAFB150DEB12800u,     \
     0x7E789B2E6C442CB6u, 0xF41E5636C7E4F8C4u, 0x0959D150F8FBA7E4u, 0xA97316F13CDB9EEAu,     \
     0x74CD8258F9520068u, 0x55C74A62E116868Bu, 0xD2F4C799A2023CBDu, 0xDF98CB79A37B51B9u,     \
     0x396F5885524F3905u, 0xAF1D56386CA3B276u, 0xA9FFBE6B5104E85Au, 0x6BD0C51B9FD533B3u,     \
     0x980CE91C50AB4B56u, 0x28AC395780FE62C5u, 0x768912E3A6BCEDC7u, 0x50B3E8C9332C7C88u}

/* Version 2's S[0..31]: splitmix64 seeded with the first 64 fraction bits of e. */
#define TP_DIGEST_V2_SECRETS                                                                  \
    {0x567D3963A8866CCDu, 0xDE1A18403914E4AAu, 0x1D49E1771463104Cu, 0xB005338B00ED2584u,     \
     0x43E2EBF499C03482u, 0x77BAFDDCCC2D5817u, 0x50A41BCD67D98852u, 0xC818DBBD3E52C6E3u,     \
     0x81AAE2E46CC953DDu, 0x03BB9A3CCB9E5B3Cu, 0x4E1A3A70FE3D2878u, 0xFB26837CE27A9DBDu,     \
     0x6C68088B629ECB5Fu, 0xED9E737369DF4B6Cu, 0x798DB35D819FD1A4u, 0x124ED8475547CE61u,     \
     0x8FBC0860B24F99EDu, 0x4E5482E4758AE430u, 0x62920672235E6CF3u, 0xB4DB2776A74DAC52u,     \
     0x9151A2454855032Cu, 0x25A7CA5DAD2FD35Du, 0x9FA788D9116F61C9u, 0x481E74181627721Fu,     \
     0x19F76E093A4ACEE1u, 0x0AD0B40A232D812Au, 0x4E934407DFD33477u, 0x868BAD1B082CA628u,     \
     0xE4AA2416FF661458u, 0xDF735C1B0DE4EF93u, 0x8165F8E231D12F80u, 0x92429298CA774488u}

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

/* Version 1: 4 lanes; lane l reads block l and multiplies both its words (64x64->128). */
struct V1 {
    static constexpr int VERSION = 1;
    static constexpr int LANES = 4;
    static constexpr int SECRET_WORDS = 20;
    static constexpr unsigned ROTATION = 23;

    struct Lane {
        uint64_t first_secret, second_secret;
    };

    TP_DIGEST_RULE static int block_of(int lane)
    {
        return lane;
    }
    TP_DIGEST_RULE static Lane lane_of(int lane, const uint64_t *k)
    {
        return Lane{k[2 * lane], k[2 * lane + 1]};
    }
    TP_DIGEST_RULE static uint64_t initial(int lane, const uint64_t *k)
    {
        return k[16 + lane];
    }
    TP_DIGEST_RULE static uint64_t step(uint64_t acc, uint64_t first, uint64_t second, Lane lane)
    {
        uint64_t mixed = mum(first ^ lane.first_secret, second ^ lane.second_secret ^ acc);
        return mixed + (rotl64(acc, ROTATION) ^ first ^ second);
    }
    /* The four accumulators, tag and length into the two little-endian output words. */
    TP_DIGEST_RULE static void finish(const uint64_t *acc, uint64_t tag, uint64_t length,
                                      const uint64_t *k, uint64_t *words)
    {
        uint64_t left = mum(acc[0] ^ tag ^ k[8], acc[1] ^ k[9]);
        uint64_t right = mum(acc[2] ^ length ^ k[10], acc[3] ^ k[11]);
        words[0] = mum(left ^ k[12], right ^ k[13]);
        words[1] = mum(left ^ k[14], right ^ k[15]);
    }
};

/* Version 2: 8 lanes; lane l reads word l of the stripe (its own) and word l ^ 1 (its
 * neighbour), which are the two words of block l / 2. */
struct V2 {
    static constexpr int VERSION = 2;
    static constexpr int LANES = 8;
    static constexpr int SECRET_WORDS = 32;
    static constexpr unsigned ROTATION = 27;

    struct Lane {
        uint64_t secret;
        bool odd; /* own word is the block's second */
    };

    TP_DIGEST_RULE static int block_of(int lane)
    {
        return lane / 2;
    }
    TP_DIGEST_RULE static Lane lane_of(int lane, const uint64_t *k)
    {
        return Lane{k[lane], (lane & 1) != 0};
    }
    TP_DIGEST_RULE static uint64_t initial(int lane, const uint64_t *k)
    {
        return k[8 + lane];
    }
    TP_DIGEST_RULE static uint64_t step(uint64_t acc, uint64_t first, uint64_t second, Lane lane)
    {
        uint64_t own = lane.odd ? second : first;
        uint64_t neighbour = lane.odd ? first : second;
        uint64_t x = own ^ lane.secret;
        return rotl64(acc, ROTATION) + neighbour + (x & 0xFFFFFFFFu) * (x >> 32);
    }
    /* The eight accumulators folded into four words, then with tag and length into two. */
    TP_DIGEST_RULE static void finish(const uint64_t *acc, uint64_t tag, uint64_t length,
                                      const uint64_t *k, uint64_t *words)
    {
        uint64_t folded[4];
        for (int i = 0; i < 4; i++)
            folded[i] = mum(acc[i] ^ k[16 + i], acc[i + 4] ^ k[20 + i]);
        uint64_t left = mum(folded[0] ^ tag ^ k[24], folded[1] ^ k[25]);
        uint64_t right = mum(folded[2] ^ length ^ k[26], folded[3] ^ k[27]);
        words[0] = mum(left ^ k[28], right ^ k[29]);
        words[1] = mum(left ^ k[30], right ^ k[31]);
    }
};

} /* namespace tp_digest */

#endif
