#include <cstdio>

#include "cli/commands.h"

namespace prism::cli {

void AddVersionCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("version", "Print Prism's version");
  cmd->callback([exit_code] {
    std::printf("prism %s\n", PRISM_VERSION);
    *exit_code = 0;
  });
}

}  // namespace prism::cli
