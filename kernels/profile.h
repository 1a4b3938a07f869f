#pragma once
// Kernel variants per architecture profile: one table each, so every shape decision the CUDA backend makes is read
// from here instead of being spread over `if`s. Plain C++ (the host side picks; the kernels take the numbers).
#include <cstdint>

namespace qvl::cuda {

// Matrix products with more than `gemv_max_rows` activation rows (prefill, the vision tower):
enum class GemmKernel : int {
  Tiled,   // our shared-memory-tiled f32 kernel (gemm_tiled.cu): f32 math on any stored weight type
  Cublas,  // cuBLAS with the activations converted to the weights' type: tensor cores, f32 accumulation
};

struct KernelProfile {
  const char* name;
  bool weights_as_f16;    // store bf16 checkpoints as f16 (no bf16 on the GPU), range-checked at load
  int64_t gemv_max_rows;  // up to this many rows: the memory-bound GEMV (decode), else the GEMM below
  GemmKernel gemm;
  // Attention: the tiled flash kernel from this many query rows on (it reuses each K/V tile for 16 queries);
  // below it one warp per (query, head), or, when there are fewer pairs than split_below_pairs_per_sm x SMs,
  // the decode kernel that splits each pair's keys over several blocks (split-K) and merges the parts.
  // (Head sizes the flash kernel takes: flash_attention_fits, its 16 x D query and 32 x D K/V tiles in shared memory.)
  int64_t flash_min_queries;
  int64_t split_below_pairs_per_sm;
  // The tiled attention on tensor cores (flash_attention_mma.cu: f16 products, f32 softmax and sums) where the GPU
  // and the build have SM80+ code for it; otherwise the f32 CUDA-core kernel above.
  bool tensor_core_attention;
  // Decode kernels launched to start as the previous one drains, fetching their weights meanwhile (programmatic
  // dependent launch, where the GPU has it: SM90+); with it the decode attention may merge its chunks in a thread
  // block cluster, SM90's other feature (attention_decode.cu).
  bool overlapped_launches;
};

// Pascal consumer parts (GTX 10xx, MX 3xx): no tensor cores, f16 math at 1/64 rate, no bf16, 48 KB of shared
// memory per block (the flash tiles at D = 128 take 41 KB).
inline constexpr KernelProfile kSm61Profile{"sm61", true, 4, GemmKernel::Tiled, 16, 4, false, false};
// Volta and later: tensor cores through cuBLAS, bf16 kept as stored.
inline constexpr KernelProfile kNativeProfile{"native", false, 4, GemmKernel::Cublas, 16, 4, true, true};

}  // namespace qvl::cuda
