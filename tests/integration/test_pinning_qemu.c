/* Integration test for agent/pinning* against a real QEMU: QMP, the /proc fallback, drift, memory. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <numa.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpuset.h"
#include "fileio.h"
#include "inventory.h"
#include "pinning_apply.h"
#include "pinning_proc.h"
#include "pinning_qmp.h"

#define EXIT_SKIP 77
#define VMID 4242
#define N_VCPUS 2
#define SAFETY_ALARM_S 240

static int failures;
/* The QEMU pid, for the signal handler that kills it when the test itself is killed. */
static volatile sig_atomic_t qemu_pid;

#define CHECK(cond, ...)                                                                                     \
        do {                                                                                                 \
                if (!(cond)) {                                                                               \
                        failures++;                                                                          \
                        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                     \
                        fprintf(stderr, __VA_ARGS__);                                                        \
                        fputc('\n', stderr);                                                                 \
                }                                                                                            \
        } while (0)

static void kill_qemu_and_exit(int sig) {
        if (qemu_pid > 0)
                kill((pid_t)qemu_pid, SIGKILL);
        _exit(128 + sig);
}

static void kill_qemu(void) {
        if (qemu_pid <= 0)
                return;
        kill((pid_t)qemu_pid, SIGKILL);
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int)qemu_pid);
        /* QEMU daemonized, so it is not our child: wait until its threads are gone. */
        for (int i = 0; i < 500 && access(path, F_OK) == 0; i++)
                usleep(10000);
        qemu_pid = 0;
}

static bool in_path(const char *program) {
        const char *path = getenv("PATH");
        char *copy = strdup(path ? path : "/usr/bin:/bin");
        bool found = false;
        for (char *save = NULL, *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
                char full[PATH_MAX];
                snprintf(full, sizeof(full), "%s/%s", dir, program);
                found = access(full, X_OK) == 0;
        }
        free(copy);
        return found;
}

static bool kvm_usable(void) {
        int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

/* Host CPUs 0 and 1 must both be ours to run this test. */
static bool have_two_cpus(void) {
        cpu_set_t set;
        return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
}

static int run_qemu(const char *name, const char *accel, const char *qmp, const char *pidfile) {
        fprintf(stderr, "starting QEMU with -accel %s\n", accel);
        pid_t child = fork();
        if (child < 0)
                return -errno;
        if (child == 0) {
                execlp("qemu-system-x86_64", "qemu-system-x86_64", "-name", name, "-accel", accel, "-smp", "2", "-m",
                       "64", "-nodefaults", "-display", "none", "-qmp", qmp, "-pidfile", pidfile, "-daemonize",
                       (char *)NULL);
                _exit(127);
        }
        int status = 0;
        waitpid(child, &status, 0); /* with -daemonize, the parent exits once the VM is set up */
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

static int start_qemu(const char *run_dir) {
        char name[64], qmp[PATH_MAX + 64], pidfile[PATH_MAX + 64];
        snprintf(name, sizeof(name), "guest=vm%d,debug-threads=on", VMID);
        snprintf(qmp, sizeof(qmp), "unix:%s/%d.qmp,server=on,wait=off", run_dir, VMID);
        snprintf(pidfile, sizeof(pidfile), "%s/%d.pid", run_dir, VMID);
        /* Multi-threaded TCG gives one thread per vCPU ("CPU n/TCG") where KVM is missing, or where /dev/kvm opens
         * but QEMU cannot run a guest with it (some nested hosts). PVESCALE_QEMU_ACCEL overrides the choice (e.g.
         * "tcg,thread=multi" to test TCG on a KVM host). */
        const char *accel = getenv("PVESCALE_QEMU_ACCEL");
        if (accel && *accel)
                return run_qemu(name, accel, qmp, pidfile);
        if (kvm_usable() && run_qemu(name, "kvm", qmp, pidfile) == 0)
                return 0;
        return run_qemu(name, "tcg,thread=multi", qmp, pidfile);
}

/* The thread ids of pid, ending with 0; at most max - 1 of them. */
static void list_threads(int pid, int *tids, size_t max) {
        char dir[64];
        snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
        DIR *d = opendir(dir);
        size_t n = 0;
        for (struct dirent *de; d && n + 1 < max && (de = readdir(d));)
                if (de->d_name[0] != '.')
                        tids[n++] = atoi(de->d_name);
        tids[n] = 0;
        if (d)
                closedir(d);
}

/* Every thread of pid onto `cpus` (test setup: a known, wrong starting point). */
static void set_all_threads(int pid, const char *cpus) {
        cpu_set_t set;
        CPU_ZERO(&set);
        struct cpuset *s = NULL;
        cpuset_parse(cpus, &s);
        CPUSET_FOREACH(cpu, s)
                CPU_SET(cpu, &set);
        cpuset_free(s);
        int tids[256];
        list_threads(pid, tids, 256);
        for (int *tid = tids; *tid; tid++)
                CHECK(sched_setaffinity(*tid, sizeof(set), &set) == 0, "tid %d: %s", *tid, strerror(errno));
}

/* Read comm and Cpus_allowed_list of one thread straight from /proc (independent of the module's reader). */
static bool read_thread(int pid, int tid, char *comm, size_t comm_size, char *cpus, size_t cpus_size) {
        char path[128], *text = NULL;
        snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
        if (fileio_read(path, 4096, &text, NULL) < 0)
                return false;
        text[strcspn(text, "\n")] = '\0';
        snprintf(comm, comm_size, "%s", text);
        free(text);
        snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
        if (fileio_read(path, 1 << 16, &text, NULL) < 0)
                return false;
        const char *line = strstr(text, "\nCpus_allowed_list:\t");
        if (line)
                snprintf(cpus, cpus_size, "%.*s", (int)strcspn(line + 20, "\n"), line + 20);
        free(text);
        return line != NULL;
}

/* Each "CPU n/KVM" (or /TCG) thread has exactly {map[n]}; every other thread has the whole set "0-1". */
static void check_affinity(int pid, const int *map, const char *what) {
        int tids[256], vcpus_seen = 0, others_seen = 0;
        list_threads(pid, tids, 256);
        for (int *t = tids; *t; t++) {
                int tid = *t;
                char comm[64], cpus[64], want[16];
                if (!read_thread(pid, tid, comm, sizeof(comm), cpus, sizeof(cpus)))
                        continue;
                int v = pinning_vcpu_index(comm);
                if (v >= 0 && v < N_VCPUS)
                        snprintf(want, sizeof(want), "%d", map[v]);
                else
                        snprintf(want, sizeof(want), "0-1");
                CHECK(strcmp(cpus, want) == 0, "%s: thread %d '%s' has Cpus_allowed_list %s, want %s", what, tid,
                      comm, cpus, want);
                if (v >= 0)
                        vcpus_seen++;
                else
                        others_seen++;
        }
        CHECK(vcpus_seen == N_VCPUS, "%s: %d vCPU threads seen", what, vcpus_seen);
        CHECK(others_seen >= 1, "%s: %d other threads seen", what, others_seen);
}

static const struct pinning_env live = {.proc_root = PINNING_PROC_ROOT, .sys = &pinning_sys_linux};

/* What the agent does for a VM, here in one thread: ask QMP on <run_dir>/<vmid>.qmp, then take the threads it
 * names, or those /proc names. */
static int find_vcpus(const char *run_dir, int pid, struct pin_vcpus *ret) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%d.qmp", run_dir, VMID);
        int *tids = NULL;
        unsigned n = 0;
        int qmp_error = pinning_qmp_vcpu_threads(path, PINNING_QMP_TIMEOUT_MS, &tids, &n);
        int r = pinning_find_vcpus(PINNING_PROC_ROOT, pid, qmp_error, tids, n, ret);
        free(tids);
        return r;
}

static int apply(const struct pin_plan *plan, const char *run_dir, struct pin_report *rep) {
        struct pin_vcpus vcpus = {0};
        int r = find_vcpus(run_dir, plan->pid, &vcpus);
        if (r == 0)
                r = pinning_apply(plan, &vcpus, &live, rep);
        pinning_vcpus_done(&vcpus);
        return r;
}

struct plan_data {
        int map[N_VCPUS];
        struct cpuset *cpus, *nodes;
        struct pin_plan plan;
};

static void plan_init(struct plan_data *d, int pid, int cpu_of_vcpu0, int cpu_of_vcpu1) {
        d->map[0] = cpu_of_vcpu0;
        d->map[1] = cpu_of_vcpu1;
        cpuset_parse("0-1", &d->cpus);
        cpuset_parse("0", &d->nodes);
        d->plan = (struct pin_plan){.vmid = VMID, .pid = pid, .n_vcpus = N_VCPUS, .vcpu_map = d->map,
                                    .vm_cpus = d->cpus, .mem_nodes = d->nodes};
}

static void plan_done(struct plan_data *d) {
        cpuset_free(d->cpus);
        cpuset_free(d->nodes);
}

/* Pin with the plan from a wrong start (everything on CPU 0) and check the result. Returns the report. */
static struct pin_report pin_and_check(int pid, const char *run_dir, int cpu0, int cpu1, const char *what) {
        struct plan_data d;
        plan_init(&d, pid, cpu0, cpu1);
        set_all_threads(pid, "0");
        struct pin_report rep = {0};
        int r = apply(&d.plan, run_dir, &rep);
        CHECK(r == 0, "%s: pinning_apply returned %d (%s), %u failures, first tid %d: %s", what, r, strerror(r < 0 ? -r : 0),
              rep.n_failures, rep.failures[0].tid, strerror(-rep.failures[0].error));
        CHECK(rep.vcpus_pinned == N_VCPUS && rep.vcpus_missing == 0, "%s: %u vCPUs pinned, %u missing", what,
              rep.vcpus_pinned, rep.vcpus_missing);
        CHECK(rep.others_pinned >= 1, "%s: %u other threads pinned", what, rep.others_pinned);
        enum pin_memory_result want_memory = numa_available() < 0 ? PIN_MEMORY_NO_NUMA
                                             : numa_max_node() == 0 ? PIN_MEMORY_SINGLE_NODE : PIN_MEMORY_MIGRATED;
        CHECK(rep.memory == want_memory, "%s: memory %s, want %s", what, pinning_memory_result_to_string(rep.memory),
              pinning_memory_result_to_string(want_memory));
        check_affinity(pid, d.map, what);
        plan_done(&d);
        return rep;
}

static void test_qmp_path(int pid, const char *run_dir) {
        struct pin_report rep = pin_and_check(pid, run_dir, 1, 0, "QMP");
        CHECK(rep.vcpus_from_qmp && rep.qmp_error == 0, "QMP was not used: %s", strerror(-rep.qmp_error));
}

static void test_qmp_and_proc_agree(int pid, const char *run_dir) {
        struct pin_vcpus qmp = {0};
        int *proc_tids = NULL;
        unsigned proc_n = 0;
        CHECK(find_vcpus(run_dir, pid, &qmp) == 0 && qmp.from_qmp, "QMP did not answer: %s",
              strerror(-qmp.qmp_error));
        CHECK(pinning_proc_vcpu_threads(PINNING_PROC_ROOT, pid, &proc_tids, &proc_n) == 0, "no vCPU names in /proc");
        CHECK(qmp.n == N_VCPUS && proc_n == N_VCPUS, "QMP found %u vCPUs, /proc %u", qmp.n, proc_n);
        for (unsigned i = 0; qmp.tids && proc_tids && i < N_VCPUS && i < qmp.n && i < proc_n; i++)
                CHECK(qmp.tids[i] == proc_tids[i], "vCPU %u: QMP tid %d, /proc tid %d", i, qmp.tids[i], proc_tids[i]);
        pinning_vcpus_done(&qmp);
        free(proc_tids);
}

/* QMP answers with QEMU's thread ids, which are not threads of our own process: they must not be used. */
static void test_stale_qmp_ids_refused(const char *run_dir) {
        struct pin_vcpus vcpus = {0};
        int r = find_vcpus(run_dir, getpid(), &vcpus);
        CHECK(r == -ENOENT, "thread ids of another process were accepted: %d", r);
        pinning_vcpus_done(&vcpus);
}

static void test_drift(int pid) {
        struct plan_data d;
        plan_init(&d, pid, 1, 0);
        json_t *real = NULL;
        unsigned drift = 99;
        CHECK(pinning_proc_read(PINNING_PROC_ROOT, pid, &real) == 0, "pinning_read failed");
        CHECK(pinning_drift(&d.plan, real, &drift) == 0 && drift == 0, "drift %u right after pinning", drift);
        json_decref(real);
        int *tids = NULL;
        unsigned n = 0;
        if (pinning_proc_vcpu_threads(PINNING_PROC_ROOT, pid, &tids, &n) == 0) {
                cpu_set_t both;
                CPU_ZERO(&both);
                CPU_SET(0, &both);
                CPU_SET(1, &both);
                CHECK(sched_setaffinity(tids[0], sizeof(both), &both) == 0, "unpinning vCPU 0: %s", strerror(errno));
        }
        free(tids);
        CHECK(pinning_proc_read(PINNING_PROC_ROOT, pid, &real) == 0, "pinning_read failed");
        CHECK(pinning_drift(&d.plan, real, &drift) == 0 && drift == 1, "drift %u after unpinning vCPU 0", drift);
        json_decref(real);
        plan_done(&d);
}

/* Another client holds QEMU's single QMP connection (like pvestatd): pinning times out and reads /proc. */
static void test_busy_qmp_falls_back(int pid, const char *run_dir) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%.80s/%d.qmp", run_dir, VMID);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char greeting[16] = "";
        CHECK(connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "connect: %s", strerror(errno));
        CHECK(read(fd, greeting, sizeof(greeting) - 1) > 0, "no greeting for the blocking client");
        struct pin_report rep = pin_and_check(pid, run_dir, 0, 1, "busy QMP");
        CHECK(!rep.vcpus_from_qmp && rep.qmp_error == -ETIMEDOUT, "busy QMP: from_qmp %d, qmp_error %s",
              rep.vcpus_from_qmp, strerror(-rep.qmp_error));
        close(fd);
}

static void test_missing_qmp_falls_back(int pid, const char *run_dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%d.qmp", run_dir, VMID);
        CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
        struct pin_report rep = pin_and_check(pid, run_dir, 1, 0, "no QMP socket");
        CHECK(!rep.vcpus_from_qmp && rep.qmp_error == -ENOENT, "no socket: from_qmp %d, qmp_error %s",
              rep.vcpus_from_qmp, strerror(-rep.qmp_error));
}

/* The pid QEMU wrote, so that it is killed at the end whatever happens in between. */
static int read_pidfile(const char *run_dir) {
        char path[PATH_MAX + 16], *text = NULL;
        snprintf(path, sizeof(path), "%s/%d.pid", run_dir, VMID);
        if (fileio_read(path, 64, &text, NULL) < 0)
                return -1;
        int pid = atoi(text);
        free(text);
        return pid;
}

static void run_tests(const char *run_dir) {
        int pid = inventory_running_pid(run_dir, VMID);
        CHECK(pid > 0 && pid == (int)qemu_pid, "inventory_running_pid: %d, pid file %d", pid, (int)qemu_pid);
        if (pid <= 0)
                return;
        int *tids = NULL;
        unsigned n = 0;
        CHECK(pinning_proc_vcpu_threads(PINNING_PROC_ROOT, pid, &tids, &n) == 0 && n == N_VCPUS, "%u vCPU threads", n);
        free(tids);
        test_qmp_path(pid, run_dir);
        test_qmp_and_proc_agree(pid, run_dir);
        test_stale_qmp_ids_refused(run_dir);
        test_drift(pid);
        test_busy_qmp_falls_back(pid, run_dir);
        test_missing_qmp_falls_back(pid, run_dir);
}

int main(void) {
        if (!have_two_cpus()) {
                fprintf(stderr, "SKIP: host CPUs 0 and 1 are needed\n");
                return EXIT_SKIP;
        }
        if (!in_path("qemu-system-x86_64")) {
                fprintf(stderr, "SKIP: qemu-system-x86_64 missing (apt-get install qemu-system-x86)\n");
                return EXIT_SKIP;
        }
        signal(SIGTERM, kill_qemu_and_exit);
        signal(SIGINT, kill_qemu_and_exit);
        signal(SIGALRM, kill_qemu_and_exit);
        alarm(SAFETY_ALARM_S);
        char run_dir[] = "/tmp/test_pinning_qemuXXXXXX";
        if (!mkdtemp(run_dir)) {
                perror("mkdtemp");
                return 1;
        }
        int r = start_qemu(run_dir);
        CHECK(r == 0, "QEMU did not start");
        qemu_pid = read_pidfile(run_dir);
        if (r == 0)
                run_tests(run_dir);
        kill_qemu();
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", run_dir);
        fprintf(stderr, "%s: %d failure(s)\n", failures ? "FAILED" : "OK", failures);
        return failures ? 1 : 0;
}
