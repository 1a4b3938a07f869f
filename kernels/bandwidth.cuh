#pragma once
// Measured device-memory read bandwidth, the denominator of the GPU decode roofline.
#include <cstddef>

namespace qvl::cuda {

// Bytes/s for reading a `bytes`-sized buffer once (the best of `repeats` timed passes after a warm-up).
double measure_read_bandwidth(std::size_t bytes, int repeats, int multiprocessors);

}  // namespace qvl::cuda
