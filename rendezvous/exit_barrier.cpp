#include "rendezvous/exit_barrier.hpp"

#include <atomic>
#include <random>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {
namespace {

// Value of "<key>/all" written by interrupt(): the waiter stops, nobody else reads it.
const std::string kInterrupted = "interrupted";

// Unique to one count_out() call in the whole job: a random id of this process and a
// sequence number. COMPARE_SET answers with the value it finds, so two peers that both find
// a node gone and write the same reason would each read their own words back and each
// count it; the token tells the writer apart.
std::string writer_token() {
  static const uint64_t kProcess = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> sequence{0};
  return std::to_string(kProcess) + "." + std::to_string(++sequence);
}

}  // namespace

bool ExitBarrier::count_out(int member, const std::string& why) const {
  // Only the writer of the out key counts: a node found lost that later shuts down itself
  // (or the reverse), or found gone by several peers at once, is counted once.
  const std::string mine = why + " " + writer_token();
  if (store.compare_set(out_key(member), "", mine) != mine) return false;
  // Gone for good: a re-formed round does not wait for it. A node only found silent ("lost")
  // may be stopped, not dead, and come back: it still counts as expected.
  if (why == "finished" || why == "failed" || why == "disconnected") store.add(gone_key(), 1);
  if (why == "lost") store.add(lost_key(), 1);
  if (store.add(key, 1) < nodes) return false;
  store.set(all_key(), "1");
  return true;
}

int64_t ExitBarrier::gone() const {
  return store.add(gone_key(), 0);
}

int64_t ExitBarrier::lost() const {
  return store.add(lost_key(), 0);
}

std::string ExitBarrier::out_reason(int member) const {
  const std::string value = read_if_present(store, out_key(member)).value_or("");
  return value.substr(0, value.find(' '));  // "<why> <writer token>"
}

void ExitBarrier::interrupt() const {
  store.compare_set(all_key(), "", kInterrupted);
}

bool ExitBarrier::wait_all() const {
  const auto deadline = Deadline::after(timeout);
  while (true) {
    const auto left = deadline.remaining();
    try {
      store.wait({all_key()}, deadline.slice(progress_interval));
      return store.get(all_key()) != kInterrupted;
    } catch (const StoreTimeout&) {
    }
    const std::string count = std::to_string(store.add(key, 0)) + "/" + std::to_string(nodes);
    if (left <= progress_interval) {
      DDP_LOG_WARN("exit barrier: only " + count + " nodes finished within " +
                   describe_timeout(timeout) + "; closing the store anyway");
      return false;
    }
    DDP_LOG_INFO("exit barrier: " + count +
                 " nodes finished; this node hosts the store and waits for the rest");
  }
}

void ExitBarrier::depart(int member, const std::string& why, bool wait) const {
  if (count_out(member, why) || !wait) return;
  wait_all();
}

}  // namespace ddp::rendezvous
