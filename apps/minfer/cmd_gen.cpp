// TODO(owner): placeholder until the command lands.
#include <cstdio>

#include "commands.h"

namespace minfer::app {

int cmd_gen(int, char**) {
  std::fprintf(stderr, "minfer gen: not implemented yet\n");
  return 2;
}

}  // namespace minfer::app
