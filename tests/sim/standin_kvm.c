/* standin-kvm: the simulator's stand-in for a Proxmox `kvm` process: one `CPU n/KVM` thread per vCPU, a pid
 * file and a small QMP socket. Started through a symlink named `kvm`, with QEMU's command line (see
 * tests/sim/README.md). It costs about a millisecond of CPU to start, where the Python stand-in costs about 40.
 * SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_VCPUS 1024
#define VCPU_STACK (64 * 1024)

struct vcpu {
        int index;
        pid_t tid;
        pthread_barrier_t *ready;
};

struct options {
        int vcpus;
        const char *pidfile;
        char qmp_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static const char *arg(int argc, char **argv, const char *name) {
        for (int i = 1; i + 1 < argc; i++)
                if (strcmp(argv[i], name) == 0)
                        return argv[i + 1];
        return NULL;
}

/* `-chardev socket,id=qmp,path=P,server=on,wait=off` → P. */
static void qmp_path_of(const char *chardev, char *out, size_t size) {
        out[0] = '\0';
        const char *p = chardev ? strstr(chardev, "path=") : NULL;
        if (!p)
                return;
        p += 5;
        size_t n = strcspn(p, ",");
        if (n < size)
                snprintf(out, size, "%.*s", (int)n, p);
}

static int parse_options(int argc, char **argv, struct options *o) {
        const char *smp = arg(argc, argv, "-smp");
        o->vcpus = smp ? atoi(smp) : 1;
        o->pidfile = arg(argc, argv, "-pidfile");
        qmp_path_of(arg(argc, argv, "-chardev"), o->qmp_path, sizeof(o->qmp_path));
        if (o->vcpus < 1 || o->vcpus > MAX_VCPUS) {
                fprintf(stderr, "standin-kvm: bad -smp %s\n", smp);
                return -EINVAL;
        }
        return 0;
}

static void *vcpu_main(void *data) {
        struct vcpu *v = data;
        char name[16];
        snprintf(name, sizeof(name), "CPU %d/KVM", v->index);
        pthread_setname_np(pthread_self(), name);
        v->tid = gettid();
        pthread_barrier_wait(v->ready);
        for (;;)
                pause();
        return NULL;
}

static int start_vcpus(struct vcpu *vcpus, int n, pthread_barrier_t *ready) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, VCPU_STACK);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        for (int i = 0; i < n; i++) {
                pthread_t t;
                vcpus[i] = (struct vcpu){ .index = i, .ready = ready };
                int r = pthread_create(&t, &attr, vcpu_main, &vcpus[i]);
                if (r != 0) {
                        fprintf(stderr, "standin-kvm: thread: %s\n", strerror(r));
                        return -r;
                }
        }
        pthread_attr_destroy(&attr);
        pthread_barrier_wait(ready);
        return 0;
}

static int listen_qmp(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        unlink(path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
                fprintf(stderr, "standin-kvm: qmp socket %s: %m\n", path);
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        return fd;
}

/* Written to a temporary name and renamed, so a reader never sees it half written. */
static int write_pidfile(const char *path) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 || rename(tmp, path) < 0) {
                fprintf(stderr, "standin-kvm: pid file %s: %m\n", path);
                return -errno;
        }
        return 0;
}

static json_t *cpus_fast(const struct vcpu *vcpus, int n) {
        json_t *list = json_array();
        for (int i = 0; i < n; i++) {
                char qom[64];
                snprintf(qom, sizeof(qom), "/machine/unattached/device[%d]", i);
                json_array_append_new(list, json_pack("{si ss si ss s{si si si}}", "cpu-index", i, "qom-path", qom,
                                                      "thread-id", (int)vcpus[i].tid, "target", "x86_64", "props",
                                                      "core-id", i, "thread-id", 0, "socket-id", 0));
        }
        return list;
}

/* The answer to one command line, or NULL when the line is not a JSON object. Sets *quit on `quit`. */
static json_t *answer(const char *line, const struct vcpu *vcpus, int n, int *quit) {
        json_t *cmd = json_loads(line, 0, NULL);
        if (!json_is_object(cmd)) {
                json_decref(cmd);
                return NULL;
        }
        const char *ex = json_string_value(json_object_get(cmd, "execute"));
        json_t *out;
        if (ex && strcmp(ex, "qmp_capabilities") == 0)
                out = json_pack("{s{}}", "return");
        else if (ex && strcmp(ex, "query-cpus-fast") == 0)
                out = json_pack("{so}", "return", cpus_fast(vcpus, n));
        else if (ex && strcmp(ex, "query-status") == 0)
                out = json_pack("{s{ss sb sb}}", "return", "status", "running", "singlestep", 0, "running", 1);
        else if (ex && strcmp(ex, "quit") == 0) {
                out = json_pack("{s{}}", "return");
                *quit = 1;
        } else {
                char desc[256];
                snprintf(desc, sizeof(desc), "The command %s has not been found", ex ? ex : "");
                out = json_pack("{s{ss ss}}", "error", "class", "CommandNotFound", "desc", desc);
        }
        json_t *id = json_object_get(cmd, "id");
        if (id && json_object_get(out, "return"))
                json_object_set(out, "id", id);
        json_decref(cmd);
        return out;
}

static int send_message(FILE *f, json_t *msg) {
        char *text = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        int r = text && fprintf(f, "%s\r\n", text) >= 0 && fflush(f) == 0 ? 0 : -EIO;
        free(text);
        return r;
}

static void serve_qmp(int conn, const struct vcpu *vcpus, int n) {
        FILE *f = fdopen(conn, "r+");
        if (!f) {
                close(conn);
                return;
        }
        json_t *greet = json_pack("{s{s{s{si si si} ss} s[]}}", "QMP", "version", "qemu", "micro", 0, "minor", 2,
                                  "major", 9, "package", "pve-qemu-kvm_9.2.0-5", "capabilities");
        char *line = NULL;
        size_t cap = 0;
        int quit = 0;
        int r = send_message(f, greet);
        while (r == 0 && getline(&line, &cap, f) > 0) {
                json_t *out = answer(line, vcpus, n, &quit);
                if (out)
                        r = send_message(f, out);
                if (quit)
                        _exit(0);
        }
        free(line);
        fclose(f);
}

static void on_term(int sig) {
        (void)sig;
        _exit(0);
}

int main(int argc, char **argv) {
        pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
                return 1;
        signal(SIGTERM, on_term);
        signal(SIGPIPE, SIG_IGN);
        struct options o;
        if (parse_options(argc, argv, &o) < 0)
                return 2;
        static struct vcpu vcpus[MAX_VCPUS];
        pthread_barrier_t ready;
        pthread_barrier_init(&ready, NULL, (unsigned)o.vcpus + 1);
        if (start_vcpus(vcpus, o.vcpus, &ready) < 0)
                return 1;
        int srv = o.qmp_path[0] ? listen_qmp(o.qmp_path) : -1;
        if (o.qmp_path[0] && srv < 0)
                return 1;
        if (o.pidfile && write_pidfile(o.pidfile) < 0)
                return 1;
        for (;;) {
                if (srv < 0) {
                        pause();
                        continue;
                }
                int conn = accept4(srv, NULL, NULL, SOCK_CLOEXEC);
                if (conn >= 0)
                        serve_qmp(conn, vcpus, o.vcpus);
        }
}
