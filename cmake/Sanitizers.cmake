# Instrumented builds (docs/fuzzing.md): every target of ours gets the flags, so a report
# points into our code wherever it runs.
#   DDP_SANITIZE=address,undefined | thread   scripts/sanitize.sh (build-asan, build-tsan)
#   DDP_FUZZ=ON                               scripts/fuzz.sh (build-fuzz, clang only)
# Third-party libraries (Gloo, liburing, libstdc++) stay uninstrumented: Debian's builds.
set(DDP_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined or thread")
option(DDP_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)

if(DDP_SANITIZE)
  add_compile_options(-fsanitize=${DDP_SANITIZE} -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=${DDP_SANITIZE})
  if(DDP_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 warns at every inlined std::atomic_thread_fence (Boost.Asio's handler fences)
    # that TSan does not model fences; the warning says nothing about our code.
    add_compile_options(-Wno-tsan)
  endif()
  if(DDP_SANITIZE MATCHES "undefined")
    # A UB report fails the test instead of scrolling past.
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()

if(DDP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DDP_FUZZ needs clang (libFuzzer): configure with CXX=clang++ CC=clang")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
                      -fno-sanitize-recover=undefined -fno-omit-frame-pointer -gline-tables-only)
  add_link_options(-fsanitize=address,undefined)
endif()
