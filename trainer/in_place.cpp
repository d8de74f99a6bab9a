#include "trainer/in_place.hpp"

#include <array>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/trainer.hpp"

namespace ddp::trainer {
namespace wr = worker_runtime;

namespace {

// Long enough for the agent to re-join the rendezvous (its join timeout); a worker the agent
// no longer wants is killed by it anyway.
constexpr wr::Duration kRoundNoticeWait = std::chrono::minutes(10);

// Broadcasts text from root (length, then the bytes packed into int64 words).
int64_t broadcast_text(wr::ProcessGroup& group, std::string& text, int root) {
  std::array<int64_t, 1> length = {static_cast<int64_t>(text.size())};
  group.broadcast(std::span<int64_t>(length), root);
  std::vector<int64_t> words((static_cast<size_t>(length[0]) + 7) / 8);
  if (group.rank() == root) std::memcpy(words.data(), text.data(), text.size());
  group.broadcast(std::span<int64_t>(words), root);
  text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(length[0]));
  return static_cast<int64_t>(8 + words.size() * 8);
}

int64_t send_state(wr::ProcessGroup& group, Model& model, TrainingPosition& position, int root) {
  std::array<int64_t, 5> scalars = {position.epoch, position.global_position, position.step,
                                    position.samples_seen, position.schedule_steps};
  group.broadcast(std::span<int64_t>(scalars), root);
  position = {scalars[0], scalars[1], scalars[2], scalars[3], scalars[4]};
  int64_t bytes = static_cast<int64_t>(sizeof(scalars));
  const auto params = model.host_parameters();
  group.broadcast(params, root);
  bytes += static_cast<int64_t>(params.size_bytes());
  for (const StateBuffer& buffer : model.host_optimizer_buffers()) {
    group.broadcast(buffer.data, root);
    bytes += static_cast<int64_t>(buffer.data.size_bytes());
  }
  std::string optimizer = model.optimizer_scalar_state().dump();
  bytes += broadcast_text(group, optimizer, root);
  if (group.rank() != root) {
    model.load_optimizer_scalar_state(nlohmann::json::parse(optimizer));
    model.push_host_state();  // the host copies now hold the source's state (GPU: upload)
  }
  return bytes;
}

// A membership change can be recovered from; these two cannot: ranks that disagree on their
// state (a bug) and an agent that is gone or sends no round.
bool recoverable(const CollectiveError& e) {
  return dynamic_cast<const wr::ConsistencyError*>(&e) == nullptr &&
         dynamic_cast<const wr::RecoveryError*>(&e) == nullptr;
}

}  // namespace

SyncOutcome sync_training_state(wr::ProcessGroup& group, Model& model, TrainingPosition& position,
                                bool& live, int64_t round, int64_t* lineage) {
  SyncOutcome out;
  // The epoch's end (validation, checkpoint) changes no step: a rank already at position 0 of
  // the next epoch is ahead of one at the same step still at the end. Twice the step, plus
  // one past the end, orders them, so both continue from the one behind.
  const bool past_epoch_end = position.global_position == 0 && position.epoch > 0;
  const int64_t progress = position.step * 2 + (past_epoch_end ? 1 : 0);
  out.agreement =
      wr::agree_on_state(group, live, progress, lineage != nullptr ? *lineage : 0, round);
  out.agreement.step /= 2;
  if (out.agreement.any_live && out.agreement.needs_send) {
    // While the broadcast runs a receiver holds a mix of two states: not live until it ends,
    // so a change in the middle of it never makes this rank the next source.
    if (group.rank() != out.agreement.source) live = false;
    out.state_bytes = send_state(group, model, position, out.agreement.source);
  }
  if (lineage != nullptr) *lineage = out.agreement.lineage;
  return out;
}

void Trainer::recover_or_rethrow(const CollectiveError& e) {
  if (!in_place() || !recoverable(e)) throw;  // the exception being handled
  recover_in_place(e.what());
}

void Trainer::recover_in_place(const std::string& why) {
  std::string failure = why;
  bool first = true;
  for (;;) {
    // A failed collective waits for the agent to announce a membership change (change_wait(),
    // 60 s unless DDPLAUNCH_RECOVERY_CHANGE_WAIT says otherwise). That covers the agent's own
    // detection: a closed store connection at once, a silent node after lease_timeout (5 s by
    // default), a rank restarted elsewhere through the failure record in milliseconds.
    // Without a change this is a plain failure: the worker fails as it would without in-place
    // recovery, and the agent restarts it. RecoveryError (not caught) when the agent closed
    // the channel.
    wr::RecoveryClient& agent = *context_->recovery();
    if (!agent.wait_change(agent.change_wait())) {
      throw CollectiveError(failure + " (the agent announced no membership change within " +
                            std::to_string(agent.change_wait().count() / 1000) +
                            " s: a failure, not a recovery)");
    }
    if (first && (rank_ == 0 || !live_)) DDP_LOG_WARN("in-place recovery after: " + why);
    first = false;
    // The bucketer's in-flight work belongs to the old group, which recover() destroys.
    bucketer_.reset();
    consistency_.reset();
    try {
      // RecoveryError (not caught) when the agent is gone or sends no new round.
      const recovery::RoundNotice notice = context_->recover(kRoundNoticeWait);
      attach(context_->process_group());
      restart_count_ = notice.restart_count;  // fault injection fires on attempt 0 only
      sync_state(/*announce=*/true);
      return;
    } catch (const CollectiveError& e) {
      if (!recoverable(e)) throw;
      // The membership changed again while the group was built or the state synced.
      DDP_LOG_WARN(std::string("in-place recovery interrupted (waiting for the next round): ") +
                   e.what());
      failure = e.what();
    }
  }
}

wr::StateAgreement Trainer::sync_state(bool announce) {
  TrainingPosition position{epoch_, global_position_, step_, samples_seen_, schedule_.total_steps};
  const SyncOutcome outcome =
      sync_training_state(*group_, *model_, position, live_, context_->round(), &lineage_);
  const wr::StateAgreement& agreed = outcome.agreement;
  if (!agreed.any_live) return agreed;  // nobody holds state: the checkpoint decides
  epoch_ = position.epoch;
  global_position_ = position.global_position;
  step_ = position.step;
  samples_seen_ = position.samples_seen;
  schedule_.total_steps = position.schedule_steps;
  live_ = true;
  // Metrics of the interrupted interval are dropped: each rank saw a different part of it.
  loss_sum_ = 0;
  correct_ = 0;
  count_ = 0;
  wait_seconds_ = 0;
  last_log_samples_ = samples_seen_;
  const int source = agreed.needs_send ? agreed.source : -1;
  context_->recovery()->send_joined(context_->round(), rank_, step_, source, outcome.state_bytes);
  stepped_pending_ = true;
  if (rank_ == 0 && (announce || agreed.needs_send)) {
    std::cout << "[train] in-place recovery: round " << context_->round() << ", world " << world_
              << ", resumed at step " << step_ << " (state from rank " << source << ")"
              << std::endl;
    log_->write({{"kind", "recovery"},
                 {"round", context_->round()},
                 {"world_size", world_},
                 {"step", step_},
                 {"epoch", epoch_},
                 {"global_position", global_position_},
                 {"source", source},
                 {"state_bytes", outcome.state_bytes}});
  }
  return agreed;
}

void Trainer::report_first_step() {
  if (!stepped_pending_ || !in_place()) return;
  stepped_pending_ = false;
  context_->recovery()->send_stepped(context_->round(), step_);
}

}  // namespace ddp::trainer
