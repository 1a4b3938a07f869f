#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/error.h"
#include "core/half.h"

namespace qvl {

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  constexpr int64_t kLimit = int64_t(1) << 62;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("negative dimension in shape ", shape_to_string(shape));
    if (d != 0 && n > kLimit / d) fail("shape ", shape_to_string(shape), " has too many elements");
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  const std::size_t bytes = (t.nbytes() + 63) / 64 * 64;
  if (bytes > 0) {
    void* p = std::aligned_alloc(64, bytes);
    if (!p) fail("out of host memory allocating ", t.nbytes(), " bytes for a tensor of shape ", shape_to_string(t.shape_));
    t.data_ = p;
    t.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  }
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(keep_alive);
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel_)
    fail("cannot reshape ", shape_to_string(shape_), " to ", shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0])
    fail("slice_rows [", begin, ", ", end, ") of shape ", shape_to_string(shape_));
  Tensor t = *this;
  const std::size_t row_bytes = shape_[0] ? nbytes() / std::size_t(shape_[0]) : 0;
  t.data_ = static_cast<char*>(data_) + std::size_t(begin) * row_bytes;
  t.shape_[0] = end - begin;
  t.numel_ = shape_numel(t.shape_);
  return t;
}

Tensor Tensor::reinterpreted(DType dtype, Shape shape, std::size_t byte_offset) const {
  const int64_t count = shape_numel(shape);  // compared in elements: a byte count could wrap
  if (byte_offset % dtype_size(dtype) != 0 || byte_offset > nbytes() ||
      std::size_t(count) > (nbytes() - byte_offset) / dtype_size(dtype))
    fail("reinterpreted: ", shape_to_string(shape), " ", dtype_name(dtype), " at byte ", byte_offset, " of ", nbytes());
  Tensor t = *this;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = count;
  t.data_ = static_cast<char*>(data_) + byte_offset;
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (device_ != Device::CPU) fail("Tensor::to: only CPU tensors can be converted on the host");
  Tensor out = empty(dtype, shape_);
  convert_elements(dtype_, data_, dtype, out.data_, std::size_t(numel_));
  return out;
}

std::vector<float> Tensor::to_f32_vector() const {
  if (device_ != Device::CPU) fail("Tensor::to_f32_vector: tensor is not on the CPU");
  std::vector<float> v(static_cast<std::size_t>(numel_));
  convert_elements(dtype_, data_, DType::F32, v.data(), v.size());
  return v;
}

namespace {
// Loads through memcpy: a borrowed tensor inside a checkpoint may sit at an odd byte offset.
template <typename T> T load(const void* base, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T> void store(void* base, std::size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}
double load_as_double(DType t, const void* src, std::size_t i) {
  switch (t) {
    case DType::F32: return load<float>(src, i);
    case DType::F16: return f16_to_f32(load<uint16_t>(src, i));
    case DType::BF16: return bf16_to_f32(load<uint16_t>(src, i));
    case DType::F64: return load<double>(src, i);
    default: fail("convert_elements: ", dtype_name(t), " is not a floating type");
  }
}
}  // namespace

void convert_elements(DType from, const void* src, DType to, void* dst, std::size_t count) {
  if (count == 0) return;  // empty tensors have no storage; memcpy(nullptr, ...) is undefined even for 0 bytes
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(from));
    return;
  }
  // The common widenings in a loop of their own: 2,048 bf16 values (the 2B's norm weights, widened by the CPU's norms
  // every call) took 0.13 µs so against 1.53 through the general switch below (a probe on this project's machine).
  if (to == DType::F32 && (from == DType::BF16 || from == DType::F16)) {
    for (std::size_t i = 0; i < count; ++i) {
      const auto bits = load<uint16_t>(src, i);
      store<float>(dst, i, from == DType::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits));
    }
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    // f64 sources reach f16/bf16 through f32, as PyTorch's conversions do.
    const double v = load_as_double(from, src, i);
    switch (to) {
      case DType::F32: store<float>(dst, i, float(v)); break;
      case DType::F16: store<uint16_t>(dst, i, f32_to_f16(float(v))); break;
      case DType::BF16: store<uint16_t>(dst, i, f32_to_bf16(float(v))); break;
      case DType::F64: store<double>(dst, i, v); break;
      default: fail("convert_elements: ", dtype_name(to), " is not a floating type");
    }
  }
}

int64_t last_dim(const Tensor& t) { return t.rank() ? t.dim(t.rank() - 1) : 1; }
int64_t rows_of(const Tensor& t) { return t.numel() / std::max<int64_t>(1, last_dim(t)); }

}  // namespace qvl
