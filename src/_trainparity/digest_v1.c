/* Digest version 1's lane hash: 4 lanes of 64x64->128-bit folded multiplies (docs/design.md,
 * "Digest version 1"). Kept so that snapshots recorded with version 1 can still be checked. */
#include "digest.h"

#define V1_LANES 4
#define V1_LANE_ROTATION 23

/* The first 20 outputs of splitmix64 seeded with 0x243F6A8885A308D3 (the first
 * 64 fraction bits of pi); docs/design.md shows how to regenerate them.
 * 0..7: lane secrets (lane l XORs 2l into its first word, 2l+1 into its second);
 * 8..15: finaliser secrets; 16..19: initial lane accumulators. */
static const uint64_t v1_secret[20] = {
    0x2CB0F69F4ABEA221u, 0x9417034723148989u, 0xDD555950609DFE03u, 0xDBAFB150DEB12800u,
    0x7E789B2E6C442CB6u, 0xF41E5636C7E4F8C4u, 0x0959D150F8FBA7E4u, 0xA97316F13CDB9EEAu,
    0x74CD8258F9520068u, 0x55C74A62E116868Bu, 0xD2F4C799A2023CBDu, 0xDF98CB79A37B51B9u,
    0x396F5885524F3905u, 0xAF1D56386CA3B276u, 0xA9FFBE6B5104E85Au, 0x6BD0C51B9FD533B3u,
    0x980CE91C50AB4B56u, 0x28AC395780FE62C5u, 0x768912E3A6BCEDC7u, 0x50B3E8C9332C7C88u,
};

static void v1_start(digest_lanes *lanes)
{
    for (int lane = 0; lane < V1_LANES; lane++)
        lanes->acc[lane] = v1_secret[16 + lane];
}

/* One lane's step over its 16 bytes of a stripe. The accumulator enters the
 * product, so the order of stripes matters; the rotated accumulator and both
 * words are also added outside the product, so a product that happens to be
 * zero (an operand equal to a secret) still keeps the state and the data. */
static inline uint64_t v1_lane_step(uint64_t acc, const unsigned char *words, int lane)
{
    uint64_t first = digest_load_le64(words);
    uint64_t second = digest_load_le64(words + 8);
    uint64_t mixed =
        digest_mum(first ^ v1_secret[2 * lane], second ^ v1_secret[2 * lane + 1] ^ acc);
    return mixed + (digest_rotl64(acc, V1_LANE_ROTATION) ^ first ^ second);
}

static void v1_absorb(digest_lanes *lanes, const unsigned char *p, size_t stripes)
{
    uint64_t acc0 = lanes->acc[0], acc1 = lanes->acc[1];
    uint64_t acc2 = lanes->acc[2], acc3 = lanes->acc[3];
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {
        acc0 = v1_lane_step(acc0, p, 0);
        acc1 = v1_lane_step(acc1, p + 16, 1);
        acc2 = v1_lane_step(acc2, p + 32, 2);
        acc3 = v1_lane_step(acc3, p + 48, 3);
    }
    lanes->acc[0] = acc0;
    lanes->acc[1] = acc1;
    lanes->acc[2] = acc2;
    lanes->acc[3] = acc3;
}

static void v1_finish(const digest_lanes *lanes, uint64_t tag, uint64_t length,
                      unsigned char out[16])
{
    const uint64_t *k = v1_secret;
    const uint64_t *acc = lanes->acc;
    uint64_t left = digest_mum(acc[0] ^ tag ^ k[8], acc[1] ^ k[9]);
    uint64_t right = digest_mum(acc[2] ^ length ^ k[10], acc[3] ^ k[11]);
    digest_store_le64(out, digest_mum(left ^ k[12], right ^ k[13]));
    digest_store_le64(out + 8, digest_mum(left ^ k[14], right ^ k[15]));
}

const digest_hasher digest_v1_scalar = {
    .path = "scalar",
    .supported = digest_always_supported,
    .start = v1_start,
    .absorb = v1_absorb,
    .finish = v1_finish,
};
