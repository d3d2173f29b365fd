/* summary part of the native core: a tensor's count, sum, sum of squares, max |x|
 * and NaN/Inf counts in one deterministic pass (docs/design.md, "Summaries"). */
#include "summary.h"
#include "summary_simd.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "summary.c reads elements as little-endian bytes and assumes a little-endian host"
#endif

/* The input is cut on the digest's chunk grid (65536 bytes). Each chunk's
 * partial statistics are computed on their own and folded into the result in
 * chunk order, so the result never depends on the thread count or on how a
 * caller streams the bytes (blocks of whole chunks). The fused pass (digest.c,
 * digest_summary) accumulates a chunk block by block while it hashes it. */
#define LANES SUMMARY_LANES
#define SUMMARY_MAX_THREADS 256

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define HOT_LOOP
#endif


struct summary_dtype {
    const char *name;
    size_t size;
    summary_accumulate portable;
    int float_slot; /* index into a path's loops, or SUMMARY_NOT_FLOAT */
};

/* binary16 → binary32 without branches: shifted into place, the exponent is
 * rebased by a multiplication with 2^112 (exact, subnormals included); Inf and
 * NaN get the all-ones exponent. */
static inline float half_to_float(uint16_t bits)
{
    uint32_t magnitude = bits & 0x7fffu;
    uint32_t shifted = magnitude << 13;
    float rebased;
    memcpy(&rebased, &shifted, sizeof rebased);
    rebased *= 0x1p112f;
    uint32_t special = shifted | 0x7f800000u;
    float special_value;
    memcpy(&special_value, &special, sizeof special_value);
    float value = magnitude >= 0x7c00u ? special_value : rebased;
    return (bits & 0x8000u) ? -value : value;
}

void summary_lanes_start(summary_lanes *lanes)
{
    memset(lanes, 0, sizeof *lanes);
}

void summary_lanes_fold(const summary_lanes *acc, summary_stats *out)
{
    double sum = ((acc->sum[0] + acc->sum[1]) + (acc->sum[2] + acc->sum[3])) +
                 ((acc->sum[4] + acc->sum[5]) + (acc->sum[6] + acc->sum[7]));
    double squares = ((acc->squares[0] + acc->squares[1]) + (acc->squares[2] + acc->squares[3])) +
                     ((acc->squares[4] + acc->squares[5]) + (acc->squares[6] + acc->squares[7]));
    double max_abs = 0.0;
    for (int lane = 0; lane < LANES; lane++)
        max_abs = acc->max_abs[lane] > max_abs ? acc->max_abs[lane] : max_abs;
    out->sum = sum;
    out->sum_squares = squares;
    out->max_abs = max_abs;
    out->nan_count = acc->nan_count;
    out->inf_count = acc->inf_count;
}

void summary_stats_fold(summary_stats *into, const summary_stats *chunk)
{
    into->sum += chunk->sum;
    into->sum_squares += chunk->sum_squares;
    into->max_abs = chunk->max_abs > into->max_abs ? chunk->max_abs : into->max_abs;
    into->nan_count += chunk->nan_count;
    into->inf_count += chunk->inf_count;
}

/* ---- portable loops (every dtype; the tail of the vector loops) ---- */

/* VALUE_CODE turns element `index` into a double `value` and sets `special` to 0
 * (finite), 1 (NaN) or 2 (±Inf); branch-free, so the lane loop vectorises.
 * Non-finite elements add +0.0 to the sums. */
#define ELEMENT_BODY(VALUE_CODE)                                                   \
    {                                                                              \
        double value;                                                              \
        unsigned special;                                                          \
        VALUE_CODE                                                                 \
        double kept = special == 0 ? value : 0.0;                                  \
        double magnitude = fabs(kept);                                             \
        sum[lane] += kept;                                                         \
        squares[lane] += kept * kept;                                              \
        max_abs[lane] = magnitude > max_abs[lane] ? magnitude : max_abs[lane];     \
        nan_count[lane] += special == 1 ? 1.0 : 0.0;                               \
        inf_count[lane] += special == 2 ? 1.0 : 0.0;                               \
    }

/* The counts are kept as doubles per lane (exact: a call holds at most a chunk). */
#define ELEMENT_LOOP(NAME, VALUE_CODE)                                                 \
    static HOT_LOOP void NAME(summary_lanes *acc, const unsigned char *p, size_t count) \
    {                                                                                  \
        double sum[LANES], squares[LANES], max_abs[LANES];                             \
        double nan_count[LANES] = {0}, inf_count[LANES] = {0};                         \
        memcpy(sum, acc->sum, sizeof sum);                                             \
        memcpy(squares, acc->squares, sizeof squares);                                 \
        memcpy(max_abs, acc->max_abs, sizeof max_abs);                                 \
        size_t k = 0;                                                                  \
        for (; k + LANES <= count; k += LANES)                                         \
            for (size_t lane = 0; lane < LANES; lane++) {                              \
                size_t index = k + lane;                                               \
                ELEMENT_BODY(VALUE_CODE)                                               \
            }                                                                          \
        for (size_t lane = 0; k + lane < count; lane++) {                              \
            size_t index = k + lane;                                                   \
            ELEMENT_BODY(VALUE_CODE)                                                   \
        }                                                                              \
        memcpy(acc->sum, sum, sizeof sum);                                             \
        memcpy(acc->squares, squares, sizeof squares);                                 \
        memcpy(acc->max_abs, max_abs, sizeof max_abs);                                 \
        for (int lane = 0; lane < LANES; lane++) {                                     \
            acc->nan_count += (uint64_t)nan_count[lane];                               \
            acc->inf_count += (uint64_t)inf_count[lane];                               \
        }                                                                              \
    }

#define LOAD(TYPE, OFFSET_BYTES) \
    TYPE raw;                    \
    memcpy(&raw, p + (OFFSET_BYTES), sizeof raw);

ELEMENT_LOOP(loop_bool, { value = p[index] != 0; special = 0; })
ELEMENT_LOOP(loop_uint8, { value = p[index]; special = 0; })
ELEMENT_LOOP(loop_int8, { value = (int8_t)p[index]; special = 0; })
ELEMENT_LOOP(loop_int16, { LOAD(int16_t, 2 * index) value = raw; special = 0; })
ELEMENT_LOOP(loop_uint16, { LOAD(uint16_t, 2 * index) value = raw; special = 0; })
ELEMENT_LOOP(loop_int32, { LOAD(int32_t, 4 * index) value = raw; special = 0; })
ELEMENT_LOOP(loop_uint32, { LOAD(uint32_t, 4 * index) value = raw; special = 0; })
ELEMENT_LOOP(loop_int64, { LOAD(int64_t, 8 * index) value = (double)raw; special = 0; })
ELEMENT_LOOP(loop_uint64, { LOAD(uint64_t, 8 * index) value = (double)raw; special = 0; })
ELEMENT_LOOP(loop_float16, {
    LOAD(uint16_t, 2 * index)
    unsigned magnitude_bits = raw & 0x7fffu;
    special = magnitude_bits > 0x7c00u ? 1u : (magnitude_bits == 0x7c00u ? 2u : 0u);
    value = half_to_float(raw);
})
ELEMENT_LOOP(loop_bfloat16, {
    LOAD(uint16_t, 2 * index)
    uint32_t widened = (uint32_t)raw << 16;
    float single;
    memcpy(&single, &widened, sizeof single);
    uint32_t magnitude_bits = widened & 0x7fffffffu;
    special = magnitude_bits > 0x7f800000u ? 1u : (magnitude_bits == 0x7f800000u ? 2u : 0u);
    value = single;
})
ELEMENT_LOOP(loop_float32, {
    LOAD(uint32_t, 4 * index)
    float single;
    memcpy(&single, &raw, sizeof single);
    uint32_t magnitude_bits = raw & 0x7fffffffu;
    special = magnitude_bits > 0x7f800000u ? 1u : (magnitude_bits == 0x7f800000u ? 2u : 0u);
    value = single;
})
ELEMENT_LOOP(loop_float64, {
    LOAD(uint64_t, 8 * index)
    memcpy(&value, &raw, sizeof value);
    uint64_t magnitude_bits = raw & 0x7fffffffffffffffu;
    special = magnitude_bits > 0x7ff0000000000000u ? 1u
              : (magnitude_bits == 0x7ff0000000000000u ? 2u : 0u);
})

static const struct summary_dtype dtypes[] = {
    {"bool", 1, loop_bool, SUMMARY_NOT_FLOAT},
    {"uint8", 1, loop_uint8, SUMMARY_NOT_FLOAT},
    {"int8", 1, loop_int8, SUMMARY_NOT_FLOAT},
    {"int16", 2, loop_int16, SUMMARY_NOT_FLOAT},
    {"uint16", 2, loop_uint16, SUMMARY_NOT_FLOAT},
    {"int32", 4, loop_int32, SUMMARY_NOT_FLOAT},
    {"uint32", 4, loop_uint32, SUMMARY_NOT_FLOAT},
    {"int64", 8, loop_int64, SUMMARY_NOT_FLOAT},
    {"uint64", 8, loop_uint64, SUMMARY_NOT_FLOAT},
    {"float16", 2, loop_float16, SUMMARY_FLOAT16},
    {"bfloat16", 2, loop_bfloat16, SUMMARY_BFLOAT16},
    {"float32", 4, loop_float32, SUMMARY_FLOAT32},
    {"float64", 8, loop_float64, SUMMARY_FLOAT64},
};
#define DTYPE_COUNT (sizeof dtypes / sizeof dtypes[0])

/* ---- vector loops of the floating dtypes (the groups are in summary_simd.h) ----
 *
 * Eight elements at a time; the last count % 8 go through the portable loop. */

typedef struct {
    const char *path; /* "scalar", "avx2", "avx512" */
    int (*supported)(void);
    summary_accumulate loops[SUMMARY_FLOAT_SLOTS];
} float_loops;

static int always_supported(void)
{
    return 1;
}

static const float_loops scalar_loops = {
    .path = "scalar",
    .supported = always_supported,
    .loops = {loop_float16, loop_bfloat16, loop_float32, loop_float64},
};

#ifdef SUMMARY_HAVE_X86

#define AVX2_LOOP(NAME, ELEMENT_BYTES, GROUP, PORTABLE)                                     \
    SUMMARY_AVX2 static void NAME(summary_lanes *acc, const unsigned char *p, size_t count) \
    {                                                                                      \
        avx2_acc v = avx2_acc_load(acc);                                                   \
        for (size_t g = 0; g < count / LANES; g++, p += LANES * (ELEMENT_BYTES))           \
            GROUP(&v, acc, p);                                                             \
        avx2_acc_store(acc, &v);                                                           \
        PORTABLE(acc, p, count % LANES);                                                   \
    }

AVX2_LOOP(avx2_float16, 2, avx2_group_float16, loop_float16)
AVX2_LOOP(avx2_bfloat16, 2, avx2_group_bfloat16, loop_bfloat16)
AVX2_LOOP(avx2_float32, 4, avx2_group_float32, loop_float32)
AVX2_LOOP(avx2_float64, 8, avx2_group_float64, loop_float64)

static int avx2_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

static const float_loops avx2_loops = {
    .path = "avx2",
    .supported = avx2_supported,
    .loops = {avx2_float16, avx2_bfloat16, avx2_float32, avx2_float64},
};

#define AVX512_LOOP(NAME, ELEMENT_BYTES, GROUP, PORTABLE)                                   \
    SUMMARY_AVX512 static void NAME(summary_lanes *acc, const unsigned char *p, size_t count) \
    {                                                                                        \
        avx512_acc v = avx512_acc_load(acc);                                                 \
        for (size_t g = 0; g < count / LANES; g++, p += LANES * (ELEMENT_BYTES))             \
            GROUP(&v, acc, p);                                                               \
        avx512_acc_store(acc, &v);                                                           \
        PORTABLE(acc, p, count % LANES);                                                     \
    }

AVX512_LOOP(avx512_float16, 2, avx512_group_float16, loop_float16)
AVX512_LOOP(avx512_bfloat16, 2, avx512_group_bfloat16, loop_bfloat16)
AVX512_LOOP(avx512_float32, 4, avx512_group_float32, loop_float32)
AVX512_LOOP(avx512_float64, 8, avx512_group_float64, loop_float64)

static int avx512_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           avx2_supported();
}

static const float_loops avx512_loops = {
    .path = "avx512",
    .supported = avx512_supported,
    .loops = {avx512_float16, avx512_bfloat16, avx512_float32, avx512_float64},
};

#endif /* SUMMARY_HAVE_X86 */

/* The paths compiled in, portable first, then faster ones; NULL-terminated. */
static const float_loops *const float_paths[] = {
    &scalar_loops,
#ifdef SUMMARY_HAVE_X86
    &avx2_loops,
    &avx512_loops,
#endif
    NULL,
};

/* The fastest path this machine runs; set by tp_summary_init. */
static const float_loops *default_loops = &scalar_loops;

static const float_loops *find_loops(const char *path)
{
    for (const float_loops *const *l = float_paths; *l != NULL; l++)
        if (strcmp((*l)->path, path) == 0 && (*l)->supported())
            return *l;
    return NULL;
}

const summary_dtype *summary_parse_dtype(const char *name, const char *function)
{
    for (size_t i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    PyErr_Format(PyExc_ValueError,
                 "%s() does not support dtype '%s'; supported: bool, uint8, int8, int16, "
                 "uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64",
                 function, name);
    return NULL;
}

size_t summary_element_size(const summary_dtype *dtype)
{
    return dtype->size;
}

int summary_float_slot(const summary_dtype *dtype)
{
    return dtype->float_slot;
}

int summary_path_supported(const char *path)
{
    return find_loops(path) != NULL;
}

summary_accumulate summary_accumulator(const summary_dtype *dtype, const char *path)
{
    if (dtype->float_slot == SUMMARY_NOT_FLOAT)
        return dtype->portable;
    const float_loops *loops = default_loops;
    if (path != NULL) {
        loops = find_loops(path);
        if (loops == NULL)
            loops = &scalar_loops;
    }
    return loops->loops[dtype->float_slot];
}

/* ---- summary(): statistics only, chunks split over threads ---- */

static void chunk_stats(summary_accumulate accumulate, const unsigned char *p, size_t count,
                        summary_stats *out)
{
    summary_lanes acc;
    summary_lanes_start(&acc);
    accumulate(&acc, p, count);
    summary_lanes_fold(&acc, out);
}

typedef struct {
    summary_accumulate accumulate;
    size_t element_size;
    const unsigned char *data;
    size_t length;
    size_t first_chunk;
    size_t chunk_count;
    summary_stats *partials; /* one per chunk of the whole input */
} chunk_job;

static void chunk_range(const chunk_job *job, size_t i, summary_stats *out)
{
    size_t begin = i * SUMMARY_CHUNK_BYTES;
    size_t end = begin + SUMMARY_CHUNK_BYTES < job->length ? begin + SUMMARY_CHUNK_BYTES
                                                           : job->length;
    chunk_stats(job->accumulate, job->data + begin, (end - begin) / job->element_size, out);
}

static void run_chunk_job(const chunk_job *job)
{
    for (size_t i = job->first_chunk; i < job->first_chunk + job->chunk_count; i++)
        chunk_range(job, i, &job->partials[i]);
}

static void *chunk_job_thread(void *arg)
{
    run_chunk_job(arg);
    return NULL;
}

typedef enum { SUMMARY_OK, SUMMARY_OUT_OF_MEMORY, SUMMARY_JOIN_FAILED } summary_status;

/* Folds the statistics of `data` into `total`, chunk by chunk in order. */
static summary_status summary_compute(summary_accumulate accumulate, size_t element_size,
                                      const unsigned char *data, size_t length, size_t threads,
                                      summary_stats *total, int *join_error)
{
    size_t chunks = (length + SUMMARY_CHUNK_BYTES - 1) / SUMMARY_CHUNK_BYTES;
    if (threads > chunks)
        threads = chunks;
    if (threads <= 1) {
        chunk_job whole = {accumulate, element_size, data, length, 0, chunks, NULL};
        for (size_t i = 0; i < chunks; i++) {
            summary_stats chunk;
            chunk_range(&whole, i, &chunk);
            summary_stats_fold(total, &chunk);
        }
        return SUMMARY_OK;
    }
    summary_stats *partials = malloc(chunks * sizeof *partials);
    chunk_job *jobs = malloc(threads * sizeof *jobs);
    pthread_t *handles = malloc(threads * sizeof *handles);
    int *started = calloc(threads, sizeof *started);
    if (partials == NULL || jobs == NULL || handles == NULL || started == NULL) {
        free(partials);
        free(jobs);
        free(handles);
        free(started);
        return SUMMARY_OUT_OF_MEMORY;
    }
    size_t per_thread = chunks / threads, extra = chunks % threads, next = 0;
    for (size_t t = 0; t < threads; t++) {
        size_t count = per_thread + (t < extra ? 1 : 0);
        jobs[t] = (chunk_job){accumulate, element_size, data, length, next, count, partials};
        next += count;
    }
    /* The calling thread takes the first range; a thread that cannot be started
     * has its range run here too. */
    for (size_t t = 1; t < threads; t++)
        started[t] = pthread_create(&handles[t], NULL, chunk_job_thread, &jobs[t]) == 0;
    run_chunk_job(&jobs[0]);
    summary_status status = SUMMARY_OK;
    for (size_t t = 1; t < threads; t++) {
        if (!started[t]) {
            run_chunk_job(&jobs[t]);
            continue;
        }
        int error = pthread_join(handles[t], NULL);
        if (error != 0) {
            *join_error = error;
            status = SUMMARY_JOIN_FAILED;
        }
    }
    if (status == SUMMARY_OK)
        for (size_t i = 0; i < chunks; i++)
            summary_stats_fold(total, &partials[i]);
    /* After a failed join a thread may still write its partials: leak them. */
    if (status == SUMMARY_OK)
        free(partials);
    free(jobs);
    free(handles);
    free(started);
    return status;
}

static int parse_threads(PyObject *threads_obj, size_t *threads)
{
    if (threads_obj == NULL) {
        *threads = 1;
        return 0;
    }
    if (!PyLong_Check(threads_obj) || PyBool_Check(threads_obj)) {
        PyErr_Format(PyExc_TypeError, "summary() threads must be an int >= 1, not %.100s",
                     Py_TYPE(threads_obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(threads_obj, &overflow);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (overflow == 0 && value < 1)) {
        PyErr_Format(PyExc_ValueError, "summary() threads must be >= 1, got %S", threads_obj);
        return -1;
    }
    *threads =
        (overflow > 0 || value > SUMMARY_MAX_THREADS) ? SUMMARY_MAX_THREADS : (size_t)value;
    return 0;
}

/* Names of the statistics paths this machine runs, portable first, as a tuple. */
static PyObject *supported_paths(void)
{
    PyObject *names = PyList_New(0);
    if (names == NULL)
        return NULL;
    for (const float_loops *const *l = float_paths; *l != NULL; l++) {
        if (!(*l)->supported())
            continue;
        PyObject *name = PyUnicode_FromString((*l)->path);
        if (name == NULL || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(name);
    }
    PyObject *paths = PyList_AsTuple(names);
    Py_DECREF(names);
    return paths;
}

/* summary()'s `path`: None, or the name of a statistics path this machine runs. */
static int parse_path(PyObject *path_obj, const char **path)
{
    *path = NULL;
    if (path_obj == NULL || path_obj == Py_None)
        return 0;
    if (!PyUnicode_Check(path_obj)) {
        PyErr_Format(PyExc_TypeError, "summary() path must be a str or None, not %.100s",
                     Py_TYPE(path_obj)->tp_name);
        return -1;
    }
    *path = PyUnicode_AsUTF8(path_obj);
    if (*path == NULL)
        return -1;
    if (find_loops(*path) != NULL)
        return 0;
    PyObject *available = supported_paths();
    if (available != NULL)
        PyErr_Format(PyExc_ValueError,
                     "summary() path %R is not available on this machine; available: %R",
                     path_obj, available);
    Py_XDECREF(available);
    return -1;
}

int summary_parse_state(PyObject *state, const summary_dtype *dtype, const char *function,
                        uint64_t *count, summary_stats *total)
{
    *count = 0;
    *total = (summary_stats){0.0, 0.0, 0.0, 0, 0};
    if (state == NULL || state == Py_None)
        return 0;
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 6) {
        PyErr_Format(PyExc_TypeError,
                     "%s() state must be the 6-tuple a previous call returned", function);
        return -1;
    }
    PyObject *items[6];
    for (int i = 0; i < 6; i++) {
        items[i] = PyTuple_GET_ITEM(state, i);
        int integer = i == 0 || i >= 4;
        if (integer ? (!PyLong_Check(items[i]) || PyBool_Check(items[i]))
                    : !PyFloat_Check(items[i])) {
            PyErr_Format(PyExc_TypeError,
                         "%s() state must be the 6-tuple a previous call returned", function);
            return -1;
        }
    }
    unsigned long long values[3];
    int slots[3] = {0, 4, 5};
    for (int i = 0; i < 3; i++) {
        values[i] = PyLong_AsUnsignedLongLong(items[slots[i]]);
        if (values[i] == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
    }
    *count = values[0];
    if (((uint64_t)*count * dtype->size) % SUMMARY_CHUNK_BYTES != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s() can only continue after whole chunks of %zu bytes; the previous "
                     "blocks held %llu elements of %zu bytes",
                     function, SUMMARY_CHUNK_BYTES, (unsigned long long)*count, dtype->size);
        return -1;
    }
    total->sum = PyFloat_AS_DOUBLE(items[1]);
    total->sum_squares = PyFloat_AS_DOUBLE(items[2]);
    total->max_abs = PyFloat_AS_DOUBLE(items[3]);
    total->nan_count = values[1];
    total->inf_count = values[2];
    return 0;
}

PyObject *summary_state_tuple(uint64_t count, const summary_stats *total)
{
    return Py_BuildValue("(KdddKK)", (unsigned long long)count, total->sum, total->sum_squares,
                         total->max_abs, (unsigned long long)total->nan_count,
                         (unsigned long long)total->inf_count);
}

static PyObject *tp_summary(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dtype", "data", "state", "threads", "path", NULL};
    const char *dtype_name;
    PyObject *data;
    PyObject *state = NULL;
    PyObject *threads_obj = NULL, *path_obj = NULL;
    size_t threads;
    const char *path;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|O$OO:summary", keywords, &dtype_name,
                                     &data, &state, &threads_obj, &path_obj))
        return NULL;
    const summary_dtype *dtype = summary_parse_dtype(dtype_name, "summary");
    if (dtype == NULL)
        return NULL;
    if (parse_threads(threads_obj, &threads) < 0 || parse_path(path_obj, &path) < 0)
        return NULL;
    uint64_t count;
    summary_stats total;
    if (summary_parse_state(state, dtype, "summary", &count, &total) < 0)
        return NULL;
    if (!PyObject_CheckBuffer(data)) {
        PyErr_Format(PyExc_TypeError,
                     "summary() data must support the buffer protocol, not %.100s",
                     Py_TYPE(data)->tp_name);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_STRIDES) < 0)
        return NULL;
    if (!PyBuffer_IsContiguous(&view, 'C')) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "summary() data must be a C-contiguous buffer; make a contiguous copy "
                        "first");
        return NULL;
    }
    size_t length = (size_t)view.len;
    if (length % dtype->size != 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError,
                     "summary() data has %zu bytes, not a multiple of the %s element size %zu",
                     length, dtype->name, dtype->size);
        return NULL;
    }
    summary_accumulate accumulate = summary_accumulator(dtype, path);
    summary_status status;
    int join_error = 0;
    Py_BEGIN_ALLOW_THREADS
    status = summary_compute(accumulate, dtype->size, view.buf, length, threads, &total,
                             &join_error);
    Py_END_ALLOW_THREADS
    if (status == SUMMARY_JOIN_FAILED) {
        /* A thread we could not join may still read the data: keep it exported. */
        PyErr_Format(PyExc_SystemError, "summary(): pthread_join failed: %s",
                     strerror(join_error));
        return NULL;
    }
    PyBuffer_Release(&view);
    if (status == SUMMARY_OUT_OF_MEMORY)
        return PyErr_NoMemory();
    return summary_state_tuple(count + length / dtype->size, &total);
}

PyDoc_STRVAR(tp_summary_doc,
"summary(dtype, data, state=None, *, threads=1, path=None)\n"
"    -> (count, sum, sum_squares, max_abs, nan_count, inf_count)\n"
"\n"
"Statistics of the elements of a C-contiguous little-endian buffer of one dtype\n"
"(bool, integers, float16, bfloat16, float32, float64), in double precision:\n"
"sum, sum of squares and max |x| over the finite elements, NaN and Inf counted.\n"
"The same result for any `threads`, any alignment and any `path` (one of\n"
"SUMMARY_PATHS, default SUMMARY_PATH). To stream a large buffer, pass the previous\n"
"result as `state` with the next block; every block but the last must hold whole\n"
"chunks of SUMMARY_CHUNK_BYTES. digest_summary() computes the digest in the same\n"
"pass. See docs/design.md.");

PyMethodDef tp_summary_methods[] = {
    {"summary", (PyCFunction)(void (*)(void))tp_summary, METH_VARARGS | METH_KEYWORDS,
     tp_summary_doc},
    {NULL, NULL, 0, NULL},
};

int tp_summary_init(PyObject *module)
{
    for (const float_loops *const *l = float_paths; *l != NULL; l++)
        if ((*l)->supported())
            default_loops = *l;
    PyObject *paths = supported_paths();
    if (paths == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(module, "SUMMARY_PATHS", paths);
    Py_DECREF(paths);
    if (rc < 0 || PyModule_AddStringConstant(module, "SUMMARY_PATH", default_loops->path) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "SUMMARY_CHUNK_BYTES", (long)SUMMARY_CHUNK_BYTES);
}
