#include "base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"

#include "base/strings.h"

namespace prism {
namespace {

absl::Status TooLarge(std::string_view name, size_t max_bytes) {
  return absl::InvalidArgumentError(StrCat(name, ": larger than the ", max_bytes, "-byte limit"));
}

}  // namespace

absl::StatusOr<std::string> ReadStreamBounded(std::istream& in, std::string_view name,
                                              size_t max_bytes) {
  std::string out;
  char chunk[64 * 1024];
  // At most one chunk past the bound is read, so a stream that never ends stops there.
  while (out.size() <= max_bytes && in) {
    in.read(chunk, static_cast<std::streamsize>(sizeof(chunk)));
    out.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (out.size() > max_bytes) return TooLarge(name, max_bytes);
  if (in.bad()) return absl::NotFoundError(StrCat("cannot read ", name, ": read error"));
  return out;
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes) {
  // POSIX calls rather than a stream: a stream reports a directory or an I/O error as an empty
  // file, where read(2) says what went wrong. Pipes and devices are read like files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::string out;
  char chunk[64 * 1024];
  absl::Status status;
  while (out.size() <= max_bytes) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      status = absl::NotFoundError(StrCat("cannot read ", path, ": ", std::strerror(errno)));
      break;
    }
    if (got == 0) break;
    out.append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  if (!status.ok()) return status;
  if (out.size() > max_bytes) return TooLarge(path, max_bytes);
  return out;
}

absl::Status WriteFileReplacing(const std::string& path, std::string_view text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string tmp =
      (target.parent_path() / ("." + target.filename().string() + ".tmp")).string();
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::InternalError(StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace prism
