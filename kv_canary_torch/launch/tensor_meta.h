/* What tensor_meta.cpp reads and native.c keys its call path on: one tensor's metadata (see tensor_meta.cpp). */
#ifndef KV_CANARY_TENSOR_META_H
#define KV_CANARY_TENSOR_META_H

#include <stdint.h>

#define KV_TENSOR_META_CAPSULE "kv_canary.tensor_meta.read"
/* An inference tensor read outside torch.inference_mode(): torch refuses to write it in place there. */
#define KV_TENSOR_META_INFERENCE_OUTSIDE 1

typedef struct {
    int64_t dtype;        /* c10::ScalarType */
    int64_t device_type;  /* c10::DeviceType */
    int64_t device_index; /* -1: none */
    int64_t ndim;         /* at most 2 */
    int64_t sizes[2];     /* 0 past ndim */
    int64_t strides[2];   /* 0 past ndim */
    int64_t flags;        /* KV_TENSOR_META_INFERENCE_OUTSIDE */
    uint64_t data;        /* data_ptr() */
} KvTensorMeta;

#ifdef __cplusplus
extern "C" {
#endif
typedef int (*kv_tensor_meta_read)(PyObject *tensor, KvTensorMeta *out);
#ifdef __cplusplus
}
#endif

#endif
