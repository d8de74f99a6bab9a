#include "rendezvous/store_takeover.hpp"

#include "common/error.hpp"
#include "common/parse_int.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/store_succession.hpp"

namespace ddp::rendezvous {
namespace {

constexpr const char* kOpen = "open ";
constexpr const char* kPromoted = "promoted ";
constexpr const char* kSupport = "1";
constexpr const char* kDead = "dead";

bool starts_with(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

}  // namespace

TakeoverBallot::TakeoverBallot(Store& store, uint64_t round, int self, int members,
                               BallotRecord& record)
    : store_(store), round_(round), self_(self), members_(members), record_(record) {}

std::string TakeoverBallot::key(const std::string& name) const {
  return rdzv_keys::takeover(round_, name);
}

std::string TakeoverBallot::in_epoch(const std::string& name, uint64_t epoch) const {
  return rdzv_keys::takeover(round_, name + "/" + std::to_string(epoch));
}

TakeoverBallot::State TakeoverBallot::state() {
  const std::string value = store_.compare_set(key("state"), "", std::string(kOpen) + "0");
  State s;
  s.promoted = starts_with(value, kPromoted);
  const size_t skip = std::string(s.promoted ? kPromoted : kOpen).size();
  const auto epoch = (s.promoted || starts_with(value, kOpen))
                         ? try_parse_int(std::string_view(value).substr(skip), 0)
                         : std::nullopt;
  if (!epoch) {
    throw ProtocolError("store takeover state '" + value + "' at " + key("state") +
                        " does not parse; expected 'open <epoch>' or 'promoted <epoch>'");
  }
  s.epoch = static_cast<uint64_t>(*epoch);
  return s;
}

bool TakeoverBallot::promoted() {
  return state().promoted;
}

void TakeoverBallot::support(bool host_dead, const std::vector<int>& dead) {
  const State s = state();
  if (s.promoted) return;
  if (record_.voted_epoch != s.epoch) {
    const std::string mine = store_.compare_set(
        in_epoch("support", s.epoch) + "/" + std::to_string(self_), "", kSupport);
    if (mine == kSupport) {
      // Noted before it is counted: a count lost with a connection leaves the vote uncounted,
      // which can only delay a promotion, never make a wrong one.
      record_.voted_epoch = s.epoch;
      store_.add(in_epoch("supporters", s.epoch), 1);
    }
  }
  if (host_dead) store_.set(key("death"), "1");
  for (int g : dead) {
    if (g != self_ && record_.marked_dead.count(g) == 0) mark_dead(g, s.epoch);
  }
}

void TakeoverBallot::mark_dead(int g, uint64_t epoch) {
  const std::string me = std::to_string(self_);
  const std::string rank = std::to_string(g);
  // First its vote, if it cast one in this epoch (the epoch read after its death was proven:
  // a dead node casts none in a later one), then the electorate: whoever reads the dead count
  // first and the dead voters second never sees a death subtracted from the electorate and not
  // from the supporters.
  if (store_.compare_set(in_epoch("support", epoch) + "/" + rank, "", kDead) == kSupport &&
      store_.compare_set(in_epoch("dead_voter", epoch) + "/" + rank, "", me) == me) {
    store_.add(in_epoch("dead_voters", epoch), 1);
  }
  if (store_.compare_set(key("dead/" + rank), "", me) == me) {
    record_.marked_dead.insert(g);  // before the count: a lost count keeps the electorate large
    store_.add(key("dead_count"), 1);
  } else {
    record_.marked_dead.insert(g);  // someone else counted it
  }
}

Tally TakeoverBallot::tally() {
  Tally t;
  t.epoch = state().epoch;
  // This order (dead count, then supporters, then dead voters): see mark_dead.
  t.dead = static_cast<int>(store_.add(key("dead_count"), 0));
  t.supporters = static_cast<int>(store_.add(in_epoch("supporters", t.epoch), 0));
  t.dead_voters = static_cast<int>(store_.add(in_epoch("dead_voters", t.epoch), 0));
  t.host_dead = store_.check({key("death")});
  return t;
}

bool TakeoverBallot::try_promote(std::chrono::steady_clock::duration since_lost,
                                 std::chrono::steady_clock::duration margin) {
  if (promoted()) return true;
  const Tally t = tally();
  if (!may_take_over(t.supporters - t.dead_voters, members_ - t.dead, t.host_dead, since_lost,
                     margin)) {
    return false;
  }
  // Fails when a withdrawal bumped the epoch since the tally was read.
  const std::string now = store_.compare_set(key("state"), kOpen + std::to_string(t.epoch),
                                             kPromoted + std::to_string(t.epoch));
  if (!starts_with(now, kPromoted)) return false;
  store_.set(key("promoted"), std::to_string(self_));
  return true;
}

bool TakeoverBallot::withdraw() {
  while (true) {
    const State s = state();
    if (s.promoted) return false;
    if (record_.voted_epoch != s.epoch) return true;  // void already (or never cast)
    const std::string next = kOpen + std::to_string(s.epoch + 1);
    if (store_.compare_set(key("state"), kOpen + std::to_string(s.epoch), next) == next) {
      record_.voted_epoch.reset();
      return true;
    }
  }
}

void TakeoverBallot::wait_promoted(Duration timeout) {
  store_.wait({key("promoted")}, timeout);
}

}  // namespace ddp::rendezvous
