#pragma once
// A 64-bit key that recognises content seen before (an image a conversation or the feature store already holds):
// SipHash-2-4 under a key drawn at random once per process. Keyed, because the keys decide what a request reuses:
// with a public hash a client of a shared `qvl serve` who knows another client's picture could craft a different
// one with the same key and be answered from the other's features or conversation. Unkeyed fast hashes
// (MurmurHash3, used here before) have seed-independent collisions; without the key a collision costs ~2^64
// guesses. Keys are only compared within the process that made them (nothing stores them).
#include <cstddef>
#include <cstdint>
#include <span>

namespace qvl {

// `domain` separates kinds of content (a file's bytes from decoded pixels of the same bytes).
uint64_t content_hash(std::span<const std::byte> bytes, uint64_t domain = 0);
// SipHash-2-4 under the key (k0, k1), each the little-endian reading of 8 key bytes.
uint64_t siphash24(std::span<const std::byte> bytes, uint64_t k0, uint64_t k1);

}  // namespace qvl
