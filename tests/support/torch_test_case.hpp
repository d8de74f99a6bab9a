#pragma once
// TORCH_TEST_CASE(name, tags) { ... torch ... }: one scenario, registered as one Catch2 test
// case per PyTorch of torches(), named "torch <version>: <name>" and tagged
// "[torch-<version>]", so CTest lists (and reports a failure under) each version on its own
// and `-R "torch 2.15.0"` or `"[torch-2.15.0]"` picks one. The body gets `const Torch& torch`.
//
// A venv that scripts/setup_torch.sh could not install (no network) makes its cases print
// kSkipped with the version and the command, and return: CTest reports them as skipped
// (SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt). Debian's 1.13 is part of the suite: when
// it is missing, its cases fail.
#include <catch2/catch.hpp>
#include <cstddef>
#include <iostream>
#include <string>
#include <utility>

#include "tests/support/python.hpp"

namespace ddp::test {

// The first words of the line a skipped case prints (tests/CMakeLists.txt matches them).
inline constexpr const char* kSkipped = "DDP-TEST-SKIPPED:";

using TorchTestBody = void (*)(const Torch&);

class TorchTestInvoker : public Catch::ITestInvoker {
 public:
  TorchTestInvoker(TorchTestBody body, Torch torch) : body_(body), torch_(std::move(torch)) {}
  void invoke() const override {
    if (!torch_.installed()) {
      if (torch_.venv.empty()) {
        FAIL(torch_.missing_message());
      }
      std::cout << kSkipped << " " << torch_.missing_message() << std::endl;
      WARN("skipped: " << torch_.missing_message());
      return;
    }
    body_(torch_);
  }

 private:
  TorchTestBody body_;
  Torch torch_;
};

struct TorchTestRegistrar {
  TorchTestRegistrar(TorchTestBody body, const char* name, const char* tags, const char* file,
                     std::size_t line) {
    for (const Torch& torch : torches()) {
      const std::string full_name = "torch " + torch.version + ": " + name;
      const std::string all_tags = std::string(tags) + "[torch-" + torch.version + "]";
      // Catch's registry owns the invoker and copies the strings.
      Catch::AutoReg(new TorchTestInvoker(body, torch), Catch::SourceLineInfo(file, line),
                     Catch::StringRef(), Catch::NameAndTags{full_name, all_tags});
    }
  }
};

}  // namespace ddp::test

#define DDP_TORCH_CAT2(a, b) a##b
#define DDP_TORCH_CAT(a, b) DDP_TORCH_CAT2(a, b)
#define TORCH_TEST_CASE(name, tags)                                                      \
  static void DDP_TORCH_CAT(ddp_torch_test_, __LINE__)(const ::ddp::test::Torch& torch); \
  namespace {                                                                            \
  const ::ddp::test::TorchTestRegistrar DDP_TORCH_CAT(ddp_torch_registrar_, __LINE__)(   \
      &DDP_TORCH_CAT(ddp_torch_test_, __LINE__), name, tags, __FILE__, __LINE__);        \
  }                                                                                      \
  static void DDP_TORCH_CAT(ddp_torch_test_, __LINE__)(const ::ddp::test::Torch& torch)
