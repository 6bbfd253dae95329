// src/deviceplugin/node_files.h: the files the node agent makes on the host for containers, and
// their removal, done so that nothing a container writes can redirect them (docs/security.md,
// "Files on the node").
//
// A container sees exactly one of them: its shared region (docs/intercept.md), a regular file the
// agent creates at its final size before the container starts and bind-mounts alone, so the
// container cannot create, rename or link anything in the agent's directories. What it can still
// do through its writable descriptor is change the file's size or allocate blocks past its end
// (write(2) beyond the end, ftruncate(2), fallocate(2)); RegionGuard puts the file back to its
// size, freeing those blocks, as soon as inotify reports the change (and at every rescan).
//
// Every path is <agent directory>/<one component>: components are checked (IsPlainFileName) and
// opened from a descriptor of the directory with O_NOFOLLOW, so a symbolic link is never followed,
// wherever it was planted. Removal walks a tree with openat/unlinkat on descriptors and removes a
// link as a link, never its target.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prism::deviceplugin {

// One path component: 1..255 bytes, no '/', no NUL, not "." or "..".
bool IsPlainFileName(std::string_view name);

// Creates `dir` (mode 0700; its parents as needed) unless it exists; refuses a `dir` whose last
// component is a symbolic link or not a directory.
absl::Status EnsurePrivateDir(const std::string& dir);

// Creates <dir>/<name> as a regular file of exactly `size` bytes with its blocks allocated
// (fallocate; ftruncate where the file system cannot), mode 0666 (it is visible only inside the
// one container it is mounted into, whose processes may run as any user). A regular file already
// there (the agent restarted; the container runs) keeps its contents and is put back to `size`
// (TrimFile). Anything else there (a link, a directory, a FIFO) is an error and is left alone.
absl::Status CreateSizedFile(const std::string& dir, std::string_view name, uint64_t size);

// Blocks a file of `size` bytes may hold before TrimFile frees the rest (file systems round up
// to their block and may preallocate a little).
inline constexpr uint64_t kTrimSlackBytes = uint64_t{1} << 20;

// Puts the regular file <dir>/<name> back to `size` bytes when it is another size or holds more
// than `size` + kTrimSlackBytes of blocks (including blocks allocated past its end with
// FALLOC_FL_KEEP_SIZE), freeing every block past `size`. The first `size` bytes are kept (the
// container's processes map them). Returns whether it had to. NotFound when there is no file;
// FailedPrecondition for anything but a regular file (never followed, never changed).
absl::StatusOr<bool> TrimFile(const std::string& dir, std::string_view name, uint64_t size);

// Removes <base>/<name> and, for a directory, everything under it, never following a symbolic
// link: `base` is opened with O_DIRECTORY|O_NOFOLLOW, every directory below it with
// openat(O_DIRECTORY|O_NOFOLLOW), and entries go with unlinkat on those descriptors. A link is
// removed as a link, its target untouched. OK when there is nothing to remove (nor `base`).
// InvalidArgument when `name` is not IsPlainFileName; FailedPrecondition past kMaxRemoveDepth
// levels; Internal for other errors (what could not be removed stays).
inline constexpr int kMaxRemoveDepth = 16;
absl::Status RemoveUnder(const std::string& base, std::string_view name);

// Keeps every file in one directory at `size` bytes: a thread waits on inotify for a file's
// change (IN_MODIFY: write, truncate, fallocate; mapping stores raise none, so the library's own
// updates never wake it) and trims that file (TrimFile); every `rescan` it trims every file (a
// full inotify queue loses events). `on_trim(name)` runs on the guard's thread after each file
// it had to put back.
class RegionGuard {
 public:
  RegionGuard(std::string dir, uint64_t size, absl::Duration rescan,
              std::function<void(const std::string&)> on_trim = {});
  ~RegionGuard();
  RegionGuard(const RegionGuard&) = delete;
  RegionGuard& operator=(const RegionGuard&) = delete;

  // Creates the directory (EnsurePrivateDir) and starts watching it.
  absl::Status Start();
  void Stop();
  // Trims every file of the directory now; returns how many it had to put back.
  int TrimAll();

 private:
  void Loop();

  const std::string dir_;
  const uint64_t size_;
  const absl::Duration rescan_;
  const std::function<void(const std::string&)> on_trim_;
  int inotify_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: Stop wakes the thread.
  std::thread thread_;
  std::atomic<bool> started_{false};
};

}  // namespace prism::deviceplugin
