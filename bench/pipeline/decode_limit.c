/* decode_limit: the decode-only ceiling of an image pipeline on this machine.
 *
 * Reads every .jpg under DIR (recursively) into memory once, then T threads decode them
 * with TurboJPEG to full-size RGB (default flags: accurate IDCT, fancy upsampling), thread t
 * taking files t, t+T, t+2T, ... and looping over the set until SECONDS have passed (after
 * one untimed warm-up pass). Prints images/s and, with --json, writes
 *   {"name":"decode_limit","threads":T,"scale":"1/1","images":N,"seconds":S,"images_per_s":R}
 * --scale 2 decodes at 1/2 DCT scale (what a crop-aware decoder may do for small crops).
 *
 * Used by bench/pipeline/run.sh when `stoker bench decode` is not available.
 * Build: cc -O2 -pthread decode_limit.c -o decode_limit -lturbojpeg
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

typedef struct { unsigned char* data; unsigned long size; char* path; } File;

static File* g_files = NULL;
static size_t g_nfiles = 0, g_cap = 0;
static int g_threads = 1, g_scale_denom = 1;
static double g_seconds = 5.0;

static double cpu_s(void) {  /* CPU time of the whole process, all threads */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ends_with_jpg(const char* name) {
  size_t n = strlen(name);
  return (n > 4 && strcasecmp(name + n - 4, ".jpg") == 0) ||
         (n > 5 && strcasecmp(name + n - 5, ".jpeg") == 0);
}

static int load_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "decode_limit: cannot open %s\n", path); return -1; }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size <= 0) { fclose(f); fprintf(stderr, "decode_limit: empty %s\n", path); return -1; }
  unsigned char* buf = malloc((size_t)size);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fclose(f); free(buf); fprintf(stderr, "decode_limit: short read %s\n", path); return -1;
  }
  fclose(f);
  if (g_nfiles == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 1024;
    g_files = realloc(g_files, g_cap * sizeof(File));
  }
  g_files[g_nfiles].data = buf;
  g_files[g_nfiles].size = (unsigned long)size;
  g_files[g_nfiles].path = strdup(path);
  g_nfiles++;
  return 0;
}

static int walk(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) { fprintf(stderr, "decode_limit: cannot list %s\n", dir); return -1; }
  struct dirent* e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) rc = walk(path);
    else if (S_ISREG(st.st_mode) && ends_with_jpg(e->d_name)) rc = load_file(path);
  }
  closedir(d);
  return rc;
}

typedef struct {
  int id;
  uint64_t images;     /* decoded in the timed window */
  double start, end;   /* timed window */
  int error;
} Worker;

static pthread_barrier_t g_barrier;

static int decode_one(tjhandle tj, const File* f, unsigned char** out, size_t* cap) {
  int w, h, ss, cs;
  if (tjDecompressHeader3(tj, f->data, f->size, &w, &h, &ss, &cs) != 0) {
    fprintf(stderr, "decode_limit: %s: %s\n", f->path, tjGetErrorStr2(tj));
    return -1;
  }
  int sw = (w + g_scale_denom - 1) / g_scale_denom, sh = (h + g_scale_denom - 1) / g_scale_denom;
  size_t need = (size_t)sw * sh * 3;
  if (need > *cap) { free(*out); *out = malloc(need); *cap = need; }
  if (tjDecompress2(tj, f->data, f->size, *out, sw, 0, sh, TJPF_RGB, 0) != 0) {
    fprintf(stderr, "decode_limit: %s: %s\n", f->path, tjGetErrorStr2(tj));
    return -1;
  }
  return 0;
}

static void* run_worker(void* arg) {
  Worker* wk = arg;
  tjhandle tj = tjInitDecompress();
  unsigned char* out = NULL;
  size_t cap = 0;
  /* Warm-up: one untimed pass over this thread's share. */
  for (size_t i = wk->id; i < g_nfiles && !wk->error; i += g_threads)
    if (decode_one(tj, &g_files[i], &out, &cap) != 0) wk->error = 1;
  pthread_barrier_wait(&g_barrier);
  wk->start = now_s();
  double deadline = wk->start + g_seconds;
  size_t i = wk->id;
  while (!wk->error) {
    if (decode_one(tj, &g_files[i], &out, &cap) != 0) { wk->error = 1; break; }
    wk->images++;
    i += g_threads;
    if (i >= g_nfiles) i = wk->id;
    if ((wk->images & 7) == 0 && now_s() >= deadline) break;
  }
  wk->end = now_s();
  free(out);
  tjDestroy(tj);
  return NULL;
}

int main(int argc, char** argv) {
  const char* dir = NULL;
  const char* json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--data") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) g_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) g_seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--scale") && i + 1 < argc) g_scale_denom = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: decode_limit --data DIR [--threads N] [--seconds S] "
                      "[--scale 1|2|4|8] [--json FILE]\n");
      return 2;
    }
  }
  if (!dir || g_threads < 1 || g_seconds <= 0 ||
      (g_scale_denom != 1 && g_scale_denom != 2 && g_scale_denom != 4 && g_scale_denom != 8)) {
    fprintf(stderr, "decode_limit: need --data DIR, --threads >= 1, --seconds > 0, "
                    "--scale in 1,2,4,8\n");
    return 2;
  }
  if (walk(dir) != 0) return 2;
  if (g_nfiles == 0) { fprintf(stderr, "decode_limit: no .jpg under %s\n", dir); return 2; }
  if ((size_t)g_threads > g_nfiles) g_threads = (int)g_nfiles;

  Worker* wk = calloc((size_t)g_threads, sizeof(Worker));
  pthread_t* th = calloc((size_t)g_threads, sizeof(pthread_t));
  pthread_barrier_init(&g_barrier, NULL, (unsigned)g_threads + 1);
  for (int t = 0; t < g_threads; t++) {
    wk[t].id = t;
    pthread_create(&th[t], NULL, run_worker, &wk[t]);
  }
  pthread_barrier_wait(&g_barrier);  /* every worker finished its warm-up pass */
  double cpu0 = cpu_s();
  uint64_t images = 0;
  double start = 1e300, end = 0;
  int error = 0;
  for (int t = 0; t < g_threads; t++) {
    pthread_join(th[t], NULL);
    images += wk[t].images;
    if (wk[t].start < start) start = wk[t].start;
    if (wk[t].end > end) end = wk[t].end;
    error |= wk[t].error;
  }
  double cpu = cpu_s() - cpu0;
  if (error) return 1;
  double secs = end - start;
  double rate = secs > 0 ? images / secs : 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < g_nfiles; i++) bytes += g_files[i].size;
  printf("decode_limit: %d threads, scale 1/%d: %.1f images/s (%llu images in %.2f s, "
         "%.2f CPU-ms/image; %zu files, %.1f KiB mean)\n", g_threads, g_scale_denom, rate,
         (unsigned long long)images, secs, images ? 1000.0 * cpu / images : 0.0, g_nfiles, bytes / 1024.0 / g_nfiles);
  if (json) {
    FILE* f = fopen(json, "w");
    if (!f) { fprintf(stderr, "decode_limit: cannot write %s\n", json); return 2; }
    fprintf(f, "{\"name\": \"decode_limit\", \"tool\": \"bench/pipeline/decode_limit.c\", "
               "\"threads\": %d, \"scale\": \"1/%d\", \"images\": %llu, \"seconds\": %.6f, "
               "\"images_per_s\": %.3f, \"cpu_s\": %.6f, \"cpu_ms_per_image\": %.4f, "
               "\"files\": %zu, \"mean_file_bytes\": %.1f}\n",
            g_threads, g_scale_denom, (unsigned long long)images, secs, rate, cpu,
            images ? 1000.0 * cpu / images : 0.0, g_nfiles,
            (double)bytes / g_nfiles);
    fclose(f);
  }
  return 0;
}
