# Man pages for ddplaunch and ddpstore, generated from their --help and --version by help2man
# (scripts/setup.sh installs it) so they never disagree with the programs. Without help2man
# the build goes on without them.
find_program(HELP2MAN_EXECUTABLE help2man)
if(HELP2MAN_EXECUTABLE)
  set(_ddp_man_ddplaunch "a native torchrun: start and supervise data-parallel workers")
  set(_ddp_man_ddpstore "a standalone TCP store server for ddplaunch and torchrun rendezvous")
  set(_ddp_man_pages)
  foreach(_program ddplaunch ddpstore)
    set(_page ${PROJECT_BINARY_DIR}/man/${_program}.1)
    add_custom_command(
      OUTPUT ${_page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND ${HELP2MAN_EXECUTABLE} --no-info --no-discard-stderr
              "--name=${_ddp_man_${_program}}" --output=${_page} $<TARGET_FILE:${_program}>
      DEPENDS ${_program}
      COMMENT "help2man: ${_program}.1"
      VERBATIM)
    list(APPEND _ddp_man_pages ${_page})
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${_ddp_man_pages})
  install(FILES ${_ddp_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man pages (scripts/setup.sh installs it)")
endif()
