# Which MPI is this? Shared by MDLoader's own build (to record the MPI it was built
# against) and by the installed MDLoaderConfig.cmake (to check that a consumer found the
# same one). A program must never load two MPI libraries: an MPICH program linked with
# a libmdloader.so built for Open MPI loads both and aborts at run time.
#
# Only reads what find_package(MPI) left behind: no compiler or program is run.

# _mdloader_mpi_identify(<lang> <vendor-var> <version-var> <library-var>)
#
#   vendor   "Open MPI", "MPICH", "Intel MPI", "MVAPICH2", "Cray MPICH", or "" if unknown
#   version  e.g. "4.1.4" (may be "")
#   library  real path of the core MPI library (libmpi.so / libmpich.so), or ""
function(_mdloader_mpi_identify lang vendor_var version_var library_var)
  set(vendor "")
  set(version "")
  set(library "")

  # 1. The header says it best.
  set(header "")
  foreach(dir IN LISTS MPI_${lang}_HEADER_DIR MPI_${lang}_INCLUDE_DIRS MPI_${lang}_INCLUDE_PATH)
    if(EXISTS "${dir}/mpi.h")
      set(header "${dir}/mpi.h")
      break()
    endif()
  endforeach()
  if(header)
    file(STRINGS "${header}" defs
         REGEX "^#[ \t]*define[ \t]+(OMPI_(MAJOR|MINOR|RELEASE)_VERSION|MPICH_VERSION|I_MPI_VERSION|MVAPICH2?_VERSION|CRAY_MPICH_VERSION)[ \t]")
    set(ompi "")
    foreach(def IN LISTS defs)
      if(def MATCHES "define[ \t]+OMPI_(MAJOR|MINOR|RELEASE)_VERSION[ \t]+([0-9]+)")
        list(APPEND ompi "${CMAKE_MATCH_2}")
      elseif(def MATCHES "define[ \t]+(MPICH_VERSION|I_MPI_VERSION|MVAPICH2?_VERSION|CRAY_MPICH_VERSION)[ \t]+\"?([^\" \t]*)")
        set(_mdl_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
      endif()
    endforeach()
    # Most specific first: the MPICH derivatives also define MPICH_VERSION.
    if(ompi)
      set(vendor "Open MPI")
      list(JOIN ompi "." version)
    elseif(DEFINED _mdl_I_MPI_VERSION)
      set(vendor "Intel MPI")
      set(version "${_mdl_I_MPI_VERSION}")
    elseif(DEFINED _mdl_MVAPICH2_VERSION)
      set(vendor "MVAPICH2")
      set(version "${_mdl_MVAPICH2_VERSION}")
    elseif(DEFINED _mdl_MVAPICH_VERSION)
      set(vendor "MVAPICH")
      set(version "${_mdl_MVAPICH_VERSION}")
    elseif(DEFINED _mdl_CRAY_MPICH_VERSION)
      set(vendor "Cray MPICH")
      set(version "${_mdl_CRAY_MPICH_VERSION}")
    elseif(DEFINED _mdl_MPICH_VERSION)
      set(vendor "MPICH")
      set(version "${_mdl_MPICH_VERSION}")
    endif()
  endif()

  # 2. The libraries: the core one identifies the installation, the others the family.
  set(family "")
  foreach(lib IN LISTS MPI_${lang}_LIBRARIES)
    get_filename_component(name "${lib}" NAME)
    if(NOT library AND name MATCHES "^lib(mpi|mpich)\\.(so|a|dylib)")
      get_filename_component(library "${lib}" REALPATH)
    endif()
    if(name MATCHES "^libmpich")
      set(family "MPICH")
    elseif(name MATCHES "^lib(open-pal|open-rte|mpi_mpifh|mpi_usempi)" OR lib MATCHES "/openmpi/")
      set(family "Open MPI")
    endif()
  endforeach()
  if(NOT vendor AND family)
    set(vendor "${family}")
  endif()

  # 3. MPI_Get_library_version, if the project asked FindMPI for it.
  if(NOT vendor AND MPI_${lang}_LIBRARY_VERSION_STRING MATCHES "^(Open MPI|MPICH|Intel\\(R\\) MPI)")
    set(vendor "${CMAKE_MATCH_1}")
  endif()

  set(${vendor_var} "${vendor}" PARENT_SCOPE)
  set(${version_var} "${version}" PARENT_SCOPE)
  set(${library_var} "${library}" PARENT_SCOPE)
endfunction()

# _mdloader_mpi_describe(<out> <vendor> <version> <library>): "Open MPI 4.1.4 (/usr/...)"
function(_mdloader_mpi_describe out vendor version library)
  if(vendor)
    set(text "${vendor}")
  else()
    set(text "an unidentified MPI")
  endif()
  if(version)
    string(APPEND text " ${version}")
  endif()
  if(library)
    string(APPEND text " (${library})")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
