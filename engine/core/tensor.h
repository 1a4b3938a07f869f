#pragma once
// A contiguous, row-major n-d array: element type, shape, device and a shared storage. Tensors either own their
// memory (64-byte aligned, so SIMD loads never split cache lines) or borrow it from something that must stay alive
// while they do (a memory-mapped checkpoint, a device pool block) through `keep_alive`.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace qvl {

enum class Device { CPU, CUDA };

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);
// Product of the dimensions; throws qvl::Error on a negative dimension or an element count over 2^62.
int64_t shape_numel(const Shape& shape);

class Tensor {
public:
  Tensor() = default;

  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Wraps memory owned elsewhere; `keep_alive` holds that owner for as long as any copy of this tensor exists.
  static Tensor borrow(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive,
                       Device device = Device::CPU);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const { return shape_.size(); }
  int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return std::size_t(numel_) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || numel_ == 0; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T> T* data() { return static_cast<T*>(data_); }
  template <typename T> const T* data() const { return static_cast<const T*>(data_); }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), nbytes()}; }

  // Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) of the first dimension, sharing storage (a weight's q/k/v parts, a cache prefix).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Bytes [byte_offset, + the shape's) of this tensor seen as elements of another type, sharing storage (a recorded
  // step's inputs of several types in one buffer, written in one copy). The offset must suit the type's alignment.
  Tensor reinterpreted(DType dtype, Shape shape, std::size_t byte_offset) const;
  // A new CPU tensor of another element type (f32/f16/bf16 rounding like PyTorch).
  Tensor to(DType dtype) const;
  // All elements as f32 (CPU, floating types only).
  std::vector<float> to_f32_vector() const;

private:
  DType dtype_ = DType::F32;
  Shape shape_;
  int64_t numel_ = 0;
  Device device_ = Device::CPU;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
};

// The last dimension (1 for a scalar), and the rows before it: a tensor seen as [rows, last_dim].
int64_t last_dim(const Tensor& t);
int64_t rows_of(const Tensor& t);

// Converts `count` elements between floating types (f32/f16/bf16/f64) on the CPU.
void convert_elements(DType from, const void* src, DType to, void* dst, std::size_t count);

}  // namespace qvl
