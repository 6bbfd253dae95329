#include "core/sched/shape_indexes.h"

#include <algorithm>
#include <utility>

namespace prism::sched::engine_internal {

uint32_t FailureTable::Intern(const NodeFailure& f) {
  // Every field, as bytes: equal keys are equal failures.
  key_.clear();
  key_.append(reinterpret_cast<const char*>(f.gpu_counts.data()), sizeof(f.gpu_counts));
  key_.append(reinterpret_cast<const char*>(&f.gpus), sizeof(f.gpus));
  key_.push_back(static_cast<char>(f.node_level));
  key_.push_back(static_cast<char>(f.node_reason));
  key_.push_back(static_cast<char>(f.too_few_cards));
  auto [it, inserted] = ids_.try_emplace(key_, static_cast<uint32_t>(failures_.size()));
  if (inserted) failures_.push_back(f);
  return it->second;
}

void FailureTable::Clear() {
  failures_.resize(1);
  ids_.clear();
}

size_t FailureTable::MemoryBytes() const {
  return failures_.capacity() * sizeof(NodeFailure) +
         ids_.size() * (sizeof(std::pair<std::string, uint32_t>) + key_.size());
}

ShapeIndex* ShapeIndexes::Get(const Resolved& rp, const std::string& key, Scorer score) {
  if (auto it = indexes_.find(key); it != indexes_.end()) {
    ShapeIndex* index = it->second.get();
    lru_.splice(lru_.begin(), lru_, index->lru);
    Work unlimited(-1);
    if (index->built >= 0) ContinueBuild(*index, score, unlimited);
    CatchUp(*index, score, unlimited);
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

bool ShapeIndexes::Prepare(const Resolved& rp, const std::string& key) {
  if (indexes_.size() >= std::max<size_t>(1, max_indexes_) || indexes_.contains(key)) {
    return false;
  }
  auto created = std::make_unique<ShapeIndex>();
  ShapeIndex* index = created.get();
  index->rp = rp;
  index->built = 0;
  index->synced = cluster_->change_log_end();
  lru_.push_back(key);  // A guess: the least recently used until a decision asks for it.
  index->lru = std::prev(lru_.end());
  indexes_.emplace(key, std::move(created));
  return true;
}

size_t ShapeIndexes::pending_builds() const {
  size_t pending = 0;
  for (const auto& [key, index] : indexes_) pending += index->built >= 0 ? 1 : 0;
  return pending;
}

void ShapeIndexes::ContinueBuild(ShapeIndex& index, Scorer score, Work& work) {
  const int nodes = cluster_->node_count();
  index.score.resize(nodes, kInfeasible);
  index.failure.resize(nodes, FailureTable::kNone);
  index.version.resize(nodes, UINT32_MAX);
  while (index.built < nodes && work.Room()) work.Charge(ScoreNode(index, score, index.built++));
  if (index.built < nodes) return;
  index.built = -1;
  index.tree.Reset(&index.score, &cluster_->node_ranks());
  // Nodes that changed after they were scored are in the log since the build began.
  CatchUp(index, score, work);
}

uint64_t ShapeIndexes::Backlog(const ShapeIndex& index) const {
  return cluster_->change_log_end() - index.synced;
}

int64_t ShapeIndexes::Maintain(Scorer score, uint64_t max_backlog, int64_t max_evaluations,
                               bool builds) {
  Work work(std::max<int64_t>(0, max_evaluations));
  // Most recently used first: the shapes most likely to be decided next.
  for (const std::string& key : lru_) {
    if (!work.Room()) break;
    ShapeIndex& index = *indexes_.at(key);
    if (index.built >= 0 || Backlog(index) <= max_backlog) continue;
    CatchUp(index, score, work);
  }
  if (!builds) return work.scorings();
  // Then builds registered ahead of their first decision, in the order they were prepared
  // (Prepare appends them; a decision moves its index to the front, built).
  for (const std::string& key : lru_) {
    if (!work.Room()) break;
    ShapeIndex& index = *indexes_.at(key);
    if (index.built >= 0) ContinueBuild(index, score, work);
  }
  return work.scorings();
}

void ShapeIndexes::Clear() {
  twins_.clear();
  state_matches_.clear();
  indexes_.clear();
  lru_.clear();
  failures_.Clear();
}

size_t ShapeIndexes::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& [key, index] : indexes_) {
    bytes += sizeof(ShapeIndex) + key.capacity() + index->score.capacity() * sizeof(double) +
             index->failure.capacity() * sizeof(uint32_t) +
             index->version.capacity() * sizeof(uint32_t) + index->tree.MemoryBytes();
  }
  // The twins' memory: a hash per node, and the map's slots (key, value, control byte).
  bytes += state_hashes_.capacity() * sizeof(state_hashes_[0]) +
           state_matches_.capacity() * sizeof(StateMatch) +
           twins_.capacity() * (sizeof(uint64_t) + sizeof(int32_t) + 1);
  return bytes + failures_.MemoryBytes();
}

void ShapeIndexes::FullRebuild(ShapeIndex& index, Scorer score) {
  const int nodes = cluster_->node_count();
  index.score.assign(nodes, kInfeasible);
  index.failure.assign(nodes, FailureTable::kNone);
  index.version.assign(nodes, UINT32_MAX);  // Not scored: no twin may lend it.
  for (int n = 0; n < nodes; ++n) ScoreNode(index, score, n);
  index.tree.Reset(&index.score, &cluster_->node_ranks());
  index.synced = cluster_->change_log_end();
  index.rescan_next = -1;
}

void ShapeIndexes::CatchUp(ShapeIndex& index, Scorer score, Work& work) {
  const int nodes = cluster_->node_count();
  if (index.score.size() < static_cast<size_t>(nodes)) {
    // Nodes were added (UpsertNode); they are in the change log, so the loop below scores
    // them. The sentinel version forces that even for a node whose version matches by chance.
    index.score.resize(nodes, kInfeasible);
    index.failure.resize(nodes, FailureTable::kNone);
    index.version.resize(nodes, UINT32_MAX);
    index.tree.Grow();
  }
  for (;;) {
    const uint64_t end = cluster_->change_log_end();
    if (index.rescan_next < 0 && (index.synced < cluster_->change_log_begin() ||
                                  end - index.synced > static_cast<uint64_t>(nodes))) {
      // The log no longer holds the backlog, or reading it would cost more than looking at
      // every node: versions tell which nodes changed (an index that lagged long, e.g. one
      // prepared before the running pods were charged, re-scores those only, not every node).
      index.rescan_next = 0;
      index.rescan_from = end;
    }
    if (index.rescan_next < 0) break;
    Rescan(index, score, work);
    if (index.rescan_next >= 0) return;  // Out of work.
  }
  const uint64_t end = cluster_->change_log_end();
  uint64_t pos = index.synced;
  for (; pos < end && work.Room(); ++pos) {
    const int n = cluster_->change_at(pos);
    const uint32_t v = static_cast<uint32_t>(cluster_->node_usage(n).version);
    if (index.version[n] == v) continue;
    work.Charge(ScoreNode(index, score, n));
    index.tree.Update(n);
  }
  index.synced = pos;
}

void ShapeIndexes::Rescan(ShapeIndex& index, Scorer score, Work& work) {
  const int nodes = cluster_->node_count();
  for (int n = index.rescan_next; n < nodes; ++n) {
    if (index.version[n] == static_cast<uint32_t>(cluster_->node_usage(n).version)) continue;
    if (!work.Room()) {
      index.rescan_next = n;
      return;
    }
    work.Charge(ScoreNode(index, score, n));
    index.tree.Update(n);
  }
  index.rescan_next = -1;
  index.synced = index.rescan_from;
}

uint64_t ShapeIndexes::StateHash(int node) {
  if (state_hashes_.size() <= static_cast<size_t>(node)) {
    state_hashes_.resize(cluster_->node_count());
  }
  auto& [version, hash] = state_hashes_[node];
  const uint64_t now = cluster_->node_usage(node).version + 1;
  if (version != now) {
    hash = cluster_->NodeStateHash(node);
    version = now;
  }
  return hash;
}

bool ShapeIndexes::SameState(int node, int twin) {
  if (state_matches_.size() < static_cast<size_t>(cluster_->node_count())) {
    state_matches_.resize(cluster_->node_count());
  }
  // The (node, version) whose state `n` is in: its match while current, else its own.
  auto state_of = [this](int n) {
    const StateMatch& m = state_matches_[n];
    const uint64_t now = cluster_->node_usage(n).version;
    if (m.version == now + 1) return std::make_pair(m.node, m.node_version);
    return std::make_pair(static_cast<int32_t>(n), now);
  };
  const std::pair<int32_t, uint64_t> twin_state = state_of(twin);
  if (state_of(node) == twin_state) return true;
  if (!cluster_->SameNodeState(node, twin)) return false;
  state_matches_[node] = {cluster_->node_usage(node).version + 1, twin_state.second,
                          twin_state.first};
  return true;
}

bool ShapeIndexes::ScoreNode(ShapeIndex& index, Scorer score, int node) {
  const uint32_t version = static_cast<uint32_t>(cluster_->node_usage(node).version);
  if (!index.rp.names_gpus) {
    if (twins_.size() > 2 * static_cast<size_t>(cluster_->node_count()) + 64) twins_.clear();
    auto [it, first] = twins_.try_emplace(StateHash(node), node);
    const int twin = it->second;
    if (!first && twin != node) {
      // Not lent: the hash is this node's from now on (its score is about to be current).
      if (index.version[twin] == static_cast<uint32_t>(cluster_->node_usage(twin).version) &&
          SameState(node, twin)) {
        index.score[node] = index.score[twin];
        index.failure[node] = index.failure[twin];
        index.version[node] = version;
        ++scores_copied_;
        return false;
      }
      it->second = node;
    }
  }
  ++nodes_scored_;
  NodeFailure failure;
  index.score[node] = score(index.rp, node, &failure);
  index.failure[node] =
      index.score[node] == kInfeasible ? failures_.Intern(failure) : FailureTable::kNone;
  index.version[node] = version;
  return true;
}

}  // namespace prism::sched::engine_internal
