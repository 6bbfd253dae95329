#include <cstdio>

#include "cli/commands.h"

namespace prism::cli {

void AddVersionCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("version", "Print Prism's version");
  cmd->callback([exit_code] {
    // PRISM_BUILD_COMMIT is empty unless the build was stamped (-DPRISM_BUILD_COMMIT, as the image
    // builds do: docs/image.md).
    if (PRISM_BUILD_COMMIT[0] == '\0') {
      std::printf("prism %s\n", PRISM_VERSION);
    } else {
      std::printf("prism %s (commit %s)\n", PRISM_VERSION, PRISM_BUILD_COMMIT);
    }
    *exit_code = 0;
  });
}

}  // namespace prism::cli
