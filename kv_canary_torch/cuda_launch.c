/* The C half of kv_canary_torch/cuda_launch.py: one cuLaunchKernel per call, everything else bound once.
 *
 * Contract (module _kv_canary_cuda_launch; cuda_launch.py builds and loads it):
 *
 *   load_driver() -> None
 *       Resolves cuLaunchKernel, cuCtxGetCurrent and cuGetErrorName from libcuda.so.1 (the library torch
 *       has loaded); OSError when it cannot. Idempotent.
 *   bind(function, grid_x, grid_y, grid_z, threads, shared, sizes, values, n_pointers, owner) -> capsule
 *       A launch bound once: the CUfunction handle (an int), the grid, threads per program, dynamic shared
 *       bytes, and the kernel's parameters: `sizes` (a tuple of 4 or 8, one per parameter, in the order of the
 *       kernel's PTX entry), of which the first `n_pointers` (each 8 bytes) are filled per call and the rest
 *       hold `values` (a tuple of ints, one per remaining parameter: a 4-byte parameter is a signed 32-bit
 *       int, an 8-byte one a signed 64-bit int). `owner` (the compiled kernel that owns the function) is
 *       kept alive as long as the capsule. TypeError, ValueError or OverflowError when anything does not
 *       fit; nothing is launched.
 *   launch(bound, stream, *pointers) -> bool
 *       Fills the pointer parameters (ints, 0 <= p < 2**64) and enqueues the kernel on `stream` (a CUstream
 *       handle as an int; 0 is the legacy default stream) with cuLaunchKernel, the GIL released around
 *       the driver call as Triton's own launcher does. True once enqueued; False, with nothing enqueued,
 *       when the calling thread has no current CUDA context (the caller then takes Triton's launcher,
 *       which sets one). RuntimeError with the driver's error name when the driver refuses the launch.
 *       The parameters live on this call's stack: calls from several threads never share them, and a
 *       launch captured into a CUDA graph has its parameter values copied at capture.
 *   pack(bound, *pointers) -> bytes
 *       The parameter slots `launch` would pass (8 bytes per parameter, a 4-byte one in the slot's first
 *       bytes): for tests; touches no driver.
 *
 * The call path: a whole launcher call in C, for argument signatures that have passed the checked path before.
 *
 *   configure(memo, tensor_type, hooks_idle, raw_stream, current_device, reader=None) -> None
 *       `memo` is a dict from signature (below) to bound launch, which the caller fills after a call with that
 *       signature passed its checks and launched through a bound launch; `tensor_type` is the exact type the
 *       four arguments must have (torch.Tensor: no subclass, no other framework's array); `hooks_idle()` is
 *       true when no launch hook is installed; `raw_stream(device)` is the device's current stream as an int;
 *       `current_device()` is the current device's index, or None where the process sees one device;
 *       `reader` is tensor_meta's READER capsule, or None (then torch's Python getters are read).
 *   signature(backend, flat_in, offsets, req_pool_indices, pool_out) -> tuple | bytes | None
 *       Without a reader, (backend, then per argument: layout, dtype, shape, stride(), device); with one,
 *       bytes holding each argument's KvTensorMeta (its `data` zeroed: strided layout, dtype, device, rank,
 *       sizes, strides), then the backend's UTF-8. None when `backend` is not exactly a str, an argument is
 *       not exactly `tensor_type`, reading one raises (the error is cleared), or the reader declines one (not
 *       strided, no storage, rank above 2). TypeError for a wrong argument count, RuntimeError before
 *       `configure`. Every argument check of the spec and every launch choice is a function of these, so two
 *       calls with equal signatures pass or fail the same checks and get the same launch.
 *   call(backend, flat_in, offsets, req_pool_indices, pool_out) -> bool
 *       Launches the memo's bound launch for the arguments' signature with their data pointers, on
 *       `raw_stream(pool_out.device.index)`, and returns True; returns False, with nothing launched, when the
 *       signature is not in the memo, a pointer is not 16-byte aligned (the bound kernel's specialization), a
 *       hook is installed, the current device is not pool_out's, the driver is not loaded, or the thread has
 *       no CUDA context. An error
 *       from reading the arguments is cleared (False: the checked path reports it); a driver refusal raises
 *       RuntimeError, as `launch` does.
 *   planned(backend, flat_in, offsets, req_pool_indices, pool_out) -> (bound, stream, pointers) | None
 *       What `call` would launch, launching nothing: for tests.
 *   served() -> int
 *       How many launches `call` has made.
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

#define MAX_PARAMS 32
#define CAPSULE_NAME "kv_canary.cuda_launch.bound"

typedef struct {
    CUfunction function;
    unsigned grid[3];
    unsigned threads;
    unsigned shared;
    int n_params;
    int n_pointers;
    unsigned char sizes[MAX_PARAMS];
    uint64_t slots[MAX_PARAMS]; /* bound values; the pointer slots are filled per call */
    PyObject *owner;
} Bound;

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

static void free_bound(PyObject *capsule) {
    Bound *bound = (Bound *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (bound == NULL) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(bound->owner);
    PyMem_Free(bound);
}

static int as_dimension(PyObject *value, const char *what, unsigned *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (v == 0 || v > 0x7fffffffULL) {
        PyErr_Format(PyExc_ValueError, "%s must be in [1, 2**31 - 1], got %llu", what, v);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int store_int(uint64_t *slot, int size, PyObject *value) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    *slot = 0;
    if (size == 4) {
        if (v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "a 4-byte kernel parameter cannot hold %lld", v);
            return -1;
        }
        int32_t v32 = (int32_t)v;
        memcpy(slot, &v32, sizeof v32);
    } else {
        memcpy(slot, &v, sizeof v);
    }
    return 0;
}

static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *function, *gx, *gy, *gz, *threads, *shared, *sizes, *values, *owner;
    int n_pointers;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O!iO", &function, &gx, &gy, &gz, &threads, &shared, &PyTuple_Type, &sizes,
                          &PyTuple_Type, &values, &n_pointers, &owner))
        return NULL;
    Py_ssize_t n_params = PyTuple_GET_SIZE(sizes);
    if (n_params > MAX_PARAMS || n_pointers < 0 || n_pointers > n_params ||
        PyTuple_GET_SIZE(values) != n_params - n_pointers) {
        PyErr_Format(PyExc_ValueError, "bad parameter layout: %zd sizes (at most %d), %d pointers, %zd values",
                     n_params, MAX_PARAMS, n_pointers, PyTuple_GET_SIZE(values));
        return NULL;
    }
    Bound *bound = (Bound *)PyMem_Calloc(1, sizeof(Bound));
    if (bound == NULL) return PyErr_NoMemory();
    bound->function = PyLong_AsVoidPtr(function);
    if (bound->function == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the kernel's function handle is null");
        goto fail;
    }
    if (as_dimension(gx, "grid_x", &bound->grid[0]) < 0 || as_dimension(gy, "grid_y", &bound->grid[1]) < 0 ||
        as_dimension(gz, "grid_z", &bound->grid[2]) < 0 || as_dimension(threads, "threads", &bound->threads) < 0)
        goto fail;
    unsigned long long smem = PyLong_AsUnsignedLongLong(shared);
    if (smem == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
    if (smem > 0xffffffffULL) {
        PyErr_SetString(PyExc_ValueError, "shared memory bytes out of range");
        goto fail;
    }
    bound->shared = (unsigned)smem;
    bound->n_params = (int)n_params;
    bound->n_pointers = n_pointers;
    for (Py_ssize_t i = 0; i < n_params; ++i) {
        long size = PyLong_AsLong(PyTuple_GET_ITEM(sizes, i));
        if (size == -1 && PyErr_Occurred()) goto fail;
        if ((size != 4 && size != 8) || (i < n_pointers && size != 8)) {
            PyErr_Format(PyExc_ValueError, "parameter %zd: size %ld (pointers take 8 bytes, others 4 or 8)", i, size);
            goto fail;
        }
        bound->sizes[i] = (unsigned char)size;
        if (i >= n_pointers && store_int(&bound->slots[i], (int)size, PyTuple_GET_ITEM(values, i - n_pointers)) < 0)
            goto fail;
    }
    Py_INCREF(owner);
    bound->owner = owner;
    PyObject *capsule = PyCapsule_New(bound, CAPSULE_NAME, free_bound);
    if (capsule == NULL) {
        Py_DECREF(owner);
        goto fail;
    }
    return capsule;
fail:
    PyMem_Free(bound);
    return NULL;
}

/* The parameter slots of one launch: the bound values, the first n_pointers slots holding `pointers`; `params`
 * point at the slots, as cuLaunchKernel takes them. */
static void set_params(const Bound *bound, const uint64_t *pointers, uint64_t *slots, void **params) {
    memcpy(slots, bound->slots, sizeof(uint64_t) * bound->n_params);
    memcpy(slots, pointers, sizeof(uint64_t) * bound->n_pointers);
    for (int i = 0; i < bound->n_params; ++i) params[i] = &slots[i];
}

/* The parameter slots of one call: the bound ones, then the pointers of `pointers` (n_pointers of them). */
static Bound *fill(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t before, uint64_t *slots, void **params) {
    if (nargs < before) {
        PyErr_SetString(PyExc_TypeError, "missing the bound launch");
        return NULL;
    }
    Bound *bound = (Bound *)PyCapsule_GetPointer(args[0], CAPSULE_NAME);
    if (bound == NULL) return NULL;
    if (nargs != before + bound->n_pointers) {
        PyErr_Format(PyExc_TypeError, "this launch takes %d pointers, got %zd", bound->n_pointers, nargs - before);
        return NULL;
    }
    uint64_t pointers[MAX_PARAMS];
    for (int i = 0; i < bound->n_pointers; ++i) {
        unsigned long long p = PyLong_AsUnsignedLongLong(args[before + i]);
        if (p == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        pointers[i] = (uint64_t)p;
    }
    set_params(bound, pointers, slots, params);
    return bound;
}

/* RuntimeError naming the driver's error; NULL. */
static PyObject *launch_error(CUresult result) {
    const char *name = NULL;
    if (get_error_name(result, &name) != 0) name = NULL;
    PyErr_Format(PyExc_RuntimeError, "kv-canary: cuLaunchKernel failed: %s (%d)", name ? name : "unknown error",
                 result);
    return NULL;
}

/* Enqueue `bound` with these parameters on `stream`: True; False (nothing enqueued) when the thread has no current
 * CUDA context; NULL with RuntimeError when the driver is not loaded or refuses the launch. */
static PyObject *enqueue(Bound *bound, CUstream stream, void **params) {
    if (launch_kernel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the CUDA driver is not loaded (load_driver)");
        return NULL;
    }
    CUcontext context = NULL;
    if (ctx_get_current(&context) != 0 || context == NULL) Py_RETURN_FALSE;
    CUresult result;
    Py_BEGIN_ALLOW_THREADS
    result = launch_kernel(bound->function, bound->grid[0], bound->grid[1], bound->grid[2], bound->threads, 1, 1,
                           bound->shared, stream, params, NULL);
    Py_END_ALLOW_THREADS
    if (result != 0) return launch_error(result);
    Py_RETURN_TRUE;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    Bound *bound = fill(args, nargs, 2, slots, params);
    if (bound == NULL) return NULL;
    CUstream stream = (CUstream)PyLong_AsVoidPtr(args[1]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    return enqueue(bound, stream, params);
}

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    Bound *bound = fill(args, nargs, 1, slots, params);
    if (bound == NULL) return NULL;
    return PyBytes_FromStringAndSize((const char *)slots, sizeof(uint64_t) * bound->n_params);
}


/* The call path (see the contract at the top). */
static PyObject *memo, *tensor_type, *hooks_idle, *raw_stream, *current_device;
static kv_tensor_meta_read reader; /* NULL: torch's Python getters */
static PyObject *s_layout, *s_dtype, *s_shape, *s_stride, *s_device, *s_index, *s_data_ptr;
static unsigned long long served_calls;
#define N_TENSORS 4
#define PER_TENSOR 5 /* layout, dtype, shape, stride(), device */

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *m, *t, *h, *r, *d, *read = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!OOO|O", &PyDict_Type, &m, &PyType_Type, &t, &h, &r, &d, &read)) return NULL;
    kv_tensor_meta_read chosen = NULL;
    if (read != Py_None) {
        chosen = (kv_tensor_meta_read)PyCapsule_GetPointer(read, KV_TENSOR_META_CAPSULE);
        if (chosen == NULL) return NULL;
    }
    if (!PyCallable_Check(h) || !PyCallable_Check(r) || (d != Py_None && !PyCallable_Check(d))) {
        PyErr_SetString(PyExc_TypeError, "hooks_idle, raw_stream and current_device (or None) must be callable");
        return NULL;
    }
    if (s_dtype == NULL) {
        s_layout = PyUnicode_InternFromString("layout");
        s_dtype = PyUnicode_InternFromString("dtype");
        s_shape = PyUnicode_InternFromString("shape");
        s_stride = PyUnicode_InternFromString("stride");
        s_device = PyUnicode_InternFromString("device");
        s_index = PyUnicode_InternFromString("index");
        s_data_ptr = PyUnicode_InternFromString("data_ptr");
        if (!s_layout || !s_dtype || !s_shape || !s_stride || !s_device || !s_index || !s_data_ptr) return NULL;
    }
    Py_INCREF(m); Py_XSETREF(memo, m);
    Py_INCREF(t); Py_XSETREF(tensor_type, t);
    Py_INCREF(h); Py_XSETREF(hooks_idle, h);
    Py_INCREF(r); Py_XSETREF(raw_stream, r);
    if (d == Py_None) Py_CLEAR(current_device);
    else { Py_INCREF(d); Py_XSETREF(current_device, d); }
    reader = chosen;
    Py_RETURN_NONE;
}

/* The signature through the reader: bytes (see the contract); NULL when the reader declines an argument (no error
 * set) or the backend has no UTF-8 (an error set). `data` gets the four data pointers and `device` pool_out's
 * device index. */
static PyObject *read_signature(PyObject *backend, PyObject *const *tensors, uint64_t *data, int64_t *device) {
    Py_ssize_t n_backend;
    const char *name = PyUnicode_AsUTF8AndSize(backend, &n_backend);
    if (name == NULL) return NULL;
    KvTensorMeta metas[N_TENSORS];
    for (int i = 0; i < N_TENSORS; ++i) {
        if (reader(tensors[i], &metas[i]) != 1) return NULL;
        data[i] = metas[i].data;
        metas[i].data = 0;
    }
    *device = metas[N_TENSORS - 1].device_index;
    PyObject *sig = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof metas + n_backend);
    if (sig == NULL) return NULL;
    memcpy(PyBytes_AS_STRING(sig), metas, sizeof metas);
    memcpy(PyBytes_AS_STRING(sig) + sizeof metas, name, (size_t)n_backend);
    return sig;
}

/* The signature through torch's Python getters: a new tuple; NULL with an error set when a getter raises. */
static PyObject *read_getters(PyObject *const *args) {
    PyObject *sig = PyTuple_New(1 + N_TENSORS * PER_TENSOR);
    if (sig == NULL) return NULL;
    Py_INCREF(args[0]);
    PyTuple_SET_ITEM(sig, 0, args[0]);
    for (int i = 0; i < N_TENSORS; ++i) {
        PyObject *t = args[1 + i];
        PyObject *items[PER_TENSOR] = {
            PyObject_GetAttr(t, s_layout), PyObject_GetAttr(t, s_dtype), PyObject_GetAttr(t, s_shape), PyObject_CallMethodNoArgs(t, s_stride),
            PyObject_GetAttr(t, s_device),
        };
        for (int k = 0; k < PER_TENSOR; ++k) PyTuple_SET_ITEM(sig, 1 + i * PER_TENSOR + k, items[k]);
        for (int k = 0; k < PER_TENSOR; ++k) {
            if (items[k] == NULL) {
                Py_DECREF(sig);
                return NULL; /* an error is set */
            }
        }
    }
    return sig;
}

/* The signature of args[0..4] (backend, four tensors): a new tuple or bytes. NULL with an error set only for a
 * misuse (a wrong argument count, the call path unconfigured); NULL with none when the arguments have no
 * signature, an error from reading them cleared. Through the reader it also sets data[] and *device (and *read
 * to 1). */
static PyObject *make_signature(PyObject *const *args, Py_ssize_t nargs, uint64_t *data, int64_t *device, int *read) {
    if (nargs != 1 + N_TENSORS) {
        PyErr_Format(PyExc_TypeError, "expected backend and %d arguments, got %zd", N_TENSORS, nargs);
        return NULL;
    }
    if (memo == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the call path is not configured (configure)");
        return NULL;
    }
    if (!PyUnicode_CheckExact(args[0])) return NULL;
    for (int i = 1; i <= N_TENSORS; ++i)
        if (Py_TYPE(args[i]) != (PyTypeObject *)tensor_type) return NULL;
    *read = reader != NULL;
    PyObject *sig = *read ? read_signature(args[0], args + 1, data, device) : read_getters(args);
    if (sig == NULL) PyErr_Clear(); /* unreadable metadata (a backend with no UTF-8, a sparse tensor's strides) */
    return sig;
}

static PyObject *signature(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t data[N_TENSORS];
    int64_t device;
    int read;
    PyObject *sig = make_signature(args, nargs, data, &device, &read);
    if (sig != NULL || PyErr_Occurred()) return sig;
    Py_RETURN_NONE;
}

/* What call() launches. */
typedef struct {
    PyObject *capsule; /* a new reference: the callbacks of plan_call may drop the memo's */
    Bound *bound;      /* the capsule's launch */
    CUstream stream;
    uint64_t pointers[N_TENSORS];
} Planned;

/* 1 with *plan set; 0 when call() launches nothing (no error set); -1 on an error that must propagate (the call
 * path unconfigured, a wrong argument count). */
static int plan_call(PyObject *const *args, Py_ssize_t nargs, Planned *plan) {
    int64_t index;
    int read = 0;
    PyObject *sig = make_signature(args, nargs, plan->pointers, &index, &read);
    if (sig == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *found = PyDict_GetItemWithError(memo, sig); /* borrowed */
    Py_XINCREF(found);
    int ok = 0;
    PyObject *device = NULL;
    if (found == NULL) {
        Py_DECREF(sig);
        goto done;
    }
    if (read) { /* pool_out.device.index, the pointers already read */
        if (index < 0) {
            Py_INCREF(Py_None);
            device = Py_None;
        } else {
            device = PyLong_FromLongLong(index);
        }
    } else {
        device = PyObject_GetAttr(PyTuple_GET_ITEM(sig, N_TENSORS * PER_TENSOR), s_index);
    }
    Py_DECREF(sig);
    if (device == NULL) goto done;
    plan->bound = (Bound *)PyCapsule_GetPointer(found, CAPSULE_NAME);
    if (plan->bound == NULL || plan->bound->n_pointers != N_TENSORS) goto done;
    uint64_t any = 0;
    for (int i = 0; i < N_TENSORS; ++i) {
        if (!read) {
            PyObject *p = PyObject_CallMethodNoArgs(args[1 + i], s_data_ptr);
            if (p == NULL) goto done;
            plan->pointers[i] = (uint64_t)PyLong_AsUnsignedLongLong(p);
            Py_DECREF(p);
            if (plan->pointers[i] == (uint64_t)-1 && PyErr_Occurred()) goto done;
        }
        any |= plan->pointers[i];
    }
    /* The per-call conditions of triton_launch._FastLaunch.may_launch, its twin: aligned pointers (the kernel's
     * specialization), no launch hook, and the pool's device current where the process sees several. */
    if (any & 15) goto done;
    PyObject *idle = PyObject_CallNoArgs(hooks_idle);
    if (idle == NULL) goto done;
    int is_idle = PyObject_IsTrue(idle);
    Py_DECREF(idle);
    if (is_idle != 1) goto done;
    if (current_device != NULL) {
        PyObject *now = PyObject_CallNoArgs(current_device);
        if (now == NULL) goto done;
        int same = PyObject_RichCompareBool(now, device, Py_EQ);
        Py_DECREF(now);
        if (same != 1) goto done;
    }
    PyObject *s = PyObject_CallOneArg(raw_stream, device);
    if (s == NULL) goto done;
    plan->stream = (CUstream)PyLong_AsVoidPtr(s);
    Py_DECREF(s);
    if (plan->stream == NULL && PyErr_Occurred()) goto done;
    ok = 1;
    plan->capsule = found;
done:
    Py_XDECREF(device);
    if (!ok) {
        Py_XDECREF(found);
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
    if (launch_kernel == NULL) { /* no driver: nothing launched, the caller takes its way */
        Py_DECREF(plan.capsule);
        Py_RETURN_FALSE;
    }
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    set_params(plan.bound, plan.pointers, slots, params); /* plan_call checked n_pointers == N_TENSORS */
    PyObject *launched = enqueue(plan.bound, plan.stream, params);
    Py_DECREF(plan.capsule);
    if (launched == Py_True) ++served_calls;
    return launched;
}

static PyObject *planned(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Planned plan;
    int found = plan_call(args, nargs, &plan);
    if (found <= 0) {
        if (found < 0) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NN(KKKK))", plan.capsule, PyLong_FromVoidPtr(plan.stream),
                         (unsigned long long)plan.pointers[0], (unsigned long long)plan.pointers[1],
                         (unsigned long long)plan.pointers[2], (unsigned long long)plan.pointers[3]);
}

static PyObject *served(PyObject *self, PyObject *unused) { return PyLong_FromUnsignedLongLong(served_calls); }

static PyMethodDef methods[] = {
    {"load_driver", load_driver, METH_NOARGS, "Resolve the CUDA driver's launch functions (OSError if absent)."},
    {"bind", bind, METH_VARARGS, "Bind a kernel launch once: a capsule for launch()."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(bound, stream, *pointers) -> bool"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, "pack(bound, *pointers) -> bytes (for tests)"},
    {"configure", configure, METH_VARARGS, "configure(memo, tensor_type, hooks_idle, raw_stream, current_device, reader=None)"},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL, "signature(backend, *arguments) -> tuple | bytes | None"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(backend, *arguments) -> bool"},
    {"planned", (PyCFunction)(void (*)(void))planned, METH_FASTCALL, "planned(backend, *arguments) -> tuple | None"},
    {"served", served, METH_NOARGS, "served() -> int: launches made by call()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kv_canary_cuda_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kv_canary_cuda_launch(void) { return PyModule_Create(&module); }
