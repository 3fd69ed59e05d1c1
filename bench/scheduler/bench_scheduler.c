/* bench/scheduler: the scheduling simulation on 1k, 5k and 10k pending pods in Karpenter's benchmark mix,
 * 20 shapes and 50 hosts: speed, planned claims against the lower bound, and peak memory. With --scale: 10k,
 * 50k and 100k pods on 1,000 hosts with room for every pod, the per-pod cost as the pods grow, and apart the
 * same pods on 1,000 hosts that fill (the cost of pods that fit nowhere). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shapes.h"
#include "simulate.h"

#define MIB (INT64_C(1) << 20)
#define GIB (INT64_C(1) << 30)
#define HOSTS 50
#define SCALE_HOSTS 1000
#define NUMA_PER_HOST 2
#define CPUS_PER_NUMA 192            /* a dual-socket 96-core host with SMT */
#define GIB_PER_NUMA 768
#define LABEL_VALUES 10              /* distinct values of the spread and affinity labels */
#define PODS_PER_VALUE 1000          /* --scale: one label value per 1,000 pods, sets of 200 as at 10k pods */
#define SCALE_REPEATS 3              /* --scale: the fastest of this many runs of each size */
#define SEED UINT64_C(0x5eed5c4ed)

enum kind { GENERIC, ZONE_SPREAD, HOST_SPREAD, ZONE_AFFINITY, HOST_ANTI, KINDS };
static const char *const KIND_NAMES[KINDS] = { "generic", "zone-spread", "hostname-spread", "zone-self-affinity",
                                               "hostname-anti-affinity" };

/* The hosts of one run (HOSTS, or with --scale SCALE_HOSTS), the label values of its spread and affinity pods
 * (0: one per PODS_PER_VALUE pods), and how many times the full mix is timed (the fastest counts: the machine
 * is shared, and a 20 ms run is easily slowed by a neighbour). */
struct fleet {
        int hosts, numa_per_host, label_values, repeats;
};

struct outcome {
        size_t pods, claims, unplaced, generic_claims;
        double seconds, generic_seconds;
        int64_t lower_bound;
        long rss_kib;
};

static uint64_t next_rand(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static int64_t uniform(uint64_t *s, int64_t lo, int64_t hi) {
        return lo + (int64_t)(next_rand(s) % (uint64_t)(hi - lo + 1));
}

/* Wall time; --scale times the process's CPU time (user and system), which neighbours on the shared machine
 * do not stretch by taking the CPU. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void) {
        struct timespec ts;
        clock_gettime(bench_clock, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sim_label *one_label(struct sim_input *in, const char *k, const char *v) {
        struct sim_label *l = simulate_alloc(in, sizeof *l);
        l->key = k;
        l->value = v;
        return l;
}

static struct sim_selector selector_of(const struct sim_label *l) {
        return (struct sim_selector){ .match_labels = (struct sim_label *)l, .n_match_labels = 1 };
}

static void set_term(struct sim_input *in, struct sim_pod_term **t, size_t *n, const struct sim_label *l, const char *key) {
        *t = simulate_alloc(in, sizeof **t);
        (*t)->selector = selector_of(l);
        (*t)->topology_key = key;
        *n = 1;
}

static void set_spread(struct sim_input *in, struct sim_pod *p, const struct sim_label *l, const char *key) {
        p->spread = simulate_alloc(in, sizeof *p->spread);
        *p->spread = (struct sim_spread){ .topology_key = key, .max_skew = 1, .do_not_schedule = true,
                                          .selector = selector_of(l) };
        p->n_spread = 1;
}

static const char *label_value(struct sim_input *in, int values, uint64_t *rng) {
        char v[16];
        snprintf(v, sizeof v, "v%d", (int)uniform(rng, 0, values - 1));
        return simulate_strdup(in, v);
}

/* Karpenter's benchmark mix: equal parts of each kind, the remainder generic. */
static void add_pod(struct sim_input *in, enum kind k, size_t i, int values, uint64_t *rng) {
        struct sim_pod *p = simulate_add_pod(in);
        char name[32];
        snprintf(name, sizeof name, "%s-%zu", KIND_NAMES[k], i);
        p->namespace = "default";
        p->name = simulate_strdup(in, name);
        p->requests.v[RESOURCE_CPU] = uniform(rng, 100, 1500);
        p->requests.v[RESOURCE_MEMORY] = uniform(rng, 100, 4096) * MIB;
        if (k == GENERIC)
                return;
        if (k == HOST_ANTI) {
                p->labels = one_label(in, "app", "nginx"); /* all of them repel each other */
                p->n_labels = 1;
                set_term(in, &p->pod_anti_affinity, &p->n_pod_anti_affinity, p->labels, SIM_LABEL_HOSTNAME);
                return;
        }
        p->labels = one_label(in, k == ZONE_AFFINITY ? "my-affinity" : "my-label", label_value(in, values, rng));
        p->n_labels = 1;
        if (k == ZONE_AFFINITY)
                set_term(in, &p->pod_affinity, &p->n_pod_affinity, p->labels, SIM_LABEL_ZONE);
        else
                set_spread(in, p, p->labels, k == ZONE_SPREAD ? SIM_LABEL_ZONE : SIM_LABEL_HOSTNAME);
}

static void add_hosts(struct sim_input *in, const struct fleet *f) {
        for (int h = 0; h < f->hosts; h++) {
                struct sim_host *host = simulate_add_host(in);
                char name[16];
                snprintf(name, sizeof name, "pve%02d", h + 1);
                host->name = simulate_strdup(in, name);
                host->region = "cluster-1";
                host->free_cpus = f->numa_per_host * CPUS_PER_NUMA;
                host->free_memory_bytes = (uint64_t)(f->numa_per_host * GIB_PER_NUMA * GIB);
                host->numa = simulate_alloc(in, (size_t)f->numa_per_host * sizeof *host->numa);
                host->n_numa = (size_t)f->numa_per_host;
                for (int n = 0; n < f->numa_per_host; n++)
                        host->numa[n] = (struct sim_numa){ n, CPUS_PER_NUMA, CPUS_PER_NUMA, (uint64_t)(GIB_PER_NUMA * GIB) };
        }
}

static struct sim_input *make_input(const struct shape_catalog *cat, const struct fleet *f, size_t pods,
                                    bool generic_only) {
        struct sim_input *in = simulate_input_new();
        uint64_t rng = SEED;
        if (!in)
                return NULL;
        struct sim_nodeclass *nc = simulate_add_nodeclass(in);
        nc->name = "default";
        nc->shapes = cat;
        struct sim_nodepool *pool = simulate_add_nodepool(in);
        pool->name = "default";
        pool->nodeclass = "default";
        add_hosts(in, f);
        size_t per_kind = pods / KINDS;
        int values = f->label_values ? f->label_values : (int)(pods / PODS_PER_VALUE);
        for (size_t i = 0; i < pods; i++) {
                enum kind k = i / per_kind < KINDS ? (enum kind)(i / per_kind) : GENERIC;
                if (!generic_only || k == GENERIC)
                        add_pod(in, k, i, values, &rng);
                else
                        (void)next_rand(&rng), (void)next_rand(&rng), (void)next_rand(&rng); /* same generic pods */
        }
        return in;
}

/* ceil(total requests / the largest shape's allocatable), over cpu and memory. */
static int64_t lower_bound(const struct sim_input *in, const struct shape_catalog *cat) {
        const struct shape *big = &cat->items[cat->n - 1];
        int64_t cpu = 0, mem = 0;
        for (size_t i = 0; i < in->n_pods; i++) {
                cpu += in->pods[i]->requests.v[RESOURCE_CPU];
                mem += in->pods[i]->requests.v[RESOURCE_MEMORY];
        }
        int64_t a = (cpu + big->allocatable.v[RESOURCE_CPU] - 1) / big->allocatable.v[RESOURCE_CPU];
        int64_t b = (mem + big->allocatable.v[RESOURCE_MEMORY] - 1) / big->allocatable.v[RESOURCE_MEMORY];
        return a > b ? a : b;
}

static int timed_run(const struct sim_input *in, double *ret_seconds, struct sim_result **ret) {
        double t0 = now();
        int r = simulate_run(in, ret);
        *ret_seconds = now() - t0;
        return r;
}

/* With BENCH_TRACE set: why pods stayed pending, one line per distinct reason (on stderr). */
static void trace_reasons(const struct sim_input *in, const struct sim_result *res) {
        if (!getenv("BENCH_TRACE"))
                return;
        uint64_t vcpus = 0, per_host[SCALE_HOSTS] = { 0 }, claims_per_host[SCALE_HOSTS] = { 0 };
        for (size_t c = 0; c < res->n_claims; c++) {
                vcpus += res->claims[c].shape->vcpus;
                per_host[res->claims[c].host] += res->claims[c].shape->vcpus;
                claims_per_host[res->claims[c].host]++;
        }
        fprintf(stderr, "%zu pods: %zu claims, %" PRIu64 " vCPUs; per host (claims/vCPUs):", in->n_pods, res->n_claims, vcpus);
        for (size_t h = 0; h < in->n_hosts; h++)
                fprintf(stderr, " %" PRIu64 "/%" PRIu64, claims_per_host[h], per_host[h]);
        fprintf(stderr, "\n");
        for (size_t i = 0; i < res->n_placements; i++) {
                const char *r = res->placements[i].reason;
                bool seen = false;
                size_t n = 0;
                if (res->placements[i].target != SIM_TARGET_UNPLACED)
                        continue;
                for (size_t k = 0; k < i && !seen; k++)
                        seen = res->placements[k].target == SIM_TARGET_UNPLACED && strcmp(res->placements[k].reason, r) == 0;
                for (size_t k = i; k < res->n_placements && !seen; k++)
                        n += res->placements[k].target == SIM_TARGET_UNPLACED && strcmp(res->placements[k].reason, r) == 0;
                if (!seen)
                        fprintf(stderr, "  %zu x %s (e.g. %s)\n", n, r, in->pods[i]->name);
        }
}

/* Runs in a child process so that peak RSS belongs to this size alone. */
/* The fastest of f->repeats runs (the result of the last). */
static int timed_runs(const struct sim_input *in, const struct fleet *f, double *ret_seconds,
                      struct sim_result **ret) {
        double best = 0, t;
        for (int k = 0; k < f->repeats; k++) {
                if (k > 0)
                        simulate_result_free(*ret);
                if (timed_run(in, &t, ret) < 0)
                        return -ENOMEM;
                best = k == 0 || t < best ? t : best;
        }
        *ret_seconds = best;
        return 0;
}

static int measure(const struct shape_catalog *cat, const struct fleet *f, size_t pods, struct outcome *o) {
        struct sim_result *res;
        struct sim_input *in = make_input(cat, f, pods, false);
        if (!in || timed_runs(in, f, &o->seconds, &res) < 0)
                return -ENOMEM;
        *o = (struct outcome){ .pods = pods, .seconds = o->seconds, .claims = res->n_claims, .unplaced = res->n_unplaced };
        trace_reasons(in, res);
        simulate_result_free(res);
        simulate_input_free(in);
        in = make_input(cat, f, pods, true);
        if (!in || timed_run(in, &o->generic_seconds, &res) < 0)
                return -ENOMEM;
        o->generic_claims = res->n_claims;
        o->lower_bound = lower_bound(in, cat);
        simulate_result_free(res);
        simulate_input_free(in);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        o->rss_kib = ru.ru_maxrss;
        return 0;
}

static int measure_in_child(const struct shape_catalog *cat, const struct fleet *f, size_t pods,
                            struct outcome *o) {
        int fd[2];
        if (pipe(fd) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                close(fd[0]);
                int r = measure(cat, f, pods, o);
                ssize_t w = r < 0 ? -1 : write(fd[1], o, sizeof *o);
                _exit(w == (ssize_t)sizeof *o ? 0 : 1);
        }
        close(fd[1]);
        ssize_t n = read(fd[0], o, sizeof *o);
        int status;
        close(fd[0]);
        waitpid(pid, &status, 0);
        return n == (ssize_t)sizeof *o && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

static void print_row(const struct outcome *o) {
        printf("%7zu %9.1f %10.0f %7.2f %7zu %9zu | %14zu %11" PRId64 " %6.3f %8ld\n", o->pods, o->seconds * 1e3,
               (double)o->pods / o->seconds, o->seconds * 1e6 / (double)o->pods, o->claims, o->unplaced,
               o->generic_claims, o->lower_bound, (double)o->generic_claims / (double)o->lower_bound, o->rss_kib);
}

/* --scale: 10k, 50k and 100k pods on 1,000 hosts with room for all (a label value per 1,000 pods, so that a
 * zone-affine set fits one host), then 100k with 10 values on 1,000 hosts that fill (pods that fit nowhere). */
static int run_scale(const struct shape_catalog *cat) {
        static const size_t SIZES[] = { 10000, 50000, 100000 };
        const struct fleet roomy = { SCALE_HOSTS, NUMA_PER_HOST, 0, SCALE_REPEATS };
        const struct fleet tight = { SCALE_HOSTS, NUMA_PER_HOST, LABEL_VALUES, SCALE_REPEATS };
        struct outcome o[3], full;
        printf("scheduler scale benchmark: %zu shapes, %d hosts (%d NUMA x %d CPUs, %d GiB each), mix of %d kinds, "
               "a label value per %d pods; CPU time, fastest of %d runs\n", cat->n, roomy.hosts, roomy.numa_per_host,
               CPUS_PER_NUMA, GIB_PER_NUMA, KINDS, PODS_PER_VALUE, SCALE_REPEATS);
        printf("%7s %9s %10s %7s %7s %9s | %14s %11s %6s %8s\n", "pods", "time_ms", "pods/s", "us/pod", "claims",
               "unplaced", "generic_claims", "lower_bound", "ratio", "rss_kib");
        for (size_t i = 0; i < 3; i++) {
                if (measure_in_child(cat, &roomy, SIZES[i], &o[i]) < 0) {
                        fprintf(stderr, "bench_scheduler: run with %zu pods failed\n", SIZES[i]);
                        return 1;
                }
                print_row(&o[i]);
        }
        if (measure_in_child(cat, &tight, SIZES[2], &full) < 0) {
                fprintf(stderr, "bench_scheduler: run on hosts that fill failed\n");
                return 1;
        }
        printf("hosts that fill: %d hosts of %d NUMA x %d CPUs, %d GiB, %d label values\n", tight.hosts,
               tight.numa_per_host, CPUS_PER_NUMA, GIB_PER_NUMA, tight.label_values);
        print_row(&full);
        double cost10k = o[0].seconds / (double)o[0].pods, cost100k = o[2].seconds / (double)o[2].pods;
        printf("per-pod cost: 100k / 10k = %.3f; hosts that fill / room for all at 100k = %.3f (%zu unplaced)\n",
               cost100k / cost10k, full.seconds / o[2].seconds, full.unplaced);
        printf("RESULT name=scheduler_scale hosts=%d pods=%zu pods_per_sec=%.0f cost_ratio_100k_10k=%.3f rss_kib=%ld "
               "lower_bound_ratio=%.3f\n", roomy.hosts, o[2].pods, (double)o[2].pods / o[2].seconds,
               cost100k / cost10k, o[2].rss_kib, (double)o[2].generic_claims / (double)o[2].lower_bound);
        return 0;
}

int main(int argc, char **argv) {
        static const size_t SIZES[] = { 1000, 5000, 10000 };
        const struct fleet fleet = { HOSTS, NUMA_PER_HOST, LABEL_VALUES, 1 };
        bool scale = argc > 1 && strcmp(argv[1], "--scale") == 0;
        struct shape_options opts;
        struct shape_catalog *cat;
        struct outcome o[3];
        shapes_options_default(&opts);
        if (argc > 2 || (argc == 2 && !scale)) {
                fprintf(stderr, "usage: bench_scheduler [--scale]\n");
                return 2;
        }
        if (shapes_catalog_default(&opts, &cat) < 0)
                return 1;
        if (scale) {
                bench_clock = CLOCK_PROCESS_CPUTIME_ID;
                int r = run_scale(cat);
                shapes_catalog_free(cat);
                return r;
        }
        printf("scheduler benchmark: %zu shapes, %d hosts (%d NUMA x %d CPUs, %d GiB each), mix of %d kinds\n",
               cat->n, HOSTS, NUMA_PER_HOST, CPUS_PER_NUMA, GIB_PER_NUMA, KINDS);
        printf("%7s %9s %10s %7s %9s | %14s %11s %6s %8s\n", "pods", "time_ms", "pods/s", "claims", "unplaced",
               "generic_claims", "lower_bound", "ratio", "rss_kib");
        for (size_t i = 0; i < 3; i++) {
                if (measure_in_child(cat, &fleet, SIZES[i], &o[i]) < 0) {
                        fprintf(stderr, "bench_scheduler: run with %zu pods failed\n", SIZES[i]);
                        return 1;
                }
                printf("%7zu %9.1f %10.0f %7zu %9zu | %14zu %11" PRId64 " %6.3f %8ld\n", o[i].pods, o[i].seconds * 1e3,
                       (double)o[i].pods / o[i].seconds, o[i].claims, o[i].unplaced, o[i].generic_claims,
                       o[i].lower_bound, (double)o[i].generic_claims / (double)o[i].lower_bound, o[i].rss_kib);
        }
        const struct outcome *b = &o[2];
        printf("RESULT name=scheduler pods=%zu pods_per_sec=%.0f claims=%zu lower_bound_ratio=%.3f rss_kib=%ld\n",
               b->pods, (double)b->pods / b->seconds, b->claims, (double)b->generic_claims / (double)b->lower_bound,
               b->rss_kib);
        shapes_catalog_free(cat);
        return 0;
}
