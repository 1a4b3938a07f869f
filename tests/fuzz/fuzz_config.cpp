// The model's JSON configs: config.json (text, vision, quantisation), generation_config.json and
// preprocessor_config.json, each read from the same input; and the pixel budget derived from a preprocessor config.
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "io/model_config.h"
#include "vision/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const nlohmann::json j = nlohmann::json::parse(qvl::fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: read_json_file reports that, and it is not what this target tests
  qvl::fuzz::expect_clean([&] { (void)qvl::ModelConfig::from_json(j); });
  qvl::fuzz::expect_clean([&] { (void)qvl::GenerationConfig::from_json(j); });
  qvl::fuzz::expect_clean([&] {
    const qvl::PreprocessorConfig p = qvl::PreprocessorConfig::from_json(j);
    (void)qvl::image_token_count(480, 640, qvl::with_token_budget(p, 4, 64));
  });
  return 0;
}
