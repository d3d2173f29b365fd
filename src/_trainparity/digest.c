/* digest part of the native core: chunked 128-bit digest of a byte range (docs/design.md, "Digest"). */
#include "tp.h"
#include "digest.h"
#include "summary.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Newest version of the algorithm (docs/design.md, "Digest"): the default, and the
 * one stored in new snapshots. Any change to a constant or rule gets a new version;
 * older versions stay computable so that older snapshots can still be checked. */
#define DIGEST_VERSION 2
#define DIGEST_OLDEST_VERSION 1

/* Inputs are cut into chunks of this many bytes, hashed independently (and so
 * in parallel); the last chunk may be shorter. Part of the algorithm, the same
 * in every version. */
#define DIGEST_CHUNK_BYTES ((size_t)65536)

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

/* Names the environment variable that chooses version 2's implementation at import. */
#define DIGEST_PATH_VARIABLE "TRAINPARITY_DIGEST_PATH"

/* Version 2's implementation used when no `path` is given: the last supported
 * one of digest_v2_hashers (the fastest), or the one DIGEST_PATH_VARIABLE names.
 * Set once by tp_digest_init. */
static const digest_hasher *v2_default_hasher = NULL;

/* Absorbs the last partial stripe zero-padded (the length in the finaliser tells
 * "ab" from "ab\0"), then folds the lanes, tag and length into 16 bytes. */
static void lanes_finish(const digest_hasher *hasher, digest_lanes *lanes,
                         const unsigned char *tail, size_t tail_bytes, uint64_t tag,
                         uint64_t length, unsigned char out[16])
{
    if (tail_bytes > 0) {
        unsigned char stripe[DIGEST_STRIPE_BYTES] = {0};
        memcpy(stripe, tail, tail_bytes);
        hasher->absorb(lanes, stripe, 1);
    }
    hasher->finish(lanes, tag, length, out);
}

/* The statistics half of a fused digest+summary pass (summary.h). */
typedef struct {
    summary_accumulate accumulate;
    /* The hasher's fused loop for the dtype, or NULL: hash and summarise in blocks. */
    void (*absorb_with_stats)(digest_lanes *lanes, struct summary_lanes *sums,
                              const unsigned char *p, size_t stripes);
    size_t element_size;
} stats_pass;

_Static_assert(SUMMARY_FLOAT_SLOTS == DIGEST_FUSED_DTYPES,
               "digest.h's fused loops follow summary.h's floating dtypes");

/* Without a fused loop, the fused pass hashes this many bytes of a chunk and then
 * summarises the same bytes, read again from L1. A multiple of the stripe, so of
 * 8 elements of any dtype: each block keeps element k of the chunk in statistics
 * lane k % 8. (2 KiB measured fastest: docs/validation.md.) */
#define FUSED_BLOCK_BYTES ((size_t)2048)

/* H(message, tag, length) of a message held whole in memory. */
static void lane_hash(const digest_hasher *hasher, const unsigned char *p, size_t length,
                      uint64_t tag, uint64_t length_field, unsigned char out[16])
{
    digest_lanes lanes;
    size_t whole_stripes = length / DIGEST_STRIPE_BYTES;
    size_t tail_offset = whole_stripes * DIGEST_STRIPE_BYTES;
    hasher->start(&lanes);
    hasher->absorb(&lanes, p, whole_stripes);
    lanes_finish(hasher, &lanes, p + tail_offset, length - tail_offset, tag, length_field, out);
}

/* H(chunk, tag, length) and the chunk's statistics, in one pass over its bytes. */
static void lane_hash_and_stats(const digest_hasher *hasher, const stats_pass *stats,
                                const unsigned char *p, size_t length, uint64_t tag,
                                unsigned char out[16], summary_stats *chunk_stats)
{
    digest_lanes lanes;
    summary_lanes sums;
    size_t whole = length / DIGEST_STRIPE_BYTES * DIGEST_STRIPE_BYTES;
    hasher->start(&lanes);
    summary_lanes_start(&sums);
    if (stats->absorb_with_stats != NULL)
        stats->absorb_with_stats(&lanes, &sums, p, whole / DIGEST_STRIPE_BYTES);
    else
        for (size_t offset = 0; offset < whole; offset += FUSED_BLOCK_BYTES) {
            size_t block =
                whole - offset < FUSED_BLOCK_BYTES ? whole - offset : FUSED_BLOCK_BYTES;
            hasher->absorb(&lanes, p + offset, block / DIGEST_STRIPE_BYTES);
            stats->accumulate(&sums, p + offset, block / stats->element_size);
        }
    stats->accumulate(&sums, p + whole, (length - whole) / stats->element_size);
    lanes_finish(hasher, &lanes, p + whole, length - whole, tag, length, out);
    summary_lanes_fold(&sums, chunk_stats);
}

typedef struct {
    const digest_hasher *hasher;
    const stats_pass *stats; /* NULL: digest only */
    const unsigned char *data;
    size_t data_len;
    size_t first_chunk; /* chunk indices in data: [first_chunk, end_chunk) */
    size_t end_chunk;
    unsigned char *round_digests; /* slot 0 belongs to chunk round_first_chunk */
    summary_stats *round_stats;   /* likewise, when stats is not NULL */
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
        size_t slot = chunk - job->round_first_chunk;
        uint64_t tag = job->tag_offset + (uint64_t)chunk;
        if (job->stats == NULL)
            lane_hash(job->hasher, job->data + offset, length, tag, length,
                      job->round_digests + 16 * slot);
        else
            lane_hash_and_stats(job->hasher, job->stats, job->data + offset, length, tag,
                                job->round_digests + 16 * slot, job->round_stats + slot);
    }
}

static void *chunk_job_thread(void *arg)
{
    run_chunk_job(arg);
    return NULL;
}

/* Fills round_digests (and round_stats, for a fused pass) for chunks
 * [first, first + count) with up to `threads` threads, each taking a contiguous
 * range, so every chunk's results land in the same slot whatever the thread count. A thread that cannot be started has its
 * range run here instead (same result, only slower). Returns 0, or the error
 * number of a failed pthread_join (the caller must then leave round_digests and
 * the data alone: that thread may still be running). */
static int digest_round(const digest_hasher *hasher, const stats_pass *stats,
                        const unsigned char *data, size_t data_len, size_t first, size_t count,
                        size_t threads, uint64_t tag_offset, unsigned char *round_digests,
                        summary_stats *round_stats)
{
    chunk_job jobs[DIGEST_MAX_THREADS];
    pthread_t handles[DIGEST_MAX_THREADS];
    int started[DIGEST_MAX_THREADS];
    if (threads > count)
        threads = count;
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = (chunk_job){
            .hasher = hasher,
            .stats = stats,
            .data = data,
            .data_len = data_len,
            .first_chunk = first + count * t / threads,
            .end_chunk = first + count * (t + 1) / threads,
            .round_digests = round_digests,
            .round_stats = round_stats,
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

/* Folds a round's chunk statistics into the total, in chunk order. */
static void fold_round_stats(summary_stats *total, const summary_stats *round_stats, size_t count)
{
    for (size_t i = 0; i < count; i++)
        summary_stats_fold(total, &round_stats[i]);
}

/* Computes the digest of data[0, data_len) into out, and with `stats` (else NULL)
 * folds its statistics into *total. Runs without the GIL. */
static digest_status digest_compute(const digest_hasher *hasher, const stats_pass *stats,
                                    const unsigned char *data, size_t data_len, size_t threads,
                                    unsigned char out[16], summary_stats *total, int *join_error)
{
    size_t chunk_count = data_len / DIGEST_CHUNK_BYTES + (data_len % DIGEST_CHUNK_BYTES != 0);
    size_t round_capacity = chunk_count < DIGEST_ROUND_CHUNKS ? chunk_count : DIGEST_ROUND_CHUNKS;
    unsigned char *round_digests = NULL;
    summary_stats *round_stats = NULL;
    if (round_capacity > 0) {
        round_digests = malloc(16 * round_capacity);
        if (stats != NULL)
            round_stats = malloc(round_capacity * sizeof *round_stats);
        if (round_digests == NULL || (stats != NULL && round_stats == NULL)) {
            free(round_digests);
            free(round_stats);
            return DIGEST_OUT_OF_MEMORY;
        }
    }
    digest_lanes root;
    hasher->start(&root);
    size_t digest_bytes = 0;
    for (size_t first = 0; first < chunk_count; first += DIGEST_ROUND_CHUNKS) {
        size_t count = chunk_count - first;
        if (count > DIGEST_ROUND_CHUNKS)
            count = DIGEST_ROUND_CHUNKS;
        *join_error = digest_round(hasher, stats, data, data_len, first, count, threads, 0,
                                   round_digests, round_stats);
        if (*join_error != 0)
            return DIGEST_JOIN_FAILED; /* a thread may still write the rounds: leak them */
        if (stats != NULL)
            fold_round_stats(total, round_stats, count);
        digest_bytes = 16 * count;
        if (first + count < chunk_count)
            hasher->absorb(&root, round_digests, digest_bytes / DIGEST_STRIPE_BYTES);
    }
    size_t whole_stripes = digest_bytes / DIGEST_STRIPE_BYTES;
    size_t tail_offset = whole_stripes * DIGEST_STRIPE_BYTES;
    const unsigned char *tail = NULL; /* empty input: no chunk digests at all */
    if (round_digests != NULL) {
        hasher->absorb(&root, round_digests, whole_stripes);
        tail = round_digests + tail_offset;
    }
    lanes_finish(hasher, &root, tail, digest_bytes - tail_offset, DIGEST_ROOT_TAG,
                 (uint64_t)data_len, out);
    free(round_digests);
    free(round_stats);
    return DIGEST_DONE;
}

/* ---- arguments ---- */

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

/* The implementations of `version` compiled in (NULL-terminated), portable first. */
static const digest_hasher *const *version_hashers(long version)
{
    static const digest_hasher *const v1_hashers[] = {&digest_v1_scalar, NULL};
    return version == 1 ? v1_hashers : digest_v2_hashers;
}

/* Names of the implementations of `version` this CPU runs, portable first. */
static PyObject *supported_paths(long version)
{
    PyObject *names = PyList_New(0);
    if (names == NULL)
        return NULL;
    for (const digest_hasher *const *h = version_hashers(version); *h != NULL; h++) {
        if (!(*h)->supported())
            continue;
        PyObject *name = PyUnicode_FromString((*h)->path);
        if (name == NULL || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(name);
    }
    return names;
}

/* "scalar, avx2, avx512", for error messages. */
static PyObject *supported_paths_text(long version)
{
    PyObject *names = supported_paths(version);
    if (names == NULL)
        return NULL;
    PyObject *separator = PyUnicode_FromString(", ");
    PyObject *text = separator == NULL ? NULL : PyUnicode_Join(separator, names);
    Py_XDECREF(separator);
    Py_DECREF(names);
    return text;
}

/* The implementation of `version` called `path` if this CPU runs it, else NULL. */
static const digest_hasher *find_hasher(long version, const char *path)
{
    for (const digest_hasher *const *h = version_hashers(version); *h != NULL; h++)
        if (strcmp((*h)->path, path) == 0 && (*h)->supported())
            return *h;
    return NULL;
}

/* The hasher for the `version` and `path` keywords (either may be NULL: the
 * default version, the default implementation). */
static const digest_hasher *parse_algorithm(PyObject *version_obj, PyObject *path_obj,
                                            const char *function)
{
    long version = DIGEST_VERSION;
    if (version_obj != NULL) {
        if (!PyLong_Check(version_obj) || PyBool_Check(version_obj)) {
            PyErr_Format(PyExc_TypeError, "%s() version must be an int, not %.100s", function,
                         Py_TYPE(version_obj)->tp_name);
            return NULL;
        }
        int overflow = 0;
        version = PyLong_AsLongAndOverflow(version_obj, &overflow);
        if (version == -1 && PyErr_Occurred())
            return NULL;
        if (overflow != 0 || version < DIGEST_OLDEST_VERSION || version > DIGEST_VERSION) {
            PyErr_Format(PyExc_ValueError,
                         "%s() version must be one of the supported digest versions "
                         "(%d, %d), got %S",
                         function, DIGEST_OLDEST_VERSION, DIGEST_VERSION, version_obj);
            return NULL;
        }
    }
    if (path_obj == NULL || path_obj == Py_None)
        return version == 1 ? &digest_v1_scalar : v2_default_hasher;
    if (!PyUnicode_Check(path_obj)) {
        PyErr_Format(PyExc_TypeError, "%s() path must be a str or None, not %.100s", function,
                     Py_TYPE(path_obj)->tp_name);
        return NULL;
    }
    const char *path = PyUnicode_AsUTF8(path_obj);
    if (path == NULL)
        return NULL;
    const digest_hasher *hasher = find_hasher(version, path);
    if (hasher == NULL) {
        PyObject *available = supported_paths_text(version);
        if (available != NULL)
            PyErr_Format(PyExc_ValueError,
                         "%s() path %R is not available for digest version %ld on this "
                         "machine; available: %U",
                         function, path_obj, version, available);
        Py_XDECREF(available);
    }
    return hasher;
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

/* ---- Python functions ---- */

static PyObject *tp_digest(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "threads", "version", "path", NULL};
    PyObject *data;
    PyObject *threads_obj = NULL, *version_obj = NULL, *path_obj = NULL;
    size_t threads;
    Py_buffer view;
    unsigned char out[16];
    digest_status status;
    int join_error = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOO:digest", keywords, &data,
                                     &threads_obj, &version_obj, &path_obj))
        return NULL;
    if (parse_threads(threads_obj, "digest", &threads) < 0)
        return NULL;
    const digest_hasher *hasher = parse_algorithm(version_obj, path_obj, "digest");
    if (hasher == NULL)
        return NULL;
    if (get_contiguous_buffer(data, "digest", &view) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    status = digest_compute(hasher, NULL, view.buf, (size_t)view.len, threads, out, NULL,
                            &join_error);
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
"digest(data, *, threads=1, version=DIGEST_VERSION, path=None) -> bytes\n"
"\n"
"128-bit digest (16 bytes) of the bytes of a C-contiguous buffer, the same on\n"
"every machine whatever the buffer's alignment and the thread count. The input\n"
"is hashed in chunks of DIGEST_CHUNK_BYTES, split over up to `threads` threads\n"
"(at most one per chunk and at most 256). `version` is one of DIGEST_VERSIONS;\n"
"`path` forces one implementation of it (for version 2 one of DIGEST_PATHS,\n"
"default DIGEST_PATH; version 1 has only \"scalar\"): all give the same bits.\n"
"A fingerprint for equality, not a cryptographic hash. The algorithms are in\n"
"docs/design.md.");


/* ---- streaming: chunk digests of one block at a time, then the root ---- */

static PyObject *tp_digest_chunks(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "first_chunk", "threads", "version", "path", NULL};
    PyObject *data;
    PyObject *first_chunk_obj = NULL, *threads_obj = NULL, *version_obj = NULL;
    PyObject *path_obj = NULL;
    size_t threads;
    unsigned long long first_chunk = 0;
    Py_buffer view;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOO:digest_chunks", keywords, &data,
                                     &first_chunk_obj, &threads_obj, &version_obj, &path_obj))
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
    const digest_hasher *hasher = parse_algorithm(version_obj, path_obj, "digest_chunks");
    if (hasher == NULL)
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
        join_error = digest_round(hasher, NULL, view.buf, data_len, first, count, threads,
                                  first_chunk, digests + 16 * first, NULL);
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
    static char *keywords[] = {"chunk_digests", "length", "version", NULL};
    PyObject *data;
    PyObject *length_obj;
    PyObject *version_obj = NULL;
    Py_buffer view;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$O:digest_root", keywords, &data,
                                     &length_obj, &version_obj))
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
    const digest_hasher *hasher = parse_algorithm(version_obj, NULL, "digest_root");
    if (hasher == NULL)
        return NULL;
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
    Py_BEGIN_ALLOW_THREADS
    lane_hash(hasher, view.buf, (size_t)view.len, DIGEST_ROOT_TAG, (uint64_t)length, out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

PyDoc_STRVAR(tp_digest_chunks_doc,
"digest_chunks(data, *, first_chunk=0, threads=1, version=DIGEST_VERSION, path=None) -> bytes\n"
"\n"
"The 16-byte digests of data's DIGEST_CHUNK_BYTES chunks, concatenated, each hashed\n"
"with tag first_chunk + its index in data. To digest an input streamed block by\n"
"block, give each block (all but the last a multiple of DIGEST_CHUNK_BYTES) with the\n"
"index of its first chunk, and pass the concatenation to digest_root with the same\n"
"version. `version` and `path` as for digest().");

PyDoc_STRVAR(tp_digest_root_doc,
"digest_root(chunk_digests, length, *, version=DIGEST_VERSION) -> bytes\n"
"\n"
"The digest of a `length`-byte input from the digests of all its chunks:\n"
"digest(data, version=v) == digest_root(digest_chunks(data, version=v), len(data), version=v).");

/* ---- fused: the digest and the summary statistics in one pass ---- */

/* The arguments the two fused functions share, checked; `view` is held on success. */
typedef struct {
    const digest_hasher *hasher;
    stats_pass stats;
    size_t threads;
    uint64_t count; /* elements of the blocks before this one (`state`) */
    summary_stats total;
    Py_buffer view;
} fused_call;

static int parse_fused_call(const char *function, const char *dtype_name, PyObject *data,
                            PyObject *state, PyObject *threads_obj, PyObject *version_obj,
                            PyObject *path_obj, fused_call *call)
{
    const summary_dtype *dtype = summary_parse_dtype(dtype_name, function);
    if (dtype == NULL || parse_threads(threads_obj, function, &call->threads) < 0)
        return -1;
    call->hasher = parse_algorithm(version_obj, path_obj, function);
    if (call->hasher == NULL)
        return -1;
    /* parse_algorithm accepted `path`: None, or a str naming a digest path, which
     * names the statistics loop too (the portable one where it has none, e.g. neon). */
    const char *path = NULL;
    if (path_obj != NULL && path_obj != Py_None && (path = PyUnicode_AsUTF8(path_obj)) == NULL)
        return -1;
    int slot = summary_float_slot(dtype);
    call->stats = (stats_pass){
        .accumulate = summary_accumulator(dtype, path),
        .absorb_with_stats = slot != SUMMARY_NOT_FLOAT && summary_path_supported(call->hasher->path)
                                 ? call->hasher->absorb_with_stats[slot]
                                 : NULL,
        .element_size = summary_element_size(dtype),
    };
    if (summary_parse_state(state, dtype, function, &call->count, &call->total) < 0)
        return -1;
    if (get_contiguous_buffer(data, function, &call->view) < 0)
        return -1;
    if ((size_t)call->view.len % call->stats.element_size != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s() data has %zd bytes, not a multiple of the %s element size %zu",
                     function, call->view.len, dtype_name, call->stats.element_size);
        PyBuffer_Release(&call->view);
        return -1;
    }
    return 0;
}

static PyObject *tp_digest_summary(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dtype", "data", "threads", "version", "path", NULL};
    const char *dtype_name;
    PyObject *data;
    PyObject *threads_obj = NULL, *version_obj = NULL, *path_obj = NULL;
    fused_call call;
    unsigned char out[16];
    digest_status status;
    int join_error = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|$OOO:digest_summary", keywords,
                                     &dtype_name, &data, &threads_obj, &version_obj, &path_obj))
        return NULL;
    if (parse_fused_call("digest_summary", dtype_name, data, NULL, threads_obj, version_obj,
                         path_obj, &call) < 0)
        return NULL;
    size_t data_len = (size_t)call.view.len;
    Py_BEGIN_ALLOW_THREADS
    status = digest_compute(call.hasher, &call.stats, call.view.buf, data_len, call.threads, out,
                            &call.total, &join_error);
    Py_END_ALLOW_THREADS
    if (status == DIGEST_JOIN_FAILED) {
        /* As in digest(): a thread that could not be joined may still read the data. */
        PyErr_Format(PyExc_SystemError, "digest_summary(): pthread_join failed: %s",
                     strerror(join_error));
        return NULL;
    }
    PyBuffer_Release(&call.view);
    if (status == DIGEST_OUT_OF_MEMORY)
        return PyErr_NoMemory();
    return Py_BuildValue("(y#N)", (const char *)out, (Py_ssize_t)sizeof out,
                         summary_state_tuple(data_len / call.stats.element_size, &call.total));
}

static PyObject *tp_digest_summary_chunks(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dtype", "data", "state", "threads", "version", "path", NULL};
    const char *dtype_name;
    PyObject *data;
    PyObject *state = NULL, *threads_obj = NULL, *version_obj = NULL, *path_obj = NULL;
    fused_call call;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|O$OOO:digest_summary_chunks", keywords,
                                     &dtype_name, &data, &state, &threads_obj, &version_obj,
                                     &path_obj))
        return NULL;
    if (parse_fused_call("digest_summary_chunks", dtype_name, data, state, threads_obj,
                         version_obj, path_obj, &call) < 0)
        return NULL;
    size_t data_len = (size_t)call.view.len;
    /* The previous blocks ended on the chunk grid (summary_parse_state checked it). */
    uint64_t first_chunk = call.count * call.stats.element_size / DIGEST_CHUNK_BYTES;
    size_t chunk_count = data_len / DIGEST_CHUNK_BYTES + (data_len % DIGEST_CHUNK_BYTES != 0);
    if (chunk_count > 0 && first_chunk > DIGEST_ROOT_TAG - chunk_count) {
        PyBuffer_Release(&call.view);
        PyErr_Format(PyExc_ValueError,
                     "digest_summary_chunks() chunk %llu plus %zu chunks reaches the root tag",
                     (unsigned long long)first_chunk, chunk_count);
        return NULL;
    }
    size_t round_capacity = chunk_count < DIGEST_ROUND_CHUNKS ? chunk_count : DIGEST_ROUND_CHUNKS;
    summary_stats *round_stats = NULL;
    if (round_capacity > 0 && (round_stats = malloc(round_capacity * sizeof *round_stats)) == NULL) {
        PyBuffer_Release(&call.view);
        return PyErr_NoMemory();
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 * chunk_count));
    if (out == NULL) {
        free(round_stats);
        PyBuffer_Release(&call.view);
        return NULL;
    }
    unsigned char *digests = (unsigned char *)PyBytes_AS_STRING(out);
    int join_error = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t first = 0; first < chunk_count && join_error == 0; first += DIGEST_ROUND_CHUNKS) {
        size_t count = chunk_count - first;
        if (count > DIGEST_ROUND_CHUNKS)
            count = DIGEST_ROUND_CHUNKS;
        join_error = digest_round(call.hasher, &call.stats, call.view.buf, data_len, first, count,
                                  call.threads, first_chunk, digests + 16 * first, round_stats);
        if (join_error == 0)
            fold_round_stats(&call.total, round_stats, count);
    }
    Py_END_ALLOW_THREADS
    if (join_error != 0) {
        /* As in digest_chunks(): the data, the output and the statistics stay alive (leaked). */
        PyErr_Format(PyExc_SystemError, "digest_summary_chunks(): pthread_join failed: %s",
                     strerror(join_error));
        return NULL;
    }
    free(round_stats);
    PyBuffer_Release(&call.view);
    return Py_BuildValue(
        "(NN)", out,
        summary_state_tuple(call.count + data_len / call.stats.element_size, &call.total));
}

PyDoc_STRVAR(tp_digest_summary_doc,
"digest_summary(dtype, data, *, threads=1, version=DIGEST_VERSION, path=None)\n"
"    -> (digest, (count, sum, sum_squares, max_abs, nan_count, inf_count))\n"
"\n"
"digest(data) and summary(dtype, data) in one pass over the bytes: each chunk is\n"
"hashed and summarised block by block while it is in cache. Both results are\n"
"bit-identical to the separate functions' for every `threads`, alignment and path.\n"
"`path` (one of DIGEST_PATHS) chooses the digest's implementation and the\n"
"statistics loop of the same name (the portable loop for a path without one).");

PyDoc_STRVAR(tp_digest_summary_chunks_doc,
"digest_summary_chunks(dtype, data, state=None, *, threads=1, version=DIGEST_VERSION,\n"
"                      path=None) -> (chunk_digests, state)\n"
"\n"
"The fused pass over one block of a streamed input: digest_chunks() of the block\n"
"(tagged from the chunk where the previous blocks ended) and summary(dtype, data,\n"
"state). Give every block but the last as whole chunks, each with the state the\n"
"previous call returned; digest_root(all chunk digests, total length) is then the\n"
"digest and the last state the summary.");

PyMethodDef tp_digest_methods[] = {
    {"digest", (PyCFunction)(void (*)(void))tp_digest, METH_VARARGS | METH_KEYWORDS,
     tp_digest_doc},
    {"digest_chunks", (PyCFunction)(void (*)(void))tp_digest_chunks, METH_VARARGS | METH_KEYWORDS,
     tp_digest_chunks_doc},
    {"digest_root", (PyCFunction)(void (*)(void))tp_digest_root, METH_VARARGS | METH_KEYWORDS,
     tp_digest_root_doc},
    {"digest_summary", (PyCFunction)(void (*)(void))tp_digest_summary,
     METH_VARARGS | METH_KEYWORDS, tp_digest_summary_doc},
    {"digest_summary_chunks", (PyCFunction)(void (*)(void))tp_digest_summary_chunks,
     METH_VARARGS | METH_KEYWORDS, tp_digest_summary_chunks_doc},
    {NULL, NULL, 0, NULL},
};

/* Chooses version 2's default implementation: the one TRAINPARITY_DIGEST_PATH
 * names (an error if this machine cannot run it), else the fastest it can. */
static int choose_default_path(void)
{
    const char *requested = getenv(DIGEST_PATH_VARIABLE);
    if (requested != NULL && requested[0] != '\0') {
        v2_default_hasher = find_hasher(DIGEST_VERSION, requested);
        if (v2_default_hasher != NULL)
            return 0;
        PyObject *available = supported_paths_text(DIGEST_VERSION);
        if (available != NULL)
            PyErr_Format(PyExc_ValueError,
                         DIGEST_PATH_VARIABLE "='%s' is not a digest path this machine runs; "
                         "use one of: %U",
                         requested, available);
        Py_XDECREF(available);
        return -1;
    }
    for (const digest_hasher *const *h = digest_v2_hashers; *h != NULL; h++)
        if ((*h)->supported())
            v2_default_hasher = *h;
    return 0;
}

/* Adds `value` (a new reference, or NULL after an error) to the module as `name`. */
static int add_object(PyObject *module, const char *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(module, name, value);
    Py_DECREF(value);
    return rc;
}

int tp_digest_init(PyObject *module)
{
    if (choose_default_path() < 0)
        return -1;
    PyObject *paths = supported_paths(DIGEST_VERSION);
    if (add_object(module, "DIGEST_PATHS", paths == NULL ? NULL : PyList_AsTuple(paths)) < 0) {
        Py_XDECREF(paths);
        return -1;
    }
    Py_DECREF(paths);
    if (PyModule_AddStringConstant(module, "DIGEST_PATH", v2_default_hasher->path) < 0)
        return -1;
    if (add_object(module, "DIGEST_VERSIONS",
                   Py_BuildValue("(ii)", DIGEST_OLDEST_VERSION, DIGEST_VERSION)) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "DIGEST_CHUNK_BYTES", (long)DIGEST_CHUNK_BYTES) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "DIGEST_VERSION", DIGEST_VERSION);
}
