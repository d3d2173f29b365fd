/* distance part of the native core: L2 norms of k same-shaped buffers and of
 * every pairwise difference, in one deterministic pass that reads each buffer once.
 *
 * This is what a noise envelope needs at one step and one tensor path: the
 * spread of k uninterrupted runs and a candidate's distance to each of them.
 * Comparing the pairs one by one would read every buffer k-1 times. */
#include "tp.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "distance.c reads elements as little-endian bytes and assumes a little-endian host"
#endif

/* As in compare.c: fixed chunks combined in chunk order make every result
 * independent of the thread count; LANES interleaved partial sums (element i
 * of a chunk goes to lane i % LANES, each lane adds in element order, lanes
 * are added in lane order) are vectorised without reassociating additions;
 * no contraction. */
#define CHUNK_ELEMENTS 4096
#define LANES 16
#define WIDTH 4 /* doubles per vector */
#define VECTORS (LANES / WIDTH)
#define MAX_BUFFERS 32
#define MAX_PAIRS (MAX_BUFFERS * (MAX_BUFFERS - 1) / 2)
#define SCALE_EXPONENT 600

/* Hot loops get an AVX2 clone chosen at load time, as in compare.c; with
 * contraction off both clones give bit-identical sums. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define HOT_LOOP
#endif
#define ALWAYS_INLINE inline __attribute__((always_inline))

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Lanes as GCC/clang vectors (plain SSE2 pairs in the default clone): the
 * element-wise operations are the scalar ones, in the same order. */
typedef double vdouble __attribute__((vector_size(WIDTH * sizeof(double))));
typedef float vfloat __attribute__((vector_size(WIDTH * sizeof(float))));
typedef uint16_t vhalf __attribute__((vector_size(WIDTH * sizeof(uint16_t))));
typedef uint32_t vword __attribute__((vector_size(WIDTH * sizeof(uint32_t))));

/* ---- element loaders: exact widening of little-endian elements to double ---- */

static ALWAYS_INLINE float float_from_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static ALWAYS_INLINE uint32_t bits_of_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static ALWAYS_INLINE uint16_t load_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* IEEE binary16, branch-free (as compare.c): normal numbers rebiased to
 * binary32, exponent 31 (Inf/NaN) to 255 keeping the payload, subnormals
 * mantissa * 2^-24 (exact in binary32). */
static ALWAYS_INLINE float half_to_float(uint16_t half)
{
    uint32_t sign = (uint32_t)(half >> 15) << 31;
    uint32_t exponent = (half >> 10) & 0x1fu;
    uint32_t mantissa = half & 0x3ffu;
    uint32_t normal = ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
    uint32_t special = 0x7f800000u | (mantissa << 13);
    uint32_t subnormal = bits_of_float((float)(int32_t)mantissa * 0x1p-24f);
    uint32_t magnitude = exponent == 0 ? subnormal : (exponent == 31 ? special : normal);
    return float_from_bits(sign | magnitude);
}

/* One element (for the rare passes: non-finite counts, rescaled sums). */
static double load_float32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static double load_float64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* bfloat16 is the upper half of a binary32. */
static double load_bfloat16(const unsigned char *p)
{
    return float_from_bits((uint32_t)load_u16(p) << 16);
}

static double load_float16(const unsigned char *p)
{
    return half_to_float(load_u16(p));
}

/* WIDTH consecutive elements, widened to double. */
static ALWAYS_INLINE void widen_float32(const unsigned char *p, vdouble *out)
{
    vfloat f;
    memcpy(&f, p, sizeof f);
    *out = __builtin_convertvector(f, vdouble);
}

static ALWAYS_INLINE void widen_float64(const unsigned char *p, vdouble *out)
{
    memcpy(out, p, sizeof *out);
}

static ALWAYS_INLINE void widen_bfloat16(const unsigned char *p, vdouble *out)
{
    vhalf h;
    memcpy(&h, p, sizeof h);
    vword bits = __builtin_convertvector(h, vword) << 16;
    vfloat f;
    memcpy(&f, &bits, sizeof f);
    *out = __builtin_convertvector(f, vdouble);
}

static ALWAYS_INLINE void widen_float16(const unsigned char *p, vdouble *out)
{
    vfloat f;
    for (int j = 0; j < WIDTH; j++)
        f[j] = half_to_float(load_u16(p + 2 * j));
    *out = __builtin_convertvector(f, vdouble);
}

/* ---- one chunk: every norm, and every pair whose bytes differ, in one read ---- */

/* The lanes of one chunk (one per worker, 64-byte aligned): norm[b] holds the
 * squares of buffer b, pair[q] the squared differences of the q-th pair whose
 * bytes differ in this chunk (buffers first[q] and second[q]). */
typedef struct {
    vdouble x[MAX_BUFFERS][VECTORS]; /* one block of LANES elements of every buffer */
    vdouble norm[MAX_BUFFERS][VECTORS];
    vdouble pair[MAX_PAIRS][VECTORS];
    unsigned char first[MAX_PAIRS];
    unsigned char second[MAX_PAIRS];
} chunk_state;

typedef void (*widener)(const unsigned char *, vdouble *);

/* One block of LANES elements of each buffer (block_b = sources[b] + offset). */
static ALWAYS_INLINE void add_block(const unsigned char *const *sources, size_t offset,
                                    size_t k, size_t active, chunk_state *s, size_t size,
                                    widener widen)
{
    for (size_t b = 0; b < k; b++) {
        for (int m = 0; m < VECTORS; m++) {
            widen(sources[b] + offset + (size_t)(m * WIDTH) * size, &s->x[b][m]);
            s->norm[b][m] += s->x[b][m] * s->x[b][m];
        }
    }
    for (size_t q = 0; q < active; q++) {
        for (int m = 0; m < VECTORS; m++) {
            vdouble d = s->x[s->first[q]][m] - s->x[s->second[q]][m];
            s->pair[q][m] += d * d;
        }
    }
}

/* The same sums for K buffers (2, 3 or 4) whose pairs all differ, the common
 * case of a noise envelope: a constant K lets the lanes live in registers
 * (locals that no element load can alias) instead of in `s`. */
static ALWAYS_INLINE void all_pairs_block(const unsigned char *const *sources, size_t offset,
                                          const size_t K, vdouble norm[4][VECTORS],
                                          vdouble pair[6][VECTORS], size_t size, widener widen)
{
    vdouble x[4][VECTORS];
    for (size_t b = 0; b < K; b++) {
        for (int m = 0; m < VECTORS; m++) {
            widen(sources[b] + offset + (size_t)(m * WIDTH) * size, &x[b][m]);
            norm[b][m] += x[b][m] * x[b][m];
        }
    }
    for (size_t a = 0, q = 0; a < K; a++) {
        for (size_t b = a + 1; b < K; b++, q++) {
            for (int m = 0; m < VECTORS; m++) {
                vdouble d = x[a][m] - x[b][m];
                pair[q][m] += d * d;
            }
        }
    }
}

static ALWAYS_INLINE void all_pairs_chunk(const unsigned char *const *sources, const size_t K,
                                          size_t count, chunk_state *s, size_t size,
                                          widener widen)
{
    vdouble norm[4][VECTORS] = {{{0}}};
    vdouble pair[6][VECTORS] = {{{0}}};
    size_t whole = count - count % LANES;
    for (size_t i = 0; i < whole; i += LANES)
        all_pairs_block(sources, i * size, K, norm, pair, size, widen);
    if (whole < count) {
        unsigned char padded[4][LANES * sizeof(double)];
        const unsigned char *blocks[4];
        for (size_t b = 0; b < K; b++) {
            memset(padded[b], 0, sizeof padded[b]);
            memcpy(padded[b], sources[b] + whole * size, (count - whole) * size);
            blocks[b] = padded[b];
        }
        all_pairs_block(blocks, 0, K, norm, pair, size, widen);
    }
    for (size_t b = 0; b < K; b++)
        for (int m = 0; m < VECTORS; m++)
            s->norm[b][m] = norm[b][m];
    for (size_t q = 0; q < K * (K - 1) / 2; q++)
        for (int m = 0; m < VECTORS; m++)
            s->pair[q][m] = pair[q][m];
}

/* The lanes of one chunk of `count` elements. The last partial block is read
 * zero-padded: a zero adds +0.0 to sums that start at +0.0, which changes none. */
static ALWAYS_INLINE void fused_chunk(const unsigned char *const *sources, size_t k, size_t count,
                                      size_t active, chunk_state *s, size_t size, widener widen)
{
    if (active == k * (k - 1) / 2) { /* the pairs in `s` are then in pair order */
        switch (k) {
        case 2:
            all_pairs_chunk(sources, 2, count, s, size, widen);
            return;
        case 3:
            all_pairs_chunk(sources, 3, count, s, size, widen);
            return;
        case 4:
            all_pairs_chunk(sources, 4, count, s, size, widen);
            return;
        default:
            break;
        }
    }
    const vdouble zero = {0};
    for (size_t b = 0; b < k; b++)
        for (int m = 0; m < VECTORS; m++)
            s->norm[b][m] = zero;
    for (size_t q = 0; q < active; q++)
        for (int m = 0; m < VECTORS; m++)
            s->pair[q][m] = zero;
    size_t whole = count - count % LANES;
    for (size_t i = 0; i < whole; i += LANES)
        add_block(sources, i * size, k, active, s, size, widen);
    if (whole < count) {
        unsigned char padded[MAX_BUFFERS][LANES * sizeof(double)];
        const unsigned char *blocks[MAX_BUFFERS];
        for (size_t b = 0; b < k; b++) {
            memset(padded[b], 0, sizeof padded[b]);
            memcpy(padded[b], sources[b] + whole * size, (count - whole) * size);
            blocks[b] = padded[b];
        }
        add_block(blocks, 0, k, active, s, size, widen);
    }
}

typedef void (*chunk_kernel)(const unsigned char *const *, size_t, size_t, size_t, chunk_state *);

#define DEFINE_CHUNK_KERNEL(NAME, SIZE, WIDEN)                                                 \
    HOT_LOOP static void NAME(const unsigned char *const *sources, size_t k, size_t count,    \
                              size_t active, chunk_state *s)                                   \
    {                                                                                          \
        fused_chunk(sources, k, count, active, s, SIZE, WIDEN);                                \
    }

DEFINE_CHUNK_KERNEL(float32_chunk, 4, widen_float32)
DEFINE_CHUNK_KERNEL(float64_chunk, 8, widen_float64)
DEFINE_CHUNK_KERNEL(bfloat16_chunk, 2, widen_bfloat16)
DEFINE_CHUNK_KERNEL(float16_chunk, 2, widen_float16)

typedef struct {
    const char *name;
    size_t itemsize;
    chunk_kernel chunk;
    double (*load)(const unsigned char *);
} distance_dtype;

static const distance_dtype distance_dtypes[] = {
    {"float32", 4, float32_chunk, load_float32},
    {"float64", 8, float64_chunk, load_float64},
    {"bfloat16", 2, bfloat16_chunk, load_bfloat16},
    {"float16", 2, float16_chunk, load_float16},
};
#define DISTANCE_DTYPE_COUNT (sizeof distance_dtypes / sizeof distance_dtypes[0])

/* A sum of squares; level 1 means it is the sum of (x * 2^-SCALE_EXPONENT)^2. */
typedef struct {
    double value;
    int level;
} scaled;

typedef struct {
    const distance_dtype *dtype;
    size_t buffer_count;
    size_t pair_count;
    const unsigned char *buffers[MAX_BUFFERS];
    size_t element_count;
    /* per chunk: buffer_count norms, then pair_count distances */
    scaled *sums;
    /* per chunk: buffer_count non-finite counts; pair_count "bytes differ" flags */
    uint64_t *nonfinite;
    unsigned char *differ;
} distance_pass;

typedef struct {
    const distance_pass *pass;
    size_t first_chunk;
    size_t end_chunk;
    chunk_state *state;
} distance_worker;

/* The lanes in lane order (the order every sum of this file is finished in). */
static double lane_total(const vdouble *lanes)
{
    double total = 0.0;
    for (int j = 0; j < LANES; j++)
        total += lanes[j / WIDTH][j % WIDTH];
    return total;
}

/* A chunk sum that overflowed (float64 values above ~1e154) is taken again with
 * every value scaled by 2^-SCALE_EXPONENT, in the same lanes. `y` NULL: a norm. */
static scaled rescaled(double unscaled, const distance_dtype *dtype, const unsigned char *x,
                       const unsigned char *y, size_t count)
{
    if (!isinf(unscaled))
        return (scaled){unscaled, 0};
    const double scale = ldexp(1.0, -SCALE_EXPONENT);
    double lanes[LANES] = {0};
    for (size_t i = 0; i < count; i++) {
        double v = dtype->load(x + i * dtype->itemsize) * scale;
        if (y != NULL)
            v = v - dtype->load(y + i * dtype->itemsize) * scale;
        lanes[i % LANES] += v * v;
    }
    double total = 0.0;
    for (int j = 0; j < LANES; j++)
        total += lanes[j];
    return (scaled){total, 1};
}

/* NaN and infinite elements of one buffer's chunk. Counted only where the
 * chunk's sum of squares is not finite: a NaN or an infinity makes it so. */
static uint64_t nonfinite_count(double sum, const distance_dtype *dtype,
                                const unsigned char *x, size_t count)
{
    if (isfinite(sum))
        return 0;
    uint64_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += !isfinite(dtype->load(x + i * dtype->itemsize));
    return bad;
}

static void measure_chunk(const distance_pass *pass, size_t chunk, chunk_state *s)
{
    size_t start = chunk * CHUNK_ELEMENTS;
    size_t count = pass->element_count - start < CHUNK_ELEMENTS ? pass->element_count - start
                                                                 : CHUNK_ELEMENTS;
    size_t itemsize = pass->dtype->itemsize;
    size_t k = pass->buffer_count;
    scaled *sums = &pass->sums[chunk * (k + pass->pair_count)];
    uint64_t *nonfinite = &pass->nonfinite[chunk * k];
    unsigned char *differ = &pass->differ[chunk * pass->pair_count];
    const unsigned char *sources[MAX_BUFFERS] = {NULL};
    for (size_t b = 0; b < k; b++)
        sources[b] = pass->buffers[b] + start * itemsize;
    /* Pairs with equal bytes need no sum; memcmp stops at the first difference. */
    size_t active = 0;
    for (size_t a = 0, pair = 0; a < k; a++) {
        for (size_t b = a + 1; b < k; b++, pair++) {
            differ[pair] = memcmp(sources[a], sources[b], count * itemsize) != 0;
            if (differ[pair]) {
                s->first[active] = (unsigned char)a;
                s->second[active] = (unsigned char)b;
                active++;
            }
        }
    }
    pass->dtype->chunk(sources, k, count, active, s);
    for (size_t b = 0; b < k; b++) {
        double total = lane_total(s->norm[b]);
        nonfinite[b] = nonfinite_count(total, pass->dtype, sources[b], count);
        sums[b] = rescaled(total, pass->dtype, sources[b], NULL, count);
    }
    for (size_t a = 0, pair = 0, q = 0; a < k; a++) {
        for (size_t b = a + 1; b < k; b++, pair++) {
            if (!differ[pair]) {
                sums[k + pair] = (scaled){0.0, 0};
                continue;
            }
            sums[k + pair] =
                rescaled(lane_total(s->pair[q]), pass->dtype, sources[a], sources[b], count);
            q++;
        }
    }
}

static void *run_worker(void *arg)
{
    distance_worker *w = arg;
    for (size_t chunk = w->first_chunk; chunk < w->end_chunk; chunk++)
        measure_chunk(w->pass, chunk, w->state);
    return NULL;
}

static void add_scaled(scaled *total, scaled term)
{
    const double factor = ldexp(1.0, -SCALE_EXPONENT);
    if (term.level > total->level) {
        total->value = total->value * factor * factor;
        total->level = 1;
    } else if (term.level < total->level) {
        term.value = term.value * factor * factor;
    }
    double sum = total->value + term.value;
    if (isinf(sum) && total->level == 0) {
        sum = total->value * factor * factor + term.value * factor * factor;
        total->level = 1;
    }
    total->value = sum;
}

static double norm_of(scaled sum)
{
    return ldexp(sqrt(sum.value), SCALE_EXPONENT * sum.level);
}

/* Runs the pass on `threads` threads (the caller's thread takes the first
 * range); returns 0 or an errno value with `failed_call` set. */
static int run_pass(const distance_pass *pass, size_t chunk_count, size_t threads,
                    chunk_state *states, const char **failed_call)
{
    distance_worker workers[16];
    pthread_t ids[16];
    size_t per_worker = chunk_count / threads, remainder = chunk_count % threads;
    for (size_t t = 0, next = 0; t < threads; t++) {
        workers[t].pass = pass;
        workers[t].first_chunk = next;
        next += per_worker + (t < remainder ? 1 : 0);
        workers[t].end_chunk = next;
        workers[t].state = &states[t];
    }
    int error = 0;
    size_t started = 1;
    for (; started < threads; started++) {
        error = pthread_create(&ids[started], NULL, run_worker, &workers[started]);
        if (error != 0) {
            *failed_call = "pthread_create";
            break;
        }
    }
    if (error == 0)
        run_worker(&workers[0]);
    for (size_t t = 1; t < started; t++) {
        int join_error = pthread_join(ids[t], NULL);
        if (join_error != 0 && error == 0) {
            error = join_error;
            *failed_call = "pthread_join";
        }
    }
    return error;
}

static const distance_dtype *find_distance_dtype(const char *name)
{
    for (size_t i = 0; i < DISTANCE_DTYPE_COUNT; i++)
        if (strcmp(distance_dtypes[i].name, name) == 0)
            return &distance_dtypes[i];
    return NULL;
}

static void release_buffers(Py_buffer *views, size_t count)
{
    for (size_t i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

static PyObject *result_tuple(const distance_pass *pass, size_t chunk_count)
{
    size_t k = pass->buffer_count, pairs = pass->pair_count;
    PyObject *norms = PyTuple_New((Py_ssize_t)k);
    PyObject *distances = PyTuple_New((Py_ssize_t)pairs);
    PyObject *identical = PyTuple_New((Py_ssize_t)pairs);
    PyObject *nonfinite = PyTuple_New((Py_ssize_t)k);
    if (norms == NULL || distances == NULL || identical == NULL || nonfinite == NULL)
        goto failed;
    for (size_t i = 0; i < k + pairs; i++) {
        scaled total = {0.0, 0};
        for (size_t c = 0; c < chunk_count; c++)
            add_scaled(&total, pass->sums[c * (k + pairs) + i]);
        PyObject *value = PyFloat_FromDouble(norm_of(total));
        if (value == NULL)
            goto failed;
        if (i < k)
            PyTuple_SET_ITEM(norms, (Py_ssize_t)i, value);
        else
            PyTuple_SET_ITEM(distances, (Py_ssize_t)(i - k), value);
    }
    for (size_t p = 0; p < pairs; p++) {
        int differ = 0;
        for (size_t c = 0; c < chunk_count && !differ; c++)
            differ = pass->differ[c * pairs + p];
        PyObject *flag = differ ? Py_False : Py_True;
        Py_INCREF(flag);
        PyTuple_SET_ITEM(identical, (Py_ssize_t)p, flag);
    }
    for (size_t b = 0; b < k; b++) {
        uint64_t bad = 0;
        for (size_t c = 0; c < chunk_count; c++)
            bad += pass->nonfinite[c * k + b];
        PyObject *value = PyLong_FromUnsignedLongLong((unsigned long long)bad);
        if (value == NULL)
            goto failed;
        PyTuple_SET_ITEM(nonfinite, (Py_ssize_t)b, value);
    }
    return Py_BuildValue("(NNNN)", norms, distances, identical, nonfinite);
failed:
    Py_XDECREF(norms);
    Py_XDECREF(distances);
    Py_XDECREF(identical);
    Py_XDECREF(nonfinite);
    return NULL;
}

static PyObject *distances(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"dtype", "buffers", "threads", NULL};
    const char *dtype_name;
    PyObject *buffers_object;
    Py_ssize_t threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|$n:distances", keywords, &dtype_name,
                                     &buffers_object, &threads))
        return NULL;
    const distance_dtype *dtype = find_distance_dtype(dtype_name);
    if (dtype == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "distances supports float32, float64, bfloat16 and float16, not '%s'",
                     dtype_name);
        return NULL;
    }
    if (threads < 1 || threads > 16) {
        PyErr_Format(PyExc_ValueError, "threads must be between 1 and 16, got %zd", threads);
        return NULL;
    }
    PyObject *sequence = PySequence_Fast(buffers_object, "buffers must be a sequence of buffers");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(sequence);
    if (k < 1 || k > MAX_BUFFERS) {
        Py_DECREF(sequence);
        PyErr_Format(PyExc_ValueError, "give between 1 and %d buffers, got %zd", MAX_BUFFERS, k);
        return NULL;
    }
    Py_buffer views[MAX_BUFFERS];
    size_t exported = 0;
    for (; exported < (size_t)k; exported++) {
        PyObject *item = PySequence_Fast_GET_ITEM(sequence, (Py_ssize_t)exported);
        if (PyObject_GetBuffer(item, &views[exported], PyBUF_SIMPLE) < 0)
            break;
        if (views[exported].len != views[0].len) {
            PyErr_Format(PyExc_ValueError,
                         "every buffer must have the same byte length: buffer %zu has %zd "
                         "bytes, buffer 0 has %zd",
                         exported, views[exported].len, views[0].len);
            exported++;
            break;
        }
    }
    Py_DECREF(sequence);
    if (PyErr_Occurred()) {
        release_buffers(views, exported);
        return NULL;
    }
    if ((size_t)views[0].len % dtype->itemsize != 0) {
        release_buffers(views, exported);
        PyErr_Format(PyExc_ValueError, "byte length %zd is not a multiple of the %s size %zu",
                     views[0].len, dtype->name, dtype->itemsize);
        return NULL;
    }
    distance_pass pass = {.dtype = dtype,
                          .buffer_count = (size_t)k,
                          .pair_count = (size_t)k * ((size_t)k - 1) / 2,
                          .element_count = (size_t)views[0].len / dtype->itemsize};
    for (size_t b = 0; b < (size_t)k; b++)
        pass.buffers[b] = views[b].buf;
    size_t chunk_count = (pass.element_count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS;
    size_t chunks = chunk_count > 0 ? chunk_count : 1;
    size_t workers = (size_t)threads < chunks ? (size_t)threads : chunks;
    pass.sums = PyMem_RawMalloc(chunks * (pass.buffer_count + pass.pair_count) * sizeof(scaled));
    pass.nonfinite = PyMem_RawMalloc(chunks * pass.buffer_count * sizeof(uint64_t));
    pass.differ = PyMem_RawMalloc(chunks * (pass.pair_count > 0 ? pass.pair_count : 1));
    /* posix_memalign: the lanes are vectors, which want their own alignment. */
    chunk_state *states = NULL;
    if (posix_memalign((void **)&states, 64, workers * sizeof(chunk_state)) != 0)
        states = NULL;
    PyObject *result = NULL;
    if (pass.sums == NULL || pass.nonfinite == NULL || pass.differ == NULL || states == NULL) {
        PyErr_NoMemory();
    } else {
        const char *failed_call = NULL;
        int error;
        Py_BEGIN_ALLOW_THREADS
        error = run_pass(&pass, chunk_count, workers, states, &failed_call);
        Py_END_ALLOW_THREADS
        if (error != 0) {
            errno = error;
            PyErr_Format(PyExc_OSError, "%s failed: %s", failed_call, strerror(error));
        } else {
            result = result_tuple(&pass, chunk_count);
        }
    }
    PyMem_RawFree(pass.sums);
    PyMem_RawFree(pass.nonfinite);
    PyMem_RawFree(pass.differ);
    free(states);
    release_buffers(views, (size_t)k);
    return result;
}

PyMethodDef tp_distance_methods[] = {
    {"distances", (PyCFunction)(void (*)(void))distances, METH_VARARGS | METH_KEYWORDS,
     "distances(dtype, buffers, *, threads=1)\n"
     "--\n\n"
     "L2 norms of k same-length buffers of little-endian `dtype` elements (float32,\n"
     "float64, bfloat16, float16) and of every pairwise difference, in one pass.\n\n"
     "Returns (norms, distances, identical, nonfinite): norms[i] = ||x_i||_2;\n"
     "distances and identical list the pairs (0,1), (0,2), ..., (1,2), ...:\n"
     "||x_i - x_j||_2 and whether their bytes are equal; nonfinite[i] counts the\n"
     "NaN and infinite elements of x_i (a sum that meets one is not finite).\n"
     "Sums run in double over fixed chunks in chunk order: results do not\n"
     "depend on `threads`."},
    {NULL, NULL, 0, NULL},
};

int tp_distance_init(PyObject *module)
{
    (void)module;
    return 0;
}
