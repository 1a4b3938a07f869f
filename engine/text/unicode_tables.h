#pragma once
// Unicode data for the tokenizer, generated into unicode_tables.cpp (see tools/gen_unicode_tables.py).
// Every table is sorted by its first column, for binary search.
#include <cstddef>
#include <cstdint>

namespace qvl::unicode_tables {

struct CodeRange {
  uint32_t first, last;
};
struct CombiningClass {
  uint32_t code_point;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t code_point, first, second;  // second = 0 for a singleton decomposition
};
struct Composition {
  uint32_t first, second, composite;
};

extern const CodeRange kLetters[];
extern const std::size_t kLetterCount;
extern const CodeRange kNumbers[];
extern const std::size_t kNumberCount;
extern const CombiningClass kCombiningClasses[];
extern const std::size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const std::size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const std::size_t kCompositionCount;

}  // namespace qvl::unicode_tables
