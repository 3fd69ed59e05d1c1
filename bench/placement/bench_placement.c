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
 * whole memory free). Three fixed, seeded streams are replayed request by request; a refused request is
 * skipped and the stream goes on. Both placers see the same requests and keep their own accounting:
 * the baseline charges the whole VM memory to every node it touches (as the seed does), ours charges
 * each node its numaN share. Columns:
 *   vCPUs-valid      vCPUs of VMs whose numaN memories add up to the VM memory (Proxmox starts no other)
 *   vCPUs-to-1st-no  vCPUs placed before the placer's first refusal (same requests, no admission bias)
 *   one-NUMA%, sibling-pairs% (guest vCPUs 2k,2k+1 on one core), one-L3%: over the VMs placed
 *   split        VMs on several NUMA nodes
 *   odd-nodes    guest NUMA nodes of split VMs with an odd vCPU count, on SMT hosts (an odd VM may have one)
 *   small-nodes  guest NUMA nodes holding less than a quarter of their VM's vCPUs
 *   unforced     of those, the ones in VMs that free memory did not force: at most 8 nodes, each able to
 *                hold a quarter of the VM by its free memory (memory following vCPUs) and its CPUs were
 *                they all free, could have held the VM
 *   fallback     VMs placed by the allocator's fallback (no preferred layout fitted; ours only)
 *   x-seed       ours / baseline vCPUs-valid of the stream ("-" when the baseline starts none)
 * RESULT: min_vcpu_ratio = min over every topology and stream (the big one included) of ours / baseline
 * startable vCPUs, where the baseline starts some; total_vcpu_ratio = the same over all of them summed;
 * smt_pair_pct = our sibling pairs over the big stream on SMT hosts (all_smt_pair_pct: every stream);
 * odd_nodes, small_nodes, small_unforced, fallback_vms = the columns above summed over every stream (ours);
 * invalid_numa = our placements failing placement_validate or overlapping; numa_local_pct = our VMs on
 * one node among those one node could hold when they came; us_per_alloc = our mean time per
 * placement_place call (refusals included) on the topology with the most CPUs; max_us_per_alloc = the
 * worst stream mean over all topologies. */

extern char **environ;

#define GIB (UINT64_C(1) << 30)
#define MIX_REQUESTS 600
#define LARGE_REQUESTS 60
#define BIG_REQUESTS 120
#define N_STREAMS 3
#define SYNTHETIC_GIB_PER_CPU 4 /* for topologies whose NUMA nodes carry no memory size (CPUID-built) */
#define MAX_REQ 1024

struct req_stream {
        const char *name;
        size_t n;
        struct placement_request req[MAX_REQ];
        unsigned life[MAX_REQ]; /* request i's VM leaves before request i + life[i]; 0 = it stays */
};

struct tally {
        unsigned vms, vcpus, one_numa, pairs, sib_pairs, one_l3, invalid;
        unsigned valid_vcpus; /* vCPUs of VMs whose numaN memories add up (Proxmox starts only those) */
        unsigned fifo_vcpus;  /* vCPUs placed before the placer's first refusal */
        bool refused;
        unsigned local_possible, local_done; /* VMs one node could hold / of those, placed on one node */
        unsigned split, odd_nodes, small_nodes, small_unforced, fallback;
        bool quarter_possible; /* set before each measure: memory let the VM split in quarters or more */
        unsigned calls;
        double ns;
};

struct host {
        const char *name;
        struct topology *t;
        int *core_of;     /* CPU -> core index */
        unsigned *node_n; /* scratch: vCPUs of one VM per topology node */
        int max_cpu;
        bool smt, has_l3, synthetic_mem;
        unsigned n_cpus, max_node_cpus, nodes_with_cpus;
        uint64_t max_node_mem;
};

struct totals {
        double min_ratio, max_us;
        unsigned valid_base, valid_ours;
        unsigned big_pairs, big_sib, all_pairs, all_sib, odd_nodes, small_nodes, small_unforced, fallback;
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
        h->node_n = calloc(t->n_numa_nodes + 1, sizeof(unsigned));
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

/* Large VMs as operators size them: 16, 24, 32 or 48 vCPUs with 4 GiB per vCPU, whatever the host. Each
 * leaves again 3 to 8 requests later, so hosts churn and splits land on partly used nodes. */
static void stream_big(struct req_stream *s) {
        static const unsigned sizes[] = { 16, 24, 32, 48 };
        uint64_t seed = 0x5eed0003;
        s->name = "big";
        s->n = 0;
        for (size_t i = 0; i < BIG_REQUESTS; i++) {
                unsigned v = sizes[rnd(&seed) % 4];
                s->life[s->n] = 3 + rnd(&seed) % 6;
                s->req[s->n++] = (struct placement_request){ .vcpus = v, .memory_bytes = (uint64_t)v * 4 * GIB };
        }
}

/* The VMs that leave before request i: j + life[j] == i. */
static bool leaves_now(const struct req_stream *s, size_t j, size_t i) {
        return s->life[j] && j + s->life[j] == i;
}

/* Give CPUs back to the host and to their nodes (memory is the caller's). */
static void release_cpus(const struct topology *t, struct capacity *c, const struct cpuset *cpus) {
        struct cpuset *node = cpuset_new();
        cpuset_or(c->free_cpus, cpus);
        cpuset_andnot(c->pinned_cpus, cpus);
        for (size_t i = 0; i < c->n_numa && i < t->n_numa_nodes; i++) {
                cpuset_zero(node);
                node_cpus_mask(t, i, node);
                cpuset_and(node, cpus);
                cpuset_or(c->numa[i].free_cpus, node);
        }
        cpuset_free(node);
        c->cpus_free = cpuset_count(c->free_cpus);
}

static void node_give(struct capacity_numa *cn, uint64_t bytes) {
        cn->memory_free_bytes += bytes;
        if (cn->memory_free_bytes > cn->memory_total_bytes)
                cn->memory_free_bytes = cn->memory_total_bytes;
}

/* Undo baseline_charge: the whole VM memory goes back to every node the VM touched. */
static void baseline_release(const struct host *h, struct capacity *c, const struct bench_vm *vm) {
        const struct topology *t = h->t;
        for (size_t i = 0; i < c->n_numa && i < t->n_numa_nodes; i++) {
                bool hit = false;
                for (size_t k = 0; k < t->n_cores && !hit; k++)
                        hit = t->cores[k].numa_node == (int)i && cpuset_intersects(t->cores[k].cpus, vm->cpus);
                if (hit)
                        node_give(&c->numa[i], vm->memory_bytes);
        }
        release_cpus(t, c, vm->cpus);
}

/* Undo placement_charge: each node gets its numaN memory back. */
static void ours_release(const struct host *h, struct capacity *c, const struct placement *p) {
        for (size_t j = 0; j < p->n_numa; j++)
                for (size_t i = 0; i < c->n_numa; i++)
                        if (c->numa[i].id == p->numa[j].node)
                                node_give(&c->numa[i], p->numa[j].memory_bytes);
        c->memory_free_bytes += p->memory_bytes;
        release_cpus(h->t, c, p->cpus);
}

/* ---------- metrics ---------- */

/* Guest NUMA node shapes of a split VM: odd counts (beyond the one an odd VM needs) on SMT hosts, and
 * nodes under a quarter of the VM. Each guest node mirrors one host node, so count vCPUs per host node. */
static void measure_split(const struct host *h, const struct bench_vm *vm, struct tally *ty) {
        const struct topology *t = h->t;
        unsigned used = 0, odd = 0, small = 0;
        memset(h->node_n, 0, t->n_numa_nodes * sizeof(unsigned));
        for (unsigned k = 0; k < vm->n_vcpus; k++) {
                int node = t->cores[h->core_of[vm->vcpu_map[k]]].numa_node;
                if (node >= 0)
                        h->node_n[node]++;
        }
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                used += h->node_n[i] > 0;
                odd += h->node_n[i] % 2;
                small += h->node_n[i] > 0 && 4 * h->node_n[i] < vm->n_vcpus;
        }
        if (used < 2)
                return;
        ty->split++;
        ty->small_nodes += small;
        ty->small_unforced += ty->quarter_possible ? small : 0;
        if (h->smt)
                ty->odd_nodes += odd - (vm->n_vcpus % 2 && odd > 0);
}



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
        measure_split(h, vm, ty);
}

/* Could the VM be split in guest nodes of a quarter or more as far as free memory goes (each node's CPUs
 * counted as if free; sibling pairs on SMT hosts)? */
static bool quarter_possible(const struct host *h, const struct capacity *c, const struct placement_request *req) {
        unsigned v = req->vcpus, q = (v + 3) / 4, caps[64] = { 0 }, n = 0;
        struct cpuset *node = cpuset_new();
        q += h->smt ? q % 2 : 0;
        for (size_t i = 0; i < c->n_numa && n < 64; i++) {
                cpuset_zero(node);
                unsigned cpus = (unsigned)node_cpus_mask(h->t, i, node);
                uint64_t by_mem = c->numa[i].memory_free_bytes / (req->memory_bytes / v);
                unsigned cap = by_mem < cpus ? (unsigned)by_mem : cpus;
                cap -= h->smt ? cap % 2 : 0;
                if (cap >= q)
                        caps[n++] = cap;
        }
        cpuset_free(node);
        unsigned long sum = 0;
        for (unsigned k = 0; k < PLACEMENT_MAX_NUMA && k < n; k++) {
                unsigned best = 0;
                for (unsigned i = 1; i < n; i++)
                        best = caps[i] > caps[best] ? i : best;
                sum += caps[best];
                caps[best] = 0;
        }
        return sum >= v;
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
        if (r < 0)
                fprintf(stderr, "%s #%zu %u vCPUs %llu GiB: refused %s\n", placer, i, req->vcpus,
                        (unsigned long long)(req->memory_bytes / GIB), why ? why : "");
        else
                fprintf(stderr, "%s #%zu %u vCPUs %llu GiB: placed, NUMA nodes %zu%s%s%s\n", placer, i, req->vcpus,
                        (unsigned long long)(req->memory_bytes / GIB), n_numa, why ? " (" : "", why ? why : "",
                        why ? ")" : "");
}

/* "0:16+2:16 from 0:20/80G ..." for the trace: each guest node's host node and vCPUs, then what each
 * node had free (CPUs / GiB) when the VM came. */
static void shares(const struct capacity *c, const struct placement *p, char *buf, size_t len) {
        size_t at = 0;
        buf[0] = 0;
        for (size_t j = 0; j < p->n_numa && at < len; j++)
                at += (size_t)snprintf(buf + at, len - at, "%s%d:%u", j ? "+" : "", p->numa[j].node, p->numa[j].n_vcpus);
        for (size_t i = 0; i < c->n_numa && at < len; i++)
                at += (size_t)snprintf(buf + at, len - at, "%s%d:%u/%lluG", i ? " " : " from ", c->numa[i].id,
                                       cpuset_count(c->numa[i].free_cpus),
                                       (unsigned long long)(c->numa[i].memory_free_bytes / GIB));
}

static void run_baseline(const struct host *h, const struct req_stream *s, struct tally *ty) {
        struct capacity *c = host_capacity((struct host *)h);
        struct bench_vm *live = calloc(s->n + 1, sizeof(*live));
        for (size_t i = 0; i < s->n; i++) {
                for (size_t j = 0; j < i; j++)
                        if (leaves_now(s, j, i) && live[j].cpus) {
                                baseline_release(h, c, &live[j]);
                                bench_vm_done(&live[j]);
                        }
                struct bench_vm vm = { 0 };
                ty->quarter_possible = quarter_possible(h, c, &s->req[i]);
                int r = baseline_place(h->t, c, &s->req[i], &vm);
                trace(h, "baseline", i, &s->req[i], r, NULL, vm.n_numa);
                ty->refused |= r < 0;
                if (r < 0)
                        continue;
                measure(h, &vm, ty);
                baseline_charge(h->t, c, &vm);
                live[i] = vm;
        }
        for (size_t i = 0; i < s->n; i++)
                bench_vm_done(&live[i]);
        free(live);
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
        ty->fallback += p->fallback;
        cpuset_or(used, p->cpus);
}

static void run_ours(const struct host *h, const struct req_stream *s, struct tally *ty) {
        struct capacity *c = host_capacity((struct host *)h);
        struct cpuset *used = cpuset_new();
        struct placement **live = calloc(s->n + 1, sizeof(*live));
        char why[512];
        for (size_t i = 0; i < s->n; i++) {
                for (size_t j = 0; j < i; j++)
                        if (leaves_now(s, j, i) && live[j]) {
                                ours_release(h, c, live[j]);
                                cpuset_andnot(used, live[j]->cpus);
                                placement_free(live[j]);
                                live[j] = NULL;
                        }
                bool could = one_node_could(c, &s->req[i]);
                ty->quarter_possible = quarter_possible(h, c, &s->req[i]);
                struct placement *p = NULL;
                double t0 = now_ns();
                int r = placement_place(h->t, c, &s->req[i], &p, why, sizeof why);
                ty->ns += now_ns() - t0;
                ty->calls++;
                ty->local_possible += could;
                if (r == 0)
                        shares(c, p, why, sizeof why);
                trace(h, "ours", i, &s->req[i], r, why, r < 0 ? 0 : p->n_numa);
                ty->refused |= r < 0;
                if (r < 0)
                        continue;
                ty->local_done += could && p->n_numa == 1;
                ours_record(h, p, used, ty);
                placement_charge(c, p);
                live[i] = p;
        }
        for (size_t i = 0; i < s->n; i++)
                placement_free(live[i]);
        free(live);
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

static void print_row(const struct host *h, const char *stream, const char *placer, const struct tally *ty,
                      const struct tally *base) {
        char numa[16], sib[16], l3[16], us[16], odd[16], ratio[16], fb[16];
        pct(numa, sizeof numa, ty->one_numa, ty->vms, true);
        pct(sib, sizeof sib, ty->sib_pairs, ty->pairs, h->smt);
        pct(l3, sizeof l3, ty->one_l3, ty->vms, h->has_l3);
        if (ty->calls)
                snprintf(us, sizeof us, "%.2f", ty->ns / ty->calls / 1000.0);
        else
                snprintf(us, sizeof us, "-");
        if (h->smt)
                snprintf(odd, sizeof odd, "%u", ty->odd_nodes);
        else
                snprintf(odd, sizeof odd, "-");
        if (base)
                snprintf(fb, sizeof fb, "%u", ty->fallback);
        else
                snprintf(fb, sizeof fb, "-");
        if (base && base->valid_vcpus)
                snprintf(ratio, sizeof ratio, "%.3f", (double)ty->valid_vcpus / base->valid_vcpus);
        else
                snprintf(ratio, sizeof ratio, "-");
        printf("%-6s %-9s %5u %6u %11u %15u %10s %15s %8s %13u %9s %6u %9s %11u %8u %8s %7s\n", stream, placer,
               ty->vms, ty->vcpus, ty->valid_vcpus, ty->fifo_vcpus, numa, sib, l3, ty->invalid, us, ty->split, odd,
               ty->small_nodes, ty->small_unforced, fb, ratio);
}

static void print_header(const struct host *h) {
        printf("\n== %s: %u CPUs, %u NUMA nodes with CPUs, %zu L3, %s; largest node %u CPUs / %llu GiB%s\n", h->name,
               h->n_cpus, h->nodes_with_cpus, h->t->n_l3_caches, h->smt ? "SMT" : "no SMT", h->max_node_cpus,
               (unsigned long long)(h->max_node_mem / GIB),
               h->synthetic_mem ? " (memory synthetic: 4 GiB per CPU, the topology has none)" : "");
        printf("%-6s %-9s %5s %6s %11s %15s %10s %15s %8s %13s %9s %6s %9s %11s %8s %8s %7s\n", "stream", "placer",
               "VMs", "vCPUs", "vCPUs-valid", "vCPUs-to-1st-no", "one-NUMA%", "sibling-pairs%", "one-L3%",
               "invalid-numa", "us/alloc", "split", "odd-nodes", "small-nodes", "unforced", "fallback", "x-seed");
}

/* ---------- per topology ---------- */

/* Fold one stream's tallies into the totals. */
static void add_case(const struct host *h, const struct req_stream *s, const struct tally *base, const struct tally *ours,
                     struct totals *tot) {
        if (base->valid_vcpus > 0 && (double)ours->valid_vcpus / base->valid_vcpus < tot->min_ratio)
                tot->min_ratio = (double)ours->valid_vcpus / base->valid_vcpus;
        tot->valid_base += base->valid_vcpus;
        tot->valid_ours += ours->valid_vcpus;
        tot->invalid_ours += ours->invalid;
        tot->invalid_base += base->invalid;
        tot->local_possible += ours->local_possible;
        tot->local_done += ours->local_done;
        tot->odd_nodes += h->smt ? ours->odd_nodes : 0;
        tot->small_nodes += ours->small_nodes;
        tot->small_unforced += ours->small_unforced;
        tot->fallback += ours->fallback;
        if (h->smt) {
                tot->all_pairs += ours->pairs;
                tot->all_sib += ours->sib_pairs;
        }
        if (h->smt && strcmp(s->name, "big") == 0) {
                tot->big_pairs += ours->pairs;
                tot->big_sib += ours->sib_pairs;
        }
        if (ours->calls && ours->ns / ours->calls / 1000.0 > tot->max_us)
                tot->max_us = ours->ns / ours->calls / 1000.0;
}

static void bench_host(struct host *h, struct totals *tot) {
        struct req_stream *streams = calloc(N_STREAMS, sizeof(*streams));
        capacity_release(host_capacity(h)); /* fills the host's sizes */
        stream_mix(&streams[0], h);
        stream_large(&streams[1], h);
        stream_big(&streams[2]);
        print_header(h);
        struct tally all_ours = { 0 };
        unsigned valid_base = 0, valid_ours = 0;
        for (int k = 0; k < N_STREAMS; k++) {
                struct tally base = { 0 }, ours = { 0 };
                run_baseline(h, &streams[k], &base);
                run_ours(h, &streams[k], &ours);
                print_row(h, streams[k].name, "baseline", &base, NULL);
                print_row(h, streams[k].name, "ours", &ours, &base);
                valid_base += base.valid_vcpus;
                valid_ours += ours.valid_vcpus;
                add_case(h, &streams[k], &base, &ours, tot);
                all_ours.ns += ours.ns;
                all_ours.calls += ours.calls;
        }
        printf("startable vCPUs, all streams: baseline %u, ours %u\n", valid_base, valid_ours);
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
                free(h.node_n);
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
               "requests bigger than one node; big: %d requests of 16/24/32/48 vCPUs x 4 GiB per vCPU, each leaving 3-8 requests later)\n",
               dir, MIX_REQUESTS, LARGE_REQUESTS, BIG_REQUESTS);
        int failed = bench_all(dir, tmp, &tot);
        char *rm[] = { "rm", "-rf", tmp, NULL };
        run_tool(rm);
        double local = tot.local_possible ? 100.0 * tot.local_done / tot.local_possible : 100.0;
        printf("\nbaseline invalid numaN memory sums: %u (defect 1); topologies that failed to load: %d\n",
               tot.invalid_base, failed);
        printf("RESULT name=placement min_vcpu_ratio=%.3f total_vcpu_ratio=%.3f smt_pair_pct=%.1f all_smt_pair_pct=%.1f "
               "odd_nodes=%u small_nodes=%u small_unforced=%u fallback_vms=%u invalid_numa=%u numa_local_pct=%.1f "
               "us_per_alloc=%.2f max_us_per_alloc=%.2f\n",
               tot.min_ratio > 1e8 ? 0.0 : tot.min_ratio, tot.valid_base ? (double)tot.valid_ours / tot.valid_base : 0.0,
               tot.big_pairs ? 100.0 * tot.big_sib / tot.big_pairs : 100.0,
               tot.all_pairs ? 100.0 * tot.all_sib / tot.all_pairs : 100.0, tot.odd_nodes, tot.small_nodes, tot.small_unforced,
               tot.fallback, tot.invalid_ours, local, tot.us_largest, tot.max_us);
        return failed || tot.invalid_ours ? 1 : 0;
}
