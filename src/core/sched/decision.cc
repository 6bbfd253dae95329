#include "core/sched/decision.h"

#include "base/strings.h"

namespace prism::sched {

int Decision::MigOperations() const {
  int ops = 0;
  for (const MigReconfiguration& r : mig) {
    ops += static_cast<int>(r.destroy.size() + r.create.size());
  }
  return ops;
}

std::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kNodeInsufficientCpu:
      return "Insufficient cpu";
    case Reason::kNodeInsufficientMemory:
      return "Insufficient memory";
    case Reason::kNodeInsufficientDevice:
      return "NodeInsufficientDevice";
    case Reason::kCardNotHealth:
      return "CardNotHealth";
    case Reason::kCardTypeMismatch:
      return "CardTypeMismatch";
    case Reason::kCardUuidMismatch:
      return "CardUuidMismatch";
    case Reason::kCardTimeSlicingExhausted:
      return "CardTimeSlicingExhausted";
    case Reason::kExclusiveDeviceAllocateConflict:
      return "ExclusiveDeviceAllocateConflict";
    case Reason::kCardInsufficientMemory:
      return "CardInsufficientMemory";
    case Reason::kCardInsufficientCore:
      return "CardInsufficientCore";
    case Reason::kCardComputeUnitsExhausted:
      return "CardComputeUnitsExhausted";
    case Reason::kCardMigTopologyInfeasible:
      return "CardMigTopologyInfeasible";
    case Reason::kAllocatedCardsInsufficientRequest:
      return "AllocatedCardsInsufficientRequest";
    case Reason::kNumaNotFit:
      return "NumaNotFit";
    case Reason::kTopologyNotFit:
      return "TopologyNotFit";
    case Reason::kCount:
      break;
  }
  return "Unknown";
}

std::string NodeFailure::ToString() const {
  if (node_level) return std::string(ReasonName(node_reason));
  std::string out;
  for (int r = 0; r < kReasonCount; ++r) {
    if (gpu_counts[r] == 0) continue;
    if (!out.empty()) out.append(", ");
    StrAppend(&out, gpu_counts[r], "/", gpus, " ", ReasonName(static_cast<Reason>(r)));
  }
  if (too_few_cards) {
    if (!out.empty()) out.append(", ");
    out.append(ReasonName(Reason::kAllocatedCardsInsufficientRequest));
  }
  if (out.empty()) out = std::string(ReasonName(Reason::kNodeInsufficientDevice));
  return out;
}

Reason NodeFailure::Main() const {
  if (node_level) return node_reason;
  int best = -1;
  int best_count = 0;
  for (int r = 0; r < kReasonCount; ++r) {
    if (gpu_counts[r] > best_count) {
      best = r;
      best_count = gpu_counts[r];
    }
  }
  if (best >= 0) return static_cast<Reason>(best);
  return too_few_cards ? Reason::kAllocatedCardsInsufficientRequest
                       : Reason::kNodeInsufficientDevice;
}

}  // namespace prism::sched
