/* The launcher's native piece: a remembered call read, planned and launched in C++, no Python frame.
 *
 * Two ops take this one path, each an `Op` descriptor (its tensors, the lengths its signature zeroes, its length
 * relations, its plan, its kernels' layout): the scatter (`call`, `signature`) and sglang's assignment
 * (`assign`, `assign_signature`); the reader, memo, checks of each launch and the launch are the same code.
 *
 * Contract (module _kv_canary_native; native.py builds and loads it):
 *
 *   load_driver(library="libcuda.so.1") -> None
 *       Resolves cuLaunchKernel, cuCtxGetCurrent and cuGetErrorName from `library` (torch has loaded the real
 *       one), and cuMemcpyHtoDAsync_v2 where it has it (copy_to_device); OSError when it lacks one of the three.
 *       The first library that loads stays.
 *   bind(function, threads, shared, n_ints, n_scratch, owner, n_window=0, n_pointers=4) -> kernel
 *       A compiled kernel bound once (a capsule): the CUfunction handle (an int), threads per program, dynamic
 *       shared bytes, and its parameter layout: n_pointers 8-byte pointers (the scatter's four: flat_in, offsets,
 *       req_pool_indices, pool_out; the assignment's five, in its argument order), then n_ints 4-byte signed ints
 *       (at most MAX_INTS), then n_window 8-byte pointers (0, or 1 for a windowed scatter kernel: start_cols, whose
 *       unit stride Triton compiled in; n_pointers + n_window at most MAX_TENSORS), then n_scratch 8-byte pointers
 *       passed null (at most MAX_SCRATCH: Triton's global and profile scratch, which a plain launch leaves null).
 *       `owner` (the compiled kernel that owns the function) is kept alive as long as the capsule. ValueError,
 *       TypeError or OverflowError when anything does not fit.
 *   configure(*, memo, tensor_type, hooks, raw_stream, current_device, rule) -> None
 *       `memo` is a dict from signature (below) to a list of rule["slots"] entries (an assignment's signature: one),
 *       each None or a kernel of `bind` (the variants of plan.py's slots), which the caller fills after a call with
 *       that signature passed its checks; `tensor_type` is the exact type the arguments must have (torch.Tensor:
 *       no subclass, no other framework's array); `hooks` holds Triton's launch hooks (`launch_enter_hook`, `launch_exit_hook`: none
 *       is installed when each is absent, None or has an empty `calls`); `raw_stream(device)` is the device's
 *       current stream as an int; `current_device()` is the current device's index, or None where the process
 *       sees one device; `rule` maps plan.native_config()'s names to the launch rule's numbers and the slots', the
 *       assignment's grid numbers (plan.assign_grid's) and the spec's MAX_REQUESTS.
 *       It forgets the family found last (below). ValueError or TypeError when any of them does not fit.
 *   signature(backend, flat_in, offsets, req_pool_indices, pool_out[, start_cols]) -> bytes | None
 *       The op's tag (an 8-byte word: 0 for the scatter, 1 for the assignment, so that the two ops' memo entries
 *       never meet), then each argument's metadata (read_meta) with its data pointer zeroed, and with the length
 *       of each of the first three zeroed (N, bs + 1 and bs: what changes every serving step), then start_cols'
 *       likewise (its length bs zeroed) where it is given and not None (a windowed call), then the backend's UTF-8. None when
 *       `backend` is not exactly a str (or has no UTF-8), an argument is not exactly `tensor_type`, or read_meta
 *       declines one. TypeError for a wrong argument count, RuntimeError before `configure`. Every argument
 *       check of the spec is a function of the signature and of one relation between the zeroed lengths
 *       (len(offsets) == bs + 1, which `call` tests itself), and every launch choice a function of the
 *       signature, N and bs (`plan`), so two calls with equal signatures and that relation pass or fail alike.
 *   call(backend, flat_in, offsets, req_pool_indices, pool_out[, start_cols]) -> True | bytes | None
 *       For arguments whose signature is in the memo, whose offsets are one longer than req_pool_indices and,
 *       windowed, whose start_cols is as long as req_pool_indices (its data pointer the kernel's window pointer):
 *       plans the launch from N and bs (`plan`), launches the memo's kernel for its slot with the arguments'
 *       data pointers on `raw_stream(pool_out.device.index)` and returns True, or returns True at once when no
 *       cell can be written. Otherwise, with nothing launched, it returns the arguments' signature (None where
 *       they have none), for the caller's checked path and its memo: the signature is not remembered, the lengths
 *       do not relate, the slot holds no kernel, an int or bs does not fit int32 (bs is grid axis 0), a pointer
 *       is not 16-byte aligned (the kernels' specialization), a hook is installed, the current device is not
 *       pool_out's, the driver is not loaded, or the thread has no CUDA context. A driver refusal raises
 *       RuntimeError with the driver's error name. The launch's parameters live on this call's stack: calls from
 *       several threads never share them, and a launch captured into a CUDA graph has them copied at capture.
 *       The GIL is released around the driver call, as Triton's own launcher does. It keeps the last family the
 *       memo answered (until the next `configure`), so that a run of calls with one signature builds and hashes
 *       no bytes: a family, once found, stays valid (the checks are functions of the signature).
 *   assign_signature(backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)
 *       -> bytes | None
 *       The assignment's signature: its tag, then each tensor's metadata with its data pointer zeroed and the
 *       length of every 1-D one zeroed (the per-request arrays' and out_cache_loc's: what changes every serving
 *       step; the table's shape stays), then the backend's UTF-8; batch_size is not in it. None and the errors as
 *       for `signature`. Every check of the assignment (shared_spec.assignment.CHECK_ORDER) is a function of the
 *       signature and of batch_size's relations that `assign` tests itself (an exact int, not a bool, or None;
 *       0 <= bs <= the length of each per-request array; bs <= MAX_REQUESTS; bs * len(out_cache_loc) < 2**63).
 *   assign(backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)
 *       -> True | bytes | None
 *       `call` for the assignment: for a remembered signature whose batch_size relates (above), bs being
 *       batch_size (None: len(req_pool_indices)), launches the family's one kernel with grid plan.assign_grid(bs)
 *       and its ten ints (bs, len(out_cache_loc), the table's shape, the five tensors' strides in argument
 *       order, the table's column stride last) on `raw_stream(req_to_token.device.index)`, or returns True at once
 *       for bs 0. Entries past bs are never read: the kernel takes bs as an int. Otherwise the same declines as
 *       `call` (the family is not of one slot, its kernel's layout is not five pointers and ten ints, ...), with
 *       the assignment's signature back.
 *   plan(bs, n_tokens, n_rows, width, stride_row, stride_col, flat_stride, offsets_stride, rows_stride)
 *       -> (slot, (grid_x, grid_y), ints, small_ints) | None
 *       What `call` plans under the configured rule: plan.plan's slot, grid, ints and small_ints (None where it
 *       gives NOTHING). RuntimeError before `configure`, ValueError for a negative size or stride.
 *   served() -> int
 *       How many calls `call` and `assign` have served (launched, or found nothing to write).
 *   stage_ints(values, rows, cols, tokens_at, rows_at, cols_at, count, bs) -> bool
 *       The incremental step's packing: writes the list `values` (exactly `count` entries, each an int an int64
 *       holds) as int64 to host address `tokens_at`, and the `bs` entries of `rows` and of `cols` (each an object
 *       with a 1-D buffer of `bs` 8-byte signed ints, any strides: a numpy int64 array) to `rows_at` and `cols_at`,
 *       and returns True. False where any of that does not hold (what it wrote before is left): the caller then
 *       packs the step its own way, which names what is wrong. The sampler's list without a Python object per
 *       entry (an `array("q")` parses each through its format code), the two arrays without numpy's dispatch.
 *       ValueError for a negative count or bs.
 *   copy_to_device(dst, src, nbytes, stream) -> bool
 *       Enqueues the driver's asynchronous copy (cuMemcpyHtoDAsync) of `nbytes` bytes from host address `src` to
 *       device address `dst` on `stream` (ints) and returns True; False, with nothing enqueued, where the driver has
 *       no such copy or the thread has no CUDA context (the caller copies through torch). The caller owns the
 *       hazards torch's copy would guard: `src` page-locked and alive until the copy has run (IncrementalWriter's
 *       ring of events), `dst` on the stream's device. A driver refusal raises RuntimeError with its name;
 *       ValueError for a negative size. The GIL is released around the driver call.
 *
 * read_meta: a torch.Tensor's metadata from its at::Tensor, no Python call. It fills a TensorMeta when the tensor
 * is defined, strided and not nested, has storage, has at most 2 dimensions (sizes and strides past its rank are
 * 0), has neither its negative nor its conjugate bit set (a lazy view whose memory does not hold what the tensor
 * reads), is no wrapper of a transform (functionalize, vmap, grad), no zero tensor and no Python-dispatched
 * tensor, and has memory behind every element (kv_canary_arrays.describe.torch_backed: no element, or a data
 * pointer that is not null and a storage reaching the last byte its sizes and strides address, in 128-bit
 * arithmetic, a storage freed or shrunk since an earlier call failing it); else the arguments have no signature.
 * It never raises and lets no C++ exception out. `flags` marks an inference tensor read outside inference mode,
 * so that such a pool has a signature of its own, which the checks refuse (it is never remembered). Reading the
 * same fields through torch's Python getters costs about 2 us per call of four tensors on the H200 host.
 *
 * No CUDA header is needed: the three driver functions are declared here with the driver API's types
 * (CUresult is an int, the handles are pointers) and looked up with dlsym.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>

#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/python_variable.h>

#if PY_VERSION_HEX >= 0x030D0000
#define get_optional_attr PyObject_GetOptionalAttr
#else
#define get_optional_attr _PyObject_LookupAttr /* the same function before Python 3.13 made it public */
#endif

namespace {

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;
typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
typedef CUresult (*ctx_get_current_fn)(CUcontext *);
typedef CUresult (*get_error_name_fn)(CUresult, const char **);
typedef CUresult (*memcpy_htod_async_fn)(uint64_t, const void *, size_t, CUstream);

launch_kernel_fn launch_kernel;
ctx_get_current_fn ctx_get_current;
get_error_name_fn get_error_name;
memcpy_htod_async_fn memcpy_htod_async; /* optional: copy_to_device declines without it */

constexpr int N_TENSORS = 4; /* flat_in, offsets, req_pool_indices, pool_out: the scatter kernels' first pointers */
constexpr int MAX_WINDOW = 1; /* start_cols, after the ints, in a windowed kernel */
constexpr int MAX_TENSORS = 5; /* a windowed scatter's, the assignment's */
constexpr int MAX_INTS = 10;   /* the assignment kernel's */
constexpr int MAX_SCRATCH = 2;
constexpr int MAX_PARAMS = MAX_TENSORS + MAX_INTS + MAX_SCRATCH;
constexpr int MAX_SLOTS = 16;
constexpr int64_t INT32_END = int64_t(1) << 31;
constexpr const char *CAPSULE_NAME = "kv_canary.native.kernel";
enum { FLAT, OFFSETS, ROWS, POOL, START };

/* ---- the tensor reader ---- */

constexpr int64_t INFERENCE_OUTSIDE = 1; /* an inference tensor read outside torch.inference_mode() */

struct TensorMeta {
    int64_t dtype;        /* c10::ScalarType */
    int64_t device_type;  /* c10::DeviceType */
    int64_t device_index; /* -1: none */
    int64_t ndim;         /* at most 2 */
    int64_t sizes[2];     /* 0 past ndim */
    int64_t strides[2];   /* 0 past ndim */
    int64_t flags;        /* INFERENCE_OUTSIDE */
    uint64_t data;        /* data_ptr() */
};

/* Tensors whose data pointer and storage are not the memory their elements read: a transform's wrapper (its
 * kernels are its transform's, which the launcher's checked path runs instead), a zero tensor (no data), a
 * Python-dispatched one. */
const c10::DispatchKeySet kNotPlain({c10::DispatchKey::Functionalize, c10::DispatchKey::FuncTorchBatched,
                                     c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::ZeroTensor,
                                     c10::DispatchKey::Python});

/* Memory holds every element: none, or a data pointer that is not null and a storage that reaches the last byte
 * the sizes and strides address (strides are never negative), in 128-bit arithmetic for any sizes. */
bool backed(const at::Tensor &t) {
    __int128 last = t.storage_offset();
    for (int64_t i = 0; i < t.dim(); ++i) {
        if (t.size(i) == 0) return true;
        last += static_cast<__int128>(t.size(i) - 1) * t.stride(i);
    }
    if (t.data_ptr() == nullptr) return false;
    return (last + 1) * static_cast<__int128>(t.element_size()) <= static_cast<__int128>(t.storage().nbytes());
}

/* 1 with `out` filled, 0 when the tensor is declined (the contract at the top); `tensor` is exactly torch.Tensor. */
int read_meta(PyObject *tensor, TensorMeta *out) noexcept {
    try {
        const at::Tensor &t = THPVariable_Unpack(tensor);
        if (!t.defined() || t.layout() != c10::kStrided || t.is_nested() || !t.has_storage() || t.dim() > 2 ||
            t.is_neg() || t.is_conj() || t.key_set().has_any(kNotPlain) || !backed(t))
            return 0;
        out->flags = t.is_inference() && !c10::InferenceMode::is_enabled() ? INFERENCE_OUTSIDE : 0;
        out->dtype = static_cast<int64_t>(t.scalar_type());
        out->device_type = static_cast<int64_t>(t.device().type());
        out->device_index = t.device().index();
        out->ndim = t.dim();
        for (int64_t i = 0; i < 2; ++i) {
            out->sizes[i] = i < out->ndim ? t.size(i) : 0;
            out->strides[i] = i < out->ndim ? t.stride(i) : 0;
        }
        out->data = reinterpret_cast<uint64_t>(t.data_ptr());
        return 1;
    } catch (...) {
        return 0;
    }
}

/* ---- bound kernels and the driver ---- */

struct Kernel {
    CUfunction function;
    unsigned threads;
    unsigned shared;
    int n_ints;
    int n_scratch;
    int n_window;
    int n_pointers; /* the pointers before the ints */
    PyObject *owner;
};

PyObject *load_driver(PyObject *, PyObject *args) {
    const char *library = "libcuda.so.1";
    if (!PyArg_ParseTuple(args, "|s", &library)) return nullptr;
    if (launch_kernel != nullptr) Py_RETURN_NONE;
    void *lib = dlopen(library, RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) {
        const char *why = dlerror();
        PyErr_Format(PyExc_OSError, "cannot load %s: %s", library, why ? why : "unknown error");
        return nullptr;
    }
    auto launch = reinterpret_cast<launch_kernel_fn>(dlsym(lib, "cuLaunchKernel"));
    auto current = reinterpret_cast<ctx_get_current_fn>(dlsym(lib, "cuCtxGetCurrent"));
    auto name = reinterpret_cast<get_error_name_fn>(dlsym(lib, "cuGetErrorName"));
    if (launch == nullptr || current == nullptr || name == nullptr) {
        dlclose(lib);
        PyErr_Format(PyExc_OSError, "%s lacks cuLaunchKernel, cuCtxGetCurrent or cuGetErrorName", library);
        return nullptr;
    }
    ctx_get_current = current;
    get_error_name = name;
    memcpy_htod_async = reinterpret_cast<memcpy_htod_async_fn>(dlsym(lib, "cuMemcpyHtoDAsync_v2"));
    launch_kernel = launch; /* last: it marks the driver as loaded */
    Py_RETURN_NONE;
}

void free_kernel(PyObject *capsule) {
    auto *kernel = static_cast<Kernel *>(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
    if (kernel == nullptr) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(kernel->owner);
    PyMem_Free(kernel);
}

PyObject *bind(PyObject *, PyObject *args) {
    PyObject *function, *owner;
    unsigned long threads, shared;
    int n_ints, n_scratch, n_window = 0, n_pointers = N_TENSORS;
    if (!PyArg_ParseTuple(args, "OkkiiO|ii", &function, &threads, &shared, &n_ints, &n_scratch, &owner, &n_window,
                          &n_pointers))
        return nullptr;
    if (threads < 1 || threads > 1024 || shared > 0xffffffffUL || n_ints < 0 || n_ints > MAX_INTS || n_scratch < 0 ||
        n_scratch > MAX_SCRATCH || n_window < 0 || n_window > MAX_WINDOW || n_pointers < 1 ||
        n_pointers + n_window > MAX_TENSORS) {
        PyErr_Format(PyExc_ValueError,
                     "bad kernel: %lu threads (1 to 1024), %d ints (at most %d), %d scratch (at most %d), %d window (at "
                     "most %d), %d pointers (with the window at most %d)",
                     threads, n_ints, MAX_INTS, n_scratch, MAX_SCRATCH, n_window, MAX_WINDOW, n_pointers, MAX_TENSORS);
        return nullptr;
    }
    CUfunction handle = PyLong_AsVoidPtr(function);
    if (handle == nullptr) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the kernel's function handle is null");
        return nullptr;
    }
    auto *kernel = static_cast<Kernel *>(PyMem_Calloc(1, sizeof(Kernel)));
    if (kernel == nullptr) return PyErr_NoMemory();
    *kernel = Kernel{handle, unsigned(threads), unsigned(shared), n_ints, n_scratch, n_window, n_pointers, owner};
    Py_INCREF(owner);
    PyObject *capsule = PyCapsule_New(kernel, CAPSULE_NAME, free_kernel);
    if (capsule == nullptr) {
        Py_DECREF(owner);
        PyMem_Free(kernel);
    }
    return capsule;
}

/* ---- the launch rule: plan.py's plan() in C, over the numbers configure took from plan.native_config() ---- */

struct Rule {
    int64_t small_cells, small_block, large_block, target_programs, tiled_min_tokens, tiled_min_tiles, tiled_fill,
        grid_axis_1, slots, loop_slot, tiled_slot;
    int64_t assign_group, assign_target_programs, assign_max_split, max_requests; /* plan.assign_grid's, the spec's */
};

struct Launch {
    int slot; /* -1: no cell can be written */
    int64_t grid[2];
    int n_ints;
    int64_t ints[MAX_INTS];
    bool small_ints; /* every int, and bs, < 2**31 */
};

/* `rule`'s numbers from `mapping`, by name: 0, or -1 with an error set. */
int read_rule(PyObject *mapping, Rule *rule) {
    static const char *const names[] = {"small_cells", "small_block", "large_block", "target_programs",
                                        "tiled_min_tokens", "tiled_min_tiles", "tiled_fill", "grid_axis_1",
                                        "slots", "loop_slot", "tiled_slot", "assign_group",
                                        "assign_target_programs", "assign_max_split", "max_requests"};
    int64_t v[sizeof names / sizeof *names];
    if (!PyMapping_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "the rule is a mapping of names to ints (plan.native_config())");
        return -1;
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
        PyObject *item = PyMapping_GetItemString(mapping, names[i]);
        if (item == nullptr) return -1;
        v[i] = PyLong_AsLongLong(item);
        Py_DECREF(item);
        if (v[i] == -1 && PyErr_Occurred()) return -1;
    }
    *rule = Rule{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14]};
    if (rule->assign_group < 1 || rule->assign_target_programs < 1 || rule->assign_max_split < 1) {
        PyErr_SetString(PyExc_ValueError, "the assignment's group, target and split must be positive");
        return -1;
    }
    if (rule->small_block < 1 || rule->large_block < 1 || rule->target_programs < 1 || rule->slots > MAX_SLOTS ||
        rule->slots < 4 || rule->loop_slot < 4 || rule->loop_slot + 1 >= rule->slots || rule->tiled_slot < 0 ||
        rule->tiled_slot >= rule->slots || (rule->tiled_slot >= rule->loop_slot && rule->tiled_slot <= rule->loop_slot + 1)) {
        PyErr_SetString(PyExc_ValueError, "the rule's blocks and target must be positive, its slots distinct and fewer than 16");
        return -1;
    }
    return 0;
}

int64_t cdiv(int64_t a, int64_t b) { return a / b + (a % b != 0); } /* a >= 0, b > 0 */

/* plan.plan() for these sizes and strides (all >= 0, as torch's are). Products are taken in 128 bits: nothing
 * here overflows for any int64 inputs. */
void plan_launch(const Rule &rule, int64_t bs, int64_t n_tokens, int64_t n_rows, int64_t width, int64_t stride_row,
                 int64_t stride_col, int64_t flat_stride, int64_t offsets_stride, int64_t rows_stride, Launch *out) {
    if (bs == 0 || n_tokens == 0 || n_rows == 0 || width == 0) {
        out->slot = -1;
        return;
    }
    int64_t window = width < n_tokens ? width : n_tokens; /* shared_spec.reference.longest_window */
    bool large = static_cast<__int128>(bs) * window > rule.small_cells;
    int64_t block = large ? rule.large_block : rule.small_block;
    int64_t tiles = cdiv(window, block) + 1;
    /* 100 * N >= fill * bs * window, as bs * window <= floor(100 * N / fill): no product past 128 bits */
    bool full = rule.tiled_fill <= 0 ||
                static_cast<__int128>(bs) * window <= static_cast<__int128>(100) * n_tokens / rule.tiled_fill;
    int64_t *ints = out->ints;
    if (flat_stride == 1 && stride_col == 1 && large && n_tokens >= rule.tiled_min_tokens &&
        tiles - 1 >= rule.tiled_min_tiles && full && tiles <= rule.grid_axis_1) {
        out->slot = int(rule.tiled_slot);
        out->grid[1] = tiles;
        out->n_ints = 6;
        const int64_t v[6] = {n_tokens, n_rows, width, offsets_stride, rows_stride, stride_row};
        std::memcpy(ints, v, sizeof v);
    } else {
        int64_t lanes = cdiv(window, block), spread = cdiv(rule.target_programs, bs);
        if (spread < lanes) lanes = spread;
        int64_t most = stride_col > flat_stride ? stride_col : flat_stride;
        if (most < 1) most = 1;
        bool wide = static_cast<__int128>(width) * most >= INT32_END ||
                    static_cast<__int128>(width) + static_cast<__int128>(lanes) * block >= INT32_END;
        bool one = static_cast<__int128>(lanes) * block >= window; /* no tile loop (plan.py: ONE) */
        out->slot = int(one ? 2 * large + wide : rule.loop_slot + wide);
        out->grid[1] = lanes;
        out->n_ints = 8;
        const int64_t v[8] = {n_tokens, n_rows, width, flat_stride, offsets_stride, rows_stride, stride_row, stride_col};
        std::memcpy(ints, v, sizeof v);
    }
    out->grid[0] = bs;
    out->small_ints = bs < INT32_END;
    for (int i = 0; i < out->n_ints; ++i)
        if (ints[i] >= INT32_END) out->small_ints = false;
}

/* ---- the call path's configuration ---- */

PyObject *memo, *tensor_type, *hooks, *raw_stream, *current_device;
Rule call_rule;
bool configured;
unsigned long long served_calls;
PyObject *s_enter, *s_exit, *s_calls;
/* The last family the memo answered, kept so that a run of calls with one signature (a serving loop) skips
 * building, hashing and looking up its bytes: its op, fixed metadata (windowed or not), backend and family (strong
 * references). */
TensorMeta last_fixed[MAX_TENSORS];
int last_tensors;
const struct Op *last_op;
PyObject *last_backend, *last_family;

PyObject *configure(PyObject *, PyObject *args, PyObject *kwargs) {
    static const char *keywords[] = {"memo", "tensor_type", "hooks", "raw_stream", "current_device", "rule", nullptr};
    PyObject *m, *t, *h, *r, *d, *rule_map;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!O!OOOO", const_cast<char **>(keywords), &PyDict_Type, &m,
                                     &PyType_Type, &t, &h, &r, &d, &rule_map))
        return nullptr;
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == nullptr || PyDict_GET_SIZE(kwargs) != 6) {
        PyErr_SetString(PyExc_TypeError, "configure takes memo, tensor_type, hooks, raw_stream, current_device and rule by name");
        return nullptr;
    }
    if (!PyCallable_Check(r) || (d != Py_None && !PyCallable_Check(d))) {
        PyErr_SetString(PyExc_TypeError, "raw_stream and current_device (or None) must be callable");
        return nullptr;
    }
    Rule rule;
    if (read_rule(rule_map, &rule) < 0) return nullptr;
    if (s_enter == nullptr) {
        s_enter = PyUnicode_InternFromString("launch_enter_hook");
        s_exit = PyUnicode_InternFromString("launch_exit_hook");
        s_calls = PyUnicode_InternFromString("calls");
        if (s_enter == nullptr || s_exit == nullptr || s_calls == nullptr) {
            Py_CLEAR(s_enter);
            Py_CLEAR(s_exit);
            Py_CLEAR(s_calls);
            return nullptr;
        }
    }
    Py_INCREF(m);
    Py_XSETREF(memo, m);
    Py_INCREF(t);
    Py_XSETREF(tensor_type, t);
    Py_INCREF(h);
    Py_XSETREF(hooks, h);
    Py_INCREF(r);
    Py_XSETREF(raw_stream, r);
    if (d == Py_None) {
        Py_CLEAR(current_device);
    } else {
        Py_INCREF(d);
        Py_XSETREF(current_device, d);
    }
    call_rule = rule;
    configured = true;
    Py_CLEAR(last_backend);
    Py_CLEAR(last_family);
    Py_RETURN_NONE;
}

/* 1 when no launch hook is installed on `hooks` (each of launch_enter_hook and launch_exit_hook absent, None, or
 * an object whose `calls` is empty), 0 otherwise or on an error (cleared). */
int hooks_idle() {
    PyObject *names[2] = {s_enter, s_exit};
    for (PyObject *name : names) {
        PyObject *hook, *calls;
        if (get_optional_attr(hooks, name, &hook) < 0) goto busy;
        if (hook == nullptr || hook == Py_None) {
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

/* ---- the ops the call path serves: one descriptor each, one reader, memo and launch for all ---- */

/* The lengths of one call related as its checks require, and the launch's batch size in *bs: true; false when
 * they do not relate (the checks' error, which the checked path raises) or `extra` is no int it takes. */
typedef bool (*relate_fn)(const TensorMeta *m, int n, PyObject *extra, int64_t *bs);
/* The launch of one related call: its slot (-1: nothing to launch), grid and ints. */
typedef void (*plan_fn)(const TensorMeta *m, int n, int64_t bs, Launch *out);

struct Op {
    int64_t tag;       /* the signature's first word: the ops' memo entries never meet */
    int n_tensors;     /* tensors after the backend, always given */
    int n_optional;    /* then this many optional tensors (None or absent: not read) */
    bool has_int;      /* then one int argument, or None (not in the signature) */
    unsigned zeroed;   /* bit i: tensor i's length changes every serving step (zeroed in the signature) */
    int table;         /* the tensor whose device the launch is on */
    int n_pointers;    /* the bound kernel's pointers before its ints; the other tensors are its window pointers */
    relate_fn relate;
    plan_fn plan;
    int64_t slots;     /* a family's length: 0 for the rule's */
};

/* The scatter: (flat_in, offsets, req_pool_indices, pool_out[, start_cols]); len(offsets) == bs + 1 and, windowed,
 * len(start_cols) == bs; plan.plan's launch. */
bool scatter_relate(const TensorMeta *m, int n, PyObject *, int64_t *bs) {
    *bs = m[ROWS].sizes[0];
    return m[OFFSETS].sizes[0] == *bs + 1 && (n != MAX_TENSORS || m[START].sizes[0] == *bs);
}

void scatter_plan(const TensorMeta *m, int, int64_t bs, Launch *out) {
    plan_launch(call_rule, bs, m[FLAT].sizes[0], m[POOL].sizes[0], m[POOL].sizes[1], m[POOL].strides[0],
                m[POOL].strides[1], m[FLAT].strides[0], m[OFFSETS].strides[0], m[ROWS].strides[0], out);
}

/* The assignment: (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size); batch_size
 * an exact int (no bool) or None (len(req_pool_indices)), 0 <= bs <= the length of each per-request array,
 * bs <= MAX_REQUESTS and bs * len(out_cache_loc) < 2**63 (the spec's "slots" check, tested without overflow);
 * plan.assign_grid's grid, the assignment kernel's ten ints. */
enum { A_ROWS, A_TABLE, A_START, A_END, A_LOC };

bool assign_relate(const TensorMeta *m, int, PyObject *extra, int64_t *bs) {
    if (extra == Py_None) {
        *bs = m[A_ROWS].sizes[0];
    } else {
        if (!PyLong_CheckExact(extra)) return false;
        int overflow = 0;
        *bs = PyLong_AsLongLongAndOverflow(extra, &overflow);
        if (overflow || (*bs == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return false;
        }
    }
    const int64_t n_tokens = m[A_LOC].sizes[0];
    return *bs >= 0 && *bs <= m[A_ROWS].sizes[0] && *bs <= m[A_START].sizes[0] && *bs <= m[A_END].sizes[0] &&
           *bs <= call_rule.max_requests && !(n_tokens > 0 && *bs > INT64_MAX / n_tokens);
}

void assign_plan(const TensorMeta *m, int, int64_t bs, Launch *out) {
    if (bs == 0) {
        out->slot = -1;
        return;
    }
    int64_t groups = cdiv(bs, call_rule.assign_group), split = cdiv(call_rule.assign_target_programs, groups);
    if (split > call_rule.assign_max_split) split = call_rule.assign_max_split;
    out->slot = 0;
    out->grid[0] = groups;
    out->grid[1] = split < 1 ? 1 : split;
    out->n_ints = 10;
    const int64_t v[10] = {bs, m[A_LOC].sizes[0], m[A_TABLE].sizes[0], m[A_TABLE].sizes[1], m[A_ROWS].strides[0],
                           m[A_START].strides[0], m[A_END].strides[0], m[A_LOC].strides[0], m[A_TABLE].strides[0],
                           m[A_TABLE].strides[1]};
    std::memcpy(out->ints, v, sizeof v);
    out->small_ints = true;
    for (int64_t x : v)
        if (x >= INT32_END) out->small_ints = false;
}

const Op scatter_op{0, N_TENSORS, MAX_WINDOW, false, 1u << FLAT | 1u << OFFSETS | 1u << ROWS | 1u << START, POOL,
                    N_TENSORS, scatter_relate, scatter_plan, 0};
const Op assign_op{1, 5, 0, true, 1u << A_ROWS | 1u << A_START | 1u << A_END | 1u << A_LOC, A_TABLE, 5,
                   assign_relate, assign_plan, 1};

int64_t family_slots(const Op &op) { return op.slots ? op.slots : call_rule.slots; }

/* The arguments' metadata (the op's tensors, and its optional ones where given and not None) and the part of it
 * that stays fixed from step to step (`fixed`: data and the op's zeroed lengths zeroed), their count in *n, the
 * int argument (or nullptr) in *extra: 1; 0 when the arguments have no signature; -1 with an error set for a
 * misuse (a wrong argument count, unconfigured). */
int read_arguments(const Op &op, PyObject *const *args, Py_ssize_t nargs, TensorMeta *metas, TensorMeta *fixed,
                   int *n, PyObject **extra) {
    Py_ssize_t least = 1 + op.n_tensors + op.has_int, most = least + op.n_optional;
    if (nargs < least || nargs > most) {
        PyErr_Format(PyExc_TypeError, "expected backend, %d arguments, %d optional ones and %d ints, got %zd",
                     op.n_tensors, op.n_optional, int(op.has_int), nargs);
        return -1;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "the call path is not configured (configure)");
        return -1;
    }
    *extra = op.has_int ? args[nargs - 1] : nullptr;
    if (!PyUnicode_CheckExact(args[0])) return 0;
    *n = op.n_tensors;
    for (Py_ssize_t i = op.n_tensors; i < nargs - 1 - op.has_int && args[1 + i] != Py_None; ++i) *n = int(i) + 1;
    for (int i = 0; i < *n; ++i)
        if (Py_TYPE(args[1 + i]) != reinterpret_cast<PyTypeObject *>(tensor_type) || read_meta(args[1 + i], &metas[i]) != 1)
            return 0;
    std::memcpy(fixed, metas, sizeof(TensorMeta) * *n);
    for (int i = 0; i < *n; ++i) {
        fixed[i].data = 0;
        if (op.zeroed >> i & 1) fixed[i].sizes[0] = 0;
    }
    return 1;
}

/* The signature bytes: the op's tag, the `n` fixed metas and `backend`'s UTF-8; nullptr with no error set when the
 * backend has no UTF-8. A windowed signature is one meta longer than any unwindowed one with the same backend. */
PyObject *signature_bytes(const Op &op, PyObject *backend, const TensorMeta *fixed, int n) {
    Py_ssize_t n_backend;
    const char *name = PyUnicode_AsUTF8AndSize(backend, &n_backend);
    if (name == nullptr) {
        PyErr_Clear(); /* a lone surrogate: no signature */
        return nullptr;
    }
    size_t size = sizeof(TensorMeta) * n;
    PyObject *sig = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(sizeof op.tag + size) + n_backend);
    if (sig == nullptr) return nullptr;
    char *bytes = PyBytes_AS_STRING(sig);
    std::memcpy(bytes, &op.tag, sizeof op.tag);
    std::memcpy(bytes + sizeof op.tag, fixed, size);
    std::memcpy(bytes + sizeof op.tag + size, name, size_t(n_backend));
    return sig;
}

/* The signature, None where there is none; nullptr with an error set. */
PyObject *signature_or_none(const Op &op, PyObject *backend, int found, const TensorMeta *fixed, int n) {
    PyObject *sig = found ? signature_bytes(op, backend, fixed, n) : nullptr;
    if (sig != nullptr || PyErr_Occurred()) return sig;
    Py_RETURN_NONE;
}

PyObject *signature_of(const Op &op, PyObject *const *args, Py_ssize_t nargs) {
    TensorMeta metas[MAX_TENSORS], fixed[MAX_TENSORS];
    int n = 0;
    PyObject *extra;
    int found = read_arguments(op, args, nargs, metas, fixed, &n, &extra);
    if (found < 0) return nullptr;
    return signature_or_none(op, args[0], found, fixed, n);
}

/* The memo's family for these arguments (borrowed; nullptr, no error set, when there is none): the last one found
 * if the op and signature are the same, else the memo's, which becomes the last one. */
PyObject *find_family(const Op &op, PyObject *backend, const TensorMeta *fixed, int n) {
    if (last_family != nullptr && &op == last_op && n == last_tensors &&
        std::memcmp(fixed, last_fixed, sizeof(TensorMeta) * n) == 0 &&
        (backend == last_backend || PyUnicode_Compare(backend, last_backend) == 0))
        return last_family;
    PyErr_Clear(); /* PyUnicode_Compare's, if any */
    PyObject *sig = signature_bytes(op, backend, fixed, n);
    if (sig == nullptr) {
        PyErr_Clear();
        return nullptr;
    }
    PyObject *family = PyDict_GetItemWithError(memo, sig); /* borrowed */
    Py_DECREF(sig);
    if (family == nullptr || !PyList_CheckExact(family) || PyList_GET_SIZE(family) != family_slots(op)) {
        PyErr_Clear();
        return nullptr;
    }
    std::memcpy(last_fixed, fixed, sizeof(TensorMeta) * n);
    last_tensors = n;
    last_op = &op;
    Py_INCREF(backend);
    Py_XSETREF(last_backend, backend);
    Py_INCREF(family);
    Py_XSETREF(last_family, family);
    return family;
}

/* The parameter slots of one launch: the kernel's leading pointers, the ints, its window pointers (the pointers
 * after the leading ones), the null scratch pointers; `params` point at them, as cuLaunchKernel takes them. The
 * ints are in int32's range (the caller checked small_ints). */
void set_params(const Kernel &kernel, const uint64_t *pointers, const int64_t *ints, uint64_t *slots, void **params) {
    int n = kernel.n_pointers + kernel.n_ints + kernel.n_window + kernel.n_scratch;
    std::memset(slots, 0, sizeof(uint64_t) * n);
    std::memcpy(slots, pointers, sizeof(uint64_t) * kernel.n_pointers);
    for (int i = 0; i < kernel.n_ints; ++i) {
        int32_t v = int32_t(ints[i]);
        std::memcpy(&slots[kernel.n_pointers + i], &v, sizeof v);
    }
    std::memcpy(&slots[kernel.n_pointers + kernel.n_ints], pointers + kernel.n_pointers,
                sizeof(uint64_t) * kernel.n_window);
    for (int i = 0; i < n; ++i) params[i] = &slots[i];
}

/* 1: launched; 0: not launched, nothing enqueued (the caller's checked path runs); -1: an error set (a driver
 * refusal). The per-call conditions: the op's length relations, a remembered family, a kernel for the slot of the
 * op's layout, int32 ints, 16-byte aligned pointers (the kernels' specialization), no launch hook, the table's
 * device current where the process sees several, a driver and a CUDA context. */
int launch_remembered(const Op &op, PyObject *backend, const TensorMeta *m, const TensorMeta *fixed, int n,
                      PyObject *extra) {
    int64_t bs;
    if (!op.relate(m, n, extra, &bs)) return 0; /* the checks' error, raised by the checked path */
    PyObject *family = find_family(op, backend, fixed, n);
    if (family == nullptr) return 0;
    Launch launch;
    op.plan(m, n, bs, &launch);
    if (launch.slot < 0) return 1; /* no cell to write */
    if (!launch.small_ints || launch_kernel == nullptr) return 0;
    PyObject *capsule = PyList_GET_ITEM(family, launch.slot);
    if (!PyCapsule_IsValid(capsule, CAPSULE_NAME)) return 0;
    const auto *kernel = static_cast<const Kernel *>(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
    if (kernel->n_ints != launch.n_ints || kernel->n_pointers != op.n_pointers ||
        kernel->n_pointers + kernel->n_window != n)
        return 0;
    uint64_t pointers[MAX_TENSORS], any = 0;
    for (int i = 0; i < n; ++i) any |= pointers[i] = m[i].data;
    if (any & 15 || !hooks_idle()) return 0;
    Py_INCREF(capsule); /* the callbacks below may drop the memo's reference */
    int result = 0;
    CUstream stream = nullptr;
    CUcontext context = nullptr;
    PyObject *device = PyLong_FromLongLong(m[op.table].device_index), *now = nullptr, *handle = nullptr;
    if (device == nullptr) goto done;
    if (current_device != nullptr) {
        now = PyObject_CallNoArgs(current_device);
        if (now == nullptr || PyObject_RichCompareBool(now, device, Py_EQ) != 1) goto done;
    }
    handle = PyObject_CallOneArg(raw_stream, device);
    if (handle == nullptr) goto done;
    stream = static_cast<CUstream>(PyLong_AsVoidPtr(handle));
    if (stream == nullptr && PyErr_Occurred()) goto done;
    if (ctx_get_current(&context) != 0 || context == nullptr) goto done;
    {
        uint64_t slots[MAX_PARAMS];
        void *params[MAX_PARAMS];
        set_params(*kernel, pointers, launch.ints, slots, params);
        CUresult status;
        Py_BEGIN_ALLOW_THREADS
        status = launch_kernel(kernel->function, unsigned(launch.grid[0]), unsigned(launch.grid[1]), 1,
                               kernel->threads, 1, 1, kernel->shared, stream, params, nullptr);
        Py_END_ALLOW_THREADS
        if (status != 0) {
            const char *name = nullptr;
            if (get_error_name(status, &name) != 0) name = nullptr;
            PyErr_Format(PyExc_RuntimeError, "kv-canary: cuLaunchKernel failed: %s (%d)", name ? name : "unknown error",
                         status);
            result = -1;
        } else {
            result = 1;
        }
    }
done:
    Py_XDECREF(device);
    Py_XDECREF(now);
    Py_XDECREF(handle);
    Py_DECREF(capsule);
    if (result == 0) PyErr_Clear();
    return result;
}

PyObject *call_of(const Op &op, PyObject *const *args, Py_ssize_t nargs) {
    TensorMeta m[MAX_TENSORS], fixed[MAX_TENSORS];
    int n = 0;
    PyObject *extra;
    int found = read_arguments(op, args, nargs, m, fixed, &n, &extra);
    if (found < 0) return nullptr;
    if (found) {
        int launched = launch_remembered(op, args[0], m, fixed, n, extra);
        if (launched < 0) return nullptr;
        if (launched) {
            ++served_calls;
            Py_RETURN_TRUE;
        }
    }
    return signature_or_none(op, args[0], found, fixed, n);
}

PyObject *call(PyObject *, PyObject *const *args, Py_ssize_t nargs) { return call_of(scatter_op, args, nargs); }
PyObject *signature(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    return signature_of(scatter_op, args, nargs);
}
PyObject *assign(PyObject *, PyObject *const *args, Py_ssize_t nargs) { return call_of(assign_op, args, nargs); }
PyObject *assign_signature(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    return signature_of(assign_op, args, nargs);
}

PyObject *plan(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    int64_t v[9];
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "plan takes 9 sizes and strides, got %zd arguments", nargs);
        return nullptr;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "the call path is not configured (configure)");
        return nullptr;
    }
    for (int i = 0; i < 9; ++i) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return nullptr;
        if (v[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "sizes and strides are >= 0");
            return nullptr;
        }
    }
    Launch out;
    plan_launch(call_rule, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], &out);
    if (out.slot < 0) Py_RETURN_NONE;
    PyObject *ints = PyTuple_New(out.n_ints);
    if (ints == nullptr) return nullptr;
    for (int i = 0; i < out.n_ints; ++i) {
        PyObject *item = PyLong_FromLongLong(out.ints[i]);
        if (item == nullptr) {
            Py_DECREF(ints);
            return nullptr;
        }
        PyTuple_SET_ITEM(ints, i, item);
    }
    return Py_BuildValue("(i(LL)NO)", out.slot, static_cast<long long>(out.grid[0]),
                         static_cast<long long>(out.grid[1]), ints, out.small_ints ? Py_True : Py_False);
}

PyObject *served(PyObject *, PyObject *) { return PyLong_FromUnsignedLongLong(served_calls); }

/* `values`, a list of exactly `count` ints an int64 holds, written to `out`: true; false where it is not. */
bool store_list(PyObject *values, int64_t count, int64_t *out) {
    if (!PyList_CheckExact(values) || PyList_GET_SIZE(values) != count) return false;
    for (Py_ssize_t i = 0; i < count; ++i) {
        PyObject *item = PyList_GET_ITEM(values, i);
        if (!PyLong_Check(item)) return false;
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow != 0) return false;
        if (value == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return false;
        }
        out[i] = value;
    }
    return true;
}

/* `source`'s buffer, 1-D of `bs` 8-byte signed ints (format q or l, native order), written to `out`: true; false
 * where it has no such buffer. */
bool store_buffer(PyObject *source, int64_t bs, int64_t *out) {
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return false;
    }
    const char *format = view.format ? view.format : "B";
    if (*format == '@' || *format == '=') ++format;
    bool fits = view.ndim == 1 && view.itemsize == 8 && view.shape[0] == bs &&
                (std::strcmp(format, "q") == 0 || std::strcmp(format, "l") == 0);
    if (fits) {
        const char *at = static_cast<const char *>(view.buf);
        for (int64_t i = 0; i < bs; ++i, at += view.strides[0]) std::memcpy(&out[i], at, sizeof(int64_t));
    }
    PyBuffer_Release(&view);
    return fits;
}

PyObject *stage_ints(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "stage_ints takes values, rows, cols, tokens_at, rows_at, cols_at, count and bs");
        return nullptr;
    }
    int64_t *at[3];
    for (int i = 0; i < 3; ++i) at[i] = static_cast<int64_t *>(PyLong_AsVoidPtr(args[3 + i]));
    long long count = PyLong_AsLongLong(args[6]), bs = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) return nullptr;
    if (count < 0 || bs < 0) {
        PyErr_SetString(PyExc_ValueError, "stage_ints: count and bs must be >= 0");
        return nullptr;
    }
    if (store_list(args[0], count, at[0]) && store_buffer(args[1], bs, at[1]) && store_buffer(args[2], bs, at[2]))
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

PyObject *copy_to_device(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "copy_to_device takes dst, src, nbytes and stream");
        return nullptr;
    }
    unsigned long long dst = PyLong_AsUnsignedLongLong(args[0]);
    void *src = PyLong_AsVoidPtr(args[1]);
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[2]);
    void *stream = PyLong_AsVoidPtr(args[3]);
    if (PyErr_Occurred()) return nullptr;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "copy_to_device: nbytes must be >= 0");
        return nullptr;
    }
    CUcontext context = nullptr;
    if (memcpy_htod_async == nullptr || ctx_get_current(&context) != 0 || context == nullptr) Py_RETURN_FALSE;
    if (nbytes == 0) Py_RETURN_TRUE;
    CUresult status;
    Py_BEGIN_ALLOW_THREADS
    status = memcpy_htod_async(dst, src, size_t(nbytes), static_cast<CUstream>(stream));
    Py_END_ALLOW_THREADS
    if (status != 0) {
        const char *name = nullptr;
        if (get_error_name(status, &name) != 0) name = nullptr;
        PyErr_Format(PyExc_RuntimeError, "kv-canary: cuMemcpyHtoDAsync failed: %s (%d)", name ? name : "unknown error",
                     status);
        return nullptr;
    }
    Py_RETURN_TRUE;
}

PyMethodDef methods[] = {
    {"load_driver", load_driver, METH_VARARGS, "load_driver(library='libcuda.so.1'): the driver's launch functions"},
    {"bind", bind, METH_VARARGS, "bind(function, threads, shared, n_ints, n_scratch, owner, n_window=0) -> kernel"},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(configure)),
     METH_VARARGS | METH_KEYWORDS, "configure(*, memo, tensor_type, hooks, raw_stream, current_device, rule)"},
    {"signature", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(signature)), METH_FASTCALL,
     "signature(backend, *arguments) -> bytes | None"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(backend, *arguments) -> True | bytes | None"},
    {"assign", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(assign)), METH_FASTCALL,
     "assign(backend, *arguments, batch_size) -> True | bytes | None"},
    {"assign_signature", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(assign_signature)),
     METH_FASTCALL, "assign_signature(backend, *arguments, batch_size) -> bytes | None"},
    {"plan", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(plan)), METH_FASTCALL,
     "plan(bs, N, R, C, strides...) -> (slot, grid, ints, small_ints) | None"},
    {"served", served, METH_NOARGS, "served() -> int: calls served by call()"},
    {"stage_ints", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(stage_ints)), METH_FASTCALL,
     "stage_ints(values, rows, cols, tokens_at, rows_at, cols_at, count, bs) -> bool: a step's ints at the addresses"},
    {"copy_to_device", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(copy_to_device)), METH_FASTCALL,
     "copy_to_device(dst, src, nbytes, stream) -> bool: an asynchronous host-to-device copy on stream"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kv_canary_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kv_canary_native(void) { return PyModule_Create(&module); }
