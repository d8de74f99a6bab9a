#pragma once
// What a lost connection to the rendezvous store means for this node (docs/multinode.md,
// "When the store's host is lost"): which end of the attempt it is, from where the node stands
// (pure), and what the node says of it. A death is certain, silence is not: in an elastic job
// the store's host may well be alive and this node the one cut off.
#include <optional>
#include <string>

#include "common/error.hpp"
#include "launcher/agent/attempt_policy.hpp"
#include "launcher/output/event_log.hpp"

namespace ddp::launcher {

enum class StoreLossStep {
  kIgnore,    // nothing to do: leaving already, or between rounds, or said already
  kHostGone,  // the node that hosted the store is gone and the store moves: kNodeLost
  kCutOff,    // silence in an elastic job: this node joins again (kStoreSilent)
  kSettle,    // the record awaited will not come: decide from this node alone
  kLost,      // the store is lost for good: kStoreLost
};

struct StoreLossFacts {
  PeerLoss loss = PeerLoss::kUnknown;
  bool store_moves = false;  // RendezvousKind::store_moves
  bool elastic = false;      // RendezvousKind::elastic
  bool leaving = false;      // the workers are done: EXITING or DONE
  bool healthy = false;      // the workers run
  bool stopping = false;     // the workers stop, for ending
  EndCause ending = EndCause::kNone;
  bool awaiting_record = false;  // this node published and waits for the record that holds
};

StoreLossStep store_loss_step(const StoreLossFacts& facts);

// What each step says (store: store_loss_text; message: the connection's error; pids: the
// workers'). kCutOff: keep says the workers are kept while the group re-forms in place.
void report_store_host_gone(EventLog& events, const std::string& store, const std::string& message);
void report_cut_off(EventLog& events, const std::string& store, const std::string& message,
                    bool keep, const std::string& pids);
// "the rendezvous watcher lost its connection: <error>": the watcher's own error says silence
// or death.
std::string watcher_loss_text(const std::string& error);
// advice: store_loss_advice; stopping: the pids of the workers stopped for it, if any are.
void report_store_lost(EventLog& events, const std::string& store, const std::string& message,
                       const std::string& advice, const std::optional<std::string>& stopping);

}  // namespace ddp::launcher
