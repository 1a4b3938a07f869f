// model.safetensors.index.json: the weight map from tensor names to shard files, beside one real shard.
#include "fuzz_support.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const bool shard = [] {  // one small valid shard the index may name
    qvl::write_safetensors(qvl::fuzz::scratch() / "model-00001-of-00001.safetensors",
                           {{"a", qvl::Tensor::zeros(qvl::DType::F32, {2, 3})}, {"b", qvl::Tensor::zeros(qvl::DType::BF16, {4})}});
    return true;
  }();
  (void)shard;
  qvl::fuzz::write_scratch("model.safetensors.index.json", qvl::fuzz::as_text(data, size));
  qvl::fuzz::expect_clean([&] {
    const qvl::Checkpoint ck = qvl::Checkpoint::open(qvl::fuzz::scratch());
    for (const auto& [name, entry] : ck.entries()) (void)ck.tensor(name);
  });
  return 0;
}
