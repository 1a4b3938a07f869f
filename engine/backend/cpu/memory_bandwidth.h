#pragma once
#include <cstddef>

namespace qvl::cpu {

// Sequential runs a core reads at once to draw the memory's bandwidth, kRunBytes apart. One run a core got ~10 GB/s
// on the GPU machine's Xeon whatever the loop computed (the prefetchers' reach, not the memory's limit). Four runs
// 64 KB apart took a plain read at 4 threads from 34-36 to 37-44 GB/s and at 16 from 63-104 to 133-144
// (tools/microbench/cpu_quant_dot.cpp, one call); the 2B's q4 decode at 16 threads went from 51-55 tokens/s to 64-65.
// Runs far apart did as well there but lost 5-25% on the 2-core machine's EPYC (more DRAM rows open at once, it
// seems); 64 KB apart stays within a few rows, yet still lost ~15% there on the q8 output head. So the q8/q4 decode
// products (cpu_products.h, DecodeReadOrder) measure both orders once and keep the faster; the bandwidth measured for
// the roofline reads in runs.
constexpr std::size_t kReadStreams = 4;
constexpr std::size_t kRunBytes = 64 << 10;

// Measured main-memory read bandwidth in bytes/s: all threads sum a buffer far larger than the caches, each its part
// in windows of kReadStreams runs; the best of `repeats` passes after one warm-up. The denominator of the CPU decode
// roofline.
double measure_read_bandwidth(double buffer_gib = 1.0, int repeats = 5);

}  // namespace qvl::cpu
