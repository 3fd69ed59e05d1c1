/* fuzz_pve_answers: the Proxmox VE answers the coordinator's pve client parses (the {"data": ...} envelope, HTTP
 * errors with PVE's messages, UPIDs, task status, VMID strings, cluster status, VM lists and templates), served by
 * a loopback server: the input's first byte picks the status, the second the call, the rest is the body. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>
#include <stdio.h>

#include "fuzz.h"
#include "fuzz_stub.h"
#include "pve.h"

static const unsigned statuses[] = { 200, 200, 200, 200, 400, 401, 403, 404, 500, 501, 595, 302 };

static struct pve_client *client(void) {
        static struct pve_client *c;
        if (!c) {
                char url[128];
                snprintf(url, sizeof url, "%s/api2/json", fuzz_stub_start());
                struct pve_options o = { .url = url, .token_id = "fuzz@pve!fuzz", .token_secret = "fuzz",
                                         .timeout_ms = 2000, .connect_timeout_ms = 1000 };
                if (pve_client_new(&o, &c) < 0)
                        abort();
        }
        return c;
}

static void cluster(struct pve_client *c) {
        json_t *st = NULL;
        if (pve_cluster_status(c, &st) == 0) {
                struct pve_cluster_node n;
                for (size_t i = 0; i < 64 && i < json_array_size(st) + 1; i++)
                        (void)pve_cluster_node_at(st, i, &n);
                (void)pve_cluster_node_ip(st, "pve1");
        }
        json_decref(st);
}

static void templates(struct pve_client *c) {
        json_t *list = NULL;
        static const char *const tags[] = { "k8s", "pvescale", NULL };
        uint32_t vmid;
        if (pve_vm_list(c, "pve1", &list) == 0) {
                (void)pve_find_template(list, "k8s-template", tags, &vmid);
                json_t *ref = json_pack("{s:s, s:[s]}", "name", "k8s-template", "tags", "k8s");
                (void)pve_find_template_ref(list, ref, &vmid);
                json_decref(ref);
        }
        json_decref(list);
}

static void task(struct pve_client *c) {
        char *upid = NULL;
        struct pve_upid u;
        if (pve_vm_action(c, "pve1", 100, "start", &upid) == 0 && upid)
                (void)pve_upid_parse(upid, &u);
        free(upid);
        struct pve_task_status ts;
        if (pve_task_status(c, "UPID:pve1:0000AAAA:0000BBBB:65000000:qmstart:100:root@pam:", &ts) == 0)
                (void)pve_task_exit_ok(ts.exitstatus);
}

static void call(struct pve_client *c, unsigned which) {
        json_t *doc = NULL;
        uint32_t vmid;
        bool running;
        switch (which % 6) {
        case 0:
                cluster(c);
                break;
        case 1:
                templates(c);
                break;
        case 2:
                task(c);
                break;
        case 3:
                (void)pve_nextid(c, &vmid);
                (void)pve_nextid_check(c, 4242);
                break;
        case 4:
                (void)pve_vm_running(c, "pve1", 100, &running);
                break;
        default:
                if (pve_node_status(c, "pve1", &doc) == 0)
                        json_decref(doc);
                break;
        }
        (void)pve_client_error(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        if (size < 2)
                return 0;
        struct pve_client *c = client();
        fuzz_stub_clear();
        fuzz_stub_answer(NULL, statuses[data[0] % (sizeof statuses / sizeof statuses[0])], data + 2, size - 2);
        call(c, data[1]);
        return 0;
}
