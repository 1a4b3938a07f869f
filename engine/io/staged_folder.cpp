#include "io/staged_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <string>

#include "core/error.h"

namespace qvl {
namespace fs = std::filesystem;

namespace {

// An existing `out` is replaced only when it is empty, or when overwrite is on and it is a model folder: never the
// current folder or one that holds it ("--out . --overwrite" once emptied the folder the command ran in), never a
// folder holding files a model folder does not hold.
void check_replaceable(const fs::path& out, bool overwrite) {
  const fs::path target = fs::weakly_canonical(fs::absolute(out));
  for (fs::path p = fs::weakly_canonical(fs::current_path());; p = p.parent_path()) {
    if (p == target) fail(out.string(), ": is the current folder or holds it; a model is not written over it");
    if (p == p.parent_path()) break;
  }
  if (!fs::is_directory(out)) fail(out.string(), ": exists and is not a folder");
  if (fs::is_empty(out)) return;
  if (!overwrite) fail(out.string(), ": already exists and is not empty (--overwrite replaces it)");
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !is_model_file_name(name))
      fail(out.string(), ": overwrite replaces model folders only, and '", name,
           "' is not a model file (configs, tokenizer and weights: .json, .safetensors, .jinja, merges.txt)");
  }
  if (!fs::exists(out / "config.json"))
    fail(out.string(), ": overwrite replaces model folders only, and this folder has no config.json");
}

// An open descriptor of `folder` holding an exclusive flock on it (-1 when it cannot be opened, or when `wait` is off
// and another open description holds the lock). The lock follows the folder through renames and ends with its
// owner, however that ends: it, not a pid (reused, or another container's), tells a live run's folder from a killed
// one's.
int lock_folder(const fs::path& folder, bool wait) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Puts the finished folder `staging` where `out` is. An existing `out` is swapped out in one step (renameat2's
// exchange: no moment without a complete folder there), then removed; where the file system cannot exchange, it is
// renamed aside first.
void move_into_place(const fs::path& staging, const fs::path& out) {
  fs::create_directories(out.parent_path().empty() ? fs::path(".") : out.parent_path());
  if (!fs::exists(out)) {
    fs::rename(staging, out);
    return;
  }
  // The old folder is held locked until it is gone, swapped to the staging name or set aside: no other run takes it
  // for a killed run's and removes it under us.
  const int old_lock = lock_folder(out, false);
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);  // now the old folder
    if (old_lock >= 0) ::close(old_lock);
    return;
  }
  fs::path old = out;
  old += ".old-" + std::to_string(::getpid());
  fs::rename(out, old);
  fs::rename(staging, out);
  fs::remove_all(old);
  if (old_lock >= 0) ::close(old_lock);
}

// Staging folders of runs that were killed ("<out>.partial-<pid>", "<out>.old-<pid>" whose lock nobody holds): a
// killed quantize or make-random-model once left gigabytes behind for good. A folder made in the last minute is left
// alone too: its run may not have taken its lock yet.
void remove_abandoned_siblings(const fs::path& out) {
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec;
  const std::string base = out.filename().string();
  const auto recent = fs::file_time_type::clock::now() - std::chrono::minutes(1);
  for (const auto& entry : fs::directory_iterator(parent, fs::directory_options::skip_permission_denied, ec)) {
    const std::string name = entry.path().filename().string();
    for (const std::string& prefix : {base + ".partial-", base + ".old-"}) {
      if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() - prefix.size() > 9) continue;
      if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
      std::error_code time_error;
      const auto modified = fs::last_write_time(entry.path(), time_error);
      if (time_error || modified > recent || fs::is_symlink(entry.path(), time_error)) continue;
      const int lock = lock_folder(entry.path(), false);
      if (lock < 0) continue;  // a live run holds it
      fs::remove_all(entry.path(), ec);
      ::close(lock);
    }
  }
}

}  // namespace

bool is_model_file_name(const std::string& name) {
  for (const char* ending : {".json", ".safetensors", ".jinja"})
    if (name.ends_with(ending)) return true;
  return name == "merges.txt";  // not any .txt: a folder of someone's notes is not replaced
}

StagedFolder::StagedFolder(fs::path out, bool overwrite)
    : out_(out.has_filename() ? std::move(out) : out.parent_path()) {  // "dir/" names "dir"
  if (fs::exists(out_)) check_replaceable(out_, overwrite);
  // Without `out`, a kill between the fallback's two renames may have left the only copies beside it: keep them.
  if (fs::exists(out_)) remove_abandoned_siblings(out_);
  staging_ = out_;
  staging_ += ".partial-" + std::to_string(::getpid());
  if (fs::exists(staging_)) {  // a killed run's of this pid, or a live one's in another pid namespace
    const int lock = lock_folder(staging_, false);
    if (lock < 0) fail(staging_.string(), ": another run is writing there (it holds the folder's lock)");
    fs::remove_all(staging_);
    ::close(lock);
  }
  fs::create_directories(staging_);
  lock_fd_ = lock_folder(staging_, true);
  if (lock_fd_ < 0) fail(staging_.string(), ": cannot open the staging folder just made: ", std::strerror(errno));
}

StagedFolder::~StagedFolder() {
  std::error_code ignored;
  if (!published_) fs::remove_all(staging_, ignored);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StagedFolder::publish() {
  move_into_place(staging_, out_);
  published_ = true;
  ::close(lock_fd_);  // the lock was the staging folder's; the published folder needs none
  lock_fd_ = -1;
}

}  // namespace qvl
