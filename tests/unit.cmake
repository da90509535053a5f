# tests/unit.cmake -- unit tests of dlockd's pure modules (config, table,
# theap), included from tests/CMakeLists.txt. One Criterion executable per
# module, linked with the dlockd_pure library; no Redis or agent needed.

if(NOT TARGET PkgConfig::CRITERION)
  pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
endif()

foreach(m IN ITEMS config table theap)
  # The executable may already be defined by an including file's own loop
  # over these modules; then only the test registration is added here.
  if(NOT TARGET test_${m})
    add_executable(test_${m} ${CMAKE_CURRENT_LIST_DIR}/test_${m}.c)
    target_link_libraries(test_${m} PRIVATE dlockd_pure PkgConfig::CRITERION)
  endif()
  if(NOT TEST ${m})
    add_test(NAME unit_${m} COMMAND test_${m})
    set_tests_properties(unit_${m} PROPERTIES TIMEOUT 60 LABELS unit)
  endif()
endforeach()

# test_config also loads the packaged example file, packaging/dlockd.conf.
target_compile_definitions(test_config PRIVATE DLOCK_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
