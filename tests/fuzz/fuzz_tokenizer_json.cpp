// tokenizer.json itself: model.vocab, model.merges, added_tokens, then encoding a short text with whatever loaded.
#include "fuzz_support.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const auto path = qvl::fuzz::write_scratch("tokenizer.json", qvl::fuzz::as_text(data, size));
  qvl::fuzz::expect_clean([&] {
    const auto tokenizer = qvl::Tokenizer::load(path);
    const auto ids = tokenizer->encode("Hello, world! <|im_start|>user 123 héllo 🙂");
    (void)tokenizer->decode(ids);
  });
  return 0;
}
