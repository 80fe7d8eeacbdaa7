# Compiler warnings shared by every target (STYLE 3.8).
set(CMA_WARNING_FLAGS
    -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wformat=2 -Wvla -Wno-unused-parameter)
if(CMA_WERROR)
  list(APPEND CMA_WARNING_FLAGS -Werror)
endif()
