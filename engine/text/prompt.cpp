#include "text/prompt.h"

#include "core/error.h"

namespace qvl {

std::vector<TokenId> expand_image_pads(const std::vector<TokenId>& ids, TokenId pad_id,
                                       const std::vector<int64_t>& tokens_per_image) {
  std::vector<TokenId> out;
  out.reserve(ids.size());
  std::size_t image = 0;
  for (TokenId id : ids) {
    if (id != pad_id) {
      out.push_back(id);
      continue;
    }
    if (image >= tokens_per_image.size())
      fail("the prompt has more <|image_pad|> tokens than images (", tokens_per_image.size(), ")");
    out.insert(out.end(), std::size_t(tokens_per_image[image++]), pad_id);
  }
  if (image != tokens_per_image.size())
    fail("the prompt has ", image, " <|image_pad|> tokens but ", tokens_per_image.size(), " images were given");
  return out;
}

std::vector<TokenId> build_prompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                  const std::vector<int64_t>& tokens_per_image, TokenId pad_id,
                                  const ChatTemplateOptions& options) {
  return expand_image_pads(tokenizer.encode(render_chat(messages, options)), pad_id, tokens_per_image);
}

}  // namespace qvl
