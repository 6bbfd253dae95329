// src/base/file.h: whole-file reads with a size bound, for the files a user or a manifest names
// (device-config.yaml, mig-parted configs, cluster and pod descriptions, traces); and whole-file
// writes that a reader never sees half done (the node agent's records and CDI specs).
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace prism {

// Configuration and pod files are kilobytes and the shipped traces under a megabyte; the bounds
// keep a wrong path (a device, a log, /dev/zero) from exhausting memory before a decoder gets
// the chance to say what is wrong with it.
inline constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;
inline constexpr size_t kMaxTraceFileBytes = size_t{256} << 20;

// The contents of `path`: NotFound "cannot read PATH: <reason>" when it cannot be opened or read
// (a directory, say), InvalidArgument "PATH: larger than the N-byte limit" beyond `max_bytes`.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes);
// The same for an open stream (standard input); `name` stands for the path in errors.
absl::StatusOr<std::string> ReadStreamBounded(std::istream& in, std::string_view name,
                                              size_t max_bytes);

// Writes `text` to a dot-file beside `path` (".<name>.tmp": readers that list *.json skip it) and
// renames it over `path`, so a reader sees the old file or the new one, never a part. Internal
// "cannot write/rename ..." naming the file; the temporary file is removed on failure.
absl::Status WriteFileReplacing(const std::string& path, std::string_view text);

}  // namespace prism
