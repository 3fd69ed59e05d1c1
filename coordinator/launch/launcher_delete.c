/* launcher_delete: what the steps, the teardown and garbage collection share to take a launch's things away (the
 * VM, the cloud-init ISO, the join token), and the wait for a Proxmox task. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tokens.h"

/* A task first polled later than LAUNCHER__TASK_POLL_MS is polled that rarely after, too. */
int launcher__pve_task_wait(struct pve_client *pve, const char *upid, long first_ms, int64_t timeout_ms) {
        long poll = first_ms > LAUNCHER__TASK_POLL_MS ? first_ms : LAUNCHER__TASK_POLL_MS;
        struct pve_wait w = { .poll_ms = poll, .timeout_ms = (long)timeout_ms, .first_ms = first_ms };
        return upid ? pve_task_wait(pve, upid, &w) : 0;
}

/* Stop it and wait for the stop task (it holds the VMID's config lock until QEMU is down and cleaned up after). */
static int stop_vm(struct pve_client *pve, const char *host, uint32_t vmid, int64_t task_timeout_ms) {
        bool running = false;
        char *upid = NULL;
        int r = pve_vm_running(pve, host, vmid, &running);
        if (r < 0 || !running)
                return r;
        r = pve_vm_action(pve, host, vmid, "stop", &upid);
        if (r == 0)
                r = launcher__pve_task_wait(pve, upid, LAUNCHER__POLL_LATER_MS, task_timeout_ms);
        free(upid);
        return r;
}

/* Proxmox answers the DELETE with a UPID even when its task then fails (on the config lock, a storage error): the
 * task's exit status decides. */
static int destroy_vm(struct pve_client *pve, const char *host, uint32_t vmid, int64_t task_timeout_ms) {
        char *upid = NULL;
        int r = pve_vm_delete(pve, host, vmid, true, true, &upid);
        if (r == 0)
                r = launcher__pve_task_wait(pve, upid, LAUNCHER__POLL_LATER_MS, task_timeout_ms);
        free(upid);
        return r;
}

/* 1 when the VMID has no config (Proxmox: "does not exist"), 0 when it has, or a negative errno. */
static int vm_gone(struct pve_client *pve, const char *host, uint32_t vmid) {
        json_t *config = NULL;
        int r = pve_vm_config_get(pve, host, vmid, &config);
        json_decref(config);
        return r == -ENOENT ? 1 : r;
}

/* The VM is gone only when its config is: whatever the calls and tasks said, that is what is looked at last. */
int launcher__delete_vm(struct pve_client *pve, const char *host, uint32_t vmid, int64_t task_timeout_ms, char *err,
                        size_t errlen) {
        int r = stop_vm(pve, host, vmid, task_timeout_ms);
        if (r == 0)
                r = destroy_vm(pve, host, vmid, task_timeout_ms);
        if (r < 0)
                snprintf(err, errlen, "delete VM %u on %s: %s", vmid, host, pve_client_error(pve));
        else
                snprintf(err, errlen, "delete VM %u on %s: its config is still there after its destroy task", vmid,
                         host);
        if (r == -ECANCELED)
                return r;
        int gone = vm_gone(pve, host, vmid);
        if (gone == 1 && r == 0)
                log_info("launcher: deleted VM %u on %s", vmid, host);
        if (gone == 1)
                return 0;
        if (r < 0)
                return r;
        if (gone < 0)
                snprintf(err, errlen, "delete VM %u on %s: %s", vmid, host, pve_client_error(pve));
        return gone < 0 ? gone : -EBUSY;
}

/* One that is gone already is no error (Proxmox fails the delete task, or the call, with "does not exist"), so no
 * listing first. Proxmox waits for its delete task (delay) and answers null when it went well, so the task is
 * polled only when it failed or took longer. */
int launcher__delete_iso(struct pve_client *pve, const char *host, const char *volume, int64_t task_timeout_ms,
                         char *err, size_t errlen) {
        char storage[64], *upid = NULL;
        const char *colon = strchr(volume, ':');
        if (!colon || (size_t)(colon - volume) >= sizeof storage)
                return 0;
        snprintf(storage, sizeof storage, "%.*s", (int)(colon - volume), volume);
        int r = pve_storage_content_delete(pve, host, storage, volume, LAUNCHER__ISO_DELETE_DELAY_S, &upid);
        if (r == 0)
                r = launcher__pve_task_wait(pve, upid, LAUNCHER__POLL_LATER_MS, task_timeout_ms);
        free(upid);
        if (r < 0 && (r == -ENOENT || strstr(pve_client_error(pve), "does not exist") ||
                      strstr(pve_client_error(pve), "No such file")))
                r = 0;
        if (r < 0)
                snprintf(err, errlen, "delete %s: %s", volume, pve_client_error(pve));
        return r;
}

int launcher__delete_token(struct kube_client *kube, const char *token_id) {
        char name[64];
        snprintf(name, sizeof name, TOKENS_SECRET_PREFIX "%s", token_id);
        int r = kube_delete(kube, &kube_secrets, TOKENS_NAMESPACE, name, NULL, NULL);
        return r == -ENOENT ? 0 : r;
}
