// posix_spawn's GNU file actions, which the Glibc module leaves out (spawn.h declares them under _GNU_SOURCE, and
// defining that here would change other system types this module shares with Glibc): close every descriptor from a
// number on, and change directory, in the child (glibc >= 2.34 and 2.29).
#include <spawn.h>

extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);
