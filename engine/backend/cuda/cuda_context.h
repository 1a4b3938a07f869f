#pragma once
// What every op of the CUDA backend runs against: one GPU, its architecture profile, one stream of our own, the
// caching memory pool (every allocation tagged with its owner, so the GUI can draw who holds the memory), the
// pinned staging ring for host <-> device copies (so nothing waits for the GPU until a result is read back) and
// cuBLAS. Recording state lives here too: tensors allocated while a CUDA graph is being captured stay with it.
#include <utility>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gemm_cublas.cuh"
#include "memory_pool.h"
#include "pinned_staging.h"
#include "profile.h"
#include "weight_type.h"

namespace qvl {

class CudaContext {
public:
  CudaContext(int device, std::size_t capacity, const std::string& profile);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // A tensor from the pool (kept by the recording when one is being captured).
  Tensor device_tensor(DType dtype, Shape shape, pool::Owner owner);
  // Host -> device through the staging ring. While recording: refused (a recorded copy would read the ring at
  // replay time, long after it moved on), or where the recording keeps uploads, copied at once (dst is the
  // recording's: every replay reads what was copied).
  void stage(void* dst, const void* src, std::size_t bytes);
  // Fault injection for the tests of the "kernel fault during generation" path ($QVL_CUDA_FAULT_AT_LINEAR=N: the
  // N-th matrix product traps on the GPU).
  void maybe_inject_fault();

  int device = 0;
  int multiprocessors = 1;  // queried once: kernels pick their shape from it
  std::string device_name;
  std::array<uint8_t, 16> uuid{};
  const cuda::KernelProfile* profile = nullptr;
  bool tensor_core_attention = false;  // the profile asks for it and this device and build run it
  bool overlapped_launches = false;    // the profile asks for them and this device has them (SM90+); also clusters
  std::string name;                    // "cuda (NVIDIA H100, sm_90, profile native)"
  cudaStream_t stream = nullptr;
  std::shared_ptr<pool::MemoryPool> pool;
  std::unique_ptr<PinnedStaging> staging;
  std::unique_ptr<cuda::CublasGemm> cublas;  // the native profile's GEMM
  bool recording = false;
  bool recording_keeps_uploads = false;  // RecordedUploads::Fixed
  std::vector<Tensor> recorded_tensors;

private:
  int64_t fault_at_op_ = 0;
};

// Helpers shared by the backend's files.
cuda::WeightType weight_type(DType t);
float* f32(const Tensor& t);  // throws unless an f32 device tensor
// Keys and values as the attention kernels read them: f32 (activations, an f32 cache) or bf16 (a bf16 cache).
struct KvData {
  void* data;
  bool bf16;
};
KvData kv_data(const Tensor& t);  // throws unless an f32 or bf16 device tensor
// Keys and values read together: one type for both (the kernels take one flag); `op` names the caller in the error.
std::pair<KvData, KvData> kv_pair(const Tensor& k, const Tensor& v, const char* op);
// An activation a norm writes: f32, or a 16-bit operand for cuBLAS (the norm slot of a projection).
struct ActivationOut {
  void* data;
  cuda::WeightType type;
};
ActivationOut activation_out(const Tensor& t);

}  // namespace qvl
