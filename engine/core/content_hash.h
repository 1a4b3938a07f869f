#pragma once
// A 64-bit hash that recognises content seen before (an image a conversation already holds), not a cryptographic
// one: 8 bytes a step with MurmurHash3's 64-bit mixing, so hashing a picture costs well under its decoding.
#include <cstddef>
#include <cstdint>
#include <span>

namespace qvl {

uint64_t content_hash(std::span<const std::byte> bytes, uint64_t seed = 0);

}  // namespace qvl
