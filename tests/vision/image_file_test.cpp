// Image files as a hostile sender makes them: the size limits read from every format's real header (a JPEG's frame
// header behind a large EXIF block once skipped the check and OpenCV decoded 32768 x 32768), truncated files refused
// rather than decoded half grey, the file-size limit, and images sized from their headers so that a request's token
// count is checked before anything is decoded.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/engine.h"
#include "test_support.h"
#include "vision/image.h"
#include "vision/image_header.h"
#include "vision/preprocess.h"

namespace qvl {
namespace {

const std::filesystem::path kDecodeDir = std::filesystem::path(QVL_TEST_GOLDEN_DIR) / "images" / "decode";

std::string be16(int v) { return {char(v >> 8), char(v & 0xff)}; }

// A JPEG whose frame header (SOF0 of width x height) sits behind `app_bytes` of APP1 segments.
std::string jpeg_with_frame_after(std::size_t app_bytes, int width, int height) {
  std::string s = "\xff\xd8";
  while (app_bytes > 0) {
    const std::size_t n = std::min<std::size_t>(app_bytes, 65533);
    s += "\xff\xe1" + be16(int(n) + 2) + std::string(n, '\0');
    app_bytes -= n;
  }
  s += "\xff\xc0" + be16(11) + "\x08" + be16(height) + be16(width) + std::string("\x01\x01\x11\x00", 4);
  s += "\xff\xda" + be16(8) + std::string("\x01\x01\x00\x00\x3f\x00", 6);  // a scan header, then its data:
  s += std::string("\x12\x34\xff\x00\x56\xff\xd3\x78", 8);                 // a stuffed 0xFF and a restart marker
  return s + "\xff\xd9";
}

std::string le16(int v) { return {char(v & 0xff), char(v >> 8)}; }
std::string le32(int64_t v) { return le16(int(v & 0xffff)) + le16(int((v >> 16) & 0xffff)); }

// A BMP of `width` x `height` 24-bit pixels (value `grey`) with the OS/2 1.x info header (12 bytes, 16-bit sides).
std::string os2_bmp(int width, int height, char grey) {
  const int row = (24 * width + 31) / 32 * 4;
  const std::string info = le32(12) + le16(width) + le16(height) + le16(1) + le16(24);
  return "BM" + le32(26 + row * height) + le32(0) + le32(26) + info + std::string(std::size_t(row * height), grey);
}

// A 32-bit BMP whose rows are described by colour masks (BI_BITFIELDS, compression 3).
std::string bitfields_bmp(int width, int height) {
  const int row = 4 * width;
  const std::string info = le32(40) + le32(width) + le32(height) + le16(1) + le16(32) + le32(3) + le32(row * height) +
                           le32(2835) + le32(2835) + le32(0) + le32(0);
  const std::string masks = le32(0x00ff0000) + le32(0x0000ff00) + le32(0x000000ff);
  return "BM" + le32(66 + row * height) + le32(0) + le32(66) + info + masks + std::string(std::size_t(row * height), '\x40');
}

std::string message_of(const std::function<void()>& work) { return test::error_within(std::chrono::seconds(20), work); }

TEST(ImageHeader, FindsAJpegFrameBehindAnyAmountOfExif) {
  for (std::size_t app : {std::size_t(0), std::size_t(65533), std::size_t(70000), std::size_t(400000)}) {
    const auto h = read_image_header(jpeg_with_frame_after(app, 32768, 32768));
    ASSERT_TRUE(h) << app;
    EXPECT_EQ(h->format, "JPEG");
    EXPECT_EQ(h->width, 32768);
    EXPECT_EQ(h->height, 32768);
    EXPECT_FALSE(h->truncated);
  }
  // The decompression bomb of the report: refused from its header, whatever came before the frame.
  test::TempDir dir;
  test::write_bytes(dir / "bomb.jpg", jpeg_with_frame_after(66000, 32768, 32768));
  const std::string e = message_of([&] { load_image(dir / "bomb.jpg"); });
  EXPECT_NE(e.find("32768x32768 is 1073741824 pixels (1073.7 M), more than the limit of 67108864 pixels (67.1 M)"), std::string::npos) << e;
  EXPECT_NE(e.find("refused before decoding"), std::string::npos) << e;
}

// A PNG whose header claims two sides near 2^32 (the fuzzer's finding: their product overflowed int64 in the message).
TEST(ImageHeader, SidesPastTheLimitAreRefusedWithoutTheirProduct) {
  std::string png = test::read_bytes(kDecodeDir / "rgba.png");
  const auto put32 = [&](std::size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + std::size_t(i)] = char(v >> (24 - 8 * i));
  };
  put32(16, 2347450807u), put32(20, 3951954589u);  // IHDR's width and height
  test::TempDir dir;
  test::write_bytes(dir / "huge.png", png);
  const std::string e = message_of([&] { load_image(dir / "huge.png"); });
  EXPECT_NE(e.find("2347450807x3951954589, more than the limit of 67108864 pixels (67.1 M) (refused before decoding)"),
            std::string::npos) << e;
}

TEST(ImageHeader, ReadsTheTestImagesWholeAndSeesEveryCutOne) {
  for (const char* name : {"cmyk.jpg", "exif_rotate90.jpg", "gray8.png", "gray16.png", "palette.png", "rgb.bmp", "rgba.png"}) {
    SCOPED_TRACE(name);
    const std::string bytes = test::read_bytes(kDecodeDir / name);
    const auto whole = read_image_header(bytes);
    ASSERT_TRUE(whole);
    EXPECT_GT(whole->width, 0);
    EXPECT_GT(whole->height, 0);
    EXPECT_FALSE(whole->truncated);
    for (const std::size_t keep : {bytes.size() - 1, bytes.size() * 3 / 4, bytes.size() / 2}) {
      const auto cut = read_image_header(std::string_view(bytes).substr(0, keep));
      ASSERT_TRUE(cut) << keep;
      EXPECT_TRUE(cut->truncated) << keep << " of " << bytes.size() << " bytes";
    }
  }
}

// An OS/2 1.x header holds 16-bit sides where the later ones hold 32-bit: read as the later kind, 5 x 3 became
// 196613 x 65537 and the picture was refused as too large. Rows given by colour masks are as plain as uncompressed
// ones, and a file short of them is cut.
TEST(ImageHeader, ReadsOs2AndBitfieldBmpsAndSeesThemCut) {
  const std::string os2 = os2_bmp(5, 3, '\x30');
  const auto h = read_image_header(os2);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->width, 5);
  EXPECT_EQ(h->height, 3);
  EXPECT_FALSE(h->truncated);
  EXPECT_TRUE(read_image_header(std::string_view(os2).substr(0, os2.size() - 1))->truncated);
  const std::string masked = bitfields_bmp(4, 2);
  const auto m = read_image_header(masked);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->width, 4);
  EXPECT_EQ(m->height, 2);
  EXPECT_FALSE(m->truncated);
  EXPECT_TRUE(read_image_header(std::string_view(masked).substr(0, masked.size() - 4))->truncated);
#if QVL_TEST_DECODES_ALL_FORMATS
  test::TempDir dir;
  test::write_bytes(dir / "os2.bmp", os2);
  const RgbImage image = load_image(dir / "os2.bmp");
  EXPECT_EQ(image.width, 5);
  EXPECT_EQ(image.height, 3);
  EXPECT_EQ(image.pixels[0], 0x30);
#endif
}

TEST(LoadImage, RefusesTruncatedUnknownAndOverLargeFiles) {
  test::TempDir dir;
  for (const char* name : {"cmyk.jpg", "rgba.png", "rgb.bmp"}) {
    const std::string bytes = test::read_bytes(kDecodeDir / name);
    test::write_bytes(dir / name, bytes.substr(0, bytes.size() * 2 / 3));
    // libjpeg only warned about a JPEG cut short and filled the rest with grey.
    const std::string e = message_of([&] { load_image(dir / name); });
    EXPECT_NE(e.find("data ends before the image does"), std::string::npos) << e;
  }
  test::write_bytes(dir / "image.tif", std::string("II*\0\x08\0\0\0 a TIFF header qvl does not size", 40));
  const std::string tiff = message_of([&] { load_image(dir / "image.tif"); });
  EXPECT_NE(tiff.find("a TIFF image; qvl reads PNG, JPEG, BMP and WebP"), std::string::npos) << tiff;
  // A PNG signature followed by garbage was reported as "not a PNG": it is a damaged one.
  test::write_bytes(dir / "damaged.png", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(64, '\x5a'));
  const std::string damaged = message_of([&] { load_image(dir / "damaged.png"); });
  EXPECT_NE(damaged.find("starts as a PNG image but its header is missing or damaged"), std::string::npos) << damaged;
  test::write_bytes(dir / "noise.bin", std::string(64, '\x5a'));
  const std::string noise = message_of([&] { load_image(dir / "noise.bin"); });
  EXPECT_NE(noise.find("not a PNG, JPEG, BMP or WebP image"), std::string::npos) << noise;
  ImageLimits small;
  small.max_file_bytes = 100;
  const std::string big = message_of([&] { load_image(kDecodeDir / "rgba.png", small); });
  EXPECT_NE(big.find("over the limit of 100 for an image file"), std::string::npos) << big;
}

// A well-formed GIF (one white pixel): decoded where the build's OpenCV has a GIF decoder, otherwise refused with
// that reason and the formats qvl reads (it once said "corrupt data" about a good file).
TEST(LoadImage, AGifIsDecodedOrRefusedForWhatItIs) {
  test::TempDir dir;
  test::write_bytes(dir / "pixel.gif", std::string("GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00"
                                                   ",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02" "D\x01\x00;", 35));
  const auto header = read_image_header(test::read_bytes(dir / "pixel.gif"));
  ASSERT_TRUE(header);
  EXPECT_EQ(header->format, "GIF");
  EXPECT_FALSE(header->truncated);
  try {
    const RgbImage image = load_image(dir / "pixel.gif");
    EXPECT_EQ(image.width, 1);
    EXPECT_EQ(image.pixels[0], 255);
  } catch (const std::exception& e) {
    const std::string m = e.what();
#if QVL_TEST_DECODES_ALL_FORMATS
    EXPECT_NE(m.find("cannot decode GIF pictures in this build"), std::string::npos) << m;
    EXPECT_NE(m.find("qvl reads PNG, JPEG, BMP and WebP"), std::string::npos) << m;
#else
    EXPECT_NE(m.find("this build decodes PNG only"), std::string::npos) << m;
#endif
  }
}

TEST(ImageInput, IsSizedFromItsHeaderAndDecodedOnlyWhenAsked) {
  test::TempDir dir;
  const std::string png = test::read_bytes(kDecodeDir / "rgba.png");
  const auto header = read_image_header(png);
  ASSERT_TRUE(header);
  // A header with no image data behind it: sized, but it cannot be decoded.
  test::write_bytes(dir / "undecodable.png", png.substr(0, 33) + std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12));
  const ImageInput input = ImageInput::file(dir / "undecodable.png");
  EXPECT_EQ(input.size(), (std::pair<int64_t, int64_t>{header->width, header->height}));
  EXPECT_THROW(input.pixels(), Error);
  // A file replaced by one of another size between sizing and decoding is refused by name.
  test::write_bytes(dir / "swapped.png", png);
  const ImageInput swapped = ImageInput::file(dir / "swapped.png");
  ASSERT_EQ(swapped.size().first, header->width);
  test::write_bytes(dir / "swapped.png", test::read_bytes(kDecodeDir.parent_path() / "photo_240x320.png"));
  const std::string e = message_of([&] { swapped.pixels(); });
  EXPECT_NE(e.find("changed while the request was prepared"), std::string::npos) << e;
}

// Bytes held in memory (a picture sent to qvl serve) are checked like a file: sized from their header against the
// pixel limit before decoding, named in errors, and the same picture as the file (pixels and content key).
TEST(ImageInput, EncodedBytesAreCheckedAndDecodedLikeTheirFile) {
  const std::filesystem::path file = kDecodeDir / "rgba.png";
  const auto bytes = std::make_shared<const std::string>(test::read_bytes(file));
  const ImageInput encoded = ImageInput::encoded(bytes, "messages[0].content[1]");
  const ImageInput from_file = ImageInput::file(file);
  EXPECT_EQ(encoded.size(), from_file.size());
  EXPECT_EQ(encoded.pixels()->pixels, from_file.pixels()->pixels);
  EXPECT_EQ(encoded.content_key(), from_file.content_key());
  ImageLimits tiny;
  tiny.max_pixels = encoded.size().first * encoded.size().second - 1;
  const ImageInput over = ImageInput::encoded(bytes, "picture", tiny);
  const std::string e = message_of([&] { over.size(); });
  EXPECT_NE(e.find("picture: "), std::string::npos) << e;
  EXPECT_NE(e.find("(refused before decoding)"), std::string::npos) << e;
  const ImageInput cut = ImageInput::encoded(std::make_shared<const std::string>(bytes->substr(0, bytes->size() / 2)), "cut");
  EXPECT_NE(message_of([&] { cut.pixels(); }).find("cut: the PNG data ends before the image does"), std::string::npos);
  ImageLimits small_file;
  small_file.max_file_bytes = 100;
  EXPECT_NE(message_of([&] { ImageInput::encoded(bytes, "big", small_file); }).find("big: "), std::string::npos);
}

// 10,000 references to one small picture once decoded to 7.3 GB before the context check refused them: the count and
// the tokens are checked from the headers, before any image is decoded (these could not be).
TEST(Engine, ChecksImageCountAndContextBeforeDecodingAnyImage) {
  EngineOptions options;
  options.device = "cpu";
  options.max_context = 2048;
  const auto engine = Engine::load(test::resource_dir() / "models" / "demo-tiny", options);
  test::TempDir dir;
  const std::string png = test::read_bytes(kDecodeDir / "rgba.png");
  test::write_bytes(dir / "undecodable.png", png.substr(0, 33) + std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12));
  auto request_with = [&](int images) {
    GenerateRequest r;
    ChatMessage user{"user", {}};
    for (int i = 0; i < images; ++i) {
      user.content.push_back(ContentItem::image());
      r.images.push_back(ImageInput::file(dir / "undecodable.png"));
    }
    user.content.push_back(ContentItem::make_text("What are these?"));
    r.messages = {user};
    r.max_new_tokens = 4;
    return r;
  };
  const std::string count = message_of([&] { engine->generate(request_with(10000)); });
  EXPECT_NE(count.find("10000 images, over the limit of 256"), std::string::npos) << count;
  const auto [width, height] = ImageInput::file(dir / "undecodable.png").size();
  const int64_t per_image = image_token_count(height, width, engine->image_preprocessor());
  const int over_context = int(options.max_context / per_image) + 1;
  ASSERT_LE(over_context, 256) << "the demo model's minimum image tokens no longer overflow the context in 256 images";
  const std::string context = message_of([&] { engine->generate(request_with(over_context)); });
  EXPECT_NE(context.find("over the context limit"), std::string::npos) << context;
  const std::string decoded = message_of([&] { engine->generate(request_with(1)); });
  EXPECT_NE(decoded.find("undecodable.png"), std::string::npos) << decoded;  // one that fits is decoded: and fails
}

}  // namespace
}  // namespace qvl
