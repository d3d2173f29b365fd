/* CUDA digest of a device buffer: byte-identical to the C core's digest, version 1 or 2
 * (docs/design.md, "Digest").
 *
 * chunk_digest_kernel gives each 64 KiB chunk a group of V::LANES threads (4 for version 1,
 * 8 for version 2), one per lane; a lane is a sequential chain over the chunk's 1024 stripes,
 * reading one 16-byte block of each. Lane 0 finishes the chunk with its index as tag.
 * root_digest_kernel then hashes the ordered chunk digests with one group, exactly as the C
 * core's root hash. Which thread hashed which chunk cannot change a digest. */
#include <cuda_runtime.h>

#include "digest_rules.cuh"
#include "launchers.h"

using namespace tp_digest;

namespace {

constexpr unsigned DEFAULT_BLOCK_THREADS = 256;
constexpr unsigned MAX_BLOCK_THREADS = 256;
/* Stripes loaded ahead of the lane's dependent chain. */
constexpr int PREFETCH_STRIPES = 4;
constexpr size_t ROOT_OFFSET = 0; /* two words of the result */
constexpr size_t CHUNK_DIGESTS_OFFSET = 256;

__constant__ uint64_t SECRET_V1[V1::SECRET_WORDS] = TP_DIGEST_V1_SECRETS;
__constant__ uint64_t SECRET_V2[V2::SECRET_WORDS] = TP_DIGEST_V2_SECRETS;

template <class V>
__device__ __forceinline__ const uint64_t *secret_words();
template <>
__device__ __forceinline__ const uint64_t *secret_words<V1>()
{
    return SECRET_V1;
}
template <>
__device__ __forceinline__ const uint64_t *secret_words<V2>()
{
    return SECRET_V2;
}

/* The two little-endian words at p (16 bytes). ALIGNED: p is 16-byte aligned. */
template <bool ALIGNED>
__device__ __forceinline__ void load_block_words(const unsigned char *p, uint64_t &first,
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
    for (uint64_t i = 0; i < BLOCK_BYTES; i++) {
        uint64_t byte = offset + i < tail ? (uint64_t)stripe[offset + i] : 0u;
        if (i < 8)
            first |= byte << (8 * i);
        else
            second |= byte << (8 * (i - 8));
    }
}

/* The group's lane accumulators, gathered from its V::LANES threads. */
template <class V>
__device__ __forceinline__ void gather_lanes(uint64_t acc, unsigned mask, uint64_t *lanes)
{
#pragma unroll
    for (int l = 0; l < V::LANES; l++)
        lanes[l] = __shfl_sync(mask, (unsigned long long)acc, l, V::LANES);
}

template <class V, bool ALIGNED>
__global__ void __launch_bounds__(MAX_BLOCK_THREADS)
    chunk_digest_kernel(const unsigned char *data, uint64_t byte_count, uint64_t chunk_count,
                        uint64_t *chunk_digests)
{
    const int lane = (int)(threadIdx.x % V::LANES);
    const unsigned group_mask = (unsigned)((1ull << V::LANES) - 1);
    const unsigned mask = group_mask << ((threadIdx.x % 32u) & ~(unsigned)(V::LANES - 1));
    const uint64_t *k = secret_words<V>();
    const typename V::Lane lane_keys = V::lane_of(lane, k);
    const uint64_t block_offset = BLOCK_BYTES * (uint64_t)V::block_of(lane);
    const uint64_t groups_per_block = blockDim.x / V::LANES;
    const uint64_t group_count = (uint64_t)gridDim.x * groups_per_block;
    for (uint64_t chunk = blockIdx.x * groups_per_block + threadIdx.x / V::LANES;
         chunk < chunk_count; chunk += group_count) {
        const uint64_t offset = chunk * CHUNK_BYTES;
        const uint64_t length = byte_count - offset < CHUNK_BYTES ? byte_count - offset
                                                                  : CHUNK_BYTES;
        const uint64_t stripes = length / STRIPE_BYTES;
        const unsigned char *lane_data = data + offset + block_offset;
        uint64_t acc = V::initial(lane, k);
        uint64_t s = 0;
        for (; s + PREFETCH_STRIPES <= stripes; s += PREFETCH_STRIPES) {
            uint64_t first[PREFETCH_STRIPES], second[PREFETCH_STRIPES];
#pragma unroll
            for (int p = 0; p < PREFETCH_STRIPES; p++)
                load_block_words<ALIGNED>(lane_data + (s + p) * STRIPE_BYTES, first[p], second[p]);
#pragma unroll
            for (int p = 0; p < PREFETCH_STRIPES; p++)
                acc = V::step(acc, first[p], second[p], lane_keys);
        }
        for (; s < stripes; s++) {
            uint64_t first, second;
            load_block_words<ALIGNED>(lane_data + s * STRIPE_BYTES, first, second);
            acc = V::step(acc, first, second, lane_keys);
        }
        const uint64_t tail = length - stripes * STRIPE_BYTES;
        if (tail > 0) {
            uint64_t first, second;
            load_tail_words(data + offset + stripes * STRIPE_BYTES, block_offset, tail, first,
                            second);
            acc = V::step(acc, first, second, lane_keys);
        }
        uint64_t lanes[V::LANES];
        gather_lanes<V>(acc, mask, lanes);
        if (lane == 0)
            V::finish(lanes, chunk, length, k, chunk_digests + 2 * chunk);
    }
}

/* The root hash over the chunk digests: 16 bytes each, so block b of stripe s is chunk
 * digest BLOCKS_PER_STRIPE * s + b. One group of V::LANES threads. */
template <class V>
__global__ void root_digest_kernel(const uint64_t *chunk_digests, uint64_t chunk_count,
                                   uint64_t byte_count, uint64_t *root)
{
    const int lane = (int)threadIdx.x;
    const uint64_t *k = secret_words<V>();
    const typename V::Lane lane_keys = V::lane_of(lane, k);
    uint64_t acc = V::initial(lane, k);
    const uint64_t stripes = (chunk_count + BLOCKS_PER_STRIPE - 1) / BLOCKS_PER_STRIPE;
    for (uint64_t s = 0; s < stripes; s++) {
        uint64_t index = s * BLOCKS_PER_STRIPE + (uint64_t)V::block_of(lane);
        /* Past the last digest, the zero padding of the last stripe. */
        uint64_t first = index < chunk_count ? chunk_digests[2 * index] : 0u;
        uint64_t second = index < chunk_count ? chunk_digests[2 * index + 1] : 0u;
        acc = V::step(acc, first, second, lane_keys);
    }
    uint64_t lanes[V::LANES];
    gather_lanes<V>(acc, (unsigned)((1ull << V::LANES) - 1), lanes);
    if (lane == 0)
        V::finish(lanes, ROOT_TAG, byte_count, k, root);
}

uint64_t chunk_count_of(size_t byte_count)
{
    return (byte_count + CHUNK_BYTES - 1) / CHUNK_BYTES;
}

template <class V>
cudaError_t launch(const unsigned char *bytes, size_t byte_count, uint64_t chunk_count,
                   uint64_t *chunk_digests, uint64_t *root, unsigned block, unsigned grid_blocks,
                   cudaStream_t stream)
{
    if (chunk_count > 0) {
        uint64_t groups_per_block = block / V::LANES;
        uint64_t needed = (chunk_count + groups_per_block - 1) / groups_per_block;
        unsigned grid = grid_blocks != 0 ? grid_blocks
                                         : (unsigned)(needed < 0x7FFFFFFFu ? needed : 0x7FFFFFFFu);
        if ((uintptr_t)bytes % 16 == 0)
            chunk_digest_kernel<V, true><<<grid, block, 0, stream>>>(bytes, byte_count,
                                                                     chunk_count, chunk_digests);
        else
            chunk_digest_kernel<V, false><<<grid, block, 0, stream>>>(bytes, byte_count,
                                                                      chunk_count, chunk_digests);
        cudaError_t error = cudaGetLastError();
        if (error != cudaSuccess)
            return error;
    }
    root_digest_kernel<V><<<1, V::LANES, 0, stream>>>(chunk_digests, chunk_count, byte_count,
                                                      root);
    return cudaGetLastError();
}

} /* namespace */

extern "C" size_t tp_cuda_digest_workspace_bytes(size_t byte_count)
{
    return CHUNK_DIGESTS_OFFSET + 16 * chunk_count_of(byte_count);
}

extern "C" int tp_cuda_digest(int version, const void *data, size_t byte_count, void *workspace,
                              size_t workspace_bytes, tp_cuda_launch_shape shape,
                              cudaStream_t stream, unsigned char digest[16])
{
    unsigned block = shape.block_threads != 0 ? shape.block_threads : DEFAULT_BLOCK_THREADS;
    if ((version != V1::VERSION && version != V2::VERSION) || block % 32u != 0 ||
        block > MAX_BLOCK_THREADS || digest == nullptr || (uintptr_t)workspace % 256 != 0 ||
        (byte_count > 0 && data == nullptr))
        return TP_CUDA_BAD_ARGUMENT;
    if (workspace_bytes < tp_cuda_digest_workspace_bytes(byte_count))
        return TP_CUDA_WORKSPACE_TOO_SMALL;
    unsigned char *base = static_cast<unsigned char *>(workspace);
    uint64_t *root = reinterpret_cast<uint64_t *>(base + ROOT_OFFSET);
    uint64_t *chunk_digests = reinterpret_cast<uint64_t *>(base + CHUNK_DIGESTS_OFFSET);
    const unsigned char *bytes = static_cast<const unsigned char *>(data);
    uint64_t chunk_count = chunk_count_of(byte_count);
    cudaError_t error =
        version == V1::VERSION
            ? launch<V1>(bytes, byte_count, chunk_count, chunk_digests, root, block,
                         shape.grid_blocks, stream)
            : launch<V2>(bytes, byte_count, chunk_count, chunk_digests, root, block,
                         shape.grid_blocks, stream);
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
