#include "core/sched/shape_indexes.h"

#include <algorithm>
#include <utility>

namespace prism::sched::engine_internal {

ShapeIndex* ShapeIndexes::Get(const Resolved& rp, const std::string& key, Scorer score) {
  if (auto it = indexes_.find(key); it != indexes_.end()) {
    ShapeIndex* index = it->second.get();
    lru_.splice(lru_.begin(), lru_, index->lru);
    CatchUp(*index, score, /*budget=*/-1);
    return index;
  }
  auto created = std::make_unique<ShapeIndex>();
  ShapeIndex* index = created.get();
  index->rp = rp;
  lru_.push_front(key);
  index->lru = lru_.begin();
  indexes_.emplace(key, std::move(created));
  FullRebuild(*index, score);
  while (indexes_.size() > std::max<size_t>(1, max_indexes_)) {
    const std::string victim = lru_.back();
    lru_.pop_back();
    indexes_.erase(victim);
  }
  return index;
}

uint64_t ShapeIndexes::Backlog(const ShapeIndex& index) const {
  return cluster_->change_log_end() - index.synced;
}

int64_t ShapeIndexes::Maintain(Scorer score, uint64_t max_backlog, int64_t max_evaluations) {
  int64_t spent = 0;
  // Most recently used first: the shapes most likely to be decided next.
  for (const std::string& key : lru_) {
    if (spent >= max_evaluations) break;
    ShapeIndex& index = *indexes_.at(key);
    if (Backlog(index) <= max_backlog) continue;
    spent += CatchUp(index, score, max_evaluations - spent);
  }
  return spent;
}

void ShapeIndexes::Clear() {
  indexes_.clear();
  lru_.clear();
}

size_t ShapeIndexes::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& [key, index] : indexes_) {
    bytes += sizeof(ShapeIndex) + key.capacity() + index->score.capacity() * sizeof(double) +
             index->version.capacity() * sizeof(uint32_t) + index->tree.MemoryBytes();
  }
  return bytes;
}

void ShapeIndexes::FullRebuild(ShapeIndex& index, Scorer score) {
  const int nodes = cluster_->node_count();
  index.score.resize(nodes);
  index.version.resize(nodes);
  for (int n = 0; n < nodes; ++n) {
    index.score[n] = score(index.rp, n);
    index.version[n] = static_cast<uint32_t>(cluster_->node_usage(n).version);
  }
  index.tree.Reset(&index.score, &cluster_->node_ranks());
  index.synced = cluster_->change_log_end();
}

int64_t ShapeIndexes::CatchUp(ShapeIndex& index, Scorer score, int64_t budget) {
  const uint64_t end = cluster_->change_log_end();
  const int nodes = cluster_->node_count();
  if (index.synced < cluster_->change_log_begin() ||
      end - index.synced > static_cast<uint64_t>(nodes)) {
    // The log no longer holds the backlog, or it is longer than a rebuild.
    if (budget >= 0 && budget < nodes) return 0;
    FullRebuild(index, score);
    return nodes;
  }
  if (index.score.size() < static_cast<size_t>(nodes)) {
    // Nodes were added (UpsertNode); they are in the change log, so the loop below scores
    // them. The sentinel version forces that even for a node whose version matches by chance.
    index.score.resize(nodes, kInfeasible);
    index.version.resize(nodes, UINT32_MAX);
    index.tree.Grow();
  }
  int64_t spent = 0;
  uint64_t pos = index.synced;
  for (; pos < end && (budget < 0 || spent < budget); ++pos) {
    const int n = cluster_->change_at(pos);
    const uint32_t v = static_cast<uint32_t>(cluster_->node_usage(n).version);
    if (index.version[n] == v) continue;
    index.version[n] = v;
    index.score[n] = score(index.rp, n);
    index.tree.Update(n);
    ++spent;
  }
  index.synced = pos;
  return spent;
}

}  // namespace prism::sched::engine_internal
