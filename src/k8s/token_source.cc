#include "k8s/token_source.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "base/log.h"
#include "base/strings.h"

namespace prism::k8s {

TokenSource::TokenSource(std::string static_token, std::string token_file, const Clock* clock,
                         absl::Duration refresh_period)
    : static_token_(std::move(static_token)),
      token_file_(std::move(token_file)),
      clock_(clock),
      refresh_period_(refresh_period) {}

absl::StatusOr<std::string> TokenSource::Token() {
  if (token_file_.empty()) return static_token_;
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  if (!stale_ && now - read_at_ < refresh_period_) return cached_;
  ++reads_;
  std::ifstream in(token_file_, std::ios::binary);
  std::ostringstream buf;
  if (in) buf << in.rdbuf();
  std::string token(StripWhitespace(buf.str()));
  if (!in || token.empty()) {
    std::string problem = !in ? "cannot be read" : "is empty";
    if (!cached_.empty()) {
      LogWarning("k8s", "token file ", token_file_, " ", problem, "; keeping the previous token");
      // Try again at the next refresh, not on every request.
      read_at_ = now;
      stale_ = false;
      return cached_;
    }
    return absl::FailedPreconditionError(StrCat("bearer token file '", token_file_, "' ", problem));
  }
  cached_ = std::move(token);
  read_at_ = now;
  stale_ = false;
  return cached_;
}

void TokenSource::Invalidate() {
  absl::MutexLock lock(&mu_);
  stale_ = true;
}

int TokenSource::reads() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

}  // namespace prism::k8s
