#include <cstdio>

#include "core/error.h"
#include "model/quantized_folder.h"
#include "model/weights.h"
#include "qvl/args.h"
#include "qvl/commands.h"

namespace qvl::cli {

int run_quantize(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "model folder to read"},
      {"weights", "FORMAT", WeightPolicy::quantised_names() + " (-gN: groups of N); for --dequantize-to, the quantised folder's own by default"},
      {"out", "DIR", "write the quantised folder here (it loads without quantising again)"},
      {"dequantize-to", "DIR", "write the f32 weights the quantised model computes with (the reference transformers runs)"},
      {"overwrite", "", "replace an existing model folder"},
      {"help", "", "show this help"},
  };
  const auto parsed = parse_or_help(
      "quantize", "Writes a model folder with q8/q4 weights, or the floats a quantised model computes with.", argv, specs);
  if (!parsed) return 0;
  const Args& args = *parsed;
  if (!args.has("model")) fail("qvl quantize: --model DIR is required");
  if (args.has("out") == args.has("dequantize-to")) fail("qvl quantize: give exactly one of --out or --dequantize-to");
  const ModelFolder model = ModelFolder::open(args.get("model"));
  if (args.has("out") && !args.has("weights")) fail("qvl quantize: --weights q8 or q4 names the format to write");
  const std::string weights = args.get("weights", "bf16");
  if (args.has("out") && (weights == "bf16" || weights == "auto"))
    fail("qvl quantize: --weights ", weights, " is not a format to write; choose q8 or q4 (every choice: ",  // generate's
         WeightPolicy::quantised_names(), ")");
  const WeightPolicy policy = WeightPolicy::from_name(weights);
  if (args.has("out")) {
    write_quantized_model(model, *policy.quantise, args.get("out"), args.has("overwrite"));
    std::printf("wrote %s (%s)\n", args.get("out").c_str(), policy.quantise->name().c_str());
  } else {
    write_dequantized_model(model, policy.quantise, args.get("dequantize-to"), args.has("overwrite"));
    std::printf("wrote %s (f32, as the %s model computes)\n", args.get("dequantize-to").c_str(),
                (model.config.quantization ? *model.config.quantization : *policy.quantise).name().c_str());
  }
  return 0;
}

}  // namespace qvl::cli
