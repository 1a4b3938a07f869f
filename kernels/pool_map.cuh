#pragma once
// The memory pool drawn as one code per pixel (engine/backend/pool_picture.h says what the codes and the layout
// are; draw_pool_map there is the CPU reference) straight into memory a renderer shares with CUDA.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

// The block table in device memory, as pool_picture.h's PoolMapTable lays it out.
struct PoolMapArgs {
  uint8_t* out = nullptr;  // width * height codes, row by row
  int width = 0, height = 0, bar_height = 0;
  int64_t bar_scale = 1;
  const int64_t* bar_ends = nullptr;
  const uint8_t* bar_codes = nullptr;
  int bar_parts = 0;
  const int64_t* segment_sizes = nullptr;
  const int32_t* segment_first_block = nullptr;  // segments + 1 entries
  int segments = 0;
  const int64_t* block_offsets = nullptr;
  const uint8_t* block_codes = nullptr;
  int64_t largest_segment = 1;
};

void draw_pool_map(const PoolMapArgs& args, cudaStream_t stream);

}  // namespace qvl::cuda
