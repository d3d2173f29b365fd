/* trace part of the native core: run a job under ptrace with a seccomp filter
 * and report (or stop it at) the file-system mutations it makes under one
 * directory, the crash points of the crash check.
 *
 * Why ptrace + seccomp rather than an LD_PRELOAD shim: the kernel sees every
 * system call of every thread and every descendant process, whoever makes it.
 * A shim sees only calls that go through the dynamic symbol table, so it misses
 * the C library's own internal writes (fwrite's buffer flushes), statically
 * linked programs and raw system calls. Stopping at the seccomp stop, before
 * the call runs, also gives an exact crash point: the job dies with every
 * earlier mutation done and this one not started. The filter traps only the
 * calls below, so every other system call runs at full speed.
 *
 * The job is either a child the tracer forks and execs (trace_job), or a
 * process made elsewhere that waits to be seized (trace_pid): a warm server's
 * fork, which has imported torch already, installs the filter itself once
 * its tracer is there (processes/warm/child.py), from trace_filter()'s bytes.
 *
 * The tracer is the thread that calls trace_job or trace_pid: ptrace requests must come
 * from the thread that became the tracer, so the whole run is one C call made
 * without the GIL. Every wait passes __WNOTHREAD: several threads may trace
 * jobs at once, and a wait must never collect another tracer's stop. A
 * watchdog thread enforces the timeout. */
#include "tp.h"

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define TP_TRACE_SUPPORTED 1
#else
#define TP_TRACE_SUPPORTED 0
#endif

#if TP_TRACE_SUPPORTED

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define TP_AUDIT_ARCH AUDIT_ARCH_X86_64
#else
#define TP_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* ------------------------------------------------------------------------ */
/* The traced calls and the operation each is reported as.                  */

enum op {
    OP_WRITE,
    OP_PWRITE,
    OP_WRITEV,
    OP_FTRUNCATE,
    OP_TRUNCATE,
    OP_FALLOCATE,
    OP_FSYNC,
    OP_FDATASYNC,
    OP_RENAME,
    OP_UNLINK,
    OP_MKDIR,
    OP_RMDIR,
    OP_LINK,
    OP_SYMLINK,
    OP_CLOSE,
    OP_CREATE, /* open with O_CREAT of a new file, or O_TRUNC */
    OP_COPY,   /* sendfile, copy_file_range: data written into the destination */
    OP_OPEN,   /* a read of a file under the root: reported, never a crash point */
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "write",   "pwrite", "writev", "ftruncate", "truncate", "fallocate", "fsync",
    "fdatasync", "rename", "unlink", "mkdir",   "rmdir",    "link",      "symlink",
    "close",   "create", "copy",   "open",
};

/* How a call's arguments are laid out; the number is resolved per architecture. */
enum shape {
    SHAPE_FD,        /* fd in arg 0 */
    SHAPE_FD_ARG2,   /* copy_file_range: destination fd in arg 2 */
    SHAPE_PATH,      /* path in arg 0, relative to the cwd */
    SHAPE_AT,        /* dirfd arg 0, path arg 1 */
    SHAPE_OPEN,      /* open(path, flags) */
    SHAPE_OPENAT,    /* openat(dirfd, path, flags) */
    SHAPE_CREAT,     /* creat(path, mode) */
    SHAPE_UNLINKAT,  /* unlinkat(dirfd, path, flags) */
    SHAPE_TWO_PATHS, /* rename(old, new), link(old, new) */
    SHAPE_TWO_AT,    /* renameat(olddirfd, old, newdirfd, new), linkat */
    SHAPE_SYMLINK,   /* symlink(target, path) */
    SHAPE_SYMLINKAT, /* symlinkat(target, dirfd, path) */
};

struct traced_call {
    long nr;
    enum op op;
    enum shape shape;
};

static const struct traced_call traced_calls[] = {
    {SYS_write, OP_WRITE, SHAPE_FD},
    {SYS_pwrite64, OP_PWRITE, SHAPE_FD},
    {SYS_writev, OP_WRITEV, SHAPE_FD},
    {SYS_pwritev, OP_WRITEV, SHAPE_FD},
#ifdef SYS_pwritev2
    {SYS_pwritev2, OP_WRITEV, SHAPE_FD},
#endif
    {SYS_ftruncate, OP_FTRUNCATE, SHAPE_FD},
    {SYS_truncate, OP_TRUNCATE, SHAPE_PATH},
    {SYS_fallocate, OP_FALLOCATE, SHAPE_FD},
    {SYS_fsync, OP_FSYNC, SHAPE_FD},
    {SYS_fdatasync, OP_FDATASYNC, SHAPE_FD},
    {SYS_close, OP_CLOSE, SHAPE_FD},
    {SYS_sendfile, OP_COPY, SHAPE_FD},
#ifdef SYS_copy_file_range
    {SYS_copy_file_range, OP_COPY, SHAPE_FD_ARG2},
#endif
    {SYS_openat, OP_CREATE, SHAPE_OPENAT},
    {SYS_renameat, OP_RENAME, SHAPE_TWO_AT},
#ifdef SYS_renameat2
    {SYS_renameat2, OP_RENAME, SHAPE_TWO_AT},
#endif
    {SYS_unlinkat, OP_UNLINK, SHAPE_UNLINKAT},
    {SYS_mkdirat, OP_MKDIR, SHAPE_AT},
    {SYS_linkat, OP_LINK, SHAPE_TWO_AT},
    {SYS_symlinkat, OP_SYMLINK, SHAPE_SYMLINKAT},
#ifdef SYS_open
    {SYS_open, OP_CREATE, SHAPE_OPEN},
#endif
#ifdef SYS_creat
    {SYS_creat, OP_CREATE, SHAPE_CREAT},
#endif
#ifdef SYS_rename
    {SYS_rename, OP_RENAME, SHAPE_TWO_PATHS},
#endif
#ifdef SYS_unlink
    {SYS_unlink, OP_UNLINK, SHAPE_PATH},
#endif
#ifdef SYS_rmdir
    {SYS_rmdir, OP_RMDIR, SHAPE_PATH},
#endif
#ifdef SYS_mkdir
    {SYS_mkdir, OP_MKDIR, SHAPE_PATH},
#endif
#ifdef SYS_link
    {SYS_link, OP_LINK, SHAPE_TWO_PATHS},
#endif
#ifdef SYS_symlink
    {SYS_symlink, OP_SYMLINK, SHAPE_SYMLINK},
#endif
};

#define TRACED_COUNT (sizeof traced_calls / sizeof traced_calls[0])

static const struct traced_call *traced_call_for(long nr)
{
    for (size_t i = 0; i < TRACED_COUNT; i++) {
        if (traced_calls[i].nr == nr)
            return &traced_calls[i];
    }
    return NULL;
}

/* The filter: another architecture's calls run untouched (their numbers mean
 * other things); each traced number returns SECCOMP_RET_TRACE; all else runs. */
#define FILTER_MAX (TRACED_COUNT + 6)

static size_t build_filter(struct sock_filter *filter)
{
    size_t n = 0;
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                               offsetof(struct seccomp_data, arch));
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TP_AUDIT_ARCH, 1, 0);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                               offsetof(struct seccomp_data, nr));
    for (size_t i = 0; i < TRACED_COUNT; i++) {
        /* Jump over the remaining comparisons and the ALLOW to the TRACE return. */
        unsigned char skip = (unsigned char)(TRACED_COUNT - i);
        filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                                   (uint32_t)traced_calls[i].nr, skip, 0);
    }
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Events.                                                                  */

struct event {
    long seq; /* index among the mutations; -1 for a read (OP_OPEN) */
    long long t_ns;
    pid_t pid;
    enum op op;
    char *path;  /* relative to the root; "" is the root itself */
    char *path2; /* a rename's or link's destination, else NULL */
    long long offset;
    long long length;
    int killed;
    int copied;
};

struct event_list {
    struct event *items;
    size_t count, capacity;
    int out_of_memory;
};

static void event_list_free(struct event_list *list)
{
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].path);
        free(list->items[i].path2);
    }
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}

static struct event *event_push(struct event_list *list)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 256;
        struct event *items = realloc(list->items, capacity * sizeof *items);
        if (items == NULL) {
            list->out_of_memory = 1;
            return NULL;
        }
        list->items = items;
        list->capacity = capacity;
    }
    struct event *event = &list->items[list->count++];
    memset(event, 0, sizeof *event);
    return event;
}

/* ------------------------------------------------------------------------ */
/* The tracees.                                                             */

struct tracee {
    pid_t tid;
    int awaiting_first_stop; /* auto-attached: its first SIGSTOP is the attach, not a signal */
};

struct trace_state {
    pthread_mutex_t lock; /* guards tracees, read by the watchdog */
    struct tracee *tracees;
    size_t count, capacity;
    pid_t top;
    int timed_out;
    int finished;
    pthread_cond_t wake;
    double timeout;
};

static struct tracee *tracee_find(struct trace_state *state, pid_t tid)
{
    for (size_t i = 0; i < state->count; i++) {
        if (state->tracees[i].tid == tid)
            return &state->tracees[i];
    }
    return NULL;
}

static struct tracee *tracee_add(struct trace_state *state, pid_t tid, int awaiting)
{
    struct tracee *found = tracee_find(state, tid);
    if (found != NULL)
        return found;
    if (state->count == state->capacity) {
        size_t capacity = state->capacity ? state->capacity * 2 : 64;
        struct tracee *items = realloc(state->tracees, capacity * sizeof *items);
        if (items == NULL)
            return NULL;
        state->tracees = items;
        state->capacity = capacity;
    }
    struct tracee *added = &state->tracees[state->count++];
    added->tid = tid;
    added->awaiting_first_stop = awaiting;
    return added;
}

static void tracee_remove(struct trace_state *state, pid_t tid)
{
    for (size_t i = 0; i < state->count; i++) {
        if (state->tracees[i].tid == tid) {
            state->tracees[i] = state->tracees[--state->count];
            return;
        }
    }
}

/* SIGKILL to every tracee and to the job's process group. kill() of a thread
 * ID kills its whole thread group. ESRCH (already gone) is expected. */
static void kill_all(struct trace_state *state)
{
    for (size_t i = 0; i < state->count; i++)
        (void)kill(state->tracees[i].tid, SIGKILL);
    (void)kill(-state->top, SIGKILL);
}

static long long monotonic_ns(void)
{
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) < 0)
        return 0;
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void *watchdog(void *argument)
{
    struct trace_state *state = argument;
    struct timespec deadline;
    if (clock_gettime(CLOCK_REALTIME, &deadline) < 0)
        return NULL;
    double whole = (double)(long long)state->timeout;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((state->timeout - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_lock(&state->lock) != 0)
        return NULL;
    while (!state->finished) {
        int waited = pthread_cond_timedwait(&state->wake, &state->lock, &deadline);
        if (waited == ETIMEDOUT) {
            if (!state->finished) {
                state->timed_out = 1;
                kill_all(state);
            }
            break;
        }
    }
    (void)pthread_mutex_unlock(&state->lock);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Reading the tracee.                                                      */

struct call_args {
    long nr;
    unsigned long long arg[6];
};

static int read_call(pid_t tid, struct call_args *call)
{
#if defined(__x86_64__)
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, tid, NULL, &regs) < 0)
        return -1;
    call->nr = (long)regs.orig_rax;
    call->arg[0] = regs.rdi;
    call->arg[1] = regs.rsi;
    call->arg[2] = regs.rdx;
    call->arg[3] = regs.r10;
    call->arg[4] = regs.r8;
    call->arg[5] = regs.r9;
#else
    struct user_pt_regs regs;
    struct iovec vector = {&regs, sizeof regs};
    if (ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_PRSTATUS, &vector) < 0)
        return -1;
    call->nr = (long)regs.regs[8];
    for (int i = 0; i < 6; i++)
        call->arg[i] = regs.regs[i];
#endif
    return 0;
}

/* A NUL-terminated string from the tracee, read page by page (a read that
 * crosses into an unmapped page fails as a whole). */
static int read_string(pid_t tid, unsigned long long address, char *out, size_t size)
{
    size_t done = 0;
    const size_t page = 4096;
    while (done < size - 1) {
        unsigned long long at = address + done;
        size_t chunk = page - (size_t)(at % page);
        if (chunk > size - 1 - done)
            chunk = size - 1 - done;
        struct iovec local = {out + done, chunk};
        struct iovec remote = {(void *)(uintptr_t)at, chunk};
        ssize_t got = process_vm_readv(tid, &local, 1, &remote, 1, 0);
        if (got <= 0)
            return -1;
        void *nul = memchr(out + done, '\0', (size_t)got);
        if (nul != NULL)
            return 0;
        done += (size_t)got;
    }
    out[size - 1] = '\0';
    return -1; /* longer than PATH_MAX: not a path we can name */
}

static int read_link(const char *link, char *out, size_t size)
{
    ssize_t length = readlink(link, out, size - 1);
    if (length < 0 || (size_t)length >= size - 1)
        return -1;
    out[length] = '\0';
    return 0;
}

static int fd_path(pid_t tid, long long fd, char *out, size_t size)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/fd/%lld", (int)tid, fd);
    return read_link(link, out, size);
}

/* Lexical normalisation: collapse "//", "/./" and "/x/../" (symlinks are
 * already resolved in what the kernel reports for descriptors and the cwd). */
static void normalize(char *path)
{
    char *out = path;
    const char *in = path;
    while (*in != '\0') {
        while (*in == '/')
            in++;
        const char *end = in;
        while (*end != '\0' && *end != '/')
            end++;
        size_t length = (size_t)(end - in);
        if (length == 0)
            break;
        if (length == 1 && in[0] == '.') {
            /* nothing */
        } else if (length == 2 && in[0] == '.' && in[1] == '.') {
            while (out > path && *(out - 1) != '/')
                out--;
            if (out > path)
                out--;
        } else {
            *out++ = '/';
            memmove(out, in, length);
            out += length;
        }
        in = end;
    }
    if (out == path)
        *out++ = '/';
    *out = '\0';
}

/* The absolute path of (dirfd, name) as the tracee sees it. */
static int at_path(pid_t tid, long long dirfd, const char *name, char *out, size_t size)
{
    if (name[0] == '/') {
        if (strlen(name) >= size)
            return -1;
        strcpy(out, name);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            char link[64];
            snprintf(link, sizeof link, "/proc/%d/cwd", (int)tid);
            if (read_link(link, base, sizeof base) < 0)
                return -1;
        } else if (fd_path(tid, dirfd, base, sizeof base) < 0) {
            return -1;
        }
        if ((size_t)snprintf(out, size, "%s/%s", base, name) >= size)
            return -1;
    }
    normalize(out);
    return 0;
}

static int tracee_path(pid_t tid, long long dirfd, unsigned long long address, char *out,
                       size_t size)
{
    char name[PATH_MAX];
    if (read_string(tid, address, name, sizeof name) < 0)
        return -1;
    return at_path(tid, dirfd, name, out, size);
}

/* The part of `path` below `root` ("" for the root itself), or NULL. */
static const char *below_root(const char *path, const char *root, size_t root_length)
{
    if (strncmp(path, root, root_length) != 0)
        return NULL;
    if (path[root_length] == '\0')
        return path + root_length;
    if (path[root_length] == '/')
        return path + root_length + 1;
    return NULL;
}

/* One field ("pos", "flags") of a descriptor's /proc/TID/fdinfo, in `base`; -1 if unknown. */
static long long fdinfo_field(pid_t tid, long long fd, const char *field, int base)
{
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/fdinfo/%lld", (int)tid, fd);
    int descriptor = open(name, O_RDONLY | O_CLOEXEC);
    if (descriptor < 0)
        return -1;
    char text[256];
    ssize_t got = read(descriptor, text, sizeof text - 1);
    (void)close(descriptor); /* a read-only procfs file: nothing to flush */
    if (got <= 0)
        return -1;
    text[got] = '\0';
    size_t length = strlen(field);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, field, length) == 0 && line[length] == ':') {
            char *end = NULL;
            long long value = strtoll(line + length + 1, &end, base);
            return end == line + length + 1 ? -1 : value;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

static long long fd_position(pid_t tid, long long fd)
{
    return fdinfo_field(tid, fd, "pos", 10);
}

/* Whether a descriptor was opened for writing (a close of a read-only one changes nothing). */
static int fd_writable(pid_t tid, long long fd)
{
    long long flags = fdinfo_field(tid, fd, "flags", 8);
    return flags < 0 || (flags & O_ACCMODE) != O_RDONLY;
}

static long long iovec_bytes(pid_t tid, unsigned long long address, unsigned long long count)
{
    if (count > 1024)
        count = 1024;
    struct iovec vectors[1024];
    size_t bytes = (size_t)count * sizeof vectors[0];
    struct iovec local = {vectors, bytes};
    struct iovec remote = {(void *)(uintptr_t)address, bytes};
    if (count == 0)
        return 0;
    if (process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)bytes)
        return -1;
    long long total = 0;
    for (unsigned long long i = 0; i < count; i++)
        total += (long long)vectors[i].iov_len;
    return total;
}

/* Copies the bytes of `source` to `target` (what a fsync is about to make durable). */
static int copy_file(const char *source, const char *target)
{
    int in = open(source, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        (void)close(in);
        return -1;
    }
    char buffer[65536];
    int failed = 0;
    for (;;) {
        ssize_t got = read(in, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            failed = 1;
            break;
        }
        if (got == 0)
            break;
        ssize_t written = 0;
        while (written < got) {
            ssize_t put = write(out, buffer + written, (size_t)(got - written));
            if (put < 0 && errno == EINTR)
                continue;
            if (put < 0) {
                failed = 1;
                break;
            }
            written += put;
        }
        if (failed)
            break;
    }
    (void)close(in);
    if (close(out) < 0)
        failed = 1;
    return failed ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* One seccomp stop.                                                        */

struct trace_plan {
    const char *root;
    size_t root_length;
    const char *copy_dir; /* NULL: no copies at fsync */
    long kill_at;         /* the mutation to stop at (the job dies before it); -1: none */
    int observe_opens;
    long mutations;
    int killed;
    int failed_errno; /* a tracer-side failure that makes the trace incomplete */
};

static char *duplicate(const char *text)
{
    size_t length = strlen(text) + 1;
    char *copy = malloc(length);
    if (copy != NULL)
        memcpy(copy, text, length);
    return copy;
}

static void handle_stop(pid_t tid, struct trace_plan *plan, struct event_list *events)
{
    struct call_args call;
    if (read_call(tid, &call) < 0)
        return; /* gone (killed) between the stop and now */
    const struct traced_call *traced = traced_call_for(call.nr);
    if (traced == NULL)
        return;
    char path[PATH_MAX], path2[PATH_MAX];
    int has_path2 = 0;
    enum op op = traced->op;
    long long fd = -1, offset = -1, length = -1;
    int flags = 0;
    switch (traced->shape) {
    case SHAPE_FD:
    case SHAPE_FD_ARG2:
        fd = (long long)(int)call.arg[traced->shape == SHAPE_FD ? 0 : 2];
        if (fd_path(tid, fd, path, sizeof path) < 0 || path[0] != '/')
            return; /* a pipe, socket or closed descriptor */
        if (op == OP_CLOSE && below_root(path, plan->root, plan->root_length) != NULL &&
            !fd_writable(tid, fd))
            return;
        break;
    case SHAPE_PATH:
        if (tracee_path(tid, AT_FDCWD, call.arg[0], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_AT:
        if (tracee_path(tid, (long long)(int)call.arg[0], call.arg[1], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_OPEN:
        flags = (int)call.arg[1];
        if (tracee_path(tid, AT_FDCWD, call.arg[0], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_CREAT:
        flags = O_CREAT | O_WRONLY | O_TRUNC;
        if (tracee_path(tid, AT_FDCWD, call.arg[0], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_OPENAT:
        flags = (int)call.arg[2];
        if (tracee_path(tid, (long long)(int)call.arg[0], call.arg[1], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_UNLINKAT:
        if (tracee_path(tid, (long long)(int)call.arg[0], call.arg[1], path, sizeof path) < 0)
            return;
        if ((int)call.arg[2] & AT_REMOVEDIR)
            op = OP_RMDIR;
        break;
    case SHAPE_TWO_PATHS:
        if (tracee_path(tid, AT_FDCWD, call.arg[0], path, sizeof path) < 0 ||
            tracee_path(tid, AT_FDCWD, call.arg[1], path2, sizeof path2) < 0)
            return;
        has_path2 = 1;
        break;
    case SHAPE_TWO_AT:
        if (tracee_path(tid, (long long)(int)call.arg[0], call.arg[1], path, sizeof path) < 0 ||
            tracee_path(tid, (long long)(int)call.arg[2], call.arg[3], path2, sizeof path2) < 0)
            return;
        has_path2 = 1;
        break;
    case SHAPE_SYMLINK:
        if (tracee_path(tid, AT_FDCWD, call.arg[1], path, sizeof path) < 0)
            return;
        break;
    case SHAPE_SYMLINKAT:
        if (tracee_path(tid, (long long)(int)call.arg[1], call.arg[2], path, sizeof path) < 0)
            return;
        break;
    }
    const char *relative = below_root(path, plan->root, plan->root_length);
    const char *relative2 = has_path2 ? below_root(path2, plan->root, plan->root_length) : NULL;
    if (relative == NULL && relative2 == NULL)
        return;
    if (op == OP_CREATE) {
        struct stat info;
        int exists = stat(path, &info) == 0;
        if (!((flags & O_TRUNC) && exists && S_ISREG(info.st_mode) && info.st_size > 0) &&
            !((flags & O_CREAT) && !exists)) {
            /* No mutation: a read, or an open for writing of what is there. */
            if (!plan->observe_opens || relative == NULL || !exists || !S_ISREG(info.st_mode) ||
                (flags & O_ACCMODE) != O_RDONLY)
                return;
            op = OP_OPEN;
        }
    }
    switch (op) {
    case OP_WRITE:
    case OP_WRITEV:
        offset = fd_position(tid, fd);
        length = op == OP_WRITE ? (long long)call.arg[2]
                                : iovec_bytes(tid, call.arg[1], call.arg[2]);
        break;
    case OP_PWRITE:
        offset = (long long)call.arg[3];
        length = (long long)call.arg[2];
        break;
    case OP_FTRUNCATE:
        length = (long long)call.arg[1];
        break;
    case OP_FALLOCATE:
        offset = (long long)call.arg[2];
        length = (long long)call.arg[3];
        break;
    default:
        break;
    }
    struct event *event = event_push(events);
    if (event == NULL)
        return;
    event->seq = op == OP_OPEN ? -1 : plan->mutations++;
    event->t_ns = monotonic_ns();
    event->pid = tid;
    event->op = op;
    event->path = duplicate(relative != NULL ? relative : path);
    event->path2 = has_path2 ? duplicate(relative2 != NULL ? relative2 : path2) : NULL;
    if (event->path == NULL || (has_path2 && event->path2 == NULL))
        events->out_of_memory = 1;
    event->offset = offset;
    event->length = length;
    if (op != OP_OPEN && plan->kill_at >= 0 && event->seq == plan->kill_at) {
        event->killed = 1;
        plan->killed = 1;
        (void)kill(tid, SIGKILL); /* before the call runs: the crash point */
        return;
    }
    if ((op == OP_FSYNC || op == OP_FDATASYNC) && plan->copy_dir != NULL && relative != NULL) {
        struct stat info;
        if (stat(path, &info) == 0 && S_ISREG(info.st_mode)) {
            char target[PATH_MAX];
            if ((size_t)snprintf(target, sizeof target, "%s/%ld", plan->copy_dir, event->seq) >=
                    sizeof target ||
                copy_file(path, target) < 0)
                plan->failed_errno = errno ? errno : EIO;
            else
                event->copied = 1;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The child, between fork and exec: async-signal-safe calls only.          */

struct child_plan {
    char *const *argv;
    char *const *envp;
    const char *cwd;
    const char *stdout_path;
    const char *stderr_path;
    struct sock_fprog filter;
    sigset_t empty_mask;
};

__attribute__((noreturn)) static void child_die(const char *what)
{
    /* stderr is the job's log by now (or still ours): say which step failed. */
    static const char prefix[] = "trainparity tracer: the traced child failed at ";
    ssize_t ignored = write(2, prefix, sizeof prefix - 1);
    ignored = write(2, what, strlen(what));
    ignored = write(2, "\n", 1);
    (void)ignored;
    _exit(127);
}

static void child_redirect_to(const char *path, int flags, int target)
{
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0)
        child_die("opening a standard stream");
    if (dup2(fd, target) < 0)
        child_die("dup2 of a standard stream");
    (void)close(fd);
}

__attribute__((noreturn)) static void child_run(const struct child_plan *plan)
{
    if (setpgid(0, 0) < 0)
        child_die("setpgid");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        child_die("prctl(PR_SET_PDEATHSIG)");
    struct sigaction default_action;
    memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    /* Python ignores these; an ignored disposition would survive execve. */
    if (sigaction(SIGPIPE, &default_action, NULL) < 0 ||
        sigaction(SIGXFSZ, &default_action, NULL) < 0 ||
        sigaction(SIGINT, &default_action, NULL) < 0)
        child_die("resetting signal dispositions");
    child_redirect_to("/dev/null", O_RDONLY, 0);
    child_redirect_to(plan->stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 1);
    child_redirect_to(plan->stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 2);
    if (chdir(plan->cwd) < 0)
        child_die("chdir");
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0 && errno != ENOSYS)
        child_die("close_range");
#endif
    if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
        child_die("ptrace(PTRACE_TRACEME)");
    if (sigprocmask(SIG_SETMASK, &plan->empty_mask, NULL) < 0)
        child_die("sigprocmask");
    /* The tracer sets its options while we are stopped here. */
    if (raise(SIGSTOP) != 0)
        child_die("raise(SIGSTOP)");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_die("prctl(PR_SET_NO_NEW_PRIVS)");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &plan->filter, 0, 0) < 0)
        child_die("installing the seccomp filter");
    execve(plan->argv[0], plan->argv, plan->envp);
    child_die("execve of the program");
}

/* ------------------------------------------------------------------------ */
/* The tracing loop (no GIL).                                               */

struct loop_result {
    int status;
    int top_done;
    int setup_errno;
    const char *setup_step;
};

#define TRACE_OPTIONS                                                                      \
    (PTRACE_O_EXITKILL | PTRACE_O_TRACESECCOMP | PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK |   \
     PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC)

static void trace_events(struct trace_state *state, struct trace_plan *plan,
                         struct event_list *events, struct loop_result *result);

/* The job's first process among the tracees; -1 (and the job killed) when out of memory. */
static int register_top(struct trace_state *state, struct loop_result *result)
{
    int locked = pthread_mutex_lock(&state->lock) == 0;
    struct tracee *added = locked ? tracee_add(state, state->top, 0) : NULL;
    if (locked)
        (void)pthread_mutex_unlock(&state->lock);
    if (added == NULL) {
        result->setup_errno = locked ? ENOMEM : EDEADLK;
        result->setup_step = "registering the child";
        (void)kill(state->top, SIGKILL);
        return -1;
    }
    return 0;
}

/* The job our own fork made: stopped at its raise(SIGSTOP) before the filter and exec. */
static void trace_loop(struct trace_state *state, struct trace_plan *plan,
                       struct event_list *events, struct loop_result *result)
{
    pid_t top = state->top;
    int status;
    pid_t waited;
    do {
        waited = waitpid(top, &status, __WALL | __WNOTHREAD);
    } while (waited < 0 && errno == EINTR);
    if (waited < 0 || !WIFSTOPPED(status)) {
        result->setup_errno = waited < 0 ? errno : ECHILD;
        result->setup_step = "waiting for the child's first stop";
        if (waited >= 0) {
            result->status = status;
            result->top_done = 1;
        }
        return;
    }
    if (ptrace(PTRACE_SETOPTIONS, top, NULL, (void *)(long)TRACE_OPTIONS) < 0) {
        result->setup_errno = errno;
        result->setup_step = "ptrace(PTRACE_SETOPTIONS)";
        (void)kill(top, SIGKILL);
        return;
    }
    if (register_top(state, result) == 0) {
        (void)ptrace(PTRACE_CONT, top, NULL, NULL);
        trace_events(state, plan, events, result);
    }
}

/* A job made elsewhere (a warm server's fork), our own child, waiting to be traced: seized
 * running, it sees the tracer in /proc/self/status and installs the filter itself. */
static void trace_seized(struct trace_state *state, struct trace_plan *plan,
                         struct event_list *events, struct loop_result *result)
{
    pid_t top = state->top;
    if (ptrace(PTRACE_SEIZE, top, NULL, (void *)(long)TRACE_OPTIONS) < 0) {
        result->setup_errno = errno;
        result->setup_step = "ptrace(PTRACE_SEIZE)";
        return; /* not ours to kill: the caller kills and reaps its child */
    }
    if (register_top(state, result) == 0)
        trace_events(state, plan, events, result);
}

/* Every stop and exit of the job's threads and processes until the job is gone. */
static void trace_events(struct trace_state *state, struct trace_plan *plan,
                         struct event_list *events, struct loop_result *result)
{
    pid_t top = state->top;
    int status;
    for (;;) {
        if (result->top_done && pthread_mutex_lock(&state->lock) == 0) {
            size_t left = state->count;
            (void)pthread_mutex_unlock(&state->lock);
            if (left == 0)
                break; /* the job and all it left behind are gone */
        }
        pid_t tid = waitpid(-1, &status, __WALL | __WNOTHREAD);
        if (tid < 0) {
            if (errno == EINTR)
                continue;
            break; /* ECHILD: no child and no tracee left */
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            if (pthread_mutex_lock(&state->lock) == 0) {
                tracee_remove(state, tid);
                if (tid == top) {
                    result->status = status;
                    result->top_done = 1;
                    kill_all(state); /* what it left behind dies with it */
                }
                (void)pthread_mutex_unlock(&state->lock);
            }
            continue;
        }
        if (!WIFSTOPPED(status))
            continue;
        int sig = WSTOPSIG(status);
        unsigned event = (unsigned)status >> 16;
        if (event == PTRACE_EVENT_STOP) {
            /* Seized tracees only: one auto-attached (its first stop), or a group-stop. */
            if (pthread_mutex_lock(&state->lock) == 0) {
                struct tracee *known = tracee_find(state, tid);
                if (known == NULL)
                    known = tracee_add(state, tid, 0);
                if (known == NULL)
                    plan->failed_errno = ENOMEM;
                else
                    known->awaiting_first_stop = 0;
                (void)pthread_mutex_unlock(&state->lock);
            }
            (void)ptrace(PTRACE_CONT, tid, NULL, NULL);
            continue;
        }
        if (sig == SIGTRAP && event == PTRACE_EVENT_SECCOMP) {
            handle_stop(tid, plan, events);
            (void)ptrace(PTRACE_CONT, tid, NULL, NULL);
            continue;
        }
        if (sig == SIGTRAP && event != 0) {
            if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK ||
                event == PTRACE_EVENT_VFORK) {
                unsigned long child = 0;
                if (ptrace(PTRACE_GETEVENTMSG, tid, NULL, &child) == 0 &&
                    pthread_mutex_lock(&state->lock) == 0) {
                    if (tracee_add(state, (pid_t)child, 1) == NULL)
                        plan->failed_errno = ENOMEM;
                    if (state->timed_out || result->top_done)
                        (void)kill((pid_t)child, SIGKILL);
                    (void)pthread_mutex_unlock(&state->lock);
                }
            }
            (void)ptrace(PTRACE_CONT, tid, NULL, NULL);
            continue;
        }
        int inject = sig;
        if (pthread_mutex_lock(&state->lock) == 0) {
            struct tracee *known = tracee_find(state, tid);
            if (known == NULL) {
                /* Its first stop came before its parent's clone event. */
                known = tracee_add(state, tid, 0);
                if (sig == SIGSTOP)
                    inject = 0;
            } else if (known->awaiting_first_stop && sig == SIGSTOP) {
                known->awaiting_first_stop = 0;
                inject = 0;
            }
            (void)pthread_mutex_unlock(&state->lock);
        }
        (void)ptrace(PTRACE_CONT, tid, NULL, (void *)(long)inject);
    }
}

/* ------------------------------------------------------------------------ */
/* Python face.                                                             */

static char **byte_strings(PyObject *list, const char *name)
{
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "trace_job(): %s must be a list of bytes", name);
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(list);
    char **strings = PyMem_Calloc((size_t)count + 1, sizeof *strings);
    if (strings == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(item) || strlen(PyBytes_AS_STRING(item)) != (size_t)PyBytes_GET_SIZE(item)) {
            PyMem_Free(strings);
            PyErr_Format(PyExc_TypeError, "trace_job(): %s items must be bytes without NUL", name);
            return NULL;
        }
        strings[i] = PyBytes_AS_STRING(item);
    }
    return strings;
}

static PyObject *event_tuple(const struct event *event)
{
    PyObject *path2 = Py_None;
    Py_INCREF(Py_None);
    if (event->path2 != NULL) {
        Py_DECREF(Py_None);
        path2 = PyUnicode_DecodeFSDefault(event->path2);
        if (path2 == NULL)
            return NULL;
    }
    PyObject *path = PyUnicode_DecodeFSDefault(event->path != NULL ? event->path : "");
    if (path == NULL) {
        Py_DECREF(path2);
        return NULL;
    }
    PyObject *tuple = Py_BuildValue("(lLisNNLLOO)", event->seq, event->t_ns, (int)event->pid,
                                    op_names[event->op], path, path2, event->offset,
                                    event->length, event->killed ? Py_True : Py_False,
                                    event->copied ? Py_True : Py_False);
    return tuple;
}

/* What trace_job and trace_pid share: the plan's options, and the run's answer. */
struct trace_request {
    const char *root;
    long kill_at;
    PyObject *copy_dir;
    int observe_opens;
    double timeout;
};

static int trace_plan_from(const char *caller, const struct trace_request *request,
                           struct trace_plan *plan)
{
    if (!(request->timeout > 0)) {
        PyErr_Format(PyExc_ValueError, "%s(): timeout must be positive", caller);
        return -1;
    }
    const char *copy_dir = NULL;
    if (request->copy_dir != Py_None) {
        if (!PyBytes_Check(request->copy_dir)) {
            PyErr_Format(PyExc_TypeError, "%s(): copy_dir must be bytes or None", caller);
            return -1;
        }
        copy_dir = PyBytes_AS_STRING(request->copy_dir);
    }
    memset(plan, 0, sizeof *plan);
    plan->root = request->root;
    plan->root_length = strlen(request->root);
    plan->copy_dir = copy_dir;
    plan->kill_at = request->kill_at;
    plan->observe_opens = request->observe_opens;
    while (plan->root_length > 1 && request->root[plan->root_length - 1] == '/')
        plan->root_length--;
    return 0;
}

/* The dict both return, or NULL with an exception set. Frees nothing. */
static PyObject *trace_answer(const char *caller, struct trace_state *state,
                              struct trace_plan *plan, struct event_list *events,
                              struct loop_result *result, double wall)
{
    if (result->setup_step != NULL && !result->top_done) {
        PyErr_Format(PyExc_OSError, "%s(): %s failed: %s (ptrace may be forbidden here)", caller,
                     result->setup_step, strerror(result->setup_errno));
        return NULL;
    }
    if (events->out_of_memory) {
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *list = PyList_New((Py_ssize_t)events->count);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < events->count; i++) {
        PyObject *item = event_tuple(&events->items[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    PyObject *returncode = Py_None, *signal_number = Py_None;
    if (result->top_done && WIFEXITED(result->status))
        returncode = PyLong_FromLong(WEXITSTATUS(result->status));
    else if (result->top_done && WIFSIGNALED(result->status))
        signal_number = PyLong_FromLong(WTERMSIG(result->status));
    if (returncode == NULL || signal_number == NULL) {
        Py_XDECREF(returncode == Py_None ? NULL : returncode);
        Py_XDECREF(signal_number == Py_None ? NULL : signal_number);
        Py_DECREF(list);
        return NULL;
    }
    if (returncode == Py_None)
        Py_INCREF(Py_None);
    if (signal_number == Py_None)
        Py_INCREF(Py_None);
    return Py_BuildValue("{s:N,s:N,s:O,s:O,s:d,s:N,s:i}", "returncode", returncode, "signal",
                         signal_number, "timed_out", state->timed_out ? Py_True : Py_False,
                         "killed", plan->killed ? Py_True : Py_False, "wall_seconds", wall,
                         "events", list, "copy_errno", plan->failed_errno);
}

/* The watchdog around `loop` (already started: state->top is the job), then the reaping of
 * anything left. Runs without the GIL. Returns 0, or 3 when the watchdog cannot start. */
static int trace_watched(struct trace_state *state, struct trace_plan *plan,
                         struct event_list *events, struct loop_result *result,
                         void (*loop)(struct trace_state *, struct trace_plan *,
                                      struct event_list *, struct loop_result *))
{
    pthread_t watchdog_thread;
    if (pthread_create(&watchdog_thread, NULL, watchdog, state) != 0) {
        (void)kill(state->top, SIGKILL);
        return 3;
    }
    loop(state, plan, events, result);
    if (pthread_mutex_lock(&state->lock) == 0) {
        state->finished = 1;
        (void)pthread_cond_signal(&state->wake);
        (void)pthread_mutex_unlock(&state->lock);
    }
    (void)pthread_join(watchdog_thread, NULL);
    /* Anything still not reaped (a tracer-side failure): reap it. */
    while (waitpid(-1, NULL, __WALL | __WNOTHREAD | WNOHANG) > 0) {
    }
    return 0;
}

/* One run of the tracer, in a thread of its own: ptrace requests must come from one thread,
 * and that thread's waits must see the job's processes only. A thread of the caller's may
 * have children of its own (a warm server it started), which a wait for any child would
 * reap or wait on forever; a new thread has none but the job. */
struct tracer_run {
    struct trace_state *state;
    struct trace_plan *plan;
    struct event_list *events;
    struct loop_result *result;
    const struct child_plan *child; /* fork and exec this; NULL: seize state->top */
    int error;                      /* 2: fork failed (fork_errno), 3: no watchdog */
    int fork_errno;
};

static void *tracer_thread(void *argument)
{
    struct tracer_run *run = argument;
    if (run->child == NULL) {
        run->error = trace_watched(run->state, run->plan, run->events, run->result, trace_seized);
        return NULL;
    }
    sigset_t all, saved;
    int masked = sigfillset(&all) == 0 ? pthread_sigmask(SIG_SETMASK, &all, &saved) : -1;
    pid_t pid = fork();
    if (pid == 0)
        child_run(run->child);
    run->fork_errno = errno;
    if (masked == 0)
        (void)pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (pid < 0) {
        run->error = 2;
        return NULL;
    }
    (void)setpgid(pid, pid); /* EACCES/ESRCH: the child has done it itself */
    run->state->top = pid;
    run->error = trace_watched(run->state, run->plan, run->events, run->result, trace_loop);
    return NULL;
}

/* The run in its own thread, joined. Without the GIL. 0, or 1: no lock, 4: no thread,
 * else the thread's error. */
static int run_tracer(struct tracer_run *run)
{
    struct trace_state *state = run->state;
    if (pthread_mutex_init(&state->lock, NULL) != 0)
        return 1;
    if (pthread_cond_init(&state->wake, NULL) != 0) {
        (void)pthread_mutex_destroy(&state->lock);
        return 1;
    }
    pthread_t thread;
    int error = 4;
    if (pthread_create(&thread, NULL, tracer_thread, run) == 0) {
        (void)pthread_join(thread, NULL);
        error = run->error;
    }
    (void)pthread_cond_destroy(&state->wake);
    (void)pthread_mutex_destroy(&state->lock);
    return error;
}

static PyObject *tracer_error(const char *caller, int error, int fork_errno)
{
    if (error == 2) {
        errno = fork_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    const char *what = error == 1   ? "cannot create the tracer's lock"
                       : error == 3 ? "cannot start the watchdog thread"
                                    : "cannot start the tracer thread";
    PyErr_Format(PyExc_OSError, "%s(): %s", caller, what);
    return NULL;
}

/* One traced run and its answer: `child` forked and exec'd, or (NULL) process `top` seized. */
static PyObject *traced(const char *caller, struct trace_plan *plan,
                        const struct child_plan *child, pid_t top, double timeout)
{
    struct event_list events = {0};
    struct trace_state state = {.timeout = timeout, .top = top};
    struct loop_result result = {0};
    struct tracer_run run = {&state, plan, &events, &result, child, 0, 0};
    int error;
    double started = (double)monotonic_ns() / 1e9;

    Py_BEGIN_ALLOW_THREADS
    error = run_tracer(&run);
    Py_END_ALLOW_THREADS

    double wall = (double)monotonic_ns() / 1e9 - started;
    free(state.tracees);
    PyObject *answer = NULL;
    if (error != 0)
        tracer_error(caller, error, run.fork_errno);
    else
        answer = trace_answer(caller, &state, plan, &events, &result, wall);
    event_list_free(&events);
    return answer;
}

static PyObject *trace_job(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"argv",      "env",     "cwd",          "stdout_path",
                               "stderr_path", "root",  "kill_at",      "copy_dir",
                               "observe_opens", "timeout", NULL};
    PyObject *argv_list, *env_list;
    const char *cwd, *stdout_path, *stderr_path;
    struct trace_request request = {.kill_at = -1, .copy_dir = Py_None, .timeout = 300.0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!yyyy|$lOpd:trace_job", keywords,
                                     &PyList_Type, &argv_list, &PyList_Type, &env_list, &cwd,
                                     &stdout_path, &stderr_path, &request.root, &request.kill_at,
                                     &request.copy_dir, &request.observe_opens, &request.timeout))
        return NULL;
    if (PyList_GET_SIZE(argv_list) == 0) {
        PyErr_SetString(PyExc_ValueError, "trace_job(): argv must not be empty");
        return NULL;
    }
    struct trace_plan plan;
    if (trace_plan_from("trace_job", &request, &plan) < 0)
        return NULL;
    char **argv = byte_strings(argv_list, "argv");
    if (argv == NULL)
        return NULL;
    char **envp = byte_strings(env_list, "env");
    if (envp == NULL) {
        PyMem_Free(argv);
        return NULL;
    }
    struct sock_filter filter[FILTER_MAX];
    struct child_plan child = {
        .argv = argv,
        .envp = envp,
        .cwd = cwd,
        .stdout_path = stdout_path,
        .stderr_path = stderr_path,
    };
    child.filter.len = (unsigned short)build_filter(filter);
    child.filter.filter = filter;
    if (sigemptyset(&child.empty_mask) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        PyMem_Free(argv);
        PyMem_Free(envp);
        return NULL;
    }
    PyObject *answer = traced("trace_job", &plan, &child, 0, request.timeout);
    PyMem_Free(argv);
    PyMem_Free(envp);
    return answer;
}

static PyObject *trace_pid(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"pid",      "root",          "kill_at", "copy_dir",
                               "observe_opens", "timeout", NULL};
    int pid;
    struct trace_request request = {.kill_at = -1, .copy_dir = Py_None, .timeout = 300.0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iy|$lOpd:trace_pid", keywords, &pid,
                                     &request.root, &request.kill_at, &request.copy_dir,
                                     &request.observe_opens, &request.timeout))
        return NULL;
    if (pid <= 0) {
        PyErr_SetString(PyExc_ValueError, "trace_pid(): pid must be a process ID (> 0)");
        return NULL;
    }
    struct trace_plan plan;
    if (trace_plan_from("trace_pid", &request, &plan) < 0)
        return NULL;
    return traced("trace_pid", &plan, NULL, (pid_t)pid, request.timeout);
}

static PyObject *trace_filter(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    struct sock_filter filter[FILTER_MAX];
    size_t count = build_filter(filter);
    return PyBytes_FromStringAndSize((const char *)filter, (Py_ssize_t)(count * sizeof *filter));
}

#else /* not Linux on x86-64 or AArch64 */

static PyObject *trace_job(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_NotImplementedError,
                    "trace_job(): the crash check's tracer needs Linux on x86-64 or AArch64");
    return NULL;
}

static PyObject *trace_pid(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return trace_job(self, args, kwargs);
}

static PyObject *trace_filter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return trace_job(self, NULL, NULL);
}

#endif

PyMethodDef tp_trace_methods[] = {
    {"trace_job", (PyCFunction)(void (*)(void))trace_job, METH_VARARGS | METH_KEYWORDS,
     "trace_job(argv, env, cwd, stdout_path, stderr_path, root, *, kill_at=-1, copy_dir=None, "
     "observe_opens=False, timeout=300.0) -> dict\n\n"
     "Run argv (argv[0] an absolute program path; all bytes) under ptrace with a seccomp filter;\n"
     "report every file-system mutation under root as (seq, t_ns, pid, op, path, path2, offset,\n"
     "length, killed, copied), and with kill_at >= 0 SIGKILL the calling process just before\n"
     "mutation number kill_at runs. copy_dir: copy each regular file at its fsync there, named\n"
     "by seq. observe_opens: also report read-only opens of regular files under root (seq -1)."},
    {"trace_pid", (PyCFunction)(void (*)(void))trace_pid, METH_VARARGS | METH_KEYWORDS,
     "trace_pid(pid, root, *, kill_at=-1, copy_dir=None, observe_opens=False, timeout=300.0)\n"
     "-> dict\n\n"
     "trace_job's trace of a process this process made another way: its own child (a warm\n"
     "server's fork it adopted), waiting until /proc/self/status shows a tracer and then\n"
     "installing trace_filter()'s program itself. Seized running; reaped here."},
    {"trace_filter", trace_filter, METH_NOARGS,
     "trace_filter() -> bytes\n\n"
     "The seccomp program (struct sock_filter[]) a job seized by trace_pid installs with\n"
     "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER) after PR_SET_NO_NEW_PRIVS."},
    {NULL, NULL, 0, NULL},
};

int tp_trace_init(PyObject *module)
{
    return PyModule_AddIntConstant(module, "TRACE_SUPPORTED", TP_TRACE_SUPPORTED);
}
