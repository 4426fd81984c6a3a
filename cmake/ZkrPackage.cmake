# SPDX-License-Identifier: Apache-2.0
# A Debian package built with CPack: `cpack -G DEB` in the build directory (or `cmake --build
# <dir> --target package`). One package, zkrecipes, with everything `cmake --install` puts in place:
# the shared and static library, headers, CMake and pkg-config files, zklock, its man page and bash
# completion.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME zkrecipes)
set(CPACK_PACKAGE_VENDOR "zkrecipes developers")
# Whoever builds and ships the package names themselves here.
set(ZKR_PACKAGE_MAINTAINER "zkrecipes developers <zkrecipes@example.org>"
    CACHE STRING "Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${ZKR_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "ZooKeeper locks with fencing tokens, and zklock")
set(CPACK_PACKAGE_DESCRIPTION
    "A C++20 library of Apache ZooKeeper recipes: a lock with fencing tokens,\n\
a read/write lock, leader election, a semaphore, group membership, barriers,\n\
caches and counters, with a session monitor that reports loss before the\n\
server can expire the session. And zklock, which runs a command while\n\
holding a ZooKeeper lock, like flock(1) across hosts.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # debug info stays in the build tree; the package ships stripped binaries

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # zkrecipes_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The package ships a shared library: let dpkg know (triggers ldconfig, writes shlibs).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# dpkg runs ldconfig through its trigger (CPack's postinst and postrm call it too).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)

# Run-time dependencies: computed by dpkg-shlibdeps from the binaries when it is available (it is
# part of dpkg-dev); otherwise the bookworm names, which are what dpkg-shlibdeps finds there.
find_program(ZKR_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(ZKR_DPKG_SHLIBDEPS)
if(ZKR_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "libc6 (>= 2.34), libfmt9 (>= 9.1.0+ds1), libgcc-s1 (>= 3.0), libssl3 (>= 3.0.0), libstdc++6 (>= 11), libzookeeper-mt2")
endif()
# Linking the static library, or using zkr/asio.hpp, needs these development packages.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libzookeeper-mt-dev, libfmt-dev, libssl-dev, libboost-dev")

include(CPack)
