#pragma once
// Vision patches on the device: the resized image [H, W, 3] u8 (uploaded as is: 8x fewer bytes than the f32
// patches, which repeat each frame T times) is normalised, repeated over the temporal patch and permuted into
// [H/P · W/P, 3·T·P·P] rows in merge-window order, as transformers' processor lays them out.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct PatchParams {
  int64_t height, width, patch, temporal, merge;
  float mean[3], std[3];
};

void patchify(const uint8_t* image, const PatchParams& p, float* out, cudaStream_t stream);

}  // namespace qvl::cuda
