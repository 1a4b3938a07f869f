#pragma once
// The prompt a request becomes, its images counted from their headers (nothing decoded): what Engine::generate checks
// against the context, and what qvl-studio's context meter shows before a question is sent (any thread: the
// tokenizer is safe to share).
#include <vector>

#include "runtime/engine.h"
#include "vision/preprocess.h"

namespace qvl {

struct PromptCount {
  std::vector<TokenId> ids;
  std::vector<int64_t> tokens_per_image;  // merged image tokens, in prompt order
  PreprocessorConfig preprocessor;        // the images' preprocessing, with the request's token budget
};

// `preprocessor`: the engine's (Engine::image_preprocessor()); the request's own token budget applies on top. Throws
// qvl::Error for an image that cannot be sized (named) or a template the conversation does not fit.
PromptCount count_prompt(const Tokenizer& tokenizer, const PreprocessorConfig& preprocessor, TokenId image_token_id,
                         const GenerateRequest& request);

}  // namespace qvl
