#include "nvml/sim/sim_state_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::nvml::sim {
namespace {

// Holds an exclusive or shared flock on `<path>.lock` for its lifetime. A
// separate lock file keeps the lock valid across the rename of the state file.
class FileLock {
 public:
  static absl::StatusOr<FileLock> Acquire(const std::string& path, bool exclusive) {
    const std::string lock_path = path + ".lock";
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(
          StrCat("cannot open lock file ", lock_path, ": ", std::strerror(errno)));
    }
    while (::flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(StrCat("cannot lock ", lock_path, ": ", std::strerror(err)));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // Closing releases the flock.
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

absl::StatusOr<SimState> Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(StrCat("simulated GPU file ", path,
                                      " does not exist (create it with e.g. "
                                      "'gpus: [{model: A100-SXM4-40GB}]')"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto state = ParseSimState(buffer.str());
  if (!state.ok()) return Annotate(state.status(), path);
  return state;
}

absl::Status Store(const std::string& path, const SimState& state) {
  const std::string tmp = StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << SerializeSimState(state);
    out.flush();
    if (!out) return absl::UnavailableError(StrCat("cannot write ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(StrCat("cannot replace ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SimStateFile::Transact(
    const std::function<absl::Status(SimState&, bool* changed)>& op) const {
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/true));
  ASSIGN_OR_RETURN(SimState state, Load(path_));
  const std::vector<SimFault> faults_before = state.faults;
  bool changed = false;
  const absl::Status result = op(state, &changed);
  // A call that failed may still have consumed an injected fault.
  if (changed || state.faults != faults_before) RETURN_IF_ERROR(Store(path_, state));
  return result;
}

absl::StatusOr<SimState> SimStateFile::Read() const {
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/false));
  return Load(path_);
}

absl::Status SimStateFile::Write(const SimState& state) const {
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/true));
  return Store(path_, state);
}

}  // namespace prism::nvml::sim
