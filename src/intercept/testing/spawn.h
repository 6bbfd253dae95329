// src/intercept/testing/spawn.h: runs child programs for libprism-vgpu's multi-process tests:
// explicit environment, captured stdout/stderr, waiting for a line, killing, reaping.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace prism::vgpu::testing {

struct ExitInfo {
  int exit_code = -1;   // When the child exited.
  int term_signal = 0;  // When a signal killed it.
  std::string out;      // Everything it wrote to stdout.
  std::string err;      // Everything it wrote to stderr.
};

// Environment changes on top of this process's environment: a value of "" with `unset`
// semantics is expressed by Env::Unset().
class Env {
 public:
  Env& Set(const std::string& name, const std::string& value) {
    vars_[name] = value;
    return *this;
  }
  Env& Unset(const std::string& name) {
    vars_.erase(name);
    unset_.push_back(name);
    return *this;
  }
  // The full environment for a child: ours, minus unset names, plus overrides.
  std::vector<std::string> Build() const;

 private:
  std::map<std::string, std::string> vars_;
  std::vector<std::string> unset_;
};

class Child {
 public:
  // Starts `argv` with `env`; stdin is a pipe kept open until CloseStdin().
  static std::unique_ptr<Child> Start(const std::vector<std::string>& argv, const Env& env);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Reads output until a line of stdout or stderr contains `needle`. False on timeout or EOF.
  bool WaitForLine(const std::string& needle, int timeout_ms);
  void CloseStdin();
  // Writes `text` to the child's stdin (e.g. "\n" to let a probe's "step" command continue).
  void Send(const std::string& text);
  void Kill(int signal);
  // Reads whatever output is waiting, without blocking, so a chatty child never fills its pipes
  // (and blocks in write) while the test is busy elsewhere.
  void Drain();
  // Closes stdin, reads everything and reaps the child. Kills it after `timeout_ms`.
  ExitInfo Wait(int timeout_ms = 60000);

 private:
  Child() = default;
  bool Pump(int timeout_ms);  // Reads what is available; false at EOF on both pipes.

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string out_;
  std::string err_;
  size_t scanned_out_ = 0;
  size_t scanned_err_ = 0;
  bool reaped_ = false;
};

// Starts, waits and returns the result.
ExitInfo RunChild(const std::vector<std::string>& argv, const Env& env, int timeout_ms = 60000);

// The value of `key=` in the first line of `text` that starts with `prefix` ("" if absent).
std::string Field(const std::string& text, const std::string& prefix, const std::string& key);

}  // namespace prism::vgpu::testing
