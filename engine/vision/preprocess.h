#pragma once
// Qwen3-VL image preprocessing as transformers does it (reference spec section 3): smart_resize to a multiple of
// patch·merge inside the pixel budget, antialiased bicubic resize (PIL/torchvision style, on uint8), rescale and
// normalise, duplicate the frame to fill a temporal patch, patchify in merge-window order.
#include <cstdint>
#include <utility>

#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "model/rope.h"
#include "vision/image.h"

namespace qvl {

// (height, width) after resizing; round-half-to-even like Python. Throws for an aspect ratio over 200.
std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels);

// (height, width) the model sees: smart_resize's, or the image's own with do_resize off (then it must tile into
// patch·merge windows itself, as transformers' reshape requires). Every count of image tokens comes from here.
std::pair<int64_t, int64_t> model_input_size(int64_t height, int64_t width, const PreprocessorConfig& config);

// Separable antialiased bicubic resize (Keys a = -0.5, support scaled by the downscale factor), uint8 in and out.
RgbImage resize_bicubic_antialiased(const RgbImage& image, int64_t height, int64_t width);

// The resized image and how to cut it: the backend makes the patches (Backend::patchify), so only the u8 image
// travels to a GPU.
struct PreprocessedImage {
  RgbImage resized;
  ImageGrid grid;
  PatchLayout layout;
};

PreprocessedImage preprocess_image(const RgbImage& image, const PreprocessorConfig& config);

// One image's patches on `backend`: [grid.h·grid.w, C·T·P·P] f32 in merge-window order. A GPU backend queues the
// upload and the kernel and returns, so the host resizes the next image while the GPU cuts this one.
Tensor patches(Backend& backend, const PreprocessedImage& image);
// The vision tower's input: the images' patches, rows one after another (one image: its tensor as is).
Tensor stack_rows(Backend& backend, const std::vector<Tensor>& parts);

// The config with its pixel budget set from token counts (0: keep the config's bound); throws when max < min.
PreprocessorConfig with_token_budget(PreprocessorConfig config, int64_t min_tokens, int64_t max_tokens);

// Merged tokens an image of this size costs in the prompt.
int64_t image_token_count(int64_t height, int64_t width, const PreprocessorConfig& config);

}  // namespace qvl
