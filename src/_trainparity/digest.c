/* digest part of the native core: chunked 128-bit digest of a byte range (docs/design.md, "Digest"). */
#include "tp.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Version of the algorithm below; stored in snapshots so that a future change
 * of any constant or rule is detected instead of read as "tensor differs". */
#define DIGEST_VERSION 1

/* Inputs are cut into chunks of this many bytes, hashed independently (and so
 * in parallel); the last chunk may be shorter. Part of the algorithm. */
#define DIGEST_CHUNK_BYTES ((size_t)65536)

/* A stripe is what the four lanes consume per step: 16 bytes each. */
#define DIGEST_LANES 4
#define DIGEST_STRIPE_BYTES 64
#define DIGEST_LANE_ROTATION 23

/* Tag given to the root hash over the chunk digests, instead of a chunk index:
 * no chunk can have it (that would take 2^80 bytes), so the two never mix. */
#define DIGEST_ROOT_TAG UINT64_MAX

/* Chunk digests are produced in rounds of this many chunks (4 GiB of input),
 * so the scratch list of chunk digests stays at 1 MiB however large the input.
 * A multiple of 4, so each full round hands whole stripes to the root hash. */
#define DIGEST_ROUND_CHUNKS ((size_t)65536)

/* More threads than this never pay off (memory bandwidth is saturated long
 * before); a larger request is clamped, which leaves the digest unchanged. */
#define DIGEST_MAX_THREADS 256

/* The first 20 outputs of splitmix64 seeded with 0x243F6A8885A308D3 (the first
 * 64 fraction bits of pi); docs/design.md shows how to regenerate them.
 * 0..7: lane secrets (lane l XORs 2l into its first word, 2l+1 into its second);
 * 8..15: finaliser secrets; 16..19: initial lane accumulators. */
static const uint64_t digest_secret[20] = {
    0x2CB0F69F4ABEA221u, 0x9417034723148989u, 0xDD555950609DFE03u, 0xDBAFB150DEB12800u,
    0x7E789B2E6C442CB6u, 0xF41E5636C7E4F8C4u, 0x0959D150F8FBA7E4u, 0xA97316F13CDB9EEAu,
    0x74CD8258F9520068u, 0x55C74A62E116868Bu, 0xD2F4C799A2023CBDu, 0xDF98CB79A37B51B9u,
    0x396F5885524F3905u, 0xAF1D56386CA3B276u, 0xA9FFBE6B5104E85Au, 0x6BD0C51B9FD533B3u,
    0x980CE91C50AB4B56u, 0x28AC395780FE62C5u, 0x768912E3A6BCEDC7u, 0x50B3E8C9332C7C88u,
};

__extension__ typedef unsigned __int128 digest_u128;

/* Folded multiply: the 128-bit product's low half XOR its high half. */
static inline uint64_t mum(uint64_t a, uint64_t b)
{
    digest_u128 product = (digest_u128)a * b;
    return (uint64_t)product ^ (uint64_t)(product >> 64);
}

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64u - r));
}

/* memcpy: inputs may sit at any alignment; compilers turn it into one load. */
static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t word;
    memcpy(&word, p, sizeof word);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    return word;
}

static inline void store_le64(unsigned char *p, uint64_t word)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    memcpy(p, &word, sizeof word);
}

typedef struct {
    uint64_t acc[DIGEST_LANES];
} lane_state;

static void lanes_start(lane_state *state)
{
    for (int lane = 0; lane < DIGEST_LANES; lane++)
        state->acc[lane] = digest_secret[16 + lane];
}

/* One lane's step over its 16 bytes of a stripe. The accumulator enters the
 * product, so the order of stripes matters; the rotated accumulator and both
 * words are also added outside the product, so a product that happens to be
 * zero (an operand equal to a secret) still keeps the state and the data. */
static inline uint64_t lane_step(uint64_t acc, const unsigned char *words, int lane)
{
    uint64_t first = load_le64(words);
    uint64_t second = load_le64(words + 8);
    uint64_t mixed = mum(first ^ digest_secret[2 * lane], second ^ digest_secret[2 * lane + 1] ^ acc);
    return mixed + (rotl64(acc, DIGEST_LANE_ROTATION) ^ first ^ second);
}

static void lanes_absorb(lane_state *state, const unsigned char *p, size_t stripes)
{
    uint64_t acc0 = state->acc[0], acc1 = state->acc[1];
    uint64_t acc2 = state->acc[2], acc3 = state->acc[3];
    for (size_t s = 0; s < stripes; s++, p += DIGEST_STRIPE_BYTES) {
        acc0 = lane_step(acc0, p, 0);
        acc1 = lane_step(acc1, p + 16, 1);
        acc2 = lane_step(acc2, p + 32, 2);
        acc3 = lane_step(acc3, p + 48, 3);
    }
    state->acc[0] = acc0;
    state->acc[1] = acc1;
    state->acc[2] = acc2;
    state->acc[3] = acc3;
}

/* Absorbs the last partial stripe zero-padded (the length in the finaliser
 * tells "ab" from "ab\0"), then folds the lanes, tag and length into 128 bits. */
static void lanes_finish(lane_state *state, const unsigned char *tail, size_t tail_bytes,
                         uint64_t tag, uint64_t length, unsigned char out[16])
{
    if (tail_bytes > 0) {
        unsigned char stripe[DIGEST_STRIPE_BYTES] = {0};
        memcpy(stripe, tail, tail_bytes);
        lanes_absorb(state, stripe, 1);
    }
    const uint64_t *k = digest_secret;
    uint64_t left = mum(state->acc[0] ^ tag ^ k[8], state->acc[1] ^ k[9]);
    uint64_t right = mum(state->acc[2] ^ length ^ k[10], state->acc[3] ^ k[11]);
    store_le64(out, mum(left ^ k[12], right ^ k[13]));
    store_le64(out + 8, mum(left ^ k[14], right ^ k[15]));
}

static void chunk_digest(const unsigned char *p, size_t length, uint64_t chunk_index,
                         unsigned char out[16])
{
    lane_state state;
    size_t whole_stripes = length / DIGEST_STRIPE_BYTES;
    size_t tail_offset = whole_stripes * DIGEST_STRIPE_BYTES;
    lanes_start(&state);
    lanes_absorb(&state, p, whole_stripes);
    lanes_finish(&state, p + tail_offset, length - tail_offset, chunk_index, length, out);
}

typedef struct {
    const unsigned char *data;
    size_t data_len;
    size_t first_chunk; /* chunk indices in data: [first_chunk, end_chunk) */
    size_t end_chunk;
    unsigned char *round_digests; /* slot 0 belongs to chunk round_first_chunk */
    size_t round_first_chunk;
    uint64_t tag_offset; /* index of data's first chunk in the whole input */
} chunk_job;

static void run_chunk_job(const chunk_job *job)
{
    for (size_t chunk = job->first_chunk; chunk < job->end_chunk; chunk++) {
        size_t offset = chunk * DIGEST_CHUNK_BYTES;
        size_t length = job->data_len - offset;
        if (length > DIGEST_CHUNK_BYTES)
            length = DIGEST_CHUNK_BYTES;
        chunk_digest(job->data + offset, length, job->tag_offset + (uint64_t)chunk,
                     job->round_digests + 16 * (chunk - job->round_first_chunk));
    }
}

static void *chunk_job_thread(void *arg)
{
    run_chunk_job(arg);
    return NULL;
}

/* Fills round_digests for chunks [first, first + count) with up to `threads`
 * threads, each taking a contiguous range, so every chunk's digest lands in the
 * same slot whatever the thread count. A thread that cannot be started has its
 * range run here instead (same result, only slower). Returns 0, or the error
 * number of a failed pthread_join (the caller must then leave round_digests and
 * the data alone: that thread may still be running). */
static int digest_round(const unsigned char *data, size_t data_len, size_t first, size_t count,
                        size_t threads, uint64_t tag_offset, unsigned char *round_digests)
{
    chunk_job jobs[DIGEST_MAX_THREADS];
    pthread_t handles[DIGEST_MAX_THREADS];
    int started[DIGEST_MAX_THREADS];
    if (threads > count)
        threads = count;
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = (chunk_job){
            .data = data,
            .data_len = data_len,
            .first_chunk = first + count * t / threads,
            .end_chunk = first + count * (t + 1) / threads,
            .round_digests = round_digests,
            .round_first_chunk = first,
            .tag_offset = tag_offset,
        };
        started[t] = 0;
    }
    for (size_t t = 1; t < threads; t++)
        started[t] = pthread_create(&handles[t], NULL, chunk_job_thread, &jobs[t]) == 0;
    run_chunk_job(&jobs[0]);
    int join_error = 0;
    for (size_t t = 1; t < threads; t++) {
        if (!started[t]) {
            run_chunk_job(&jobs[t]);
            continue;
        }
        int rc = pthread_join(handles[t], NULL);
        if (rc != 0 && join_error == 0)
            join_error = rc;
    }
    return join_error;
}

typedef enum {
    DIGEST_DONE,
    DIGEST_OUT_OF_MEMORY,
    DIGEST_JOIN_FAILED, /* *join_error holds pthread_join's error number */
} digest_status;

/* Computes the digest of data[0, data_len) into out. Runs without the GIL. */
static digest_status digest_compute(const unsigned char *data, size_t data_len, size_t threads,
                                    unsigned char out[16], int *join_error)
{
    size_t chunk_count = data_len / DIGEST_CHUNK_BYTES + (data_len % DIGEST_CHUNK_BYTES != 0);
    size_t round_capacity = chunk_count < DIGEST_ROUND_CHUNKS ? chunk_count : DIGEST_ROUND_CHUNKS;
    unsigned char *round_digests = NULL;
    if (round_capacity > 0) {
        round_digests = malloc(16 * round_capacity);
        if (round_digests == NULL)
            return DIGEST_OUT_OF_MEMORY;
    }
    lane_state root;
    lanes_start(&root);
    size_t digest_bytes = 0;
    for (size_t first = 0; first < chunk_count; first += DIGEST_ROUND_CHUNKS) {
        size_t count = chunk_count - first;
        if (count > DIGEST_ROUND_CHUNKS)
            count = DIGEST_ROUND_CHUNKS;
        *join_error = digest_round(data, data_len, first, count, threads, 0, round_digests);
        if (*join_error != 0)
            return DIGEST_JOIN_FAILED; /* a thread may still write round_digests: leak it */
        digest_bytes = 16 * count;
        if (first + count < chunk_count)
            lanes_absorb(&root, round_digests, digest_bytes / DIGEST_STRIPE_BYTES);
    }
    size_t whole_stripes = digest_bytes / DIGEST_STRIPE_BYTES;
    size_t tail_offset = whole_stripes * DIGEST_STRIPE_BYTES;
    const unsigned char *tail = NULL; /* empty input: no chunk digests at all */
    if (round_digests != NULL) {
        lanes_absorb(&root, round_digests, whole_stripes);
        tail = round_digests + tail_offset;
    }
    lanes_finish(&root, tail, digest_bytes - tail_offset, DIGEST_ROOT_TAG, (uint64_t)data_len,
                 out);
    free(round_digests);
    return DIGEST_DONE;
}

static int parse_threads(PyObject *threads_obj, const char *function, size_t *threads)
{
    if (threads_obj == NULL) {
        *threads = 1;
        return 0;
    }
    if (!PyLong_Check(threads_obj) || PyBool_Check(threads_obj)) {
        PyErr_Format(PyExc_TypeError, "%s() threads must be an int >= 1, not %.100s", function,
                     Py_TYPE(threads_obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(threads_obj, &overflow);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (overflow == 0 && value < 1)) {
        PyErr_Format(PyExc_ValueError, "%s() threads must be >= 1, got %S", function,
                     threads_obj);
        return -1;
    }
    *threads = (overflow > 0 || value > DIGEST_MAX_THREADS) ? DIGEST_MAX_THREADS : (size_t)value;
    return 0;
}

static int get_contiguous_buffer(PyObject *data, const char *function, Py_buffer *view)
{
    if (!PyObject_CheckBuffer(data)) {
        PyErr_Format(PyExc_TypeError,
                     "%s() data must support the buffer protocol (bytes, bytearray, "
                     "memoryview, mmap, array), not %.100s",
                     function, Py_TYPE(data)->tp_name);
        return -1;
    }
    /* Asking for strides and checking contiguity here, rather than asking for a
     * contiguous buffer, lets the error say what to do in every exporter's case. */
    if (PyObject_GetBuffer(data, view, PyBUF_STRIDES) < 0)
        return -1;
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError,
                     "%s() data must be a C-contiguous buffer; make a contiguous copy first, "
                     "e.g. bytes(data) or tensor.contiguous()",
                     function);
        return -1;
    }
    return 0;
}

static PyObject *tp_digest(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "threads", NULL};
    PyObject *data;
    PyObject *threads_obj = NULL;
    size_t threads;
    Py_buffer view;
    unsigned char out[16];
    digest_status status;
    int join_error = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:digest", keywords, &data, &threads_obj))
        return NULL;
    if (parse_threads(threads_obj, "digest", &threads) < 0)
        return NULL;
    if (get_contiguous_buffer(data, "digest", &view) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = digest_compute(view.buf, (size_t)view.len, threads, out, &join_error);
    Py_END_ALLOW_THREADS
    if (status == DIGEST_JOIN_FAILED) {
        /* A thread we could not join may still read the data: keep the buffer
         * exported (its object alive) rather than risk a use after free. */
        PyErr_Format(PyExc_SystemError, "digest(): pthread_join failed: %s", strerror(join_error));
        return NULL;
    }
    PyBuffer_Release(&view);
    if (status == DIGEST_OUT_OF_MEMORY)
        return PyErr_NoMemory();
    return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

PyDoc_STRVAR(tp_digest_doc,
"digest(data, *, threads=1) -> bytes\n"
"\n"
"128-bit digest (16 bytes) of the bytes of a C-contiguous buffer, the same on\n"
"every machine whatever the buffer's alignment and the thread count. The input\n"
"is hashed in chunks of DIGEST_CHUNK_BYTES, split over up to `threads` threads\n"
"(at most one per chunk and at most 256). A fingerprint for equality, not a\n"
"cryptographic hash. The algorithm (version DIGEST_VERSION) is in docs/design.md.");


/* ---- streaming: chunk digests of one block at a time, then the root ---- */

static PyObject *tp_digest_chunks(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "first_chunk", "threads", NULL};
    PyObject *data;
    PyObject *first_chunk_obj = NULL;
    PyObject *threads_obj = NULL;
    size_t threads;
    unsigned long long first_chunk = 0;
    Py_buffer view;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OO:digest_chunks", keywords, &data,
                                     &first_chunk_obj, &threads_obj))
        return NULL;
    if (first_chunk_obj != NULL) {
        if (!PyLong_Check(first_chunk_obj) || PyBool_Check(first_chunk_obj)) {
            PyErr_Format(PyExc_TypeError, "digest_chunks() first_chunk must be an int >= 0, not %.100s",
                         Py_TYPE(first_chunk_obj)->tp_name);
            return NULL;
        }
        first_chunk = PyLong_AsUnsignedLongLong(first_chunk_obj);
        if (first_chunk == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "digest_chunks() first_chunk must be an int in [0, 2**64 - 2], got %S",
                         first_chunk_obj);
            return NULL;
        }
    }
    if (parse_threads(threads_obj, "digest_chunks", &threads) < 0)
        return NULL;
    if (get_contiguous_buffer(data, "digest_chunks", &view) < 0)
        return NULL;
    size_t data_len = (size_t)view.len;
    size_t chunk_count = data_len / DIGEST_CHUNK_BYTES + (data_len % DIGEST_CHUNK_BYTES != 0);
    /* The root tag must stay unique: no chunk index may reach it. */
    if (chunk_count > 0 && first_chunk > DIGEST_ROOT_TAG - chunk_count) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError,
                     "digest_chunks() first_chunk %llu plus %zu chunks reaches the root tag",
                     first_chunk, chunk_count);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 * chunk_count));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *digests = (unsigned char *)PyBytes_AS_STRING(out);
    int join_error = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t first = 0; first < chunk_count && join_error == 0; first += DIGEST_ROUND_CHUNKS) {
        size_t count = chunk_count - first;
        if (count > DIGEST_ROUND_CHUNKS)
            count = DIGEST_ROUND_CHUNKS;
        join_error = digest_round(view.buf, data_len, first, count, threads, first_chunk,
                                  digests + 16 * first);
    }
    Py_END_ALLOW_THREADS
    if (join_error != 0) {
        /* As in digest(): a thread that could not be joined may still read the
         * data and write the output, so both stay alive (leaked). */
        PyErr_Format(PyExc_SystemError, "digest_chunks(): pthread_join failed: %s",
                     strerror(join_error));
        return NULL;
    }
    PyBuffer_Release(&view);
    return out;
}

static PyObject *tp_digest_root(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"chunk_digests", "length", NULL};
    PyObject *data;
    PyObject *length_obj;
    Py_buffer view;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:digest_root", keywords, &data,
                                     &length_obj))
        return NULL;
    if (!PyLong_Check(length_obj) || PyBool_Check(length_obj)) {
        PyErr_Format(PyExc_TypeError, "digest_root() length must be an int >= 0, not %.100s",
                     Py_TYPE(length_obj)->tp_name);
        return NULL;
    }
    unsigned long long length = PyLong_AsUnsignedLongLong(length_obj);
    if (length == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "digest_root() length must be an int >= 0, got %S",
                     length_obj);
        return NULL;
    }
    if (get_contiguous_buffer(data, "digest_root", &view) < 0)
        return NULL;
    unsigned long long chunk_count =
        length / DIGEST_CHUNK_BYTES + (length % DIGEST_CHUNK_BYTES != 0);
    if ((unsigned long long)view.len / 16 != chunk_count || view.len % 16 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "digest_root() needs the 16-byte digests of all %llu chunks of a %llu-byte "
                     "input, got %zd bytes",
                     chunk_count, length, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char out[16];
    size_t whole_stripes = (size_t)view.len / DIGEST_STRIPE_BYTES;
    size_t tail_offset = whole_stripes * DIGEST_STRIPE_BYTES;
    const unsigned char *digests = view.buf;
    lane_state root;
    Py_BEGIN_ALLOW_THREADS
    lanes_start(&root);
    lanes_absorb(&root, digests, whole_stripes);
    lanes_finish(&root, digests + tail_offset, (size_t)view.len - tail_offset, DIGEST_ROOT_TAG,
                 (uint64_t)length, out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

PyDoc_STRVAR(tp_digest_chunks_doc,
"digest_chunks(data, *, first_chunk=0, threads=1) -> bytes\n"
"\n"
"The 16-byte digests of data's DIGEST_CHUNK_BYTES chunks, concatenated, each hashed\n"
"with tag first_chunk + its index in data. To digest an input streamed block by\n"
"block, give each block (all but the last a multiple of DIGEST_CHUNK_BYTES) with the\n"
"index of its first chunk, and pass the concatenation to digest_root.");

PyDoc_STRVAR(tp_digest_root_doc,
"digest_root(chunk_digests, length) -> bytes\n"
"\n"
"The digest of a `length`-byte input from the digests of all its chunks:\n"
"digest(data) == digest_root(digest_chunks(data), len(data)).");

PyMethodDef tp_digest_methods[] = {
    {"digest", (PyCFunction)(void (*)(void))tp_digest, METH_VARARGS | METH_KEYWORDS,
     tp_digest_doc},
    {"digest_chunks", (PyCFunction)(void (*)(void))tp_digest_chunks, METH_VARARGS | METH_KEYWORDS,
     tp_digest_chunks_doc},
    {"digest_root", (PyCFunction)(void (*)(void))tp_digest_root, METH_VARARGS | METH_KEYWORDS,
     tp_digest_root_doc},
    {NULL, NULL, 0, NULL},
};

int tp_digest_init(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "DIGEST_CHUNK_BYTES", (long)DIGEST_CHUNK_BYTES) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "DIGEST_VERSION", DIGEST_VERSION);
}
