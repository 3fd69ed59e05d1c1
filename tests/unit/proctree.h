/* proctree: /proc trees for the pinning tests: the captured QEMU tree in a scratch root, and made-up entries. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The captured tree in tests/unit/data/proc-qemu (see its README): QEMU pid 25699, its threads. */
#define PROCTREE_QEMU_PID 25699
#define PROCTREE_MAIN 25699
#define PROCTREE_CALL_RCU 25700
#define PROCTREE_IOTHREAD 25702
#define PROCTREE_VCPU0 25703
#define PROCTREE_VCPU1 25704
#define PROCTREE_NX_RECOVERY 25707

/* A new scratch directory; the caller removes it with test_rmtree() and frees the string. */
static inline char *proctree_new(void) {
        char *root = strdup("/tmp/test_proctreeXXXXXX");
        if (!root || !mkdtemp(root))
                fail_msg("mkdtemp failed");
        return root;
}

/* A scratch root holding a copy of the captured tree. */
static inline char *proctree_captured(void) {
        char *root = proctree_new(), cmd[PATH_MAX * 2];
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        snprintf(cmd, sizeof cmd, "cp -R '%s/tests/unit/data/proc-qemu/.' '%s'", src ? src : ".", root);
        if (system(cmd) != 0)
                fail_msg("%s failed", cmd);
        return root;
}

/* Write <root><path> (path from fmt and the arguments after content), creating its directories. */
static inline void proctree_write(const char *root, const char *fmt, const char *content, ...)
        __attribute__((format(printf, 2, 4)));
static inline void proctree_write(const char *root, const char *fmt, const char *content, ...) {
        char rel[256], path[PATH_MAX];
        va_list ap;
        va_start(ap, content);
        vsnprintf(rel, sizeof(rel), fmt, ap);
        va_end(ap);
        snprintf(path, sizeof(path), "%s%s", root, rel);
        for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                mkdir(path, 0755);
                *p = '/';
        }
        FILE *fp = fopen(path, "w");
        if (!fp)
                fail_msg("cannot write %s", path);
        fputs(content, fp);
        fclose(fp);
}

/* /proc status text in the kernel's layout, cut to the lines around the one the reader looks for. */
static inline const char *proctree_status(const char *name, const char *cpus) {
        static char buf[256];
        snprintf(buf, sizeof(buf), "Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nCpus_allowed:\t3\n"
                 "Cpus_allowed_list:\t%s\nMems_allowed_list:\t0\n", name, cpus);
        return buf;
}

/* A thread tid of process pid named name, on cpus. */
static inline void proctree_add_task(const char *root, int pid, int tid, const char *name, const char *cpus) {
        char comm[64];
        snprintf(comm, sizeof(comm), "%s\n", name);
        proctree_write(root, "/%d/task/%d/comm", comm, pid, tid);
        proctree_write(root, "/%d/task/%d/status", proctree_status(name, cpus), pid, tid);
}

/* A top-level process; flags 0x208040 is a kernel thread (PF_KTHREAD), 0x400100 a user process. */
static inline void proctree_add_process(const char *root, int pid, const char *name, unsigned long flags,
                                        const char *cpus) {
        char text[256];
        snprintf(text, sizeof(text), "%s\n", name);
        proctree_write(root, "/%d/comm", text, pid);
        snprintf(text, sizeof(text), "%d (%s) S 2 0 0 0 -1 %lu 0 0 0 0 0 0 0 0 20 0 1 0 21 0 0\n", pid, name,
                 flags);
        proctree_write(root, "/%d/stat", text, pid);
        proctree_write(root, "/%d/status", proctree_status(name, cpus), pid);
}
