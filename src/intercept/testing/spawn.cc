#include "intercept/testing/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

extern char** environ;

namespace prism::vgpu::testing {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

std::vector<std::string> Env::Build() const {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (vars_.count(name) != 0) continue;
    if (std::find(unset_.begin(), unset_.end(), name) != unset_.end()) continue;
    out.push_back(entry);
  }
  for (const auto& [name, value] : vars_) out.push_back(name + "=" + value);
  return out;
}

std::unique_ptr<Child> Child::Start(const std::vector<std::string>& argv, const Env& env) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return nullptr;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::vector<std::string> env_strings = env.Build();
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::unique_ptr<Child> child(new Child);
  const int rc = posix_spawn(&child->pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  child->stdin_fd_ = in[1];
  child->stdout_fd_ = out[0];
  child->stderr_fd_ = err[0];
  if (rc != 0) {
    child->pid_ = -1;
    child->reaped_ = true;
    return nullptr;
  }
  return child;
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (int fd : {stdin_fd_, stdout_fd_, stderr_fd_}) {
    if (fd >= 0) close(fd);
  }
}

bool Child::Pump(int timeout_ms) {
  pollfd fds[2] = {{stdout_fd_, POLLIN, 0}, {stderr_fd_, POLLIN, 0}};
  const int n = poll(fds, 2, timeout_ms);
  if (n <= 0) return true;
  bool open = false;
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd < 0) continue;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[4096];
      const ssize_t got = read(fds[i].fd, buffer, sizeof(buffer));
      if (got > 0) {
        (i == 0 ? out_ : err_).append(buffer, static_cast<size_t>(got));
        open = true;
      } else {
        close(fds[i].fd);
        (i == 0 ? stdout_fd_ : stderr_fd_) = -1;
      }
    } else {
      open = true;
    }
  }
  return open || stdout_fd_ >= 0 || stderr_fd_ >= 0;
}

bool Child::WaitForLine(const std::string& needle, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    if (out_.find(needle, scanned_out_) != std::string::npos ||
        err_.find(needle, scanned_err_) != std::string::npos) {
      return true;
    }
    const int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    if (stdout_fd_ < 0 && stderr_fd_ < 0) return false;
    Pump(static_cast<int>(std::min<int64_t>(left, 100)));
  }
}

void Child::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void Child::Send(const std::string& text) {
  size_t done = 0;
  while (stdin_fd_ >= 0 && done < text.size()) {
    const ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void Child::Drain() {
  for (size_t before = out_.size() + err_.size() + 1; before != out_.size() + err_.size();) {
    before = out_.size() + err_.size();
    if (stdout_fd_ < 0 && stderr_fd_ < 0) return;
    Pump(0);
  }
}

void Child::Kill(int signal) {
  if (!reaped_ && pid_ > 0) kill(pid_, signal);
}

ExitInfo Child::Wait(int timeout_ms) {
  CloseStdin();
  const int64_t deadline = NowMs() + timeout_ms;
  while ((stdout_fd_ >= 0 || stderr_fd_ >= 0) && NowMs() < deadline) Pump(100);
  ExitInfo info;
  if (!reaped_) {
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (NowMs() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      usleep(1000);
    }
    reaped_ = true;
    if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) info.term_signal = WTERMSIG(status);
  }
  while (stdout_fd_ >= 0 || stderr_fd_ >= 0) Pump(100);
  info.out = out_;
  info.err = err_;
  return info;
}

ExitInfo RunChild(const std::vector<std::string>& argv, const Env& env, int timeout_ms) {
  std::unique_ptr<Child> child = Child::Start(argv, env);
  if (child == nullptr) return ExitInfo();
  return child->Wait(timeout_ms);
}

std::string Field(const std::string& text, const std::string& prefix, const std::string& key) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind(prefix, 0) == 0) {
      const std::string marker = " " + key + "=";
      const size_t at = line.find(marker);
      if (at == std::string::npos) return "";
      const size_t start = at + marker.size();
      return line.substr(start, line.find(' ', start) - start);
    }
    pos = end + 1;
  }
  return "";
}

}  // namespace prism::vgpu::testing
