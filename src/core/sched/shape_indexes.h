// src/core/sched/shape_indexes.h: the engine's per-shape node-score indexes. For each pod shape
// decided recently, every node's score (or kInfeasible) and a max tree over them, so a decision
// reads the best node instead of scoring them all. An index is exact once caught up with the
// cluster's change log (the nodes whose usage changed since it was last read); how far it may
// lag is the caller's choice (Engine: on use; with EngineOptions::max_index_backlog also between
// decisions, so that a decision never catches up more than that many changes).
// Included by the engine's own files only.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"

#include "core/sched/cluster.h"
#include "core/sched/decision.h"
#include "core/sched/engine_internal.h"

namespace prism::sched::engine_internal {

// Max segment tree over node scores; ties go to the lowest node index.
class MaxTree {
 public:
  // `ranks`: the tie-break order (lower rank wins equal scores; ClusterState::node_ranks()).
  void Reset(const std::vector<double>* scores, const std::vector<uint32_t>* ranks) {
    scores_ = scores;
    ranks_ = ranks;
    n_ = scores->size();
    size_ = 1;
    while (size_ < n_) size_ <<= 1;
    tree_.assign(2 * size_, -1);
    for (size_t i = 0; i < n_; ++i) tree_[size_ + i] = static_cast<int32_t>(i);
    for (size_t i = size_ - 1; i >= 1; --i) tree_[i] = Better(tree_[2 * i], tree_[2 * i + 1]);
  }
  // The scores vector grew (nodes added): new leaves join without a rebuild while they fit.
  // Ranks of the old nodes may have shifted, but not their order, so the tree stays valid.
  void Grow() {
    const size_t n = scores_->size();
    if (n > size_) {
      Reset(scores_, ranks_);
      return;
    }
    for (size_t i = n_; i < n; ++i) {
      tree_[size_ + i] = static_cast<int32_t>(i);
      Update(static_cast<int>(i));
    }
    n_ = n;
  }
  void Update(int node) {
    size_t i = (size_ + static_cast<size_t>(node)) >> 1;
    while (i >= 1) {
      tree_[i] = Better(tree_[2 * i], tree_[2 * i + 1]);
      i >>= 1;
    }
  }
  int Best() const { return tree_.size() > 1 ? tree_[1] : -1; }
  size_t MemoryBytes() const { return tree_.capacity() * sizeof(int32_t); }

 private:
  int32_t Better(int32_t a, int32_t b) const {
    if (a < 0) return b;
    if (b < 0) return a;
    const double sa = (*scores_)[a];
    const double sb = (*scores_)[b];
    if (sb > sa) return b;
    if (sb == sa && (*ranks_)[b] < (*ranks_)[a]) return b;
    return a;
  }
  const std::vector<double>* scores_ = nullptr;
  const std::vector<uint32_t>* ranks_ = nullptr;
  size_t n_ = 0;
  size_t size_ = 1;
  std::vector<int32_t> tree_;
};

// The distinct reasons nodes failed for, each stored once: an index keeps a 4-byte id per
// infeasible node, so that Filter can say why a node was refused without evaluating it again
// (at high load most candidates are refused, and that second evaluation was most of a call).
class FailureTable {
 public:
  static constexpr uint32_t kNone = 0;  // The node is feasible.
  uint32_t Intern(const NodeFailure& failure);
  const NodeFailure& Get(uint32_t id) const { return failures_[id]; }
  void Clear();
  void Swap(FailureTable& other) {
    failures_.swap(other.failures_);
    ids_.swap(other.ids_);
  }
  size_t MemoryBytes() const;

 private:
  std::vector<NodeFailure> failures_{NodeFailure{}};  // [kNone] is a placeholder.
  absl::flat_hash_map<std::string, uint32_t> ids_;
  std::string key_;  // Scratch.
};

// What one call may spend on scoring nodes, in node scorings. A node whose twin lends its score
// (ShapeIndexes::ScoreNode) costs an eighth: hashing and comparing the two states is about a
// tenth of an evaluation, and counting it whole would let a build over thousands of twins take
// the ticker as long as one without them.
class Work {
 public:
  // `scorings` < 0, or more than eighths fit in an int64: no limit.
  explicit Work(int64_t scorings)
      : limit_(scorings < 0                                               ? -1
               : scorings > std::numeric_limits<int64_t>::max() / kScored ? -1
                                                                          : scorings * kScored) {}
  // Room for one more node, priced as an evaluation (its cost is known only once looked at).
  bool Room() const { return limit_ < 0 || spent_ + kScored <= limit_; }
  void Charge(bool evaluated) { spent_ += evaluated ? kScored : kLent; }
  // What was spent, in node scorings, rounded up: a call that did anything says so.
  int64_t scorings() const { return (spent_ + kScored - 1) / kScored; }

 private:
  static constexpr int64_t kScored = 8;
  static constexpr int64_t kLent = 1;
  int64_t limit_;
  int64_t spent_ = 0;
};

struct ShapeIndex {
  Resolved rp;
  std::vector<double> score;
  std::vector<uint32_t> failure;  // FailureTable id where score is kInfeasible, else kNone.
  std::vector<uint32_t> version;
  MaxTree tree;
  uint64_t synced = 0;  // Change-log position the scores reflect.
  // A build in progress (ShapeIndexes::Prepare): nodes [0, built) are scored; the tree and the
  // other nodes are not yet. -1: built.
  int32_t built = -1;
  // A rescan in progress (the change log no longer holds the backlog, or it is longer than the
  // node list): nodes [0, rescan_next) match their versions as of when they were looked at, and
  // what changed after `rescan_from` is in the log from there. -1: none.
  int32_t rescan_next = -1;
  uint64_t rescan_from = 0;
  std::list<std::string>::iterator lru;
};

class ShapeIndexes {
 public:
  // A node's score for a resolved shape, or kInfeasible with why in `failure`.
  using Scorer = absl::FunctionRef<double(const Resolved&, int node, NodeFailure* failure)>;

  ShapeIndexes(const ClusterState* cluster, size_t max_indexes)
      : cluster_(cluster), max_indexes_(max_indexes) {}

  // The index of `key` (built for `rp` when new, least recently used evicted beyond the
  // limit), caught up with every change.
  ShapeIndex* Get(const Resolved& rp, const std::string& key, Scorer score);

  // Registers `key` for a build in the background: Maintain() scores its nodes a budget at a
  // time, and Get() finishes what is left. Nothing is evicted for it: with the limit reached,
  // or `key` already indexed, this does nothing. Returns whether a build was registered.
  bool Prepare(const Resolved& rp, const std::string& key);

  // Catches up the indexes whose backlog (change-log entries not yet read) exceeds
  // `max_backlog`, most recently used first, then advances prepared builds, spending at most
  // `max_evaluations` node scorings (Work: a score lent by a twin counts an eighth; an index
  // behind by more than the log can say is rescanned a budget at a time: one scoring per node
  // that changed). Returns the scorings spent. Indexes stay exact either way: this only moves
  // work off the next decision. Without `builds`, only the catch-up.
  int64_t Maintain(Scorer score, uint64_t max_backlog, int64_t max_evaluations, bool builds = true);

  // Change-log entries `index` has not read yet.
  uint64_t Backlog(const ShapeIndex& index) const;

  void Clear();
  size_t size() const { return indexes_.size(); }
  bool Contains(const std::string& key) const { return indexes_.contains(key); }
  size_t pending_builds() const;
  // Nodes scored by the Scorer, and nodes whose score was copied from a twin instead (see
  // ScoreNode), since construction.
  uint64_t nodes_scored() const { return nodes_scored_; }
  uint64_t scores_copied() const { return scores_copied_; }
  // Why `index` refuses `node` (an infeasible node of a caught-up index).
  const NodeFailure& FailureOf(const ShapeIndex& index, int node) const {
    return failures_.Get(index.failure[node]);
  }
  size_t MemoryBytes() const;
  // Every index's resolved shape, for re-resolution when the cluster's vocabulary grows.
  template <typename F>
  void ForEachShape(F&& f) {
    for (auto& [key, index] : indexes_) f(index->rp);
  }
  // f(key, rp) for every index, built or prepared, the most recently used first.
  template <typename F>
  void ForEachInUseOrder(F&& f) const {
    for (const std::string& key : lru_) f(key, indexes_.at(key)->rp);
  }
  // Exchanges the indexes of two sets over the same cluster (their failure tables with them).
  void Swap(ShapeIndexes& other) {
    std::swap(max_indexes_, other.max_indexes_);
    indexes_.swap(other.indexes_);
    lru_.swap(other.lru_);  // Keeps the indexes' lru iterators valid.
    failures_.Swap(other.failures_);
  }

 private:
  void FullRebuild(ShapeIndex& index, Scorer score);
  // Scores more nodes of a prepared build while `work` has room, finishing it (tree, then a
  // catch-up of what changed since it began) when every node is scored.
  void ContinueBuild(ShapeIndex& index, Scorer score, Work& work);
  // Reads the change log from index.synced while `work` has room, or rescans where the log
  // cannot say what changed.
  void CatchUp(ShapeIndex& index, Scorer score, Work& work);
  // Goes on with index.rescan_next: re-scores each node whose version moved since the index
  // scored it, while `work` has room; when every node was looked at, the index is synced to
  // rescan_from.
  void Rescan(ShapeIndex& index, Scorer score, Work& work);
  // Sets `node`'s score in `index`. The node last scored in the same state (by any index:
  // twins_) lends its score and reason instead when it is a twin (ClusterState::SameNodeState,
  // which rules out a hash collision) and its score in `index` is current (its version there
  // is the node's; so a twin remembered from long ago that changed since lends nothing),
  // unless the shape names GPUs. A build over thousands of nodes of a few machine types then
  // scores a few hundred, and a node that changed into a common state (emptied, filled) is
  // caught up for free. Returns whether the node was evaluated (false: lent).
  bool ScoreNode(ShapeIndex& index, Scorer score, int node);
  // ClusterState::NodeStateHash, kept per node version (every index asks for it).
  uint64_t StateHash(int node);
  // ClusterState::SameNodeState(node, twin), answered without comparing the two nodes' GPUs
  // when both were found earlier, and have not changed since, in the state some node had at
  // some version (state_matches_): a build for a new shape meets the states the previous
  // builds compared, and comparing every GPU of thousands of lent nodes is costly.
  bool SameState(int node, int twin);

  const ClusterState* cluster_;
  size_t max_indexes_;
  // State hash -> the node last scored in that state. Entries go stale as nodes change (the
  // lending checks catch that); the map is emptied when it outgrows twice the nodes.
  absl::flat_hash_map<uint64_t, int32_t> twins_;
  std::vector<std::pair<uint64_t, uint64_t>> state_hashes_;  // Per node: (version + 1, hash).
  // Per node: while the node's version + 1 is `version`, its state is the one node `node` had
  // at version `node_version` (itself until SameState matched it with another). A node's
  // version grows with every change and never repeats, so two nodes matched to the same
  // (node, node_version) are in the same state even after that node moved on.
  struct StateMatch {
    uint64_t version = 0;
    uint64_t node_version = 0;
    int32_t node = -1;
  };
  std::vector<StateMatch> state_matches_;
  uint64_t nodes_scored_ = 0;
  uint64_t scores_copied_ = 0;
  std::unordered_map<std::string, std::unique_ptr<ShapeIndex>> indexes_;
  std::list<std::string> lru_;  // Most recently used first.
  FailureTable failures_;       // Shared by all indexes; cleared with them.
};

}  // namespace prism::sched::engine_internal
