#pragma once
// qvl's limits on what it reads, in one place: every file, header, config value, image and request is checked
// against these before anything is allocated for it, and the error names the file or field, the value and the
// limit. Each bound is far above what a real Qwen3-VL model or a real conversation needs (the numbers in the
// comments), so only broken or hostile input meets one. docs/limits.md lists them with the check that applies each.
#include <cstdint>

namespace qvl::limits {

// Files, by kind: their size is read with fstat and refused before a byte is read.
inline constexpr uint64_t kConfigFileBytes = uint64_t(1) << 20;            // config.json & co. (2B: 3 KB)
inline constexpr uint64_t kIndexFileBytes = uint64_t(16) << 20;            // model.safetensors.index.json (2B: 60 KB)
inline constexpr uint64_t kJsonFileBytes = uint64_t(64) << 20;             // tokenizer.json (11.4 MB), messages files
inline constexpr uint64_t kTextFileBytes = uint64_t(256) << 20;            // --file of tokenize / bench-tokenizer
inline constexpr uint64_t kCopiedFileBytes = uint64_t(256) << 20;          // configs and tokenizer copied into a model folder
inline constexpr uint64_t kImageFileBytes = uint64_t(256) << 20;           // one picture (a 64-Mpixel PNG is ~200 MB)
inline constexpr uint64_t kSafetensorsHeaderBytes = 100'000'000;           // the reference implementation's limit

// Config values (models/*/config.json): widths, counts and vocabulary (2B: hidden 2048, 28 layers, vocab 151,936).
inline constexpr int64_t kModelWidth = int64_t(1) << 16;
inline constexpr int64_t kModelCount = int64_t(1) << 10;                   // layers, heads, vision blocks
inline constexpr int64_t kVocabulary = int64_t(1) << 22;
inline constexpr int64_t kPositions = int64_t(1) << 24;                    // max_position_embeddings (2B: 262,144)
inline constexpr int64_t kVisionPositions = int64_t(1) << 20;              // num_position_embeddings (2B: 2,304)
inline constexpr int64_t kHeadDim = 512;                                   // the fused q/k norm + RoPE kernel's limit
inline constexpr int64_t kPatchSize = 256;                                 // patch_size (2B: 16)
inline constexpr int64_t kPatchFactor = 16;                                // merge, temporal patch, channels (2B: 2, 2, 3)

// Images: pixels read from the file's own header before decoding, and the preprocessor's pixel budget.
inline constexpr int64_t kImagePixels = int64_t(8192) * 8192;
inline constexpr int64_t kImagePixelBudget = int64_t(1) << 28;             // size.longest_edge (2B: 16,777,216)

// Requests.
inline constexpr int64_t kImagesPerRequest = 256;                          // each costs a decode and >= 4 tokens
inline constexpr int64_t kContextTokens = 32768;                           // prompt + answer, unless set otherwise

}  // namespace qvl::limits
