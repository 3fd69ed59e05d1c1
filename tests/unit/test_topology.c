/* Tests for agent/topology: every reference topology in ../shared/topologies against its .expected.json, plus parsers and fallbacks. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fileio.h"
#include "testutil.h"
#include "topology.h"

#define KIB UINT64_C(1024)

/* Shared by every case of one run: the manifest, its directory and one extraction of all tarballs. */
struct run {
        char refdir[512];
        char tmpdir[512];
        json_t *manifest;
};

struct topo_case {
        struct run *run;
        json_t *entry; /* borrowed from run->manifest */
};

static struct run the_run;

/* ---------- small helpers ---------- */

static char *fmt(const struct cpuset *s) {
        char *text = cpuset_format(s);
        assert_non_null(text);
        return text;
}

static struct cpuset *parse_list(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

/* Compare "<label>=<cpulist>" so that a failure names what differs. */
static void expect_cpus(const char *label, const struct cpuset *got, const char *want) {
        char *g = fmt(got), a[4096], b[4096];
        struct cpuset *w = parse_list(want);
        char *wc = fmt(w);
        snprintf(a, sizeof a, "%s=%s", label, g);
        snprintf(b, sizeof b, "%s=%s", label, wc);
        assert_string_equal(a, b);
        free(g);
        free(wc);
        cpuset_free(w);
}

static void expect_subset(const char *label, const char *want_sub, const struct cpuset *got) {
        struct cpuset *w = parse_list(want_sub);
        if (!cpuset_is_subset(w, got)) {
                char *g = fmt(got);
                fail_msg("%s: expected %s to be a subset of %s", label, want_sub, g);
        }
        cpuset_free(w);
}

static void expect_u64(const char *label, uint64_t got, uint64_t want) {
        if (got != want)
                fail_msg("%s: got %" PRIu64 ", want %" PRIu64, label, got, want);
}

static const char *jstr(const json_t *o, const char *key) {
        const json_t *v = json_object_get(o, key);
        assert_true(json_is_string(v));
        return json_string_value(v);
}

static json_int_t jint(const json_t *o, const char *key) {
        const json_t *v = json_object_get(o, key);
        assert_true(json_is_integer(v));
        return json_integer_value(v);
}

static json_int_t count_or_zero(const json_t *counts, const char *key) {
        const json_t *v = json_object_get(counts, key);
        return v ? json_integer_value(v) : 0;
}

static json_t *load_json(const char *path) {
        json_error_t e;
        json_t *v = json_load_file(path, 0, &e);
        if (!v)
                fail_msg("%s: %s (line %d)", path, e.text, e.line);
        return v;
}

static struct cpuset *cpuset_from_int_array(const json_t *arr) {
        struct cpuset *s = cpuset_new();
        size_t i;
        json_t *v;
        assert_non_null(s);
        json_array_foreach(arr, i, v) assert_int_equal(cpuset_set(s, (unsigned)json_integer_value(v)), 0);
        return s;
}

static int cmp_first_cpu(const void *a, const void *b) {
        int x = cpuset_next(*(struct cpuset *const *)a, -1), y = cpuset_next(*(struct cpuset *const *)b, -1);
        return (x > y) - (x < y);
}

/* ---------- loading one manifest entry ---------- */

static bool is_tarball(const json_t *entry) {
        return strcmp(jstr(entry, "format"), "linux-sysfs-tarball") == 0;
}

static void case_fsroot(const struct topo_case *c, char *buf, size_t size) {
        const json_t *load = json_object_get(c->entry, "load");
        snprintf(buf, size, "%s/%s", c->run->tmpdir, jstr(load, "fsroot_subdir"));
}

/* HWLOC_XMLFILE of the manifest, with ${HERE} = the reference directory. */
static void case_xml(const struct topo_case *c, char *buf, size_t size) {
        const json_t *env = json_object_get(json_object_get(c->entry, "load"), "env");
        const char *xml = jstr(env, "HWLOC_XMLFILE");
        const char *here = "${HERE}";
        assert_true(strncmp(xml, here, strlen(here)) == 0);
        snprintf(buf, size, "%s%s", c->run->refdir, xml + strlen(here));
}

static struct topology *load_case(const struct topo_case *c, struct topology_source *src, char *path, size_t size) {
        struct topology *t = NULL;
        char err[512] = "";
        *src = (struct topology_source){ 0 };
        if (is_tarball(c->entry)) {
                case_fsroot(c, path, size);
                src->fsroot = path;
        } else {
                case_xml(c, path, size);
                src->xml_file = path;
        }
        int r = topology_load(src, &t, err, sizeof err);
        if (r < 0)
                fail_msg("%s: topology_load: %d %s", jstr(c->entry, "name"), r, err);
        return t;
}

static json_t *load_expected(const struct topo_case *c) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.expected.json", c->run->refdir, jstr(c->entry, "name"));
        return load_json(path);
}

/* ---------- the checks against .expected.json ---------- */

/* Counts and CPU set of the view the agent shows: complete_view_with_disallowed where it exists. */
static void check_counts(const struct topology *t, const json_t *exp, const json_t *cv) {
        const json_t *counts = json_object_get(cv ? cv : exp, "object_counts");
        assert_int_equal(t->n_packages, count_or_zero(counts, "Package"));
        assert_int_equal(t->n_numa_nodes, count_or_zero(counts, "NUMANode"));
        assert_int_equal(t->n_l3_caches, count_or_zero(counts, "L3Cache"));
        assert_int_equal(t->n_cores, count_or_zero(counts, "Core"));
        assert_int_equal(cpuset_count(t->cpus), count_or_zero(counts, "PU"));
        expect_cpus("allowed", t->allowed, jstr(json_object_get(exp, "machine"), "allowed_cpus"));
        if (cv)
                expect_cpus("cpus", t->cpus, jstr(cv, "cpus"));
}

static void check_numa_ids(const struct topology *t, const json_t *exp, const json_t *cv) {
        const json_t *ids = cv ? json_object_get(cv, "numa_nodes_os_index") : NULL;
        const json_t *nodes = json_object_get(exp, "numa_nodes");
        size_t n = ids ? json_array_size(ids) : json_array_size(nodes);
        assert_int_equal(t->n_numa_nodes, n);
        for (size_t i = 0; i < n; i++) {
                json_int_t want = ids ? json_integer_value(json_array_get(ids, i))
                                      : jint(json_array_get(nodes, i), "os_index");
                assert_int_equal(t->numa_nodes[i].id, want);
                assert_int_equal(topology_numa_index(t, (int)want), (int)i);
        }
        assert_int_equal(topology_numa_index(t, 100000), -1);
}

static void check_numa_node(const struct topology *t, const json_t *en, bool restricted) {
        char label[64];
        int id = (int)jint(en, "os_index");
        int i = topology_numa_index(t, id);
        snprintf(label, sizeof label, "numa node %d", id);
        assert_true(i >= 0);
        const struct topology_numa_node *nn = &t->numa_nodes[i];
        expect_u64(label, nn->memory_bytes, (uint64_t)jint(en, "memory_bytes"));
        if (restricted)
                expect_subset(label, jstr(en, "cpus"), nn->cpus);
        else
                expect_cpus(label, nn->cpus, jstr(en, "cpus"));
        const json_t *subtype = json_object_get(en, "subtype");
        assert_int_equal(!!nn->subtype, !!subtype);
        if (subtype)
                assert_string_equal(nn->subtype, json_string_value(subtype));
        const json_t *pkgs = json_object_get(en, "packages");
        if (json_array_size(pkgs) == 1)
                assert_int_equal(t->packages[nn->package].id, json_integer_value(json_array_get(pkgs, 0)));
        if (json_array_size(pkgs) > 1)
                assert_int_equal(nn->package, -1);
}

static void check_numa_nodes(const struct topology *t, const json_t *exp, const json_t *cv) {
        size_t i;
        json_t *en;
        check_numa_ids(t, exp, cv);
        json_array_foreach(json_object_get(exp, "numa_nodes"), i, en) check_numa_node(t, en, cv != NULL);
}

static void check_packages(const struct topology *t, const json_t *exp, const json_t *cv) {
        size_t i;
        json_t *ep;
        int first_id = -1;
        json_array_foreach(json_object_get(json_object_get(exp, "packages"), "list"), i, ep) {
                int id = (int)jint(ep, "os_index");
                char label[64];
                size_t k = 0;
                while (k < t->n_packages && t->packages[k].id != id)
                        k++;
                assert_true(k < t->n_packages);
                snprintf(label, sizeof label, "package %d", id);
                assert_string_equal(t->packages[k].cpu_model, jstr(ep, "cpu_model"));
                if (cv)
                        expect_subset(label, jstr(ep, "cpus"), t->packages[k].cpus);
                else
                        expect_cpus(label, t->packages[k].cpus, jstr(ep, "cpus"));
                if (first_id < 0 || id < first_id) {
                        first_id = id;
                        assert_string_equal(t->cpu_model, jstr(ep, "cpu_model"));
                }
        }
}

static bool has_core(const struct topology *t, const struct cpuset *cpus) {
        for (size_t i = 0; i < t->n_cores; i++)
                if (cpuset_equal(t->cores[i].cpus, cpus))
                        return true;
        return false;
}

/* smt_siblings_all: every core with its PU OS indexes. Same set of cores (ours are sorted by first CPU). */
static void check_cores(const struct topology *t, const json_t *exp, const json_t *cv) {
        const json_t *all = json_object_get(exp, "smt_siblings_all");
        size_t n = json_array_size(all);
        struct cpuset **want = calloc(n, sizeof *want);
        assert_non_null(want);
        for (size_t i = 0; i < n; i++)
                want[i] = cpuset_from_int_array(json_array_get(all, i));
        qsort(want, n, sizeof *want, cmp_first_cpu);
        if (!cv)
                assert_int_equal(t->n_cores, n);
        for (size_t i = 0; i < n; i++) {
                char *w = fmt(want[i]), label[64];
                snprintf(label, sizeof label, "core %zu", i);
                if (cv)
                        assert_true(has_core(t, want[i]));
                else
                        expect_cpus(label, t->cores[i].cpus, w);
                free(w);
                cpuset_free(want[i]);
        }
        free(want);
}

static void check_l3(const struct topology *t, const json_t *exp, const json_t *cv) {
        size_t i;
        json_t *el;
        json_array_foreach(json_object_get(exp, "l3_caches"), i, el) {
                struct cpuset *w = parse_list(jstr(el, "cpus"));
                size_t k = 0;
                /* In a restricted reference view an L3 shows only its allowed CPUs (maybe none). */
                while (k < t->n_l3_caches && !(cv ? cpuset_is_subset(w, t->l3_caches[k].cpus)
                                                  : cpuset_equal(t->l3_caches[k].cpus, w)))
                        k++;
                if (cv && cpuset_is_empty(w)) {
                        cpuset_free(w);
                        continue;
                }
                if (k == t->n_l3_caches)
                        fail_msg("L3 with cpus %s not found", jstr(el, "cpus"));
                expect_u64("l3 size", t->l3_caches[k].size_bytes, (uint64_t)jint(el, "size_bytes"));
                cpuset_free(w);
        }
        for (size_t k = 1; k < t->n_l3_caches; k++) /* sorted by first CPU */
                assert_true(cpuset_next(t->l3_caches[k - 1].cpus, -1) < cpuset_next(t->l3_caches[k].cpus, -1));
}

/* The expected numa node with OS id `id` holds all of `cpus` (by the reference's own cpulists). */
static bool expected_node_holds(const json_t *exp, int id, const struct cpuset *cpus) {
        size_t i;
        json_t *en;
        json_array_foreach(json_object_get(exp, "numa_nodes"), i, en) {
                if (jint(en, "os_index") != id)
                        continue;
                struct cpuset *s = parse_list(jstr(en, "cpus"));
                bool ok = cpuset_is_subset(cpus, s);
                cpuset_free(s);
                return ok;
        }
        return false;
}

static bool any_node_with_memory_holds(const struct topology *t, const struct cpuset *cpus) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].memory_bytes > 0 && cpuset_is_subset(cpus, t->numa_nodes[i].cpus))
                        return true;
        return false;
}

static bool any_node_holds(const struct topology *t, const struct cpuset *cpus) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (cpuset_is_subset(cpus, t->numa_nodes[i].cpus))
                        return true;
        return false;
}

/* The indexes the placement allocator relies on point at objects that hold the core. */
static void check_core_links(const struct topology *t, const json_t *exp, const json_t *cv) {
        for (size_t i = 0; i < t->n_cores; i++) {
                const struct topology_core *c = &t->cores[i];
                assert_true(c->package >= 0 && (size_t)c->package < t->n_packages);
                assert_true(cpuset_is_subset(c->cpus, t->packages[c->package].cpus));
                if (c->l3 >= 0)
                        assert_true(cpuset_is_subset(c->cpus, t->l3_caches[c->l3].cpus));
                else
                        for (size_t k = 0; k < t->n_l3_caches; k++)
                                assert_false(cpuset_intersects(c->cpus, t->l3_caches[k].cpus));
                assert_int_equal(c->numa_node >= 0, any_node_holds(t, c->cpus));
                if (c->numa_node < 0)
                        continue;
                const struct topology_numa_node *nn = &t->numa_nodes[c->numa_node];
                assert_true(cpuset_is_subset(c->cpus, nn->cpus));
                assert_int_equal(nn->memory_bytes > 0, any_node_with_memory_holds(t, c->cpus));
                if (!cv)
                        assert_true(expected_node_holds(exp, nn->id, c->cpus));
        }
}

/* ---------- raw sysfs (tarballs only) ---------- */

static void check_online_isolated(const struct topology *t, const json_t *exp) {
        const json_t *cpu = json_object_get(json_object_get(exp, "raw_sysfs"), "cpu");
        const json_t *online = json_object_get(cpu, "online"), *isolated = json_object_get(cpu, "isolated");
        if (!cpu || json_is_null(online)) {
                assert_true(cpuset_equal(t->online, t->cpus)); /* XML or no file: everything hwloc has */
        } else {
                struct cpuset *want = parse_list(json_string_value(online));
                cpuset_and(want, t->cpus);
                char *w = fmt(want);
                expect_cpus("online", t->online, w);
                free(w);
                cpuset_free(want);
        }
        expect_cpus("isolated", t->isolated, json_is_string(isolated) ? json_string_value(isolated) : "");
}

static uint64_t read_tree_u64(const char *root, const char *path) {
        char *text;
        assert_int_equal(fileio_read_under(root, path, &text), 0);
        uint64_t v = strtoull(text, NULL, 10);
        free(text);
        return v;
}

static void check_hugepages(const struct topology_numa_node *nn, const json_t *nr, const char *root) {
        const char *key;
        json_t *v;
        assert_int_equal(nn->n_hugepages, json_object_size(nr));
        json_object_foreach((json_t *)nr, key, v) {
                uint64_t kib = 0;
                char path[256];
                assert_int_equal(sscanf(key, "hugepages-%" SCNu64 "kB", &kib), 1);
                size_t k = 0;
                while (k < nn->n_hugepages && nn->hugepages[k].page_kib != kib)
                        k++;
                assert_true(k < nn->n_hugepages);
                expect_u64(key, nn->hugepages[k].total, (uint64_t)json_integer_value(v));
                snprintf(path, sizeof path, "/sys/devices/system/node/node%d/hugepages/%s/free_hugepages", nn->id, key);
                expect_u64(key, nn->hugepages[k].free, read_tree_u64(root, path));
        }
        for (size_t k = 1; k < nn->n_hugepages; k++)
                assert_true(nn->hugepages[k - 1].page_kib < nn->hugepages[k].page_kib);
}

/* Every node sysfs knows is in our view (the agent sees the whole machine), with its memory and CPUs. */
static void check_raw_nodes(const struct topology *t, const json_t *exp, const char *root) {
        size_t i;
        json_t *rn;
        json_array_foreach(json_object_get(json_object_get(exp, "raw_sysfs"), "nodes"), i, rn) {
                int id = (int)jint(rn, "id"), k = topology_numa_index(t, id);
                char label[64];
                snprintf(label, sizeof label, "raw node %d", id);
                assert_true(k >= 0);
                const struct topology_numa_node *nn = &t->numa_nodes[k];
                expect_u64(label, nn->memory_bytes, (uint64_t)jint(rn, "MemTotal_kB") * KIB);
                expect_u64(label, nn->memory_free_bytes, (uint64_t)jint(rn, "MemFree_kB") * KIB);
                const json_t *cpulist = json_object_get(rn, "cpulist");
                if (json_is_string(cpulist)) {
                        struct cpuset *want = parse_list(json_string_value(cpulist));
                        cpuset_and(want, t->online);
                        char *w = fmt(want);
                        expect_cpus(label, nn->cpus, w);
                        free(w);
                        cpuset_free(want);
                }
                check_hugepages(nn, json_object_get(rn, "nr_hugepages"), root);
        }
}

/* XML: nothing is known to be in use. */
static void check_xml_memory(const struct topology *t) {
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                const struct topology_numa_node *nn = &t->numa_nodes[i];
                expect_u64("xml free", nn->memory_free_bytes, nn->memory_bytes);
                for (size_t k = 0; k < nn->n_hugepages; k++)
                        expect_u64("xml hugepages free", nn->hugepages[k].free, nn->hugepages[k].total);
        }
}

/* ---------- JSON document ---------- */

static void check_json_cpus(const json_t *o, const char *key, const struct cpuset *s) {
        char *want = fmt(s);
        assert_string_equal(jstr(o, key), want);
        free(want);
}

static void check_json(const struct topology *t) {
        json_t *doc = topology_to_json(t);
        assert_non_null(doc);
        assert_string_equal(jstr(doc, "cpu_model"), t->cpu_model);
        check_json_cpus(doc, "online", t->online);
        check_json_cpus(doc, "isolated", t->isolated);
        const json_t *pk = json_object_get(doc, "packages"), *nodes = json_object_get(doc, "numa_nodes");
        const json_t *l3 = json_object_get(doc, "l3_caches"), *cores = json_object_get(doc, "cores");
        assert_int_equal(json_array_size(pk), t->n_packages);
        assert_int_equal(json_array_size(nodes), t->n_numa_nodes);
        assert_int_equal(json_array_size(l3), t->n_l3_caches);
        assert_int_equal(json_array_size(cores), t->n_cores);
        for (size_t i = 0; i < t->n_packages; i++) {
                assert_int_equal(jint(json_array_get(pk, i), "id"), t->packages[i].id);
                check_json_cpus(json_array_get(pk, i), "cpus", t->packages[i].cpus);
        }
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                const json_t *n = json_array_get(nodes, i);
                const struct topology_numa_node *nn = &t->numa_nodes[i];
                assert_int_equal(jint(n, "id"), nn->id);
                assert_int_equal(jint(n, "memory_bytes"), (json_int_t)nn->memory_bytes);
                assert_int_equal(jint(n, "memory_free_bytes"), (json_int_t)nn->memory_free_bytes);
                check_json_cpus(n, "cpus", nn->cpus);
                const json_t *hp = json_object_get(n, "hugepages");
                assert_int_equal(json_object_size(hp), nn->n_hugepages);
                for (size_t k = 0; k < nn->n_hugepages; k++) {
                        char key[32];
                        snprintf(key, sizeof key, "%" PRIu64 "kB", nn->hugepages[k].page_kib);
                        assert_int_equal(jint(json_object_get(hp, key), "total"), (json_int_t)nn->hugepages[k].total);
                        assert_int_equal(jint(json_object_get(hp, key), "free"), (json_int_t)nn->hugepages[k].free);
                }
        }
        for (size_t i = 0; i < t->n_l3_caches; i++) {
                check_json_cpus(json_array_get(l3, i), "cpus", t->l3_caches[i].cpus);
                assert_int_equal(jint(json_array_get(l3, i), "size_bytes"), (json_int_t)t->l3_caches[i].size_bytes);
        }
        for (size_t i = 0; i < t->n_cores; i++)
                check_json_cpus(json_array_get(cores, i), "cpus", t->cores[i].cpus);
        json_decref(doc);
}

/* ---------- one case per manifest entry ---------- */

static void test_reference_topology(void **state) {
        const struct topo_case *c = *state;
        struct topology_source src;
        char path[1024];
        struct topology *t = load_case(c, &src, path, sizeof path);
        json_t *exp = load_expected(c);
        const json_t *cv = json_object_get(exp, "complete_view_with_disallowed");
        check_counts(t, exp, cv);
        check_numa_nodes(t, exp, cv);
        check_packages(t, exp, cv);
        check_cores(t, exp, cv);
        check_l3(t, exp, cv);
        check_core_links(t, exp, cv);
        check_online_isolated(t, exp);
        if (src.fsroot)
                check_raw_nodes(t, exp, src.fsroot);
        else
                check_xml_memory(t);
        check_json(t);
        json_decref(exp);
        topology_free(t);
}

/* ---------- parsers ---------- */

static void test_parse_meminfo_node(void **state) {
        (void)state;
        static const char text[] = "Node 0 MemTotal:       47925628 kB\n"
                                   "Node 0 MemFree:        24465948 kB\n"
                                   "Node 0 MemUsed:        23459680 kB\n"
                                   "Node 0 HugePages_Total:  2048\n";
        uint64_t total = 0, mem_free = 0;
        assert_int_equal(topology_parse_meminfo(text, &total, &mem_free), 0);
        assert_int_equal(total, UINT64_C(47925628) * KIB);
        assert_int_equal(mem_free, UINT64_C(24465948) * KIB);
        static const char sparse[] = "Node 33 MemFree:     12 kB\nNode 33 MemTotal:   100 kB\n";
        assert_int_equal(topology_parse_meminfo(sparse, &total, &mem_free), 0);
        assert_int_equal(total, 100 * KIB);
        assert_int_equal(mem_free, 12 * KIB);
}

static void test_parse_meminfo_proc(void **state) {
        (void)state;
        static const char text[] = "MemTotal:       24682416 kB\nMemFree:        23869224 kB\nMemAvailable:   24239272 kB\n";
        uint64_t total = 0, mem_free = 0;
        assert_int_equal(topology_parse_meminfo(text, &total, &mem_free), 0);
        assert_int_equal(total, UINT64_C(24682416) * KIB);
        assert_int_equal(mem_free, UINT64_C(23869224) * KIB);
}

static void test_parse_meminfo_bad(void **state) {
        (void)state;
        uint64_t total = 7, mem_free = 7;
        assert_int_equal(topology_parse_meminfo("Node 0 MemTotal: 10 kB\n", &total, &mem_free), -EINVAL);
        assert_int_equal(topology_parse_meminfo("Node 0 MemTotal: x kB\nNode 0 MemFree: 1 kB\n", &total, &mem_free),
                         -EINVAL);
        assert_int_equal(topology_parse_meminfo("MemTotalX: 5 kB\nMemFreeY: 1 kB\n", &total, &mem_free), -EINVAL);
        assert_int_equal(topology_parse_meminfo("", &total, &mem_free), -EINVAL);
        assert_int_equal(total, 7); /* untouched on failure */
        assert_int_equal(mem_free, 7);
}

static void test_parse_hugepage_dir(void **state) {
        (void)state;
        uint64_t kib = 0;
        assert_int_equal(topology_parse_hugepage_dir("hugepages-2048kB", &kib), 0);
        assert_int_equal(kib, 2048);
        assert_int_equal(topology_parse_hugepage_dir("hugepages-1048576kB", &kib), 0);
        assert_int_equal(kib, 1048576);
        static const char *const bad[] = { "hugepages-", "hugepages-kB", "hugepages-2048", "hugepages-2048kBx",
                                           "hugepages--1kB", "hugepages-0kB", "nr_hugepages", ".", "" };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
                assert_int_equal(topology_parse_hugepage_dir(bad[i], &kib), -EINVAL);
        assert_int_equal(kib, 1048576);
}

static void test_parse_node_dir(void **state) {
        (void)state;
        int id = -1;
        assert_int_equal(topology_parse_node_dir("node0", &id), 0);
        assert_int_equal(id, 0);
        assert_int_equal(topology_parse_node_dir("node33", &id), 0);
        assert_int_equal(id, 33);
        static const char *const bad[] = { "node", "online", "node1a", "nodes", "has_cpu", "node-1", "power" };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
                assert_int_equal(topology_parse_node_dir(bad[i], &id), -EINVAL);
        assert_int_equal(id, 33);
}

/* ---------- fallbacks and errors ---------- */

/* Some node of the snapshot has hugepages reserved (per its raw_sysfs facts). */
static bool has_reserved_hugepages(const json_t *exp) {
        size_t i;
        json_t *rn, *v;
        const char *key;
        json_array_foreach(json_object_get(json_object_get(exp, "raw_sysfs"), "nodes"), i, rn)
                json_object_foreach(json_object_get(rn, "nr_hugepages"), key, v) if (json_integer_value(v) > 0) return true;
        return false;
}

/* The first tarball topology whose snapshot has reserved hugepages. */
static const json_t *tarball_with_hugepages(struct run *run) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(run->manifest, "topologies"), i, e) {
                if (!is_tarball(e))
                        continue;
                struct topo_case c = { .run = run, .entry = e };
                json_t *exp = load_expected(&c);
                bool found = has_reserved_hugepages(exp);
                json_decref(exp);
                if (found)
                        return e;
        }
        fail_msg("no tarball topology with reserved hugepages in the manifest");
        return NULL;
}

static void sh(const char *fmtstr, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmtstr, ...) {
        char cmd[2048];
        va_list ap;
        va_start(ap, fmtstr);
        vsnprintf(cmd, sizeof cmd, fmtstr, ap);
        va_end(ap);
        assert_int_equal(system(cmd), 0);
}

/* A private copy of a tarball tree (the shared extraction stays pristine). Returns its fsroot. */
static void private_tree(const struct run *run, const json_t *e, const char *name, char *root, size_t size) {
        const json_t *load = json_object_get(e, "load");
        snprintf(root, size, "%s/%s/%s", run->tmpdir, name, jstr(load, "fsroot_subdir"));
        sh("mkdir -p '%s/%s' && tar xjf '%s/%s' -C '%s/%s'", run->tmpdir, name, run->refdir, jstr(e, "file"),
           run->tmpdir, name);
}

static void test_missing_files_fall_back(void **state) {
        struct run *run = *state;
        const json_t *e = tarball_with_hugepages(run);
        char root[1024], err[512] = "";
        private_tree(run, e, "missing", root, sizeof root);
        struct topology *t = NULL;
        struct topology_source src = { .fsroot = root };
        assert_int_equal(topology_load(&src, &t, err, sizeof err), 0);
        int node = t->numa_nodes[0].id;
        assert_true(t->numa_nodes[0].n_hugepages > 0);
        topology_free(t);
        sh("rm -f '%s/sys/devices/system/cpu/online' '%s/sys/devices/system/cpu/isolated'", root, root);
        sh("rm -f '%s/sys/devices/system/node/node%d/meminfo'", root, node);
        sh("rm -rf '%s/sys/devices/system/node/node%d/hugepages'", root, node);
        assert_int_equal(topology_load(&src, &t, err, sizeof err), 0);
        assert_true(cpuset_equal(t->online, t->cpus)); /* no online file: every CPU hwloc has */
        assert_true(cpuset_is_empty(t->isolated));
        assert_int_equal(t->numa_nodes[0].memory_free_bytes, 0);
        assert_int_equal(t->numa_nodes[0].n_hugepages, 0);
        assert_true(t->n_numa_nodes < 2 || t->numa_nodes[1].memory_free_bytes > 0);
        topology_free(t);
}

/* Live counts change under a loaded topology; a refresh picks them up without touching the structure. */
static void test_refresh_memory(void **state) {
        struct run *run = *state;
        const json_t *e = tarball_with_hugepages(run);
        char root[1024], err[512] = "";
        private_tree(run, e, "refresh", root, sizeof root);
        struct topology *t = NULL;
        struct topology_source src = { .fsroot = root };
        assert_int_equal(topology_load(&src, &t, err, sizeof err), 0);
        const struct topology_numa_node *nn = &t->numa_nodes[t->n_numa_nodes - 1];
        uint64_t total = nn->memory_bytes, kib = nn->hugepages[0].page_kib, pages = nn->hugepages[0].total;
        const char *dir = "sys/devices/system/node";
        sh("printf 'Node %d MemTotal: 1000 kB\\nNode %d MemFree: 123 kB\\n' > '%s/%s/node%d/meminfo'", nn->id, nn->id,
           root, dir, nn->id);
        sh("echo 5 > '%s/%s/node%d/hugepages/hugepages-%" PRIu64 "kB/free_hugepages'", root, dir, nn->id, kib);
        assert_int_equal(topology_refresh_memory(t, &src), 0);
        assert_int_equal(nn->memory_free_bytes, 123 * KIB);
        assert_int_equal(nn->memory_bytes, total); /* structure: hwloc's, not re-read */
        assert_int_equal(nn->hugepages[0].free, 5);
        assert_int_equal(nn->hugepages[0].total, pages);
        sh("echo garbage > '%s/%s/node%d/meminfo'", root, dir, nn->id);
        assert_int_equal(topology_refresh_memory(t, &src), -EINVAL);
        topology_free(t);
}

/* A PCI device's NUMA node, read through the root (sysfs's numa_node: -1 when the kernel knows none). */
static void test_pci_numa_node(void **state) {
        struct run *run = *state;
        char root[1024];
        const char *dev = "sys/bus/pci/devices";
        snprintf(root, sizeof root, "%s/pci", run->tmpdir);
        sh("mkdir -p '%s/%s/0000:83:00.0' '%s/%s/0000:00:02.0' '%s/%s/0000:05:00.0'", root, dev, root, dev, root, dev);
        sh("echo 1 > '%s/%s/0000:83:00.0/numa_node' && echo -1 > '%s/%s/0000:00:02.0/numa_node' && "
           "echo x > '%s/%s/0000:05:00.0/numa_node'", root, dev, root, dev, root, dev);
        int node = 7;
        assert_int_equal(topology_pci_numa_node(root, "0000:83:00.0", &node), 0);
        assert_int_equal(node, 1);
        assert_int_equal(topology_pci_numa_node(root, "0000:00:02.0", &node), 0);
        assert_int_equal(node, -1);
        assert_int_equal(topology_pci_numa_node(root, "0000:05:00.0", &node), -EINVAL);
        assert_int_equal(topology_pci_numa_node(root, "0000:41:00.0", &node), -ENOENT);
        assert_int_equal(topology_pci_numa_node(root, "../../x", &node), -EINVAL);
        assert_int_equal(node, -1);
}

static void expect_load_error(const struct topology_source *src, int want, const char *needle) {
        struct topology *t = (struct topology *)0x1;
        char err[512] = "";
        assert_int_equal(topology_load(src, &t, err, sizeof err), want);
        assert_ptr_equal(t, (struct topology *)0x1); /* untouched */
        if (!strstr(err, needle))
                fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_wrong_fsroot(void **state) {
        struct run *run = *state;
        struct topology_source src = { .fsroot = run->tmpdir }; /* the parent of the top directories */
        expect_load_error(&src, -ENOENT, "sys/devices/system/cpu");
        expect_load_error(&src, -ENOENT, run->tmpdir);
        src.fsroot = "/nonexistent/pvescale";
        expect_load_error(&src, -ENOENT, "/nonexistent/pvescale");
}

static void test_bad_sources(void **state) {
        struct run *run = *state;
        char path[600];
        struct topology_source both = { .fsroot = "/", .xml_file = "/x.xml" };
        expect_load_error(&both, -EINVAL, "exclusive");
        struct topology_source missing = { .xml_file = "/nonexistent/topo.xml" };
        expect_load_error(&missing, -ENOENT, "/nonexistent/topo.xml");
        snprintf(path, sizeof path, "%s/garbage.xml", run->tmpdir);
        assert_int_equal(fileio_write_atomic(path, "<nope", 5, 0644), 0);
        struct topology_source garbage = { .xml_file = path };
        struct topology *t = NULL;
        char err[512] = "";
        assert_true(topology_load(&garbage, &t, err, sizeof err) < 0);
        assert_non_null(strstr(err, path));
}

/* XML hugepage totals come from hwloc's page_types: raise one node's 2 MiB count in a copy. */
static void test_xml_hugepages(void **state) {
        struct run *run = *state;
        char src_path[600], dst_path[600], *xml;
        size_t len;
        const char *needle = "<page_type size=\"2097152\" count=\"0\"/>";
        snprintf(src_path, sizeof src_path, "%s/eas-tioga.xml", run->refdir);
        snprintf(dst_path, sizeof dst_path, "%s/hugepages.xml", run->tmpdir);
        assert_int_equal(fileio_read(src_path, 64u << 20, &xml, &len), 0);
        char *at = strstr(xml, needle);
        assert_non_null(at);
        at[strlen(needle) - 4] = '7'; /* count="0" -> count="7" */
        assert_int_equal(fileio_write_atomic(dst_path, xml, len, 0644), 0);
        free(xml);
        struct topology *t = NULL;
        struct topology_source src = { .xml_file = dst_path };
        char err[512] = "";
        assert_int_equal(topology_load(&src, &t, err, sizeof err), 0);
        assert_int_equal(t->kind, TOPOLOGY_KIND_XML);
        uint64_t total = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                for (size_t k = 0; k < t->numa_nodes[i].n_hugepages; k++) {
                        const struct topology_hugepages *h = &t->numa_nodes[i].hugepages[k];
                        assert_true(h->page_kib != 4); /* the base page is not a hugepage */
                        assert_int_equal(h->free, h->total);
                        total += h->page_kib == 2048 ? h->total : 0;
                }
        assert_int_equal(total, 7);
        topology_free(t);
}

/* This machine: whatever it is, the model is coherent. */
static void test_this_machine(void **state) {
        (void)state;
        struct topology *t = NULL;
        char err[512] = "";
        int r = topology_load(NULL, &t, err, sizeof err);
        if (r < 0)
                fail_msg("topology_load(this machine): %s", err);
        assert_int_equal(t->kind, TOPOLOGY_KIND_HOST);
        assert_true(t->n_packages >= 1 && t->n_cores >= 1 && t->n_numa_nodes >= 1);
        assert_false(cpuset_is_empty(t->online));
        assert_true(cpuset_is_subset(t->online, t->cpus));
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                assert_true(t->numa_nodes[i].memory_free_bytes <= t->numa_nodes[i].memory_bytes);
        check_json(t);
        topology_free(t);
}

/* ---------- setup: one extraction per run ---------- */

static void extract_all(const struct run *run) {
        size_t i, k;
        json_t *e, *f;
        json_array_foreach(json_object_get(run->manifest, "topologies"), i, e) {
                json_array_foreach(json_object_get(json_object_get(e, "load"), "unpack"), k, f) {
                        char cmd[2048];
                        snprintf(cmd, sizeof cmd, "tar xjf '%s/%s' -C '%s'", run->refdir, json_string_value(f), run->tmpdir);
                        if (system(cmd) != 0)
                                fail_msg("%s failed", cmd);
                }
        }
}

/* ~30000 small files: tmpfs makes the extraction 10x faster than a busy disk. */
static const char *scratch_base(void) {
        const char *tmp = getenv("TMPDIR");
        if (tmp && *tmp)
                return tmp;
        return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static int group_setup(void **state) {
        (void)state;
        snprintf(the_run.tmpdir, sizeof the_run.tmpdir, "%s/pvescale-topology-XXXXXX", scratch_base());
        if (!mkdtemp(the_run.tmpdir))
                return -1;
        extract_all(&the_run);
        return 0;
}

static int group_teardown(void **state) {
        (void)state;
        return test_rmtree(the_run.tmpdir);
}

int main(void) {
        const char *shared = getenv("PVESCALE_SHARED");
        snprintf(the_run.refdir, sizeof the_run.refdir, "%s/topologies", shared ? shared : "../shared");
        char path[600];
        snprintf(path, sizeof path, "%s/manifest.json", the_run.refdir);
        json_error_t e;
        the_run.manifest = json_load_file(path, 0, &e);
        if (!the_run.manifest) {
                fprintf(stderr, "%s: %s\n", path, e.text);
                return 1;
        }
        const json_t *list = json_object_get(the_run.manifest, "topologies");
        static const struct CMUnitTest fixed[] = {
                cmocka_unit_test(test_parse_meminfo_node),
                cmocka_unit_test(test_parse_meminfo_proc),
                cmocka_unit_test(test_parse_meminfo_bad),
                cmocka_unit_test(test_parse_hugepage_dir),
                cmocka_unit_test(test_parse_node_dir),
                cmocka_unit_test_prestate(test_missing_files_fall_back, &the_run),
                cmocka_unit_test_prestate(test_refresh_memory, &the_run),
                cmocka_unit_test_prestate(test_wrong_fsroot, &the_run),
                cmocka_unit_test_prestate(test_pci_numa_node, &the_run),
                cmocka_unit_test_prestate(test_bad_sources, &the_run),
                cmocka_unit_test_prestate(test_xml_hugepages, &the_run),
                cmocka_unit_test(test_this_machine),
        };
        size_t n_fixed = sizeof fixed / sizeof *fixed, n_topo = json_array_size(list), n = n_fixed + n_topo;
        struct CMUnitTest *tests = calloc(n, sizeof *tests);
        struct topo_case *cases = calloc(n_topo ? n_topo : 1, sizeof *cases);
        if (!tests || !cases || n_topo == 0)
                return 1;
        for (size_t i = 0; i < n_topo; i++) {
                cases[i] = (struct topo_case){ .run = &the_run, .entry = json_array_get(list, i) };
                tests[i] = (struct CMUnitTest){ .name = json_string_value(json_object_get(cases[i].entry, "name")),
                                                .test_func = test_reference_topology,
                                                .initial_state = &cases[i] };
        }
        memcpy(tests + n_topo, fixed, sizeof fixed);
        int failed = _cmocka_run_group_tests("topology", tests, n, group_setup, group_teardown);
        free(tests);
        free(cases);
        json_decref(the_run.manifest);
        return failed;
}
