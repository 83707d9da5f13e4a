/* The C++ half of the launcher's call path: a torch.Tensor's metadata read from its at::Tensor, no Python call.
 *
 * Contract (module _kv_canary_tensor_meta; tensor_meta.py builds and loads it, native.c calls it):
 *
 *   READER (attribute): a capsule named "kv_canary.tensor_meta.read" holding
 *       int read(PyObject *tensor, KvTensorMeta *out)
 *   whose caller has checked that `tensor` is exactly torch.Tensor (no subclass). It returns 1 with `out`
 *   filled when the tensor is defined, strided and not nested, has storage, has at most 2 dimensions (sizes and strides past
 *   its rank are 0), has neither its negative nor its conjugate bit set (a lazy view whose memory does not
 *   hold what the tensor reads), is no wrapper of a transform (functionalize, vmap, grad), no zero tensor and no
 *   Python-dispatched tensor, and has memory behind every element (kv_canary_arrays.describe.torch_backed: no
 *   element, or a data pointer that is not null and a storage reaching the last byte its sizes and strides
 *   address, a storage freed or shrunk since an earlier call failing it); 0 otherwise, with `out` unspecified.
 *   It never raises and never lets a C++ exception out. `data` is what Tensor.data_ptr() returns. `flags` has KV_TENSOR_META_INFERENCE_OUTSIDE
 *   for an inference tensor read outside inference mode, so that such a pool has a signature of its own,
 *   which the checks refuse (it is never remembered) while the same pool inside the mode is remembered.
 *
 * Why: reading the same fields through torch's Python getters (layout, dtype, shape, stride(), device,
 * data_ptr()) costs about 2 us per call of four tensors on the H200 host, a quarter of a launch; this reads
 * them from the C++ tensor in a few nanoseconds each. It is built against the torch it runs with (the build is
 * cached by torch's version, the source and Python's) and needs a C++ compiler; without one there is no call
 * path, and every call takes the launcher's checked path.
 */
#include <Python.h>

#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include "tensor_meta.h"

/* Tensors whose data pointer and storage are not the memory their elements read: a transform's wrapper (its
 * kernels are its transform's, which the launcher's checked path runs instead), a zero tensor (no data), a
 * Python-dispatched one. */
static const c10::DispatchKeySet kNotPlain({c10::DispatchKey::Functionalize, c10::DispatchKey::FuncTorchBatched,
                                            c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::ZeroTensor,
                                            c10::DispatchKey::Python});

/* Memory holds every element: none, or a data pointer that is not null and a storage that reaches the last byte
 * the sizes and strides address (strides are never negative), in 128-bit arithmetic for any sizes. */
static bool backed(const at::Tensor &t) {
    __int128 last = t.storage_offset();
    for (int64_t i = 0; i < t.dim(); ++i) {
        if (t.size(i) == 0) return true;
        last += static_cast<__int128>(t.size(i) - 1) * t.stride(i);
    }
    if (t.data_ptr() == nullptr) return false;
    return (last + 1) * static_cast<__int128>(t.element_size()) <= static_cast<__int128>(t.storage().nbytes());
}

static int read_meta(PyObject *tensor, KvTensorMeta *out) noexcept {
    try {
        const at::Tensor &t = THPVariable_Unpack(tensor);
        if (!t.defined() || t.layout() != c10::kStrided || t.is_nested() || !t.has_storage() || t.dim() > 2 ||
            t.is_neg() || t.is_conj() || t.key_set().has_any(kNotPlain))
            return 0;
        if (!backed(t)) return 0;
        out->flags = t.is_inference() && !c10::InferenceMode::is_enabled() ? KV_TENSOR_META_INFERENCE_OUTSIDE : 0;
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kv_canary_tensor_meta", nullptr, -1, nullptr};

PyMODINIT_FUNC PyInit__kv_canary_tensor_meta(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == nullptr) return nullptr;
    PyObject *reader = PyCapsule_New(reinterpret_cast<void *>(&read_meta), KV_TENSOR_META_CAPSULE, nullptr);
    if (reader == nullptr || PyModule_AddObject(m, "READER", reader) < 0) {
        Py_XDECREF(reader);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
