#pragma once
// The end of a multi-node job: every node counts itself out; the node hosting the store
// waits until all have, so a node still finishing its last step never loses the store.
// A member is counted out exactly once, by itself (finished, failed, re-joining a newer
// round) or by the peer that found it lost: "<key>/out/<member>" is written with
// COMPARE_SET as "<why> <writer token>", and only its writer adds to the counters (the
// token is what tells the writer apart when several peers find the same node gone).
#include <cstdint>
#include <string>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct ExitBarrier {
  ExitBarrier(Store& s, std::string k, int n, Duration t = std::chrono::seconds(300),
              Duration progress = std::chrono::seconds(5))
      : store(s), key(std::move(k)), nodes(n), timeout(t), progress_interval(progress) {}

  Store& store;
  std::string key;  // ADD counter of departed members; "<key>/all" is set by the last one
  int nodes;
  Duration timeout;
  Duration progress_interval;  // between "still waiting" lines

  // Counts member out with a reason, unless it already is. True when this made all out.
  bool count_out(int member, const std::string& why) const;
  // Members counted out for good ("finished", "failed", "disconnected": its presence is
  // gone); a re-formed round expects the others back ("rejoined", and "lost": found silent,
  // maybe only stopped).
  [[nodiscard]] int64_t gone() const;
  // Members counted out as "lost" (found silent): maybe back, maybe not.
  [[nodiscard]] int64_t lost() const;
  // Why member left ("finished", "lost", ...), "" while it has not.
  [[nodiscard]] std::string out_reason(int member) const;
  // Blocks until every member is out (true), or timeout or interrupt() (false; it logs who
  // is missing after a timeout: the job is over either way).
  bool wait_all() const;
  // Ends a wait_all() blocked in another thread (the waiting agent was told to stop).
  void interrupt() const;
  // count_out(member, why), then wait_all() when wait is true.
  void depart(int member, const std::string& why, bool wait) const;

  [[nodiscard]] std::string all_key() const { return key + "/all"; }
  [[nodiscard]] std::string gone_key() const { return key + "/gone"; }
  [[nodiscard]] std::string lost_key() const { return key + "/lost"; }
  [[nodiscard]] std::string out_key(int member) const {
    return key + "/out/" + std::to_string(member);
  }
};

}  // namespace ddp::rendezvous
