/* Internal interface of the summary statistics (summary.c), shared with the fused
 * digest+summary pass (digest.c): one chunk's statistics are accumulated block by block
 * while the digest hashes the same bytes. */
#ifndef TRAINPARITY_SUMMARY_H
#define TRAINPARITY_SUMMARY_H

#include "tp.h"

#include <stddef.h>
#include <stdint.h>

/* The chunk grid of the statistics: the digest's (DIGEST_CHUNK_BYTES). */
#define SUMMARY_CHUNK_BYTES ((size_t)65536)
/* Element k of a chunk goes to lane k % SUMMARY_LANES. */
#define SUMMARY_LANES 8

typedef struct {
    double sum;
    double sum_squares;
    double max_abs;
    uint64_t nan_count;
    uint64_t inf_count;
} summary_stats;

/* One chunk's statistics in progress. Only the sums depend on the order of the
 * additions; the maxima and counts are exact in any order. */
typedef struct summary_lanes {
    double sum[SUMMARY_LANES];
    double squares[SUMMARY_LANES];
    double max_abs[SUMMARY_LANES];
    uint64_t nan_count;
    uint64_t inf_count;
} summary_lanes;

/* Adds `count` elements at p (any alignment) to the lanes, element i of the call
 * into lane i % SUMMARY_LANES: every call for a chunk but its last must pass a
 * multiple of SUMMARY_LANES elements, so that element k of the chunk lands in lane
 * k % SUMMARY_LANES. */
typedef void (*summary_accumulate)(summary_lanes *lanes, const unsigned char *p, size_t count);

typedef struct summary_dtype summary_dtype;

/* The floating dtypes, which have vector loops (and fused digest loops, digest.h). */
enum {
    SUMMARY_FLOAT16,
    SUMMARY_BFLOAT16,
    SUMMARY_FLOAT32,
    SUMMARY_FLOAT64,
    SUMMARY_FLOAT_SLOTS,
    SUMMARY_NOT_FLOAT = -1
};

/* The dtype called `name`, or NULL with ValueError naming the supported ones. */
const summary_dtype *summary_parse_dtype(const char *name, const char *function);
size_t summary_element_size(const summary_dtype *dtype);
/* SUMMARY_FLOAT16 ... SUMMARY_FLOAT64, or SUMMARY_NOT_FLOAT. */
int summary_float_slot(const summary_dtype *dtype);
/* Whether this machine runs the statistics path called `path`. */
int summary_path_supported(const char *path);

/* The statistics loop of `dtype` on the path called `path`: NULL means
 * SUMMARY_PATH (the fastest this machine runs); a name without a statistics loop of
 * its own (e.g. "neon") gets the portable one. Every path gives the same bits. */
summary_accumulate summary_accumulator(const summary_dtype *dtype, const char *path);

void summary_lanes_start(summary_lanes *lanes);
/* A chunk's statistics from its lanes: sums folded pairwise
 * ((0+1)+(2+3))+((4+5)+(6+7)). */
void summary_lanes_fold(const summary_lanes *lanes, summary_stats *chunk);
/* Adds one chunk's statistics to a running total (called in chunk order). */
void summary_stats_fold(summary_stats *total, const summary_stats *chunk);

/* Reads `state` (None, or the 6-tuple a previous call returned) into count and
 * total; 0, or -1 with an exception set. The previous blocks must have ended on
 * the chunk grid. */
int summary_parse_state(PyObject *state, const summary_dtype *dtype, const char *function,
                        uint64_t *count, summary_stats *total);
/* (count, sum, sum_squares, max_abs, nan_count, inf_count) */
PyObject *summary_state_tuple(uint64_t count, const summary_stats *total);

#endif
