# ddp_warnings(target): the project's warning set, applied to every target we own.
# Not -Wnull-dereference: with GCC 12 it fires inside inlined Asio and CLI11/libstdc++ code
# (a middle-end warning that SYSTEM includes cannot hide), so it would only breed per-file
# exceptions.
# BUILD_INTERFACE: the installed package exports this target (cmake/Install.cmake) empty.
add_library(ddp_warnings INTERFACE)
target_compile_options(ddp_warnings INTERFACE
  $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>>)
if(DDP_WERROR)
  target_compile_options(ddp_warnings INTERFACE $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Werror>>)
endif()
