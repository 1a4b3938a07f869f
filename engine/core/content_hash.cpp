#include "core/content_hash.h"

#include <array>
#include <cstring>
#include <random>

namespace qvl {
namespace {

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The process's key: 128 random bits, drawn on first use.
const std::array<uint64_t, 2>& process_key() {
  static const std::array<uint64_t, 2> key = [] {
    std::random_device device;
    std::array<uint64_t, 2> k{};
    for (uint64_t& word : k) word = (uint64_t(device()) << 32) ^ uint64_t(device());
    return k;
  }();
  return key;
}

// SipHash-2-4 (Aumasson & Bernstein, 2012) of `bytes` under (k0, k1).
struct SipState {
  uint64_t v0, v1, v2, v3;
  SipState(uint64_t k0, uint64_t k1)
      : v0(k0 ^ 0x736f6d6570736575ULL), v1(k1 ^ 0x646f72616e646f6dULL), v2(k0 ^ 0x6c7967656e657261ULL),
        v3(k1 ^ 0x7465646279746573ULL) {}
  void round() {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round(), round();
    v0 ^= m;
  }
  uint64_t finish() {
    v2 ^= 0xff;
    round(), round(), round(), round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

}  // namespace

uint64_t siphash24(std::span<const std::byte> bytes, uint64_t k0, uint64_t k1) {
  SipState s(k0, k1);
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);  // little-endian, as the reference reads it on x86
    s.absorb(word);
  }
  uint64_t last = 0;  // the tail in the low bytes, the length (mod 256) in the top one
  if (i < bytes.size()) std::memcpy(&last, bytes.data() + i, bytes.size() - i);
  s.absorb(last | uint64_t(bytes.size() & 0xff) << 56);
  return s.finish();
}

uint64_t content_hash(std::span<const std::byte> bytes, uint64_t domain) {
  const auto& key = process_key();
  return siphash24(bytes, key[0], key[1] ^ (domain * 0x9e3779b97f4a7c15ULL));
}

}  // namespace qvl
