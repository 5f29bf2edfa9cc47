/* An LD_AUDIT module that hides the system's shared libraries from a program, as a machine
 * without our Debian libraries would (tools/gpu_kit/kit_libs.py check; the GPU kit's selfcheck).
 *
 * Every place the dynamic loader considers for a library (la_objsearch: a RUNPATH/RPATH
 * directory, LD_LIBRARY_PATH, ld.so.cache, the default directories, or a path given to dlopen)
 * is refused unless it lies under one of the directories in FTUNE_HIDE_ALLOW (colon-separated:
 * the kit and the directories of the device-provided CUDA libraries), or the library is glibc's
 * own (libc, libm, the loader...), which every Linux machine has, or one of the sonames in
 * FTUNE_HIDE_SYSTEM_OK (colon-separated: what the device's own CUDA libraries take from its system,
 * such as cuDNN's libz). A refused candidate is as if the file were not there: the loader searches
 * on, and reports "not found" at the end.
 *
 * Only programs under FTUNE_HIDE_UNDER (the kit) and the dynamic loader itself (ldd runs it) are
 * affected, so a Python or shell started by a kit program keeps its libraries. FTUNE_HIDE_LOG, if
 * set, collects one line per refused candidate.
 *   cc -shared -fPIC -O2 -o hide_system_libs.so hide_system_libs.c
 *   LD_AUDIT=hide_system_libs.so FTUNE_HIDE_ALLOW=/kit:/usr/local/cuda/lib64 ldd /kit/bin/ftune */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_active = -1;  /* decided at the first search */

static const char *const kGlibc[] = {
    "ld-linux-x86-64.so.2", "libc.so.6",   "libm.so.6",    "libpthread.so.0", "libdl.so.2",
    "librt.so.1",           "libresolv.so.2", "libutil.so.1", "libanl.so.1",  "libmvec.so.1",
    NULL};

/* Is `path` equal to or below one of the colon-separated directories of `dirs`? */
static int under(const char *path, const char *dirs) {
  if (!dirs) return 0;
  const char *p = dirs;
  while (*p) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    while (n > 1 && p[n - 1] == '/') --n;
    if (n > 0 && strncmp(path, p, n) == 0 && (path[n] == '/' || path[n] == '\0')) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

static int active(void) {
  if (g_active >= 0) return g_active;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  const char *base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  g_active = under(exe, getenv("FTUNE_HIDE_UNDER")) || strncmp(base, "ld-linux", 8) == 0 ||
             strncmp(base, "ld-2.", 5) == 0;
  return g_active;
}

/* Is the file name of `path` glibc's, or one of the colon-separated names of `names`? */
static int system_ok(const char *path, const char *names) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (int i = 0; kGlibc[i]; ++i)
    if (strcmp(base, kGlibc[i]) == 0) return 1;
  size_t n = strlen(base);
  for (const char *p = names; p && *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, base, n) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

unsigned int la_version(unsigned int version) { return version < LAV_CURRENT ? version : LAV_CURRENT; }

char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag) {
  (void)cookie;
  /* The original name: a bare soname is searched for next; a path is opened as it is. */
  if (flag == LA_SER_ORIG && !strchr(name, '/')) return (char *)name;
  /* A path that names no file: the loader's own error names it, as it would on any machine. */
  if (flag == LA_SER_ORIG && access(name, F_OK) != 0) return (char *)name;
  if (!active() || system_ok(name, getenv("FTUNE_HIDE_SYSTEM_OK")) ||
      under(name, getenv("FTUNE_HIDE_ALLOW")))
    return (char *)name;
  const char *log = getenv("FTUNE_HIDE_LOG");
  if (log && *log) {
    FILE *f = fopen(log, "a");
    if (f) {
      fprintf(f, "hidden: %s\n", name);
      fclose(f);
    }
  }
  return NULL;
}
