#include "core/mig/profile.h"

#include <charconv>
#include <cmath>

#include "base/strings.h"

namespace prism::mig {
namespace {

// Consumes a positive decimal integer from the front of `text`.
bool ConsumeNumber(std::string_view* text, int* value) {
  const char* begin = text->data();
  const char* end = begin + text->size();
  auto [ptr, ec] = std::from_chars(begin, end, *value);
  if (ec != std::errc() || ptr == begin || *value <= 0) return false;
  text->remove_prefix(static_cast<size_t>(ptr - begin));
  return true;
}

bool ConsumePrefix(std::string_view* text, std::string_view prefix) {
  if (text->substr(0, prefix.size()) != prefix) return false;
  text->remove_prefix(prefix.size());
  return true;
}

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(StrCat("invalid MIG profile '", text, "': ", why,
                                           " (expected [<C>c.]<G>g.<GB>gb[+me|+me.all|+gfx|-me])"));
}

}  // namespace

std::string ProfileName::ToString() const {
  std::string out;
  if (compute_slices != gpu_slices) StrAppend(&out, compute_slices, "c.");
  StrAppend(&out, gpu_slices, "g.", memory_gb, "gb");
  if (attrs & kAttrNoMediaExtensions) {
    StrAppend(&out, "-me");
    return out;
  }
  std::string plus;
  auto add = [&plus](std::string_view attr) { StrAppend(&plus, plus.empty() ? "+" : ",", attr); };
  if (attrs & kAttrMediaExtensions) add("me");
  if (attrs & kAttrAllMediaExtensions) add("me.all");
  if (attrs & kAttrGraphics) add("gfx");
  return out + plus;
}

absl::StatusOr<ProfileName> ParseProfileName(std::string_view text) {
  std::string_view rest = text;
  ProfileName name;
  int first = 0;
  if (!ConsumeNumber(&rest, &first)) return Bad(text, "must start with a slice count");
  if (ConsumePrefix(&rest, "c.")) {
    name.compute_slices = first;
    if (!ConsumeNumber(&rest, &name.gpu_slices)) return Bad(text, "missing <G> after 'c.'");
    if (!ConsumePrefix(&rest, "g.")) return Bad(text, "missing 'g.' after the GPU slice count");
  } else if (ConsumePrefix(&rest, "g.")) {
    name.gpu_slices = first;
    name.compute_slices = first;
  } else {
    return Bad(text, "missing 'g.' after the slice count");
  }
  if (!ConsumeNumber(&rest, &name.memory_gb)) return Bad(text, "missing memory size");
  if (!ConsumePrefix(&rest, "gb")) return Bad(text, "memory size must end in 'gb'");
  if (name.compute_slices > name.gpu_slices) {
    return Bad(text, "compute slices exceed the GPU instance's slices");
  }
  if (rest.empty()) return name;
  if (rest.front() == '-') {
    if (rest != "-me") return Bad(text, "the only negative attribute is '-me'");
    name.attrs = kAttrNoMediaExtensions;
    return name;
  }
  if (rest.front() != '+') return Bad(text, StrCat("unexpected '", rest, "'"));
  rest.remove_prefix(1);
  for (std::string_view attr : StrSplit(rest, ',')) {
    uint8_t bit = 0;
    if (attr == "me") {
      bit = kAttrMediaExtensions;
    } else if (attr == "me.all") {
      bit = kAttrAllMediaExtensions;
    } else if (attr == "gfx") {
      bit = kAttrGraphics;
    } else {
      return Bad(text, StrCat("unknown attribute '", attr, "'"));
    }
    if (name.attrs & bit) return Bad(text, StrCat("attribute '", attr, "' repeated"));
    name.attrs |= bit;
  }
  return name;
}

int MigMemorySizeGb(int64_t profile_memory_mib, int64_t total_device_mib) {
  if (profile_memory_mib <= 0 || total_device_mib <= 0) return 0;
  const double fraction =
      static_cast<double>(profile_memory_mib) / static_cast<double>(total_device_mib);
  const double eighths = std::ceil(fraction * 8.0) / 8.0;
  const double total_gb = std::ceil(static_cast<double>(total_device_mib) / 1024.0);
  return static_cast<int>(std::round(eighths * total_gb));  // std::round: half away from zero.
}

}  // namespace prism::mig
