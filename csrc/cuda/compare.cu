/* CUDA compare of two device buffers of one dtype: the C core's result, bit for bit, whatever the launch shape.
 *
 * Three kernels on one stream, then one copy of the total to the host:
 *   1. exact mode only: find_difference_kernel scans the bytes (16-byte words
 *      where the pointers allow) and sets a flag with an integer atomic;
 *   2. measure_kernel: one group of 8 threads per 32768-element chunk, thread l
 *      owning lane l's ordered sums, writes one ChunkPartial per chunk
 *      (skipped when the scan found equal bytes);
 *   3. combine_kernel: one block; counts, first index and maxima reduced in
 *      any order (they are exact), the two sums added in chunk order by one
 *      thread, as the C core does.
 * The host then applies the final rules (identical bytes -> zero magnitudes,
 * no finite error -> inf, relative RMS from the two sums) with the C library's
 * sqrt and ldexp. No floating-point atomics anywhere: the result cannot depend
 * on scheduling. */
#include <cuda_runtime.h>

#include "compare_rules.cuh"
#include "launchers.h"

using namespace tp_rules;

namespace {

constexpr unsigned DEFAULT_BLOCK_THREADS = 256;
/* A measuring thread holds two rows of both buffers and their terms in
 * registers: 256 threads per block leave it room (up to 255 registers). */
constexpr unsigned MAX_BLOCK_THREADS = 256;

/* Blocks of 256 measuring threads a multiprocessor should hold: as many as the
 * registers allow without spilling much (64, 85 and 128 registers per thread
 * for 1-2, 4 and 8-byte elements), so that many chunks are in flight. */
template <typename Raw>
constexpr int measure_blocks_per_sm()
{
    return sizeof(Raw) <= 2 ? 4 : (sizeof(Raw) == 4 ? 3 : 2);
}
/* Each group of LANES threads takes LANES rows (of LANES elements) per step. */
constexpr int ROWS_PER_STEP = LANES;
/* A row of terms in shared memory, padded by one double against bank conflicts. */
constexpr int TERM_STRIDE = LANES + 1;
constexpr int GROUP_TERMS = ROWS_PER_STEP * TERM_STRIDE;
constexpr size_t SHARED_BYTES_PER_GROUP = 2 * GROUP_TERMS * sizeof(double);
/* Words per thread and iteration of the byte scan. */
constexpr int SCAN_UNROLL = 4;

/* Workspace layout: the total, the exact-mode flag, then one partial per chunk. */
constexpr size_t TOTAL_OFFSET = 0;
constexpr size_t FLAG_OFFSET = 256;
constexpr size_t PARTIALS_OFFSET = 512;

/* ---- loads ---- */

template <typename Word>
__device__ __forceinline__ Word load_word(const Word *p)
{
    return __ldg(p);
}

__device__ __forceinline__ bool words_differ(uint4 x, uint4 y)
{
    return ((x.x ^ y.x) | (x.y ^ y.y) | (x.z ^ y.z) | (x.w ^ y.w)) != 0u;
}

template <typename Word>
__device__ __forceinline__ bool words_differ(Word x, Word y)
{
    return x != y;
}

/* One row of LANES elements; elements past `valid` are left zero. With VECTOR
 * (both buffers aligned to the row's vector width) a full row is read with
 * 8- or 16-byte loads. */
template <class Dtype, bool VECTOR>
__device__ __forceinline__ void load_row(const typename Dtype::raw *row, int valid,
                                         typename Dtype::raw *out)
{
    typedef typename Dtype::raw raw;
    constexpr int row_bytes = LANES * (int)sizeof(raw);
    if (VECTOR && valid == LANES) {
        if constexpr (row_bytes == 8) {
            uint2 word = __ldg(reinterpret_cast<const uint2 *>(row));
            memcpy(out, &word, sizeof word);
        } else {
            const uint4 *words = reinterpret_cast<const uint4 *>(row);
#pragma unroll
            for (int w = 0; w < row_bytes / 16; w++) {
                uint4 word = __ldg(words + w);
                memcpy(reinterpret_cast<unsigned char *>(out) + 16 * w, &word, sizeof word);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < LANES; i++)
        out[i] = i < valid ? load_word(row + i) : raw(0);
}

/* ---- reductions within a group of LANES threads ---- */

/* Every thread of the group gets ((L0+L1)+(L2+L3))+((L4+L5)+(L6+L7)): the xor
 * butterfly adds the same pairs in the same nesting, and IEEE addition is
 * commutative, so the eight threads hold bit-identical totals. */
__device__ __forceinline__ double group_pairwise_sum(double lane_sum, unsigned mask)
{
    lane_sum = add(lane_sum, __shfl_xor_sync(mask, lane_sum, 1, LANES));
    lane_sum = add(lane_sum, __shfl_xor_sync(mask, lane_sum, 2, LANES));
    return add(lane_sum, __shfl_xor_sync(mask, lane_sum, 4, LANES));
}

__device__ __forceinline__ ElementStats group_stats(ElementStats stats, unsigned mask)
{
#pragma unroll
    for (int offset = 1; offset < LANES; offset *= 2) {
        ElementStats other;
        other.max_abs = __shfl_xor_sync(mask, stats.max_abs, offset, LANES);
        other.max_rel = __shfl_xor_sync(mask, stats.max_rel, offset, LANES);
        other.mismatches = __shfl_xor_sync(mask, stats.mismatches, offset, LANES);
        other.first = __shfl_xor_sync(mask, stats.first, offset, LANES);
        other.bytes_differ = __shfl_xor_sync(mask, (int)stats.bytes_differ, offset, LANES) != 0;
        merge_stats(stats, other);
    }
    return stats;
}

/* ---- kernel 1: are the bytes equal? ---- */

template <typename Word>
__global__ void find_difference_kernel(const Word *baseline, const Word *candidate, size_t words,
                                       const unsigned char *tail_a, const unsigned char *tail_b,
                                       size_t tail_bytes, unsigned *differs)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (size_t i = 0; i < tail_bytes; i++)
            if (tail_a[i] != tail_b[i])
                atomicOr(differs, 1u);
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += stride * SCAN_UNROLL) {
        if (*reinterpret_cast<volatile unsigned *>(differs) != 0u)
            return; /* another thread already found a difference */
        bool differ = false;
#pragma unroll
        for (int u = 0; u < SCAN_UNROLL; u++) {
            size_t index = i + (size_t)u * stride;
            if (index < words)
                differ |= words_differ(load_word(baseline + index), load_word(candidate + index));
        }
        if (differ) {
            atomicOr(differs, 1u);
            return;
        }
    }
}

/* ---- kernel 2: one partial per chunk ---- */

/* One pass of a group over its chunk: stats of every element (unless RESCALED)
 * and this thread's lane sums, in the documented order. Loads of the next step
 * are issued before the current step is computed. */
template <class Dtype, bool TOLERANCE, bool RESCALED, bool VECTOR>
__device__ void chunk_pass(const typename Dtype::raw *a, const typename Dtype::raw *b, int count,
                           int lane, unsigned mask, double *diff_terms, double *base_terms,
                           const Tolerance &tol, ElementStats &stats, double &lane_diff,
                           double &lane_base)
{
    typedef typename Dtype::raw raw;
    int rows = (count + LANES - 1) / LANES;
    lane_diff = 0.0;
    lane_base = 0.0;
    raw next_a[LANES], next_b[LANES];
    int next_row = lane;
    int next_valid = next_row < rows ? min(LANES, count - next_row * LANES) : 0;
    load_row<Dtype, VECTOR>(a + (size_t)next_row * LANES, next_valid, next_a);
    load_row<Dtype, VECTOR>(b + (size_t)next_row * LANES, next_valid, next_b);
    for (int step_row = 0; step_row < rows; step_row += ROWS_PER_STEP) {
        raw row_a[LANES], row_b[LANES];
#pragma unroll
        for (int i = 0; i < LANES; i++) {
            row_a[i] = next_a[i];
            row_b[i] = next_b[i];
        }
        int row = next_row, valid = next_valid;
        next_row = row + ROWS_PER_STEP;
        next_valid = next_row < rows ? min(LANES, count - next_row * LANES) : 0;
        load_row<Dtype, VECTOR>(a + (size_t)next_row * LANES, next_valid, next_a);
        load_row<Dtype, VECTOR>(b + (size_t)next_row * LANES, next_valid, next_b);

        /* This thread's row of terms out; lane l's column of the step's rows in. */
        row_terms<Dtype, TOLERANCE, RESCALED>(row_a, row_b, valid, row * LANES, tol, stats,
                                              diff_terms + lane * TERM_STRIDE,
                                              base_terms + lane * TERM_STRIDE);
        __syncwarp(mask);
#pragma unroll
        for (int r = 0; r < ROWS_PER_STEP; r++) {
            lane_diff = add(lane_diff, diff_terms[r * TERM_STRIDE + lane]);
            lane_base = add(lane_base, base_terms[r * TERM_STRIDE + lane]);
        }
        __syncwarp(mask);
    }
}

template <class Dtype, bool TOLERANCE, bool VECTOR>
__global__ void __launch_bounds__(MAX_BLOCK_THREADS,
                                  measure_blocks_per_sm<typename Dtype::raw>())
    measure_kernel(const typename Dtype::raw *baseline, const typename Dtype::raw *candidate,
                   size_t element_count, size_t chunk_count, Tolerance tol,
                   const unsigned *differs, ChunkPartial *partials)
{
    if (differs != nullptr && *differs == 0u)
        return; /* exact mode and equal bytes: the total says so */
    extern __shared__ double shared_terms[];
    const int lane = (int)(threadIdx.x % LANES);
    const unsigned groups_per_block = blockDim.x / LANES;
    const unsigned group = threadIdx.x / LANES;
    const unsigned mask = 0xFFu << ((threadIdx.x % 32u) & ~(unsigned)(LANES - 1));
    double *diff_terms = shared_terms + (size_t)group * 2 * GROUP_TERMS;
    double *base_terms = diff_terms + GROUP_TERMS;
    const size_t group_count = (size_t)gridDim.x * groups_per_block;
    for (size_t chunk = (size_t)blockIdx.x * groups_per_block + group; chunk < chunk_count;
         chunk += group_count) {
        const size_t start = chunk * CHUNK_ELEMENTS;
        const size_t remaining = element_count - start;
        const int count = remaining < (size_t)CHUNK_ELEMENTS ? (int)remaining : CHUNK_ELEMENTS;
        ElementStats stats = empty_stats();
        double lane_diff, lane_base;
        chunk_pass<Dtype, TOLERANCE, false, VECTOR>(baseline + start, candidate + start, count,
                                                    lane, mask, diff_terms, base_terms, tol,
                                                    stats, lane_diff, lane_base);
        ScaledSum diff_squares = {group_pairwise_sum(lane_diff, mask), 0};
        ScaledSum base_squares = {group_pairwise_sum(lane_base, mask), 0};
        /* The C core's overflow rule: a sum that is +inf is computed again with
         * scaled values (the whole group sees the same sums, so takes the same branch). */
        if (Dtype::sums_can_overflow && (isinf(diff_squares.value) || isinf(base_squares.value))) {
            ElementStats unused = empty_stats();
            chunk_pass<Dtype, false, true, VECTOR>(baseline + start, candidate + start, count,
                                                   lane, mask, diff_terms, base_terms, tol,
                                                   unused, lane_diff, lane_base);
            double scaled_diff = group_pairwise_sum(lane_diff, mask);
            double scaled_base = group_pairwise_sum(lane_base, mask);
            if (isinf(diff_squares.value))
                diff_squares = ScaledSum{scaled_diff, 1};
            if (isinf(base_squares.value))
                base_squares = ScaledSum{scaled_base, 1};
        }
        stats = group_stats(stats, mask);
        if (lane == 0) {
            ChunkPartial partial;
            partial.max_abs = stats.max_abs;
            partial.max_rel = stats.max_rel;
            partial.diff_squares = diff_squares;
            partial.base_squares = base_squares;
            partial.first_mismatch =
                stats.first < CHUNK_ELEMENTS ? (int64_t)(start + (size_t)stats.first) : -1;
            partial.mismatch_count = stats.mismatches;
            partial.bytes_differ = stats.bytes_differ ? 1u : 0u;
            partials[chunk] = partial;
        }
    }
}

/* ---- kernel 3: the total, in chunk order ---- */

/* Counts, first index and maxima of a warp: exact in any order. */
__device__ __forceinline__ CompareTotal warp_unordered(CompareTotal total)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        CompareTotal other = empty_total();
        other.first_mismatch =
            __shfl_xor_sync(0xFFFFFFFFu, (long long)total.first_mismatch, offset);
        other.mismatch_count =
            __shfl_xor_sync(0xFFFFFFFFu, (unsigned long long)total.mismatch_count, offset);
        other.max_abs = __shfl_xor_sync(0xFFFFFFFFu, total.max_abs, offset);
        other.max_rel = __shfl_xor_sync(0xFFFFFFFFu, total.max_rel, offset);
        other.bytes_differ = __shfl_xor_sync(0xFFFFFFFFu, total.bytes_differ, offset);
        merge_unordered_totals(total, other);
    }
    return total;
}

template <bool SUMS_CAN_OVERFLOW>
__global__ void __launch_bounds__(MAX_BLOCK_THREADS)
    combine_kernel(const ChunkPartial *partials, size_t chunk_count, const unsigned *differs,
                   CompareTotal *total_out)
{
    __shared__ CompareTotal warp_totals[MAX_BLOCK_THREADS / 32];
    __shared__ ScaledSum tile_diff[MAX_BLOCK_THREADS];
    __shared__ ScaledSum tile_base[MAX_BLOCK_THREADS];
    if (differs != nullptr && *differs == 0u) {
        if (threadIdx.x == 0)
            *total_out = empty_total();
        return;
    }
    CompareTotal total = empty_total();
    for (size_t c = threadIdx.x; c < chunk_count; c += blockDim.x)
        merge_unordered(total, partials[c]);
    total = warp_unordered(total);
    if (threadIdx.x % 32u == 0)
        warp_totals[threadIdx.x / 32u] = total;
    __syncthreads();

    ScaledSum diff_squares = {0.0, 0}, base_squares = {0.0, 0};
    for (size_t tile = 0; tile < chunk_count; tile += blockDim.x) {
        size_t c = tile + threadIdx.x;
        if (c < chunk_count) {
            tile_diff[threadIdx.x] = partials[c].diff_squares;
            tile_base[threadIdx.x] = partials[c].base_squares;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            size_t in_tile = chunk_count - tile < blockDim.x ? chunk_count - tile : blockDim.x;
            for (size_t i = 0; i < in_tile; i++) {
                if (SUMS_CAN_OVERFLOW) {
                    add_scaled(diff_squares, tile_diff[i]);
                    add_scaled(base_squares, tile_base[i]);
                } else {
                    /* No sum of these dtypes can reach +inf: add_scaled reduces to this. */
                    diff_squares.value = add(diff_squares.value, tile_diff[i].value);
                    base_squares.value = add(base_squares.value, tile_base[i].value);
                }
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        CompareTotal result = empty_total();
        for (unsigned w = 0; w < blockDim.x / 32u; w++)
            merge_unordered_totals(result, warp_totals[w]);
        result.diff_squares = diff_squares;
        result.base_squares = base_squares;
        *total_out = result;
    }
}

/* ---- host side ---- */

struct DtypeEntry {
    const char *name;
    size_t size;
    bool sums_can_overflow;
};

/* Indices are the switch cases of launch_measure. */
const DtypeEntry DTYPES[] = {
    {"bool", 1, false},     {"uint8", 1, false},   {"int8", 1, false},
    {"int16", 2, false},    {"uint16", 2, false},  {"int32", 4, false},
    {"uint32", 4, false},   {"int64", 8, false},   {"uint64", 8, false},
    {"float16", 2, false},  {"bfloat16", 2, false}, {"float32", 4, false},
    {"float64", 8, true},
};
constexpr int DTYPE_COUNT = (int)(sizeof DTYPES / sizeof DTYPES[0]);

int check_shape(tp_cuda_launch_shape shape)
{
    unsigned block = shape.block_threads;
    if (block != 0 && (block % 32u != 0 || block > MAX_BLOCK_THREADS))
        return TP_CUDA_BAD_ARGUMENT;
    return 0;
}

unsigned block_threads(tp_cuda_launch_shape shape)
{
    return shape.block_threads != 0 ? shape.block_threads : DEFAULT_BLOCK_THREADS;
}

unsigned grid_for(tp_cuda_launch_shape shape, size_t work_items, size_t items_per_block)
{
    if (shape.grid_blocks != 0)
        return shape.grid_blocks;
    size_t blocks = (work_items + items_per_block - 1) / items_per_block;
    const size_t max_grid = 0x7FFFFFFFu;
    return (unsigned)(blocks == 0 ? 1 : (blocks < max_grid ? blocks : max_grid));
}

template <class Dtype, bool TOLERANCE, bool VECTOR>
cudaError_t launch_measure_variant(const void *baseline, const void *candidate,
                                   size_t element_count, size_t chunk_count, const Tolerance &tol,
                                   const unsigned *differs, ChunkPartial *partials,
                                   tp_cuda_launch_shape shape, cudaStream_t stream)
{
    typedef typename Dtype::raw raw;
    unsigned block = block_threads(shape);
    /* At most 36 KiB (256 threads): within the default dynamic shared memory limit. */
    size_t shared_bytes = (block / LANES) * SHARED_BYTES_PER_GROUP;
    unsigned grid = grid_for(shape, chunk_count, block / LANES);
    measure_kernel<Dtype, TOLERANCE, VECTOR><<<grid, block, shared_bytes, stream>>>(static_cast<const raw *>(baseline),
                                                  static_cast<const raw *>(candidate),
                                                  element_count, chunk_count, tol, differs,
                                                  partials);
    return cudaGetLastError();
}

template <class Dtype, bool TOLERANCE>
cudaError_t launch_measure_mode(const void *baseline, const void *candidate,
                                size_t element_count, size_t chunk_count, const Tolerance &tol,
                                const unsigned *differs, ChunkPartial *partials,
                                tp_cuda_launch_shape shape, cudaStream_t stream)
{
    /* Rows are 8-byte (one-byte dtypes) or 16-byte multiples: vector loads need
     * both buffers aligned to that. */
    const uintptr_t alignment = sizeof(typename Dtype::raw) == 1 ? 8 : 16;
    bool aligned = ((uintptr_t)baseline % alignment == 0) && ((uintptr_t)candidate % alignment == 0);
    if (aligned)
        return launch_measure_variant<Dtype, TOLERANCE, true>(
            baseline, candidate, element_count, chunk_count, tol, differs, partials, shape, stream);
    return launch_measure_variant<Dtype, TOLERANCE, false>(
        baseline, candidate, element_count, chunk_count, tol, differs, partials, shape, stream);
}

template <class Dtype>
cudaError_t launch_measure_dtype(bool use_tolerance, const void *baseline, const void *candidate,
                                 size_t element_count, size_t chunk_count, const Tolerance &tol,
                                 const unsigned *differs, ChunkPartial *partials,
                                 tp_cuda_launch_shape shape, cudaStream_t stream)
{
    /* Integer and bool dtypes are exact under tolerance too. */
    if constexpr (Dtype::floating) {
        if (use_tolerance)
            return launch_measure_mode<Dtype, true>(baseline, candidate, element_count,
                                                    chunk_count, tol, differs, partials, shape,
                                                    stream);
    }
    return launch_measure_mode<Dtype, false>(baseline, candidate, element_count, chunk_count, tol,
                                             differs, partials, shape, stream);
}

cudaError_t launch_measure(int dtype, bool use_tolerance, const void *baseline,
                           const void *candidate, size_t element_count, size_t chunk_count,
                           const Tolerance &tol, const unsigned *differs, ChunkPartial *partials,
                           tp_cuda_launch_shape shape, cudaStream_t stream)
{
#define TP_MEASURE(DTYPE)                                                                      \
    return launch_measure_dtype<DTYPE>(use_tolerance, baseline, candidate, element_count,      \
                                       chunk_count, tol, differs, partials, shape, stream)
    switch (dtype) {
    case 0: /* bool: one byte, 0 or 1 */
    case 1: TP_MEASURE(IntegerType<uint8_t>);
    case 2: TP_MEASURE(IntegerType<int8_t>);
    case 3: TP_MEASURE(IntegerType<int16_t>);
    case 4: TP_MEASURE(IntegerType<uint16_t>);
    case 5: TP_MEASURE(IntegerType<int32_t>);
    case 6: TP_MEASURE(IntegerType<uint32_t>);
    case 7: TP_MEASURE(IntegerType<int64_t>);
    case 8: TP_MEASURE(IntegerType<uint64_t>);
    case 9: TP_MEASURE(Float16);
    case 10: TP_MEASURE(BFloat16);
    case 11: TP_MEASURE(Float32);
    default: TP_MEASURE(Float64);
    }
#undef TP_MEASURE
}

template <typename Word>
cudaError_t launch_scan_words(const void *baseline, const void *candidate, size_t byte_count,
                              unsigned *differs, tp_cuda_launch_shape shape, cudaStream_t stream)
{
    size_t words = byte_count / sizeof(Word);
    size_t tail_offset = words * sizeof(Word);
    unsigned block = block_threads(shape);
    unsigned grid = grid_for(shape, words, (size_t)block * SCAN_UNROLL);
    const unsigned char *a = static_cast<const unsigned char *>(baseline);
    const unsigned char *b = static_cast<const unsigned char *>(candidate);
    find_difference_kernel<Word><<<grid, block, 0, stream>>>(
        static_cast<const Word *>(baseline), static_cast<const Word *>(candidate), words,
        a + tail_offset, b + tail_offset, byte_count - tail_offset, differs);
    return cudaGetLastError();
}

cudaError_t launch_scan(const void *baseline, const void *candidate, size_t byte_count,
                        unsigned *differs, tp_cuda_launch_shape shape, cudaStream_t stream)
{
    uintptr_t both = (uintptr_t)baseline | (uintptr_t)candidate;
    if (both % 16 == 0)
        return launch_scan_words<uint4>(baseline, candidate, byte_count, differs, shape, stream);
    if (both % 8 == 0)
        return launch_scan_words<unsigned long long>(baseline, candidate, byte_count, differs,
                                                     shape, stream);
    if (both % 4 == 0)
        return launch_scan_words<unsigned>(baseline, candidate, byte_count, differs, shape,
                                           stream);
    return launch_scan_words<unsigned char>(baseline, candidate, byte_count, differs, shape,
                                            stream);
}

int run_compare(int dtype, const void *baseline, const void *candidate, size_t element_count,
                bool use_tolerance, const Tolerance &tol, unsigned char *workspace,
                tp_cuda_launch_shape shape, cudaStream_t stream, CompareTotal *total)
{
    CompareTotal *device_total = reinterpret_cast<CompareTotal *>(workspace + TOTAL_OFFSET);
    unsigned *differs = nullptr;
    ChunkPartial *partials = reinterpret_cast<ChunkPartial *>(workspace + PARTIALS_OFFSET);
    size_t chunk_count = (element_count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
    cudaError_t error = cudaSuccess;
    if (!use_tolerance) {
        differs = reinterpret_cast<unsigned *>(workspace + FLAG_OFFSET);
        error = cudaMemsetAsync(differs, 0, sizeof *differs, stream);
        if (error == cudaSuccess)
            error = launch_scan(baseline, candidate, element_count * DTYPES[dtype].size, differs,
                                shape, stream);
    }
    if (error == cudaSuccess)
        error = launch_measure(dtype, use_tolerance, baseline, candidate, element_count,
                               chunk_count, tol, differs, partials, shape, stream);
    if (error == cudaSuccess) {
        unsigned block = block_threads(shape);
        if (DTYPES[dtype].sums_can_overflow)
            combine_kernel<true><<<1, block, 0, stream>>>(partials, chunk_count, differs,
                                                          device_total);
        else
            combine_kernel<false><<<1, block, 0, stream>>>(partials, chunk_count, differs,
                                                           device_total);
        error = cudaGetLastError();
    }
    if (error == cudaSuccess)
        error = cudaMemcpyAsync(total, device_total, sizeof *total, cudaMemcpyDeviceToHost,
                                stream);
    /* Wait even after an error: nothing may still use the workspace on return. */
    cudaError_t sync_error = cudaStreamSynchronize(stream);
    return (int)(error != cudaSuccess ? error : sync_error);
}

} /* namespace */

extern "C" int tp_cuda_dtype_index(const char *name)
{
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(DTYPES[i].name, name) == 0)
            return i;
    return -1;
}

extern "C" size_t tp_cuda_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < DTYPE_COUNT ? DTYPES[dtype].size : 0;
}

extern "C" const char *tp_cuda_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < DTYPE_COUNT ? DTYPES[dtype].name : nullptr;
}

extern "C" size_t tp_cuda_compare_workspace_bytes(size_t element_count)
{
    size_t chunk_count = (element_count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
    return PARTIALS_OFFSET + chunk_count * sizeof(ChunkPartial);
}

extern "C" int tp_cuda_compare(int dtype, const void *baseline, const void *candidate,
                               size_t element_count, int use_tolerance, double rtol, double atol,
                               int equal_nan, void *workspace, size_t workspace_bytes,
                               tp_cuda_launch_shape shape, cudaStream_t stream,
                               tp_cuda_compare_result *result)
{
    if (dtype < 0 || dtype >= DTYPE_COUNT || result == nullptr || check_shape(shape) != 0 ||
        (uintptr_t)workspace % 256 != 0)
        return TP_CUDA_BAD_ARGUMENT;
    if (workspace_bytes < tp_cuda_compare_workspace_bytes(element_count))
        return TP_CUDA_WORKSPACE_TOO_SMALL;
    CompareTotal total = empty_total();
    if (element_count > 0) {
        if (baseline == nullptr || candidate == nullptr)
            return TP_CUDA_BAD_ARGUMENT;
        Tolerance tol = {rtol, atol, equal_nan != 0};
        int error = run_compare(dtype, baseline, candidate, element_count, use_tolerance != 0, tol,
                                static_cast<unsigned char *>(workspace), shape, stream, &total);
        if (error != 0)
            return error;
    }
    result->first_mismatch_index = total.first_mismatch;
    result->mismatch_count = total.mismatch_count;
    result_magnitudes(total, &result->max_abs_error, &result->max_rel_error,
                      &result->relative_rms_error);
    return 0;
}

extern "C" const char *tp_cuda_error_string(int error)
{
    if (error == TP_CUDA_BAD_ARGUMENT)
        return "bad argument (dtype, pointers, workspace alignment or launch shape)";
    if (error == TP_CUDA_WORKSPACE_TOO_SMALL)
        return "workspace smaller than the launcher needs";
    return cudaGetErrorString((cudaError_t)error);
}
