#include "migmanager/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"

#include "base/strings.h"

extern char** environ;

namespace prism::migmanager {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a timeout kills what it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    const std::string message = StrCat("cannot run '", argv[0], "': ", std::strerror(rc));
    return rc == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
  }

  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  int status = 0;
  bool reaped = false;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      result.timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100));
    const int n = ::poll(&pfd, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // The command may have exited while something it started keeps the pipe open.
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        break;
      }
      continue;
    }
    if (n < 0) break;
    const ssize_t got = ::read(fds[0], buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the command (and its children) closed the pipe.
    if (result.output.size() < kMaxOutput) {
      result.output.append(buf,
                           std::min(static_cast<size_t>(got), kMaxOutput - result.output.size()));
    }
  }
  ::close(fds[0]);
  if (result.timed_out) ::kill(-pid, SIGKILL);
  if (!reaped) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string DescribeFailure(const std::vector<std::string>& argv, const CommandResult& result) {
  std::string how = result.timed_out        ? "timed out"
                    : result.exit_code >= 0 ? StrCat("exit status ", result.exit_code)
                                            : "killed by a signal";
  std::string last;
  for (std::string_view line : StrSplit(result.output, '\n')) {
    std::string stripped = std::string(StripWhitespace(line));
    if (!stripped.empty()) last = stripped;
  }
  std::string out = StrCat("'", StrJoin(argv, " "), "' failed (", how, ")");
  if (!last.empty()) StrAppend(&out, ": ", last);
  return out;
}

std::vector<std::string> SplitCommandLine(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view part : StrSplit(text, ' ')) {
    if (!part.empty()) out.push_back(std::string(part));
  }
  return out;
}

}  // namespace prism::migmanager
