# SPDX-License-Identifier: BSD-3-Clause
# deb-stage.cmake -- run by CPack (CPACK_PRE_BUILD_SCRIPTS) once every
# component is staged and before the Debian packages are made: adds to each
# staged tree what Debian wants of a binary package and `cmake --install` has
# no business installing, and finds the dependencies of libdlock0.
#
#  - /usr/share/doc/PKG/copyright, machine-readable, from LICENSE;
#  - /usr/share/doc/PKG/changelog.gz (a native package's changelog);
#  - the documents of libdlock-dev moved into /usr/share/doc/libdlock-dev,
#    those over 4 KiB compressed, as Debian policy asks;
#  - man pages compressed with gzip -9n;
#  - static libraries without debug information, as Debian strips them
#    (CPACK_STRIP_FILES strips only executables and shared libraries);
#  - packaging/debian/PKG.lintian-overrides as /usr/share/lintian/overrides/PKG;
#  - directories 0755 whatever the umask.

if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
find_program(DLOCK_GZIP gzip REQUIRED)
find_program(DLOCK_SHLIBDEPS dpkg-shlibdeps REQUIRED)

# Runs a command, and stops CPack if it fails.
function(dlock_run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

# gzip -9n: the best compression, and no name or time stamp in the output, so
# that the same input always gives the same bytes.
function(dlock_gzip file)
  dlock_run(${DLOCK_GZIP} -9nf "${file}")
endfunction()

# Writes FILE with CONTENT, mode 0644.
function(dlock_write file content)
  file(WRITE "${file}" "${content}")
  file(CHMOD "${file}" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endfunction()

# The copyright file: the holders and the license text of LICENSE, whose first
# paragraph is "Copyright (c) YEARS, HOLDERS".
function(dlock_copyright out)
  file(READ "${CPACK_DLOCK_SOURCE_DIR}/LICENSE" text)
  if(NOT text MATCHES "^Copyright \\(c\\) ([0-9, -]+), ([^\n]+)\n\n(.*[^\n])\n*$")
    message(FATAL_ERROR "LICENSE does not start with a line 'Copyright (c) YEARS, HOLDERS'")
  endif()
  set(years "${CMAKE_MATCH_1}")
  set(holders "${CMAKE_MATCH_2}")
  # The license text as a field: every line indented, blank lines as " .".
  string(REPLACE "\n\n" "\n.\n" body "${CMAKE_MATCH_3}")
  string(REPLACE "\n" "\n " body "${body}")
  set(${out}
      "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dlock

Files: *
Copyright: ${years} ${holders}
License: BSD-3-Clause
 ${body}
" PARENT_SCOPE)
endfunction()

# The changelog of a native package: one entry, for this version.
function(dlock_changelog out)
  string(TIMESTAMP date "%a, %d %b %Y %H:%M:%S +0000" UTC)
  set(${out} "dlock (${CPACK_PACKAGE_VERSION}) unstable; urgency=medium

  * Release ${CPACK_PACKAGE_VERSION}, packaged with CPack.

 -- ${CPACK_PACKAGE_CONTACT}  ${date}
" PARENT_SCOPE)
endfunction()

# The documents cmake --install puts in share/doc/dlock go to the package's
# own directory, without LICENSE (the copyright file has it).
function(dlock_move_docs root doc)
  set(upstream "${root}/usr/share/doc/dlock")
  if(NOT IS_DIRECTORY "${upstream}")
    return()
  endif()
  file(REMOVE "${upstream}/LICENSE")
  file(GLOB docs LIST_DIRECTORIES false "${upstream}/*")
  foreach(f IN LISTS docs)
    get_filename_component(name "${f}" NAME)
    file(RENAME "${f}" "${doc}/${name}")
    file(SIZE "${doc}/${name}" size)
    if(size GREATER 4096)
      dlock_gzip("${doc}/${name}")
    endif()
  endforeach()
  file(REMOVE_RECURSE "${upstream}")
endfunction()

# What dpkg-shlibdeps says the shared library needs: the Depends of libdlock0.
function(dlock_lib_depends root out)
  file(GLOB_RECURSE libs LIST_DIRECTORIES false "${root}/usr/lib/*/libdlock.so.*.*.*")
  if(NOT libs)
    message(FATAL_ERROR "no libdlock.so.MAJOR.MINOR.PATCH staged under ${root}/usr/lib")
  endif()
  # dpkg-shlibdeps wants a debian/control where it runs.
  set(scratch "${CPACK_TOPLEVEL_DIRECTORY}/dlock-shlibdeps")
  file(WRITE "${scratch}/debian/control" "")
  execute_process(COMMAND ${DLOCK_SHLIBDEPS} -O ${libs} WORKING_DIRECTORY "${scratch}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  file(REMOVE_RECURSE "${scratch}")
  if(NOT rc EQUAL 0 OR NOT deps MATCHES "^shlibs:Depends=(.+)$")
    message(FATAL_ERROR "dpkg-shlibdeps ${libs} failed: ${err}")
  endif()
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# Static libraries: debug information and comments dropped, as dh_strip does.
function(dlock_strip_archives root)
  file(GLOB_RECURSE archives LIST_DIRECTORIES false "${root}/usr/lib/*.a")
  foreach(archive IN LISTS archives)
    dlock_run(${CPACK_DLOCK_STRIP} --strip-debug --enable-deterministic-archives
              --remove-section=.comment --remove-section=.note "${archive}")
  endforeach()
endfunction()

function(dlock_gzip_man_pages root)
  file(GLOB_RECURSE pages LIST_DIRECTORIES false "${root}/usr/share/man/*")
  list(FILTER pages EXCLUDE REGEX "\\.gz$")
  foreach(page IN LISTS pages)
    dlock_gzip("${page}")
  endforeach()
endfunction()

# packaging/debian/PKG.lintian-overrides, if there is one.
function(dlock_lintian_overrides root pkg)
  set(overrides "${CPACK_DLOCK_DEBIAN_DIR}/${pkg}.lintian-overrides")
  if(EXISTS "${overrides}")
    file(READ "${overrides}" text)
    file(MAKE_DIRECTORY "${root}/usr/share/lintian/overrides")
    dlock_write("${root}/usr/share/lintian/overrides/${pkg}" "${text}")
  endif()
endfunction()

# Directories 0755, as CMake makes them with the umask's mode.
function(dlock_fix_directories root)
  file(GLOB_RECURSE dirs LIST_DIRECTORIES true "${root}/*")
  foreach(d IN LISTS dirs)
    if(IS_DIRECTORY "${d}" AND NOT IS_SYMLINK "${d}")
      file(CHMOD "${d}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                 GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    endif()
  endforeach()
endfunction()

dlock_copyright(copyright)
dlock_changelog(changelog)
foreach(component IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER "${component}" upper)
  set(pkg "${CPACK_DEBIAN_${upper}_PACKAGE_NAME}")
  set(root "${CPACK_TEMPORARY_DIRECTORY}/${component}")
  set(doc "${root}/usr/share/doc/${pkg}")
  if(NOT pkg OR NOT IS_DIRECTORY "${root}")
    message(FATAL_ERROR "component ${component}: no package name, or nothing staged at ${root}")
  endif()
  file(MAKE_DIRECTORY "${doc}")
  dlock_write("${doc}/copyright" "${copyright}")
  dlock_write("${doc}/changelog" "${changelog}")
  dlock_gzip("${doc}/changelog")
  dlock_move_docs("${root}" "${doc}")
  dlock_strip_archives("${root}")
  dlock_gzip_man_pages("${root}")
  dlock_lintian_overrides("${root}" "${pkg}")
  dlock_fix_directories("${root}")
endforeach()
dlock_lib_depends("${CPACK_TEMPORARY_DIRECTORY}/lib" CPACK_DEBIAN_LIB_PACKAGE_DEPENDS)
