/* CUDA digest of a device buffer: byte-identical to the C core's digest (docs/design.md, "Digest").
 *
 * chunk_digest_kernel gives each 64 KiB chunk a group of 4 threads, one per
 * lane (a lane is a sequential chain over the chunk's 1024 stripes); lane 0
 * finishes the chunk with its index as tag. root_digest_kernel then hashes the
 * ordered chunk digests with 4 threads, exactly as the C core's root hash.
 * Which thread hashed which chunk cannot change a digest. */
#include <cuda_runtime.h>

#include "digest_rules.cuh"
#include "launchers.h"

using namespace tp_digest;

namespace {

constexpr unsigned DEFAULT_BLOCK_THREADS = 256;
constexpr unsigned MAX_BLOCK_THREADS = 256;
/* Stripes loaded ahead of the lane's dependent chain of multiplies. */
constexpr int PREFETCH_STRIPES = 4;
constexpr size_t ROOT_OFFSET = 0; /* two words of the result */
constexpr size_t CHUNK_DIGESTS_OFFSET = 256;

__constant__ uint64_t SECRET[20] = TP_DIGEST_SECRETS;

/* The two little-endian words at p (16 bytes). ALIGNED: p is 16-byte aligned. */
template <bool ALIGNED>
__device__ __forceinline__ void load_lane_words(const unsigned char *p, uint64_t &first,
                                                uint64_t &second)
{
    if (ALIGNED) {
        uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
        first = (uint64_t)v.x | ((uint64_t)v.y << 32);
        second = (uint64_t)v.z | ((uint64_t)v.w << 32);
        return;
    }
    first = 0;
    second = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        first |= (uint64_t)__ldg(p + i) << (8 * i);
        second |= (uint64_t)__ldg(p + 8 + i) << (8 * i);
    }
}

/* Bytes [offset, offset + 16) of a zero-padded last stripe holding `tail` bytes. */
__device__ __forceinline__ void load_tail_words(const unsigned char *stripe, uint64_t offset,
                                                uint64_t tail, uint64_t &first, uint64_t &second)
{
    first = 0;
    second = 0;
    for (uint64_t i = 0; i < LANE_BYTES; i++) {
        uint64_t byte = offset + i < tail ? (uint64_t)stripe[offset + i] : 0u;
        if (i < 8)
            first |= byte << (8 * i);
        else
            second |= byte << (8 * (i - 8));
    }
}

/* The four lanes' accumulators, gathered from the group of 4 threads. */
__device__ __forceinline__ void gather_lanes(uint64_t acc, unsigned mask, uint64_t *lanes)
{
#pragma unroll
    for (int l = 0; l < LANES; l++)
        lanes[l] = __shfl_sync(mask, (unsigned long long)acc, l, LANES);
}

template <bool ALIGNED>
__global__ void __launch_bounds__(MAX_BLOCK_THREADS)
    chunk_digest_kernel(const unsigned char *data, uint64_t byte_count, uint64_t chunk_count,
                        uint64_t *chunk_digests)
{
    const int lane = (int)(threadIdx.x % LANES);
    const unsigned mask = 0xFu << ((threadIdx.x % 32u) & ~(unsigned)(LANES - 1));
    const uint64_t secret_first = SECRET[2 * lane], secret_second = SECRET[2 * lane + 1];
    const uint64_t groups_per_block = blockDim.x / LANES;
    const uint64_t group_count = (uint64_t)gridDim.x * groups_per_block;
    for (uint64_t chunk = blockIdx.x * groups_per_block + threadIdx.x / LANES; chunk < chunk_count;
         chunk += group_count) {
        const uint64_t offset = chunk * CHUNK_BYTES;
        const uint64_t length = byte_count - offset < CHUNK_BYTES ? byte_count - offset
                                                                  : CHUNK_BYTES;
        const uint64_t stripes = length / STRIPE_BYTES;
        const unsigned char *lane_data = data + offset + LANE_BYTES * lane;
        uint64_t acc = SECRET[16 + lane];
        uint64_t s = 0;
        for (; s + PREFETCH_STRIPES <= stripes; s += PREFETCH_STRIPES) {
            uint64_t first[PREFETCH_STRIPES], second[PREFETCH_STRIPES];
#pragma unroll
            for (int p = 0; p < PREFETCH_STRIPES; p++)
                load_lane_words<ALIGNED>(lane_data + (s + p) * STRIPE_BYTES, first[p], second[p]);
#pragma unroll
            for (int p = 0; p < PREFETCH_STRIPES; p++)
                acc = lane_step(acc, first[p], second[p], secret_first, secret_second);
        }
        for (; s < stripes; s++) {
            uint64_t first, second;
            load_lane_words<ALIGNED>(lane_data + s * STRIPE_BYTES, first, second);
            acc = lane_step(acc, first, second, secret_first, secret_second);
        }
        const uint64_t tail = length - stripes * STRIPE_BYTES;
        if (tail > 0) {
            uint64_t first, second;
            load_tail_words(data + offset + stripes * STRIPE_BYTES, LANE_BYTES * lane, tail,
                            first, second);
            acc = lane_step(acc, first, second, secret_first, secret_second);
        }
        uint64_t lanes[LANES];
        gather_lanes(acc, mask, lanes);
        if (lane == 0) {
            uint64_t secrets[20] = TP_DIGEST_SECRETS;
            finish(lanes, chunk, length, secrets, chunk_digests + 2 * chunk);
        }
    }
}

/* The root hash over the chunk digests (16 bytes each, so lane l of stripe s is
 * chunk digest 4s + l): one group of 4 threads. */
__global__ void root_digest_kernel(const uint64_t *chunk_digests, uint64_t chunk_count,
                                   uint64_t byte_count, uint64_t *root)
{
    const int lane = (int)threadIdx.x;
    const uint64_t secret_first = SECRET[2 * lane], secret_second = SECRET[2 * lane + 1];
    uint64_t acc = SECRET[16 + lane];
    const uint64_t stripes = (chunk_count + LANES - 1) / LANES;
    for (uint64_t s = 0; s < stripes; s++) {
        uint64_t index = s * LANES + (uint64_t)lane;
        /* Past the last digest, the zero padding of the last stripe. */
        uint64_t first = index < chunk_count ? chunk_digests[2 * index] : 0u;
        uint64_t second = index < chunk_count ? chunk_digests[2 * index + 1] : 0u;
        acc = lane_step(acc, first, second, secret_first, secret_second);
    }
    uint64_t lanes[LANES];
    gather_lanes(acc, 0xFu, lanes);
    if (lane == 0) {
        uint64_t secrets[20] = TP_DIGEST_SECRETS;
        finish(lanes, ROOT_TAG, byte_count, secrets, root);
    }
}

uint64_t chunk_count_of(size_t byte_count)
{
    return (byte_count + CHUNK_BYTES - 1) / CHUNK_BYTES;
}

} /* namespace */

extern "C" size_t tp_cuda_digest_workspace_bytes(size_t byte_count)
{
    return CHUNK_DIGESTS_OFFSET + 16 * chunk_count_of(byte_count);
}

extern "C" int tp_cuda_digest(const void *data, size_t byte_count, void *workspace,
                              size_t workspace_bytes, tp_cuda_launch_shape shape,
                              cudaStream_t stream, unsigned char digest[16])
{
    unsigned block = shape.block_threads != 0 ? shape.block_threads : DEFAULT_BLOCK_THREADS;
    if (block % 32u != 0 || block > MAX_BLOCK_THREADS || digest == nullptr ||
        (uintptr_t)workspace % 256 != 0 || (byte_count > 0 && data == nullptr))
        return TP_CUDA_BAD_ARGUMENT;
    if (workspace_bytes < tp_cuda_digest_workspace_bytes(byte_count))
        return TP_CUDA_WORKSPACE_TOO_SMALL;
    unsigned char *base = static_cast<unsigned char *>(workspace);
    uint64_t *root = reinterpret_cast<uint64_t *>(base + ROOT_OFFSET);
    uint64_t *chunk_digests = reinterpret_cast<uint64_t *>(base + CHUNK_DIGESTS_OFFSET);
    uint64_t chunk_count = chunk_count_of(byte_count);
    cudaError_t error = cudaSuccess;
    if (chunk_count > 0) {
        uint64_t groups_per_block = block / LANES;
        uint64_t needed = (chunk_count + groups_per_block - 1) / groups_per_block;
        unsigned grid = shape.grid_blocks != 0
                            ? shape.grid_blocks
                            : (unsigned)(needed < 0x7FFFFFFFu ? needed : 0x7FFFFFFFu);
        const unsigned char *bytes = static_cast<const unsigned char *>(data);
        if ((uintptr_t)data % 16 == 0)
            chunk_digest_kernel<true><<<grid, block, 0, stream>>>(bytes, byte_count, chunk_count,
                                                                  chunk_digests);
        else
            chunk_digest_kernel<false><<<grid, block, 0, stream>>>(bytes, byte_count,
                                                                   chunk_count, chunk_digests);
        error = cudaGetLastError();
    }
    if (error == cudaSuccess) {
        root_digest_kernel<<<1, LANES, 0, stream>>>(chunk_digests, chunk_count, byte_count, root);
        error = cudaGetLastError();
    }
    uint64_t words[2] = {0, 0};
    if (error == cudaSuccess)
        error = cudaMemcpyAsync(words, root, sizeof words, cudaMemcpyDeviceToHost, stream);
    /* Wait even after an error: nothing may still use the workspace on return. */
    cudaError_t sync_error = cudaStreamSynchronize(stream);
    if (error == cudaSuccess)
        error = sync_error;
    if (error != cudaSuccess)
        return (int)error;
    for (int i = 0; i < 16; i++)
        digest[i] = (unsigned char)(words[i / 8] >> (8 * (i % 8)));
    return 0;
}
