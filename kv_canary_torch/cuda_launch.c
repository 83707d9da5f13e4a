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
 * No CUDA header is needed: the three driver functions are declared here with the driver API's types
 * (CUresult is an int, the handles are pointers) and looked up with dlsym.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

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
    memcpy(slots, bound->slots, sizeof(uint64_t) * bound->n_params);
    for (int i = 0; i < bound->n_pointers; ++i) {
        unsigned long long p = PyLong_AsUnsignedLongLong(args[before + i]);
        if (p == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        uint64_t p64 = (uint64_t)p;
        memcpy(&slots[i], &p64, sizeof p64);
    }
    for (int i = 0; i < bound->n_params; ++i) params[i] = &slots[i];
    return bound;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    Bound *bound = fill(args, nargs, 2, slots, params);
    if (bound == NULL) return NULL;
    CUstream stream = (CUstream)PyLong_AsVoidPtr(args[1]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
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
    if (result != 0) {
        const char *name = NULL;
        if (get_error_name(result, &name) != 0) name = NULL;
        PyErr_Format(PyExc_RuntimeError, "kv-canary: cuLaunchKernel failed: %s (%d)", name ? name : "unknown error",
                     result);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    Bound *bound = fill(args, nargs, 1, slots, params);
    if (bound == NULL) return NULL;
    return PyBytes_FromStringAndSize((const char *)slots, sizeof(uint64_t) * bound->n_params);
}

static PyMethodDef methods[] = {
    {"load_driver", load_driver, METH_NOARGS, "Resolve the CUDA driver's launch functions (OSError if absent)."},
    {"bind", bind, METH_VARARGS, "Bind a kernel launch once: a capsule for launch()."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(bound, stream, *pointers) -> bool"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, "pack(bound, *pointers) -> bytes (for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kv_canary_cuda_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kv_canary_cuda_launch(void) { return PyModule_Create(&module); }
