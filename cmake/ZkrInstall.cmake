# SPDX-License-Identifier: Apache-2.0
# Install and export rules: headers, the library as both a shared and a static archive, a CMake
# package config and a pkg-config file. zklock installs itself (tools/zklock/CMakeLists.txt).
#
# The build's own `zkrecipes` target is one kind (static unless BUILD_SHARED_LIBS=ON) and is what
# the tests and zklock link. For installation two more targets are linked from the same object
# files (ZKR_LIBRARY_OBJECTS, compiled position independent), so nothing is compiled twice:
#   zkrecipes_shared  -> libzkrecipes.so.<version>, exported as zkrecipes::zkrecipes_shared
#   zkrecipes_static  -> libzkrecipes.a,            exported as zkrecipes::zkrecipes_static
# The installed config makes `zkrecipes::zkrecipes` the shared one, or the static one when the
# consumer sets zkrecipes_USE_STATIC_LIBS=ON before find_package (see docs/guide.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ZKR_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/zkrecipes
    CACHE STRING "Where the CMake package config files are installed, relative to the prefix")
mark_as_advanced(ZKR_INSTALL_CMAKEDIR)

# The ZooKeeper C client as the installed static library's consumers see it: the config file
# defines zkrecipes::zookeeper_mt (the C client has no CMake or pkg-config files of its own).
set(zkr_zookeeper_for_install
    $<BUILD_INTERFACE:zkr_zookeeper_c> $<INSTALL_INTERFACE:zkrecipes::zookeeper_mt>)

set(zkr_library_output_dir ${CMAKE_BINARY_DIR}/install-libs)
foreach(kind shared static)
  string(TOUPPER ${kind} kind_upper)
  add_library(zkrecipes_${kind} ${kind_upper} ${ZKR_LIBRARY_OBJECTS})
  set_target_properties(zkrecipes_${kind} PROPERTIES LINKER_LANGUAGE CXX)
  target_include_directories(zkrecipes_${kind} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # The headers use <stop_token>, <compare> and designated initialisers: consumers need C++20.
  target_compile_features(zkrecipes_${kind} INTERFACE cxx_std_20)
  # Boost is used only inside the library (header-only asio): consumers never need it.
  target_link_libraries(zkrecipes_${kind} PUBLIC Threads::Threads
                        PRIVATE ${zkr_zookeeper_for_install} fmt::fmt OpenSSL::SSL)
  set_target_properties(zkrecipes_${kind} PROPERTIES
    OUTPUT_NAME zkrecipes
    EXPORT_NAME zkrecipes_${kind}
    LIBRARY_OUTPUT_DIRECTORY ${zkr_library_output_dir}
    ARCHIVE_OUTPUT_DIRECTORY ${zkr_library_output_dir}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
endforeach()

install(TARGETS zkrecipes_shared zkrecipes_static
        EXPORT zkrecipes-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/zkr DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT zkrecipes-targets NAMESPACE zkrecipes:: DESTINATION ${ZKR_INSTALL_CMAKEDIR})
# The optional prometheus component, in an export set of its own: the config file loads it only
# when find_package asks for the component.
if(TARGET zkrecipes_prometheus)
  install(TARGETS zkrecipes_prometheus EXPORT zkrecipes-prometheus-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT zkrecipes-prometheus-targets NAMESPACE zkrecipes:: DESTINATION ${ZKR_INSTALL_CMAKEDIR})
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/zkrecipes-config.cmake.in
  ${CMAKE_BINARY_DIR}/cmake-package/zkrecipes-config.cmake
  INSTALL_DESTINATION ${ZKR_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake-package/zkrecipes-config-version.cmake
  COMPATIBILITY SameMajorVersion)  # a minor release keeps the API and ABI (README.md, "Versioning")
install(FILES ${CMAKE_BINARY_DIR}/cmake-package/zkrecipes-config.cmake
              ${CMAKE_BINARY_DIR}/cmake-package/zkrecipes-config-version.cmake
        DESTINATION ${ZKR_INSTALL_CMAKEDIR})

# The licence, as Debian's copyright file, and the changelog (compressed, as Debian's policy wants)
# in share/doc/zkrecipes: the package's own, and an installed tree's.
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/package-doc/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/package-doc
  COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/CHANGELOG.md > ${CMAKE_BINARY_DIR}/package-doc/changelog.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/CHANGELOG.md VERBATIM)
add_custom_target(zkrecipes_package_doc ALL DEPENDS ${CMAKE_BINARY_DIR}/package-doc/changelog.gz)
add_dependencies(zkrecipes_shared zkrecipes_package_doc)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright ${CMAKE_BINARY_DIR}/package-doc/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# pkg-config: relocatable (paths relative to the .pc file), so `cmake --install --prefix X` and a
# package installed under /usr both work.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ZKR_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(ZKR_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH zkr_pc_up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" zkr_pc_up "${zkr_pc_up}")
  set(ZKR_PC_PREFIX "\${pcfiledir}/${zkr_pc_up}")
  set(ZKR_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(ZKR_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(ZKR_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# zkrecipes.pc links the shared library; zkrecipes-static.pc names the archive itself, because
# with both in one directory -lzkrecipes always picks the shared one.
foreach(pc_name zkrecipes zkrecipes-static)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${pc_name}.pc.in ${CMAKE_BINARY_DIR}/cmake-package/${pc_name}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/cmake-package/${pc_name}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
