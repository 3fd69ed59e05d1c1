/* Property test for agent/placement: whenever a valid layout exists, the allocator finds one (issue 39). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "placement.h"
#include "testutil.h"

#define MIB PLACEMENT_MIB
#define GIB (UINT64_C(1) << 30)
#define REQUESTS 150
#define SEEDS 3
#define MAX_SUBSET_NODES 12 /* eligible nodes up to which the oracle tries every node set */
#define MAX_NODES 256

/* Method. Each reference topology starts as an empty host; seeded streams of requests (1 vCPU up to twice
 * the largest node, 1-8 GiB per vCPU, now and then a few vCPUs with more memory than one node has) come
 * and go (each VM leaves 2 to 7 requests later), some with floating vCPUs that pinned VMs must leave room
 * for. Before each request an oracle, written apart from the allocator, decides whether any valid layout
 * exists: a set of at most 8 host NUMA nodes (and no more than the VM has vCPUs or MiB), each with a free
 * CPU and a free MiB, whose free CPUs and free memory add up to the VM, with the vCPUs within what the
 * floating VMs leave. It tries every node set on hosts with up to 12 such nodes, and a first fit in node
 * order beyond. A layout exists <=> the allocator places the VM, validly and within what was free. */

static unsigned rnd(unsigned *seed, unsigned n) {
        *seed = *seed * 1103515245u + 12345u;
        return (*seed >> 16) % n;
}

/* ---------- the host ---------- */

static unsigned node_cores_cpus(const struct topology *t, size_t i, struct cpuset *out) {
        for (size_t k = 0; k < t->n_cores; k++)
                if (t->cores[k].numa_node == (int)i)
                        assert_int_equal(cpuset_or(out, t->cores[k].cpus), 0);
        cpuset_and(out, t->online);
        return cpuset_count(out);
}

/* An empty host: each node's free CPUs are the online CPUs of its cores; 4 GiB per CPU where the
 * topology carries no memory size. */
static struct capacity *cap_empty(const struct topology *t) {
        struct capacity *c = calloc(1, sizeof(*c));
        assert_non_null(c);
        c->free_cpus = cpuset_new();
        c->pinned_cpus = cpuset_new();
        c->n_numa = t->n_numa_nodes;
        c->numa = calloc(t->n_numa_nodes + 1, sizeof(*c->numa));
        assert_true(c->free_cpus && c->pinned_cpus && c->numa);
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                struct capacity_numa *cn = &c->numa[i];
                cn->id = t->numa_nodes[i].id;
                cn->free_cpus = cpuset_new();
                unsigned n = node_cores_cpus(t, i, cn->free_cpus);
                cn->memory_total_bytes = t->numa_nodes[i].memory_bytes ? t->numa_nodes[i].memory_bytes : n * 4 * GIB;
                cn->memory_free_bytes = cn->memory_total_bytes;
                assert_int_equal(cpuset_or(c->free_cpus, cn->free_cpus), 0);
                c->memory_free_bytes += cn->memory_free_bytes;
        }
        c->memory_total_bytes = c->memory_free_bytes;
        c->usable_cpus = cpuset_dup(c->free_cpus);
        c->cpus_free = cpuset_count(c->free_cpus);
        return c;
}

static void cap_free(struct capacity *c) {
        for (size_t i = 0; i < c->n_numa; i++)
                cpuset_free(c->numa[i].free_cpus);
        free(c->numa);
        cpuset_free(c->free_cpus);
        cpuset_free(c->pinned_cpus);
        cpuset_free(c->usable_cpus);
        free(c);
}

/* Undo placement_charge. */
static void cap_uncharge(const struct topology *t, struct capacity *c, const struct placement *p) {
        struct cpuset *node = cpuset_new();
        assert_int_equal(cpuset_or(c->free_cpus, p->cpus), 0);
        cpuset_andnot(c->pinned_cpus, p->cpus);
        for (size_t i = 0; i < c->n_numa; i++) {
                cpuset_zero(node);
                node_cores_cpus(t, i, node);
                cpuset_and(node, p->cpus);
                assert_int_equal(cpuset_or(c->numa[i].free_cpus, node), 0);
                for (size_t j = 0; j < p->n_numa; j++)
                        if (p->numa[j].node == c->numa[i].id)
                                c->numa[i].memory_free_bytes += p->numa[j].memory_bytes;
        }
        c->memory_free_bytes += p->memory_bytes;
        cpuset_free(node);
}

/* ---------- the oracle ---------- */

struct room {
        size_t n;                             /* nodes with a free CPU and a free MiB */
        unsigned cpus[MAX_NODES];             /* their free CPUs */
        uint64_t mib[MAX_NODES];              /* their free MiB */
        unsigned pinnable;                    /* free CPUs host-wide minus the floating vCPUs */
};

static void room_of(const struct topology *t, const struct capacity *c, struct room *r) {
        struct cpuset *node = cpuset_new();
        r->n = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                cpuset_zero(node);
                node_cores_cpus(t, i, node);
                cpuset_and(node, c->free_cpus);
                cpuset_and(node, c->numa[i].free_cpus);
                unsigned cpus = cpuset_count(node);
                uint64_t mib = c->numa[i].memory_free_bytes / MIB;
                if (cpus > 0 && mib > 0 && r->n < MAX_NODES) {
                        r->cpus[r->n] = cpus;
                        r->mib[r->n++] = mib;
                }
        }
        unsigned all = cpuset_count(c->free_cpus);
        r->pinnable = all > c->floating_vcpus ? all - c->floating_vcpus : 0;
        cpuset_free(node);
}

static bool set_holds(const struct room *r, unsigned mask, const struct placement_request *req) {
        unsigned long cpus = 0, k = 0;
        uint64_t mib = 0, want = req->memory_bytes / MIB;
        for (size_t i = 0; i < r->n; i++)
                if (mask >> i & 1) {
                        cpus += r->cpus[i];
                        mib += r->mib[i];
                        k++;
                }
        return k >= 1 && k <= PLACEMENT_MAX_NUMA && k <= req->vcpus && k <= want && cpus >= req->vcpus && mib >= want;
}

/* First fit in node order: each node adds its CPUs and memory until both suffice. */
static bool first_fit_holds(const struct room *r, const struct placement_request *req) {
        unsigned mask = 0;
        for (size_t i = 0; i < r->n && i < 32; i++) {
                mask |= 1u << i;
                if (set_holds(r, mask, req))
                        return true;
        }
        return false;
}

static bool layout_exists(const struct topology *t, const struct capacity *c, const struct placement_request *req) {
        static struct room r;
        room_of(t, c, &r);
        if (req->vcpus > r.pinnable)
                return false;
        if (r.n > MAX_SUBSET_NODES)
                return first_fit_holds(&r, req);
        for (unsigned mask = 1; mask < 1u << r.n; mask++)
                if (set_holds(&r, mask, req))
                        return true;
        return false;
}

/* ---------- checking a placement ---------- */

/* Valid, on CPUs that were free on their nodes, memory within each node's free memory, floating VMs
 * still covered. */
static void check_placed(const char *name, const struct topology *t, const struct capacity *c,
                         const struct placement *p) {
        char why[512];
        if (placement_validate(t, p, why, sizeof why) < 0)
                fail_msg("%s: invalid placement: %s", name, why);
        if (!cpuset_is_subset(p->cpus, c->free_cpus))
                fail_msg("%s: %u vCPUs on CPUs that are not free", name, p->n_vcpus);
        for (size_t j = 0; j < p->n_numa; j++)
                for (size_t i = 0; i < c->n_numa; i++)
                        if (c->numa[i].id == p->numa[j].node && p->numa[j].memory_bytes > c->numa[i].memory_free_bytes)
                                fail_msg("%s: node %d gets %llu bytes, has %llu free", name, p->numa[j].node,
                                         (unsigned long long)p->numa[j].memory_bytes,
                                         (unsigned long long)c->numa[i].memory_free_bytes);
        if (cpuset_count(c->free_cpus) - p->n_vcpus < c->floating_vcpus)
                fail_msg("%s: %u vCPUs leave too few CPUs for %u floating vCPUs", name, p->n_vcpus, c->floating_vcpus);
}

/* A refusal names the resource that is short. */
static void check_refusal(const char *name, const char *why) {
        static const char *const starts[] = { "CPUs: ", "memory: ", "NUMA nodes: ", NULL };
        for (size_t i = 0; starts[i]; i++)
                if (strncmp(why, starts[i], strlen(starts[i])) == 0 && strstr(why, "free per NUMA node:"))
                        return;
        fail_msg("%s: refusal names no resource: %s", name, why);
}

/* ---------- streams ---------- */

struct sizes {
        unsigned biggest;     /* CPUs of the largest node */
        uint64_t biggest_mem; /* memory of the largest node */
};

static struct placement_request draw(unsigned *seed, const struct sizes *z) {
        struct placement_request req;
        if (rnd(seed, 6) == 0) {
                req.vcpus = 1 + rnd(seed, 4);
                req.memory_bytes = (z->biggest_mem / GIB + 1 + rnd(seed, 8)) * GIB;
                return req;
        }
        req.vcpus = 1 + rnd(seed, rnd(seed, 3) == 0 ? 2 * z->biggest : z->biggest);
        req.memory_bytes = (uint64_t)req.vcpus * (1 + rnd(seed, 8)) * GIB;
        return req;
}

static void sizes_of(const struct capacity *c, struct sizes *z) {
        *z = (struct sizes){ 0 };
        for (size_t i = 0; i < c->n_numa; i++) {
                unsigned n = cpuset_count(c->numa[i].free_cpus);
                z->biggest = n > z->biggest ? n : z->biggest;
                if (n > 0 && c->numa[i].memory_free_bytes > z->biggest_mem)
                        z->biggest_mem = c->numa[i].memory_free_bytes;
        }
}

struct tally {
        unsigned placed, refused, fallback;
};

static void one_request(const char *name, const struct topology *t, struct capacity *c,
                        const struct placement_request *req, struct placement **slot, struct tally *ty) {
        bool exists = layout_exists(t, c, req);
        char why[640] = "";
        int r = placement_place(t, c, req, slot, why, sizeof why);
        if (r == -ENOSPC) {
                if (exists)
                        fail_msg("%s: refused %u vCPUs with %llu MiB although a valid layout exists: %s", name,
                                 req->vcpus, (unsigned long long)(req->memory_bytes / MIB), why);
                check_refusal(name, why);
                ty->refused++;
                return;
        }
        assert_int_equal(r, 0);
        if (!exists)
                fail_msg("%s: placed %u vCPUs with %llu MiB where the oracle found no layout", name, req->vcpus,
                         (unsigned long long)(req->memory_bytes / MIB));
        check_placed(name, t, c, *slot);
        assert_int_equal(placement_charge(c, *slot), 0);
        ty->placed++;
        ty->fallback += (*slot)->fallback;
}

static void run_stream(const char *name, const struct topology *t, unsigned seed, struct tally *ty) {
        struct capacity *c = cap_empty(t);
        struct placement *live[REQUESTS] = { 0 };
        unsigned leave[REQUESTS] = { 0 };
        struct sizes z;
        sizes_of(c, &z);
        c->floating_vcpus = rnd(&seed, 3) == 0 ? rnd(&seed, z.biggest + 1) : 0;
        for (size_t i = 0; i < REQUESTS && z.biggest > 0; i++) {
                for (size_t j = 0; j < i; j++)
                        if (live[j] && leave[j] == i) {
                                cap_uncharge(t, c, live[j]);
                                placement_free(live[j]);
                                live[j] = NULL;
                        }
                struct placement_request req = draw(&seed, &z);
                leave[i] = (unsigned)i + 2 + rnd(&seed, 6);
                one_request(name, t, c, &req, &live[i], ty);
        }
        for (size_t i = 0; i < REQUESTS; i++)
                placement_free(live[i]);
        cap_free(c);
}

/* ---------- the reference topologies ---------- */

static int load_reference(const char *dir, const char *tmp, json_t *e, struct topology **ret_t) {
        const char *file = json_string_value(json_object_get(e, "file"));
        const char *sub = json_string_value(json_object_get(json_object_get(e, "load"), "fsroot_subdir"));
        char path[2048], root[2048], cmd[4600], err[512] = "";
        struct topology_source src = { 0 };
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (sub) {
                snprintf(cmd, sizeof cmd, "tar xjf '%s' -C '%s'", path, tmp);
                assert_int_equal(system(cmd), 0);
                snprintf(root, sizeof root, "%s/%s", tmp, sub);
                src.fsroot = root;
        } else {
                src.xml_file = path;
        }
        int r = topology_load(&src, ret_t, err, sizeof err);
        if (r < 0)
                fail_msg("%s: topology_load: %s", file, err);
        return r;
}

static void test_fits_whenever_a_layout_exists(void **state) {
        (void)state;
        const char *shared = getenv("PVESCALE_SHARED");
        if (!shared)
                skip();
        char dir[1024], manifest[1100], tmp[] = "/tmp/test-placement-fit-XXXXXX";
        snprintf(dir, sizeof dir, "%s/topologies", shared);
        snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
        json_t *m = json_load_file(manifest, 0, NULL);
        assert_non_null(m);
        assert_non_null(mkdtemp(tmp));
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(m, "topologies"), i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                struct topology *t = NULL;
                struct tally ty = { 0 };
                assert_int_equal(load_reference(dir, tmp, e, &t), 0);
                for (unsigned s = 0; s < SEEDS; s++)
                        run_stream(name, t, 39 + 1000 * s + (unsigned)i, &ty);
                print_message("%s: %u placed (%u by the fallback), %u refused\n", name, ty.placed, ty.fallback,
                              ty.refused);
                topology_free(t);
        }
        assert_int_equal(test_rmtree(tmp), 0);
        json_decref(m);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fits_whenever_a_layout_exists),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
