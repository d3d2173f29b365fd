/* C interface of the CUDA compare, digest and summary kernels (compare.cu, digest.cu,
 * summary.cu).
 *
 * Plain C declarations: the torch binding includes this without any CUDA
 * header. Every launcher takes device pointers, sizes and a stream, runs on the
 * calling thread's current device, waits for its stream and returns 0 or an
 * error code for tp_cuda_error_string (a cudaError_t, or a negative value for
 * a bad argument). */
#ifndef TRAINPARITY_CUDA_LAUNCHERS_H
#define TRAINPARITY_CUDA_LAUNCHERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The same declaration as the CUDA runtime's, so both may be included. */
typedef struct CUstream_st *cudaStream_t;

enum {
    TP_CUDA_BAD_ARGUMENT = -1,        /* sizes, pointers or launch shape out of range */
    TP_CUDA_WORKSPACE_TOO_SMALL = -2, /* smaller than the *_workspace_bytes function says */
};

/* Threads per block and blocks per grid; 0 lets the launcher choose. Results
 * never depend on them (tests/gpu checks that). block_threads must be a
 * multiple of 32 from 32 to 256. */
typedef struct {
    unsigned block_threads;
    unsigned grid_blocks;
} tp_cuda_launch_shape;

/* The compare core's result tuple (docs/design.md, "Compare core"). */
typedef struct {
    int64_t first_mismatch_index;
    uint64_t mismatch_count;
    double max_abs_error;
    double max_rel_error;
    double relative_rms_error;
} tp_cuda_compare_result;

/* Index of a dtype the kernels handle, by its name in the C core ("float32"),
 * or -1 when they do not handle it (complex and float8 dtypes). */
int tp_cuda_dtype_index(const char *name);
/* Element size in bytes of a dtype index. */
size_t tp_cuda_dtype_size(int dtype);
/* Name of a dtype index; NULL past the last one. */
const char *tp_cuda_dtype_name(int dtype);

size_t tp_cuda_compare_workspace_bytes(size_t element_count);

/* Compares element_count elements of `dtype` at two device pointers: exact
 * when use_tolerance is 0, else torch.isclose(baseline, candidate, rtol, atol,
 * equal_nan) per element (integer and bool dtypes stay exact). */
int tp_cuda_compare(int dtype, const void *baseline, const void *candidate, size_t element_count,
                    int use_tolerance, double rtol, double atol, int equal_nan, void *workspace,
                    size_t workspace_bytes, tp_cuda_launch_shape shape, cudaStream_t stream,
                    tp_cuda_compare_result *result);

size_t tp_cuda_digest_workspace_bytes(size_t byte_count);

/* The C core's 128-bit digest (docs/design.md, "Digest") of byte_count bytes, by digest
 * version 1 or 2 (any other version is TP_CUDA_BAD_ARGUMENT). */
int tp_cuda_digest(int version, const void *data, size_t byte_count, void *workspace,
                   size_t workspace_bytes, tp_cuda_launch_shape shape, cudaStream_t stream,
                   unsigned char digest[16]);

/* The C core's summary() tuple (docs/design.md, "Summaries"). */
typedef struct {
    uint64_t count;
    double sum;
    double sum_squares;
    double max_abs;
    uint64_t nan_count;
    uint64_t inf_count;
} tp_cuda_summary_result;

size_t tp_cuda_summary_workspace_bytes(int dtype, size_t element_count);

/* The C core's summary statistics of element_count elements of `dtype` (a
 * tp_cuda_dtype_index) at a device pointer aligned to the element size. */
int tp_cuda_summary(int dtype, const void *data, size_t element_count, void *workspace,
                    size_t workspace_bytes, tp_cuda_launch_shape shape, cudaStream_t stream,
                    tp_cuda_summary_result *result);

const char *tp_cuda_error_string(int error);

#ifdef __cplusplus
}
#endif

#endif
