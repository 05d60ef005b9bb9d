# minfer_source_target(SRC KIND NAME_VAR LIBS_VAR)
#
# The convention shared by tests/ and bench/: every <name>_<KIND>.cpp becomes one executable,
# and its FIRST line may name the libraries it links:
#   // minfer-<KIND>-libs: minfer_gguf minfer_graph
# Sets NAME_VAR to <name> (the file name without the _<KIND> suffix) and LIBS_VAR to those
# libraries (default: minfer_common). The callers add the executable and its own extras.
function(minfer_source_target src kind name_var libs_var)
  get_filename_component(base "${src}" NAME_WE)
  string(REGEX REPLACE "_${kind}$" "" name "${base}")
  file(STRINGS "${src}" libs_line REGEX "^// minfer-${kind}-libs:" LIMIT_COUNT 1)
  set(libs minfer_common)
  if(libs_line)
    string(REGEX REPLACE "^// minfer-${kind}-libs:[ ]*" "" libs_str "${libs_line}")
    separate_arguments(libs UNIX_COMMAND "${libs_str}")
  endif()
  set(${name_var} "${name}" PARENT_SCOPE)
  set(${libs_var} "${libs}" PARENT_SCOPE)
endfunction()
