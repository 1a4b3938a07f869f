#pragma once
namespace qvl::cpu {

// Measured main-memory read bandwidth in bytes/s: all threads sum a buffer far larger than the caches; the best of
// `repeats` passes after one warm-up. The denominator of the CPU decode roofline.
double measure_read_bandwidth(double buffer_gib = 1.0, int repeats = 5);

}  // namespace qvl::cpu
