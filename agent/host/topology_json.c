/* topology_json: the /v1/topology document of a loaded topology (without node and region). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "topology.h"

#include <inttypes.h>
#include <stdio.h>

#include "jsonutil.h"

static const char *kind_name(enum topology_kind kind) {
        switch (kind) {
        case TOPOLOGY_KIND_FSROOT:
                return "fsroot";
        case TOPOLOGY_KIND_XML:
                return "xml";
        default:
                return "host";
        }
}

/* Adds a cpulist member; returns -1 on ENOMEM like json_object_set_new. */
static int set_cpus(json_t *o, const char *key, const struct cpuset *s) {
        return json_object_set_new(o, key, jsonutil_cpuset(s));
}

/* OS id of the referenced package/node, or JSON null. */
static json_t *id_or_null(int index, int id) {
        return index < 0 ? json_null() : json_integer(id);
}

static json_t *package_json(const struct topology *t, size_t i) {
        const struct topology_package *p = &t->packages[i];
        json_t *o = json_pack("{s:i, s:s}", "id", p->id, "cpu_model", p->cpu_model);
        if (o && set_cpus(o, "cpus", p->cpus) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *hugepages_json(const struct topology_numa_node *nn) {
        json_t *o = json_object();
        for (size_t i = 0; o && i < nn->n_hugepages; i++) {
                const struct topology_hugepages *h = &nn->hugepages[i];
                char key[32];
                snprintf(key, sizeof key, "%" PRIu64 "kB", h->page_kib);
                json_t *v = json_pack("{s:I, s:I}", "total", (json_int_t)h->total, "free", (json_int_t)h->free);
                if (json_object_set_new(o, key, v) < 0) {
                        json_decref(o);
                        return NULL;
                }
        }
        return o;
}

static json_t *numa_json(const struct topology *t, size_t i) {
        const struct topology_numa_node *nn = &t->numa_nodes[i];
        int pkg_id = nn->package >= 0 ? t->packages[nn->package].id : 0;
        json_t *o = json_pack("{s:i, s:I, s:I, s:o, s:o, s:o}", "id", nn->id, "memory_bytes",
                              (json_int_t)nn->memory_bytes, "memory_free_bytes", (json_int_t)nn->memory_free_bytes,
                              "package",
                              id_or_null(nn->package, pkg_id), "hugepages", hugepages_json(nn), "subtype",
                              nn->subtype ? json_string(nn->subtype) : json_null());
        if (o && set_cpus(o, "cpus", nn->cpus) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *l3_json(const struct topology *t, size_t i) {
        json_t *o = json_pack("{s:I}", "size_bytes", (json_int_t)t->l3_caches[i].size_bytes);
        if (o && set_cpus(o, "cpus", t->l3_caches[i].cpus) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

/* package and numa_node are OS ids (like the top-level arrays' "id"); l3 is an index into l3_caches. */
static json_t *core_json(const struct topology *t, size_t i) {
        const struct topology_core *c = &t->cores[i];
        int pkg_id = c->package >= 0 ? t->packages[c->package].id : 0;
        int node_id = c->numa_node >= 0 ? t->numa_nodes[c->numa_node].id : 0;
        json_t *o = json_pack("{s:o, s:o, s:o}", "package", id_or_null(c->package, pkg_id), "numa_node",
                              id_or_null(c->numa_node, node_id), "l3", c->l3 < 0 ? json_null() : json_integer(c->l3));
        if (o && set_cpus(o, "cpus", c->cpus) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *array_json(const struct topology *t, size_t n, json_t *(*item)(const struct topology *, size_t)) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                if (json_array_append_new(a, item(t, i)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

json_t *topology_to_json(const struct topology *t) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:o, s:o, s:o, s:o}", "source", kind_name(t->kind), "cpu_model",
                              t->cpu_model, "pus", (int)cpuset_count(t->cpus), "packages",
                              array_json(t, t->n_packages, package_json), "numa_nodes",
                              array_json(t, t->n_numa_nodes, numa_json), "l3_caches",
                              array_json(t, t->n_l3_caches, l3_json), "cores", array_json(t, t->n_cores, core_json));
        if (o && (set_cpus(o, "cpus", t->cpus) < 0 || set_cpus(o, "online", t->online) < 0 ||
                  set_cpus(o, "isolated", t->isolated) < 0 || set_cpus(o, "allowed", t->allowed) < 0)) {
                json_decref(o);
                return NULL;
        }
        return o;
}
