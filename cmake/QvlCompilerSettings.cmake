# Warnings and sanitizers shared by every target. Release code never targets the build machine's own CPU: the users' laptops have
# AVX2/FMA/F16C at most, so wider kernels are chosen at run time (engine/backend/cpu), not at compile time.
add_library(qvl_warnings INTERFACE)
target_compile_options(qvl_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  # GCC 12 reports impossible std::string memcpy overlaps at -O3 (GCC bug 105329); GCC 13 does not.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)

set(QVL_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
if(QVL_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${QVL_SANITIZE}> $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${QVL_SANITIZE})
endif()

find_program(QVL_CCACHE ccache)
if(QVL_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER "${QVL_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${QVL_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${QVL_CCACHE}")
endif()
