# CPack pre-build script (cmake/Package.cmake): the packaged static libraries lose their debug
# information, as dh_strip does for a -dev package (a quarter of the size; the .deb builds
# faster). Their symbols stay, so they link as before.
file(GLOB_RECURSE _archives "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*.a")
foreach(_archive IN LISTS _archives)
  execute_process(COMMAND ${CPACK_DDP_STRIP} --strip-debug ${_archive} RESULT_VARIABLE _status)
  if(NOT _status EQUAL 0)
    message(FATAL_ERROR "${CPACK_DDP_STRIP} --strip-debug ${_archive}: ${_status}")
  endif()
endforeach()
