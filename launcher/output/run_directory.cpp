#include "launcher/output/run_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/error.hpp"

namespace ddp::launcher {
namespace {

constexpr const char* kTemporaryPrefix = "ddplaunch_";
constexpr const char* kOwnerFile = ".owner";

// mkdtemp(templ) as a path; throws naming the template and the errno text.
std::filesystem::path make_unique_directory(const std::filesystem::path& templ) {
  std::string name = templ.string();
  if (::mkdtemp(name.data()) == nullptr) {
    throw Error("cannot create the directory " + name + ": " + errno_text(errno));
  }
  return name;
}

// True when dir holds a file a person may want after a failure (error files, -r/-t logs).
bool holds_run_files(const std::filesystem::path& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename() != kOwnerFile) return true;
  }
  return false;
}

}  // namespace

std::filesystem::path temporary_root(const Environment& env) {
  auto it = env.find("TMPDIR");
  return it != env.end() && !it->second.empty() ? std::filesystem::path(it->second)
                                                : std::filesystem::path("/tmp");
}

int remove_stale_run_directories(const std::filesystem::path& root) {
  int removed = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(root, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const auto& dir = it->path();
    struct stat st {};
    if (!dir.filename().string().starts_with(kTemporaryPrefix) || ::lstat(dir.c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      continue;
    }
    int fd = ::open((dir / kOwnerFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    // The owner's lock goes with the owner, however it ended (SIGKILL included).
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code ignored;
      if (std::filesystem::remove_all(dir, ignored) > 0) ++removed;
    }
    ::close(fd);
  }
  return removed;
}

RunDirectory::RunDirectory(const LaunchConfig& config, const std::string& run_id,
                           const Environment& env) {
  if (config.log_dir) {
    // torchrun's <run_id>_<random>: the default run id is `none` for every run.
    std::string prefix = run_id;
    std::replace(prefix.begin(), prefix.end(), '/', '_');
    std::error_code ec;
    std::filesystem::create_directories(*config.log_dir, ec);
    if (ec) throw Error("cannot create --log_dir " + *config.log_dir + ": " + ec.message());
    path_ = make_unique_directory(std::filesystem::path(*config.log_dir) / (prefix + "_XXXXXX"));
    return;
  }
  auto root = temporary_root(env);
  remove_stale_run_directories(root);
  path_ = make_unique_directory(root / (std::string(kTemporaryPrefix) + "XXXXXX"));
  temporary_ = true;
  // Locked before it gets the name cleaners look for, so none can take a live one for stale.
  // Where flock is not supported the directory just gets no .owner: it is then never removed
  // by another agent (this one still removes it at exit).
  auto pending = path_ / ".owner.new";
  owner_fd_.reset(::open(pending.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (owner_fd_ && ::flock(owner_fd_.get(), LOCK_EX | LOCK_NB) == 0) {
    std::string text = "ddplaunch agent pid " + std::to_string(::getpid()) + "\n";
    ssize_t ignored = ::write(owner_fd_.get(), text.data(), text.size());
    (void)ignored;
    ::rename(pending.c_str(), (path_ / kOwnerFile).c_str());
  }
}

RunDirectory::~RunDirectory() {
  std::error_code ec;
  if (temporary_) std::filesystem::remove_all(path_, ec);
}

std::string RunDirectory::finish(int exit_status) {
  if (!temporary_ || exit_status == 0 || !holds_run_files(path_)) return "";
  // Kept on purpose: without .owner no later agent removes it.
  std::error_code ec;
  std::filesystem::remove(path_ / kOwnerFile, ec);
  std::filesystem::remove(path_ / ".owner.new", ec);
  temporary_ = false;
  return "no --log_dir given; this failed run's error files and logs are kept in " + path_.string();
}

}  // namespace ddp::launcher
