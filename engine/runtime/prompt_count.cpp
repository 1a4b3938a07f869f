#include "runtime/prompt_count.h"

#include "text/prompt.h"

namespace qvl {

PromptCount count_prompt(const Tokenizer& tokenizer, const PreprocessorConfig& preprocessor, TokenId image_token_id,
                         const GenerateRequest& request) {
  PromptCount count;
  count.preprocessor = with_token_budget(preprocessor, request.image_min_tokens, request.image_max_tokens);
  for (const ImageInput& image : request.images) {
    const auto [width, height] = image.size();
    count.tokens_per_image.push_back(image_token_count(height, width, count.preprocessor));
  }
  count.ids = build_prompt(tokenizer, request.messages, count.tokens_per_image, image_token_id, request.template_options);
  return count;
}

}  // namespace qvl
