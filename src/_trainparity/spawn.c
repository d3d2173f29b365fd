/* spawn part of the native core: fork/exec of children in their own process
 * groups, waiting for them without the GIL, and signalling whole groups.
 *
 * Discipline between fork() and execve() (the style of CPython's
 * _posixsubprocess): everything the child needs (argv/envp arrays, candidate
 * executable paths, the descriptor limit) is prepared before fork; the child
 * calls only async-signal-safe functions, touches no Python object, allocates
 * nothing, and reports a failed step to the parent as (step, errno) through a
 * close-on-exec pipe before _exit(127). */
#include "tp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Steps of the child between fork and exec, as reported to the parent.      */

enum child_step {
    STEP_SETPGID,
    STEP_PDEATHSIG,
    STEP_SIGNALS,
    STEP_STDIN,
    STEP_STDOUT,
    STEP_STDERR,
    STEP_CHDIR,
    STEP_CLOSE_FDS,
    STEP_EXEC,
    STEP_COUNT
};

static const char *const step_names[STEP_COUNT] = {
    "setpgid", "pdeathsig", "signals", "stdin", "stdout", "stderr", "chdir", "close_fds", "exec",
};

static const char *const step_descriptions[STEP_COUNT] = {
    "setpgid into its own process group",
    "prctl(PR_SET_PDEATHSIG)",
    "resetting signal dispositions and mask",
    "opening /dev/null as stdin",
    "opening the stdout file",
    "opening the stderr file",
    "chdir to the working directory",
    "closing inherited descriptors",
    "execve of the program",
};

struct child_failure {
    int step;
    int error;
};

/* Everything the child reads; filled in before fork, never modified after. */
struct spawn_plan {
    char *const *argv;
    char *const *envp;
    char *const *candidates; /* executable paths to try in order, NULL-terminated */
    const char *cwd;
    const char *stdout_path;
    const char *stderr_path;
    pid_t parent_pid;
    int error_fd;  /* write end of the failure pipe, >= 3, close-on-exec */
    int fd_limit;  /* for closing descriptors when close_range is unavailable */
    sigset_t empty_mask;
};

/* ------------------------------------------------------------------------ */
/* The child: async-signal-safe calls only.                                 */

__attribute__((noreturn)) static void child_fail(const struct spawn_plan *plan, int step, int error)
{
    struct child_failure failure = {step, error};
    ssize_t written;
    /* A write of fewer than PIPE_BUF bytes to a pipe is atomic. If it fails,
     * nobody is left to tell: the parent then sees EOF and a child that exited
     * with status 127 before exec, which it cannot tell from a program exiting
     * 127, so this only matters when the parent is already gone. */
    do {
        written = write(plan->error_fd, &failure, sizeof failure);
    } while (written < 0 && errno == EINTR);
    _exit(127);
}

/* Opens path and moves it onto target (0, 1 or 2) without close-on-exec. */
static void child_redirect(const struct spawn_plan *plan, const char *path, int flags, int target,
                           int step)
{
    int fd;
    do {
        fd = open(path, flags | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        child_fail(plan, step, errno);
    if (fd == target) {
        /* dup2(fd, fd) would keep O_CLOEXEC; clear it explicitly. */
        if (fcntl(fd, F_SETFD, 0) < 0)
            child_fail(plan, step, errno);
        return;
    }
    int result;
    do {
        result = dup2(fd, target);
    } while (result < 0 && (errno == EINTR || errno == EBUSY));
    if (result < 0)
        child_fail(plan, step, errno);
    /* On Linux close() releases the descriptor even when it reports EINTR. */
    if (close(fd) < 0 && errno != EINTR)
        child_fail(plan, step, errno);
}


/* glibc's sigaction refuses the signals it reserves for itself (32 and 33 on
 * Linux) with EINVAL, yet an ignored disposition of one of them, inherited
 * from whoever started us, would survive execve. The raw system call resets
 * them. Async-signal-safe: a plain syscall. Elsewhere there is nothing to do. */
static int reset_reserved_signal(int sig)
{
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
    struct {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
    } kernel_action;
    memset(&kernel_action, 0, sizeof kernel_action);
    kernel_action.handler = SIG_DFL;
    if (syscall(SYS_rt_sigaction, sig, &kernel_action, NULL, sizeof kernel_action.mask) == 0)
        return 0;
    /* Still EINVAL: SIGKILL/SIGSTOP-like, nothing that can be ignored. */
    return errno == EINVAL ? 0 : -1;
#else
    (void)sig;
    return 0;
#endif
}

static void child_close_inherited(const struct spawn_plan *plan)
{
    const int keep = plan->error_fd; /* close-on-exec: goes away at execve */
#ifdef SYS_close_range
    long below = 0;
    if (keep > 3)
        below = syscall(SYS_close_range, 3U, (unsigned int)keep - 1U, 0U);
    if (below == 0) {
        if (syscall(SYS_close_range, (unsigned int)keep + 1U, ~0U, 0U) == 0)
            return;
    }
    if (errno != ENOSYS)
        child_fail(plan, STEP_CLOSE_FDS, errno);
#endif
    /* Kernel without close_range (before 5.9): close every descriptor below
     * the limit computed before fork. close() errors are EBADF (not open) or a
     * deferred write error of a file that is not ours; the descriptor is
     * released either way, so there is nothing to act on. */
    for (int fd = 3; fd < plan->fd_limit; fd++) {
        if (fd != keep)
            (void)close(fd);
    }
}

__attribute__((noreturn)) static void child_exec(const struct spawn_plan *plan)
{
    /* Own process group (pgid = pid), so the parent can signal the child and
     * everything it starts with one killpg, and a terminal's Ctrl-C (sent to
     * the foreground group) reaches only the parent, which then cleans up. */
    if (setpgid(0, 0) < 0)
        child_fail(plan, STEP_SETPGID, errno);

    /* Die with the parent. Checked against the pid captured before fork: if
     * the parent died before prctl took effect, we were already reparented. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        child_fail(plan, STEP_PDEATHSIG, errno);
    if (getppid() != plan->parent_pid)
        _exit(127);

    /* The parent blocked every signal around fork, so no handler inherited
     * from it can run here. Reset every disposition (ignored ones survive
     * execve: Python ignores SIGPIPE and SIGXFSZ), then unblock everything.
     * sigaction refuses SIGKILL, SIGSTOP and the C library's internal
     * signals with EINVAL; those need no reset. */
    struct sigaction default_action;
    memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    if (sigemptyset(&default_action.sa_mask) < 0)
        child_fail(plan, STEP_SIGNALS, errno);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        if (sigaction(sig, &default_action, NULL) == 0)
            continue;
        if (errno != EINVAL || reset_reserved_signal(sig) < 0)
            child_fail(plan, STEP_SIGNALS, errno);
    }
    if (sigprocmask(SIG_SETMASK, &plan->empty_mask, NULL) < 0)
        child_fail(plan, STEP_SIGNALS, errno);

    /* In this order, a temporary descriptor from open() can only collide with
     * a target not set up yet, which dup2 then replaces. */
    child_redirect(plan, "/dev/null", O_RDONLY, 0, STEP_STDIN);
    child_redirect(plan, plan->stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 1, STEP_STDOUT);
    child_redirect(plan, plan->stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 2, STEP_STDERR);

    if (chdir(plan->cwd) < 0)
        child_fail(plan, STEP_CHDIR, errno);

    child_close_inherited(plan);

    /* Like execvp: ENOENT/ENOTDIR move on to the next PATH entry; the first
     * other error (EACCES, ENOEXEC, ...) is the one reported. */
    int reported = 0;
    for (char *const *candidate = plan->candidates; *candidate != NULL; candidate++) {
        execve(*candidate, plan->argv, plan->envp);
        if (reported == 0 && errno != ENOENT && errno != ENOTDIR)
            reported = errno;
    }
    child_fail(plan, STEP_EXEC, reported != 0 ? reported : errno);
}

/* ------------------------------------------------------------------------ */
/* Argument conversion (parent, GIL held).                                  */

/* str or os.PathLike -> bytes in the filesystem encoding, non-empty, no NUL. */
static PyObject *encode_path(PyObject *obj, const char *name)
{
    PyObject *path = PyOS_FSPath(obj);
    if (path == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "spawn(): %s must be a str or os.PathLike path, not %.100s",
                         name, Py_TYPE(obj)->tp_name);
        }
        return NULL;
    }
    PyObject *encoded;
    if (PyUnicode_Check(path)) {
        encoded = PyUnicode_EncodeFSDefault(path);
        Py_DECREF(path);
        if (encoded == NULL)
            return NULL;
    } else {
        encoded = path; /* PyOS_FSPath returns str or bytes */
    }
    if (PyBytes_GET_SIZE(encoded) == 0) {
        Py_DECREF(encoded);
        PyErr_Format(PyExc_ValueError, "spawn(): %s must not be empty", name);
        return NULL;
    }
    if (strlen(PyBytes_AS_STRING(encoded)) != (size_t)PyBytes_GET_SIZE(encoded)) {
        Py_DECREF(encoded);
        PyErr_Format(PyExc_ValueError, "spawn(): %s contains a NUL character", name);
        return NULL;
    }
    return encoded;
}

/* A list or tuple of str -> a list of bytes; kind names the argument in errors. */
static PyObject *encode_strings(PyObject *obj, const char *kind, int env_entries)
{
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "spawn(): %s must be a list or tuple of str, not %.100s", kind,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *items = PySequence_Fast(obj, "");
    if (items == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject *encoded = PyList_New(count);
    if (encoded == NULL) {
        Py_DECREF(items);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "spawn(): %s[%zd] must be str, not %.100s", kind, i,
                         Py_TYPE(item)->tp_name);
            goto fail;
        }
        PyObject *bytes = PyUnicode_EncodeFSDefault(item);
        if (bytes == NULL)
            goto fail;
        PyList_SET_ITEM(encoded, i, bytes);
        const char *text = PyBytes_AS_STRING(bytes);
        size_t size = (size_t)PyBytes_GET_SIZE(bytes);
        if (strlen(text) != size) {
            PyErr_Format(PyExc_ValueError, "spawn(): %s[%zd] contains a NUL character", kind, i);
            goto fail;
        }
        if (env_entries) {
            const char *equals = strchr(text, '=');
            if (equals == NULL || equals == text) {
                PyErr_Format(PyExc_ValueError,
                             "spawn(): env[%zd] must look like 'KEY=VALUE' with a non-empty KEY, "
                             "got %R",
                             i, item);
                goto fail;
            }
        }
    }
    Py_DECREF(items);
    return encoded;
fail:
    Py_DECREF(items);
    Py_DECREF(encoded);
    return NULL;
}

/* NULL-terminated array of pointers into the bytes objects of list. */
static char **string_array(PyObject *list)
{
    Py_ssize_t count = PyList_GET_SIZE(list);
    char **array = PyMem_New(char *, (size_t)count + 1);
    if (array == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        array[i] = PyBytes_AS_STRING(PyList_GET_ITEM(list, i));
    array[count] = NULL;
    return array;
}

/* Default search path when env has no PATH, the same as glibc's execvp. */
static const char default_search_path[] = "/bin:/usr/bin";

/* The executable paths the child tries, in order: argv[0] itself when it
 * contains a slash, else argv[0] in each directory of env's PATH (an empty
 * entry is the working directory, as in execvp). One allocation: the pointer
 * array followed by the strings. Free with PyMem_Free. */
static char **exec_candidates(const char *program, char *const *envp)
{
    if (strchr(program, '/') != NULL) {
        size_t length = strlen(program) + 1;
        char **array = PyMem_Malloc(2 * sizeof(char *) + length);
        if (array == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        char *storage = (char *)(array + 2);
        memcpy(storage, program, length);
        array[0] = storage;
        array[1] = NULL;
        return array;
    }
    const char *search = default_search_path;
    for (char *const *entry = envp; *entry != NULL; entry++) {
        if (strncmp(*entry, "PATH=", 5) == 0) {
            search = *entry + 5;
            break;
        }
    }
    size_t program_length = strlen(program);
    size_t search_length = strlen(search);
    size_t directories = 1;
    for (const char *c = search; *c != '\0'; c++)
        directories += (*c == ':');
    /* Each candidate is "<dir>/<program>\0" (or "./<program>\0"): at most
     * the directory's characters plus program_length + 3. */
    size_t storage_size = search_length + directories * (program_length + 3);
    char **array = PyMem_Malloc((directories + 1) * sizeof(char *) + storage_size);
    if (array == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    char *out = (char *)(array + directories + 1);
    size_t index = 0;
    const char *start = search;
    for (;;) {
        const char *end = strchr(start, ':');
        size_t length = end != NULL ? (size_t)(end - start) : strlen(start);
        array[index++] = out;
        if (length == 0) {
            memcpy(out, "./", 2);
            out += 2;
        } else {
            memcpy(out, start, length);
            out += length;
            *out++ = '/';
        }
        memcpy(out, program, program_length + 1);
        out += program_length + 1;
        if (end == NULL)
            break;
        start = end + 1;
    }
    array[index] = NULL;
    return array;
}

/* Soft RLIMIT_NOFILE, the bound of the fallback close loop. */
static int descriptor_limit(void)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) < 0 || limit.rlim_cur == RLIM_INFINITY ||
        limit.rlim_cur > (rlim_t)INT_MAX) {
        long open_max = sysconf(_SC_OPEN_MAX);
        return open_max > 0 && open_max < INT_MAX ? (int)open_max : INT_MAX;
    }
    return (int)limit.rlim_cur;
}

/* ------------------------------------------------------------------------ */
/* Errors.                                                                   */

/* OSError (errno subclass) "cannot launch 'prog': step 'S' (what) failed:
 * strerror" with filename, and attribute step = S. */
static void raise_launch_error(const char *program, const char *step, const char *what, int error,
                               PyObject *filename)
{
    PyObject *message = PyUnicode_FromFormat("cannot launch '%s': step '%s' (%s) failed: %s",
                                             program, step, what, strerror(error));
    if (message == NULL)
        return;
    PyObject *exception = PyObject_CallFunction(PyExc_OSError, "iOO", error, message,
                                                filename != NULL ? filename : Py_None);
    Py_DECREF(message);
    if (exception == NULL)
        return;
    PyObject *step_name = PyUnicode_FromString(step);
    if (step_name == NULL || PyObject_SetAttrString(exception, "step", step_name) < 0) {
        Py_XDECREF(step_name);
        Py_DECREF(exception);
        return;
    }
    Py_DECREF(step_name);
    PyErr_SetObject((PyObject *)Py_TYPE(exception), exception);
    Py_DECREF(exception);
}

static PyObject *step_filename(int step, PyObject *argv0, PyObject *cwd, PyObject *stdout_path,
                               PyObject *stderr_path)
{
    switch (step) {
    case STEP_STDIN:
        return PyUnicode_FromString("/dev/null");
    case STEP_STDOUT:
        return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(stdout_path));
    case STEP_STDERR:
        return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(stderr_path));
    case STEP_CHDIR:
        return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(cwd));
    case STEP_EXEC:
        return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(argv0));
    default:
        Py_RETURN_NONE;
    }
}

/* Waits for pid (GIL released), retrying on EINTR. For children known to be
 * exiting or killed, so the wait is short. */
static int reap_blocking(pid_t pid)
{
    pid_t result;
    int status;
    Py_BEGIN_ALLOW_THREADS
    do {
        result = waitpid(pid, &status, 0);
    } while (result < 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    return result < 0 ? -1 : 0;
}

/* Kills and reaps a child the parent gives up on while it may not have
 * exec'd yet; the exception already set is kept. */
static void abandon_child(pid_t pid)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    (void)kill(pid, SIGKILL);       /* fails only if already gone */
    (void)killpg(pid, SIGKILL);     /* anything it exec'd and started meanwhile */
    (void)reap_blocking(pid);       /* ECHILD would mean someone else reaped it */
    PyErr_Restore(type, value, traceback);
}

/* ------------------------------------------------------------------------ */
/* spawn()                                                                   */

PyDoc_STRVAR(spawn_doc,
"spawn(argv, *, cwd, env, stdout_path, stderr_path) -> int\n"
"\n"
"Start argv as a child process and return its pid, once it has exec'd.\n"
"\n"
"argv: non-empty list or tuple of str (no NUL). A bare argv[0] (no '/') is\n"
"looked up in the PATH of env (default '/bin:/usr/bin'); a relative one is\n"
"resolved against cwd. env: list or tuple of 'KEY=VALUE' str, the child's\n"
"complete environment (nothing inherited). cwd, stdout_path, stderr_path:\n"
"str or os.PathLike; the two output files are created or truncated (0644)\n"
"relative to the caller's working directory, before the chdir.\n"
"\n"
"The child gets its own process group (pgid == pid), SIGKILL as its\n"
"parent-death signal (Linux delivers it when the *thread* that called spawn\n"
"exits, and clears it on exec of a set-user-ID program), default signal\n"
"dispositions with nothing blocked, stdin from /dev/null, and no descriptor\n"
"other than 0, 1 and 2.\n"
"\n"
"A step that fails in the child is raised here as OSError (the errno's\n"
"subclass, e.g. FileNotFoundError) naming the step, argv[0] and the error,\n"
"with attribute step in 'setpgid', 'pdeathsig', 'signals', 'stdin', 'stdout',\n"
"'stderr', 'chdir', 'close_fds', 'exec' (or 'pipe', 'fork', 'setpgid', 'read'\n"
"on the parent's side); the failed child is reaped.");

static PyObject *spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"argv", "cwd", "env", "stdout_path", "stderr_path", NULL};
    PyObject *argv_obj, *cwd_obj = NULL, *env_obj = NULL, *stdout_obj = NULL, *stderr_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOO:spawn", keywords, &argv_obj, &cwd_obj,
                                     &env_obj, &stdout_obj, &stderr_obj))
        return NULL;
    const char *missing = cwd_obj == NULL      ? "cwd"
                          : env_obj == NULL    ? "env"
                          : stdout_obj == NULL ? "stdout_path"
                          : stderr_obj == NULL ? "stderr_path"
                                               : NULL;
    if (missing != NULL) {
        PyErr_Format(PyExc_TypeError, "spawn() missing required keyword argument '%s'", missing);
        return NULL;
    }

    PyObject *result = NULL;
    PyObject *argv_bytes = NULL, *env_bytes = NULL;
    PyObject *cwd = NULL, *stdout_path = NULL, *stderr_path = NULL;
    char **argv = NULL, **envp = NULL, **candidates = NULL;
    int pipe_fds[2] = {-1, -1};

    argv_bytes = encode_strings(argv_obj, "argv", 0);
    if (argv_bytes == NULL)
        goto done;
    if (PyList_GET_SIZE(argv_bytes) == 0) {
        PyErr_SetString(PyExc_ValueError, "spawn(): argv must not be empty; give at least the program");
        goto done;
    }
    PyObject *argv0 = PyList_GET_ITEM(argv_bytes, 0);
    const char *program = PyBytes_AS_STRING(argv0);
    if (program[0] == '\0') {
        PyErr_SetString(PyExc_ValueError, "spawn(): argv[0], the program, must not be empty");
        goto done;
    }
    env_bytes = encode_strings(env_obj, "env", 1);
    if (env_bytes == NULL)
        goto done;
    cwd = encode_path(cwd_obj, "cwd");
    if (cwd == NULL)
        goto done;
    stdout_path = encode_path(stdout_obj, "stdout_path");
    if (stdout_path == NULL)
        goto done;
    stderr_path = encode_path(stderr_obj, "stderr_path");
    if (stderr_path == NULL)
        goto done;
    argv = string_array(argv_bytes);
    if (argv == NULL)
        goto done;
    envp = string_array(env_bytes);
    if (envp == NULL)
        goto done;
    candidates = exec_candidates(program, envp);
    if (candidates == NULL)
        goto done;

    if (pipe2(pipe_fds, O_CLOEXEC) < 0) {
        raise_launch_error(program, "pipe", "creating the failure pipe", errno, NULL);
        goto done;
    }
    /* The child's dup2 onto 0..2 must not overwrite the failure pipe. */
    if (pipe_fds[1] < 3) {
        int moved = fcntl(pipe_fds[1], F_DUPFD_CLOEXEC, 3);
        if (moved < 0) {
            raise_launch_error(program, "pipe", "moving the failure pipe above 2", errno, NULL);
            goto done;
        }
        (void)close(pipe_fds[1]); /* a fresh pipe's descriptor: nothing to flush */
        pipe_fds[1] = moved;
    }

    struct spawn_plan plan = {
        .argv = argv,
        .envp = envp,
        .candidates = candidates,
        .cwd = PyBytes_AS_STRING(cwd),
        .stdout_path = PyBytes_AS_STRING(stdout_path),
        .stderr_path = PyBytes_AS_STRING(stderr_path),
        .parent_pid = getpid(),
        .error_fd = pipe_fds[1],
        .fd_limit = descriptor_limit(),
    };
    sigset_t all_signals, saved_mask;
    if (sigemptyset(&plan.empty_mask) < 0 || sigfillset(&all_signals) < 0) {
        raise_launch_error(program, "fork", "preparing signal sets", errno, NULL);
        goto done;
    }
    /* Blocked across fork so that no inherited handler runs in the child
     * before it resets the dispositions. */
    int mask_error = pthread_sigmask(SIG_SETMASK, &all_signals, &saved_mask);
    if (mask_error != 0) {
        raise_launch_error(program, "fork", "blocking signals", mask_error, NULL);
        goto done;
    }
    pid_t pid = fork();
    if (pid == 0)
        child_exec(&plan);
    int fork_error = errno;
    mask_error = pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
    (void)close(pipe_fds[1]); /* the parent's copy of the write end; EOF comes with exec */
    pipe_fds[1] = -1;
    if (pid < 0) {
        raise_launch_error(program, "fork", "fork", fork_error, NULL);
        goto done;
    }
    if (mask_error != 0) {
        raise_launch_error(program, "fork", "restoring the signal mask", mask_error, NULL);
        abandon_child(pid);
        goto done;
    }
    /* Also set the group from here, so it exists whatever the scheduling.
     * EACCES: the child has exec'd (after its own setpgid); ESRCH: it is gone
     * already. Both leave the group as the child set it. */
    if (setpgid(pid, pid) < 0 && errno != EACCES && errno != ESRCH) {
        raise_launch_error(program, "setpgid", "setpgid of the child from the parent", errno, NULL);
        abandon_child(pid);
        goto done;
    }

    struct child_failure failure;
    size_t received = 0;
    while (received < sizeof failure) {
        ssize_t count;
        Py_BEGIN_ALLOW_THREADS
        count = read(pipe_fds[0], (char *)&failure + received, sizeof failure - received);
        Py_END_ALLOW_THREADS
        if (count < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0) {
                abandon_child(pid);
                goto done;
            }
            continue;
        }
        if (count < 0) {
            raise_launch_error(program, "read", "reading the failure pipe", errno, NULL);
            abandon_child(pid);
            goto done;
        }
        if (count == 0)
            break;
        received += (size_t)count;
    }
    if (received == 0) {
        result = PyLong_FromLong((long)pid);
        goto done;
    }
    if (reap_blocking(pid) < 0) {
        raise_launch_error(program, "read", "reaping the failed child", errno, NULL);
        goto done;
    }
    if (received != sizeof failure || failure.step < 0 || failure.step >= STEP_COUNT) {
        raise_launch_error(program, "read", "reading the failure pipe", EIO, NULL);
        goto done;
    }
    PyObject *filename = step_filename(failure.step, argv0, cwd, stdout_path, stderr_path);
    if (filename == NULL)
        goto done;
    raise_launch_error(program, step_names[failure.step], step_descriptions[failure.step],
                       failure.error, filename);
    Py_DECREF(filename);

done:
    if (pipe_fds[0] >= 0)
        (void)close(pipe_fds[0]); /* read end of a pipe: close cannot lose data */
    if (pipe_fds[1] >= 0)
        (void)close(pipe_fds[1]);
    PyMem_Free(candidates);
    PyMem_Free(envp);
    PyMem_Free(argv);
    Py_XDECREF(stderr_path);
    Py_XDECREF(stdout_path);
    Py_XDECREF(cwd);
    Py_XDECREF(env_bytes);
    Py_XDECREF(argv_bytes);
    return result;
}

/* ------------------------------------------------------------------------ */
/* wait()                                                                    */

static PyTypeObject *child_exit_type;

static PyStructSequence_Field child_exit_fields[] = {
    {"pid", "process id of the child"},
    {"exit_code", "exit status if it exited, else None"},
    {"signal", "number of the signal that killed it, else None"},
    {"user_seconds", "user CPU time of the child and its reaped descendants"},
    {"sys_seconds", "system CPU time of the child and its reaped descendants"},
    {"peak_rss_bytes", "peak resident set size of the child or its largest reaped descendant"},
    {NULL, NULL},
};

static PyStructSequence_Desc child_exit_desc = {
    "trainparity._trainparity.ChildExit",
    "How a child ended and what it used, from wait4.",
    child_exit_fields,
    6,
};

static double timeval_seconds(struct timeval value)
{
    return (double)value.tv_sec + (double)value.tv_usec / 1e6;
}

static PyObject *optional_int(int present, int value)
{
    if (!present)
        Py_RETURN_NONE;
    return PyLong_FromLong(value);
}

static PyObject *child_exit_record(pid_t pid, int status, const struct rusage *usage)
{
    PyObject *record = PyStructSequence_New(child_exit_type);
    if (record == NULL)
        return NULL;
    /* ru_maxrss is in KiB on Linux. */
    PyObject *values[6] = {
        PyLong_FromLong((long)pid),
        optional_int(WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : 0),
        optional_int(WIFSIGNALED(status), WIFSIGNALED(status) ? WTERMSIG(status) : 0),
        PyFloat_FromDouble(timeval_seconds(usage->ru_utime)),
        PyFloat_FromDouble(timeval_seconds(usage->ru_stime)),
        PyLong_FromLongLong((long long)usage->ru_maxrss * 1024LL),
    };
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        if (values[i] == NULL)
            failed = 1;
        else
            PyStructSequence_SetItem(record, i, values[i]); /* steals; NULL slots stay NULL */
    }
    if (failed) {
        Py_DECREF(record);
        return NULL;
    }
    return record;
}

/* Reaps every pid in pids that has exited, appending its record to records;
 * with kill_group, first SIGKILLs its process group while the exited child is
 * still a zombie, so the group id cannot have been reused yet. Returns the
 * number reaped, or -1 with an exception. */
static Py_ssize_t reap_exited(const pid_t *pids, Py_ssize_t count, int kill_group, PyObject *records)
{
    Py_ssize_t reaped = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, (id_t)pids[i], &info, WEXITED | WNOHANG | WNOWAIT) < 0) {
            if (errno == ECHILD)
                PyErr_Format(PyExc_ChildProcessError,
                             "wait(): pid %d is not an unreaped child of this process (was it "
                             "reaped elsewhere, or is SIGCHLD ignored?)",
                             (int)pids[i]);
            else
                PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (info.si_pid == 0)
            continue; /* still running */
        /* ESRCH: nothing left in the group. EPERM: only processes we may not
         * signal are left (a set-user-ID descendant); failing here would
         * leave the child unreaped for good, so it is reaped regardless. */
        if (kill_group && killpg(pids[i], SIGKILL) < 0 && errno != ESRCH && errno != EPERM) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        int status;
        struct rusage usage;
        pid_t result;
        do {
            result = wait4(pids[i], &status, WNOHANG, &usage);
        } while (result < 0 && errno == EINTR);
        if (result < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (result == 0)
            continue;
        PyObject *record = child_exit_record(pids[i], status, &usage);
        if (record == NULL)
            return -1;
        int appended = PyList_Append(records, record);
        Py_DECREF(record);
        if (appended < 0)
            return -1;
        reaped++;
    }
    return reaped;
}

static double monotonic_seconds(void)
{
    struct timespec now;
    /* CLOCK_MONOTONIC cannot fail with a valid pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Longest stretch without the GIL: KeyboardInterrupt is raised within it. */
static const int wake_interval_ms = 100;
/* Poll period when pidfds are unavailable (kernels before 5.3). */
static const int fallback_interval_ms = 10;

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0U);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

PyDoc_STRVAR(wait_doc,
"wait(pids, timeout, *, kill_group_on_exit=False) -> list[ChildExit]\n"
"\n"
"Wait until at least one of pids (unreaped children of this process, e.g.\n"
"from spawn) has exited, reap every one that has, and return their\n"
"ChildExit records (pid, exit_code, signal, user_seconds, sys_seconds,\n"
"peak_rss_bytes). Returns [] when timeout (seconds, >= 0; None = no limit)\n"
"expires first. The GIL is released while waiting; signals are checked at\n"
"least every 100 ms, so Ctrl-C raises KeyboardInterrupt promptly (children\n"
"are left running: the caller decides what to do with them).\n"
"\n"
"With kill_group_on_exit, the process group of each exited child\n"
"(pgid == pid, as spawn sets it) is sent SIGKILL before the child is reaped,\n"
"while the group id cannot yet be reused, so descendants left behind die.\n"
"CPU times and peak RSS include the child's reaped descendants (wait4).");

static PyObject *wait_children(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *keywords[] = {"pids", "timeout", "kill_group_on_exit", NULL};
    PyObject *pids_obj, *timeout_obj;
    int kill_group = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$p:wait", keywords, &pids_obj, &timeout_obj,
                                     &kill_group))
        return NULL;
    if (!PyList_Check(pids_obj) && !PyTuple_Check(pids_obj)) {
        PyErr_Format(PyExc_TypeError, "wait(): pids must be a list or tuple of int, not %.100s",
                     Py_TYPE(pids_obj)->tp_name);
        return NULL;
    }
    double timeout = -1.0; /* no limit */
    if (timeout_obj != Py_None) {
        timeout = PyFloat_AsDouble(timeout_obj);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(timeout >= 0.0) || isinf(timeout)) {
            PyErr_Format(PyExc_ValueError,
                         "wait(): timeout must be a finite number of seconds >= 0 or None, not %R",
                         timeout_obj);
            return NULL;
        }
    }

    Py_ssize_t count = PySequence_Fast_GET_SIZE(pids_obj);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "wait(): pids must not be empty");
        return NULL;
    }
    PyObject *records = NULL;
    pid_t *pids = PyMem_New(pid_t, (size_t)count);
    struct pollfd *pidfds = PyMem_New(struct pollfd, (size_t)count);
    Py_ssize_t opened = 0;
    if (pids == NULL || pidfds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(pids_obj, i);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "wait(): pids[%zd] must be int, not %.100s", i,
                         Py_TYPE(item)->tp_name);
            goto done;
        }
        long value = PyLong_AsLong(item);
        if (value == -1 && PyErr_Occurred())
            goto done;
        if (value <= 0 || value > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "wait(): pids[%zd] = %ld is not a process id", i, value);
            goto done;
        }
        pids[i] = (pid_t)value;
        for (Py_ssize_t j = 0; j < i; j++) {
            if (pids[j] == pids[i]) {
                PyErr_Format(PyExc_ValueError, "wait(): pid %ld is listed twice", value);
                goto done;
            }
        }
    }

    records = PyList_New(0);
    if (records == NULL)
        goto done;
    Py_ssize_t reaped = reap_exited(pids, count, kill_group, records);
    if (reaped != 0 || timeout == 0.0)
        goto done;

    /* pidfds become readable when their process exits; without them
     * (ENOSYS) poll() just sleeps for the fallback interval. */
    int use_pidfds = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int fd = open_pidfd(pids[i]);
        if (fd < 0) {
            if (errno == ENOSYS && opened == 0) {
                use_pidfds = 0;
                break;
            }
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        pidfds[i].fd = fd;
        pidfds[i].events = POLLIN;
        pidfds[i].revents = 0;
        opened++;
    }

    double deadline = timeout < 0.0 ? 0.0 : monotonic_seconds() + timeout;
    for (;;) {
        int slice_ms = use_pidfds ? wake_interval_ms : fallback_interval_ms;
        if (timeout >= 0.0) {
            double remaining = deadline - monotonic_seconds();
            if (remaining <= 0.0)
                break;
            double remaining_ms = ceil(remaining * 1000.0);
            if (remaining_ms < (double)slice_ms)
                slice_ms = (int)remaining_ms;
        }
        int ready;
        int poll_error;
        Py_BEGIN_ALLOW_THREADS
        ready = poll(use_pidfds ? pidfds : NULL, use_pidfds ? (nfds_t)count : 0, slice_ms);
        poll_error = errno;
        Py_END_ALLOW_THREADS
        if (ready < 0 && poll_error != EINTR) {
            errno = poll_error;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        if (PyErr_CheckSignals() < 0)
            goto done;
        if (ready != 0 || !use_pidfds) {
            reaped = reap_exited(pids, count, kill_group, records);
            if (reaped < 0)
                goto done;
            if (reaped > 0)
                break;
        }
    }

done:
    for (Py_ssize_t i = 0; i < opened; i++)
        (void)close(pidfds[i].fd); /* a pidfd holds no data */
    PyMem_Free(pidfds);
    PyMem_Free(pids);
    if (PyErr_Occurred()) {
        Py_XDECREF(records);
        return NULL;
    }
    return records;
}

/* ------------------------------------------------------------------------ */
/* kill_group()                                                              */

PyDoc_STRVAR(kill_group_doc,
"kill_group(pgid, sig) -> bool\n"
"\n"
"Send signal sig to every process of process group pgid (killpg). Returns\n"
"False when the group no longer exists (ESRCH), True otherwise; other errors\n"
"raise OSError. Refuses pgid <= 1 and the caller's own group (ValueError).");

static PyObject *kill_group(PyObject *self, PyObject *args)
{
    (void)self;
    int pgid, sig;
    if (!PyArg_ParseTuple(args, "ii:kill_group", &pgid, &sig))
        return NULL;
    if (pgid <= 1) {
        PyErr_Format(PyExc_ValueError,
                     "kill_group(): pgid must be a child's process group id (> 1), not %d", pgid);
        return NULL;
    }
    if (pgid == (int)getpgrp()) {
        PyErr_Format(PyExc_ValueError,
                     "kill_group(): pgid %d is the caller's own process group; refusing to signal it",
                     pgid);
        return NULL;
    }
    if (sig < 0 || sig >= NSIG) {
        PyErr_Format(PyExc_ValueError, "kill_group(): sig must be in [0, %d), not %d", NSIG, sig);
        return NULL;
    }
    if (killpg(pgid, sig) < 0) {
        if (errno == ESRCH)
            Py_RETURN_FALSE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

PyMethodDef tp_spawn_methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))spawn, METH_VARARGS | METH_KEYWORDS, spawn_doc},
    {"wait", (PyCFunction)(void (*)(void))wait_children, METH_VARARGS | METH_KEYWORDS, wait_doc},
    {"kill_group", kill_group, METH_VARARGS, kill_group_doc},
    {NULL, NULL, 0, NULL},
};

int tp_spawn_init(PyObject *module)
{
    PyTypeObject *type = PyStructSequence_NewType(&child_exit_desc);
    if (type == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "ChildExit", (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    /* Kept for the life of the process; a re-executed module replaces it. */
    Py_XSETREF(child_exit_type, type);
    return 0;
}
