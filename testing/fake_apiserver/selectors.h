// testing/fake_apiserver/selectors.h: Kubernetes label and field selectors, as the API server
// parses and applies them to list and watch requests.
//
// Label selectors: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
// `k notin (a,b)`. Field selectors: comma-separated `path=v`, `path==v`, `path!=v` over the
// fields the real API server supports for each kind (see fake_apiserver.cc); a missing field
// reads as "". Pure; thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::fakeapi {

class LabelSelector {
 public:
  // InvalidArgument naming the bad requirement.
  static absl::StatusOr<LabelSelector> Parse(std::string_view text);
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }

 private:
  enum class Op { kExists, kNotExists, kEquals, kNotEquals, kIn, kNotIn };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  // `allowed` lists the field paths this kind supports; others are InvalidArgument
  // ("field label not supported"), as the real API server answers.
  static absl::StatusOr<FieldSelector> Parse(std::string_view text,
                                             const std::vector<std::string>& allowed);
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }

 private:
  struct Requirement {
    std::vector<std::string> path;
    bool equals;
    std::string value;
  };
  std::vector<Requirement> requirements_;
};

}  // namespace prism::fakeapi
