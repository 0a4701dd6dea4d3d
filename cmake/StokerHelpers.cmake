# Optional dependencies of stoker_lib. Each module that needs a library adds it here,
# guarded so the core builds without it (the module's sources check STOKER_HAVE_*).
function(stoker_optional_deps target)
  # --- LMDB (Debian liblmdb-dev): formats/lmdb_dataset.cc
  find_path(STOKER_LMDB_INCLUDE lmdb.h)
  find_library(STOKER_LMDB_LIB lmdb)
  if(STOKER_LMDB_INCLUDE AND STOKER_LMDB_LIB)
    target_include_directories(${target} SYSTEM PUBLIC ${STOKER_LMDB_INCLUDE})
    target_link_libraries(${target} PUBLIC ${STOKER_LMDB_LIB})
    target_compile_definitions(${target} PUBLIC STOKER_HAVE_LMDB=1)
    message(STATUS "stoker: LMDB format enabled (${STOKER_LMDB_LIB})")
  else()
    message(STATUS "stoker: liblmdb not found, format 'lmdb' unavailable")
  endif()

  # --- HDF5 C library (Debian libhdf5-dev 1.10, serial): formats/hdf5_dataset.cc
  find_package(HDF5 QUIET COMPONENTS C)
  if(HDF5_FOUND)
    target_include_directories(${target} SYSTEM PUBLIC ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
    target_link_libraries(${target} PUBLIC ${HDF5_C_LIBRARIES})
    target_compile_definitions(${target} PUBLIC STOKER_HAVE_HDF5=1 ${HDF5_C_DEFINITIONS})
    message(STATUS "stoker: HDF5 format enabled (${HDF5_VERSION})")
  else()
    message(STATUS "stoker: libhdf5 not found, format 'hdf5' unavailable")
  endif()

  # --- Apache Arrow / Parquet C++: Debian bookworm has no libarrow-dev, so we use the
  # headers and shared libraries inside the pyarrow wheel of the venv's python
  # (pyarrow/include, pyarrow/libarrow.so.N, pyarrow/libparquet.so.N). The package is
  # located without importing it (importing needs a matching NumPy). Set
  # -DSTOKER_PYTHON=/path/to/python to choose the interpreter, -DSTOKER_PARQUET=OFF to skip.
  option(STOKER_PARQUET "Parquet format from the pyarrow wheel's C++ libraries" ON)
  option(STOKER_REQUIRE_PARQUET "fail the configure when pyarrow's C++ libraries are missing" OFF)
  if(NOT DEFINED STOKER_PYTHON AND SKBUILD AND Python_EXECUTABLE)
    # pip install / pip wheel: the build environment's interpreter (its pyarrow is the one
    # pyproject.toml's build-system.requires installed), not the source tree's .venv.
    set(STOKER_PYTHON ${Python_EXECUTABLE})
  endif()
  if(NOT DEFINED STOKER_PYTHON)
    if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
      set(STOKER_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    else()
      find_program(STOKER_PYTHON python3)
    endif()
  endif()
  set(_pa_dir "")
  if(STOKER_PARQUET AND STOKER_PYTHON)
    execute_process(
      COMMAND ${STOKER_PYTHON} -c
        "import importlib.util,os;s=importlib.util.find_spec('pyarrow');print(os.path.dirname(s.origin) if s else '')"
      OUTPUT_VARIABLE _pa_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  set(_pa_ok FALSE)
  if(_pa_dir AND EXISTS ${_pa_dir}/include/parquet/api/reader.h)
    file(GLOB _pa_arrow ${_pa_dir}/libarrow.so.[0-9]*)
    file(GLOB _pa_parquet ${_pa_dir}/libparquet.so.[0-9]*)
    list(FILTER _pa_arrow EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
    list(FILTER _pa_parquet EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
    if(_pa_arrow AND _pa_parquet)
      list(GET _pa_arrow 0 _pa_arrow)
      list(GET _pa_parquet 0 _pa_parquet)
      set(_pa_ok TRUE)
    endif()
  endif()
  if(_pa_ok AND STOKER_PYARROW_SOVERSION)
    # pip builds (pyproject.toml): the wheel declares the pyarrow release it needs at run
    # time; a build against another one (its libraries' soname differs) would not load there.
    get_filename_component(_pa_so ${_pa_arrow} NAME)
    if(NOT _pa_so STREQUAL "libarrow.so.${STOKER_PYARROW_SOVERSION}")
      message(FATAL_ERROR "stoker: pyarrow in ${_pa_dir} has ${_pa_so}, but the package "
                          "declares the pyarrow release with libarrow.so.${STOKER_PYARROW_SOVERSION} "
                          "(pyproject.toml): build with that pyarrow")
    endif()
  endif()
  if(_pa_ok AND SKBUILD)
    # pip's isolated build environment is a new temporary directory each time (and
    # scikit-build-core then clears the kept build directory's CMake cache, so every file
    # compiles again). Headers and libraries used from there would make every compile
    # command differ, and ccache could not hit. Stage them in the build directory, copied
    # only when their contents differ: the commands stay the same from build to build.
    set(_pa_stage ${CMAKE_BINARY_DIR}/pyarrow-stage)
    file(GLOB_RECURSE _pa_headers RELATIVE ${_pa_dir}/include ${_pa_dir}/include/*)
    foreach(_h IN LISTS _pa_headers)
      get_filename_component(_hd ${_pa_stage}/include/${_h} DIRECTORY)
      file(MAKE_DIRECTORY ${_hd})
      file(COPY_FILE ${_pa_dir}/include/${_h} ${_pa_stage}/include/${_h} ONLY_IF_DIFFERENT)
    endforeach()
    foreach(_l IN ITEMS _pa_arrow _pa_parquet)
      get_filename_component(_ln ${${_l}} NAME)
      file(COPY_FILE ${${_l}} ${_pa_stage}/${_ln} ONLY_IF_DIFFERENT)
      set(${_l} ${_pa_stage}/${_ln})
    endforeach()
    set(_pa_include ${_pa_stage}/include)
  else()
    set(_pa_include ${_pa_dir}/include)
  endif()
  if(_pa_ok)
    target_include_directories(${target} SYSTEM PUBLIC ${_pa_include})
    target_link_libraries(${target} PUBLIC ${_pa_parquet} ${_pa_arrow})
    target_compile_definitions(${target} PUBLIC STOKER_HAVE_PARQUET=1)
    set_property(GLOBAL PROPERTY STOKER_PYARROW_DIR ${_pa_dir})
    message(STATUS "stoker: Parquet format enabled (pyarrow C++ libraries in ${_pa_dir})")
    # Object storage (io/object_env.cc): Arrow's S3FileSystem / GcsFileSystem inside the
    # same libarrow, when the wheel was built with them. -DSTOKER_S3=OFF to skip.
    option(STOKER_S3 "s3:// and gs:// paths through the pyarrow wheel's Arrow S3/GCS" ON)
    if(STOKER_S3 AND EXISTS ${_pa_dir}/include/arrow/filesystem/s3fs.h)
      file(STRINGS ${_pa_dir}/include/arrow/util/config.h _pa_s3 REGEX "^#define ARROW_(S3|GCS)$")
      if(_pa_s3 MATCHES "ARROW_S3")
        target_compile_definitions(${target} PUBLIC STOKER_HAVE_ARROW_S3=1)
        if(_pa_s3 MATCHES "ARROW_GCS")
          target_compile_definitions(${target} PUBLIC STOKER_HAVE_ARROW_GCS=1)
        endif()
        message(STATUS "stoker: object storage enabled (Arrow ${_pa_s3})")
      endif()
    endif()
  elseif(STOKER_PARQUET AND STOKER_REQUIRE_PARQUET)
    message(FATAL_ERROR "stoker: pyarrow's C++ libraries not found via '${STOKER_PYTHON}' "
                        "(STOKER_REQUIRE_PARQUET is ON, as in pip builds): install pyarrow "
                        "(pip install 'pyarrow>=20,<21', pyproject.toml's) into the build environment, or build "
                        "without Parquet with -DSTOKER_PARQUET=OFF")
  else()
    message(STATUS "stoker: pyarrow C++ libraries not found via '${STOKER_PYTHON}', "
                   "format 'parquet' unavailable (pip install pyarrow into .venv and reconfigure)")
  endif()

  # --- simdjson (Debian libsimdjson-dev): the Delta Lake log's JSON commits
  #     (formats/delta_log.cc); without it the format 'delta' is unavailable.
  find_package(simdjson QUIET)
  if(simdjson_FOUND)
    target_link_libraries(${target} PUBLIC simdjson::simdjson)
    target_compile_definitions(${target} PUBLIC STOKER_HAVE_SIMDJSON=1)
    message(STATUS "stoker: simdjson ${simdjson_VERSION} found (Delta Lake logs)")
  else()
    message(STATUS "stoker: simdjson not found, format 'delta' unavailable")
  endif()

  # --- librdkafka (Debian librdkafka-dev): formats/kafka_dataset.cc, the kafka:// source
  pkg_check_modules(STOKER_RDKAFKA QUIET IMPORTED_TARGET rdkafka)
  if(STOKER_RDKAFKA_FOUND)
    target_link_libraries(${target} PUBLIC PkgConfig::STOKER_RDKAFKA)
    target_compile_definitions(${target} PUBLIC STOKER_HAVE_RDKAFKA=1)
    message(STATUS "stoker: Kafka source enabled (librdkafka ${STOKER_RDKAFKA_VERSION})")
  else()
    message(STATUS "stoker: librdkafka not found, format 'kafka' unavailable")
  endif()
endfunction()
