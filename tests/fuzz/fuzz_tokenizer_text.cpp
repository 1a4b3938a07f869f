// Text through the bundled Qwen tokenizer: encode (refusing invalid UTF-8 by qvl::Error), and for text that encodes,
// decoding gives the same bytes back — the round trip is this target's oracle.
#include "fuzz_support.h"
#include "text/tokenizer.h"

#ifndef QVL_FUZZ_TOKENIZER_JSON
#error "QVL_FUZZ_TOKENIZER_JSON names the bundled tokenizer.json"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const auto tokenizer = qvl::Tokenizer::load(QVL_FUZZ_TOKENIZER_JSON);
  const std::string_view text = qvl::fuzz::as_text(data, size);
  qvl::fuzz::expect_clean([&] {
    const std::vector<qvl::TokenId> ids = tokenizer->encode(text);
    if (tokenizer->decode(ids) != text) __builtin_trap();  // encode/decode must round-trip valid UTF-8
  });
  return 0;
}
