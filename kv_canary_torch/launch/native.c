/* The C half of kv_canary_torch/launch/native.py: the launcher's per-call work in C, everything else bound once.
 *
 * Contract (module _kv_canary_native; native.py builds and loads it):
 *
 *   load_driver() -> None
 *       Resolves cuLaunchKernel, cuCtxGetCurrent and cuGetErrorName from libcuda.so.1 (the library torch
 *       has loaded); OSError when it cannot. Idempotent.
 *   bind(function, threads, shared, n_ints, n_scratch, owner, n_window=0) -> kernel
 *       A compiled kernel bound once (a capsule): the CUfunction handle (an int), threads per program, dynamic
 *       shared bytes, and its parameter layout: four 8-byte pointers (flat_in, offsets, req_pool_indices,
 *       pool_out), then n_ints 4-byte signed ints (at most MAX_INTS), then n_window 8-byte pointers (0, or 1
 *       for a windowed kernel: start_cols, whose unit stride Triton compiled in), then n_scratch 8-byte pointers
 *       passed null (at most MAX_SCRATCH: Triton's global and profile scratch, which a plain launch leaves null).
 *       `owner` (the compiled kernel that owns the function) is kept alive as long as the capsule. TypeError,
 *       ValueError or OverflowError when anything does not fit.
 *   launch(kernel, grid_x, grid_y, stream, p0, p1, p2, p3, *ints, *window) -> bool
 *       Enqueues the kernel over grid (grid_x, grid_y, 1) on `stream` (a CUstream handle as an int; 0 is the
 *       legacy default stream) with cuLaunchKernel, the GIL released around the driver call as Triton's own
 *       launcher does. The pointers are ints in [0, 2**64); the ints, n_ints of them, each in int32's range;
 *       grid_x in [1, 2**31 - 1], grid_y in [1, 65535]. True once enqueued; False, with nothing enqueued,
 *       when the calling thread has no current CUDA context (the caller then takes Triton's launcher, which
 *       sets one). RuntimeError with the driver's error name when the driver refuses the launch. The
 *       parameters live on this call's stack: calls from several threads never share them, and a launch
 *       captured into a CUDA graph has its parameter values copied at capture.
 *   pack(kernel, p0, p1, p2, p3, *ints, *window) -> bytes
 *       The parameter slots `launch` would pass (8 bytes per parameter, a 4-byte one in the slot's first
 *       bytes): for tests; touches no driver.
 *   plan(rule, bs, n_tokens, n_rows, width, stride_row, stride_col, flat_stride, offsets_stride,
 *        rows_stride) -> (slot, (grid_x, grid_y), ints, small_ints) | None
 *       The twin of kv_canary_torch.launch.plan.plan (None where it returns NOTHING), over `rule`
 *       (plan.rule()'s numbers): what the call path launches. For tests, which hold the two equal.
 *
 * The call path: a whole launcher call in C, for argument signatures that have passed the checked path before.
 *
 *   configure(memo, tensor_type, hooks, raw_stream, current_device, reader, rule) -> None
 *       `memo` is a dict from signature (below) to a list of SLOTS entries, each None or a kernel of `bind`
 *       (the variants of plan.py's slots), which the caller fills after a call with that signature passed its
 *       checks and launched; `tensor_type` is the exact type the four arguments must have (torch.Tensor: no
 *       subclass, no other framework's array); `hooks` holds Triton's launch hooks (`launch_enter_hook`,
 *       `launch_exit_hook`: none is installed when each is absent, None or has an empty `calls`);
 *       `raw_stream(device)` is the device's current stream as an int; `current_device()` is the current
 *       device's index, or None where the process sees one device; `reader` is tensor_meta's READER capsule;
 *       `rule` is plan.rule().
 *   signature(backend, flat_in, offsets, req_pool_indices, pool_out[, start_cols]) -> bytes | None
 *       Each argument's KvTensorMeta with its `data` zeroed, and with the length of each of the first three
 *       zeroed (N, bs + 1 and bs: what changes every serving step), then start_cols' likewise (its length bs
 *       zeroed) where it is given and not None (a windowed call), then the backend's UTF-8. None when
 *       `backend` is not exactly a str (or has no UTF-8), an argument is not exactly `tensor_type`, or the
 *       reader declines one (tensor_meta.cpp). TypeError for a wrong argument count, RuntimeError before
 *       `configure`. Every argument check of the spec is a function of the signature and of one relation
 *       between the zeroed lengths (len(offsets) == bs + 1, which `call` tests itself), and every launch
 *       choice a function of the signature, N and bs (`plan`), so two calls with equal signatures and
 *       that relation pass or fail the same checks.
 *   call(backend, flat_in, offsets, req_pool_indices, pool_out[, start_cols]) -> bool
 *       For arguments whose signature is in the memo, whose offsets are one longer than req_pool_indices and,
 *       windowed, whose start_cols is as long as req_pool_indices (its data pointer the kernel's window pointer):
 *       plans the launch from N and bs (`plan`), launches the memo's kernel for its slot with the arguments'
 *       data pointers on `raw_stream(pool_out.device.index)` and returns True, or returns True at once when
 *       no cell can be written. Returns False, with nothing launched, when the signature is not remembered,
 *       the lengths do not relate, the slot holds no kernel, an int or bs does not fit int32 (bs is grid
 *       axis 0), a pointer is not 16-byte aligned (the kernels' specialization), a hook is installed, the current
 *       device is not pool_out's, the driver is not loaded, or the thread has no CUDA context: the caller's
 *       checked path then runs. A driver refusal raises RuntimeError, as `launch` does. It keeps the last
 *       signature the memo answered (until the next `configure`), so that a run of calls with one signature
 *       builds and hashes no bytes: a family, once found, stays valid (the checks are functions of the
 *       signature), and `configure` forgets it with the rule it was planned under.
 *   planned(backend, flat_in, offsets, req_pool_indices, pool_out[, start_cols]) -> (kernel, grid, stream, pointers, ints) | None
 *       What `call` would launch, launching nothing (kernel None: nothing to write); None where `call` would
 *       return False: for tests.
 *   served() -> int
 *       How many calls `call` has served (launched, or found nothing to write).
 *
 * No CUDA header is needed: the three driver functions are declared here with the driver API's types
 * (CUresult is an int, the handles are pointers) and looked up with dlsym.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "tensor_meta.h"

#if PY_VERSION_HEX >= 0x030D0000
#define get_optional_attr PyObject_GetOptionalAttr
#else
#define get_optional_attr _PyObject_LookupAttr /* the same function before Python 3.13 made it public */
#endif

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;
typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
typedef CUresult (*ctx_get_current_fn)(CUcontext *);
typedef CUresult (*get_error_name_fn)(CUresult, const char **);

static launch_kernel_fn launch_kernel;
static ctx_get_current_fn ctx_get_current;
static get_error_name_fn get_error_name;

#define N_POINTERS 4 /* flat_in, offsets, req_pool_indices, pool_out */
#define MAX_INTS 8
#define MAX_WINDOW 1 /* start_cols, after the ints, in a windowed kernel */
#define MAX_SCRATCH 2
#define MAX_PARAMS (N_POINTERS + MAX_INTS + MAX_WINDOW + MAX_SCRATCH)
#define SLOTS 7      /* plan.SLOTS */
#define LOOP_SLOT 4  /* plan.LOOP_SLOT */
#define TILED_SLOT 6 /* plan.TILED_SLOT */
#define INT32_END ((int64_t)1 << 31)
#define GRID_X_MAX 0x7fffffffLL
#define GRID_Y_MAX 65535LL
#define CAPSULE_NAME "kv_canary.native.kernel"

typedef struct {
    CUfunction function;
    unsigned threads;
    unsigned shared;
    int n_ints;
    int n_scratch;
    int n_window;
    PyObject *owner;
} Kernel;

static PyObject *load_driver(PyObject *self, PyObject *unused) {
    if (launch_kernel != NULL) Py_RETURN_NONE;
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_OSError, "cannot load libcuda.so.1: %s", why ? why : "unknown error");
        return NULL;
    }
    launch_kernel_fn launch = (launch_kernel_fn)dlsym(lib, "cuLaunchKernel");
    ctx_get_current_fn current = (ctx_get_current_fn)dlsym(lib, "cuCtxGetCurrent");
    get_error_name_fn name = (get_error_name_fn)dlsym(lib, "cuGetErrorName");
    if (launch == NULL || current == NULL || name == NULL) {
        PyErr_SetString(PyExc_OSError, "libcuda.so.1 lacks cuLaunchKernel, cuCtxGetCurrent or cuGetErrorName");
        return NULL;
    }
    ctx_get_current = current;
    get_error_name = name;
    launch_kernel = launch; /* last: it marks the driver as loaded */
    Py_RETURN_NONE;
}

static void free_kernel(PyObject *capsule) {
    Kernel *kernel = (Kernel *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (kernel == NULL) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(kernel->owner);
    PyMem_Free(kernel);
}

static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *function, *owner;
    unsigned long threads, shared;
    int n_ints, n_scratch, n_window = 0;
    if (!PyArg_ParseTuple(args, "OkkiiO|i", &function, &threads, &shared, &n_ints, &n_scratch, &owner, &n_window))
        return NULL;
    if (threads < 1 || threads > 1024 || shared > 0xffffffffUL || n_ints < 0 || n_ints > MAX_INTS || n_scratch < 0 ||
        n_scratch > MAX_SCRATCH || n_window < 0 || n_window > MAX_WINDOW) {
        PyErr_Format(PyExc_ValueError,
                     "bad kernel: %lu threads (1 to 1024), %d ints (at most %d), %d scratch (at most %d), %d window (at most %d)",
                     threads, n_ints, MAX_INTS, n_scratch, MAX_SCRATCH, n_window, MAX_WINDOW);
        return NULL;
    }
    CUfunction handle = PyLong_AsVoidPtr(function);
    if (handle == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the kernel's function handle is null");
        return NULL;
    }
    Kernel *kernel = (Kernel *)PyMem_Calloc(1, sizeof(Kernel));
    if (kernel == NULL) return PyErr_NoMemory();
    *kernel = (Kernel){handle, (unsigned)threads, (unsigned)shared, n_ints, n_scratch, n_window, owner};
    Py_INCREF(owner);
    PyObject *capsule = PyCapsule_New(kernel, CAPSULE_NAME, free_kernel);
    if (capsule == NULL) {
        Py_DECREF(owner);
        PyMem_Free(kernel);
    }
    return capsule;
}

/* The parameter slots of one launch: the four pointers, the ints, the window pointer (pointers[N_POINTERS], in a
 * windowed kernel), the null scratch pointers; `params` point at them, as cuLaunchKernel takes them. The ints are
 * in int32's range (the callers check). */
static void set_params(const Kernel *kernel, const uint64_t *pointers, const int64_t *ints, uint64_t *slots,
                       void **params) {
    int n = N_POINTERS + kernel->n_ints + kernel->n_window + kernel->n_scratch;
    memset(slots, 0, sizeof(uint64_t) * n);
    memcpy(slots, pointers, sizeof(uint64_t) * N_POINTERS);
    for (int i = 0; i < kernel->n_ints; ++i) {
        int32_t v = (int32_t)ints[i];
        memcpy(&slots[N_POINTERS + i], &v, sizeof v);
    }
    memcpy(&slots[N_POINTERS + kernel->n_ints], pointers + N_POINTERS, sizeof(uint64_t) * kernel->n_window);
    for (int i = 0; i < n; ++i) params[i] = &slots[i];
}

/* RuntimeError naming the driver's error; NULL. */
static PyObject *launch_error(CUresult result) {
    const char *name = NULL;
    if (get_error_name(result, &name) != 0) name = NULL;
    PyErr_Format(PyExc_RuntimeError, "kv-canary: cuLaunchKernel failed: %s (%d)", name ? name : "unknown error",
                 result);
    return NULL;
}

/* Enqueue `kernel` over (gx, gy, 1) with these parameters on `stream`: True; False (nothing enqueued) when the
 * thread has no current CUDA context; NULL with RuntimeError when the driver is not loaded or refuses. */
static PyObject *enqueue(const Kernel *kernel, unsigned gx, unsigned gy, CUstream stream, void **params) {
    if (launch_kernel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the CUDA driver is not loaded (load_driver)");
        return NULL;
    }
    CUcontext context = NULL;
    if (ctx_get_current(&context) != 0 || context == NULL) Py_RETURN_FALSE;
    CUresult result;
    Py_BEGIN_ALLOW_THREADS
    result = launch_kernel(kernel->function, gx, gy, 1, kernel->threads, 1, 1, kernel->shared, stream, params, NULL);
    Py_END_ALLOW_THREADS
    if (result != 0) return launch_error(result);
    Py_RETURN_TRUE;
}

/* The kernel, pointers and ints of args[0], args[first..first+3], args[first+4..] (then the window pointer, where
 * the kernel has one, into pointers[N_POINTERS]): 0, or -1 with an error set. */
static int read_launch(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t first, Kernel **kernel, uint64_t *pointers,
                       int64_t *ints) {
    if (nargs < first + N_POINTERS) {
        PyErr_Format(PyExc_TypeError, "expected the kernel, %zd more and %d pointers, got %zd arguments", first - 1,
                     N_POINTERS, nargs);
        return -1;
    }
    *kernel = (Kernel *)PyCapsule_GetPointer(args[0], CAPSULE_NAME);
    if (*kernel == NULL) return -1;
    if (nargs != first + N_POINTERS + (*kernel)->n_ints + (*kernel)->n_window) {
        PyErr_Format(PyExc_TypeError, "this kernel takes %d ints and %d window pointers, got %zd", (*kernel)->n_ints,
                     (*kernel)->n_window, nargs - first - N_POINTERS);
        return -1;
    }
    for (int i = 0; i < N_POINTERS + (*kernel)->n_window; ++i) {
        Py_ssize_t at = i < N_POINTERS ? first + i : first + N_POINTERS + (*kernel)->n_ints;
        unsigned long long p = PyLong_AsUnsignedLongLong(args[at]);
        if (p == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        pointers[i] = (uint64_t)p;
    }
    for (int i = 0; i < (*kernel)->n_ints; ++i) {
        long long v = PyLong_AsLongLong(args[first + N_POINTERS + i]);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < -INT32_END || v >= INT32_END) {
            PyErr_Format(PyExc_OverflowError, "a 4-byte kernel parameter cannot hold %lld", v);
            return -1;
        }
        ints[i] = v;
    }
    return 0;
}

static int as_grid(PyObject *value, long long most, const char *what, unsigned *out) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 1 || v > most) {
        PyErr_Format(PyExc_ValueError, "%s must be in [1, %lld], got %lld", what, most, v);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Kernel *kernel;
    uint64_t pointers[N_POINTERS + MAX_WINDOW], slots[MAX_PARAMS];
    int64_t ints[MAX_INTS];
    void *params[MAX_PARAMS];
    unsigned gx, gy;
    if (read_launch(args, nargs, 4, &kernel, pointers, ints) < 0) return NULL;
    if (as_grid(args[1], GRID_X_MAX, "grid_x", &gx) < 0 || as_grid(args[2], GRID_Y_MAX, "grid_y", &gy) < 0)
        return NULL;
    CUstream stream = (CUstream)PyLong_AsVoidPtr(args[3]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    set_params(kernel, pointers, ints, slots, params);
    return enqueue(kernel, gx, gy, stream, params);
}

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Kernel *kernel;
    uint64_t pointers[N_POINTERS + MAX_WINDOW], slots[MAX_PARAMS];
    int64_t ints[MAX_INTS];
    void *params[MAX_PARAMS];
    if (read_launch(args, nargs, 1, &kernel, pointers, ints) < 0) return NULL;
    set_params(kernel, pointers, ints, slots, params);
    return PyBytes_FromStringAndSize(
        (const char *)slots, sizeof(uint64_t) * (N_POINTERS + kernel->n_ints + kernel->n_window + kernel->n_scratch));
}


/* The launch rule: the twin of kv_canary_torch/launch/plan.py's plan(), over its numbers (plan.rule()). */

typedef struct {
    int64_t small_cells, small_block, large_block, target, tiled_min_tokens, tiled_min_tiles, tiled_fill, grid_axis_1;
} Rule;

typedef struct {
    int slot; /* -1: no cell can be written */
    int64_t grid[2];
    int n_ints;
    int64_t ints[MAX_INTS];
    int small_ints; /* every int, and bs, < 2**31 */
} Launch;

static int read_rule(PyObject *tuple, Rule *rule) {
    int64_t v[8];
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 8) {
        PyErr_SetString(PyExc_TypeError, "the rule is a tuple of 8 ints (plan.rule())");
        return -1;
    }
    for (int i = 0; i < 8; ++i) {
        v[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (v[i] == -1 && PyErr_Occurred()) return -1;
    }
    if (v[1] < 1 || v[2] < 1 || v[3] < 1) {
        PyErr_SetString(PyExc_ValueError, "the rule's blocks and target must be positive");
        return -1;
    }
    *rule = (Rule){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    return 0;
}

static int64_t cdiv(int64_t a, int64_t b) { return a / b + (a % b != 0); } /* a >= 0, b > 0 */

/* plan.plan() for these sizes and strides (all >= 0, as torch's are). Products are taken in 128 bits: nothing
 * here overflows for any int64 inputs. */
static void plan_launch(const Rule *rule, int64_t bs, int64_t n_tokens, int64_t n_rows, int64_t width,
                        int64_t stride_row, int64_t stride_col, int64_t flat_stride, int64_t offsets_stride,
                        int64_t rows_stride, Launch *out) {
    if (bs == 0 || n_tokens == 0 || n_rows == 0 || width == 0) {
        out->slot = -1;
        return;
    }
    int64_t window = width < n_tokens ? width : n_tokens; /* shared_spec.reference.longest_window */
    int large = (__int128)bs * window > rule->small_cells;
    int64_t block = large ? rule->large_block : rule->small_block;
    int64_t tiles = cdiv(window, block) + 1;
    /* 100 * N >= fill * bs * window, as bs * window <= floor(100 * N / fill): no product past 128 bits */
    int full = rule->tiled_fill <= 0 || (__int128)bs * window <= (__int128)100 * n_tokens / rule->tiled_fill;
    int64_t *ints = out->ints;
    if (flat_stride == 1 && stride_col == 1 && large && n_tokens >= rule->tiled_min_tokens &&
        tiles - 1 >= rule->tiled_min_tiles && full && tiles <= rule->grid_axis_1) {
        out->slot = TILED_SLOT;
        out->grid[1] = tiles;
        out->n_ints = 6;
        int64_t v[6] = {n_tokens, n_rows, width, offsets_stride, rows_stride, stride_row};
        memcpy(ints, v, sizeof v);
    } else {
        int64_t lanes = cdiv(window, block), spread = cdiv(rule->target, bs);
        if (spread < lanes) lanes = spread;
        int64_t most = stride_col > flat_stride ? stride_col : flat_stride;
        if (most < 1) most = 1;
        int wide = (__int128)width * most >= INT32_END || (__int128)width + (__int128)lanes * block >= INT32_END;
        int one = (__int128)lanes * block >= window; /* no tile loop (plan.py: ONE) */
        out->slot = one ? 2 * large + wide : LOOP_SLOT + wide;
        out->grid[1] = lanes;
        out->n_ints = 8;
        int64_t v[8] = {n_tokens, n_rows, width, flat_stride, offsets_stride, rows_stride, stride_row, stride_col};
        memcpy(ints, v, sizeof v);
    }
    out->grid[0] = bs;
    out->small_ints = bs < INT32_END;
    for (int i = 0; i < out->n_ints; ++i)
        if (ints[i] >= INT32_END) out->small_ints = 0;
}

static PyObject *plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Rule rule;
    int64_t v[9];
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "plan takes the rule and 9 ints, got %zd arguments", nargs);
        return NULL;
    }
    if (read_rule(args[0], &rule) < 0) return NULL;
    for (int i = 0; i < 9; ++i) {
        v[i] = PyLong_AsLongLong(args[1 + i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
        if (v[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "sizes and strides are >= 0");
            return NULL;
        }
    }
    Launch out;
    plan_launch(&rule, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], &out);
    if (out.slot < 0) Py_RETURN_NONE;
    PyObject *ints = PyTuple_New(out.n_ints);
    if (ints == NULL) return NULL;
    for (int i = 0; i < out.n_ints; ++i) {
        PyObject *item = PyLong_FromLongLong(out.ints[i]);
        if (item == NULL) {
            Py_DECREF(ints);
            return NULL;
        }
        PyTuple_SET_ITEM(ints, i, item);
    }
    return Py_BuildValue("(i(LL)NO)", out.slot, (long long)out.grid[0], (long long)out.grid[1], ints,
                         out.small_ints ? Py_True : Py_False);
}


/* The call path (see the contract at the top). */
static PyObject *memo, *tensor_type, *hooks, *raw_stream, *current_device;
static kv_tensor_meta_read reader;
static Rule call_rule;
static unsigned long long served_calls;
static PyObject *s_enter, *s_exit, *s_calls;
#define N_TENSORS 4
#define MAX_TENSORS (N_TENSORS + MAX_WINDOW)
enum { FLAT, OFFSETS, ROWS, POOL, START };
/* The last signature the memo answered, kept so that a run of calls with one signature (a serving loop) skips
 * building, hashing and looking up its bytes: its fixed metadata (windowed or not), backend and family (strong
 * references). */
static KvTensorMeta last_fixed[MAX_TENSORS];
static int last_tensors;
static PyObject *last_backend, *last_family;

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *m, *t, *h, *r, *d, *read, *rule_tuple;
    if (!PyArg_ParseTuple(args, "O!O!OOOOO", &PyDict_Type, &m, &PyType_Type, &t, &h, &r, &d, &read, &rule_tuple))
        return NULL;
    kv_tensor_meta_read chosen = (kv_tensor_meta_read)PyCapsule_GetPointer(read, KV_TENSOR_META_CAPSULE);
    if (chosen == NULL) return NULL;
    if (!PyCallable_Check(r) || (d != Py_None && !PyCallable_Check(d))) {
        PyErr_SetString(PyExc_TypeError, "raw_stream and current_device (or None) must be callable");
        return NULL;
    }
    Rule rule;
    if (read_rule(rule_tuple, &rule) < 0) return NULL;
    if (s_enter == NULL) {
        s_enter = PyUnicode_InternFromString("launch_enter_hook");
        s_exit = PyUnicode_InternFromString("launch_exit_hook");
        s_calls = PyUnicode_InternFromString("calls");
        if (s_enter == NULL || s_exit == NULL || s_calls == NULL) return NULL;
    }
    Py_INCREF(m); Py_XSETREF(memo, m);
    Py_INCREF(t); Py_XSETREF(tensor_type, t);
    Py_INCREF(h); Py_XSETREF(hooks, h);
    Py_INCREF(r); Py_XSETREF(raw_stream, r);
    if (d == Py_None) Py_CLEAR(current_device);
    else { Py_INCREF(d); Py_XSETREF(current_device, d); }
    reader = chosen;
    call_rule = rule;
    Py_CLEAR(last_backend);
    Py_CLEAR(last_family);
    Py_RETURN_NONE;
}

/* 1 when no launch hook is installed on `hooks` (each of launch_enter_hook and launch_exit_hook absent, None, or
 * an object whose `calls` is empty), 0 otherwise or on an error (cleared): dispatch._hooks_idle's twin. */
static int hooks_idle(void) {
    PyObject *names[2] = {s_enter, s_exit};
    for (int i = 0; i < 2; ++i) {
        PyObject *hook, *calls;
        if (get_optional_attr(hooks, names[i], &hook) < 0) goto busy;
        if (hook == NULL || hook == Py_None) {
            Py_XDECREF(hook);
            continue;
        }
        int found = get_optional_attr(hook, s_calls, &calls);
        Py_DECREF(hook);
        if (found <= 0) goto busy; /* an error, or a bare function: a hook */
        int some = PyObject_IsTrue(calls);
        Py_DECREF(calls);
        if (some != 0) goto busy;
    }
    return 1;
busy:
    PyErr_Clear();
    return 0;
}

/* The arguments' metadata (args[1..4], and args[5] where it is given and not None: start_cols) and the part of it
 * that stays fixed from step to step (`fixed`: data and the lengths zeroed), their count in *n (4 or 5): 1; 0 when
 * the arguments have no signature (an error from reading them cleared); -1 with an error set for a misuse (a wrong
 * argument count, the call path unconfigured). */
static int read_arguments(PyObject *const *args, Py_ssize_t nargs, KvTensorMeta *metas, KvTensorMeta *fixed, int *n) {
    if (nargs != 1 + N_TENSORS && nargs != 2 + N_TENSORS) {
        PyErr_Format(PyExc_TypeError, "expected backend, %d arguments and start_cols or nothing, got %zd", N_TENSORS, nargs);
        return -1;
    }
    if (memo == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the call path is not configured (configure)");
        return -1;
    }
    if (!PyUnicode_CheckExact(args[0])) return 0;
    *n = nargs == 2 + N_TENSORS && args[1 + N_TENSORS] != Py_None ? MAX_TENSORS : N_TENSORS;
    for (int i = 0; i < *n; ++i)
        if (Py_TYPE(args[1 + i]) != (PyTypeObject *)tensor_type || reader(args[1 + i], &metas[i]) != 1) return 0;
    memcpy(fixed, metas, sizeof(KvTensorMeta) * *n);
    for (int i = 0; i < *n; ++i) fixed[i].data = 0;
    fixed[FLAT].sizes[0] = fixed[OFFSETS].sizes[0] = fixed[ROWS].sizes[0] = 0; /* N, bs + 1, bs */
    if (*n == MAX_TENSORS) fixed[START].sizes[0] = 0;                           /* bs */
    return 1;
}

/* The signature bytes of the `n` fixed metas and `backend`; NULL with no error set when the backend has no UTF-8.
 * A windowed signature is one meta longer than any unwindowed one with the same backend. */
static PyObject *signature_bytes(PyObject *backend, const KvTensorMeta *fixed, int n) {
    Py_ssize_t n_backend;
    const char *name = PyUnicode_AsUTF8AndSize(backend, &n_backend);
    if (name == NULL) {
        PyErr_Clear(); /* a lone surrogate: no signature */
        return NULL;
    }
    size_t size = sizeof(KvTensorMeta) * n;
    PyObject *sig = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size + n_backend);
    if (sig == NULL) return NULL;
    memcpy(PyBytes_AS_STRING(sig), fixed, size);
    memcpy(PyBytes_AS_STRING(sig) + size, name, (size_t)n_backend);
    return sig;
}

static PyObject *signature(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    KvTensorMeta metas[MAX_TENSORS], fixed[MAX_TENSORS];
    int n = N_TENSORS;
    int found = read_arguments(args, nargs, metas, fixed, &n);
    if (found < 0) return NULL;
    PyObject *sig = found ? signature_bytes(args[0], fixed, n) : NULL;
    if (sig != NULL || PyErr_Occurred()) return sig;
    Py_RETURN_NONE;
}

/* The memo's family for these arguments (borrowed; NULL, no error set, when there is none): the last one found if
 * the signature is the same, else the memo's, which becomes the last one. */
static PyObject *find_family(PyObject *backend, const KvTensorMeta *fixed, int n) {
    if (last_family != NULL && n == last_tensors && memcmp(fixed, last_fixed, sizeof(KvTensorMeta) * n) == 0 &&
        (backend == last_backend || PyUnicode_Compare(backend, last_backend) == 0))
        return last_family;
    PyObject *sig = signature_bytes(backend, fixed, n);
    if (sig == NULL) return NULL;
    PyObject *family = PyDict_GetItemWithError(memo, sig); /* borrowed */
    Py_DECREF(sig);
    if (family == NULL || !PyList_CheckExact(family) || PyList_GET_SIZE(family) != SLOTS) {
        PyErr_Clear();
        return NULL;
    }
    memcpy(last_fixed, fixed, sizeof(KvTensorMeta) * n);
    last_tensors = n;
    Py_INCREF(backend);
    Py_XSETREF(last_backend, backend);
    Py_INCREF(family);
    Py_XSETREF(last_family, family);
    return family;
}

/* What call() launches. */
typedef struct {
    PyObject *kernel; /* a new reference to the slot's kernel capsule; NULL: nothing to write */
    Launch launch;
    CUstream stream;
    uint64_t pointers[MAX_TENSORS]; /* flat_in, offsets, req_pool_indices, pool_out, and start_cols where windowed */
    int n_tensors;
} Planned;

/* 1 with *out set; 0 when call() launches nothing and must decline (no error set); -1 on an error that must
 * propagate (the call path unconfigured, a wrong argument count). */
static int plan_call(PyObject *const *args, Py_ssize_t nargs, Planned *out) {
    KvTensorMeta m[MAX_TENSORS], fixed[MAX_TENSORS];
    int n = N_TENSORS;
    int read = read_arguments(args, nargs, m, fixed, &n);
    if (read <= 0) return read;
    out->n_tensors = n;
    if (m[OFFSETS].sizes[0] != m[ROWS].sizes[0] + 1) return 0; /* the checks' error, raised by the checked path */
    if (n == MAX_TENSORS && m[START].sizes[0] != m[ROWS].sizes[0]) return 0; /* the same: start_cols' length */
    PyObject *family = find_family(args[0], fixed, n);
    if (family == NULL) return 0;
    Launch *launch = &out->launch;
    plan_launch(&call_rule, m[ROWS].sizes[0], m[FLAT].sizes[0], m[POOL].sizes[0], m[POOL].sizes[1],
                m[POOL].strides[0], m[POOL].strides[1], m[FLAT].strides[0], m[OFFSETS].strides[0],
                m[ROWS].strides[0], launch);
    out->kernel = NULL;
    uint64_t any = 0;
    for (int i = 0; i < n; ++i) any |= out->pointers[i] = m[i].data;
    if (launch->slot < 0) return 1;
    if (!launch->small_ints) return 0; /* bs included: grid axis 0 stops at 2**31 - 1 */
    PyObject *kernel = PyList_GET_ITEM(family, launch->slot);
    if (!PyCapsule_IsValid(kernel, CAPSULE_NAME)) return 0;
    const Kernel *bound = (const Kernel *)PyCapsule_GetPointer(kernel, CAPSULE_NAME);
    if (bound->n_ints != launch->n_ints || N_TENSORS + bound->n_window != n) return 0;
    /* The per-call conditions of dispatch._may_launch, its twin: aligned pointers (the kernels' specialization),
     * no launch hook, and the pool's device current where the process sees several. */
    if (any & 15 || !hooks_idle()) return 0;
    Py_INCREF(kernel); /* the callbacks below may drop the memo's reference */
    int ok = 0;
    PyObject *device = PyLong_FromLongLong(m[POOL].device_index), *now = NULL, *stream = NULL;
    if (device == NULL) goto done;
    if (current_device != NULL) {
        now = PyObject_CallNoArgs(current_device);
        if (now == NULL || PyObject_RichCompareBool(now, device, Py_EQ) != 1) goto done;
    }
    stream = PyObject_CallOneArg(raw_stream, device);
    if (stream == NULL) goto done;
    out->stream = (CUstream)PyLong_AsVoidPtr(stream);
    if (out->stream == NULL && PyErr_Occurred()) goto done;
    ok = 1;
    out->kernel = kernel;
done:
    Py_XDECREF(device);
    Py_XDECREF(now);
    Py_XDECREF(stream);
    if (!ok) {
        Py_DECREF(kernel);
        PyErr_Clear();
    }
    return ok;
}

static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Planned plan;
    int found = plan_call(args, nargs, &plan);
    if (found <= 0) {
        if (found < 0) return NULL;
        Py_RETURN_FALSE;
    }
    if (plan.kernel == NULL) { /* no cell to write */
        ++served_calls;
        Py_RETURN_TRUE;
    }
    PyObject *launched;
    if (launch_kernel == NULL) { /* no driver: nothing launched, the caller takes its way */
        launched = Py_False;
        Py_INCREF(launched);
    } else {
        const Kernel *kernel = (const Kernel *)PyCapsule_GetPointer(plan.kernel, CAPSULE_NAME);
        uint64_t slots[MAX_PARAMS];
        void *params[MAX_PARAMS];
        set_params(kernel, plan.pointers, plan.launch.ints, slots, params); /* plan_call checked small_ints */
        launched = enqueue(kernel, (unsigned)plan.launch.grid[0], (unsigned)plan.launch.grid[1], plan.stream, params);
    }
    Py_DECREF(plan.kernel);
    if (launched == Py_True) ++served_calls;
    return launched;
}

/* A tuple of the n values, each made by make (NULL with an error set when one cannot be made). */
static PyObject *tuple_of(int n, const void *values, PyObject *(*make)(const void *, int)) {
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (int i = 0; i < n; ++i) {
        PyObject *item = make(values, i);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *int_at(const void *values, int i) { return PyLong_FromLongLong(((const int64_t *)values)[i]); }
static PyObject *pointer_at(const void *values, int i) {
    return PyLong_FromUnsignedLongLong(((const uint64_t *)values)[i]);
}

static PyObject *planned(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Planned plan;
    int found = plan_call(args, nargs, &plan);
    if (found <= 0) {
        if (found < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *ints = tuple_of(plan.kernel == NULL ? 0 : plan.launch.n_ints, plan.launch.ints, int_at);
    PyObject *pointers = tuple_of(plan.n_tensors, plan.pointers, pointer_at);
    PyObject *stream = plan.kernel != NULL ? PyLong_FromVoidPtr(plan.stream) : Py_NewRef(Py_None);
    if (ints == NULL || pointers == NULL || stream == NULL) {
        Py_XDECREF(ints);
        Py_XDECREF(pointers);
        Py_XDECREF(stream);
        Py_XDECREF(plan.kernel);
        return NULL;
    }
    PyObject *kernel = plan.kernel != NULL ? plan.kernel : Py_NewRef(Py_None);
    long long gx = plan.kernel ? plan.launch.grid[0] : 0, gy = plan.kernel ? plan.launch.grid[1] : 0;
    return Py_BuildValue("(N(LL)NNN)", kernel, gx, gy, stream, pointers, ints);
}

static PyObject *served(PyObject *self, PyObject *unused) { return PyLong_FromUnsignedLongLong(served_calls); }

static PyMethodDef methods[] = {
    {"load_driver", load_driver, METH_NOARGS, "Resolve the CUDA driver's launch functions (OSError if absent)."},
    {"bind", bind, METH_VARARGS, "bind(function, threads, shared, n_ints, n_scratch, owner, n_window=0) -> kernel"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(kernel, gx, gy, stream, *pointers, *ints) -> bool"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, "pack(kernel, *pointers, *ints) -> bytes (for tests)"},
    {"plan", (PyCFunction)(void (*)(void))plan, METH_FASTCALL, "plan(rule, bs, N, R, C, strides...) -> tuple | None"},
    {"configure", configure, METH_VARARGS, "configure(memo, tensor_type, hooks, raw_stream, current_device, reader, rule)"},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL, "signature(backend, *arguments) -> bytes | None"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(backend, *arguments) -> bool"},
    {"planned", (PyCFunction)(void (*)(void))planned, METH_FASTCALL, "planned(backend, *arguments) -> tuple | None"},
    {"served", served, METH_NOARGS, "served() -> int: calls served by call()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kv_canary_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kv_canary_native(void) { return PyModule_Create(&module); }
