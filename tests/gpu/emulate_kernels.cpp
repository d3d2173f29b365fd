/* Host emulation of the CUDA kernels' arithmetic, for tests on machines without a GPU.
 *
 * Built with the host C++ compiler from the same rule headers the kernels use
 * (csrc/cuda/compare_rules.cuh, digest_rules.cuh) and run in the kernels'
 * order: per chunk, 8 "threads" each take a row of 8 elements per step, then
 * lane l adds the step's lane-l terms row by row; lanes pairwise; float64
 * chunks rescaled on overflow; counts and maxima in any order, sums in chunk
 * order. Digests (versions 1 and 2): per chunk, one chain per lane over its
 * block of each stripe, the finaliser, then the same over the chunk digests.
 * Summaries: per chunk, 8 "threads" each add every 8th element in order, their
 * lanes folded pairwise, then the chunks in order.
 * tests/test_cuda_backend.py checks the results against the C core.
 * What it cannot show (shuffles, shared memory, launch shapes) tests/gpu checks
 * on a GPU. */
#include <stdlib.h>
#include <string.h>

#include "compare_rules.cuh"
#include "digest_rules.cuh"
#include "launchers.h"
#include "summary_rules.cuh"

using namespace tp_rules;

namespace {

template <class Dtype, bool TOLERANCE, bool RESCALED>
void emulate_chunk_pass(const typename Dtype::raw *a, const typename Dtype::raw *b, int count,
                        const Tolerance &tol, ElementStats &stats, double *lane_diff,
                        double *lane_base)
{
    int rows = (count + LANES - 1) / LANES;
    /* Each thread keeps its own stats over the chunk (its running maximum
     * decides which divisions it skips), merged at the end. */
    ElementStats thread_stats[LANES];
    for (int l = 0; l < LANES; l++) {
        lane_diff[l] = lane_base[l] = 0.0;
        thread_stats[l] = empty_stats();
    }
    for (int step_row = 0; step_row < rows; step_row += LANES) {
        double diff_terms[LANES][LANES], base_terms[LANES][LANES];
        for (int thread = 0; thread < LANES; thread++) {
            int row = step_row + thread;
            int valid = row < rows ? (count - row * LANES < LANES ? count - row * LANES : LANES)
                                   : 0;
            typename Dtype::raw row_a[LANES] = {}, row_b[LANES] = {};
            for (int i = 0; i < valid; i++) {
                row_a[i] = a[row * LANES + i];
                row_b[i] = b[row * LANES + i];
            }
            row_terms<Dtype, TOLERANCE, RESCALED>(row_a, row_b, valid, row * LANES, tol,
                                                  thread_stats[thread], diff_terms[thread],
                                                  base_terms[thread]);
        }
        for (int l = 0; l < LANES; l++) {
            for (int r = 0; r < LANES; r++) {
                lane_diff[l] = add(lane_diff[l], diff_terms[r][l]);
                lane_base[l] = add(lane_base[l], base_terms[r][l]);
            }
        }
    }
    for (int thread = 0; thread < LANES; thread++)
        merge_stats(stats, thread_stats[thread]);
}

template <class Dtype, bool TOLERANCE>
CompareTotal emulate_compare(const void *baseline, const void *candidate, size_t element_count,
                             const Tolerance &tol)
{
    typedef typename Dtype::raw raw;
    const raw *a = static_cast<const raw *>(baseline), *b = static_cast<const raw *>(candidate);
    if (!TOLERANCE && memcmp(a, b, element_count * sizeof(raw)) == 0)
        return empty_total(); /* the byte scan found nothing: nothing is measured */
    CompareTotal total = empty_total();
    ScaledSum diff_total = {0.0, 0}, base_total = {0.0, 0};
    for (size_t start = 0; start < element_count; start += CHUNK_ELEMENTS) {
        int count = element_count - start < (size_t)CHUNK_ELEMENTS ? (int)(element_count - start)
                                                                  : CHUNK_ELEMENTS;
        ElementStats stats = empty_stats();
        double lane_diff[LANES], lane_base[LANES];
        emulate_chunk_pass<Dtype, TOLERANCE, false>(a + start, b + start, count, tol, stats,
                                                    lane_diff, lane_base);
        ScaledSum diff = {pairwise_lanes(lane_diff), 0}, base = {pairwise_lanes(lane_base), 0};
        if (Dtype::sums_can_overflow && (isinf(diff.value) || isinf(base.value))) {
            ElementStats unused = empty_stats();
            emulate_chunk_pass<Dtype, false, true>(a + start, b + start, count, tol, unused,
                                                   lane_diff, lane_base);
            if (isinf(diff.value))
                diff = ScaledSum{pairwise_lanes(lane_diff), 1};
            if (isinf(base.value))
                base = ScaledSum{pairwise_lanes(lane_base), 1};
        }
        ChunkPartial partial;
        partial.max_abs = stats.max_abs;
        partial.max_rel = stats.max_rel;
        partial.diff_squares = diff;
        partial.base_squares = base;
        partial.first_mismatch = stats.first < CHUNK_ELEMENTS ? (int64_t)(start + stats.first) : -1;
        partial.mismatch_count = stats.mismatches;
        partial.bytes_differ = stats.bytes_differ;
        merge_unordered(total, partial);
        if (Dtype::sums_can_overflow) {
            add_scaled(diff_total, diff);
            add_scaled(base_total, base);
        } else {
            diff_total.value = add(diff_total.value, diff.value);
            base_total.value = add(base_total.value, base.value);
        }
    }
    total.diff_squares = diff_total;
    total.base_squares = base_total;
    return total;
}

template <class Dtype>
CompareTotal emulate_dtype(bool use_tolerance, const void *a, const void *b, size_t count,
                           const Tolerance &tol)
{
    if (use_tolerance && Dtype::floating)
        return emulate_compare<Dtype, true>(a, b, count, tol);
    return emulate_compare<Dtype, false>(a, b, count, tol);
}

} /* namespace */

/* 0 on success, -1 for a dtype the kernels do not handle. */
extern "C" int tp_emulate_compare(const char *dtype, const void *baseline, const void *candidate,
                                  size_t element_count, int use_tolerance, double rtol,
                                  double atol, int equal_nan, tp_cuda_compare_result *result)
{
    Tolerance tol = {rtol, atol, equal_nan != 0};
    bool tolerance = use_tolerance != 0;
    CompareTotal total;
    const void *a = baseline, *b = candidate;
    size_t n = element_count;
    if (strcmp(dtype, "bool") == 0 || strcmp(dtype, "uint8") == 0)
        total = emulate_dtype<IntegerType<uint8_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "int8") == 0)
        total = emulate_dtype<IntegerType<int8_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "int16") == 0)
        total = emulate_dtype<IntegerType<int16_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "uint16") == 0)
        total = emulate_dtype<IntegerType<uint16_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "int32") == 0)
        total = emulate_dtype<IntegerType<int32_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "uint32") == 0)
        total = emulate_dtype<IntegerType<uint32_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "int64") == 0)
        total = emulate_dtype<IntegerType<int64_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "uint64") == 0)
        total = emulate_dtype<IntegerType<uint64_t>>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "float16") == 0)
        total = emulate_dtype<Float16>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "bfloat16") == 0)
        total = emulate_dtype<BFloat16>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "float32") == 0)
        total = emulate_dtype<Float32>(tolerance, a, b, n, tol);
    else if (strcmp(dtype, "float64") == 0)
        total = emulate_dtype<Float64>(tolerance, a, b, n, tol);
    else
        return -1;
    result->first_mismatch_index = total.first_mismatch;
    result->mismatch_count = total.mismatch_count;
    result_magnitudes(total, &result->max_abs_error, &result->max_rel_error,
                      &result->relative_rms_error);
    return 0;
}

namespace {

/* One lane's chain over its 16-byte block of each stripe of message[0, length),
 * the last stripe zero-padded, as the kernels run it. */
template <class V>
uint64_t emulate_lane(const unsigned char *message, uint64_t length, int lane, const uint64_t *k)
{
    namespace d = tp_digest;
    const typename V::Lane keys = V::lane_of(lane, k);
    uint64_t padded = (length + d::STRIPE_BYTES - 1) / d::STRIPE_BYTES * d::STRIPE_BYTES;
    uint64_t acc = V::initial(lane, k);
    for (uint64_t s = 0; s < padded; s += d::STRIPE_BYTES) {
        uint64_t words[2] = {0, 0};
        for (uint64_t i = 0; i < d::BLOCK_BYTES; i++) {
            uint64_t at = s + d::BLOCK_BYTES * (uint64_t)V::block_of(lane) + i;
            uint64_t byte = at < length ? message[at] : 0u;
            words[i / 8] |= byte << (8 * (i % 8));
        }
        acc = V::step(acc, words[0], words[1], keys);
    }
    return acc;
}

/* The lane hash of a whole message: V::LANES chains, then the finaliser. */
template <class V>
void emulate_lane_hash(const unsigned char *message, uint64_t length, uint64_t tag,
                       uint64_t length_field, const uint64_t *k, uint64_t *words)
{
    uint64_t acc[V::LANES];
    for (int lane = 0; lane < V::LANES; lane++)
        acc[lane] = emulate_lane<V>(message, length, lane, k);
    V::finish(acc, tag, length_field, k, words);
}

/* The digest as the two kernels compute it: lane chains per chunk, then the root. */
template <class V>
void emulate_digest(const unsigned char *bytes, size_t byte_count, const uint64_t *k,
                    unsigned char digest[16])
{
    namespace d = tp_digest;
    uint64_t chunk_count = (byte_count + d::CHUNK_BYTES - 1) / d::CHUNK_BYTES;
    uint64_t *chunk_words = static_cast<uint64_t *>(calloc(2 * chunk_count + 1, sizeof(uint64_t)));
    for (uint64_t chunk = 0; chunk < chunk_count; chunk++) {
        uint64_t offset = chunk * d::CHUNK_BYTES;
        uint64_t length = byte_count - offset < d::CHUNK_BYTES ? byte_count - offset : d::CHUNK_BYTES;
        emulate_lane_hash<V>(bytes + offset, length, chunk, length, k, chunk_words + 2 * chunk);
    }
    /* The chunk digests as bytes: little-endian words, in chunk order. */
    unsigned char *listed = static_cast<unsigned char *>(calloc(16 * chunk_count + 1, 1));
    for (uint64_t i = 0; i < 16 * chunk_count; i++)
        listed[i] = (unsigned char)(chunk_words[i / 8] >> (8 * (i % 8)));
    uint64_t root[2];
    emulate_lane_hash<V>(listed, 16 * chunk_count, d::ROOT_TAG, byte_count, k, root);
    free(listed);
    free(chunk_words);
    for (int i = 0; i < 16; i++)
        digest[i] = (unsigned char)(root[i / 8] >> (8 * (i % 8)));
}

} /* namespace */

/* Returns 0, or -1 for an unknown version. */
extern "C" int tp_emulate_digest(int version, const void *data, size_t byte_count,
                                 unsigned char digest[16])
{
    const unsigned char *bytes = static_cast<const unsigned char *>(data);
    if (version == tp_digest::V1::VERSION) {
        const uint64_t k[tp_digest::V1::SECRET_WORDS] = TP_DIGEST_V1_SECRETS;
        emulate_digest<tp_digest::V1>(bytes, byte_count, k, digest);
        return 0;
    }
    if (version == tp_digest::V2::VERSION) {
        const uint64_t k[tp_digest::V2::SECRET_WORDS] = TP_DIGEST_V2_SECRETS;
        emulate_digest<tp_digest::V2>(bytes, byte_count, k, digest);
        return 0;
    }
    return -1;
}

namespace {

/* The summary as the kernels compute it: chunk_summary_kernel's lanes, then fold_chunks_kernel. */
template <class Dtype>
void emulate_summary(const void *data, size_t element_count, tp_cuda_summary_result *result)
{
    namespace s = tp_summary;
    const typename Dtype::raw *elements = static_cast<const typename Dtype::raw *>(data);
    const size_t chunk_elements = s::CHUNK_BYTES / sizeof(typename Dtype::raw);
    s::Stats total = s::empty_stats();
    for (size_t begin = 0; begin < element_count; begin += chunk_elements) {
        size_t end = element_count - begin < chunk_elements ? element_count : begin + chunk_elements;
        s::Stats lanes[s::LANES];
        for (int lane = 0; lane < s::LANES; lane++) {
            lanes[lane] = s::empty_stats();
            for (size_t i = begin + (size_t)lane; i < end; i += s::LANES)
                s::add_element<Dtype>(lanes[lane], elements[i]);
        }
        s::fold_chunk(total, s::fold_lanes(lanes));
    }
    *result = tp_cuda_summary_result{element_count,   total.sum,       total.sum_squares,
                                     total.max_abs,   total.nan_count, total.inf_count};
}

} /* namespace */

/* 0 on success, -1 for a dtype the kernels do not handle. */
extern "C" int tp_emulate_summary(const char *dtype, const void *data, size_t element_count,
                                  tp_cuda_summary_result *result)
{
    const void *d = data;
    size_t n = element_count;
    if (strcmp(dtype, "bool") == 0)
        emulate_summary<tp_summary::Bool>(d, n, result);
    else if (strcmp(dtype, "uint8") == 0)
        emulate_summary<IntegerType<uint8_t>>(d, n, result);
    else if (strcmp(dtype, "int8") == 0)
        emulate_summary<IntegerType<int8_t>>(d, n, result);
    else if (strcmp(dtype, "int16") == 0)
        emulate_summary<IntegerType<int16_t>>(d, n, result);
    else if (strcmp(dtype, "uint16") == 0)
        emulate_summary<IntegerType<uint16_t>>(d, n, result);
    else if (strcmp(dtype, "int32") == 0)
        emulate_summary<IntegerType<int32_t>>(d, n, result);
    else if (strcmp(dtype, "uint32") == 0)
        emulate_summary<IntegerType<uint32_t>>(d, n, result);
    else if (strcmp(dtype, "int64") == 0)
        emulate_summary<IntegerType<int64_t>>(d, n, result);
    else if (strcmp(dtype, "uint64") == 0)
        emulate_summary<IntegerType<uint64_t>>(d, n, result);
    else if (strcmp(dtype, "float16") == 0)
        emulate_summary<Float16>(d, n, result);
    else if (strcmp(dtype, "bfloat16") == 0)
        emulate_summary<BFloat16>(d, n, result);
    else if (strcmp(dtype, "float32") == 0)
        emulate_summary<Float32>(d, n, result);
    else if (strcmp(dtype, "float64") == 0)
        emulate_summary<Float64>(d, n, result);
    else
        return -1;
    return 0;
}
