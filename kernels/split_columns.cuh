#pragma once
// The columns of a product that computed several projections at once (their weights stored one after another:
// Backend::upload_linears), handed out to each projection's own rows: out_i[r, :] = packed[r, offset_i : offset_i +
// cols_i], offset_i the sum of the columns before. A copy (8 bytes an element), so it pays where the launches it
// saves cost more than it (the decoder's q, k and v on cuBLAS: two GEMM calls of ~10 µs host each for a ~3 µs copy).
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct SplitColumns {
  static constexpr int kMaxParts = 3;
  const float* packed;
  int64_t rows;
  int parts;
  float* out[kMaxParts];
  int64_t cols[kMaxParts];
};

void split_columns(const SplitColumns& s, cudaStream_t stream);

}  // namespace qvl::cuda
