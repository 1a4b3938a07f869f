// A messages file (qvl generate --messages): roles, content lists, image items; the prompt rendered from what parses,
// with the bundled tokenizer and a few tokens per image.
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "text/messages_json.h"
#include "text/prompt.h"

#ifndef QVL_FUZZ_TOKENIZER_JSON
#error "QVL_FUZZ_TOKENIZER_JSON names the bundled tokenizer.json"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const auto tokenizer = qvl::Tokenizer::load(QVL_FUZZ_TOKENIZER_JSON);
  const nlohmann::json j = nlohmann::json::parse(qvl::fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  qvl::fuzz::expect_clean([&] {
    const qvl::Conversation c = qvl::conversation_from_json(j, "/nonexistent-base", "messages.json");
    const std::vector<int64_t> tokens_per_image(c.image_paths.size(), 4);
    const auto pad = tokenizer->token_id("<|image_pad|>");
    (void)qvl::build_prompt(*tokenizer, c.messages, tokens_per_image, pad.value_or(0));
  });
  return 0;
}
