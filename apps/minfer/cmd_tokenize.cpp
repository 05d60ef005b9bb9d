// TODO(owner): placeholder until the command lands.
#include <cstdio>

#include "commands.h"

namespace minfer::app {

int cmd_tokenize(int, char**) {
  std::fprintf(stderr, "minfer tokenize: not implemented yet\n");
  return 2;
}

}  // namespace minfer::app
