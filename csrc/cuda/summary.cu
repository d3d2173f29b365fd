/* CUDA summary statistics of a device buffer: bit-identical to the C core's summary()
 * (docs/design.md, "Summaries"; the rules and order are in summary_rules.cuh).
 *
 * chunk_summary_kernel gives each 64 KiB chunk a group of 8 threads, one per lane: lane l
 * adds elements l, l + 8, l + 16, ... of the chunk in order, as the C core's lane l does.
 * Lane 0 gathers the group's lanes by warp shuffles and folds them into the chunk's
 * statistics; fold_chunks_kernel adds the chunks to the total in chunk order with one
 * thread. No float atomics: which thread summed which chunk cannot change a bit. */
#include <cuda_runtime.h>

#include "launchers.h"
#include "summary_rules.cuh"

using namespace tp_summary;

namespace {

constexpr unsigned DEFAULT_BLOCK_THREADS = 256;
constexpr unsigned MAX_BLOCK_THREADS = 256;
constexpr size_t TOTAL_OFFSET = 0; /* one Stats */
constexpr size_t PARTIALS_OFFSET = 256;

__device__ __forceinline__ double shuffle_double(unsigned mask, double value, int lane)
{
    return __shfl_sync(mask, value, lane, LANES);
}

__device__ __forceinline__ uint64_t shuffle_count(unsigned mask, uint64_t value, int lane)
{
    return (uint64_t)__shfl_sync(mask, (unsigned long long)value, lane, LANES);
}

template <class Dtype>
__global__ void __launch_bounds__(MAX_BLOCK_THREADS)
    chunk_summary_kernel(const typename Dtype::raw *data, uint64_t element_count,
                         uint64_t chunk_elements, uint64_t chunk_count, Stats *partials)
{
    const int lane = (int)(threadIdx.x % LANES);
    const unsigned mask = 0xFFu << ((threadIdx.x % 32u) & ~(unsigned)(LANES - 1));
    const uint64_t groups_per_block = blockDim.x / LANES;
    const uint64_t group_count = (uint64_t)gridDim.x * groups_per_block;
    for (uint64_t chunk = blockIdx.x * groups_per_block + threadIdx.x / LANES;
         chunk < chunk_count; chunk += group_count) {
        const uint64_t begin = chunk * chunk_elements;
        const uint64_t end =
            element_count - begin < chunk_elements ? element_count : begin + chunk_elements;
        Stats acc = empty_stats();
        for (uint64_t i = begin + (uint64_t)lane; i < end; i += LANES)
            add_element<Dtype>(acc, data[i]);
        Stats lanes[LANES];
#pragma unroll
        for (int l = 0; l < LANES; l++) {
            lanes[l].sum = shuffle_double(mask, acc.sum, l);
            lanes[l].sum_squares = shuffle_double(mask, acc.sum_squares, l);
            lanes[l].max_abs = shuffle_double(mask, acc.max_abs, l);
            lanes[l].nan_count = shuffle_count(mask, acc.nan_count, l);
            lanes[l].inf_count = shuffle_count(mask, acc.inf_count, l);
        }
        if (lane == 0)
            partials[chunk] = fold_lanes(lanes);
    }
}

__global__ void fold_chunks_kernel(const Stats *partials, uint64_t chunk_count, Stats *total)
{
    Stats sum = empty_stats();
    for (uint64_t chunk = 0; chunk < chunk_count; chunk++)
        fold_chunk(sum, partials[chunk]);
    *total = sum;
}

uint64_t chunk_count_of(size_t element_count, size_t element_size)
{
    const uint64_t chunk_elements = CHUNK_BYTES / element_size;
    return (element_count + chunk_elements - 1) / chunk_elements;
}

template <class Dtype>
cudaError_t launch(const void *data, size_t element_count, Stats *partials, Stats *total,
                   unsigned block, unsigned grid_blocks, cudaStream_t stream)
{
    const uint64_t chunk_elements = CHUNK_BYTES / sizeof(typename Dtype::raw);
    const uint64_t chunk_count = chunk_count_of(element_count, sizeof(typename Dtype::raw));
    if (chunk_count > 0) {
        uint64_t groups_per_block = block / LANES;
        uint64_t needed = (chunk_count + groups_per_block - 1) / groups_per_block;
        unsigned grid = grid_blocks != 0 ? grid_blocks
                                         : (unsigned)(needed < 0x7FFFFFFFu ? needed : 0x7FFFFFFFu);
        chunk_summary_kernel<Dtype><<<grid, block, 0, stream>>>(
            static_cast<const typename Dtype::raw *>(data), element_count, chunk_elements,
            chunk_count, partials);
        cudaError_t error = cudaGetLastError();
        if (error != cudaSuccess)
            return error;
    }
    fold_chunks_kernel<<<1, 1, 0, stream>>>(partials, chunk_count, total);
    return cudaGetLastError();
}

} /* namespace */

extern "C" size_t tp_cuda_summary_workspace_bytes(int dtype, size_t element_count)
{
    size_t size = tp_cuda_dtype_size(dtype);
    return PARTIALS_OFFSET + sizeof(Stats) * (size == 0 ? 0 : chunk_count_of(element_count, size));
}

extern "C" int tp_cuda_summary(int dtype, const void *data, size_t element_count,
                               void *workspace, size_t workspace_bytes,
                               tp_cuda_launch_shape shape, cudaStream_t stream,
                               tp_cuda_summary_result *result)
{
    unsigned block = shape.block_threads != 0 ? shape.block_threads : DEFAULT_BLOCK_THREADS;
    size_t size = tp_cuda_dtype_size(dtype);
    if (size == 0 || block % 32u != 0 || block > MAX_BLOCK_THREADS || result == nullptr ||
        (uintptr_t)workspace % 256 != 0 || (element_count > 0 && data == nullptr) ||
        (uintptr_t)data % size != 0)
        return TP_CUDA_BAD_ARGUMENT;
    if (workspace_bytes < tp_cuda_summary_workspace_bytes(dtype, element_count))
        return TP_CUDA_WORKSPACE_TOO_SMALL;
    unsigned char *base = static_cast<unsigned char *>(workspace);
    Stats *total = reinterpret_cast<Stats *>(base + TOTAL_OFFSET);
    Stats *partials = reinterpret_cast<Stats *>(base + PARTIALS_OFFSET);
    cudaError_t error;
    const size_t n = element_count;
    switch (dtype) {
    case 0: error = launch<Bool>(data, n, partials, total, block, shape.grid_blocks, stream); break;
#define TP_SUMMARY_CASE(INDEX, DTYPE)                                                         \
    case INDEX:                                                                               \
        error = launch<DTYPE>(data, n, partials, total, block, shape.grid_blocks, stream);   \
        break;
    TP_SUMMARY_CASE(1, tp_rules::IntegerType<uint8_t>)
    TP_SUMMARY_CASE(2, tp_rules::IntegerType<int8_t>)
    TP_SUMMARY_CASE(3, tp_rules::IntegerType<int16_t>)
    TP_SUMMARY_CASE(4, tp_rules::IntegerType<uint16_t>)
    TP_SUMMARY_CASE(5, tp_rules::IntegerType<int32_t>)
    TP_SUMMARY_CASE(6, tp_rules::IntegerType<uint32_t>)
    TP_SUMMARY_CASE(7, tp_rules::IntegerType<int64_t>)
    TP_SUMMARY_CASE(8, tp_rules::IntegerType<uint64_t>)
    TP_SUMMARY_CASE(9, tp_rules::Float16)
    TP_SUMMARY_CASE(10, tp_rules::BFloat16)
    TP_SUMMARY_CASE(11, tp_rules::Float32)
    TP_SUMMARY_CASE(12, tp_rules::Float64)
#undef TP_SUMMARY_CASE
    default: return TP_CUDA_BAD_ARGUMENT;
    }
    Stats host = empty_stats();
    if (error == cudaSuccess)
        error = cudaMemcpyAsync(&host, total, sizeof host, cudaMemcpyDeviceToHost, stream);
    /* Wait even after an error: nothing may still use the workspace on return. */
    cudaError_t sync_error = cudaStreamSynchronize(stream);
    if (error == cudaSuccess)
        error = sync_error;
    if (error != cudaSuccess)
        return (int)error;
    *result = tp_cuda_summary_result{element_count, host.sum,       host.sum_squares,
                                     host.max_abs,  host.nan_count, host.inf_count};
    return 0;
}
