/* bench/placement: replay seeded VM request streams on every reference topology, seed policy vs ours. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Method. Each topology starts as an empty host (every online CPU of a node's cores free, each node's
 * whole memory free). Two fixed, seeded streams are replayed request by request; a refused request is
 * skipped and the stream goes on. Both placers see the same requests and keep their own accounting:
 * the baseline charges the whole VM memory to every node it touches (as the seed does), ours charges
 * each node its numaN share. Columns:
 *   vCPUs-valid      vCPUs of VMs whose numaN memories add up to the VM memory (Proxmox starts no other)
 *   vCPUs-to-1st-no  vCPUs placed before the placer's first refusal (same requests, no admission bias)
 *   one-NUMA%, sibling-pairs% (guest vCPUs 2k,2k+1 on one core), one-L3%: over the VMs placed
 * RESULT: min_vcpu_ratio = min over topologies of ours / baseline startable vCPUs (both streams);
 * invalid_numa = our placements failing placement_validate or overlapping; numa_local_pct = our VMs on
 * one node among those one node could hold when they came; us_per_alloc = our mean time per
 * placement_place call (refusals included) on the topology with the most CPUs. */

extern char **environ;

#define GIB (UINT64_C(1) << 30)
#define MIX_REQUESTS 600
#define LARGE_REQUESTS 60
#define SYNTHETIC_GIB_PER_CPU 4 /* for topologies whose NUMA nodes carry no memory size (CPUID-built) */
#define MAX_REQ 1024

struct req_stream {
        const char *name;
        size_t n;
        struct placement_request req[MAX_REQ];
};

struct tally {
        unsigned vms, vcpus, one_numa, pairs, sib_pairs, one_l3, invalid;
        unsigned valid_vcpus; /* vCPUs of VMs whose numaN memories add up (Proxmox starts only those) */
        unsigned fifo_vcpus;  /* vCPUs placed before the placer's first refusal */
        bool refused;
        unsigned local_possible, local_done; /* VMs one node could hold / of those, placed on one node */
        unsigned calls;
        double ns;
};

struct host {
        const char *name;
        struct topology *t;
        int *core_of;     /* CPU -> core index */
        int max_cpu;
        bool smt, has_l3, synthetic_mem;
        unsigned n_cpus, max_node_cpus, nodes_with_cpus;
        uint64_t max_node_mem;
};

struct totals {
        double min_ratio;
        unsigned invalid_ours, invalid_base, local_possible, local_done;
        double us_largest;
        unsigned largest_cpus;
};

/* ---------- helpers ---------- */

static int run_tool(char *const argv[]) {
        pid_t pid;
        int status = 0;
        if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0)
                return -errno;
        if (waitpid(pid, &status, 0) < 0)
                return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

static double now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static unsigned rnd(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return (unsigned)(*s >> 11);
}

static uint64_t node_cpus_mask(const struct topology *t, size_t i, struct cpuset *out) {
        for (size_t k = 0; k < t->n_cores; k++)
                if (t->cores[k].numa_node == (int)i)
                        cpuset_or(out, t->cores[k].cpus);
        cpuset_and(out, t->online);
        return cpuset_count(out);
}

/* ---------- the host model ---------- */

static void host_index(struct host *h) {
        const struct topology *t = h->t;
        h->max_cpu = cpuset_last(t->cpus);
        h->core_of = malloc(((size_t)h->max_cpu + 2) * sizeof(int));
        for (int c = 0; c <= h->max_cpu; c++)
                h->core_of[c] = -1;
        for (size_t k = 0; k < t->n_cores; k++) {
                CPUSET_FOREACH(cpu, t->cores[k].cpus)
                        h->core_of[cpu] = (int)k;
                h->smt |= cpuset_count(t->cores[k].cpus) > 1;
                h->has_l3 |= t->cores[k].l3 >= 0;
        }
        h->synthetic_mem = true;
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                h->synthetic_mem &= t->numa_nodes[i].memory_bytes == 0;
}

/* An empty host: every online CPU of a node's cores free, the node's whole memory free. */
static struct capacity *host_capacity(struct host *h) {
        const struct topology *t = h->t;
        struct capacity *c = calloc(1, sizeof(*c));
        c->free_cpus = cpuset_new();
        c->pinned_cpus = cpuset_new();
        c->n_numa = t->n_numa_nodes;
        c->numa = calloc(t->n_numa_nodes + 1, sizeof(*c->numa));
        h->n_cpus = h->max_node_cpus = h->nodes_with_cpus = 0;
        h->max_node_mem = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                struct capacity_numa *cn = &c->numa[i];
                cn->id = t->numa_nodes[i].id;
                cn->free_cpus = cpuset_new();
                unsigned n = (unsigned)node_cpus_mask(t, i, cn->free_cpus);
                uint64_t mem = h->synthetic_mem ? (uint64_t)n * SYNTHETIC_GIB_PER_CPU * GIB : t->numa_nodes[i].memory_bytes;
                cn->memory_total_bytes = cn->memory_free_bytes = mem;
                cpuset_or(c->free_cpus, cn->free_cpus);
                h->n_cpus += n;
                h->nodes_with_cpus += n > 0;
                h->max_node_cpus = n > h->max_node_cpus ? n : h->max_node_cpus;
                if (n > 0 && mem > h->max_node_mem)
                        h->max_node_mem = mem;
                c->memory_free_bytes += mem;
        }
        c->memory_total_bytes = c->memory_free_bytes;
        c->usable_cpus = cpuset_dup(c->free_cpus);
        c->cpus_free = cpuset_count(c->free_cpus);
        return c;
}

static void capacity_release(struct capacity *c) {
        for (size_t i = 0; i < c->n_numa; i++)
                cpuset_free(c->numa[i].free_cpus);
        free(c->numa);
        cpuset_free(c->free_cpus);
        cpuset_free(c->pinned_cpus);
        cpuset_free(c->usable_cpus);
        free(c);
}

/* ---------- streams ---------- */

/* Ordinary VMs: 1/2/4/8/16 vCPUs with 2-8 GiB per vCPU. Shapes that no node of the empty host could
 * hold are left to the large stream (they are redrawn), so this stream measures single-node packing. */
static void stream_mix(struct req_stream *s, const struct host *h) {
        static const unsigned sizes[] = { 1, 2, 4, 8, 16 };
        uint64_t seed = 0x5eed0001;
        s->name = "mix";
        s->n = 0;
        for (unsigned tries = 0; s->n < MIX_REQUESTS && tries < 100 * MIX_REQUESTS; tries++) {
                unsigned v = sizes[rnd(&seed) % 5];
                uint64_t mem = v * (2 + rnd(&seed) % 7) * GIB;
                if (v <= h->max_node_cpus && mem <= h->max_node_mem)
                        s->req[s->n++] = (struct placement_request){ .vcpus = v, .memory_bytes = mem };
        }
}

static unsigned even_up(unsigned v) {
        return v + (v & 1);
}

/* VMs that no node of the empty host can hold, but the host can: 1.25x to 2x the largest node's CPUs
 * (2-4 GiB per vCPU), or a quarter node's CPUs with 1.25x to 1.75x its memory. Both are capped to
 * what the whole host has. */
static void stream_large(struct req_stream *s, const struct host *h) {
        static const unsigned quarter_factors[] = { 5, 6, 7, 8 };
        uint64_t seed = 0x5eed0002, host_mem = h->max_node_mem * h->nodes_with_cpus;
        s->name = "large";
        s->n = 0;
        for (size_t i = 0; i < LARGE_REQUESTS && h->nodes_with_cpus > 1; i++) {
                unsigned v, f = quarter_factors[rnd(&seed) % 4];
                uint64_t mem;
                if (rnd(&seed) % 3 != 2) {
                        v = even_up(h->max_node_cpus * f / 4);
                        v = v > h->n_cpus ? h->n_cpus : v;
                        mem = v * (2 + rnd(&seed) % 3) * GIB;
                } else {
                        v = even_up(h->max_node_cpus / 4 > 2 ? h->max_node_cpus / 4 : 2);
                        mem = (h->max_node_mem / GIB * f / 4) * GIB;
                }
                mem = mem > host_mem ? host_mem / GIB * GIB : mem;
                v = v > PLACEMENT_MAX_VCPUS ? PLACEMENT_MAX_VCPUS : v;
                s->req[s->n++] = (struct placement_request){ .vcpus = v, .memory_bytes = mem ? mem : GIB };
        }
}

/* ---------- metrics ---------- */

static void measure(const struct host *h, const struct bench_vm *vm, struct tally *ty) {
        const struct topology *t = h->t;
        bool invalid = vm->numa_sum != vm->memory_bytes || vm->n_numa > PLACEMENT_MAX_NUMA;
        ty->vms++;
        ty->vcpus += vm->n_vcpus;
        ty->fifo_vcpus += ty->refused ? 0 : vm->n_vcpus;
        ty->valid_vcpus += invalid ? 0 : vm->n_vcpus;
        ty->one_numa += vm->n_numa == 1;
        ty->invalid += invalid;
        for (unsigned k = 0; k + 1 < vm->n_vcpus; k += 2) {
                int a = h->core_of[vm->vcpu_map[k]], b = h->core_of[vm->vcpu_map[k + 1]];
                ty->pairs++;
                ty->sib_pairs += a >= 0 && a == b;
        }
        int l3 = t->cores[h->core_of[vm->vcpu_map[0]]].l3;
        bool one = l3 >= 0;
        for (unsigned k = 1; k < vm->n_vcpus && one; k++)
                one = t->cores[h->core_of[vm->vcpu_map[k]]].l3 == l3;
        ty->one_l3 += one;
}

static bool one_node_could(const struct capacity *c, const struct placement_request *req) {
        for (size_t i = 0; i < c->n_numa; i++)
                if (cpuset_count(c->numa[i].free_cpus) >= req->vcpus && c->numa[i].memory_free_bytes >= req->memory_bytes)
                        return true;
        return false;
}

/* ---------- the two placers ---------- */

/* BENCH_TRACE=<topology name> prints every request's outcome for that topology. */
static void trace(const struct host *h, const char *placer, size_t i, const struct placement_request *req, int r,
                  const char *why, size_t n_numa) {
        const char *want = getenv("BENCH_TRACE");
        if (!want || strcmp(want, h->name) != 0)
                return;
        fprintf(stderr, "%s #%zu %u vCPUs %llu GiB: %s%s%zu\n", placer, i, req->vcpus,
                (unsigned long long)(req->memory_bytes / GIB), r < 0 ? "refused " : "placed, NUMA nodes ",
                why ? why : "", r < 0 ? (size_t)0 : n_numa);
}

static void run_baseline(const struct host *h, const struct req_stream *s, struct tally *ty) {
        struct capacity *c = host_capacity((struct host *)h);
        for (size_t i = 0; i < s->n; i++) {
                struct bench_vm vm = { 0 };
                int r = baseline_place(h->t, c, &s->req[i], &vm);
                trace(h, "baseline", i, &s->req[i], r, NULL, vm.n_numa);
                ty->refused |= r < 0;
                if (r < 0)
                        continue;
                measure(h, &vm, ty);
                baseline_charge(h->t, c, &vm);
                bench_vm_done(&vm);
        }
        capacity_release(c);
}

/* Ours: placement_place, checked with placement_validate and for overlap with earlier VMs; a failed
 * check counts as an invalid placement. */
static void ours_record(const struct host *h, const struct placement *p, struct cpuset *used, struct tally *ty) {
        char why[256] = "";
        bool bad = placement_validate(h->t, p, why, sizeof why) < 0;
        if (!bad && cpuset_intersects(p->cpus, used)) {
                bad = true;
                snprintf(why, sizeof why, "CPUs given twice");
        }
        if (bad)
                fprintf(stderr, "%s: invalid placement: %s\n", h->name, why);
        uint64_t sum = 0;
        for (size_t j = 0; j < p->n_numa; j++)
                sum += p->numa[j].memory_bytes;
        struct bench_vm vm = { .cpus = p->cpus, .vcpu_map = p->vcpu_map, .n_vcpus = p->n_vcpus,
                               .memory_bytes = p->memory_bytes, .n_numa = p->n_numa, .numa_sum = bad ? 0 : sum };
        measure(h, &vm, ty);
        cpuset_or(used, p->cpus);
}

static void run_ours(const struct host *h, const struct req_stream *s, struct tally *ty) {
        struct capacity *c = host_capacity((struct host *)h);
        struct cpuset *used = cpuset_new();
        char why[512];
        for (size_t i = 0; i < s->n; i++) {
                bool could = one_node_could(c, &s->req[i]);
                struct placement *p = NULL;
                double t0 = now_ns();
                int r = placement_place(h->t, c, &s->req[i], &p, why, sizeof why);
                ty->ns += now_ns() - t0;
                ty->calls++;
                ty->local_possible += could;
                trace(h, "ours", i, &s->req[i], r, r < 0 ? why : NULL, r < 0 ? 0 : p->n_numa);
                ty->refused |= r < 0;
                if (r < 0)
                        continue;
                ty->local_done += could && p->n_numa == 1;
                ours_record(h, p, used, ty);
                placement_charge(c, p);
                placement_free(p);
        }
        cpuset_free(used);
        capacity_release(c);
}

/* ---------- output ---------- */

static void pct(char *buf, size_t len, unsigned num, unsigned den, bool applicable) {
        if (!applicable || den == 0)
                snprintf(buf, len, "-");
        else
                snprintf(buf, len, "%.1f", 100.0 * num / den);
}

static void print_row(const struct host *h, const char *stream, const char *placer, const struct tally *ty) {
        char numa[16], sib[16], l3[16], us[16];
        pct(numa, sizeof numa, ty->one_numa, ty->vms, true);
        pct(sib, sizeof sib, ty->sib_pairs, ty->pairs, h->smt);
        pct(l3, sizeof l3, ty->one_l3, ty->vms, h->has_l3);
        if (ty->calls)
                snprintf(us, sizeof us, "%.2f", ty->ns / ty->calls / 1000.0);
        else
                snprintf(us, sizeof us, "-");
        printf("%-6s %-9s %5u %6u %11u %15u %10s %15s %8s %13u %9s\n", stream, placer, ty->vms, ty->vcpus,
               ty->valid_vcpus, ty->fifo_vcpus, numa, sib, l3, ty->invalid, us);
}

static void print_header(const struct host *h) {
        printf("\n== %s: %u CPUs, %u NUMA nodes with CPUs, %zu L3, %s; largest node %u CPUs / %llu GiB%s\n", h->name,
               h->n_cpus, h->nodes_with_cpus, h->t->n_l3_caches, h->smt ? "SMT" : "no SMT", h->max_node_cpus,
               (unsigned long long)(h->max_node_mem / GIB),
               h->synthetic_mem ? " (memory synthetic: 4 GiB per CPU, the topology has none)" : "");
        printf("%-6s %-9s %5s %6s %11s %15s %10s %15s %8s %13s %9s\n", "stream", "placer", "VMs", "vCPUs",
               "vCPUs-valid", "vCPUs-to-1st-no", "one-NUMA%", "sibling-pairs%", "one-L3%", "invalid-numa", "us/alloc");
}

/* ---------- per topology ---------- */

static void bench_host(struct host *h, struct totals *tot) {
        struct req_stream *streams = calloc(2, sizeof(*streams));
        capacity_release(host_capacity(h)); /* fills the host's sizes */
        stream_mix(&streams[0], h);
        stream_large(&streams[1], h);
        print_header(h);
        struct tally all_ours = { 0 };
        unsigned valid_base = 0, valid_ours = 0;
        for (int k = 0; k < 2; k++) {
                struct tally base = { 0 }, ours = { 0 };
                run_baseline(h, &streams[k], &base);
                run_ours(h, &streams[k], &ours);
                print_row(h, streams[k].name, "baseline", &base);
                print_row(h, streams[k].name, "ours", &ours);
                valid_base += base.valid_vcpus;
                valid_ours += ours.valid_vcpus;
                tot->invalid_ours += ours.invalid;
                tot->invalid_base += base.invalid;
                tot->local_possible += ours.local_possible;
                tot->local_done += ours.local_done;
                all_ours.ns += ours.ns;
                all_ours.calls += ours.calls;
        }
        if (valid_base > 0 && (double)valid_ours / valid_base < tot->min_ratio)
                tot->min_ratio = (double)valid_ours / valid_base;
        printf("startable vCPUs, both streams: baseline %u, ours %u\n", valid_base, valid_ours);
        if (h->n_cpus > tot->largest_cpus && all_ours.calls) {
                tot->largest_cpus = h->n_cpus;
                tot->us_largest = all_ours.ns / all_ours.calls / 1000.0;
        }
        free(streams);
}

/* ---------- loading ---------- */

static int load_entry(const char *dir, const char *tmp, json_t *e, struct topology **ret_t) {
        const char *format = json_string_value(json_object_get(e, "format"));
        const char *file = json_string_value(json_object_get(e, "file"));
        json_t *load = json_object_get(e, "load");
        char path[4096], root[4096], err[512] = "";
        struct topology_source src = { 0 };
        if (snprintf(path, sizeof path, "%s/%s", dir, file ? file : "") >= (int)sizeof path)
                return -ENAMETOOLONG;
        if (format && strcmp(format, "linux-sysfs-tarball") == 0) {
                char *argv[] = { "tar", "xjf", path, "-C", (char *)tmp, NULL };
                if (run_tool(argv) < 0)
                        return fprintf(stderr, "%s: cannot extract\n", path), -EIO;
                if (snprintf(root, sizeof root, "%s/%s", tmp, json_string_value(json_object_get(load, "fsroot_subdir"))) >=
                    (int)sizeof root)
                        return -ENAMETOOLONG;
                src.fsroot = root;
        } else {
                src.xml_file = path;
        }
        int r = topology_load(&src, ret_t, err, sizeof err);
        if (r < 0)
                fprintf(stderr, "%s: topology_load: %s\n", file, err);
        return r;
}

static const char *topologies_dir(int argc, char **argv, char *buf, size_t len) {
        const char *base = argc > 1 ? argv[1] : getenv("PVESCALE_SHARED");
        if (!base)
                base = "../shared";
        snprintf(buf, len, "%s/manifest.json", base);
        if (access(buf, R_OK) == 0) {
                snprintf(buf, len, "%s", base);
                return buf;
        }
        snprintf(buf, len, "%s/topologies", base);
        return buf;
}

static int bench_all(const char *dir, const char *tmp, struct totals *tot) {
        char mpath[4096];
        json_error_t jerr;
        if (snprintf(mpath, sizeof mpath, "%s/manifest.json", dir) >= (int)sizeof mpath)
                return -ENAMETOOLONG;
        json_t *m = json_load_file(mpath, 0, &jerr);
        if (!m)
                return fprintf(stderr, "%s: %s\n", mpath, jerr.text), -EINVAL;
        json_t *list = json_object_get(m, "topologies"), *e;
        size_t i;
        int failed = 0;
        json_array_foreach(list, i, e) {
                struct host h = { .name = json_string_value(json_object_get(e, "name")) };
                if (load_entry(dir, tmp, e, &h.t) < 0) {
                        failed++;
                        continue;
                }
                host_index(&h);
                bench_host(&h, tot);
                free(h.core_of);
                topology_free(h.t);
        }
        json_decref(m);
        return failed;
}

int main(int argc, char **argv) {
        char dirbuf[4096], tmp[] = "/tmp/pvescale-bench-placement-XXXXXX";
        const char *dir = topologies_dir(argc, argv, dirbuf, sizeof dirbuf);
        if (!mkdtemp(tmp))
                return perror("mkdtemp"), 1;
        struct totals tot = { .min_ratio = 1e9 };
        printf("placement benchmark: %s (mix: %d requests of 1/2/4/8/16 vCPUs x 2-8 GiB per vCPU; large: %d "
               "requests bigger than one node)\n",
               dir, MIX_REQUESTS, LARGE_REQUESTS);
        int failed = bench_all(dir, tmp, &tot);
        char *rm[] = { "rm", "-rf", tmp, NULL };
        run_tool(rm);
        double local = tot.local_possible ? 100.0 * tot.local_done / tot.local_possible : 100.0;
        printf("\nbaseline invalid numaN memory sums: %u (defect 1); topologies that failed to load: %d\n",
               tot.invalid_base, failed);
        printf("RESULT name=placement min_vcpu_ratio=%.3f invalid_numa=%u numa_local_pct=%.1f us_per_alloc=%.2f\n",
               tot.min_ratio > 1e8 ? 0.0 : tot.min_ratio, tot.invalid_ours, local, tot.us_largest);
        return failed || tot.invalid_ours ? 1 : 0;
}
