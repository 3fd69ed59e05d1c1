/* replay: a main for a fuzz target outside libFuzzer: runs LLVMFuzzerTestOneInput on every file named, and on every
 * file of every directory named (crashes found before, and the seed corpus), in any build. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return fprintf(stderr, "replay: %s: %m\n", path), -errno;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (size_t n;; len += n) {
                if (len == cap && !(buf = realloc(buf, cap = cap * 2 + 4096)))
                        abort();
                if ((n = fread(buf + len, 1, cap - len, f)) == 0)
                        break;
        }
        fclose(f);
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        free(buf);
        return 1;
}

static int replay_dir(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : (fprintf(stderr, "replay: %s: %m\n", dir), -errno);
        int n = 0;
        for (struct dirent *e; (e = readdir(d));) {
                char path[4096];
                struct stat st;
                snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode))
                        n += replay_file(path) > 0;
        }
        closedir(d);
        return n;
}

int main(int argc, char **argv) {
        int total = 0;
        for (int i = 1; i < argc; i++) {
                struct stat st;
                int r = stat(argv[i], &st) == 0 && S_ISREG(st.st_mode) ? replay_file(argv[i]) : replay_dir(argv[i]);
                if (r < 0)
                        return 1;
                total += r;
        }
        printf("replayed %d inputs\n", total);
        return 0;
}
