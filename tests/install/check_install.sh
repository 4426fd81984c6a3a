#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that zkrecipes installs and packages the way a user consumes it. Run by ctest (see
# CMakeLists.txt here); needs no ZooKeeper server. Every step works in a scratch directory of its
# own, which it empties first; nothing is installed outside it.
#
#   check_install.sh install BUILD_DIR PREFIX
#   check_install.sh cmake-consumer PREFIX WORK_DIR shared|static
#   check_install.sh pkgconfig-consumer PREFIX WORK_DIR shared|static
#   check_install.sh prometheus-consumer PREFIX WORK_DIR
#   check_install.sh version-compat PREFIX WORK_DIR VERSION
#   check_install.sh subdirectory SOURCE_DIR WORK_DIR
#   check_install.sh deb BUILD_DIR WORK_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
consumer_source=$here/consumer
: "${CXX:=c++}"

fail() {
  echo "check_install: FAILED: $*" >&2
  exit 1
}

fresh_dir() {
  rm -rf "$1"
  mkdir -p "$1"
}

# The consumer must print its success line and exit 0.
run_consumer() {
  local output
  output=$("$@") || fail "the consumer exited with status $?: $output"
  echo "$output"
  grep -q "consumer: all checks passed" <<<"$output" || fail "the consumer did not pass its checks"
}

# Shared: the consumer loads libzkrecipes.so from the prefix. Static: it does not load it at all.
check_linkage() {
  local program=$1 kind=$2 prefix=$3 loaded
  loaded=$(ldd "$program" | awk '/libzkrecipes\.so/ {print $3}')
  if [ "$kind" = shared ]; then
    [ -n "$loaded" ] || fail "$program does not load libzkrecipes.so"
    case "$(realpath "$loaded")" in
      "$(realpath "$prefix")"/*) ;;
      *) fail "$program loads $loaded, not the one under $prefix" ;;
    esac
    echo "linkage: $program loads $loaded"
  else
    [ -z "$loaded" ] || fail "$program was linked statically but loads $loaded"
    echo "linkage: $program does not load libzkrecipes.so (static)"
  fi
}

libdir_of() {
  local prefix=$1
  local pc
  pc=$(find "$prefix" -name zkrecipes.pc -path '*/pkgconfig/*' | head -n 1)
  [ -n "$pc" ] || fail "no zkrecipes.pc under $prefix"
  dirname "$(dirname "$pc")"
}

# A statically linked zklock has no TLS of its own: given a TLS option it runs zklock-tls from
# LIBEXECDIR/zkrecipes. Reached, zklock-tls names the missing CA file; not reached, zklock says so.
check_tls_build_reached() {
  local zklock=$1 output
  output=$(env -u ZKLOCK_SERVERS "$zklock" --tls-ca /nonexistent/ca.pem -z 127.0.0.1:9 /zkr-install-check true 2>&1) &&
    fail "$zklock with a CA file that does not exist succeeded: $output"
  grep -q "CA file or directory does not exist" <<<"$output" ||
    fail "$zklock with a TLS option did not reach zklock-tls: $output"
  echo "$zklock --tls-ca: reached zklock-tls"
}

cmd_install() {
  local build=$1 prefix=$2
  fresh_dir "$prefix"
  cmake --install "$build" --prefix "$prefix" >/dev/null
  local libdir
  libdir=$(libdir_of "$prefix")
  local expected=(
    include/zkr/lock.hpp include/zkr/session.hpp include/zkr/fence_gate.hpp include/zkr/fencing_token.hpp
    include/zkr/fenced.hpp include/zkr/prometheus.hpp
    bin/zklock share/man/man1/zklock.1.gz share/bash-completion/completions/zklock
    share/doc/zkrecipes/copyright share/doc/zkrecipes/changelog.gz
  )
  for file in "${expected[@]}"; do
    [ -e "$prefix/$file" ] || fail "cmake --install did not install $file"
  done
  for file in libzkrecipes.a libzkrecipes.so cmake/zkrecipes/zkrecipes-config.cmake \
              cmake/zkrecipes/zkrecipes-config-version.cmake pkgconfig/zkrecipes.pc pkgconfig/zkrecipes-static.pc; do
    [ -e "$libdir/$file" ] || fail "cmake --install did not install $libdir/$file"
  done
  [ -n "$(find "$libdir" -name 'libzkrecipes.so.*' -type f)" ] || fail "no versioned libzkrecipes.so.* in $libdir"
  # Only public headers: nothing of src/ or recipes/.
  local stray
  stray=$(find "$prefix/include" -type f ! -path '*/include/zkr/*.hpp')
  [ -z "$stray" ] || fail "unexpected files under include/: $stray"
  "$prefix/bin/zklock" --version >/dev/null || fail "the installed zklock does not run"
  check_tls_build_reached "$prefix/bin/zklock"
  echo "installed into $prefix:"
  (cd "$prefix" && find . -type f -o -type l | sort)
}

# The optional component, found with find_package(zkrecipes COMPONENTS prometheus).
cmd_prometheus_consumer() {
  local prefix=$1 work=$2
  fresh_dir "$work"
  cmake -S "$here/prometheus_consumer" -B "$work" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$CXX" \
        -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; fail "configuring the prometheus consumer against $prefix"; }
  cmake --build "$work" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; fail "building the prometheus consumer against $prefix"; }
  run_consumer "$work/consumer"
}

cmd_cmake_consumer() {
  local prefix=$1 work=$2 kind=$3 use_static=OFF
  [ "$kind" = static ] && use_static=ON
  fresh_dir "$work"
  cmake -S "$consumer_source" -B "$work" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$CXX" \
        -Dzkrecipes_USE_STATIC_LIBS=$use_static -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; fail "configuring the consumer against $prefix ($kind)"; }
  cmake --build "$work" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; fail "building the consumer against $prefix ($kind)"; }
  check_linkage "$work/consumer" "$kind" "$prefix"
  run_consumer "$work/consumer"
}

cmd_pkgconfig_consumer() {
  local prefix=$1 work=$2 kind=$3 module=zkrecipes
  [ "$kind" = static ] && module=zkrecipes-static
  fresh_dir "$work"
  local libdir
  libdir=$(libdir_of "$prefix")
  export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  local flags
  flags=$(pkg-config --cflags --libs "$module") || fail "pkg-config does not know $module"
  echo "pkg-config --cflags --libs $module: $flags"
  # shellcheck disable=SC2086  # the flags are words
  "$CXX" -std=c++20 -o "$work/consumer" "$consumer_source/main.cpp" $flags -Wl,-rpath,"$libdir" ||
    fail "compiling the consumer with pkg-config's flags for $module"
  check_linkage "$work/consumer" "$kind" "$prefix"
  run_consumer "$work/consumer"
}

# find_package(zkrecipes X.Y) accepts any release of the same major version from X.Y on
# (SameMajorVersion: a minor release adds to the API and keeps the ABI), and refuses another major.
cmd_version_compat() {
  local prefix=$1 work=$2 version=$3 major=${3%%.*}
  fresh_dir "$work"
  local configure=(cmake -S "$consumer_source" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$CXX")
  "${configure[@]}" -B "$work/same" -DZKR_REQUIRE_VERSION="$major.0" >"$work/same.log" 2>&1 ||
    { cat "$work/same.log"; fail "find_package(zkrecipes $major.0) refused the installed $version"; }
  grep -q "consumer: found zkrecipes $version\$" "$work/same.log" ||
    { cat "$work/same.log"; fail "find_package(zkrecipes $major.0) did not report version $version"; }
  echo "find_package(zkrecipes $major.0): found $version"

  local next=$((major + 1)).0
  if "${configure[@]}" -B "$work/next" -DZKR_REQUIRE_VERSION="$next" >"$work/next.log" 2>&1; then
    cat "$work/next.log"; fail "find_package(zkrecipes $next) accepted the installed $version"
  fi
  grep -q "version: $version" "$work/next.log" ||
    { cat "$work/next.log"; fail "find_package(zkrecipes $next) failed, but not for the version"; }
  echo "find_package(zkrecipes $next): refused $version"

  # The version file's rule itself, for releases not installed here: a later minor release
  # satisfies $major.0, an earlier major does not.
  local version_file
  version_file=$(find "$prefix" -name zkrecipes-config-version.cmake | head -n 1)
  [ -n "$version_file" ] || fail "no zkrecipes-config-version.cmake under $prefix"
  local probe=$work/probe.cmake
  cat >"$probe" <<PROBE
function(check installed wanted expected)
  file(READ "$version_file" text)
  string(REPLACE "\"$version\"" "\"\${installed}\"" text "\${text}")
  file(WRITE "$work/version-\${installed}.cmake" "\${text}")
  set(PACKAGE_FIND_VERSION \${wanted})
  string(REPLACE "." ";" parts \${wanted})
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  set(PACKAGE_FIND_VERSION_PATCH 0)
  set(PACKAGE_FIND_VERSION_COUNT 2)
  include("$work/version-\${installed}.cmake")
  if(NOT "\${PACKAGE_VERSION_COMPATIBLE}" STREQUAL "\${expected}")
    message(FATAL_ERROR "installed \${installed}, wanted \${wanted}: compatible is '\${PACKAGE_VERSION_COMPATIBLE}', not \${expected}")
  endif()
  message(STATUS "installed \${installed}, wanted \${wanted}: compatible \${expected}")
endfunction()
check($major.4.2 $major.0 TRUE)
check($major.4.2 $major.4 TRUE)
check($major.4.2 $major.5 FALSE)
check($next.0 $major.0 FALSE)
PROBE
  cmake -P "$probe" || fail "the installed version file's compatibility rule"
}

cmd_subdirectory() {
  local source=$1 work=$2
  fresh_dir "$work"
  # zklock is not needed by the consumer; leaving it out keeps the test short. What this checks is
  # that the tree configures, builds and links as a subproject, not the optimizer: build type None
  # (no flags of CMake's own, so -O0 and no debug info) compiles the library in about a fifth less
  # time than Release (parsing dominates). The build's compiler launcher (ccache), when it has one,
  # is used too, so that a second run of the suite compiles nothing again.
  local launcher=()
  [ -n "${ZKR_CXX_LAUNCHER:-}" ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ZKR_CXX_LAUNCHER")
  cmake -S "$consumer_source" -B "$work" -DZKR_SOURCE_DIR="$source" -DZKR_BUILD_TOOLS=OFF \
        -DCMAKE_CXX_COMPILER="$CXX" "${launcher[@]}" -DCMAKE_BUILD_TYPE=None >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; fail "configuring the consumer with add_subdirectory($source)"; }
  # A subproject builds the library only: no tests, benchmarks, examples, install rules.
  local targets
  targets=$(cmake --build "$work" --target help)
  for unwanted in zkr_demo zkr_testenv zk_shared_start install package; do
    if grep -qw -- "$unwanted" <<<"$targets"; then fail "a subproject build defines '$unwanted'"; fi
  done
  cmake --build "$work" -j 2 >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; fail "building the consumer with add_subdirectory($source)"; }
  run_consumer "$work/consumer"
}

cmd_deb() {
  local build=$1 work=$2
  fresh_dir "$work"
  cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/package" >"$work/cpack.log" 2>&1 ||
    { cat "$work/cpack.log"; fail "cpack -G DEB"; }
  local deb
  deb=$(find "$work/package" -maxdepth 1 -name '*.deb' | head -n 1)
  [ -n "$deb" ] || fail "cpack made no .deb in $work/package"
  echo "package: $deb"
  dpkg-deb --info "$deb"

  local depends
  depends=$(dpkg-deb --field "$deb" Depends)
  for needed in libzookeeper-mt2 libfmt9 libstdc++6 libc6; do
    grep -qw -- "$needed" <<<"$depends" || fail "Depends lacks $needed: $depends"
  done
  # zklock parses its own options: nothing in the package needs Boost at run time.
  if grep -q -- libboost <<<"$depends"; then fail "Depends lists a Boost library nothing needs: $depends"; fi

  local contents
  contents=$(dpkg-deb --contents "$deb" | awk '{print $6}')
  for file in ./usr/bin/zklock ./usr/libexec/zkrecipes/zklock-tls ./usr/share/man/man1/zklock.1.gz ./usr/share/bash-completion/completions/zklock \
              ./usr/include/zkr/lock.hpp ./usr/include/zkr/session.hpp \
              ./usr/share/doc/zkrecipes/copyright ./usr/share/doc/zkrecipes/changelog.gz; do
    grep -qx -- "$file" <<<"$contents" || fail "the package lacks $file"
  done
  for pattern in '/libzkrecipes\.so\.[0-9.]*$' '/libzkrecipes\.a$' '/cmake/zkrecipes/zkrecipes-config\.cmake$' \
                 '/pkgconfig/zkrecipes\.pc$'; do
    grep -q -- "$pattern" <<<"$contents" || fail "the package has no file matching $pattern"
  done

  # Unpacked into a scratch root, never into the system.
  local root=$work/root
  dpkg-deb --extract "$deb" "$root"
  local libdirs
  libdirs=$(find "$root/usr" -name 'libzkrecipes.so*' -printf '%h\n' | sort -u | paste -sd:)
  local help
  help=$(LD_LIBRARY_PATH="$libdirs" "$root/usr/bin/zklock" --help) || fail "the packaged zklock --help failed"
  grep -q "LOCKPATH" <<<"$help" || fail "the packaged zklock --help does not show the usage: $help"
  echo "packaged zklock --help: $(head -n 1 <<<"$help")"
  local version package_version
  version=$(LD_LIBRARY_PATH="$libdirs" "$root/usr/bin/zklock" --version) || fail "the packaged zklock --version failed"
  package_version=$(dpkg-deb --field "$deb" Version)
  [ "$version" = "zklock (zkrecipes) $package_version" ] ||
    fail "zklock --version says '$version', the package is version $package_version"
  echo "packaged zklock --version: $version"
  check_tls_build_reached "$root/usr/bin/zklock"
  # The changelog shipped is this release's: its newest entry names the package's version.
  grep -m 1 '^## \[[0-9]' <(gzip -dc "$root/usr/share/doc/zkrecipes/changelog.gz") | grep -qF "[$package_version]" ||
    fail "the packaged changelog's newest release is not $package_version"
  grep -q '^License: Apache-2.0' "$root/usr/share/doc/zkrecipes/copyright" ||
    fail "the packaged copyright file does not name the Apache-2.0 licence"

  # Debian's package checker finds no error (warnings are printed, not failed on).
  if command -v lintian >/dev/null; then
    local report
    report=$(lintian --allow-root --tag-display-limit 0 "$deb" 2>&1) || true
    echo "lintian:"
    echo "${report:-  (nothing to report)}"
    if grep -q '^E: ' <<<"$report"; then fail "lintian reports errors on $deb"; fi
  else
    fail "lintian is not installed (scripts/install-deps installs it)"
  fi

  # The packaged CMake config is relocatable: build the consumer against the unpacked /usr.
  cmd_cmake_consumer "$root/usr" "$work/consumer" shared
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
  install) [ $# -eq 2 ] || fail "usage: install BUILD_DIR PREFIX"; cmd_install "$@" ;;
  cmake-consumer) [ $# -eq 3 ] || fail "usage: cmake-consumer PREFIX WORK_DIR shared|static"; cmd_cmake_consumer "$@" ;;
  pkgconfig-consumer) [ $# -eq 3 ] || fail "usage: pkgconfig-consumer PREFIX WORK_DIR shared|static"; cmd_pkgconfig_consumer "$@" ;;
  prometheus-consumer) [ $# -eq 2 ] || fail "usage: prometheus-consumer PREFIX WORK_DIR"; cmd_prometheus_consumer "$@" ;;
  version-compat) [ $# -eq 3 ] || fail "usage: version-compat PREFIX WORK_DIR VERSION"; cmd_version_compat "$@" ;;
  subdirectory) [ $# -eq 2 ] || fail "usage: subdirectory SOURCE_DIR WORK_DIR"; cmd_subdirectory "$@" ;;
  deb) [ $# -eq 2 ] || fail "usage: deb BUILD_DIR WORK_DIR"; cmd_deb "$@" ;;
  *) fail "unknown command '$command' (install, cmake-consumer, pkgconfig-consumer, prometheus-consumer, version-compat, subdirectory, deb)" ;;
esac
