/* Tests for deploy/crds: each CRD is a structural schema (every node typed, objects list their properties,
 * no preserve-unknown-fields), every field has a description (what `kubectl explain` shows), its defaults and
 * enums match their types, and the seed's manifests (and ours) validate after changing only their apiVersion. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <regex.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "fileio.h"
#include "yamlconf.h"

#define PATH_LEN 512

static json_t *load_crd(const char *file) {
        char path[PATH_LEN], err[256];
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        json_t *v;
        snprintf(path, sizeof path, "%s/deploy/crds/%s", src ? src : ".", file);
        if (yamlconf_load(path, &v, err, sizeof err) < 0)
                fail_msg("%s: %s", path, err);
        return v;
}

static json_t *yaml(const char *text) {
        char err[256];
        json_t *v;
        if (yamlconf_parse(text, strlen(text), &v, err, sizeof err) < 0)
                fail_msg("test YAML: %s", err);
        return v;
}

static const json_t *version_schema(const json_t *crd) {
        const json_t *v = json_array_get(json_object_get(json_object_get(crd, "spec"), "versions"), 0);
        return json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
}

/* ---- validating an instance against a schema ---- */

static int fail_at(char *err, const char *path, const char *what) {
        snprintf(err, PATH_LEN, "%.400s: %.100s", path, what);
        return -EINVAL;
}

static bool pattern_ok(const char *pattern, const char *s) {
        regex_t re;
        if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
                fail_msg("pattern does not compile: %s", pattern);
        bool ok = regexec(&re, s, 0, NULL, 0) == 0;
        regfree(&re);
        return ok;
}

static bool in_enum(const json_t *en, const json_t *v) {
        size_t i;
        const json_t *e;
        json_array_foreach(en, i, e) if (json_equal(e, v)) return true;
        return false;
}

static int validate(const json_t *s, const json_t *v, const char *path, char *err);

static int validate_object(const json_t *s, const json_t *v, const char *path, char *err) {
        const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        const json_t *req = json_object_get(s, "required"), *x;
        const char *key;
        char sub[PATH_LEN];
        size_t i;
        if (!json_is_object(v))
                return fail_at(err, path, "an object is required");
        if (strcmp(path, ".metadata") == 0)
                return 0; /* ObjectMeta: the API server's own schema */
        json_object_foreach((json_t *)v, key, x) {
                const json_t *ps = props ? json_object_get(props, key) : NULL;
                snprintf(sub, sizeof sub, "%s.%s", path, key);
                if (!ps && !json_is_object(addl) && !json_is_true(json_object_get(s, "x-kubernetes-preserve-unknown-fields")))
                        return fail_at(err, sub, "unknown field (would be pruned)");
                if ((ps || json_is_object(addl)) && validate(ps ? ps : addl, x, sub, err) < 0)
                        return -EINVAL;
        }
        json_array_foreach(req, i, x) if (!json_object_get(v, json_string_value(x))) {
                snprintf(sub, sizeof sub, "%s.%s", path, json_string_value(x));
                return fail_at(err, sub, "required");
        }
        return 0;
}

static int validate_scalar(const json_t *s, const json_t *v, const char *path, char *err) {
        const char *type = json_string_value(json_object_get(s, "type"));
        const json_t *pat = json_object_get(s, "pattern"), *min = json_object_get(s, "minimum"), *max = json_object_get(s, "maximum");
        if (strcmp(type, "string") == 0) {
                if (!json_is_string(v))
                        return fail_at(err, path, "a string is required");
                if (pat && !pattern_ok(json_string_value(pat), json_string_value(v)))
                        return fail_at(err, path, "does not match the pattern");
                if (json_object_get(s, "minLength") &&
                    strlen(json_string_value(v)) < (size_t)json_integer_value(json_object_get(s, "minLength")))
                        return fail_at(err, path, "too short");
                return 0;
        }
        if (strcmp(type, "integer") == 0) {
                if (!json_is_integer(v))
                        return fail_at(err, path, "an integer is required");
                if ((min && json_integer_value(v) < json_integer_value(min)) || (max && json_integer_value(v) > json_integer_value(max)))
                        return fail_at(err, path, "out of range");
                return 0;
        }
        if (strcmp(type, "boolean") == 0)
                return json_is_boolean(v) ? 0 : fail_at(err, path, "a boolean is required");
        return json_is_number(v) ? 0 : fail_at(err, path, "a number is required");
}

static int validate(const json_t *s, const json_t *v, const char *path, char *err) {
        const json_t *en = json_object_get(s, "enum");
        if (en && !in_enum(en, v))
                return fail_at(err, path, "not one of the allowed values");
        if (json_is_true(json_object_get(s, "x-kubernetes-int-or-string"))) {
                if (!json_is_integer(v) && !json_is_string(v))
                        return fail_at(err, path, "an integer or a string is required");
                const json_t *pat = json_object_get(s, "pattern");
                if (pat && json_is_string(v) && !pattern_ok(json_string_value(pat), json_string_value(v)))
                        return fail_at(err, path, "does not match the pattern");
                return 0;
        }
        const char *type = json_string_value(json_object_get(s, "type"));
        if (strcmp(type, "object") == 0)
                return validate_object(s, v, path, err);
        if (strcmp(type, "array") == 0) {
                size_t i;
                const json_t *x;
                char sub[PATH_LEN];
                if (!json_is_array(v))
                        return fail_at(err, path, "a list is required");
                json_array_foreach(v, i, x) {
                        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
                        if (validate(json_object_get(s, "items"), x, sub, err) < 0)
                                return -EINVAL;
                }
                return 0;
        }
        return validate_scalar(s, v, path, err);
}

/* ---- structural schema rules ---- */

static const char *const KEYWORDS[] = {
        "type", "properties", "additionalProperties", "items", "required", "enum", "default", "description",
        "minimum", "maximum", "minLength", "maxLength", "pattern", "format", "maxItems", "minItems", "maxProperties",
        "anyOf", "x-kubernetes-int-or-string", "x-kubernetes-validations", "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys", NULL,
};

static bool known_keyword(const char *k) {
        for (const char *const *p = KEYWORDS; *p; p++)
                if (strcmp(*p, k) == 0)
                        return true;
        return false;
}

static void check_node(const json_t *s, const char *path);

static void check_children(const json_t *s, const char *type, const char *path) {
        const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        const json_t *x;
        const char *key;
        char sub[PATH_LEN];
        size_t i;
        if (strcmp(type, "array") == 0) {
                snprintf(sub, sizeof sub, "%s[]", path);
                if (!json_is_object(json_object_get(s, "items")))
                        fail_msg("%s: an array without items", path);
                check_node(json_object_get(s, "items"), sub);
                return;
        }
        if (strcmp(type, "object") != 0)
                return;
        /* metadata is the only object left to the API server's own schema */
        if (!props && !addl && !strstr(path, ".metadata"))
                fail_msg("%s: an object with neither properties nor additionalProperties", path);
        if (props && addl)
                fail_msg("%s: both properties and additionalProperties", path);
        json_object_foreach((json_t *)props, key, x) {
                snprintf(sub, sizeof sub, "%s.%s", path, key);
                check_node(x, sub);
        }
        if (addl) {
                snprintf(sub, sizeof sub, "%s.*", path);
                check_node(addl, sub);
        }
        json_array_foreach(json_object_get(s, "required"), i, x) if (!props || !json_object_get(props, json_string_value(x)))
                fail_msg("%s: required field %s is not a property", path, json_string_value(x));
}

static void check_node(const json_t *s, const char *path) {
        const char *key, *type = json_string_value(json_object_get(s, "type"));
        const json_t *x, *en = json_object_get(s, "enum"), *def = json_object_get(s, "default");
        char err[PATH_LEN];
        size_t i;
        if (!json_is_object(s))
                fail_msg("%s: a schema must be an object", path);
        json_object_foreach((json_t *)s, key, x) if (!known_keyword(key))
                fail_msg("%s: keyword %s is not allowed (no preserve-unknown-fields anywhere)", path, key);
        if (json_is_true(json_object_get(s, "x-kubernetes-int-or-string"))) {
                if (type)
                        fail_msg("%s: int-or-string takes no type", path);
                return;
        }
        if (!type || (strcmp(type, "object") && strcmp(type, "array") && strcmp(type, "string") && strcmp(type, "integer") &&
                      strcmp(type, "boolean") && strcmp(type, "number")))
                fail_msg("%s: every schema node needs a valid type", path);
        json_array_foreach(en, i, x) if (validate_scalar(s, x, path, err) < 0 && strcmp(type, "object") && strcmp(type, "array"))
                fail_msg("%s: enum value of the wrong type (%s)", path, err);
        if (def && validate(s, def, path, err) < 0)
                fail_msg("%s: default does not validate: %s", path, err);
        check_children(s, type, path);
}

static void check_crd(const char *file, const char *kind, const char *plural) {
        json_t *crd = load_crd(file);
        const json_t *spec = json_object_get(crd, "spec");
        char name[128];
        assert_string_equal(json_string_value(json_object_get(crd, "apiVersion")), "apiextensions.k8s.io/v1");
        assert_string_equal(json_string_value(json_object_get(crd, "kind")), "CustomResourceDefinition");
        snprintf(name, sizeof name, "%s.pvescale.io", plural);
        assert_string_equal(json_string_value(json_object_get(json_object_get(crd, "metadata"), "name")), name);
        assert_string_equal(json_string_value(json_object_get(spec, "group")), "pvescale.io");
        assert_string_equal(json_string_value(json_object_get(json_object_get(spec, "names"), "kind")), kind);
        assert_string_equal(json_string_value(json_object_get(spec, "scope")), "Cluster");
        const json_t *v = json_array_get(json_object_get(spec, "versions"), 0);
        assert_string_equal(json_string_value(json_object_get(v, "name")), "v1alpha1");
        assert_true(json_is_true(json_object_get(v, "served")) && json_is_true(json_object_get(v, "storage")));
        assert_non_null(json_object_get(json_object_get(v, "subresources"), "status"));
        check_node(version_schema(crd), kind);
        json_decref(crd);
}

static void test_structural(void **state) {
        (void)state;
        check_crd("pvescale.io_nodepools.yaml", "NodePool", "nodepools");
        check_crd("pvescale.io_proxmoxnodeclasses.yaml", "ProxmoxNodeClass", "proxmoxnodeclasses");
        check_crd("pvescale.io_nodeclaims.yaml", "NodeClaim", "nodeclaims");
        check_crd("pvescale.io_proxmoxtemplates.yaml", "ProxmoxTemplate", "proxmoxtemplates");
}

/* ---- descriptions ---- */

struct described_count {
        size_t fields, bare;
};

static bool described(const json_t *s) {
        const char *d = json_string_value(json_object_get(s, "description"));
        return d && d[strspn(d, " \t\n")] != '\0';
}

/* Count the fields under s (the root, and every property at any depth, inside array items and map values too),
 * and print the path of each without a description. metadata at the top is the API server's ObjectMeta. */
static void walk_descriptions(const json_t *s, const char *path, bool field, bool top, struct described_count *b) {
        const json_t *x;
        const char *key;
        char sub[PATH_LEN];
        if (field) {
                b->fields++;
                if (!described(s)) {
                        b->bare++;
                        print_error("no description: %s\n", path);
                }
        }
        json_object_foreach((json_t *)json_object_get(s, "properties"), key, x) {
                snprintf(sub, sizeof sub, "%s.%s", path, key);
                if (top && strcmp(key, "metadata") == 0)
                        continue;
                walk_descriptions(x, sub, true, false, b);
        }
        if (json_is_object(json_object_get(s, "items"))) {
                snprintf(sub, sizeof sub, "%s[]", path);
                walk_descriptions(json_object_get(s, "items"), sub, false, false, b);
        }
        if (json_is_object(json_object_get(s, "additionalProperties"))) {
                snprintf(sub, sizeof sub, "%s.*", path);
                walk_descriptions(json_object_get(s, "additionalProperties"), sub, false, false, b);
        }
}

static size_t check_described(const char *file, const char *kind) {
        json_t *crd = load_crd(file);
        const json_t *v;
        size_t i;
        struct described_count b = { 0, 0 };
        char root[PATH_LEN];
        json_array_foreach(json_object_get(json_object_get(crd, "spec"), "versions"), i, v) {
                snprintf(root, sizeof root, "%s/%s", kind, json_string_value(json_object_get(v, "name")));
                const json_t *schema = json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
                walk_descriptions(schema, root, true, true, &b);
        }
        if (b.bare)
                print_error("%s: %zu of %zu fields have no description\n", file, b.bare, b.fields);
        assert_true(b.fields > 3);
        json_decref(crd);
        return b.bare;
}

static void test_described(void **state) {
        (void)state;
        size_t bare = check_described("pvescale.io_nodepools.yaml", "NodePool") +
                      check_described("pvescale.io_proxmoxnodeclasses.yaml", "ProxmoxNodeClass") +
                      check_described("pvescale.io_nodeclaims.yaml", "NodeClaim") +
                      check_described("pvescale.io_proxmoxtemplates.yaml", "ProxmoxTemplate");
        if (bare)
                fail_msg("%zu CRD fields have no description (listed above)", bare);
}

/* ---- manifests ---- */

struct manifest {
        const char *crd, *yaml, *bad_path; /* bad_path NULL: must validate */
};

static const struct manifest MANIFESTS[] = {
        /* the seed's README ProxmoxNodeClass, apiVersion changed */
        { "pvescale.io_proxmoxnodeclasses.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: ProxmoxNodeClass\nmetadata:\n  name: default\nspec:\n"
          "  tags:\n    - k8s\n    - karpenter\n  instanceTemplateRef:\n    kind: ProxmoxTemplate\n    name: default\n"
          "  metadataOptions:\n    type: cdrom\n    templatesRef:\n      name: ubuntu-k8s\n      namespace: kube-system\n"
          "  securityGroups:\n    - name: kubernetes\n      interface: net0\n", NULL },
        /* the seed chart's default node class spec */
        { "pvescale.io_proxmoxnodeclasses.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: ProxmoxNodeClass\nmetadata: {name: default}\nspec:\n"
          "  bootDevice: {size: 30Gi}\n  instanceTemplateRef: {kind: ProxmoxUnmanagedTemplate, name: default}\n"
          "  securityGroups: [{interface: net0, name: kubernetes}]\n  tags: [karpenter]\n", NULL },
        /* the seed's k3s example, with valuesRef and a storage */
        { "pvescale.io_proxmoxnodeclasses.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: ProxmoxNodeClass\nmetadata: {name: default}\nspec:\n"
          "  region: cluster-1\n  placementStrategy: {zoneBalance: AvailabilityFirst}\n"
          "  instanceTemplateRef: {kind: ProxmoxUnmanagedTemplate, name: default}\n"
          "  metadataOptions:\n    type: cdrom\n    templatesRef: {name: karpenter-template, namespace: kube-system}\n"
          "    valuesRef: {name: karpenter-template-values, namespace: kube-system}\n"
          "  bootDevice: {size: 30Gi, storage: local-lvm}\n  resourcePool: k8s\n"
          "  kubeletConfiguration:\n    maxPods: 60\n    cpuManagerPolicy: static\n    topologyManagerPolicy: single-numa-node\n"
          "    kubeReserved: {cpu: 100m, memory: 1Gi}\n    evictionHard: {memory.available: 5%}\n    clusterDNS: [10.96.0.10]\n"
          "  instanceTypes:\n    - name: c1.12VCPU-24GB\n      capacity: {cpu: 12, memory: 24Gi, pods: \"110\"}\n"
          "      overhead:\n        kubeReserved: {cpu: 100m, memory: 1Gi}\n", NULL },
        { "pvescale.io_proxmoxnodeclasses.yaml",
          "spec:\n  instanceTemplateRef: {name: t}\n  metadataOptions: {type: http}\n", ".spec.metadataOptions.type" },
        { "pvescale.io_proxmoxnodeclasses.yaml",
          "spec:\n  instanceTemplateRef: {name: t}\n  bootDevice: {size: 30GB}\n", ".spec.bootDevice.size" },
        { "pvescale.io_proxmoxnodeclasses.yaml", "spec:\n  templateName: talos\n  instanceTemplateRef: {name: t}\n",
          ".spec.templateName" },
        { "pvescale.io_proxmoxnodeclasses.yaml", "spec:\n  tags: [a]\n", ".spec.instanceTemplateRef" },
        /* the seed's ProxmoxTemplate (its docs/nodetemplateclass.md), apiVersion changed */
        { "pvescale.io_proxmoxtemplates.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: ProxmoxTemplate\nmetadata:\n  name: default\nspec:\n"
          "  sourceImage:\n    url: https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img\n"
          "    imageName: ubuntu-amd64.qcow2\n    checksum: 0123abcd\n    checksumType: md5\n"
          "  storageIDs: [local, system]\n  machine: q35\n"
          "  agent: {enabled: true, type: virtio, fsFreezeOnBackup: true, fsTrimClonedDisks: false}\n"
          "  cpu: {type: x86-64-v2-AES, flags: +pdpe1gb}\n  vga: {type: serial0, memory: 16}\n"
          "  network:\n    - name: net0\n      model: virtio\n      bridge: vmbr0\n      mtu: 1500\n      vlan: 15\n"
          "      firewall: true\n      address4: 192.168.0.0/24\n      address6: fd00::/64\n"
          "      gateway4: 192.168.0.1\n"
          "      gateway6: fd00::1\n      dnsServers: [1.1.1.1, 2001:4860:4860::8888]\n"
          "  pciDevices:\n    - {mapping: nvidia, mdev: nvidia-660, pcie: true, xvga: false}\n"
          "  tags: [talos-k8s-proxmox, karpenter]\n", NULL },
        { "pvescale.io_proxmoxtemplates.yaml",
          "spec:\n  sourceImage: {url: http://x/i.img, imageName: ubuntu}\n  storageIDs: [local]\n",
          ".spec.sourceImage.imageName" },
        { "pvescale.io_proxmoxtemplates.yaml", "spec:\n  sourceImage: {url: http://x/i.img, imageName: u.qcow2}\n",
          ".spec.storageIDs" },
        { "pvescale.io_proxmoxtemplates.yaml",
          "spec:\n  sourceImage: {url: ftp://x/i.img, imageName: u.qcow2}\n  storageIDs: [local]\n",
          ".spec.sourceImage.url" },
        { "pvescale.io_proxmoxtemplates.yaml",
          "spec:\n  sourceImage: {url: http://x/i.img, imageName: u.qcow2, checksumType: crc32}\n"
          "  storageIDs: [local]\n", ".spec.sourceImage.checksumType" },
        /* the seed's NodePool, apiVersion changed (its nodeClassRef still names the seed's group) */
        { "pvescale.io_nodepools.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  limits:\n    cpu: \"64\"\n"
          "    memory: 512Gi\n  template:\n    spec:\n      nodeClassRef:\n        group: karpenter.proxmox.sinextra.dev\n"
          "        kind: ProxmoxNodeClass\n        name: default\n      requirements:\n        - key: \"kubernetes.io/arch\"\n"
          "          operator: In\n          values: [\"amd64\"]\n", NULL },
        { "pvescale.io_nodepools.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: NodePool\nmetadata: {name: edge}\nspec:\n  weight: 50\n"
          "  limits: {cpu: 128, memory: 1Ti, nodes: 20}\n"
          "  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 10m, budgets: [{nodes: \"2\"}, {nodes: 10%, reasons: [Drifted]}]}\n"
          "  template:\n    metadata: {labels: {tier: edge}, annotations: {team: web}}\n    spec:\n"
          "      nodeClassRef: {name: default}\n      expireAfter: 168h\n"
          "      startupTaints: [{key: karpenter.sh/unregistered, effect: NoExecute}]\n"
          "      taints: [{key: edge, value: \"true\", effect: NoSchedule}]\n"
          "      requirements: [{key: topology.kubernetes.io/zone, operator: In, values: [pve1, pve2]},"
          " {key: pvescale.io/instance-family, operator: NotIn, values: [m1]}]\n", NULL },
        { "pvescale.io_nodepools.yaml", "spec:\n  template:\n    spec:\n      nodeClassRef: {name: d}\n      requirements: [{key: a, operator: Near}]\n",
          ".spec.template.spec.requirements[0].operator" },
        { "pvescale.io_nodepools.yaml", "spec:\n  limits: {cpu: lots}\n  template:\n    spec:\n      nodeClassRef: {name: d}\n",
          ".spec.limits.cpu" },
        { "pvescale.io_nodepools.yaml", "spec:\n  weight: 0\n  template:\n    spec:\n      nodeClassRef: {name: d}\n", ".spec.weight" },
        { "pvescale.io_nodepools.yaml", "spec:\n  template:\n    spec:\n      nodeClassRef: {name: d}\n      expireAfter: 30d\n",
          ".spec.template.spec.expireAfter" },
        /* what the coordinator writes */
        { "pvescale.io_nodeclaims.yaml",
          "apiVersion: pvescale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: default-x7k2p, labels: {pvescale.io/nodepool: default}}\n"
          "spec:\n  nodePool: default\n  nodeClassRef: {group: pvescale.io, kind: ProxmoxNodeClass, name: default}\n"
          "  instanceType: t1.2VCPU-6GB\n  requirements: [{key: topology.kubernetes.io/zone, operator: In, values: [pve2]}]\n"
          "  resources: {requests: {cpu: 1500m, memory: 3Gi, pods: 4}}\n  terminationGracePeriod: 1h30m\n"
          "status:\n  providerID: proxmox://cluster-1/20001\n  vmid: 20001\n  region: cluster-1\n  host: pve2\n"
          "  reservationID: r-8f2c\n  nodeName: default-x7k2p\n  capacity: {cpu: \"2\", memory: 5683Mi}\n"
          "  conditions: [{type: Launched, status: \"True\", lastTransitionTime: \"2026-07-01T10:00:00Z\"}]\n", NULL },
        { "pvescale.io_nodeclaims.yaml", "spec:\n  nodePool: p\n  nodeClassRef: {name: d}\n", ".spec.instanceType" },
        { "pvescale.io_nodeclaims.yaml",
          "spec:\n  nodePool: p\n  nodeClassRef: {name: d}\n  instanceType: t\n  terminationGracePeriod: 1d\n",
          ".spec.terminationGracePeriod" },
};

static void test_manifests(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof MANIFESTS / sizeof MANIFESTS[0]; i++) {
                const struct manifest *m = &MANIFESTS[i];
                json_t *crd = load_crd(m->crd), *obj = yaml(m->yaml);
                char err[PATH_LEN] = "";
                int r = validate(version_schema(crd), obj, "", err);
                if (!m->bad_path && r < 0)
                        fail_msg("manifest %zu should validate: %s", i, err);
                if (m->bad_path && (r == 0 || strncmp(err, m->bad_path, strlen(m->bad_path)) != 0))
                        fail_msg("manifest %zu: expected an error at %s, got \"%s\"", i, m->bad_path, err);
                json_decref(obj);
                json_decref(crd);
        }
}

/* ---- the examples of the docs ---- */

static const char *crd_of_kind(const char *kind) {
        if (kind && strcmp(kind, "NodePool") == 0)
                return "pvescale.io_nodepools.yaml";
        if (kind && strcmp(kind, "ProxmoxNodeClass") == 0)
                return "pvescale.io_proxmoxnodeclasses.yaml";
        if (kind && strcmp(kind, "NodeClaim") == 0)
                return "pvescale.io_nodeclaims.yaml";
        if (kind && strcmp(kind, "ProxmoxTemplate") == 0)
                return "pvescale.io_proxmoxtemplates.yaml";
        return NULL;
}

/* One ```yaml block: when it is one of our kinds, it validates against its CRD. Returns 1 when it was checked. */
static int check_example(const char *doc, const char *text, size_t len) {
        char err[PATH_LEN] = "";
        json_t *obj = NULL;
        if (yamlconf_parse(text, len, &obj, err, sizeof err) < 0)
                return 0; /* not one document (a shell session, a values fragment with placeholders) */
        const char *api = json_string_value(json_object_get(obj, "apiVersion"));
        const char *crd = api && strcmp(api, "pvescale.io/v1alpha1") == 0
                                  ? crd_of_kind(json_string_value(json_object_get(obj, "kind"))) : NULL;
        json_t *schema = crd ? load_crd(crd) : NULL;
        if (schema && validate(version_schema(schema), obj, "", err) < 0)
                fail_msg("%s: the %s example does not validate against %s: %s", doc,
                         json_string_value(json_object_get(obj, "kind")), crd, err);
        json_decref(schema);
        json_decref(obj);
        return crd != NULL;
}

/* Every NodePool, ProxmoxNodeClass and NodeClaim example of the docs validates against its CRD (a user copies
 * them). */
static void test_docs_examples(void **state) {
        (void)state;
        static const char *const docs[] = { "README.md", "docs/coordinator.md", "docs/install.md",
                                            "docs/architecture.md", "docs/cloud-init.md" };
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        int checked = 0;
        for (size_t d = 0; d < sizeof docs / sizeof docs[0]; d++) {
                char path[PATH_LEN], *text = NULL;
                size_t len;
                snprintf(path, sizeof path, "%s/%s", src ? src : ".", docs[d]);
                if (fileio_read(path, 4 << 20, &text, &len) < 0)
                        fail_msg("cannot read %s", path);
                for (char *p = strstr(text, "```yaml\n"); p; p = strstr(p, "```yaml\n")) {
                        p += strlen("```yaml\n");
                        char *end = strstr(p, "\n```");
                        if (!end)
                                break;
                        checked += check_example(docs[d], p, (size_t)(end - p + 1));
                        p = end;
                }
                free(text);
        }
        assert_true(checked >= 3); /* coordinator.md has one of each kind */
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_structural),
                cmocka_unit_test(test_described),
                cmocka_unit_test(test_manifests),
                cmocka_unit_test(test_docs_examples),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
