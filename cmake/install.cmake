# Install: the public C++ targets with find_package(shardload CONFIG) support, the `shardload`
# program, the Python extension modules and, for machines without an NVIDIA driver, the stand-in
# libcuda.so.1. Included last by the top-level CMakeLists.txt.
#
# A wheel (SHARDLOAD_WHEEL) installs into site-packages/shardload/ (wheel.install-dir in
# pyproject.toml), beside the packages it links at run time:
#   site-packages/shardload/_core*.so, _feed_core*.so, _feed_cuda*.so (CUDA builds),
#   _legate*.so                                                      the extension modules
#   site-packages/shardload/bin/shardload              the program (the `shardload` command runs it)
#   site-packages/shardload/bin/shardload-core         the same without Legate (run where it is absent)
#   site-packages/shardload/lib/                       libshardload.so, libshardload_legate.so,
#                                                      cmake/shardload/ (the package config)
#   site-packages/shardload/include/shardload/         the public headers
#   site-packages/shardload/_nocuda/libcuda.so.1       the stand-in driver (tools/nocuda)
#   site-packages/{legate/lib64,pyarrow,nvidia/nccl/lib}   what they link, found by RPATHs
#                                                      relative to $ORIGIN
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(SHARDLOAD_INSTALL_LIBDIR lib)
set(SHARDLOAD_INSTALL_CMAKEDIR ${SHARDLOAD_INSTALL_LIBDIR}/cmake/shardload)

# The folders, relative to site-packages, that the products load libraries from at run time.
set(shardload_site_libdirs legate/lib64 pyarrow nvidia/nccl/lib)
# $ORIGIN-relative RPATHs for a product installed at site-packages/shardload/<subdir>.
function(shardload_wheel_rpath target up)
  set(rpath "")
  foreach(dir ${shardload_site_libdirs})
    list(APPEND rpath "$ORIGIN/${up}../${dir}")
  endforeach()
  set(extra ${ARGN})
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${extra};${rpath}")
  # DT_RPATH, not DT_RUNPATH: liblegate.so needs libnccl.so.2 and has no RPATH to the nvidia-nccl
  # wheel itself; a DT_RPATH of the program or module that loads it is searched for that too.
  target_link_options(${target} PRIVATE "LINKER:--disable-new-dtags")
endfunction()

set(shardload_export_targets shardload_internal shardload_base shardload_storage shardload_readers
    shardload_engine shardload_errors)
if(SHARDLOAD_WITH_LEGATE)
  list(APPEND shardload_export_targets shardload_legate)
endif()
foreach(t ${shardload_export_targets})
  string(REGEX REPLACE "^shardload_" "" name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
endforeach()
# libshardload.so, which the layer targets above (shardload::engine, ...) link.
list(APPEND shardload_export_targets shardload_lib)
set_target_properties(shardload_lib PROPERTIES EXPORT_NAME shardload)
install(TARGETS ${shardload_export_targets} EXPORT shardloadTargets
        ARCHIVE DESTINATION ${SHARDLOAD_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${SHARDLOAD_INSTALL_LIBDIR}
        INCLUDES DESTINATION include)
foreach(layer base storage readers engine errors legate)
  if(TARGET shardload_${layer} AND IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${layer}/include)
    install(DIRECTORY src/${layer}/include/ DESTINATION include)
  endif()
endforeach()
install(EXPORT shardloadTargets NAMESPACE shardload:: DESTINATION ${SHARDLOAD_INSTALL_CMAKEDIR})
if(SHARDLOAD_WITH_LEGATE)
  get_filename_component(SHARDLOAD_BUILD_SITE "${SHARDLOAD_LEGATE_PREFIX}" DIRECTORY)
else()
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['platlib'])"
                  OUTPUT_VARIABLE SHARDLOAD_BUILD_SITE OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
configure_package_config_file(cmake/shardloadConfig.cmake.in
  ${PROJECT_BINARY_DIR}/shardloadConfig.cmake INSTALL_DESTINATION ${SHARDLOAD_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/shardloadConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/shardloadConfig.cmake
              ${PROJECT_BINARY_DIR}/shardloadConfigVersion.cmake
        DESTINATION ${SHARDLOAD_INSTALL_CMAKEDIR})

install(TARGETS shardload RUNTIME DESTINATION bin)
if(TARGET shardload_core_program)
  install(TARGETS shardload_core_program RUNTIME DESTINATION bin)
endif()
if(SHARDLOAD_PYTHON)
  set(shardload_modules _core _feed_core)
  if(TARGET _feed_cuda)
    list(APPEND shardload_modules _feed_cuda)
  endif()
  if(SHARDLOAD_WITH_LEGATE)
    list(APPEND shardload_modules _legate)
  endif()
  install(TARGETS ${shardload_modules} LIBRARY DESTINATION .)
endif()

if(SHARDLOAD_WHEEL)
  shardload_wheel_rpath(shardload "../" "$ORIGIN/../lib")
  if(TARGET shardload_core_program)
    shardload_wheel_rpath(shardload_core_program "../" "$ORIGIN/../lib")
  endif()
  if(SHARDLOAD_PYTHON)
    foreach(m ${shardload_modules})
      shardload_wheel_rpath(${m} "" "$ORIGIN/lib")
    endforeach()
  endif()
  shardload_wheel_rpath(shardload_lib "../")
  if(SHARDLOAD_WITH_LEGATE)
    # libshardload.so beside it.
    shardload_wheel_rpath(shardload_legate "../" "$ORIGIN")
  endif()
  # The stand-in driver (tools/nocuda/nocuda.c; README "Running without a GPU"). shardload's
  # __init__ and the `shardload` command load it only where the dynamic linker finds no
  # libcuda.so.1, so it never shadows a real driver.
  add_library(shardload_nocuda SHARED tools/nocuda/nocuda.c)
  set_target_properties(shardload_nocuda PROPERTIES OUTPUT_NAME cuda VERSION 1 SOVERSION 1
    C_VISIBILITY_PRESET hidden C_STANDARD 99 NO_SONAME OFF
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/nocuda)
  install(FILES $<TARGET_FILE_DIR:shardload_nocuda>/libcuda.so.1 DESTINATION _nocuda)
else()
  # Elsewhere the products keep the absolute paths they were linked with. On the targets: they
  # exist already, and the variable only sets up targets made after it. libshardload.so needs
  # it most: a consumer's link resolves its Arrow libraries through it.
  set(CMAKE_INSTALL_RPATH_USE_LINK_PATH TRUE)
  foreach(t shardload_lib shardload_legate shardload shardload_core_program ${shardload_modules})
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
    endif()
  endforeach()
endif()
