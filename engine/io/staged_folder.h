#pragma once
// A model folder built in a sibling staging folder ("<out>.partial-<pid>") and moved into place at the end, so an
// interrupted run never leaves half a model where a model is expected. An existing `out` is replaced only when it is
// empty, or when overwrite is on and it is a model folder (configs and weights, a config.json): never the current
// folder or one that holds it, never a folder holding other files.
#include <filesystem>
#include <string>

namespace qvl {

// The files a model folder holds, by name: configs and tokenizer (.json), weights (.safetensors), chat templates
// (.jinja) and the tokenizer's merges.txt. Only folders of these are replaced.
bool is_model_file_name(const std::string& name);

class StagedFolder {
public:
  // Throws qvl::Error (naming `out`) when `out` may not be replaced; removes the staging folders of killed runs
  // beside it (no run holds their lock); creates the empty staging folder and holds a lock on it until the end.
  StagedFolder(std::filesystem::path out, bool overwrite);
  ~StagedFolder();  // removes the staging folder unless it was published
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // where to write
  // Puts the staging folder where `out` is: an existing folder is swapped out in one step (renameat2's exchange: no
  // moment without a complete folder there), then removed.
  void publish();

private:
  std::filesystem::path out_, staging_;
  bool published_ = false;
  int lock_fd_ = -1;  // flock on the staging folder: tells other runs it is alive
};

}  // namespace qvl
