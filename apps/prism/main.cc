// prism: one binary, one subcommand per Prism component. Wiring only: each
// subcommand lives in src/cli/ (or its component's folder) and registers its
// flags on the app through an Add*Command function.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/commands.h"

#include "base/log.h"

int main(int argc, char** argv) {
  CLI::App app{"Prism: GPU sharing for Kubernetes (dynamic MIG + software slices)", "prism"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warning or error")
      ->envname("PRISM_LOG_LEVEL")
      ->check([](const std::string& value) {
        prism::LogLevel level;
        return prism::ParseLogLevel(value, &level) ? std::string()
                                                   : "expected debug, info, warning or error";
      });
  app.parse_complete_callback([&log_level] {
    prism::LogLevel level;
    if (prism::ParseLogLevel(log_level, &level)) prism::SetLogLevel(level);
  });

  int exit_code = 0;
  prism::cli::AddVersionCommand(app, &exit_code);
  prism::cli::AddMigCommand(app, &exit_code);
  prism::cli::AddSimCommand(app, &exit_code);
  prism::cli::AddDevicePluginCommand(app, &exit_code);
  prism::cli::AddPlanCommand(app, &exit_code);
  // Component commands (each adds one line here).
  prism::cli::AddMigManagerCommand(app, &exit_code);
  prism::cli::AddSchedulerCommand(app, &exit_code);
  prism::cli::AddStatusCommand(app, &exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
