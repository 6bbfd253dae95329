#include "nvml/sim/sim_state_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

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

// The last text this process read or wrote per state file, and its parse. Every NVML call is one
// transaction (SimNvml, the fake libnvidia-ml), and parsing the YAML (then copying the parse) is
// by far its dearest step: re-parsing an unchanged file made a pass over N GPUs (export, apply,
// the device plugin's inventory) take O(N^2) time, 70 s for 1,000 GPUs. The file is still read
// each time and compared byte for byte, so a change by another process is always seen.
class ParseCache {
 public:
  static ParseCache& Get() {
    static ParseCache* cache = new ParseCache;
    return *cache;
  }
  // Runs `fn` on the parse of `text` (parsing it only if it is not the cached text), under the
  // cache's lock; `fn` may change the state in place and must then record the new text with
  // SetText (or the entry is dropped).
  template <typename Fn>
  absl::Status With(const std::string& path, std::string text, Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[path];
    if (!e.valid || e.text != text) {
      e.valid = false;
      auto state = ParseSimState(text);
      if (!state.ok()) return Annotate(state.status(), path);
      e.state = *std::move(state);
      e.text = std::move(text);
      e.valid = true;
    }
    return fn(e);
  }
  struct Entry {
    bool valid = false;
    std::string text;
    SimState state;
  };

 private:
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat("simulated GPU file ", path,
                                      " does not exist (create it with e.g. "
                                      "'gpus: [{model: A100-SXM4-40GB}]')"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Writes `state`; returns the text written.
absl::StatusOr<std::string> Store(const std::string& path, const SimState& state) {
  const std::string tmp = StrCat(path, ".tmp.", ::getpid());
  std::string text = SerializeSimState(state);
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    if (!out) return absl::UnavailableError(StrCat("cannot write ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(StrCat("cannot replace ", path, ": ", std::strerror(err)));
  }
  return text;
}

}  // namespace

absl::Status SimStateFile::Transact(
    const std::function<absl::Status(SimState&, bool* changed)>& op) const {
  absl::Status result;
  std::string then;
  {
    ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/true));
    ASSIGN_OR_RETURN(std::string text, ReadText(path_));
    RETURN_IF_ERROR(ParseCache::Get().With(path_, std::move(text), [&](ParseCache::Entry& e) {
      // The operation runs on the cached state itself: copying 1,000 GPUs per call was the next
      // O(N) step after the parse.
      const std::vector<SimFault> faults_before = e.state.faults;
      bool changed = false;
      result = op(e.state, &changed);
      then = std::exchange(e.state.then_pending, "");
      // A call that failed may still have consumed an injected fault.
      if (!changed && e.state.faults == faults_before) return absl::OkStatus();
      auto written = Store(path_, e.state);
      if (!written.ok()) {
        e.valid = false;  // The state in memory is not the file's any more.
        return written.status();
      }
      // What was written parses back to this state (SerializeSimState round-trips).
      e.text = *std::move(written);
      return absl::OkStatus();
    }));
  }
  // A crash test's fault: the call's result is in the file and the lock is free (a test reads
  // the state while this process hangs).
  if (then == "kill") raise(SIGKILL);
  if (then == "hang") {
    // Bounded, so that a test that forgets to kill the process does not hang CTest.
    sleep(120);
  }
  return result;
}

absl::StatusOr<SimState> SimStateFile::Read() const {
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/false));
  ASSIGN_OR_RETURN(std::string text, ReadText(path_));
  SimState out;
  RETURN_IF_ERROR(ParseCache::Get().With(path_, std::move(text), [&](ParseCache::Entry& e) {
    out = e.state;
    return absl::OkStatus();
  }));
  return out;
}

absl::Status SimStateFile::Write(const SimState& state) const {
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path_, /*exclusive=*/true));
  return Store(path_, state).status();
}

}  // namespace prism::nvml::sim
