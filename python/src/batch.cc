#include "batch.h"

#include <cstdint>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "dlpack.h"

namespace stoker::py {
namespace pyb = pybind11;

namespace {

struct FieldView {
  const char* name;
  void* data;
  DLDataType dtype;
  std::vector<int64_t> shape;
};

struct DlpackCtx {
  std::shared_ptr<const void> keep;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
  DLManagedTensor tensor{};
};

void DeleteDlpack(DLManagedTensor* self) {
  delete static_cast<DlpackCtx*>(self->manager_ctx);  // runs without the GIL: no Python here
}

void CapsuleDestructor(PyObject* cap) {
  // A consumer renames the capsule to "used_dltensor" and owns the tensor from then on.
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (t && t->deleter) t->deleter(t);
  } else {
    PyErr_Clear();
  }
}

pyb::object MakeCapsule(const BatchKeep& keep, const FieldView& f) {
  return DlpackCapsule(keep.batch, f.data, f.dtype, f.shape);
}

pyb::dtype NumpyDtype(DLDataType t) {
  if (t.code == kDLFloat) return pyb::dtype::of<float>();
  if (t.code == kDLUInt) return pyb::dtype::of<uint8_t>();
  return pyb::dtype::of<int64_t>();
}

}  // namespace

pyb::object DlpackCapsule(std::shared_ptr<const void> keep, const void* data, DLDataType dtype,
                          const std::vector<int64_t>& shape, DLDevice device) {
  const int nd = static_cast<int>(shape.size());
  if (nd < 1 || nd > 4) throw std::invalid_argument("DlpackCapsule: 1 to 4 dimensions");
  auto* ctx = new DlpackCtx{std::move(keep)};
  int64_t stride = 1;
  for (int i = nd - 1; i >= 0; --i) {
    ctx->shape[i] = shape[i];
    ctx->strides[i] = stride;
    stride *= shape[i];
  }
  DLTensor& t = ctx->tensor.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = device;
  t.ndim = nd;
  t.dtype = dtype;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx;
  ctx->tensor.deleter = DeleteDlpack;
  PyObject* cap = PyCapsule_New(&ctx->tensor, "dltensor", CapsuleDestructor);
  if (cap == nullptr) {
    delete ctx;
    throw pyb::error_already_set();
  }
  return pyb::reinterpret_steal<pyb::object>(cap);
}

pyb::dict BatchToDict(const BatchKeep& keep, ArrayKind kind, bool with_keys) {
  const Batch& b = *keep.batch;
  const int64_t n = b.size;
  std::vector<FieldView> fields;
  const DLDataType i64{kDLInt, 64, 1};
  static_assert(sizeof(int64_t) == sizeof(uint64_t));
  if (b.images != nullptr) {
    if (b.layout == OutputLayout::kFloatCHW) {
      fields.push_back({"image", b.images, {kDLFloat, 32, 1}, {n, 3, b.height, b.width}});
    } else {
      fields.push_back({"image", b.images, {kDLUInt, 8, 1}, {n, b.height, b.width, 3}});
    }
  } else {
    fields.push_back({"data", const_cast<uint8_t*>(b.raw.data()), {kDLUInt, 8, 1},
                      {static_cast<int64_t>(b.raw.size())}});
    fields.push_back({"offsets", const_cast<uint64_t*>(b.raw_offsets.data()), i64,
                      {static_cast<int64_t>(b.raw_offsets.size())}});
  }
  fields.push_back({"label", const_cast<int64_t*>(b.labels.data()), i64,
                    {static_cast<int64_t>(b.labels.size())}});
  // Dataset indices are < 2^63: viewed as int64, which torch supports and uint64 is not.
  fields.push_back({"index", const_cast<uint64_t*>(b.sample_indices.data()), i64,
                    {static_cast<int64_t>(b.sample_indices.size())}});

  pyb::dict out;
  if (kind == ArrayKind::kNumpy) {
    // One base object for all arrays of the batch.
    pyb::capsule base(new BatchKeep(keep), [](void* p) { delete static_cast<BatchKeep*>(p); });
    for (const auto& f : fields) {
      pyb::dtype dt = NumpyDtype(f.dtype);
      if (f.data == nullptr) {  // empty vector: a fresh empty array
        out[f.name] = pyb::array(dt, f.shape);
        continue;
      }
      out[f.name] = pyb::array(dt, f.shape, {}, f.data, base);
    }
  } else {
    for (const auto& f : fields) out[f.name] = MakeCapsule(keep, f);
  }
  if (with_keys) out["key"] = pyb::cast(b.keys);
  return out;
}

}  // namespace stoker::py
