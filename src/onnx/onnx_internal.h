/*
 * onnx_internal.h - what the loader's files share (not for other subsystems).
 */
#ifndef INFERD_ONNX_INTERNAL_H
#define INFERD_ONNX_INTERNAL_H

#include "onnx.pb-c.h"
#include "onnx/onnx.h"

/* Where tensors stored outside the model file are read from (onnx_external.c). */
typedef struct onnx_external {
  const char *dir; /* the model file's directory; NULL when the model has none */
  int dir_fd;      /* -1 until the first external tensor opens it */
} onnx_external;

static inline bool onnx_tensor_is_external(const Onnx__TensorProto *t) {
  return t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

/* Refuses (INFERD_NO_MEMORY) a graph whose external tensors (initializers and node
 * attributes), by their declared type and shape, add up to more than `max_bytes` (0: no
 * limit), before any is read. */
inferd_code onnx_external_check_total(const Onnx__GraphProto *g, uint64_t max_bytes, inferd_status *st);

/* Reads tensor t's external data (data_location EXTERNAL) into `arena`: it must be
 * exactly `nbytes`, the size its type and shape need. `what` names the tensor in
 * errors ("initializer 'fc.weight'"). */
inferd_code onnx_external_read(core_arena *arena, const Onnx__TensorProto *t, const char *what, size_t nbytes,
                               onnx_external *ext, void **data, inferd_status *st);
void onnx_external_close(onnx_external *ext);

#endif /* INFERD_ONNX_INTERNAL_H */
