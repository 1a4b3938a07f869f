#pragma once
// A development tool, not part of the product (built only with -DQVL_BLOCK_TIMELINE=ON): when each block of each
// kernel reached allow_next_kernel (at its start in every kernel that calls it) and when its wait for the kernel
// before returned, stamped by the GPU's clock (%globaltimer). CUPTI's timeline
// (tools/trace/cupti_timeline.cpp) serialises the kernels it records, so it cannot show how a decode step's kernels
// overlap under programmatic dependent launch; these stamps can. A kernel's wait returns once the kernel before it
// has finished, so the first return of kernel i + 1's waits is where kernel i ended. Written at exit to the file
// $QVL_BLOCK_TIMELINE names (the last kBlockStamps stamps: a ring), one line a stamp; summed by
// tools/trace/block_timeline_summary.py.
#include <cuda_runtime.h>

namespace qvl::cuda {

// Starts recording where the build has the tool and $QVL_BLOCK_TIMELINE is set (after the device is chosen).
void block_timeline_start();
// Recording paused (true) and resumed, once `stream`'s work so far is done: the bench's profiled run launches each
// kernel alone between events, which is not the overlapped chain the timeline is for.
void block_timeline_pause(bool paused, cudaStream_t stream);

#if defined(QVL_BLOCK_TIMELINE) && defined(__CUDACC__)
struct BlockStamp {
  unsigned long long time_ns, grid_id;     // grid_id: %gridid, the launch's number in the context
  unsigned grid_x, grid_y, threads, what;  // what: 0 started, 1 its wait returned
  unsigned sm, block;                      // blockIdx.x + blockIdx.y · gridDim.x (no stamping kernel has a z)
};
constexpr unsigned kBlockStamps = 1u << 22;

void block_timeline_register(void (*set)(BlockStamp*, unsigned long long*));

namespace block_timeline_detail {
// One copy a translation unit (no relocatable device code): each registers how to point its own at the buffer.
static __device__ BlockStamp* stamps = nullptr;
static __device__ unsigned long long* count = nullptr;
static void point_at(BlockStamp* s, unsigned long long* c) {
  cudaMemcpyToSymbol(stamps, &s, sizeof s);
  cudaMemcpyToSymbol(count, &c, sizeof c);
}
static const bool registered = (block_timeline_register(point_at), true);
}  // namespace block_timeline_detail

__device__ __forceinline__ void block_stamp(unsigned what) {
  using namespace block_timeline_detail;
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || !stamps) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  unsigned long long grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned slot = unsigned(atomicAdd(count, 1ull) % kBlockStamps);
  stamps[slot] = BlockStamp{now, grid, gridDim.x, gridDim.y, blockDim.x * blockDim.y * blockDim.z, what, sm,
                            blockIdx.x + blockIdx.y * gridDim.x};
}
#define QVL_BLOCK_STAMP(what) ::qvl::cuda::block_stamp(what)
#else
#define QVL_BLOCK_STAMP(what) ((void)0)
#endif

}  // namespace qvl::cuda
