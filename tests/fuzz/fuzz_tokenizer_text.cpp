// Text through the bundled Qwen tokenizer: encode (refusing invalid UTF-8 by qvl::Error), and for text that encodes,
// encoding its decoding gives the same ids — this target's oracle. (Not decode(encode(t)) == t: the tokenizer applies
// NFC, so U+0344 comes back as U+0308 U+0301; NFC is idempotent, so the ids must be stable.)
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
    if (tokenizer->encode(tokenizer->decode(ids)) != ids) __builtin_trap();
  });
  return 0;
}
