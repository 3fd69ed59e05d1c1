/* fuzz_kube_objects: the Kubernetes objects the coordinator turns into simulation input (Pod, Node, NodeClaim,
 * NodePool, DaemonSet, ProxmoxNodeClass, and an agent's host room), chosen by each object's "kind"; the input is
 * one object or an array of them, and what parses is then simulated. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "fuzz.h"
#include "shapes.h"
#include "simulate.h"
#include "simulate_json.h"

struct catalogs {
        struct shape_catalog *items[8];
        size_t n;
};

static void add_object(struct sim_input *in, const json_t *o, struct catalogs *cats) {
        const char *kind = json_string_value(json_object_get(o, "kind"));
        char err[512];
        kind = kind ? kind : "";
        if (strcmp(kind, "Pod") == 0)
                simulate_json_pod(in, o, NULL, err, sizeof err);
        else if (strcmp(kind, "Node") == 0)
                simulate_json_node(in, o, NULL, err, sizeof err);
        else if (strcmp(kind, "NodeClaim") == 0)
                simulate_json_nodeclaim(in, o, cats->n ? cats->items[0] : NULL, NULL, err, sizeof err);
        else if (strcmp(kind, "NodePool") == 0)
                simulate_json_nodepool(in, o, NULL, err, sizeof err);
        else if (strcmp(kind, "DaemonSet") == 0)
                simulate_json_daemonset(in, o, NULL, err, sizeof err);
        else if (strcmp(kind, "ProxmoxNodeClass") == 0 && cats->n < sizeof cats->items / sizeof cats->items[0]) {
                struct shape_options base;
                shapes_options_default(&base);
                struct shape_catalog *cat = NULL;
                if (simulate_json_nodeclass(in, o, &base, NULL, &cat, err, sizeof err) == 0 && cat)
                        cats->items[cats->n++] = cat;
        } else
                simulate_json_host(in, o, NULL, err, sizeof err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        json_t *doc = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
        if (!doc)
                return 0;
        struct sim_input *in = simulate_input_new();
        struct catalogs cats = { .n = 0 };
        if (json_is_array(doc)) {
                size_t i;
                json_t *o;
                json_array_foreach(doc, i, o)
                        if (i < 64)
                                add_object(in, o, &cats);
        } else
                add_object(in, doc, &cats);
        struct sim_result *res = NULL;
        if (simulate_run(in, &res) == 0)
                simulate_result_free(res);
        simulate_input_free(in);
        for (size_t i = 0; i < cats.n; i++)
                shapes_catalog_free(cats.items[i]);
        json_decref(doc);
        return 0;
}
