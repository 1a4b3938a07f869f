// Content keys: SipHash-2-4 against the reference's published vectors, and the properties the caches rely on (the
// same bytes give the same key within a process; other bytes or another domain give another).
#include <gtest/gtest.h>

#include <vector>

#include "core/content_hash.h"

namespace qvl {
namespace {

std::vector<std::byte> counting(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(i);
  return v;
}

TEST(ContentHash, SipHash24MatchesTheReferenceVectors) {
  // Key 00 01 .. 0f; messages 00 01 .. (n - 1) (vectors.h of the SipHash reference implementation).
  const uint64_t k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;
  EXPECT_EQ(siphash24(counting(0), k0, k1), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(siphash24(counting(1), k0, k1), 0x74f839c593dc67fdULL);
  EXPECT_EQ(siphash24(counting(8), k0, k1), 0x93f5f5799a932462ULL);
  EXPECT_EQ(siphash24(counting(15), k0, k1), 0xa129ca6149be45e5ULL);
  EXPECT_EQ(siphash24(counting(63), k0, k1), 0x958a324ceb064572ULL);
}

TEST(ContentHash, SameBytesSameKeyOtherBytesOrDomainAnother) {
  const std::vector<std::byte> picture = counting(1000);
  std::vector<std::byte> touched = picture;
  touched[517] ^= std::byte(1);
  EXPECT_EQ(content_hash(picture), content_hash(counting(1000)));
  EXPECT_NE(content_hash(picture), content_hash(touched));
  EXPECT_NE(content_hash(picture, 0), content_hash(picture, 1));
  EXPECT_NE(content_hash(counting(7)), content_hash(counting(8)));  // a tail and its length
}

}  // namespace
}  // namespace qvl
