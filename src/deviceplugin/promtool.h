// src/deviceplugin/promtool.h: `promtool check metrics` over an exporter's output (tests only).
//
// promtool (Debian package `prometheus`, installed by tools/setup.sh) parses the text format and
// lints it (counter suffixes, units, HELP text, duplicate series). Where it is not installed the
// check reports that, and the caller skips only that assertion.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace prism::deviceplugin::testing {

// The path of promtool, or nullopt when it is not installed ($PROMTOOL overrides).
inline std::optional<std::string> FindPromtool() {
  if (const char* env = std::getenv("PROMTOOL"); env != nullptr && env[0] != '\0') return env;
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/promtool";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return std::nullopt;
}

// Runs `promtool check metrics` on `text`: "" when it passes, else promtool's complaints (and
// its exit status). Call only when FindPromtool() found it.
inline std::string PromtoolProblems(const std::string& promtool, const std::string& text) {
  char name[] = "/tmp/prism-promtool-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) return "cannot create a temporary file";
  ::close(fd);
  std::ofstream(name) << text;
  const std::string cmd = promtool + " check metrics < " + name + " 2>&1";
  std::string out;
  int status = -1;
  if (FILE* pipe = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    status = ::pclose(pipe);
  }
  std::filesystem::remove(name);
  if (status == 0) return "";
  return "promtool exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
         ": " + out;
}

}  // namespace prism::deviceplugin::testing
