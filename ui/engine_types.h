#pragma once
// Plain values that cross from the engine's worker thread to the GUI thread (queued signals copy them).
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>
#include <vector>

#include "runtime/engine.h"
#include "backend/gpu_vitals.h"
#include "runtime/fusion_comparison.h"

namespace qvl::ui {

// While an answer streams, the kernel summary changes at most this often: the engine thread makes it (it walks every
// event of the answer) and the table shows it (its columns sized to their contents: each change measures every cell).
inline constexpr int kKernelTableIntervalMs = 250;

// A backend the device toggle offers (the engine's registry, backend/registry.h).
struct BackendChoice {
  QString id, label;     // "cuda", "GPU (CUDA)"
  bool available = false;
  QString reason;        // why it cannot be used at all (empty when it can)
  bool has_device_memory = false;  // a memory pool to watch and cap
  bool has_profiles = false;       // architecture profiles (the SM61 toggle)
};

// What the context meter counts a prompt with (off the engine's thread, exactly as the engine will): the model's
// tokenizer, its image token and picture costs, and the most tokens a request may hold (Engine::context_tokens).
// Small: it is handed on with every keystroke (the whole ModelInfo, its pool map included, once was).
struct PromptCounting {
  std::shared_ptr<const Tokenizer> tokenizer;
  PreprocessorConfig preprocessor;
  int image_token_id = 0;
  qint64 context_tokens = 0;
};

// What is open and where it runs.
struct ModelInfo {
  QString folder, summary;
  bool demo = false;                         // the embedded demo model (random weights)
  QString device, backend, fallback_reason;  // the backend's id, e.g. "cpu (avx512)", why "auto" did not get the GPU
  QVector<BackendChoice> backends;           // every backend of this build, the CPU first
  const BackendChoice* current() const {
    for (const BackendChoice& b : backends)
      if (b.id == device) return &b;
    return nullptr;
  }
  QString device_error;  // the GPU failed during this session and cannot be used again
  QStringList fusions;  // the fused ops in use
  MemoryReport memory;              // the device pool right after loading or moving (with the segment map)
  QString memory_plan;              // where the parts live within the GPU's budget (empty on the CPU)
  QString weights;                  // as held: "bf16", "q8", "q4" (auto resolved)
  PreprocessorConfig preprocessor;  // image token costs
  GenerationConfig generation;      // the model's sampling defaults
  int layers = 0, heads = 0;        // of the text decoder: what the attention view offers
  PromptCounting counting;  // its preprocessor is the one above
  // What the CPU view shows: the weights' files (mapped, not copied, where the CPU reads them), the bytes a decode
  // step reads (times the decode rate: the bandwidth used), and the CPU's threads.
  quint64 weights_file_bytes = 0, decode_weight_bytes = 0;
  int cpu_threads = 0;
};

// How to load a model (the GUI's toggles).
struct EngineSettings {
  QString device = "auto";        // "auto", "cpu" or "cuda"
  QString cuda_profile = "auto";  // "auto", "sm61" or "native"
  qint64 memory_limit_mib = 0;    // GPU pool cap (0: the free memory less a reserve), to behave like a smaller card
  QString weights = "bf16";       // "bf16" (as stored), "q8", "q4" or "auto" (EngineOptions::weights)
  bool fusions = true;
};

// One request: the conversation so far (text items and image placeholders) and the images' files, which the worker
// decodes (so a bad file fails the request with its name, off the GUI thread).
struct ChatRequest {
  quint64 id = 0;
  GenerateRequest request;  // images empty: filled from image_paths by the worker
  QStringList image_paths;
};

// Live numbers of the answer in progress (at most ~30 per second) and of a finished one (final = true).
struct PerfSnapshot {
  quint64 request_id = 0;
  bool final = false;
  std::vector<KernelSummary> kernels;  // this answer's kernels by total time (empty when timing is off)
  MemoryReport memory;                 // with the segment map
  std::vector<double> step_ms;         // wall time of each token since the previous snapshot
  qint64 tokens = 0, prompt_tokens = 0;
  qint64 cached_tokens = 0;  // of prompt_tokens, those the chat's kept keys and values served
  double ttft_ms = 0, prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  ConversationCacheStats conversations;  // what the engine keeps between answers: chats' keys and values ...
  VisionCacheStats pictures;             // ... and pictures' features
};

struct Answer {
  quint64 id = 0;
  QString text, stop_reason, device;
  GenerateTiming timing;
};

}  // namespace qvl::ui

Q_DECLARE_METATYPE(qvl::ui::ModelInfo)
Q_DECLARE_METATYPE(qvl::ui::EngineSettings)
Q_DECLARE_METATYPE(qvl::ui::ChatRequest)
Q_DECLARE_METATYPE(qvl::ui::PerfSnapshot)
Q_DECLARE_METATYPE(qvl::ui::Answer)
Q_DECLARE_METATYPE(qvl::FusionComparison)
Q_DECLARE_METATYPE(qvl::GpuVitals)
