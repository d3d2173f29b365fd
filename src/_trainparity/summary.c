/* summary part of the native core: a tensor's count, sum, sum of squares, max |x|
 * and NaN/Inf counts in one deterministic pass (docs/design.md, "Summaries"). */
#include "tp.h"

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
 * caller streams the bytes (blocks of whole chunks). A fused summary+digest
 * pass computes a chunk's digest D_i in the same loop over the same bytes. */
#define SUMMARY_CHUNK_BYTES ((size_t)65536)
/* Element k of a chunk goes to accumulator k % LANES: the compiler can keep the
 * lanes in vector registers without reassociating any addition. */
#define LANES 8
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

typedef struct {
    double sum;
    double sum_squares;
    double max_abs;
    uint64_t nan_count;
    uint64_t inf_count;
} stats;

typedef enum {
    KIND_BOOL,
    KIND_UINT8,
    KIND_INT8,
    KIND_INT16,
    KIND_UINT16,
    KIND_INT32,
    KIND_UINT32,
    KIND_INT64,
    KIND_UINT64,
    KIND_FLOAT16,
    KIND_BFLOAT16,
    KIND_FLOAT32,
    KIND_FLOAT64,
} element_kind;

typedef struct {
    const char *name;
    element_kind kind;
    size_t size;
} dtype_entry;

static const dtype_entry dtypes[] = {
    {"bool", KIND_BOOL, 1},       {"uint8", KIND_UINT8, 1},       {"int8", KIND_INT8, 1},
    {"int16", KIND_INT16, 2},     {"uint16", KIND_UINT16, 2},     {"int32", KIND_INT32, 4},
    {"uint32", KIND_UINT32, 4},   {"int64", KIND_INT64, 8},       {"uint64", KIND_UINT64, 8},
    {"float16", KIND_FLOAT16, 2}, {"bfloat16", KIND_BFLOAT16, 2}, {"float32", KIND_FLOAT32, 4},
    {"float64", KIND_FLOAT64, 8},
};
#define DTYPE_COUNT (sizeof dtypes / sizeof dtypes[0])

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

/* One lane's accumulators; `finite` values enter the sums, the others are counted. */
typedef struct {
    double sum[LANES];
    double squares[LANES];
    double max_abs[LANES];
    double nan_count[LANES]; /* exact: a chunk has at most 65536 elements */
    double inf_count[LANES];
} lanes;

static void lanes_fold(const lanes *acc, stats *out)
{
    double sum = ((acc->sum[0] + acc->sum[1]) + (acc->sum[2] + acc->sum[3])) +
                 ((acc->sum[4] + acc->sum[5]) + (acc->sum[6] + acc->sum[7]));
    double squares = ((acc->squares[0] + acc->squares[1]) + (acc->squares[2] + acc->squares[3])) +
                     ((acc->squares[4] + acc->squares[5]) + (acc->squares[6] + acc->squares[7]));
    double max_abs = 0.0;
    uint64_t nan_count = 0, inf_count = 0;
    for (int lane = 0; lane < LANES; lane++) {
        max_abs = acc->max_abs[lane] > max_abs ? acc->max_abs[lane] : max_abs;
        nan_count += (uint64_t)acc->nan_count[lane];
        inf_count += (uint64_t)acc->inf_count[lane];
    }
    out->sum = sum;
    out->sum_squares = squares;
    out->max_abs = max_abs;
    out->nan_count = nan_count;
    out->inf_count = inf_count;
}

/* Element loops. VALUE_CODE turns element `index` into a double `value` and
 * sets `special` to 0 (finite), 1 (NaN) or 2 (±Inf); branch-free, so the lane
 * loop vectorises. */
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

#define ELEMENT_LOOP(NAME, VALUE_CODE)                                             \
    static HOT_LOOP void NAME(const unsigned char *p, size_t count, lanes *acc)  \
    {                                                                            \
        double sum[LANES] = {0}, squares[LANES] = {0}, max_abs[LANES] = {0};     \
        double nan_count[LANES] = {0}, inf_count[LANES] = {0};                   \
        size_t k = 0;                                                            \
        for (; k + LANES <= count; k += LANES)                                   \
            for (size_t lane = 0; lane < LANES; lane++) {                        \
                size_t index = k + lane;                                         \
                ELEMENT_BODY(VALUE_CODE)                                         \
            }                                                                    \
        for (size_t lane = 0; k + lane < count; lane++) {                        \
            size_t index = k + lane;                                             \
            ELEMENT_BODY(VALUE_CODE)                                             \
        }                                                                        \
        memcpy(acc->sum, sum, sizeof sum);                                       \
        memcpy(acc->squares, squares, sizeof squares);                           \
        memcpy(acc->max_abs, max_abs, sizeof max_abs);                           \
        memcpy(acc->nan_count, nan_count, sizeof nan_count);                     \
        memcpy(acc->inf_count, inf_count, sizeof inf_count);                     \
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

static void chunk_stats(element_kind kind, const unsigned char *p, size_t count, stats *out)
{
    lanes acc;
    memset(&acc, 0, sizeof acc);
    switch (kind) {
    case KIND_BOOL: loop_bool(p, count, &acc); break;
    case KIND_UINT8: loop_uint8(p, count, &acc); break;
    case KIND_INT8: loop_int8(p, count, &acc); break;
    case KIND_INT16: loop_int16(p, count, &acc); break;
    case KIND_UINT16: loop_uint16(p, count, &acc); break;
    case KIND_INT32: loop_int32(p, count, &acc); break;
    case KIND_UINT32: loop_uint32(p, count, &acc); break;
    case KIND_INT64: loop_int64(p, count, &acc); break;
    case KIND_UINT64: loop_uint64(p, count, &acc); break;
    case KIND_FLOAT16: loop_float16(p, count, &acc); break;
    case KIND_BFLOAT16: loop_bfloat16(p, count, &acc); break;
    case KIND_FLOAT32: loop_float32(p, count, &acc); break;
    case KIND_FLOAT64: loop_float64(p, count, &acc); break;
    }
    lanes_fold(&acc, out);
}

static void stats_fold(stats *into, const stats *chunk)
{
    into->sum += chunk->sum;
    into->sum_squares += chunk->sum_squares;
    into->max_abs = chunk->max_abs > into->max_abs ? chunk->max_abs : into->max_abs;
    into->nan_count += chunk->nan_count;
    into->inf_count += chunk->inf_count;
}

typedef struct {
    element_kind kind;
    size_t element_size;
    const unsigned char *data;
    size_t length;
    size_t first_chunk;
    size_t chunk_count;
    stats *partials; /* one per chunk of the whole input */
} chunk_job;

static void run_chunk_job(const chunk_job *job)
{
    for (size_t i = job->first_chunk; i < job->first_chunk + job->chunk_count; i++) {
        size_t begin = i * SUMMARY_CHUNK_BYTES;
        size_t end = begin + SUMMARY_CHUNK_BYTES < job->length ? begin + SUMMARY_CHUNK_BYTES
                                                               : job->length;
        chunk_stats(job->kind, job->data + begin, (end - begin) / job->element_size,
                    &job->partials[i]);
    }
}

static void *chunk_job_thread(void *arg)
{
    run_chunk_job(arg);
    return NULL;
}

typedef enum { SUMMARY_OK, SUMMARY_OUT_OF_MEMORY, SUMMARY_JOIN_FAILED } summary_status;

/* Folds the statistics of `data` into `total`, chunk by chunk in order. */
static summary_status summary_compute(const dtype_entry *entry, const unsigned char *data,
                                      size_t length, size_t threads, stats *total,
                                      int *join_error)
{
    size_t chunks = (length + SUMMARY_CHUNK_BYTES - 1) / SUMMARY_CHUNK_BYTES;
    if (threads > chunks)
        threads = chunks;
    if (threads <= 1) {
        for (size_t i = 0; i < chunks; i++) {
            size_t begin = i * SUMMARY_CHUNK_BYTES;
            size_t end = begin + SUMMARY_CHUNK_BYTES < length ? begin + SUMMARY_CHUNK_BYTES : length;
            stats chunk;
            chunk_stats(entry->kind, data + begin, (end - begin) / entry->size, &chunk);
            stats_fold(total, &chunk);
        }
        return SUMMARY_OK;
    }
    stats *partials = malloc(chunks * sizeof *partials);
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
        jobs[t] = (chunk_job){entry->kind, entry->size, data, length, next, count, partials};
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
            stats_fold(total, &partials[i]);
    /* After a failed join a thread may still write its partials: leak them. */
    if (status == SUMMARY_OK)
        free(partials);
    free(jobs);
    free(handles);
    free(started);
    return status;
}

static const dtype_entry *find_dtype(const char *name)
{
    for (size_t i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    return NULL;
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

/* state = (count, sum, sum_squares, max_abs, nan_count, inf_count) */
static int parse_state(PyObject *state, const dtype_entry *entry, uint64_t *count, stats *total)
{
    if (state == NULL || state == Py_None)
        return 0;
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "summary() state must be the 6-tuple a previous summary() returned");
        return -1;
    }
    PyObject *items[6];
    for (int i = 0; i < 6; i++) {
        items[i] = PyTuple_GET_ITEM(state, i);
        int integer = i == 0 || i >= 4;
        if (integer ? (!PyLong_Check(items[i]) || PyBool_Check(items[i]))
                    : !PyFloat_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError,
                            "summary() state must be the 6-tuple a previous summary() returned");
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
    if (((uint64_t)*count * entry->size) % SUMMARY_CHUNK_BYTES != 0) {
        PyErr_Format(PyExc_ValueError,
                     "summary() can only continue after whole chunks of %zu bytes; the previous "
                     "blocks held %llu elements of %zu bytes",
                     SUMMARY_CHUNK_BYTES, (unsigned long long)*count, entry->size);
        return -1;
    }
    total->sum = PyFloat_AS_DOUBLE(items[1]);
    total->sum_squares = PyFloat_AS_DOUBLE(items[2]);
    total->max_abs = PyFloat_AS_DOUBLE(items[3]);
    total->nan_count = values[1];
    total->inf_count = values[2];
    return 0;
}

static PyObject *tp_summary(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dtype", "data", "state", "threads", NULL};
    const char *dtype_name;
    PyObject *data;
    PyObject *state = NULL;
    PyObject *threads_obj = NULL;
    size_t threads;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|O$O:summary", keywords, &dtype_name, &data,
                                     &state, &threads_obj))
        return NULL;
    const dtype_entry *entry = find_dtype(dtype_name);
    if (entry == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "summary() does not support dtype '%s'; supported: bool, uint8, int8, int16, "
                     "uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64",
                     dtype_name);
        return NULL;
    }
    if (parse_threads(threads_obj, &threads) < 0)
        return NULL;
    uint64_t count = 0;
    stats total = {0.0, 0.0, 0.0, 0, 0};
    if (parse_state(state, entry, &count, &total) < 0)
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
    if (length % entry->size != 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError,
                     "summary() data has %zu bytes, not a multiple of the %s element size %zu",
                     length, entry->name, entry->size);
        return NULL;
    }
    summary_status status;
    int join_error = 0;
    Py_BEGIN_ALLOW_THREADS
    status = summary_compute(entry, view.buf, length, threads, &total, &join_error);
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
    count += length / entry->size;
    return Py_BuildValue("(KdddKK)", (unsigned long long)count, total.sum, total.sum_squares,
                         total.max_abs, (unsigned long long)total.nan_count,
                         (unsigned long long)total.inf_count);
}

PyDoc_STRVAR(tp_summary_doc,
"summary(dtype, data, state=None, *, threads=1)\n"
"    -> (count, sum, sum_squares, max_abs, nan_count, inf_count)\n"
"\n"
"Statistics of the elements of a C-contiguous little-endian buffer of one dtype\n"
"(bool, integers, float16, bfloat16, float32, float64), in double precision:\n"
"sum, sum of squares and max |x| over the finite elements, NaN and Inf counted.\n"
"The same result for any `threads` and any alignment. To stream a large buffer,\n"
"pass the previous result as `state` with the next block; every block but the\n"
"last must hold whole chunks of SUMMARY_CHUNK_BYTES. See docs/design.md.");

PyMethodDef tp_summary_methods[] = {
    {"summary", (PyCFunction)(void (*)(void))tp_summary, METH_VARARGS | METH_KEYWORDS,
     tp_summary_doc},
    {NULL, NULL, 0, NULL},
};

int tp_summary_init(PyObject *module)
{
    return PyModule_AddIntConstant(module, "SUMMARY_CHUNK_BYTES", (long)SUMMARY_CHUNK_BYTES);
}
