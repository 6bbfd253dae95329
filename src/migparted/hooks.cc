#include "migparted/hooks.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>

#include "base/status_macros.h"
#include "base/strings.h"

namespace prism::migparted {
namespace {

constexpr const char* kHookNames[] = {kHookApplyStart, kHookPreApplyMode, kHookPreApplyConfig,
                                      kHookApplyExit};

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("hooks file: ", what));
}

absl::Status RunOne(const std::string& hook, const HookCommand& cmd,
                    const std::map<std::string, std::string>& base_env, bool forward_output) {
  std::map<std::string, std::string> env = base_env;
  for (const auto& [k, v] : cmd.envs) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(StrCat(k, "=", v));
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = {cmd.command};
  argv_strings.insert(argv_strings.end(), cmd.args.begin(), cmd.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!forward_output) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  if (!cmd.workdir.empty()) {
    // posix_spawn_file_actions_addchdir_np exists in glibc >= 2.29.
    posix_spawn_file_actions_addchdir_np(&actions, cmd.workdir.c_str());
  }
  pid_t pid = 0;
  // No PATH search: like mig-parted, the child has no inherited PATH, so the
  // command is taken as given (absolute, or relative to the working directory).
  const int rc =
      posix_spawn(&pid, cmd.command.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        StrCat("hook ", hook, ": cannot run '", cmd.command, "': ", std::strerror(rc)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  const std::string how = WIFEXITED(status) ? StrCat("exit status ", WEXITSTATUS(status))
                                            : StrCat("signal ", WTERMSIG(status));
  return absl::AbortedError(
      StrCat("hook ", hook, ": '", StrJoin(argv_strings, " "), "' failed (", how, ")"));
}

}  // namespace

namespace {

absl::StatusOr<HooksFile> ParseHooksUnguarded(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Bad(StrCat("malformed YAML: ", e.what()));
  }
  if (!root.IsMap()) return Bad("expected a mapping with 'version' and 'hooks'");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return Bad("keys must be plain strings");
    const std::string key = kv.first.Scalar();
    if (key != "version" && key != "hooks") return Bad(StrCat("unknown field '", key, "'"));
  }
  if (!root["version"]) return Bad("missing 'version'");
  if (!root["version"].IsScalar() || root["version"].Scalar() != "v1") {
    return Bad(StrCat("unknown version '", root["version"].Scalar(), "' (supported: v1)"));
  }
  HooksFile file;
  const YAML::Node hooks = root["hooks"];
  if (!hooks) return file;
  if (!hooks.IsMap()) return Bad("'hooks' must map hook names to lists of commands");
  for (const auto& kv : hooks) {
    if (!kv.first.IsScalar()) return Bad("'hooks' keys must be hook names");
    const std::string name = kv.first.Scalar();
    if (std::find(std::begin(kHookNames), std::end(kHookNames), name) == std::end(kHookNames)) {
      return Bad(StrCat("unknown hook '", name, "' (known: ", StrJoin(kHookNames, ", "), ")"));
    }
    if (!kv.second.IsSequence()) return Bad(StrCat("hook '", name, "' must be a list"));
    for (const auto& entry : kv.second) {
      if (!entry.IsMap()) return Bad(StrCat("hook '", name, "': entries must be mappings"));
      HookCommand cmd;
      try {
        for (const auto& field : entry) {
          if (!field.first.IsScalar()) return Bad(StrCat("hook '", name, "': keys must be strings"));
          const std::string key = field.first.Scalar();
          if (key == "command") {
            cmd.command = field.second.as<std::string>();
          } else if (key == "args") {
            cmd.args = field.second.as<std::vector<std::string>>();
          } else if (key == "envs") {
            cmd.envs = field.second.as<std::map<std::string, std::string>>();
          } else if (key == "workdir") {
            cmd.workdir = field.second.as<std::string>();
          } else {
            return Bad(StrCat("hook '", name, "': unknown field '", key, "'"));
          }
        }
      } catch (const YAML::Exception&) {
        return Bad(StrCat("hook '", name, "': invalid field value"));
      }
      if (cmd.command.empty()) return Bad(StrCat("hook '", name, "': missing 'command'"));
      file.hooks[name].push_back(std::move(cmd));
    }
  }
  return file;
}

}  // namespace

absl::StatusOr<HooksFile> ParseHooks(const std::string& yaml_text) {
  // yaml-cpp throws from conversions on odd nodes; none may escape the decoder.
  try {
    return ParseHooksUnguarded(yaml_text);
  } catch (const YAML::Exception& e) {
    return Bad(e.what());
  }
}

absl::Status RunHook(const HooksFile& hooks, const std::string& name,
                     const std::map<std::string, std::string>& base_env, bool forward_output) {
  auto it = hooks.hooks.find(name);
  if (it == hooks.hooks.end()) return absl::OkStatus();
  for (const HookCommand& cmd : it->second) {
    RETURN_IF_ERROR(RunOne(name, cmd, base_env, forward_output));
  }
  return absl::OkStatus();
}

}  // namespace prism::migparted
