#pragma once
// From a conversation to the ids the model sees: render the chat template, tokenise, then expand each
// <|image_pad|> into one pad per merged image token ((grid_h * grid_w) / merge^2), as Qwen3VLProcessor does.
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace qvl {

// Replaces the i-th occurrence of `pad_id` by tokens_per_image[i] copies; throws qvl::Error when the number of
// pads and images differ.
std::vector<TokenId> expand_image_pads(const std::vector<TokenId>& ids, TokenId pad_id,
                                       const std::vector<int64_t>& tokens_per_image);

std::vector<TokenId> build_prompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                  const std::vector<int64_t>& tokens_per_image, TokenId pad_id,
                                  const ChatTemplateOptions& options = {});

}  // namespace qvl
