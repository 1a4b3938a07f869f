#include "cuda_context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "block_timeline.cuh"
#include "common.cuh"
#include "core/error.h"
#include "fault.cuh"
#include "flash_attention_mma.cuh"

namespace qvl {

CudaContext::CudaContext(int device_index, std::size_t capacity, const std::string& profile_name)
    : device(device_index) {
  // For the tests of the fallback path: an initialisation failure on demand.
  if (const char* forced = std::getenv("QVL_CUDA_FAIL_INIT"); forced && *forced)
    fail("CUDA initialisation failed (forced by QVL_CUDA_FAIL_INIT=", forced, ")");
  CUDA_CHECK(cudaSetDevice(device));
  cuda::block_timeline_start();  // a development tool; nothing unless built with it
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  // "auto" picks the SM61 profile below compute capability 7.0 (no tensor cores, no bf16).
  profile = profile_name == "sm61" || (profile_name == "auto" && props.major < 7) ? &cuda::kSm61Profile
                                                                                   : &cuda::kNativeProfile;
  multiprocessors = props.multiProcessorCount;
  tensor_core_attention = profile->tensor_core_attention && cuda::flash_attention_mma_available();
  overlapped_launches = profile->overlapped_launches && props.major >= 9;
  device_name = props.name;
  std::memcpy(uuid.data(), props.uuid.bytes, uuid.size());
  name = std::string("cuda (") + props.name + ", sm_" + std::to_string(props.major * 10 + props.minor) + ", profile " +
         profile->name + ")";
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  staging = std::make_unique<PinnedStaging>(std::size_t(32) << 20);
  if (profile->gemm == cuda::GemmKernel::Cublas) cublas = std::make_unique<cuda::CublasGemm>(stream);
  if (const char* n = std::getenv("QVL_CUDA_FAULT_AT_LINEAR")) fault_at_op_ = std::atoll(n);
  pool = std::make_shared<pool::MemoryPool>(
      pool::Upstream{[](std::size_t n) -> void* {
                       void* p = nullptr;
                       return cudaMalloc(&p, n) == cudaSuccess ? p : (cudaGetLastError(), nullptr);
                     },
                     [](void* p, std::size_t) { cudaFree(p); }},
      capacity);
}

CudaContext::~CudaContext() {
  cublas.reset();
  staging.reset();
  cudaStreamDestroy(stream);
}

Tensor CudaContext::device_tensor(DType dtype, Shape shape, pool::Owner owner) {
  const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  void* p = pool->allocate(std::max<std::size_t>(bytes, 1), owner);
  std::shared_ptr<const void> keep(p, [pool = pool](const void* q) { pool->release(const_cast<void*>(q)); });
  Tensor t = Tensor::borrow(dtype, std::move(shape), p, std::move(keep), Device::CUDA);
  if (recording) recorded_tensors.push_back(t);
  return t;
}

void CudaContext::stage(void* dst, const void* src, std::size_t bytes) {
  if (recording && !recording_keeps_uploads)
    fail("CUDA backend: host data cannot be uploaded while recording (write it before replaying)");
  // Synchronous on the legacy stream, outside the capture: allowed in the relaxed capture mode beside a stream
  // created non-blocking (cuda_recording.cpp synchronised the stream before it began).
  if (recording) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  else staging->upload(dst, src, bytes, stream);
}

void CudaContext::maybe_inject_fault() {
  if (fault_at_op_ > 0 && --fault_at_op_ == 0) cuda::trap(stream);
}

cuda::WeightType weight_type(DType t) {
  switch (t) {
    case DType::F32: return cuda::WeightType::F32;
    case DType::F16: return cuda::WeightType::F16;
    case DType::BF16: return cuda::WeightType::BF16;
    default: fail("CUDA backend: weights of type ", dtype_name(t), " are not supported");
  }
}
float* f32(const Tensor& t) {
  if (t.dtype() != DType::F32 || t.device() != Device::CUDA) fail("CUDA backend: expected an f32 device tensor");
  return const_cast<float*>(t.data<float>());
}
KvData kv_data(const Tensor& t) {
  if (t.device() != Device::CUDA || (t.dtype() != DType::F32 && t.dtype() != DType::BF16))
    fail("CUDA backend: keys and values must be an f32 or bf16 device tensor, not ", dtype_name(t.dtype()));
  return {const_cast<void*>(t.raw()), t.dtype() == DType::BF16};
}
std::pair<KvData, KvData> kv_pair(const Tensor& k, const Tensor& v, const char* op) {
  const KvData keys = kv_data(k), values = kv_data(v);
  if (keys.bf16 != values.bf16) fail(op, ": keys and values of different types");
  return {keys, values};
}
ActivationOut activation_out(const Tensor& t) {
  if (t.device() != Device::CUDA || (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16))
    fail("CUDA backend: expected an f32, bf16 or f16 device tensor");
  return {const_cast<void*>(t.raw()), weight_type(t.dtype())};
}

}  // namespace qvl
