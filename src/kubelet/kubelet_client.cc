#include "kubelet/kubelet_client.h"

#include <chrono>
#include <filesystem>

#include "grpcpp/grpcpp.h"

#include "base/strings.h"

namespace prism::kubelet {
namespace {

absl::StatusCode CodeFromGrpc(grpc::StatusCode code) {
  // gRPC and absl share the canonical code numbering.
  return static_cast<absl::StatusCode>(static_cast<int>(code));
}

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

}  // namespace

std::string UnixTarget(std::string_view socket_path) { return StrCat("unix:", socket_path); }

absl::Status FromGrpc(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(CodeFromGrpc(status.error_code()),
                      StrCat(what, ": ", status.error_message()));
}

absl::Status RegisterWithKubelet(const std::string& kubelet_socket,
                                 const v1beta1::RegisterRequest& request, absl::Duration timeout) {
  // No socket, no kubelet: fail at once instead of waiting out the deadline.
  std::error_code ec;
  if (!std::filesystem::exists(kubelet_socket, ec)) {
    return absl::UnavailableError(
        StrCat("no kubelet listening: ", kubelet_socket, " does not exist"));
  }
  auto channel =
      grpc::CreateChannel(UnixTarget(kubelet_socket), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  // Wait for the socket to accept rather than failing at once while the kubelet starts.
  context.set_wait_for_ready(true);
  v1beta1::Empty reply;
  return FromGrpc(stub->Register(&context, request, &reply),
                  StrCat("Register with ", kubelet_socket));
}

PodResourcesClient::PodResourcesClient(std::string socket_path)
    : socket_path_(std::move(socket_path)),
      channel_(grpc::CreateChannel(UnixTarget(socket_path_), grpc::InsecureChannelCredentials())),
      stub_(v1::PodResourcesLister::NewStub(channel_)) {}

absl::StatusOr<v1::ListPodResourcesResponse> PodResourcesClient::List(
    absl::Duration timeout) const {
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  grpc::Status status = stub_->List(&context, request, &response);
  if (!status.ok()) return FromGrpc(status, StrCat("PodResources List on ", socket_path_));
  return response;
}

}  // namespace prism::kubelet
