#include <fstream>

#include "core/error.h"
#include "vision/image.h"
#include "vision/image_header.h"

#if QVL_WITH_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace qvl {

RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(where, ": cannot open the image");
  std::string head(1 << 16, '\0');  // JPEG headers can sit behind large EXIF blocks
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(std::size_t(in.gcount()));
  if (head.empty()) fail(where, ": the image file is empty");
  if (const auto size = image_header_size(head)) {
    const auto [w, h] = *size;
    if (w <= 0 || h <= 0) fail(where, ": the image header says ", w, "x", h, " pixels");
    if (w * h > limits.max_pixels)
      fail(where, ": ", w, "x", h, " pixels is more than the limit of ", limits.max_pixels, " (refused before decoding)");
  }
#if QVL_WITH_OPENCV
  cv::Mat decoded;
  try {
    // Keep the stored depth and channels (PIL's conversions differ from OpenCV's); the EXIF orientation is applied.
    decoded = cv::imread(where, cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR);
  } catch (const cv::Exception& e) {
    fail(where, ": cannot decode the image (", e.what(), ")");
  }
  if (decoded.empty()) fail(where, ": not a readable image (unknown format or corrupt data)");
  if (int64_t(decoded.rows) * decoded.cols > limits.max_pixels)
    fail(where, ": ", decoded.cols, "x", decoded.rows, " pixels is more than the limit of ", limits.max_pixels);
  // 16-bit samples: PIL's convert("RGB") clips them to 255 rather than scaling, and transformers uses PIL.
  if (decoded.depth() == CV_16U) {
    cv::Mat clipped;
    cv::min(decoded, 255.0, clipped);
    clipped.convertTo(decoded, CV_8U);
  } else if (decoded.depth() != CV_8U) {
    fail(where, ": unsupported sample type (only 8- and 16-bit images)");
  }
  cv::Mat rgb;
  switch (decoded.channels()) {
    case 1: cv::cvtColor(decoded, rgb, cv::COLOR_GRAY2RGB); break;
    case 3: cv::cvtColor(decoded, rgb, cv::COLOR_BGR2RGB); break;
    case 4: cv::cvtColor(decoded, rgb, cv::COLOR_BGRA2RGB); break;  // alpha dropped, not composited (as PIL)
    default: fail(where, ": unsupported channel count ", decoded.channels());
  }
  RgbImage image{rgb.rows, rgb.cols, std::vector<uint8_t>(std::size_t(rgb.rows) * std::size_t(rgb.cols) * 3)};
  for (int y = 0; y < rgb.rows; ++y)
    std::copy_n(rgb.ptr<uint8_t>(y), std::size_t(rgb.cols) * 3, image.pixels.data() + std::size_t(y) * std::size_t(rgb.cols) * 3);
  return image;
#else
  fail(where, ": this build of qvl cannot decode images (built without OpenCV)");
#endif
}

}  // namespace qvl
