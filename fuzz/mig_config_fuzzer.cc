// Fuzzes the mig-parted v1 config reader (src/migparted/config.h) and hooks reader (hooks.h).
// Selector bit 0: 0 = config, 1 = hooks. A config that parses must select every label, serialize
// and parse back (YAML and JSON) to the same specs.
#include "fuzz/fuzz_util.h"
#include "migparted/config.h"
#include "migparted/hooks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  const fuzz::Selected in = fuzz::Select(data, size);
  const std::string text(in.text);
  if (in.selector & 1) {
    (void)migparted::ParseHooks(text);
    return 0;
  }
  auto file = migparted::ParseMigConfig(text);
  if (!file.ok()) return 0;
  for (const std::string& name : file->names) {
    if (!migparted::SelectMigConfig(*file, name).ok()) {
      fuzz::Violated("a parsed config's label selects", absl::OkStatus());
    }
  }
  for (bool json : {false, true}) {
    auto again = migparted::ParseMigConfig(migparted::SerializeMigConfig(*file, json));
    if (!again.ok()) fuzz::Violated("serialized config parses back", again.status());
    if (again->names != file->names) fuzz::Violated("round trip keeps labels", absl::OkStatus());
  }
  return 0;
}
