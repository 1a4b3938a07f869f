// qvl bench --views in a build without Vulkan's headers or glslc (no ui/render): the option says why it cannot run.
#include "core/error.h"
#include "qvl/bench_views.h"

namespace qvl::cli {

nlohmann::json time_views(Engine&, const GenerateRequest&, const ViewsBenchOptions&) {
  fail("qvl bench --views: this build of qvl has no Vulkan views (Vulkan's headers or glslc were missing when it was "
       "built: apt-get install libvulkan-dev glslc)");
}

}  // namespace qvl::cli
