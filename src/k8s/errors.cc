#include "k8s/errors.h"

#include <charconv>
#include <string>

#include "absl/strings/cord.h"
#include "nlohmann/json.hpp"

#include "base/strings.h"

namespace prism::k8s {
namespace {

constexpr char kHttpStatusPayload[] = "type.prism.dev/k8s.http_status";
constexpr char kReasonPayload[] = "type.prism.dev/k8s.reason";

absl::StatusCode CodeFor(int http_status, std::string_view reason) {
  switch (http_status) {
    case 400:
    case 413:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    default:
      break;
  }
  if (http_status >= 500 && http_status < 600) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kUnknown;
}

std::string ReasonPhrase(int http_status) {
  switch (http_status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

// Keeps messages readable when a proxy answers with an HTML page.
std::string Excerpt(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 200)) out.push_back((c == '\n' || c == '\r') ? ' ' : c);
  if (body.size() > 200) out += "...";
  return out;
}

absl::Status Build(int http_status, std::string_view reason, std::string_view message,
                   std::string_view context) {
  std::string text(context);
  if (!text.empty()) text += ": ";
  text += StrCat("HTTP ", http_status);
  std::string phrase = ReasonPhrase(http_status);
  if (!phrase.empty()) text += StrCat(" ", phrase);
  if (!reason.empty() && reason != phrase) text += StrCat(" (", reason, ")");
  if (!message.empty()) text += StrCat(": ", message);
  absl::Status status(CodeFor(http_status, reason), text);
  status.SetPayload(kHttpStatusPayload, absl::Cord(std::to_string(http_status)));
  if (!reason.empty()) status.SetPayload(kReasonPayload, absl::Cord(std::string(reason)));
  return status;
}

}  // namespace

absl::Status StatusFromStatusObject(int code, std::string_view reason, std::string_view message,
                                    std::string_view context) {
  if (code >= 200 && code < 300) return absl::OkStatus();
  return Build(code, reason, message, context);
}

absl::Status StatusFromHttp(int http_status, std::string_view body, std::string_view context) {
  if (http_status >= 200 && http_status < 300) return absl::OkStatus();
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    auto kind = parsed.find("kind");
    if (kind != parsed.end() && kind->is_string() && kind->get<std::string>() == "Status") {
      std::string reason, message;
      if (auto it = parsed.find("reason"); it != parsed.end() && it->is_string()) {
        reason = it->get<std::string>();
      }
      if (auto it = parsed.find("message"); it != parsed.end() && it->is_string()) {
        message = it->get<std::string>();
      }
      return Build(http_status, reason, message, context);
    }
  }
  return Build(http_status, "", Excerpt(body), context);
}

absl::Status WithContext(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), StrCat(context, ": ", status.message()));
  status.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& payload) {
    out.SetPayload(type_url, payload);
  });
  return out;
}

int HttpStatusOf(const absl::Status& status) {
  auto payload = status.GetPayload(kHttpStatusPayload);
  if (!payload.has_value()) return 0;
  std::string text(*payload);
  int value = 0;
  auto res = std::from_chars(text.data(), text.data() + text.size(), value);
  return res.ec == std::errc() ? value : 0;
}

std::string ReasonOf(const absl::Status& status) {
  auto payload = status.GetPayload(kReasonPayload);
  return payload.has_value() ? std::string(*payload) : std::string();
}

bool IsConflict(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted && HttpStatusOf(status) == 409;
}

bool IsGone(const absl::Status& status) {
  if (status.ok()) return false;
  std::string reason = ReasonOf(status);
  return HttpStatusOf(status) == 410 || reason == "Expired" || reason == "Gone";
}

bool IsRetryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kResourceExhausted ||
         (HttpStatusOf(status) >= 500 && HttpStatusOf(status) < 600);
}

}  // namespace prism::k8s
