#include "deviceplugin/node_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::deviceplugin {
namespace {

constexpr char kLog[] = "device-plugin";

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string Errno(int err) { return std::strerror(err); }

// `dir` itself, not following a link at its last component.
int OpenDirNoFollow(const std::string& dir) {
  return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

absl::Status CheckName(std::string_view name) {
  if (IsPlainFileName(name)) return absl::OkStatus();
  // Names reaching here passed config/names.h; show at most a little of one that did not.
  std::string shown;
  for (char c : name.substr(0, 64)) {
    shown += (c >= 0x20 && c < 0x7F) ? c : '?';
  }
  return absl::InvalidArgumentError(
      StrCat("'", shown, "' is not a single file name (empty, '.', '..', or holds '/' or NUL)"));
}

// Frees every block of `fd` past `size` and leaves it `size` bytes long. A truncation that
// shrinks the file releases all blocks past its new end, those allocated past the old end with
// FALLOC_FL_KEEP_SIZE included; one to the current size may not, so a file already `size` long
// is first made one byte longer.
bool CutTo(int fd, uint64_t current, uint64_t size, int* err) {
  const off_t target = static_cast<off_t>(size);
  if (current <= size && ::ftruncate(fd, target + 1) != 0) {
    *err = errno;
    return false;
  }
  if (::ftruncate(fd, target) != 0) {
    *err = errno;
    return false;
  }
  return true;
}

absl::Status RemoveEntry(int dir_fd, const std::string& name, const std::string& where, int depth) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(StrCat("cannot stat ", where, ": ", Errno(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    // Files, links (as links), FIFOs, sockets, device nodes: the entry goes, nothing it names.
    if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
    if (errno != EISDIR) {
      return absl::InternalError(StrCat("cannot remove ", where, ": ", Errno(errno)));
    }
    // It became a directory meanwhile: remove it as one.
  }
  if (depth >= kMaxRemoveDepth) {
    return absl::FailedPreconditionError(
        StrCat("not removing ", where, ": more than ", kMaxRemoveDepth, " levels deep"));
  }
  const int child = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (child < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    if (errno == ELOOP || errno == ENOTDIR) {
      // Replaced by a link or a file since the stat: remove that entry, never follow it.
      if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
    }
    return absl::InternalError(StrCat("cannot open ", where, ": ", Errno(errno)));
  }
  DIR* d = ::fdopendir(child);
  if (d == nullptr) {
    const int err = errno;
    ::close(child);
    return absl::InternalError(StrCat("cannot read ", where, ": ", Errno(err)));
  }
  std::vector<std::string> entries;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry != "." && entry != "..") entries.push_back(entry);
  }
  absl::Status status = absl::OkStatus();
  for (const std::string& entry : entries) {
    absl::Status s = RemoveEntry(::dirfd(d), entry, StrCat(where, "/", entry), depth + 1);
    if (!s.ok() && status.ok()) status = s;
  }
  ::closedir(d);
  if (!status.ok()) return status;
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) {
    return absl::OkStatus();
  }
  return absl::InternalError(StrCat("cannot remove ", where, ": ", Errno(errno)));
}

}  // namespace

bool IsPlainFileName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

absl::Status EnsurePrivateDir(const std::string& dir) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    struct stat st;
    if (::lstat(dir.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode)) {
        return absl::FailedPreconditionError(StrCat(dir, " is a symbolic link"));
      }
      if (!S_ISDIR(st.st_mode)) {
        return absl::FailedPreconditionError(StrCat(dir, " is not a directory"));
      }
      return absl::OkStatus();
    }
    if (errno != ENOENT)
      return absl::InternalError(StrCat("cannot stat ", dir, ": ", Errno(errno)));
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), 0700) == 0) return absl::OkStatus();
    if (errno != EEXIST) {
      return absl::InternalError(StrCat("cannot create ", dir, ": ", Errno(errno)));
    }
  }
  return absl::InternalError(StrCat("cannot create ", dir));
}

absl::Status CreateSizedFile(const std::string& dir, std::string_view name, uint64_t size) {
  RETURN_IF_ERROR(CheckName(name));
  RETURN_IF_ERROR(EnsurePrivateDir(dir));
  Fd dir_fd(OpenDirNoFollow(dir));
  if (dir_fd.get() < 0) return absl::InternalError(StrCat("cannot open ", dir, ": ", Errno(errno)));
  const std::string file(name);
  const std::string path = StrCat(dir, "/", file);
  Fd fd(::openat(dir_fd.get(), file.c_str(),
                 O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    if (errno != EEXIST)
      return absl::InternalError(StrCat("cannot create ", path, ": ", Errno(errno)));
    // There already: ours from before a restart, with a live container's region in it.
    absl::StatusOr<bool> trimmed = TrimFile(dir, name, size);
    if (!trimmed.ok()) return trimmed.status();
    if (*trimmed) LogWarning(kLog, path, " was not ", size, " bytes; put back");
    return absl::OkStatus();
  }
  // Processes of the container may run as any user; only that container sees the file.
  int err = 0;
  if (::fchmod(fd.get(), 0666) != 0) err = errno;
  if (err == 0 && ::fallocate(fd.get(), 0, 0, static_cast<off_t>(size)) != 0) {
    err = errno;
    // A file system without fallocate: the size alone (blocks come as the library writes).
    if ((err == EOPNOTSUPP || err == ENOSYS) &&
        ::ftruncate(fd.get(), static_cast<off_t>(size)) == 0) {
      err = 0;
    }
  }
  if (err != 0) {
    ::unlinkat(dir_fd.get(), file.c_str(), 0);
    return absl::InternalError(StrCat("cannot make ", path, " ", size, " bytes: ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TrimFile(const std::string& dir, std::string_view name, uint64_t size) {
  RETURN_IF_ERROR(CheckName(name));
  const std::string file(name);
  const std::string path = StrCat(dir, "/", file);
  Fd dir_fd(OpenDirNoFollow(dir));
  if (dir_fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(StrCat(dir, ": no such directory"));
    return absl::InternalError(StrCat("cannot open ", dir, ": ", Errno(errno)));
  }
  struct stat st;
  if (::fstatat(dir_fd.get(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(StrCat(path, ": no such file"));
    return absl::InternalError(StrCat("cannot stat ", path, ": ", Errno(errno)));
  }
  // Checked before opening, so that a device node or FIFO put there is never opened.
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " is not a regular file"));
  }
  Fd fd(::openat(dir_fd.get(), file.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return absl::InternalError(StrCat("cannot open ", path, ": ", Errno(errno)));
  if (::fstat(fd.get(), &st) != 0) {
    return absl::InternalError(StrCat("cannot stat ", path, ": ", Errno(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " is not a regular file"));
  }
  const uint64_t current = static_cast<uint64_t>(st.st_size);
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  if (current == size && allocated <= size + kTrimSlackBytes) return false;
  int err = 0;
  if (current > size || allocated > size + kTrimSlackBytes) {
    if (!CutTo(fd.get(), current, size, &err)) {
      return absl::InternalError(StrCat("cannot truncate ", path, ": ", Errno(err)));
    }
  } else if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    // Shrunk (the container cut its own region): back to its size, zeros past the cut.
    return absl::InternalError(StrCat("cannot extend ", path, ": ", Errno(errno)));
  }
  (void)::fallocate(fd.get(), 0, 0, static_cast<off_t>(size));  // Blocks back, where it can.
  return true;
}

absl::Status RemoveUnder(const std::string& base, std::string_view name) {
  RETURN_IF_ERROR(CheckName(name));
  Fd base_fd(OpenDirNoFollow(base));
  if (base_fd.get() < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(StrCat("cannot open ", base, ": ", Errno(errno)));
  }
  const std::string entry(name);
  return RemoveEntry(base_fd.get(), entry, StrCat(base, "/", entry), 0);
}

RegionGuard::RegionGuard(std::string dir, uint64_t size, absl::Duration rescan,
                         std::function<void(const std::string&)> on_trim)
    : dir_(std::move(dir)), size_(size), rescan_(rescan), on_trim_(std::move(on_trim)) {}

RegionGuard::~RegionGuard() { Stop(); }

absl::Status RegionGuard::Start() {
  if (started_.load()) return absl::OkStatus();
  RETURN_IF_ERROR(EnsurePrivateDir(dir_));
  Fd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (in.get() < 0) return absl::InternalError(StrCat("inotify_init1: ", Errno(errno)));
  if (::inotify_add_watch(in.get(), dir_.c_str(), IN_MODIFY | IN_ONLYDIR | IN_DONT_FOLLOW) < 0) {
    return absl::InternalError(StrCat("cannot watch ", dir_, ": ", Errno(errno)));
  }
  Fd stop(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (stop.get() < 0) return absl::InternalError(StrCat("eventfd: ", Errno(errno)));
  inotify_fd_ = in.release();
  stop_fd_ = stop.release();
  started_ = true;
  TrimAll();  // Whatever happened while no guard ran.
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void RegionGuard::Stop() {
  if (!started_.exchange(false)) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(inotify_fd_);
  ::close(stop_fd_);
  inotify_fd_ = stop_fd_ = -1;
}

int RegionGuard::TrimAll() {
  Fd dir_fd(OpenDirNoFollow(dir_));
  if (dir_fd.get() < 0) return 0;
  DIR* d = ::fdopendir(dir_fd.release());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  int trimmed = 0;
  for (const std::string& name : names) {
    absl::StatusOr<bool> t = TrimFile(dir_, name, size_);
    if (t.ok() && *t) {
      ++trimmed;
      if (on_trim_) on_trim_(name);
    }
  }
  return trimmed;
}

void RegionGuard::Loop() {
  alignas(inotify_event) char buffer[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  const int64_t rescan_ms = absl::ToInt64Milliseconds(rescan_);
  const int timeout =
      rescan_ms <= 0 ? -1 : (rescan_ms > INT32_MAX ? INT32_MAX : static_cast<int>(rescan_ms));
  while (true) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return;
    if (n == 0) {
      TrimAll();
      continue;
    }
    std::set<std::string> changed;
    bool overflow = false;
    while (true) {
      const ssize_t len = ::read(inotify_fd_, buffer, sizeof(buffer));
      if (len <= 0) break;
      for (ssize_t off = 0; off < len;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buffer + off);
        if ((ev->mask & IN_Q_OVERFLOW) != 0) overflow = true;
        if (ev->len > 0 && (ev->mask & IN_MODIFY) != 0) changed.insert(ev->name);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
    }
    if (overflow) {
      TrimAll();
      continue;
    }
    for (const std::string& name : changed) {
      absl::StatusOr<bool> t = TrimFile(dir_, name, size_);
      if (t.ok() && *t && on_trim_) on_trim_(name);
    }
  }
}

}  // namespace prism::deviceplugin
