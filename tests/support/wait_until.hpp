#pragma once
// Polling a condition that another process makes true (a file appears, a pid goes away),
// always with a deadline.
#include <chrono>
#include <functional>

namespace ddp::test {

// Polls pred every 10 ms until it holds or timeout passes; returns pred's last value.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

}  // namespace ddp::test
