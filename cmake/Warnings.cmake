# ddp_warnings(target): the project's warning set, applied to every target we own.
add_library(ddp_warnings INTERFACE)
target_compile_options(ddp_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>)
if(DDP_WERROR)
  target_compile_options(ddp_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
