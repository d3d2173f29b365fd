/* coverage part of the native core: audits sample-ID observations held as int64 arrays.
 *
 * Python hands over the observations as segments (one per rank array, or one
 * for a list of observations). A segment's columns are buffers or constants:
 *   keys       int64 ID keys, in consumption order (the IDs themselves, or codes
 *              that sort like the IDs when some IDs are str)
 *   rank       rank code (uint32 constant or uint32 buffer; codes index a rank
 *              table kept by Python, so state per ID stays one byte for < 255 ranks)
 *   epoch      int64 constant or buffer
 *   positions  None (position = index in the segment) or int64 buffer
 *   workers    None (all unknown) or int64 buffer (-1 = unknown)
 * The global input index of an observation is its index in the concatenation of
 * the segments; "first" always means the smallest global index.
 *
 * The audit is one pass over the keys in input order against a per-ID state
 * (rank of the first occurrence), addressed arithmetically when the expected IDs
 * (or the observed keys) form a dense progression and through an open-addressing
 * hash table otherwise. Only the occurrences of anomalous IDs (repeated or
 * unexpected) are copied out and radix-sorted for the per-ID details, so a clean
 * audit of N IDs needs one byte of state per expected ID and no sort at all.
 * All bulk work runs without the GIL.
 */
#include "tp.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Indices and slots are stored as uint32 to keep per-ID state compact. */
#define MAX_OBSERVATIONS ((uint64_t)UINT32_MAX - 1)
#define NO_INDEX UINT64_MAX
#define NOT_FOUND SIZE_MAX

enum anomaly_flag {
    FLAG_MISSING = 1,
    FLAG_UNEXPECTED = 2,
    FLAG_REPEATED = 4,
    FLAG_SAME_RANK = 8,
    FLAG_CROSS_RANK = 16,
};

/* ------------------------------------------------------------------ loads */

static inline int64_t load_i64(const unsigned char *base, size_t index)
{
    int64_t value;
    memcpy(&value, base + index * 8, 8);
    return value;
}

static inline uint32_t load_u32(const unsigned char *base, size_t index)
{
    uint32_t value;
    memcpy(&value, base + index * 4, 4);
    return value;
}

static inline void store_i64(unsigned char *base, size_t index, int64_t value)
{
    memcpy(base + index * 8, &value, 8);
}

static inline void store_u32(unsigned char *base, size_t index, uint32_t value)
{
    memcpy(base + index * 4, &value, 4);
}

/* ------------------------------------------------------------ radix sort */

/* One occurrence of an anomalous ID: what the per-ID details are built from. */
typedef struct {
    int64_t key;
    uint32_t rank;
    uint32_t index;
} occurrence;

enum sort_key { SORT_BY_KEY, SORT_BY_RANK };

static inline uint64_t occurrence_digit_source(const occurrence *item, enum sort_key by)
{
    /* Flipping the sign bit makes unsigned order equal signed order. */
    return by == SORT_BY_KEY ? (uint64_t)item->key ^ (UINT64_C(1) << 63) : item->rank;
}

/* Stable LSD radix sort (8-bit digits), skipping digits every item shares.
 * Returns whichever of items/scratch holds the sorted result. */
static occurrence *sort_occurrences(occurrence *items, occurrence *scratch, size_t count,
                                    enum sort_key by)
{
    const unsigned digits = by == SORT_BY_KEY ? 8 : 4;
    size_t histogram[8][256];
    memset(histogram, 0, sizeof histogram);
    for (size_t i = 0; i < count; i++) {
        uint64_t source = occurrence_digit_source(&items[i], by);
        for (unsigned d = 0; d < digits; d++)
            histogram[d][(source >> (8 * d)) & 0xff]++;
    }
    occurrence *from = items, *to = scratch;
    for (unsigned d = 0; d < digits && count > 1; d++) {
        uint64_t first = occurrence_digit_source(&from[0], by);
        if (histogram[d][(first >> (8 * d)) & 0xff] == count)
            continue;
        size_t offsets[256], running = 0;
        for (unsigned b = 0; b < 256; b++) {
            offsets[b] = running;
            running += histogram[d][b];
        }
        for (size_t i = 0; i < count; i++) {
            uint64_t source = occurrence_digit_source(&from[i], by);
            to[offsets[(source >> (8 * d)) & 0xff]++] = from[i];
        }
        occurrence *swap = from;
        from = to;
        to = swap;
    }
    return from;
}

/* Sorts plain int64 values ascending with the same scheme; returns the sorted buffer. */
static int64_t *sort_int64(int64_t *values, int64_t *scratch, size_t count)
{
    size_t histogram[8][256];
    memset(histogram, 0, sizeof histogram);
    for (size_t i = 0; i < count; i++) {
        uint64_t source = (uint64_t)values[i] ^ (UINT64_C(1) << 63);
        for (unsigned d = 0; d < 8; d++)
            histogram[d][(source >> (8 * d)) & 0xff]++;
    }
    int64_t *from = values, *to = scratch;
    for (unsigned d = 0; d < 8 && count > 1; d++) {
        uint64_t first = (uint64_t)from[0] ^ (UINT64_C(1) << 63);
        if (histogram[d][(first >> (8 * d)) & 0xff] == count)
            continue;
        size_t offsets[256], running = 0;
        for (unsigned b = 0; b < 256; b++) {
            offsets[b] = running;
            running += histogram[d][b];
        }
        for (size_t i = 0; i < count; i++) {
            uint64_t source = (uint64_t)from[i] ^ (UINT64_C(1) << 63);
            to[offsets[(source >> (8 * d)) & 0xff]++] = from[i];
        }
        int64_t *swap = from;
        from = to;
        to = swap;
    }
    return from;
}

/* --------------------------------------------------------------- keymap */

/* Open-addressing hash table from int64 key to a dense slot (insertion order). */
typedef struct {
    uint32_t *table; /* slot + 1; 0 = empty */
    size_t capacity; /* power of two, at least twice the count */
    int64_t *keys;   /* keys[slot] */
    size_t count, keys_capacity;
} keymap;

static inline size_t hash_key(int64_t key)
{
    /* splitmix64's finaliser: consecutive IDs spread over the whole table. */
    uint64_t x = (uint64_t)key;
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return (size_t)x;
}

static int keymap_init(keymap *map, size_t expected)
{
    size_t capacity = 16;
    while (capacity < 2 * expected + 2)
        capacity *= 2;
    map->table = PyMem_RawCalloc(capacity, sizeof *map->table);
    map->keys_capacity = expected > 8 ? expected : 8;
    map->keys = PyMem_RawMalloc(map->keys_capacity * sizeof *map->keys);
    map->capacity = capacity;
    map->count = 0;
    return map->table && map->keys ? 0 : -1;
}

static void keymap_free(keymap *map)
{
    PyMem_RawFree(map->table);
    PyMem_RawFree(map->keys);
    memset(map, 0, sizeof *map);
}

static inline size_t keymap_find(const keymap *map, int64_t key)
{
    size_t mask = map->capacity - 1;
    for (size_t at = hash_key(key) & mask;; at = (at + 1) & mask) {
        uint32_t entry = map->table[at];
        if (entry == 0)
            return NOT_FOUND;
        if (map->keys[entry - 1] == key)
            return entry - 1;
    }
}

static int keymap_grow(keymap *map)
{
    size_t capacity = map->capacity * 2, mask = capacity - 1;
    uint32_t *table = PyMem_RawCalloc(capacity, sizeof *table);
    if (!table)
        return -1;
    for (size_t slot = 0; slot < map->count; slot++) {
        size_t at = hash_key(map->keys[slot]) & mask;
        while (table[at] != 0)
            at = (at + 1) & mask;
        table[at] = (uint32_t)(slot + 1);
    }
    PyMem_RawFree(map->table);
    map->table = table;
    map->capacity = capacity;
    return 0;
}

/* Finds or adds key; *slot receives its slot, *added whether it is new. -1: out of memory. */
static int keymap_insert(keymap *map, int64_t key, size_t *slot, bool *added)
{
    size_t mask = map->capacity - 1, at = hash_key(key) & mask;
    for (;; at = (at + 1) & mask) {
        uint32_t entry = map->table[at];
        if (entry == 0)
            break;
        if (map->keys[entry - 1] == key) {
            *slot = entry - 1;
            *added = false;
            return 0;
        }
    }
    if (map->count == map->keys_capacity) {
        size_t grown = map->keys_capacity * 2;
        int64_t *keys = PyMem_RawRealloc(map->keys, grown * sizeof *keys);
        if (!keys)
            return -1;
        map->keys = keys;
        map->keys_capacity = grown;
    }
    map->keys[map->count] = key;
    map->table[at] = (uint32_t)(map->count + 1);
    *slot = map->count++;
    *added = true;
    if (2 * map->count + 2 > map->capacity)
        return keymap_grow(map);
    return 0;
}

/* ------------------------------------------------------ per-ID state */

/* Rank code + 1 of an ID's first occurrence (0 = not seen yet): one byte per ID
 * while there are fewer than 255 ranks. */
typedef struct {
    unsigned char *narrow;
    uint32_t *wide;
    size_t length;
} rank_state;

static int rank_state_resize(rank_state *state, size_t length)
{
    if (length <= state->length)
        return 0;
    size_t width = state->wide ? sizeof(uint32_t) : 1;
    void *old = state->wide ? (void *)state->wide : (void *)state->narrow;
    unsigned char *grown = PyMem_RawRealloc(old, (length ? length : 1) * width);
    if (!grown)
        return -1;
    memset(grown + state->length * width, 0, (length - state->length) * width);
    if (state->wide)
        state->wide = (uint32_t *)(void *)grown;
    else
        state->narrow = grown;
    state->length = length;
    return 0;
}

static int rank_state_init(rank_state *state, size_t length, bool wide)
{
    memset(state, 0, sizeof *state);
    size_t width = wide ? sizeof(uint32_t) : 1;
    /* calloc: the pages of a large universe are only touched where IDs land. */
    void *memory = PyMem_RawCalloc(length ? length : 1, width);
    if (!memory)
        return -1;
    if (wide)
        state->wide = memory;
    else
        state->narrow = memory;
    state->length = length;
    return 0;
}

static void rank_state_free(rank_state *state)
{
    PyMem_RawFree(state->narrow);
    PyMem_RawFree(state->wide);
    memset(state, 0, sizeof *state);
}

static inline uint32_t rank_state_get(const rank_state *state, size_t slot)
{
    return state->wide ? state->wide[slot] : state->narrow[slot];
}

static inline void rank_state_set(rank_state *state, size_t slot, uint32_t value)
{
    if (state->wide)
        state->wide[slot] = value;
    else
        state->narrow[slot] = (unsigned char)value;
}

typedef struct {
    uint64_t *words;
    size_t length; /* in bits */
} bitset;

static int bitset_resize(bitset *bits, size_t length)
{
    size_t old_words = (bits->length + 63) / 64, words = (length + 63) / 64;
    if (bits->words && words <= old_words) {
        bits->length = length > bits->length ? length : bits->length;
        return 0;
    }
    uint64_t *grown = PyMem_RawRealloc(bits->words, (words ? words : 1) * sizeof *grown);
    if (!grown)
        return -1;
    memset(grown + old_words, 0, ((words ? words : 1) - old_words) * sizeof *grown);
    bits->words = grown;
    bits->length = length;
    return 0;
}

static inline bool bitset_test(const bitset *bits, size_t at)
{
    return (bits->words[at / 64] >> (at % 64)) & 1;
}

static inline void bitset_set(bitset *bits, size_t at)
{
    bits->words[at / 64] |= UINT64_C(1) << (at % 64);
}

/* -------------------------------------------------------------- segments */

typedef struct {
    Py_buffer keys_view, ranks_view, epochs_view, positions_view, workers_view;
    const unsigned char *keys, *ranks, *epochs, *positions, *workers;
    uint32_t rank_constant;
    int64_t epoch_constant;
    size_t length, offset;
} segment;

typedef struct {
    segment *items;
    size_t count, total;
    uint32_t rank_count;
} segment_list;

static inline int64_t segment_key(const segment *s, size_t i) { return load_i64(s->keys, i); }

static inline uint32_t segment_rank(const segment *s, size_t i)
{
    return s->ranks ? load_u32(s->ranks, i) : s->rank_constant;
}

static inline int64_t segment_epoch(const segment *s, size_t i)
{
    return s->epochs ? load_i64(s->epochs, i) : s->epoch_constant;
}

static inline int64_t segment_position(const segment *s, size_t i)
{
    return s->positions ? load_i64(s->positions, i) : (int64_t)i;
}

static inline int64_t segment_worker(const segment *s, size_t i)
{
    return s->workers ? load_i64(s->workers, i) : -1;
}

/* The segment holding global index `index`; *local receives the index inside it. */
static const segment *segment_at(const segment_list *list, uint64_t index, size_t *local)
{
    size_t low = 0, high = list->count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (list->items[middle].offset + list->items[middle].length <= index)
            low = middle + 1;
        else
            high = middle;
    }
    *local = (size_t)(index - list->items[low].offset);
    return &list->items[low];
}

static void segments_release(segment_list *list)
{
    for (size_t s = 0; s < list->count; s++) {
        segment *item = &list->items[s];
        Py_buffer *views[] = {&item->keys_view, &item->ranks_view, &item->epochs_view,
                              &item->positions_view, &item->workers_view};
        for (size_t v = 0; v < sizeof views / sizeof views[0]; v++)
            if (views[v]->obj)
                PyBuffer_Release(views[v]);
    }
    PyMem_Free(list->items);
    memset(list, 0, sizeof *list);
}

/* Takes a contiguous buffer of exactly `bytes` bytes. */
static int take_column(PyObject *source, Py_buffer *view, const unsigned char **data, size_t bytes,
                       const char *what, size_t segment_index)
{
    if (PyObject_GetBuffer(source, view, PyBUF_SIMPLE) < 0)
        return -1;
    if ((size_t)view->len != bytes) {
        PyErr_Format(PyExc_ValueError, "segment %zu: %s holds %zd bytes, expected %zu", segment_index,
                     what, view->len, bytes);
        return -1;
    }
    *data = view->buf;
    return 0;
}

/* Reads a Python int in [minimum, maximum]; raises ValueError naming `what` otherwise. */
static int read_bounded(PyObject *value, long long minimum, long long maximum, const char *what,
                        long long *out)
{
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (overflow || number < minimum || number > maximum) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld]", what, minimum, maximum);
        return -1;
    }
    *out = number;
    return 0;
}

static int segment_parse(PyObject *tuple, size_t index, uint32_t rank_count, segment *item)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 5) {
        PyErr_Format(PyExc_TypeError,
                     "segment %zu must be a tuple (keys, rank, epoch, positions, workers)", index);
        return -1;
    }
    PyObject *keys = PyTuple_GET_ITEM(tuple, 0), *rank = PyTuple_GET_ITEM(tuple, 1),
             *epoch = PyTuple_GET_ITEM(tuple, 2), *positions = PyTuple_GET_ITEM(tuple, 3),
             *workers = PyTuple_GET_ITEM(tuple, 4);
    if (PyObject_GetBuffer(keys, &item->keys_view, PyBUF_SIMPLE) < 0)
        return -1;
    if (item->keys_view.len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "segment %zu: keys hold %zd bytes, not a whole number of int64",
                     index, item->keys_view.len);
        return -1;
    }
    item->keys = item->keys_view.buf;
    item->length = (size_t)item->keys_view.len / 8;
    long long number;
    if (PyLong_Check(rank)) {
        if (read_bounded(rank, 0, (long long)rank_count - 1, "rank code", &number) < 0)
            return -1;
        item->rank_constant = (uint32_t)number;
    } else {
        if (take_column(rank, &item->ranks_view, &item->ranks, item->length * 4, "rank codes", index) < 0)
            return -1;
        for (size_t i = 0; i < item->length; i++)
            if (load_u32(item->ranks, i) >= rank_count) {
                PyErr_Format(PyExc_ValueError, "segment %zu: rank code at %zu is not below %u", index,
                             i, (unsigned)rank_count);
                return -1;
            }
    }
    if (PyLong_Check(epoch)) {
        if (read_bounded(epoch, 0, INT64_MAX, "epoch", &number) < 0)
            return -1;
        item->epoch_constant = number;
    } else if (take_column(epoch, &item->epochs_view, &item->epochs, item->length * 8, "epochs",
                           index) < 0) {
        return -1;
    }
    if (positions != Py_None &&
        take_column(positions, &item->positions_view, &item->positions, item->length * 8,
                    "positions", index) < 0)
        return -1;
    if (workers != Py_None &&
        take_column(workers, &item->workers_view, &item->workers, item->length * 8, "workers",
                    index) < 0)
        return -1;
    return 0;
}

static int segments_parse(PyObject *source, PyObject *rank_count_object, segment_list *list)
{
    memset(list, 0, sizeof *list);
    long long rank_count;
    if (read_bounded(rank_count_object, 1, UINT32_MAX - 1, "rank_count", &rank_count) < 0)
        return -1;
    list->rank_count = (uint32_t)rank_count;
    if (!PyList_Check(source)) {
        PyErr_SetString(PyExc_TypeError, "segments must be a list");
        return -1;
    }
    size_t count = (size_t)PyList_GET_SIZE(source);
    list->items = PyMem_Calloc(count ? count : 1, sizeof *list->items);
    if (!list->items) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t s = 0; s < count; s++) {
        list->count = s + 1; /* so a failure releases what this segment took */
        segment *item = &list->items[s];
        if (segment_parse(PyList_GET_ITEM(source, s), s, list->rank_count, item) < 0) {
            segments_release(list);
            return -1;
        }
        item->offset = list->total;
        list->total += item->length;
        if (list->total > MAX_OBSERVATIONS) {
            PyErr_Format(PyExc_ValueError, "too many observations: the coverage core audits at most %llu",
                         (unsigned long long)MAX_OBSERVATIONS);
            segments_release(list);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- domain */

/* The IDs that get a state slot: the expected universe, or all observed IDs. */
typedef struct {
    bool arithmetic;  /* key = start + slot * step */
    bool is_universe; /* unseen slots are missing IDs */
    bool grows;       /* no universe and sparse keys: every observed key is added */
    int64_t start;
    uint64_t step;
    size_t count;
    keymap map;
} domain;

static inline size_t domain_size(const domain *d) { return d->arithmetic ? d->count : d->map.count; }

static inline int64_t domain_key(const domain *d, size_t slot)
{
    if (!d->arithmetic)
        return d->map.keys[slot];
    return (int64_t)((uint64_t)d->start + (uint64_t)slot * d->step);
}

static inline size_t domain_find(const domain *d, int64_t key)
{
    if (!d->arithmetic)
        return keymap_find(&d->map, key);
    if (key < d->start)
        return NOT_FOUND;
    uint64_t distance = (uint64_t)key - (uint64_t)d->start;
    if (d->step == 1)
        return distance < d->count ? (size_t)distance : NOT_FOUND;
    uint64_t slot = distance / d->step;
    if (slot >= d->count || distance % d->step != 0)
        return NOT_FOUND;
    return (size_t)slot;
}

/* Universe as given by Python, before the domain is built without the GIL. */
typedef struct {
    bool present;
    bool is_range;
    int64_t start;
    uint64_t step;
    size_t count;
    Py_buffer view; /* sorted, strictly ascending int64 keys when !is_range */
} universe_spec;

static int universe_parse(PyObject *source, universe_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    if (source == Py_None)
        return 0;
    spec->present = true;
    if (PyTuple_Check(source)) {
        long long start, step, count;
        if (PyTuple_GET_SIZE(source) != 3) {
            PyErr_SetString(PyExc_TypeError, "a range universe is a tuple (start, step, count)");
            return -1;
        }
        if (read_bounded(PyTuple_GET_ITEM(source, 0), INT64_MIN, INT64_MAX, "universe start", &start) < 0 ||
            read_bounded(PyTuple_GET_ITEM(source, 1), 1, INT64_MAX, "universe step", &step) < 0 ||
            read_bounded(PyTuple_GET_ITEM(source, 2), 0, (long long)MAX_OBSERVATIONS, "universe count",
                         &count) < 0)
            return -1;
        /* The last key start + (count - 1) * step must be an int64; INT64_MAX - start
         * is in [0, 2**64 - 1], so the unsigned difference is exact. */
        uint64_t headroom = (uint64_t)INT64_MAX - (uint64_t)start;
        if (count > 0 && (uint64_t)(count - 1) > headroom / (uint64_t)step) {
            PyErr_SetString(PyExc_ValueError, "range universe leaves int64");
            return -1;
        }
        spec->is_range = true;
        spec->start = start;
        spec->step = (uint64_t)step;
        spec->count = (size_t)count;
        return 0;
    }
    if (PyObject_GetBuffer(source, &spec->view, PyBUF_SIMPLE) < 0)
        return -1;
    if (spec->view.len % 8 != 0 || (uint64_t)spec->view.len / 8 > MAX_OBSERVATIONS) {
        PyErr_SetString(PyExc_ValueError, "universe keys must be a whole number of int64");
        PyBuffer_Release(&spec->view);
        return -1;
    }
    spec->count = (size_t)spec->view.len / 8;
    for (size_t i = 1; i < spec->count; i++)
        if (load_i64(spec->view.buf, i - 1) >= load_i64(spec->view.buf, i)) {
            PyErr_SetString(PyExc_ValueError, "universe keys must be strictly ascending");
            PyBuffer_Release(&spec->view);
            return -1;
        }
    return 0;
}

static void universe_release(universe_spec *spec)
{
    if (spec->view.obj)
        PyBuffer_Release(&spec->view);
}

/* Builds the slot domain (no GIL). -1: out of memory. */
static int domain_build(domain *d, const universe_spec *universe, const segment_list *list)
{
    memset(d, 0, sizeof *d);
    if (universe->present) {
        d->is_universe = true;
        if (universe->is_range) {
            d->arithmetic = true;
            d->start = universe->start;
            d->step = universe->step;
            d->count = universe->count;
            return 0;
        }
        const unsigned char *keys = universe->view.buf;
        size_t count = universe->count;
        /* An explicit list that is a progression (list(range(n)), numpy.arange) is a range. */
        bool progression = true;
        uint64_t step = count > 1 ? (uint64_t)load_i64(keys, 1) - (uint64_t)load_i64(keys, 0) : 1;
        for (size_t i = 2; i < count && progression; i++)
            progression = (uint64_t)load_i64(keys, i) - (uint64_t)load_i64(keys, i - 1) == step;
        if (progression) {
            d->arithmetic = true;
            d->start = count ? load_i64(keys, 0) : 0;
            d->step = step;
            d->count = count;
            return 0;
        }
        if (keymap_init(&d->map, count) < 0)
            return -1;
        for (size_t i = 0; i < count; i++) {
            size_t slot;
            bool added;
            if (keymap_insert(&d->map, load_i64(keys, i), &slot, &added) < 0)
                return -1;
        }
        return 0;
    }
    /* No universe: dense observed keys (dataset indices) get an arithmetic domain. */
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (size_t s = 0; s < list->count; s++)
        for (size_t i = 0; i < list->items[s].length; i++) {
            int64_t key = segment_key(&list->items[s], i);
            low = key < low ? key : low;
            high = key > high ? key : high;
        }
    if (list->total == 0) {
        d->arithmetic = true;
        d->step = 1;
        return 0;
    }
    uint64_t span = (uint64_t)high - (uint64_t)low;
    if (span < 2 * (uint64_t)list->total + 1024) {
        d->arithmetic = true;
        d->start = low;
        d->step = 1;
        d->count = (size_t)span + 1;
        return 0;
    }
    d->grows = true;
    return keymap_init(&d->map, list->total < 65536 ? list->total : 65536);
}

/* ------------------------------------------------------------------ scan */

/* IDs outside the universe: their own first ranks; every occurrence is recorded. */
typedef struct {
    keymap map;
    uint32_t *first_rank; /* rank code + 1 */
    size_t first_rank_capacity;
} outsiders;

typedef struct {
    occurrence *items;
    size_t count, capacity;
} occurrence_list;

static int occurrences_push(occurrence_list *list, int64_t key, uint32_t rank, uint64_t index)
{
    if (list->count == list->capacity) {
        size_t grown = list->capacity ? list->capacity * 2 : 1024;
        occurrence *items = PyMem_RawRealloc(list->items, grown * sizeof *items);
        if (!items)
            return -1;
        list->items = items;
        list->capacity = grown;
    }
    list->items[list->count++] = (occurrence){key, rank, (uint32_t)index};
    return 0;
}

typedef struct {
    uint64_t first_unexpected, first_repeat, first_cross;
    bool first_repeat_same_rank;
    size_t domain_observations, domain_unique;
    bool any_domain_repeat;
} scan_result;

/* A non-first occurrence: under ExactlyOnce the earliest one is the first duplicate
 * violation (same-rank when the ID's only earlier occurrence had this rank), and
 * under NoCrossRankOverlap the earliest one on another rank than the first is. */
static inline void note_repeat(scan_result *result, uint64_t index, uint32_t first_rank, uint32_t rank)
{
    if (result->first_repeat == NO_INDEX) {
        result->first_repeat = index;
        result->first_repeat_same_rank = first_rank == rank;
    }
    if (rank != first_rank && result->first_cross == NO_INDEX)
        result->first_cross = index;
}

static int note_outsider(outsiders *out, occurrence_list *side, scan_result *result, int64_t key,
                         uint32_t rank, uint64_t index)
{
    size_t slot;
    bool added;
    if (keymap_insert(&out->map, key, &slot, &added) < 0)
        return -1;
    if (added) {
        if (slot >= out->first_rank_capacity) {
            size_t grown = out->first_rank_capacity ? out->first_rank_capacity * 2 : 256;
            uint32_t *ranks = PyMem_RawRealloc(out->first_rank, grown * sizeof *ranks);
            if (!ranks)
                return -1;
            out->first_rank = ranks;
            out->first_rank_capacity = grown;
        }
        out->first_rank[slot] = rank + 1;
    } else {
        note_repeat(result, index, out->first_rank[slot] - 1, rank);
    }
    if (result->first_unexpected == NO_INDEX)
        result->first_unexpected = index;
    return occurrences_push(side, key, rank, index);
}

/* How many keys ahead pass 1 prefetches the state of: shuffled IDs make every
 * state access a cache miss, and this many misses in flight hide most of it. */
#define PREFETCH_DISTANCE 16

static inline void prefetch_state(const domain *d, const rank_state *first_ranks, int64_t key)
{
#if defined(__GNUC__)
    if (d->arithmetic) {
        size_t slot = domain_find(d, key);
        if (slot != NOT_FOUND)
            __builtin_prefetch(first_ranks->wide ? (const void *)&first_ranks->wide[slot]
                                                 : (const void *)&first_ranks->narrow[slot]);
    }
#else
    (void)d;
    (void)first_ranks;
    (void)key;
#endif
}

/* Pass 1, in input order. -1: out of memory. */
static int scan_observations(const segment_list *list, domain *d, rank_state *first_ranks,
                             bitset *repeated, outsiders *out, occurrence_list *side,
                             scan_result *result)
{
    for (size_t s = 0; s < list->count; s++) {
        const segment *item = &list->items[s];
        for (size_t i = 0; i < item->length; i++) {
            if (i + PREFETCH_DISTANCE < item->length)
                prefetch_state(d, first_ranks, segment_key(item, i + PREFETCH_DISTANCE));
            int64_t key = segment_key(item, i);
            uint32_t rank = segment_rank(item, i);
            uint64_t index = item->offset + i;
            size_t slot;
            if (d->grows) {
                bool added;
                if (keymap_insert(&d->map, key, &slot, &added) < 0)
                    return -1;
                if (slot >= first_ranks->length) {
                    size_t length = first_ranks->length * 2 > slot + 1 ? first_ranks->length * 2 : slot + 1;
                    if (rank_state_resize(first_ranks, length) < 0 || bitset_resize(repeated, length) < 0)
                        return -1;
                }
            } else {
                slot = domain_find(d, key);
                if (slot == NOT_FOUND) {
                    if (note_outsider(out, side, result, key, rank, index) < 0)
                        return -1;
                    continue;
                }
            }
            result->domain_observations++;
            uint32_t first = rank_state_get(first_ranks, slot);
            if (first == 0) {
                rank_state_set(first_ranks, slot, rank + 1);
                result->domain_unique++;
            } else {
                note_repeat(result, index, first - 1, rank);
                bitset_set(repeated, slot);
                result->any_domain_repeat = true;
            }
        }
    }
    return 0;
}

/* Pass 2 (only when some ID repeats): the occurrences of repeated domain IDs. */
static int collect_repeated(const segment_list *list, const domain *d, const bitset *repeated,
                            occurrence_list *side)
{
    for (size_t s = 0; s < list->count; s++) {
        const segment *item = &list->items[s];
        for (size_t i = 0; i < item->length; i++) {
            int64_t key = segment_key(item, i);
            size_t slot = domain_find(d, key);
            if (slot != NOT_FOUND && bitset_test(repeated, slot) &&
                occurrences_push(side, key, segment_rank(item, i), item->offset + i) < 0)
                return -1;
        }
    }
    return 0;
}

/* One anomalous observed ID: its occurrences are sorted[begin, end) (by rank, then input order). */
typedef struct {
    size_t begin, end;
    unsigned flags;
} group;

typedef struct {
    group *items;
    size_t count;
    size_t repeated, same_rank, cross_rank;
} group_list;

static int group_occurrences(const occurrence *sorted, size_t count, const domain *d, group_list *groups)
{
    memset(groups, 0, sizeof *groups);
    groups->items = PyMem_RawMalloc((count ? count : 1) * sizeof *groups->items);
    if (!groups->items)
        return -1;
    for (size_t begin = 0; begin < count;) {
        size_t end = begin + 1;
        unsigned flags = 0;
        size_t runs = 1;
        while (end < count && sorted[end].key == sorted[begin].key) {
            if (sorted[end].rank != sorted[end - 1].rank)
                runs++;
            else
                flags |= FLAG_SAME_RANK; /* a second occurrence on the same rank */
            end++;
        }
        if (end - begin > 1)
            flags |= FLAG_REPEATED;
        if (runs > 1)
            flags |= FLAG_CROSS_RANK;
        if (d->is_universe && domain_find(d, sorted[begin].key) == NOT_FOUND)
            flags |= FLAG_UNEXPECTED;
        groups->repeated += (flags & FLAG_REPEATED) != 0;
        groups->same_rank += (flags & FLAG_SAME_RANK) != 0;
        groups->cross_rank += (flags & FLAG_CROSS_RANK) != 0;
        groups->items[groups->count++] = (group){begin, end, flags};
        begin = end;
    }
    return 0;
}

/* An anomaly row in ID order: a missing domain slot, or an observed anomalous group. */
typedef struct {
    int64_t key;
    bool missing;
    size_t group_index;
} anomaly_row;

/* Merges missing slots and groups by key; stops after `limit` rows. */
static int merge_anomalies(const domain *d, const rank_state *first_ranks, size_t missing_left,
                           const occurrence *sorted, const group_list *groups, size_t limit,
                           anomaly_row **rows_out, size_t *row_count)
{
    size_t slot = 0, next_group = 0, count = 0;
    size_t capacity = limit < 1024 ? limit + 1 : 1024;
    anomaly_row *rows = PyMem_RawMalloc(capacity * sizeof *rows);
    if (!rows)
        return -1;
    while (count < limit) {
        while (missing_left > 0 && rank_state_get(first_ranks, slot) != 0)
            slot++;
        bool have_missing = missing_left > 0, have_group = next_group < groups->count;
        if (!have_missing && !have_group)
            break;
        anomaly_row row;
        int64_t group_key = have_group ? sorted[groups->items[next_group].begin].key : 0;
        if (have_missing && (!have_group || domain_key(d, slot) < group_key)) {
            row = (anomaly_row){domain_key(d, slot), true, 0};
            slot++;
            missing_left--;
        } else {
            row = (anomaly_row){group_key, false, next_group};
            next_group++;
        }
        if (count == capacity) {
            anomaly_row *grown = PyMem_RawRealloc(rows, capacity * 2 * sizeof *rows);
            if (!grown) {
                PyMem_RawFree(rows);
                return -1;
            }
            rows = grown;
            capacity *= 2;
        }
        rows[count++] = row;
    }
    *rows_out = rows;
    *row_count = count;
    return 0;
}

/* ------------------------------------------------------- Python results */

static int compare_int64(const void *left, const void *right)
{
    int64_t a, b;
    memcpy(&a, left, sizeof a);
    memcpy(&b, right, sizeof b);
    return (a > b) - (a < b);
}

/* Sorted distinct values as a tuple of ints; -1 values are left out when skip_unknown. */
static PyObject *distinct_tuple(int64_t *values, size_t count, bool skip_unknown)
{
    qsort(values, count, sizeof *values, compare_int64);
    size_t kept = 0;
    for (size_t i = 0; i < count; i++)
        if ((kept == 0 || values[i] != values[kept - 1]) && !(skip_unknown && values[i] == -1))
            values[kept++] = values[i];
    PyObject *tuple = PyTuple_New((Py_ssize_t)kept);
    if (!tuple)
        return NULL;
    for (size_t i = 0; i < kept; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (!item) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, item);
    }
    return tuple;
}

/* (index, key, rank code, epoch, position, worker or -1) of one observation, or None. */
static PyObject *observation_tuple(const segment_list *list, uint64_t index)
{
    if (index == NO_INDEX)
        Py_RETURN_NONE;
    size_t local;
    const segment *item = segment_at(list, index, &local);
    return Py_BuildValue("(KLILLL)", (unsigned long long)index, (long long)segment_key(item, local),
                         (unsigned int)segment_rank(item, local), (long long)segment_epoch(item, local),
                         (long long)segment_position(item, local), (long long)segment_worker(item, local));
}

/* The group's distinct rank codes (runs are by rank), and those seen more than once. */
static int group_ranks(const occurrence *sorted, const group *g, PyObject **ranks_out,
                       PyObject **same_rank_out)
{
    PyObject *ranks = PyList_New(0), *same = PyList_New(0);
    if (!ranks || !same)
        goto fail;
    for (size_t at = g->begin; at < g->end;) {
        size_t run_end = at + 1;
        while (run_end < g->end && sorted[run_end].rank == sorted[at].rank)
            run_end++;
        PyObject *code = PyLong_FromUnsignedLong(sorted[at].rank);
        if (!code || PyList_Append(ranks, code) < 0 || (run_end - at > 1 && PyList_Append(same, code) < 0)) {
            Py_XDECREF(code);
            goto fail;
        }
        Py_DECREF(code);
        at = run_end;
    }
    *ranks_out = PyList_AsTuple(ranks);
    *same_rank_out = PyList_AsTuple(same);
    Py_DECREF(ranks);
    Py_DECREF(same);
    if (!*ranks_out || !*same_rank_out) {
        Py_CLEAR(*ranks_out);
        Py_CLEAR(*same_rank_out);
        return -1;
    }
    return 0;
fail:
    Py_XDECREF(ranks);
    Py_XDECREF(same);
    return -1;
}

/* (key, flags, occurrence count, rank codes, workers, epochs) for one anomaly example. */
static PyObject *anomaly_tuple(const segment_list *list, const occurrence *sorted, const group_list *groups,
                               const anomaly_row *row)
{
    if (row->missing)
        return Py_BuildValue("(LIn()()())", (long long)row->key, (unsigned int)FLAG_MISSING, (Py_ssize_t)0);
    const group *g = &groups->items[row->group_index];
    size_t count = g->end - g->begin;
    int64_t *values = PyMem_Malloc(count * sizeof *values);
    if (!values)
        return PyErr_NoMemory();
    PyObject *ranks = NULL, *same = NULL, *workers = NULL, *epochs = NULL, *result = NULL;
    for (size_t i = 0; i < count; i++) {
        size_t local;
        const segment *item = segment_at(list, sorted[g->begin + i].index, &local);
        values[i] = segment_worker(item, local);
    }
    workers = distinct_tuple(values, count, true);
    for (size_t i = 0; workers && i < count; i++) {
        size_t local;
        const segment *item = segment_at(list, sorted[g->begin + i].index, &local);
        values[i] = segment_epoch(item, local);
    }
    if (workers)
        epochs = distinct_tuple(values, count, false);
    if (epochs && group_ranks(sorted, g, &ranks, &same) == 0)
        result = Py_BuildValue("(LInOOO)", (long long)row->key, (unsigned int)g->flags, (Py_ssize_t)count,
                               ranks, workers, epochs);
    PyMem_Free(values);
    Py_XDECREF(ranks);
    Py_XDECREF(same);
    Py_XDECREF(workers);
    Py_XDECREF(epochs);
    return result;
}

/* The complete lists an evidence file needs: missing keys (int64 bytes) and every group. */
static int add_details(PyObject *result, const domain *d, const rank_state *first_ranks,
                       const occurrence *sorted, const group_list *groups, size_t missing_count)
{
    PyObject *missing = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(missing_count * 8));
    if (!missing)
        return -1;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(missing);
    size_t written = 0;
    if (d->is_universe)
        for (size_t slot = 0; slot < domain_size(d) && written < missing_count; slot++)
            if (rank_state_get(first_ranks, slot) == 0)
                store_i64(out, written++, domain_key(d, slot));
    int status = PyDict_SetItemString(result, "missing_keys", missing);
    Py_DECREF(missing);
    if (status < 0)
        return -1;
    PyObject *list = PyList_New((Py_ssize_t)groups->count);
    if (!list)
        return -1;
    for (size_t i = 0; i < groups->count; i++) {
        const group *g = &groups->items[i];
        PyObject *ranks, *same;
        if (group_ranks(sorted, g, &ranks, &same) < 0) {
            Py_DECREF(list);
            return -1;
        }
        PyObject *item = Py_BuildValue("(LInNN)", (long long)sorted[g->begin].key, (unsigned int)g->flags,
                                       (Py_ssize_t)(g->end - g->begin), ranks, same);
        if (!item) {
            Py_DECREF(list);
            return -1;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    status = PyDict_SetItemString(result, "groups", list);
    Py_DECREF(list);
    return status;
}

static int set_size(PyObject *dict, const char *name, size_t value)
{
    PyObject *number = PyLong_FromSize_t(value);
    if (!number)
        return -1;
    int status = PyDict_SetItemString(dict, name, number);
    Py_DECREF(number);
    return status;
}

static int set_new(PyObject *dict, const char *name, PyObject *value)
{
    if (!value)
        return -1;
    int status = PyDict_SetItemString(dict, name, value);
    Py_DECREF(value);
    return status;
}

/* --------------------------------------------------------------- analyze */

typedef struct {
    domain d;
    rank_state first_ranks;
    bitset repeated;
    outsiders out;
    occurrence_list side;
    occurrence *scratch;
    occurrence *sorted;
    group_list groups;
    anomaly_row *rows;
    size_t row_count;
    scan_result scan;
    size_t missing;
    size_t first_missing_slot;
} audit_work;

static void audit_work_free(audit_work *w)
{
    keymap_free(&w->d.map);
    rank_state_free(&w->first_ranks);
    PyMem_RawFree(w->repeated.words);
    keymap_free(&w->out.map);
    PyMem_RawFree(w->out.first_rank);
    PyMem_RawFree(w->side.items);
    PyMem_RawFree(w->scratch);
    PyMem_RawFree(w->groups.items);
    PyMem_RawFree(w->rows);
}

/* The whole bulk audit (no GIL). -1: out of memory. */
static int audit_run(audit_work *w, const segment_list *list, const universe_spec *universe, size_t limit)
{
    w->scan = (scan_result){NO_INDEX, NO_INDEX, NO_INDEX, false, 0, 0, false};
    if (domain_build(&w->d, universe, list) < 0)
        return -1;
    size_t size = w->d.grows ? 1024 : domain_size(&w->d);
    if (rank_state_init(&w->first_ranks, size, list->rank_count >= 255) < 0 ||
        bitset_resize(&w->repeated, size) < 0 || keymap_init(&w->out.map, 16) < 0)
        return -1;
    if (scan_observations(list, &w->d, &w->first_ranks, &w->repeated, &w->out, &w->side, &w->scan) < 0)
        return -1;
    if (w->scan.any_domain_repeat && collect_repeated(list, &w->d, &w->repeated, &w->side) < 0)
        return -1;
    /* Sorting by rank, then stably by key, leaves each ID's occurrences by rank,
     * each rank's in input order (pass 1 and pass 2 both append in input order). */
    w->scratch = PyMem_RawMalloc((w->side.count ? w->side.count : 1) * sizeof *w->scratch);
    if (!w->scratch)
        return -1;
    occurrence *by_rank = sort_occurrences(w->side.items, w->scratch, w->side.count, SORT_BY_RANK);
    occurrence *other = by_rank == w->side.items ? w->scratch : w->side.items;
    w->sorted = sort_occurrences(by_rank, other, w->side.count, SORT_BY_KEY);
    if (group_occurrences(w->sorted, w->side.count, &w->d, &w->groups) < 0)
        return -1;
    /* Without a universe nothing is missing; with one, the unseen slots are. */
    w->missing = w->d.is_universe ? domain_size(&w->d) - w->scan.domain_unique : 0;
    w->first_missing_slot = NOT_FOUND;
    for (size_t slot = 0; w->missing > 0; slot++)
        if (rank_state_get(&w->first_ranks, slot) == 0) {
            w->first_missing_slot = slot;
            break;
        }
    return merge_anomalies(&w->d, &w->first_ranks, w->missing, w->sorted, &w->groups, limit, &w->rows,
                           &w->row_count);
}

static PyObject *first_missing_key(const audit_work *w)
{
    if (w->first_missing_slot == NOT_FOUND)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(domain_key(&w->d, w->first_missing_slot));
}

static PyObject *audit_result(const audit_work *w, const segment_list *list, bool want_details)
{
    size_t missing = w->missing;
    PyObject *result = PyDict_New();
    if (!result)
        return NULL;
    PyObject *anomalies = PyList_New((Py_ssize_t)w->row_count);
    if (set_size(result, "unique", w->scan.domain_unique + w->out.map.count) < 0 ||
        set_size(result, "repeated", w->groups.repeated) < 0 ||
        set_size(result, "same_rank", w->groups.same_rank) < 0 ||
        set_size(result, "cross_rank", w->groups.cross_rank) < 0 || set_size(result, "missing", missing) < 0 ||
        set_size(result, "unexpected", w->out.map.count) < 0 ||
        set_size(result, "padding", w->scan.domain_observations - w->scan.domain_unique) < 0 ||
        set_new(result, "first_unexpected", observation_tuple(list, w->scan.first_unexpected)) < 0 ||
        set_new(result, "first_repeat", observation_tuple(list, w->scan.first_repeat)) < 0 ||
        set_new(result, "first_repeat_same_rank", PyBool_FromLong(w->scan.first_repeat_same_rank)) < 0 ||
        set_new(result, "first_cross", observation_tuple(list, w->scan.first_cross)) < 0 ||
        set_new(result, "first_missing", first_missing_key(w)) < 0 || !anomalies)
        goto fail;
    for (size_t i = 0; i < w->row_count; i++) {
        PyObject *row = anomaly_tuple(list, w->sorted, &w->groups, &w->rows[i]);
        if (!row)
            goto fail;
        PyList_SET_ITEM(anomalies, (Py_ssize_t)i, row);
    }
    if (PyDict_SetItemString(result, "anomalies", anomalies) < 0)
        goto fail;
    Py_CLEAR(anomalies);
    if (want_details && add_details(result, &w->d, &w->first_ranks, w->sorted, &w->groups, missing) < 0)
        goto fail;
    return result;
fail:
    Py_XDECREF(anomalies);
    Py_DECREF(result);
    return NULL;
}

PyDoc_STRVAR(coverage_analyze_doc,
"coverage_analyze(segments, rank_count, universe, max_examples, want_details) -> dict\n\n"
"Audits the observations of `segments` (list of (keys, rank, epoch, positions, workers))\n"
"against `universe` (None, a range (start, step, count) with step >= 1, or a buffer of\n"
"strictly ascending int64 keys). Returns counts, the first unexpected / repeated / cross-rank\n"
"observation as (index, key, rank code, epoch, position, worker or -1), the first missing key,\n"
"the first `max_examples` anomalies in key order as (key, flags, count, rank codes, workers,\n"
"epochs) and, with want_details, 'missing_keys' (int64 bytes) and 'groups' (key, flags, count,\n"
"rank codes, rank codes seen more than once) for every repeated or unexpected ID.");

static PyObject *coverage_analyze(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *segments, *rank_count, *universe_object;
    Py_ssize_t max_examples;
    int want_details;
    if (!PyArg_ParseTuple(args, "OOOnp:coverage_analyze", &segments, &rank_count, &universe_object,
                          &max_examples, &want_details))
        return NULL;
    if (max_examples < 0) {
        PyErr_SetString(PyExc_ValueError, "max_examples must be >= 0");
        return NULL;
    }
    segment_list list;
    universe_spec universe;
    if (segments_parse(segments, rank_count, &list) < 0)
        return NULL;
    if (universe_parse(universe_object, &universe) < 0) {
        segments_release(&list);
        return NULL;
    }
    audit_work work;
    memset(&work, 0, sizeof work);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = audit_run(&work, &list, &universe, (size_t)max_examples);
    Py_END_ALLOW_THREADS
    PyObject *result = status < 0 ? PyErr_NoMemory() : audit_result(&work, &list, want_details);
    audit_work_free(&work);
    universe_release(&universe);
    segments_release(&list);
    return result;
}

/* ------------------------------------------------------------ evidence */

PyDoc_STRVAR(coverage_trace_order_doc,
"coverage_trace_order(segments, rank_count) -> bytes\n\n"
"Global indices (uint32) of every observation, sorted by key and, within a key, in input order.");

static PyObject *coverage_trace_order(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *segments, *rank_count;
    if (!PyArg_ParseTuple(args, "OO:coverage_trace_order", &segments, &rank_count))
        return NULL;
    segment_list list;
    if (segments_parse(segments, rank_count, &list) < 0)
        return NULL;
    size_t total = list.total;
    occurrence *items = PyMem_RawMalloc((total ? total : 1) * sizeof *items);
    occurrence *scratch = PyMem_RawMalloc((total ? total : 1) * sizeof *scratch);
    PyObject *order = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * 4));
    if (!items || !scratch || !order) {
        PyMem_RawFree(items);
        PyMem_RawFree(scratch);
        Py_XDECREF(order);
        segments_release(&list);
        return PyErr_NoMemory();
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(order);
    Py_BEGIN_ALLOW_THREADS
    for (size_t s = 0; s < list.count; s++)
        for (size_t i = 0; i < list.items[s].length; i++)
            items[list.items[s].offset + i] =
                (occurrence){segment_key(&list.items[s], i), 0, (uint32_t)(list.items[s].offset + i)};
    const occurrence *sorted = sort_occurrences(items, scratch, total, SORT_BY_KEY);
    for (size_t i = 0; i < total; i++)
        store_u32(out, i, sorted[i].index);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(items);
    PyMem_RawFree(scratch);
    segments_release(&list);
    return order;
}

/* A growing ASCII text. */
typedef struct {
    char *data;
    size_t length, capacity;
} text_buffer;

static int text_append(text_buffer *text, const char *piece, size_t length)
{
    if (text->length + length > text->capacity) {
        size_t capacity = text->capacity ? text->capacity : 1 << 16;
        while (capacity < text->length + length)
            capacity *= 2;
        char *grown = PyMem_RawRealloc(text->data, capacity);
        if (!grown)
            return -1;
        text->data = grown;
        text->capacity = capacity;
    }
    memcpy(text->data + text->length, piece, length);
    text->length += length;
    return 0;
}

static int text_literal(text_buffer *text, const char *piece) { return text_append(text, piece, strlen(piece)); }

static int text_int(text_buffer *text, int64_t value)
{
    char digits[24];
    int length = snprintf(digits, sizeof digits, "%lld", (long long)value);
    return text_append(text, digits, (size_t)length);
}

/* How an ID is written: its decimal key, or a pre-rendered JSON text per code. */
typedef struct {
    const char **texts; /* NULL: keys are the int IDs */
    Py_ssize_t *lengths;
    size_t count;
} id_texts;

static int text_id(text_buffer *text, const id_texts *ids, int64_t key)
{
    if (!ids->texts)
        return text_int(text, key);
    if (key < 0 || (uint64_t)key >= ids->count)
        return -2;
    return text_append(text, ids->texts[key], (size_t)ids->lengths[key]);
}

/* The trace objects of order[start, ...): at least `budget` occurrences, then to the
 * end of the last ID, so that the next call starts on a new ID. -1: out of memory,
 * -2: a key without a text. */
static int render_traces(const segment_list *list, const unsigned char *order, size_t total, size_t start,
                         size_t budget, const unsigned char *rank_values, const id_texts *ids,
                         text_buffer *text, size_t *next)
{
    size_t at = start;
    int64_t current = 0;
    int status = 0;
    for (; at < total && status == 0; at++) {
        size_t local;
        const segment *item = segment_at(list, load_u32(order, at), &local);
        int64_t key = segment_key(item, local);
        if (at > start && key == current) {
            status = text_literal(text, ",\n");
        } else {
            if (at - start >= budget)
                break;
            if (at > start)
                status = text_literal(text, "\n      ],\n      \"sample_id\": ");
            if (status == 0 && at > start)
                status = text_id(text, ids, current);
            if (status == 0 && at > start)
                status = text_literal(text, "\n    },\n");
            if (status == 0 && at == start && start > 0)
                status = text_literal(text, ",\n");
            if (status == 0)
                status = text_literal(text, "    {\n      \"occurrences\": [\n");
            current = key;
        }
        int64_t worker = segment_worker(item, local);
        if (status == 0)
            status = text_literal(text, "        {\n          \"epoch\": ");
        if (status == 0)
            status = text_int(text, segment_epoch(item, local));
        if (status == 0)
            status = text_literal(text, ",\n          \"position\": ");
        if (status == 0)
            status = text_int(text, segment_position(item, local));
        if (status == 0)
            status = text_literal(text, ",\n          \"rank\": ");
        if (status == 0)
            status = text_int(text, load_i64(rank_values, segment_rank(item, local)));
        if (status == 0)
            status = text_literal(text, ",\n          \"sample_id\": ");
        if (status == 0)
            status = text_id(text, ids, key);
        if (status == 0)
            status = text_literal(text, ",\n          \"worker\": ");
        if (status == 0)
            status = worker < 0 ? text_literal(text, "null") : text_int(text, worker);
        if (status == 0)
            status = text_literal(text, "\n        }");
    }
    if (status == 0 && at > start) {
        status = text_literal(text, "\n      ],\n      \"sample_id\": ");
        if (status == 0)
            status = text_id(text, ids, current);
        if (status == 0)
            status = text_literal(text, "\n    }");
    }
    *next = at;
    return status;
}

PyDoc_STRVAR(coverage_render_traces_doc,
"coverage_render_traces(segments, rank_count, order, start, budget, rank_values, id_texts)\n"
"    -> (str, next)\n\n"
"The evidence file's trace objects (indent=2 JSON, as inside its \"traces\" list) for the\n"
"observations at order[start:next] (order from coverage_trace_order): at least `budget`\n"
"occurrences, then to the end of the last ID. The text starts with \",\\n\" when start > 0.\n"
"rank_values: int64 buffer, rank code -> rank. id_texts: None when keys are the int IDs,\n"
"else a list of the JSON text of each code's ID (ASCII str).");

static PyObject *coverage_render_traces(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *segments, *rank_count, *texts_object;
    Py_buffer order, rank_values;
    Py_ssize_t start, budget;
    if (!PyArg_ParseTuple(args, "OOy*nny*O:coverage_render_traces", &segments, &rank_count, &order, &start,
                          &budget, &rank_values, &texts_object))
        return NULL;
    segment_list list;
    id_texts ids = {NULL, NULL, 0};
    text_buffer text = {NULL, 0, 0};
    PyObject *result = NULL;
    bool parsed = segments_parse(segments, rank_count, &list) == 0;
    if (!parsed)
        goto done;
    size_t total = (size_t)order.len / 4;
    if (order.len % 4 != 0 || total != list.total || start < 0 || (size_t)start > total || budget < 1 ||
        (size_t)rank_values.len / 8 < list.rank_count) {
        PyErr_SetString(PyExc_ValueError, "order, start, budget or rank_values do not fit the segments");
        goto done;
    }
    if (texts_object != Py_None) {
        if (!PyList_Check(texts_object)) {
            PyErr_SetString(PyExc_TypeError, "id_texts must be a list of str or None");
            goto done;
        }
        ids.count = (size_t)PyList_GET_SIZE(texts_object);
        ids.texts = PyMem_Calloc(ids.count ? ids.count : 1, sizeof *ids.texts);
        ids.lengths = PyMem_Calloc(ids.count ? ids.count : 1, sizeof *ids.lengths);
        if (!ids.texts || !ids.lengths) {
            PyErr_NoMemory();
            goto done;
        }
        /* The list keeps the strs, and with them their cached UTF-8, alive. */
        for (size_t i = 0; i < ids.count; i++)
            if (!(ids.texts[i] = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(texts_object, i), &ids.lengths[i])))
                goto done;
    }
    for (size_t i = 0; i < total; i++)
        if (load_u32(order.buf, i) >= list.total) {
            PyErr_SetString(PyExc_ValueError, "order holds an index beyond the observations");
            goto done;
        }
    size_t next;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = render_traces(&list, order.buf, total, (size_t)start, (size_t)budget, rank_values.buf, &ids, &text,
                           &next);
    Py_END_ALLOW_THREADS
    if (status == -1)
        PyErr_NoMemory();
    else if (status == -2)
        PyErr_SetString(PyExc_ValueError, "a key has no entry in id_texts");
    else
        result = Py_BuildValue("(s#n)", text.data ? text.data : "", (Py_ssize_t)text.length, (Py_ssize_t)next);
done:
    PyMem_RawFree(text.data);
    PyMem_Free(ids.texts);
    PyMem_Free(ids.lengths);
    if (parsed)
        segments_release(&list);
    PyBuffer_Release(&order);
    PyBuffer_Release(&rank_values);
    return result;
}

/* --------------------------------------------------------- input shaping */

/* How one ID reads as a key. */
enum id_reading { ID_KEY, ID_NEEDS_CODE, ID_UNSUPPORTED, ID_FAILED };

static enum id_reading read_id(PyObject *id, int64_t *key)
{
    if (PyLong_Check(id) && !PyBool_Check(id)) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(id, &overflow);
        if (value == -1 && PyErr_Occurred())
            return ID_FAILED;
        if (overflow)
            return ID_NEEDS_CODE;
        *key = value;
        return ID_KEY;
    }
    return PyUnicode_Check(id) ? ID_NEEDS_CODE : ID_UNSUPPORTED;
}

/* The code of `id` in `codes` (dict id -> code), adding it with the next code if new. */
static int code_of(PyObject *codes, PyObject *id, int64_t *code)
{
    PyObject *found = PyDict_GetItemWithError(codes, id);
    if (found) {
        *code = PyLong_AsLongLong(found);
        return *code == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (PyErr_Occurred())
        return -1;
    Py_ssize_t next = PyDict_GET_SIZE(codes);
    PyObject *value = PyLong_FromSsize_t(next);
    if (!value)
        return -1;
    int status = PyDict_SetItem(codes, id, value);
    Py_DECREF(value);
    *code = next;
    return status;
}

/* Turns the first `count` keys (plain int IDs so far) into codes of a new dict. */
static PyObject *start_codes(unsigned char *keys, size_t count)
{
    PyObject *codes = PyDict_New();
    for (size_t i = 0; codes && i < count; i++) {
        PyObject *id = PyLong_FromLongLong(load_i64(keys, i));
        int64_t code;
        if (!id || code_of(codes, id, &code) < 0) {
            Py_XDECREF(id);
            Py_CLEAR(codes);
            break;
        }
        Py_DECREF(id);
        store_i64(keys, i, code);
    }
    return codes;
}

/* Stores the key of id at keys[i]: the int itself, or a code once `*codes` exists
 * (created here when the first str or out-of-int64 int arrives). 1: unsupported. */
static int encode_id(PyObject *id, unsigned char *keys, size_t i, PyObject **codes)
{
    int64_t key;
    enum id_reading reading = read_id(id, &key);
    if (reading == ID_FAILED)
        return -1;
    if (reading == ID_UNSUPPORTED)
        return 1;
    if (reading == ID_NEEDS_CODE && !*codes && !(*codes = start_codes(keys, i)))
        return -1;
    if (*codes && code_of(*codes, id, &key) < 0)
        return -1;
    store_i64(keys, i, key);
    return 0;
}

static PyObject *codes_argument(PyObject *codes)
{
    if (codes == Py_None)
        return NULL;
    if (!PyDict_Check(codes)) {
        PyErr_SetString(PyExc_TypeError, "id_codes must be a dict or None");
        return NULL;
    }
    return Py_NewRef(codes);
}

PyDoc_STRVAR(coverage_collect_ids_doc,
"coverage_collect_ids(ids, id_codes) -> (keys, id_codes, first_unsupported, has_int, has_str)\n\n"
"Keys (int64 bytes) of a list or tuple of IDs. The keys are the int IDs themselves while\n"
"every ID is an int64-range int and `id_codes` is None; otherwise they are codes from the\n"
"dict `id_codes` (created and filled on the way; existing entries are reused). Stops at the\n"
"first ID that is neither int (bool excluded) nor str: first_unsupported is its index, or -1.");

static PyObject *coverage_collect_ids(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *ids, *codes_object;
    if (!PyArg_ParseTuple(args, "OO:coverage_collect_ids", &ids, &codes_object))
        return NULL;
    if (!PyList_Check(ids) && !PyTuple_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "ids must be a list or tuple");
        return NULL;
    }
    PyObject *codes = codes_argument(codes_object);
    if (!codes && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(ids);
    PyObject *keys = PyBytes_FromStringAndSize(NULL, count * 8);
    if (!keys) {
        Py_XDECREF(codes);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(keys);
    Py_ssize_t first_unsupported = -1;
    bool has_int = false, has_str = false;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *id = PySequence_Fast_GET_ITEM(ids, i);
        int status = encode_id(id, out, (size_t)i, &codes);
        if (status < 0)
            goto fail;
        if (status == 1) {
            first_unsupported = i;
            break;
        }
        if (PyUnicode_Check(id))
            has_str = true;
        else
            has_int = true;
    }
    PyObject *result = Py_BuildValue("(NOnOO)", keys, codes ? codes : Py_None, first_unsupported,
                                     has_int ? Py_True : Py_False, has_str ? Py_True : Py_False);
    Py_XDECREF(codes);
    return result;
fail:
    Py_DECREF(keys);
    Py_XDECREF(codes);
    return NULL;
}

/* Reads a non-negative int64 field: 0 ok, 1 not a non-negative int, 2 beyond int64, -1 error. */
static int read_count(PyObject *value, int64_t *out)
{
    if (!PyLong_Check(value) || PyBool_Check(value))
        return 1;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0)
        return 2;
    if (overflow < 0 || number < 0)
        return 1;
    *out = number;
    return 0;
}

/* Small map from rank value to rank code, in order of first appearance. */
typedef struct {
    keymap map;
    int64_t last_value;
    uint32_t last_code;
    bool has_last;
} rank_codes;

static int rank_code_of(rank_codes *codes, int64_t value, uint32_t *code)
{
    if (codes->has_last && codes->last_value == value) {
        *code = codes->last_code;
        return 0;
    }
    size_t slot;
    bool added;
    if (keymap_insert(&codes->map, value, &slot, &added) < 0)
        return -1;
    codes->last_value = value;
    codes->last_code = (uint32_t)slot;
    codes->has_last = true;
    *code = (uint32_t)slot;
    return 0;
}

PyDoc_STRVAR(coverage_collect_observations_doc,
"coverage_collect_observations(observations, observation_type, id_codes) -> (problem, columns)\n\n"
"Validates a list of observations in order and reads their columns. problem is None or\n"
"(index, field, beyond_int64) for the first invalid observation, field one of 'type',\n"
"'sample_id', 'rank', 'epoch', 'position', 'worker'. columns is None or (keys, rank codes\n"
"(uint32 bytes), rank values (list, by code), epochs, positions, workers (-1 = None), id_codes);\n"
"keys follow coverage_collect_ids.");

static PyObject *coverage_collect_observations(PyObject *module, PyObject *args)
{
    (void)module;
    static const char *const fields[] = {"rank", "epoch", "position"};
    PyObject *observations, *observation_type, *codes_object;
    if (!PyArg_ParseTuple(args, "O!O!O:coverage_collect_observations", &PyList_Type, &observations,
                          &PyType_Type, &observation_type, &codes_object))
        return NULL;
    PyObject *codes = codes_argument(codes_object);
    if (!codes && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(observations);
    if ((uint64_t)count > MAX_OBSERVATIONS) {
        Py_XDECREF(codes);
        return PyErr_Format(PyExc_ValueError, "too many observations: the coverage core audits at most %llu",
                            (unsigned long long)MAX_OBSERVATIONS);
    }
    PyObject *keys = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *ranks = PyBytes_FromStringAndSize(NULL, count * 4);
    PyObject *epochs = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *positions = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *workers = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *rank_values = PyList_New(0);
    PyObject *problem = NULL, *result = NULL;
    PyObject *names[5] = {PyUnicode_InternFromString("sample_id"), PyUnicode_InternFromString("rank"),
                          PyUnicode_InternFromString("epoch"), PyUnicode_InternFromString("position"),
                          PyUnicode_InternFromString("worker")};
    rank_codes rank_map;
    memset(&rank_map, 0, sizeof rank_map);
    bool ready = keys && ranks && epochs && positions && workers && rank_values;
    for (size_t n = 0; n < 5; n++)
        ready = ready && names[n];
    if (!ready || keymap_init(&rank_map.map, 16) < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    unsigned char *columns[3] = {(unsigned char *)PyBytes_AS_STRING(epochs),
                                 (unsigned char *)PyBytes_AS_STRING(positions),
                                 (unsigned char *)PyBytes_AS_STRING(workers)};
    unsigned char *key_out = (unsigned char *)PyBytes_AS_STRING(keys);
    unsigned char *rank_out = (unsigned char *)PyBytes_AS_STRING(ranks);
    for (Py_ssize_t i = 0; i < count && !problem; i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(observations, i));
        int status = PyObject_IsInstance(item, observation_type);
        if (status <= 0) {
            if (status == 0)
                problem = Py_BuildValue("(nsO)", i, "type", Py_False);
            Py_DECREF(item);
            if (!problem)
                goto done;
            break;
        }
        PyObject *values[5] = {NULL, NULL, NULL, NULL, NULL};
        for (size_t n = 0; n < 5; n++)
            if (!(values[n] = PyObject_GetAttr(item, names[n]))) {
                for (size_t m = 0; m < n; m++)
                    Py_DECREF(values[m]);
                Py_DECREF(item);
                goto done;
            }
        Py_DECREF(item);
        int reading = encode_id(values[0], key_out, (size_t)i, &codes);
        if (reading == 1)
            problem = Py_BuildValue("(nsO)", i, "sample_id", Py_False);
        int64_t numbers[3];
        for (size_t f = 0; f < 3 && reading == 0; f++) {
            reading = read_count(values[f + 1], &numbers[f]);
            if (reading > 0)
                problem = Py_BuildValue("(nsO)", i, fields[f], reading == 2 ? Py_True : Py_False);
        }
        int64_t worker = -1;
        if (reading == 0 && values[4] != Py_None) {
            reading = read_count(values[4], &worker);
            if (reading > 0)
                problem = Py_BuildValue("(nsO)", i, "worker", reading == 2 ? Py_True : Py_False);
        }
        uint32_t rank_code = 0;
        if (reading == 0) {
            if (rank_code_of(&rank_map, numbers[0], &rank_code) < 0) {
                PyErr_NoMemory();
                reading = -1;
            } else {
                store_u32(rank_out, (size_t)i, rank_code);
                store_i64(columns[0], (size_t)i, numbers[1]);
                store_i64(columns[1], (size_t)i, numbers[2]);
                store_i64(columns[2], (size_t)i, worker);
            }
        }
        for (size_t n = 0; n < 5; n++)
            Py_DECREF(values[n]);
        if (reading < 0 || (reading > 0 && !problem))
            goto done;
    }
    if (problem) {
        result = Py_BuildValue("(ON)", problem, Py_NewRef(Py_None));
        goto done;
    }
    for (size_t code = 0; code < rank_map.map.count; code++) {
        PyObject *value = PyLong_FromLongLong(rank_map.map.keys[code]);
        if (!value || PyList_Append(rank_values, value) < 0) {
            Py_XDECREF(value);
            goto done;
        }
        Py_DECREF(value);
    }
    result = Py_BuildValue("(O(OOOOOOO))", Py_None, keys, ranks, rank_values, epochs, positions, workers,
                           codes ? codes : Py_None);
done:
    keymap_free(&rank_map.map);
    for (size_t n = 0; n < 5; n++)
        Py_XDECREF(names[n]);
    Py_XDECREF(problem);
    Py_XDECREF(keys);
    Py_XDECREF(ranks);
    Py_XDECREF(epochs);
    Py_XDECREF(positions);
    Py_XDECREF(workers);
    Py_XDECREF(rank_values);
    Py_XDECREF(codes);
    return result;
}

/* Native-order integer formats a universe buffer may use. */
static int integer_format(const char *format, bool *is_signed, size_t *size)
{
    if (!format)
        format = "B";
    if (*format == '@' || *format == '=')
        format++;
    if (strlen(format) != 1)
        return -1;
    switch (*format) {
    case 'b': *is_signed = true; *size = sizeof(signed char); return 0;
    case 'B': *is_signed = false; *size = sizeof(unsigned char); return 0;
    case 'h': *is_signed = true; *size = sizeof(short); return 0;
    case 'H': *is_signed = false; *size = sizeof(unsigned short); return 0;
    case 'i': *is_signed = true; *size = sizeof(int); return 0;
    case 'I': *is_signed = false; *size = sizeof(unsigned int); return 0;
    case 'l': *is_signed = true; *size = sizeof(long); return 0;
    case 'L': *is_signed = false; *size = sizeof(unsigned long); return 0;
    case 'q': *is_signed = true; *size = sizeof(long long); return 0;
    case 'Q': *is_signed = false; *size = sizeof(unsigned long long); return 0;
    case 'n': *is_signed = true; *size = sizeof(Py_ssize_t); return 0;
    case 'N': *is_signed = false; *size = sizeof(size_t); return 0;
    default: return -1;
    }
}

/* Reads one integer of `size` bytes (1, 2, 4 or 8) as int64; false if it does not fit. */
static bool read_integer(const unsigned char *at, bool is_signed, size_t size, int64_t *out)
{
    if (size == 8) {
        uint64_t raw;
        memcpy(&raw, at, 8);
        if (!is_signed && raw > (uint64_t)INT64_MAX)
            return false;
        int64_t value;
        memcpy(&value, &raw, 8);
        *out = value;
        return true;
    }
    if (size == 4) {
        if (is_signed) {
            int32_t value;
            memcpy(&value, at, 4);
            *out = value;
        } else {
            uint32_t value;
            memcpy(&value, at, 4);
            *out = value;
        }
        return true;
    }
    if (size == 2) {
        if (is_signed) {
            int16_t value;
            memcpy(&value, at, 2);
            *out = value;
        } else {
            uint16_t value;
            memcpy(&value, at, 2);
            *out = value;
        }
        return true;
    }
    *out = is_signed ? (int64_t)(signed char)*at : (int64_t)*at;
    return true;
}

PyDoc_STRVAR(coverage_int64_from_buffer_doc,
"coverage_int64_from_buffer(object) -> bytes | None\n\n"
"The values of a C-contiguous, at most one-dimensional buffer of native integers as int64\n"
"bytes; None when the object is no such buffer or a value does not fit int64.");

static PyObject *coverage_int64_from_buffer(PyObject *module, PyObject *source)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        /* Not a contiguous buffer: the caller iterates the object instead. */
        if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError) &&
            !PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    bool is_signed;
    size_t size;
    if (view.ndim > 1 || integer_format(view.format, &is_signed, &size) < 0 || (size_t)view.itemsize != size ||
        (size != 1 && size != 2 && size != 4 && size != 8)) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    size_t count = (size_t)view.len / size;
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * 8));
    if (!result) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    bool fits = true;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < count && fits; i++) {
        int64_t value = 0;
        fits = read_integer((const unsigned char *)view.buf + i * size, is_signed, size, &value);
        store_i64(out, i, value);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (!fits) {
        Py_DECREF(result);
        Py_RETURN_NONE;
    }
    return result;
}

PyDoc_STRVAR(coverage_sort_unique_doc,
"coverage_sort_unique(keys) -> (sorted_keys, has_duplicates)\n\n"
"The int64 keys of a buffer sorted ascending (bytes), and whether any key repeats.");

static PyObject *coverage_sort_unique(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:coverage_sort_unique", &view))
        return NULL;
    if (view.len % 8 != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "keys must be a whole number of int64");
        return NULL;
    }
    size_t count = (size_t)view.len / 8;
    int64_t *values = PyMem_RawMalloc((count ? count : 1) * 8);
    int64_t *scratch = PyMem_RawMalloc((count ? count : 1) * 8);
    if (!values || !scratch) {
        PyMem_RawFree(values);
        PyMem_RawFree(scratch);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    bool duplicates = false;
    const int64_t *sorted;
    Py_BEGIN_ALLOW_THREADS
    memcpy(values, view.buf, count * 8);
    sorted = sort_int64(values, scratch, count);
    for (size_t i = 1; i < count && !duplicates; i++)
        duplicates = sorted[i] == sorted[i - 1];
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(y#O)", (const char *)sorted, (Py_ssize_t)(count * 8),
                                     duplicates ? Py_True : Py_False);
    PyMem_RawFree(values);
    PyMem_RawFree(scratch);
    return result;
}

PyDoc_STRVAR(coverage_remap_doc,
"coverage_remap(keys, table) -> bytes\n\n"
"keys[i] replaced by table[keys[i]] (both int64 buffers; keys index the table).");

static PyObject *coverage_remap(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer keys, table;
    if (!PyArg_ParseTuple(args, "y*y*:coverage_remap", &keys, &table))
        return NULL;
    PyObject *result = NULL;
    size_t count = (size_t)keys.len / 8, size = (size_t)table.len / 8;
    if (keys.len % 8 != 0 || table.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "keys and table must be whole numbers of int64");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, keys.len);
    if (!result)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    bool inside = true;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < count && inside; i++) {
        int64_t key = load_i64(keys.buf, i);
        inside = key >= 0 && (uint64_t)key < size;
        if (inside)
            store_i64(out, i, load_i64(table.buf, (size_t)key));
    }
    Py_END_ALLOW_THREADS
    if (!inside) {
        PyErr_SetString(PyExc_ValueError, "a key is not an index of the table");
        Py_CLEAR(result);
    }
done:
    PyBuffer_Release(&keys);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(coverage_first_below_doc,
"coverage_first_below(values, minimum) -> int\n\n"
"Index of the first int64 of the buffer below `minimum`, or -1.");

static PyObject *coverage_first_below(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer view;
    long long minimum;
    if (!PyArg_ParseTuple(args, "y*L:coverage_first_below", &view, &minimum))
        return NULL;
    if (view.len % 8 != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "values must be a whole number of int64");
        return NULL;
    }
    size_t count = (size_t)view.len / 8, found = NOT_FOUND;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < count; i++)
        if (load_i64(view.buf, i) < minimum) {
            found = i;
            break;
        }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found == NOT_FOUND ? -1 : (Py_ssize_t)found);
}

PyMethodDef tp_coverage_methods[] = {
    {"coverage_analyze", coverage_analyze, METH_VARARGS, coverage_analyze_doc},
    {"coverage_trace_order", coverage_trace_order, METH_VARARGS, coverage_trace_order_doc},
    {"coverage_render_traces", coverage_render_traces, METH_VARARGS, coverage_render_traces_doc},
    {"coverage_collect_ids", coverage_collect_ids, METH_VARARGS, coverage_collect_ids_doc},
    {"coverage_collect_observations", coverage_collect_observations, METH_VARARGS,
     coverage_collect_observations_doc},
    {"coverage_int64_from_buffer", coverage_int64_from_buffer, METH_O, coverage_int64_from_buffer_doc},
    {"coverage_sort_unique", coverage_sort_unique, METH_VARARGS, coverage_sort_unique_doc},
    {"coverage_remap", coverage_remap, METH_VARARGS, coverage_remap_doc},
    {"coverage_first_below", coverage_first_below, METH_VARARGS, coverage_first_below_doc},
    {NULL, NULL, 0, NULL},
};

int tp_coverage_init(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "COVERAGE_MISSING", FLAG_MISSING) < 0 ||
        PyModule_AddIntConstant(module, "COVERAGE_UNEXPECTED", FLAG_UNEXPECTED) < 0 ||
        PyModule_AddIntConstant(module, "COVERAGE_REPEATED", FLAG_REPEATED) < 0 ||
        PyModule_AddIntConstant(module, "COVERAGE_SAME_RANK", FLAG_SAME_RANK) < 0 ||
        PyModule_AddIntConstant(module, "COVERAGE_CROSS_RANK", FLAG_CROSS_RANK) < 0)
        return -1;
    PyObject *limit = PyLong_FromUnsignedLongLong(MAX_OBSERVATIONS);
    int status = PyModule_AddObjectRef(module, "COVERAGE_MAX_OBSERVATIONS", limit);
    Py_XDECREF(limit);
    return status;
}
