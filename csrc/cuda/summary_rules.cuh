/* Element rules and reduction order of the summary statistics (docs/design.md, "Summaries"),
 * written once for the CUDA kernel (summary.cu) and its host emulation
 * (tests/gpu/emulate_kernels.cpp).
 *
 * The same IEEE double operations in the same order as src/_trainparity/summary.c: per
 * 65536-byte chunk, element k into lane k % 8, each lane summed in element order from
 * +0.0; the lanes folded ((0+1)+(2+3))+((4+5)+(6+7)); the chunks added to the total in
 * chunk order. Non-finite elements add +0.0 and are counted. Maxima and counts are exact
 * in any order. */
#ifndef TRAINPARITY_CUDA_SUMMARY_RULES_CUH
#define TRAINPARITY_CUDA_SUMMARY_RULES_CUH

#include "compare_rules.cuh"

namespace tp_summary {

using tp_rules::add;
using tp_rules::multiply;

constexpr uint64_t CHUNK_BYTES = 65536;
constexpr int LANES = 8;

/* bool: any nonzero byte is 1 (summary.c reads `p[index] != 0`). */
struct Bool {
    typedef uint8_t raw;
    TP_RULE static double value(raw v) { return v != 0 ? 1.0 : 0.0; }
    TP_RULE static bool finite(raw) { return true; }
    TP_RULE static bool nan(raw) { return false; }
};

/* One lane's statistics, or a chunk's, or the total. */
struct Stats {
    double sum;
    double sum_squares;
    double max_abs;
    uint64_t nan_count;
    uint64_t inf_count;
};

TP_RULE Stats empty_stats()
{
    Stats stats = {0.0, 0.0, 0.0, 0u, 0u};
    return stats;
}

template <class Dtype>
TP_RULE void add_element(Stats &lane, typename Dtype::raw raw)
{
    const bool finite = Dtype::finite(raw);
    const bool nan = Dtype::nan(raw);
    const double kept = finite ? Dtype::value(raw) : 0.0;
    const double magnitude = fabs(kept);
    lane.sum = add(lane.sum, kept);
    lane.sum_squares = add(lane.sum_squares, multiply(kept, kept));
    lane.max_abs = magnitude > lane.max_abs ? magnitude : lane.max_abs;
    lane.nan_count += nan ? 1u : 0u;
    lane.inf_count += (!finite && !nan) ? 1u : 0u;
}

TP_RULE double fold_eight(const double v[LANES])
{
    return add(add(add(v[0], v[1]), add(v[2], v[3])), add(add(v[4], v[5]), add(v[6], v[7])));
}

/* A chunk's statistics from its eight lanes. */
TP_RULE Stats fold_lanes(const Stats lanes[LANES])
{
    double sums[LANES], squares[LANES];
    Stats chunk = empty_stats();
    for (int l = 0; l < LANES; l++) {
        sums[l] = lanes[l].sum;
        squares[l] = lanes[l].sum_squares;
        chunk.max_abs = lanes[l].max_abs > chunk.max_abs ? lanes[l].max_abs : chunk.max_abs;
        chunk.nan_count += lanes[l].nan_count;
        chunk.inf_count += lanes[l].inf_count;
    }
    chunk.sum = fold_eight(sums);
    chunk.sum_squares = fold_eight(squares);
    return chunk;
}

/* Adds a chunk to the running total; called in chunk order. */
TP_RULE void fold_chunk(Stats &total, const Stats &chunk)
{
    total.sum = add(total.sum, chunk.sum);
    total.sum_squares = add(total.sum_squares, chunk.sum_squares);
    total.max_abs = chunk.max_abs > total.max_abs ? chunk.max_abs : total.max_abs;
    total.nan_count += chunk.nan_count;
    total.inf_count += chunk.inf_count;
}

} /* namespace tp_summary */

#endif
