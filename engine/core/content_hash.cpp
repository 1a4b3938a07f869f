#include "core/content_hash.h"

#include <cstring>

namespace qvl {
namespace {

constexpr uint64_t kMul1 = 0x87c37b91114253d5ULL, kMul2 = 0x4cf5ad432745937fULL;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t finalise(uint64_t h) {  // MurmurHash3's fmix64: every input bit reaches every output bit
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

uint64_t mix(uint64_t h, uint64_t word) {
  h ^= rotl(word * kMul1, 31) * kMul2;
  return rotl(h, 27) * 5 + 0x52dce729;
}

}  // namespace

uint64_t content_hash(std::span<const std::byte> bytes, uint64_t seed) {
  uint64_t h = seed ^ (uint64_t(bytes.size()) * kMul2);
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = mix(h, word);
  }
  if (i < bytes.size()) {
    uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    h = mix(h, tail);  // the length, in the seed, tells tails apart
  }
  return finalise(h);
}

}  // namespace qvl
