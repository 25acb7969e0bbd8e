# Libraries of the server-side subsystems (DESIGN.md §3), linked to the subsystem
# library that uses them. Included from the root CMakeLists.txt after the
# inferd_<subsystem> libraries are created from src/<subsystem>/*.c.
pkg_check_modules(LIBJPEG REQUIRED IMPORTED_TARGET libjpeg)
pkg_check_modules(SPNG REQUIRED IMPORTED_TARGET spng)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(LIBXML2 REQUIRED IMPORTED_TARGET libxml-2.0)
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(H2O REQUIRED IMPORTED_TARGET libh2o-evloop)
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl>=7.85) # CURLOPT_PROTOCOLS_STR
pkg_check_modules(YAML REQUIRED IMPORTED_TARGET yaml-0.1)
pkg_check_modules(LIBSSL REQUIRED IMPORTED_TARGET libssl)
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)

set(_inferd_deps_handler PkgConfig::LIBJPEG PkgConfig::SPNG PkgConfig::JANSSON)
set(_inferd_deps_topo PkgConfig::HWLOC PkgConfig::LIBXML2)
set(_inferd_deps_archive PkgConfig::LIBZIP PkgConfig::ZLIB PkgConfig::JANSSON)
set(_inferd_deps_config PkgConfig::JANSSON PkgConfig::YAML)
set(_inferd_deps_http PkgConfig::H2O PkgConfig::JANSSON PkgConfig::LIBSSL PkgConfig::LIBCRYPTO PkgConfig::CURL)
set(_inferd_deps_sched)
set(_inferd_deps_metrics)
set(_inferd_deps_bench PkgConfig::CURL PkgConfig::JANSSON)
foreach(sub topo sched handler http metrics config archive bench)
  if(TARGET inferd_${sub} AND _inferd_deps_${sub})
    target_link_libraries(inferd_${sub} PUBLIC ${_inferd_deps_${sub}})
  endif()
endforeach()

# Subsystems built on other subsystems (DESIGN.md §2: cli -> http -> sched -> engine;
# http also uses handler, topo, metrics, config and archive). Static libraries must
# name what they use, or the link order of INFERD_SERVER_LIBS decides.
if(TARGET inferd_http)
  foreach(dep sched handler topo metrics config archive)
    if(TARGET inferd_${dep})
      target_link_libraries(inferd_http PUBLIC inferd_${dep})
    endif()
  endforeach()
endif()
# bench's local-mode job classifies with the handler's code.
if(TARGET inferd_bench AND TARGET inferd_handler)
  target_link_libraries(inferd_bench PUBLIC inferd_handler)
endif()
