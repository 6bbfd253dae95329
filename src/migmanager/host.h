// src/migmanager/host.h: the host-side GPU clients and the reboot, behind interfaces.
//
// Before changing GPUs the MIG manager stops the host systemd services that hold them (nvsm,
// dcgm, ... from a gpu-clients file, as the GPU Operator's `default-gpu-clients` ConfigMap lists
// them) and starts them again afterwards; a MIG mode change that needs a reset the node cannot
// do is finished by rebooting the node. Both are process boundaries, so each has a real
// implementation (commands run with a timeout: `systemctl`, `reboot`, normally through
// `chroot /host`) and a fake for tests.
//
//   gpu-clients file:   version: v1
//                       systemd-services: [nvsm.service, dcgm.service, ...]
//
// Implementations are thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prism::migmanager {

struct GpuClientsConfig {
  std::vector<std::string> systemd_services;  // In file order.
};

// Strict like mig-parted's files: unknown keys, a version other than v1 and unit names that are
// not plain systemd unit names are InvalidArgument naming the problem.
absl::StatusOr<GpuClientsConfig> ParseGpuClients(const std::string& yaml_text);

// What `systemctl show` says about a unit.
struct UnitStatus {
  std::string load_state;       // "loaded", "not-found", ...
  std::string active_state;     // "active", "inactive", "failed", "activating", ...
  std::string unit_file_state;  // "enabled", "disabled", "static", ...
  std::string type;             // "simple", "oneshot", ...
};

// What to do with a unit before changing GPUs (the GPU Operator's rules): a running unit is
// stopped and started again afterwards; a failed one, or an enabled inactive long-running one,
// is only started afterwards; a missing, disabled or inactive oneshot unit is left alone.
enum class PauseAction { kStopAndRestart, kRestartOnly, kSkip };
PauseAction DecidePause(const UnitStatus& status, std::string* why);

class HostServices {
 public:
  virtual ~HostServices() = default;
  virtual absl::StatusOr<UnitStatus> Status(const std::string& unit) = 0;
  // Stops the unit and waits for it to stop.
  virtual absl::Status Stop(const std::string& unit) = 0;
  // Starts the unit without waiting for it (`--no-block`: a blocking start can deadlock on
  // units ordered after the MIG manager, mig-parted v0.14.3).
  virtual absl::Status Start(const std::string& unit) = 0;
};

// `<systemctl...> show|stop|start <unit>`; `systemctl` is the command prefix, e.g.
// {"chroot", "/host", "systemctl"} inside a pod with the host's root mounted at /host.
class SystemctlHostServices final : public HostServices {
 public:
  SystemctlHostServices(std::vector<std::string> systemctl, absl::Duration timeout)
      : systemctl_(std::move(systemctl)), timeout_(timeout) {}
  absl::StatusOr<UnitStatus> Status(const std::string& unit) override;
  absl::Status Stop(const std::string& unit) override;
  absl::Status Start(const std::string& unit) override;

 private:
  absl::Status Run(std::vector<std::string> args);
  const std::vector<std::string> systemctl_;
  const absl::Duration timeout_;
};

// Units held in memory; records every Stop and Start, in order ("stop x", "start y").
class FakeHostServices final : public HostServices {
 public:
  // A unit with active_state "active", loaded, enabled, type simple.
  void AddRunning(const std::string& unit);
  void Set(const std::string& unit, UnitStatus status);
  // The next Stop/Start of `unit` fails with `status`.
  void FailNext(const std::string& op, const std::string& unit, absl::Status status);
  std::vector<std::string> log() const;
  UnitStatus Get(const std::string& unit) const;

  absl::StatusOr<UnitStatus> Status(const std::string& unit) override;
  absl::Status Stop(const std::string& unit) override;
  absl::Status Start(const std::string& unit) override;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, UnitStatus> units_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

class Rebooter {
 public:
  virtual ~Rebooter() = default;
  // Asks the host to reboot. Returns once the request is made (the process is normally killed
  // soon after); an error if the request fails.
  virtual absl::Status Reboot() = 0;
};

// Runs `command` (e.g. {"chroot", "/host", "systemctl", "reboot"}).
class CommandRebooter final : public Rebooter {
 public:
  CommandRebooter(std::vector<std::string> command, absl::Duration timeout)
      : command_(std::move(command)), timeout_(timeout) {}
  absl::Status Reboot() override;

 private:
  const std::vector<std::string> command_;
  const absl::Duration timeout_;
};

// Counts reboots and runs `on_reboot` (tests emulate the host coming back with it).
class FakeRebooter final : public Rebooter {
 public:
  explicit FakeRebooter(std::function<absl::Status()> on_reboot = nullptr)
      : on_reboot_(std::move(on_reboot)) {}
  absl::Status Reboot() override;
  int reboots() const;

 private:
  std::function<absl::Status()> on_reboot_;
  mutable absl::Mutex mu_;
  int reboots_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace prism::migmanager
