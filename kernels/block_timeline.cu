// The block timeline's buffer and its file (block_timeline.cuh). Without -DQVL_BLOCK_TIMELINE=ON, nothing.
#include "block_timeline.cuh"

#ifdef QVL_BLOCK_TIMELINE
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

namespace qvl::cuda {

#ifdef QVL_BLOCK_TIMELINE
namespace {
std::vector<void (*)(BlockStamp*, unsigned*)>& setters() {
  static std::vector<void (*)(BlockStamp*, unsigned*)> all;
  return all;
}
BlockStamp* g_stamps = nullptr;
unsigned* g_count = nullptr;

void write_timeline() {
  unsigned count = 0;
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(&count, g_count, sizeof count, cudaMemcpyDeviceToHost) != cudaSuccess)
    return;
  const unsigned kept = count < kBlockStamps ? count : kBlockStamps;
  std::vector<BlockStamp> stamps(kBlockStamps);
  if (cudaMemcpy(stamps.data(), g_stamps, sizeof(BlockStamp) * kBlockStamps, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  FILE* f = std::fopen(std::getenv("QVL_BLOCK_TIMELINE"), "w");
  if (!f) return;
  for (unsigned i = count - kept; i != count; ++i) {  // oldest first
    const BlockStamp& s = stamps[i % kBlockStamps];
    std::fprintf(f, "%llu %u %u %u %u %u %u\n", s.time_ns, s.grid_x, s.grid_y, s.threads, s.what, s.sm, s.block);
  }
  std::fclose(f);
}
}  // namespace

void block_timeline_register(void (*set)(BlockStamp*, unsigned*)) { setters().push_back(set); }

void block_timeline_start() {
  if (!std::getenv("QVL_BLOCK_TIMELINE") || g_stamps) return;
  if (cudaMalloc(&g_stamps, sizeof(BlockStamp) * kBlockStamps) != cudaSuccess ||
      cudaMalloc(&g_count, sizeof(unsigned)) != cudaSuccess || cudaMemset(g_count, 0, sizeof(unsigned)) != cudaSuccess) {
    std::fprintf(stderr, "block timeline: no device memory for it\n");
    return;
  }
  for (auto set : setters()) set(g_stamps, g_count);
  std::fprintf(stderr, "block timeline: %zu translation units stamp into %s\n", setters().size(),
               std::getenv("QVL_BLOCK_TIMELINE"));
  std::atexit(write_timeline);
}
void block_timeline_pause(bool paused) {
  if (!g_stamps) return;
  for (auto set : setters()) set(paused ? nullptr : g_stamps, g_count);
}
#else
void block_timeline_start() {}
void block_timeline_pause(bool) {}
#endif

}  // namespace qvl::cuda
