#include "launcher/agent/store_loss.hpp"

#include "common/log.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

StoreLossStep store_loss_step(const StoreLossFacts& f) {
  if (f.leaving) return StoreLossStep::kIgnore;
  // Already joining again after the store's silence: the other watches' errors say the same.
  if (f.stopping && f.ending == EndCause::kStoreSilent) return StoreLossStep::kIgnore;
  const bool reforming =
      f.stopping && (f.ending == EndCause::kClaim || f.ending == EndCause::kNodeLost);
  const bool running = (f.healthy || reforming) && !f.awaiting_record;
  // A loss like any other node's: the store moves to a successor's standby as the group
  // re-forms (store_succession.hpp).
  if (f.store_moves && f.loss == PeerLoss::kDeath && running) return StoreLossStep::kHostGone;
  // The cut-off node comes back as a joining node (the others re-formed without it), and only
  // a store that stays unreachable for the join timeout ends it.
  if (f.loss == PeerLoss::kSilence && f.elastic && running) return StoreLossStep::kCutOff;
  if (f.awaiting_record) return StoreLossStep::kSettle;
  if (!f.healthy && !reforming) return StoreLossStep::kIgnore;
  return StoreLossStep::kLost;
}

std::string watcher_loss_text(const std::string& error) {
  std::string text = "the rendezvous watcher lost its connection";
  if (!error.empty()) text += ": " + error;
  return text;
}

void report_store_host_gone(EventLog& events, const std::string& store,
                            const std::string& message) {
  DDP_LOG_WARN("lost " + store + " (" + message +
               "): the node that hosted it is gone; the store moves to a successor and the "
               "group re-forms without that node");
  events.record(event::kStoreLost, {{"message", message}, {"moves", true}});
}

void report_cut_off(EventLog& events, const std::string& store, const std::string& message,
                    bool keep, const std::string& pids) {
  DDP_LOG_WARN("lost " + store + " (" + message +
               "): this node was cut off, or the store host was; " +
               (keep ? "keeping this node's workers (pids " + pids + ") and re-forming in place"
                     : "stopping this node's workers (pids " + pids +
                           ") and joining the job again as a new node"));
  events.record(event::kStoreSilent, {{"message", message}});
}

void report_store_lost(EventLog& events, const std::string& store, const std::string& message,
                       const std::string& advice, const std::optional<std::string>& stopping) {
  DDP_LOG_ERROR(
      "lost " + store + " (" + message + "): " + advice +
      (stopping ? "; stopping this node's workers (pids " + *stopping + ")" : std::string()));
  events.record(event::kStoreLost, {{"message", message}});
}

}  // namespace ddp::launcher
