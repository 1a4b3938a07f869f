#include <cstdio>

#include "core/paths.h"
#include "io/json_fields.h"
#include "io/random_model.h"
#include "qvl/args.h"
#include "qvl/commands.h"

namespace qvl::cli {

int run_make_random_model(const std::vector<std::string>& argv) {
  std::string presets;
  for (const auto& p : model_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  const std::vector<OptionSpec> specs = {
      {"preset", "NAME", "model shapes: " + presets},
      {"config", "FILE", "model shapes from a config.json instead of a preset"},
      {"out", "DIR", "folder to create"},
      {"dtype", "TYPE", "bf16 (default), f16 or f32"},
      {"seed", "N", "random seed (default 0)"},
      {"shard-size-mb", "N", "split the weights into shards of at most N MiB"},
      {"min-pixels", "N", "preprocessor pixel budget, lower bound (default 65536)"},
      {"max-pixels", "N", "preprocessor pixel budget, upper bound (default 16777216)"},
      {"overwrite", "", "replace an existing folder"},
      {"help", "", "show this help"},
  };
  const auto parsed = parse_or_help("make-random-model", "Writes a complete model folder with deterministic random weights.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  if (args.has("preset") == args.has("config")) fail("qvl make-random-model: give exactly one of --preset or --config");
  if (!args.has("out")) fail("qvl make-random-model: --out DIR is required");
  const ModelConfig config = args.has("preset") ? model_preset(args.get("preset"))
                                                : ModelConfig::load(args.get("config"));
  RandomModelOptions options;
  const auto dtype = dtype_from_name(args.get("dtype", "bf16"));
  if (!dtype) fail("qvl make-random-model: --dtype must be bf16, f16 or f32");
  options.dtype = *dtype;
  const int64_t seed = args.get_int("seed", 0);
  const int64_t shard_mb = args.get_int("shard-size-mb", 0);
  if (seed < 0 || shard_mb < 0) fail("qvl make-random-model: --seed and --shard-size-mb must not be negative");
  options.seed = uint64_t(seed);
  options.max_shard_bytes = uint64_t(shard_mb) << 20;
  options.tokenizer_dir = resource_dir() / "tokenizer";
  options.overwrite = args.has("overwrite");
  options.preprocessor.min_pixels = args.get_int("min-pixels", options.preprocessor.min_pixels);
  options.preprocessor.max_pixels = args.get_int("max-pixels", options.preprocessor.max_pixels);
  // Checked as the folder's preprocessor_config.json will be when it loads (positive, in order, within qvl's limit).
  PreprocessorConfig::from_json(options.preprocessor.to_json(),
                                "qvl make-random-model (--min-pixels is size.shortest_edge, --max-pixels size.longest_edge)");
  write_random_model(config, args.get("out"), options);
  std::printf("wrote %s (%lld parameters)\n", args.get("out").c_str(), (long long)config.parameter_count());
  return 0;
}

}  // namespace qvl::cli
