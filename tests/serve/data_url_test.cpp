// Pictures in requests: data: URLs and their base64, checked against RFC 4648's test vectors and refused with the
// reason for anything else.
#include <gtest/gtest.h>

#include "core/error.h"
#include "serve/data_url.h"

namespace qvl::serve {
namespace {

TEST(DataUrl, Base64DecodesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"Zg==", "f"},         {"Zm8=", "fo"},
                                                          {"Zm9v", "foo"}, {"Zm9vYg==", "foob"},  {"Zm9vYmE=", "fooba"},
                                                          {"Zm9vYmFy", "foobar"}, {"Zm9vYg", "foob"}};
  for (const auto& [encoded, decoded] : vectors) EXPECT_EQ(decode_base64(encoded), decoded) << encoded;
  EXPECT_EQ(decode_base64("/+8="), std::string("\xff\xef"));
  EXPECT_EQ(decode_base64("Zm9v\r\nYmFy\n"), "foobar");  // MIME-wrapped lines
  EXPECT_THROW(decode_base64("Zm9v!"), Error);
  EXPECT_THROW(decode_base64("Zm=9v"), Error);
  EXPECT_THROW(decode_base64("Z"), Error);
}

TEST(DataUrl, ParsesBase64DataUrlsAndRefusesOthers) {
  const auto png = parse_data_url("data:image/png;base64,iVBORw0KGgo=", 1000);
  ASSERT_TRUE(png);
  EXPECT_EQ(png->media_type, "image/png");
  EXPECT_EQ(png->bytes, std::string("\x89PNG\r\n\x1a\n"));
  EXPECT_FALSE(parse_data_url("https://example.com/cat.png", 1000));
  EXPECT_TRUE(parse_data_url("DATA:image/jpeg;base64,", 1000));
  EXPECT_TRUE(parse_data_url("data:image/png;BASE64,Zg==", 1000));
  const auto message = [](const char* url, uint64_t limit) {
    try {
      parse_data_url(url, limit);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message("data:image/png,rawbytes", 1000).find("not base64"), std::string::npos);
  EXPECT_NE(message("data:image/png;base64", 1000).find("without a comma"), std::string::npos);
  EXPECT_NE(message("data:image/png;base64,AAAAAAAA", 5).find("over the limit of 5"), std::string::npos);
}

}  // namespace
}  // namespace qvl::serve
