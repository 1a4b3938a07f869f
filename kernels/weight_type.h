#pragma once
// How a weight tensor is stored on the device. Plain C++: the host side (the CUDA backend) names it too.
namespace qvl::cuda {

enum class WeightType : int { F32 = 0, F16 = 1, BF16 = 2 };

}  // namespace qvl::cuda
