/* Tests for coordinator/launch/launchstep: the one result of a launch step and the decisions the steps take
 * without I/O (what a reconcile does, retries, clone and registration waits, VM ownership, teardown, binds, Nodes,
 * in-flight room) and what each step records in the status. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "launchstep.h"
#include "rfc3339.h"
#include "testutil.h"

#define NOW 1782907200000LL /* 2026-07-01T12:00:00Z */

static struct nodeclaim_status *empty_status(void) {
        struct nodeclaim_status *st = calloc(1, sizeof *st);
        assert_non_null(st);
        return st;
}

/* What st changed against an empty status, as the status write would carry it. */
static json_t *changes(const struct nodeclaim_status *st) {
        static const struct nodeclaim_status empty;
        json_t *out = json_object();
        assert_int_equal(nodeclaim_status_encode(&empty, st, out, NOW), 0);
        return out;
}

static void assert_json_text(const json_t *got, const char *want_text) {
        json_t *want = test_json_parse(want_text);
        if (!json_equal((json_t *)got, want)) {
                char *g = json_dumps(got, JSON_SORT_KEYS), *w = json_dumps(want, JSON_SORT_KEYS);
                fail_msg("got  %s\nwant %s", g, w);
        }
        json_decref(want);
}

static void test_results(void **state) {
        (void)state;
        struct launchstep_result r = launchstep_done();
        assert_true(launchstep_ok(&r));
        r = launchstep_wait(0);
        assert_int_equal(r.kind, LAUNCHSTEP_WAIT);
        assert_int_equal(r.requeue_ms, 1);
        assert_false(launchstep_ok(&r));
        r = launchstep_fail("CloneTimeout", "VM %d", 105);
        assert_int_equal(r.kind, LAUNCHSTEP_FAIL);
        assert_string_equal(r.reason, "CloneTimeout");
        assert_string_equal(r.message, "VM 105");
        r = launchstep_error(-EIO, "disk %s", "gone");
        assert_true(launchstep_is_error(&r, -EIO));
        assert_false(launchstep_is_error(&r, -ENOENT));
        assert_string_equal(r.message, "disk gone");
        struct launchstep_result moved = launchstep_moved();
        assert_false(launchstep_is_error(&moved, 0));
        assert_int_equal(launchstep_then(launchstep_done(), moved).kind, LAUNCHSTEP_MOVED);
        assert_int_equal(launchstep_then(r, moved).kind, LAUNCHSTEP_ERROR);
        assert_int_equal(launchstep_then(launchstep_wait(5), moved).requeue_ms, 5);
}

static void test_todo(void **state) {
        (void)state;
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_INITIALIZED, true, true, true), LAUNCHSTEP_TODO_FINALIZE);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_NONE, true, false, false), LAUNCHSTEP_TODO_FINALIZE);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_INITIALIZED, false, true, false), LAUNCHSTEP_TODO_NOTHING);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_FAILED, false, false, true), LAUNCHSTEP_TODO_FAILED);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_NONE, false, false, true), LAUNCHSTEP_TODO_INVALID);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_CLONING, false, true, false), LAUNCHSTEP_TODO_INVALID);
        assert_int_equal(launchstep_todo(NODECLAIM_STEP_CLONING, false, true, true), LAUNCHSTEP_TODO_STEPS);
        assert_true(launchstep_deferred(NODECLAIM_STEP_CONFIGURED));
        for (int s = 0; s <= NODECLAIM_STEP_FAILED; s++)
                if (s != NODECLAIM_STEP_CONFIGURED)
                        assert_false(launchstep_deferred((enum nodeclaim_step)s));
}

static void test_same_launch(void **state) {
        (void)state;
        struct nodeclaim_status *a = empty_status(), *b = empty_status();
        a->launch_step = b->launch_step = NODECLAIM_STEP_VMID_ALLOCATED;
        a->vmid = b->vmid = 105;
        assert_true(launchstep_same_launch("u1", a, "u1", b, false));
        assert_false(launchstep_same_launch("u1", a, "u2", b, false)); /* recreated under the same name */
        assert_false(launchstep_same_launch("u1", a, "u1", b, true));  /* being deleted */
        assert_false(launchstep_same_launch(NULL, a, "u1", b, false));
        b->launch_step = NODECLAIM_STEP_CLONING;
        assert_false(launchstep_same_launch("u1", a, "u1", b, false));
        b->launch_step = NODECLAIM_STEP_VMID_ALLOCATED;
        b->vmid = 106;
        assert_false(launchstep_same_launch("u1", a, "u1", b, false));
        a->vmid = b->vmid = 0; /* no VMID yet: a conflict starts over */
        assert_false(launchstep_same_launch("u1", a, "u1", b, false));
        free(a);
        free(b);
}

static void test_retry(void **state) {
        (void)state;
        struct launchstep_retry r = launchstep_retry(0);
        assert_int_equal(r.attempts, 1);
        assert_false(r.give_up);
        assert_int_equal(r.requeue_ms, 1000);
        r = launchstep_retry(1);
        assert_int_equal(r.requeue_ms, 2000);
        r = launchstep_retry(5);
        assert_int_equal(r.attempts, 6);
        assert_int_equal(r.requeue_ms, 30000); /* 32 s, capped */
        r = launchstep_retry(LAUNCHSTEP_MAX_ATTEMPTS - 2);
        assert_false(r.give_up);
        r = launchstep_retry(LAUNCHSTEP_MAX_ATTEMPTS - 1);
        assert_true(r.give_up);
        assert_int_equal(r.attempts, LAUNCHSTEP_MAX_ATTEMPTS);
}

static void test_iso_unrecorded(void **state) {
        (void)state;
        struct nodeclaim_status *st = empty_status();
        assert_false(launchstep_iso_unrecorded(st)); /* no VM yet: nothing uploaded */
        st->vmid = 101;
        assert_int_equal(launchstep_reserved_by_pve(st), 0);
        assert_true(launchstep_iso_unrecorded(st)); /* cloned, the ISO maybe uploaded, its write never made */
        snprintf(st->iso_volume, sizeof st->iso_volume, "local:iso/pvescale-a-12345678.iso");
        assert_false(launchstep_iso_unrecorded(st));
        st->iso_volume[0] = '\0';
        assert_int_equal(launchstep_launched(st), 0);
        assert_false(launchstep_iso_unrecorded(st)); /* launched: the ISO went with that write, or was deleted */
        free(st);
}

static void test_refused(void **state) {
        (void)state;
        assert_true(launchstep_refused("configure VM 100: PUT /nodes/{node}/qemu/{vmid}/config: HTTP 403 Permission "
                                       "check failed (/vms/100, VM.Config.CPU)"));
        assert_true(launchstep_refused("resize VM 100: task UPID:pve1:...: Permission check failed "
                                       "(/storage/local-lvm, Datastore.AllocateSpace)"));
        assert_false(launchstep_refused("configure VM 100: PUT /nodes/{node}/qemu/{vmid}/config: HTTP 500 VM is "
                                        "locked (clone)"));
        assert_false(launchstep_refused("create Secret: HTTP 403 secrets is forbidden: exceeded quota"));
        assert_false(launchstep_refused(NULL));
}

static void test_clone_wait(void **state) {
        (void)state;
        const int64_t timeout = 600000;
        struct launchstep_result r = launchstep_clone_wait(NOW - 4, NOW, timeout, 105);
        assert_int_equal(r.kind, LAUNCHSTEP_WAIT);
        assert_int_equal(r.requeue_ms, 10); /* soon after the clone began */
        r = launchstep_clone_wait(NOW - 600, NOW, timeout, 105);
        assert_int_equal(r.requeue_ms, 300); /* half the time it has run */
        r = launchstep_clone_wait(NOW - 60000, NOW, timeout, 105);
        assert_int_equal(r.requeue_ms, LAUNCHSTEP_POLL_MS);
        r = launchstep_clone_wait(0, NOW, timeout, 105); /* began at an unknown time */
        assert_int_equal(r.requeue_ms, LAUNCHSTEP_POLL_MS);
        r = launchstep_clone_wait(NOW - timeout + 40, NOW, timeout, 105);
        assert_int_equal(r.requeue_ms, 40); /* not past the timeout */
        r = launchstep_clone_wait(NOW - timeout, NOW, timeout, 105);
        assert_int_equal(r.kind, LAUNCHSTEP_FAIL);
        assert_string_equal(r.reason, "CloneTimeout");
        assert_string_equal(r.message, "the clone of VM 105 did not finish within 600 s");
}

static void test_clone_end_and_owner(void **state) {
        (void)state;
        assert_int_equal(launchstep_clone_end("OK"), LAUNCHSTEP_CLONE_OK);
        assert_int_equal(launchstep_clone_end("WARNINGS: 2"), LAUNCHSTEP_CLONE_OK);
        assert_int_equal(launchstep_clone_end("unable to create VM 105: config file already exists"),
                         LAUNCHSTEP_CLONE_TAKEN);
        assert_int_equal(launchstep_clone_end("clone failed: storage full"), LAUNCHSTEP_CLONE_FAILED);
        char *desc = launcher_description("c1", "uid-1", NOW, NULL, NULL);
        json_t *ours = json_pack("{s:s}", "description", desc), *theirs = json_pack("{s:s}", "description", desc);
        json_t *locked = json_pack("{s:s}", "lock", "clone"), *plain = json_pack("{s:s}", "name", "other");
        assert_int_equal(launchstep_vm_owner("uid-1", ours), 1);
        assert_int_equal(launchstep_vm_owner("uid-2", theirs), -1);
        assert_int_equal(launchstep_vm_owner("uid-1", locked), 0); /* a clone in progress: cannot tell yet */
        assert_int_equal(launchstep_vm_owner("uid-1", plain), -1);
        /* configured (tagged pvescale): the SMBIOS UUID must be the claim's UID too */
        const char *uid = "0b5c7a2e-1111-2222-3333-444455556666";
        char *d2 = launcher_description("c1", uid, NOW, NULL, NULL);
        json_t *configured = json_pack("{s:s, s:s, s:s}", "description", d2, "tags", "c1;default;pvescale", "smbios1",
                                       "uuid=0B5C7A2E-1111-2222-3333-444455556666,manufacturer=x");
        json_t *reused = json_pack("{s:s, s:s, s:s}", "description", d2, "tags", "c1;default;pvescale", "smbios1",
                                   "uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5");
        json_t *cloned =
                json_pack("{s:s, s:s}", "description", d2, "smbios1", "uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5");
        assert_int_equal(launchstep_vm_owner(uid, configured), 1);
        assert_int_equal(launchstep_vm_owner(uid, reused), -1);  /* a VMID reused by hand with a copy of it all */
        assert_int_equal(launchstep_vm_owner(uid, cloned), 1);   /* cloned, not configured yet: the clone's UUID */
        /* described by a coordinator before the UUID rule (no smbios-uuid line): its description alone, as then, so an
         * upgrade neither leaks nor orphans the VMs of claims made before it */
        assert_true(launcher_description_names_uuid(d2));
        char *old_desc = strdup(d2);
        const char *marker = LAUNCHER_UUID_LINE ": uid\n";
        char *line = strstr(old_desc, marker);
        assert_non_null(line);
        memmove(line, line + strlen(marker), strlen(line + strlen(marker)) + 1);
        assert_false(launcher_description_names_uuid(old_desc));
        json_t *before_rule = json_pack("{s:s, s:s, s:s}", "description", old_desc, "tags", "c1;default;pvescale",
                                        "smbios1", "uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5");
        assert_int_equal(launchstep_vm_owner(uid, before_rule), 1);
        assert_int_equal(launchstep_vm_owner("uid-2", before_rule), -1);
        json_decref(before_rule);
        free(old_desc);
        json_t *node = json_pack("{s:{s:{s:s}}}", "status", "nodeInfo", "systemUUID",
                                 "0B5C7A2E-1111-2222-3333-444455556666");
        json_t *other_node = json_pack("{s:{s:{s:s}}}", "status", "nodeInfo", "systemUUID",
                                       "7a6c5a99-cea1-448d-8b02-12ef90550cf5");
        json_t *silent_node = json_pack("{s:{}}", "status");
        assert_true(launchstep_node_is_claims(node, uid));
        assert_false(launchstep_node_is_claims(other_node, uid)); /* another VM under the same providerID */
        assert_true(launchstep_node_is_claims(silent_node, uid));  /* no systemUUID: by its providerID */
        json_decref(node);
        json_decref(other_node);
        json_decref(silent_node);
        free(d2);
        json_decref(configured);
        json_decref(reused);
        json_decref(cloned);
        free(desc);
        json_decref(ours);
        json_decref(theirs);
        json_decref(locked);
        json_decref(plain);
}

static void test_cdrom_volume(void **state) {
        (void)state;
        char v[64] = "junk";
        launchstep_cdrom_volume("local:iso/pvescale-a-1.iso,media=cdrom", v, sizeof v);
        assert_string_equal(v, "local:iso/pvescale-a-1.iso");
        launchstep_cdrom_volume("none,media=cdrom", v, sizeof v);
        assert_string_equal(v, "");
        launchstep_cdrom_volume("local-lvm:vm-105-disk-0,size=4G", v, sizeof v);
        assert_string_equal(v, "");
        launchstep_cdrom_volume(NULL, v, sizeof v);
        assert_string_equal(v, "");
}

static void test_bind_check(void **state) {
        (void)state;
        assert_int_equal(launchstep_bind_check(-EEXIST, 105, 105), LAUNCHSTEP_BIND_DONE);
        assert_int_equal(launchstep_bind_check(-ENOENT, 105, 105), LAUNCHSTEP_BIND_DONE);
        assert_int_equal(launchstep_bind_check(-EEXIST, 200, 105), LAUNCHSTEP_BIND_TAKEN);
        assert_int_equal(launchstep_bind_check(-ENOENT, 0, 105), LAUNCHSTEP_BIND_RETRY);
}

static void test_registration_wait(void **state) {
        (void)state;
        const int64_t timeout = 900000;
        struct launchstep_result r = launchstep_registration_wait(NOW - 1000, NOW, timeout, "proxmox://r1/105");
        assert_int_equal(r.kind, LAUNCHSTEP_WAIT);
        assert_int_equal(r.requeue_ms, LAUNCHSTEP_POLL_MS);
        r = launchstep_registration_wait(NOW - timeout + 300, NOW, timeout, "proxmox://r1/105");
        assert_int_equal(r.requeue_ms, 300);
        r = launchstep_registration_wait(NOW - timeout, NOW, timeout, "proxmox://r1/105");
        assert_int_equal(r.kind, LAUNCHSTEP_FAIL);
        assert_string_equal(r.reason, "RegistrationTimeout");
        assert_string_equal(r.message, "no Node with providerID proxmox://r1/105 within 900 s");
        r = launchstep_registration_wait(0, NOW, timeout, "p"); /* no startedAt: nothing to wait for */
        assert_int_equal(r.kind, LAUNCHSTEP_FAIL);
}

static void test_node(void **state) {
        (void)state;
        assert_int_equal(launchstep_node(LAUNCHER_NODE_INITIALIZED, NOW, NOW), LAUNCHSTEP_NODE_INITIALIZED);
        assert_int_equal(launchstep_node(LAUNCHER_NODE_SETTLING, NOW - 9000, NOW), LAUNCHSTEP_NODE_WAIT);
        assert_int_equal(launchstep_node(LAUNCHER_NODE_SETTLING, NOW - LAUNCHSTEP_SETTLE_MAX_MS, NOW),
                         LAUNCHSTEP_NODE_REGISTERED);
        assert_int_equal(launchstep_node(LAUNCHER_NODE_SETTLING, -1, NOW), LAUNCHSTEP_NODE_REGISTERED);
        assert_int_equal(launchstep_node(LAUNCHER_NODE_TAINTED, NOW, NOW), LAUNCHSTEP_NODE_REGISTERED);
        assert_int_equal(launchstep_node(LAUNCHER_NODE_NOT_READY, -1, NOW), LAUNCHSTEP_NODE_REGISTERED);
}

static void test_teardown_vm(void **state) {
        (void)state;
        const int64_t timeout = 600000;
        struct nodeclaim_status *st = empty_status();
        assert_int_equal(launchstep_teardown_vm(1, false, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_DELETE);
        assert_int_equal(launchstep_teardown_vm(-1, false, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_KEEP);
        assert_int_equal(launchstep_teardown_vm(1, true, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_WAIT);
        /* a locked VM without a description: someone's clone, unless the claim recorded its own clone task */
        st->clone_started_ms = NOW - 1000;
        assert_int_equal(launchstep_teardown_vm(0, true, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_WAIT);
        st->clone_started_ms = NOW - 2 * timeout - 60001;
        assert_int_equal(launchstep_teardown_vm(0, true, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_KEEP);
        snprintf(st->clone_task, sizeof st->clone_task, "UPID:x");
        assert_int_equal(launchstep_teardown_vm(0, true, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_WAIT);
        assert_int_equal(launchstep_teardown_vm(0, false, st, NOW, timeout), LAUNCHSTEP_TEARDOWN_DELETE);
        free(st);
}

static void test_gc_claim(void **state) {
        (void)state;
        char msg[256] = "";
        struct nodeclaim_status *st = empty_status();
        st->vmid = 105;
        snprintf(st->region, sizeof st->region, "pve-a");
        snprintf(st->node_name, sizeof st->node_name, "node-a");
        /* not joined yet: the launch itself deals with its VM and Node */
        st->launch_step = NODECLAIM_STEP_REGISTERED;
        assert_false(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_GONE, false, msg, sizeof msg));
        st->launch_step = NODECLAIM_STEP_INITIALIZED;
        assert_false(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_OURS, true, msg, sizeof msg));
        assert_false(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_UNKNOWN, true, msg, sizeof msg));
        assert_false(launchstep_gc_claim(st, true, LAUNCHSTEP_GC_VM_GONE, false, msg, sizeof msg)); /* deleting */
        assert_true(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_GONE, true, msg, sizeof msg));
        assert_string_equal(msg, "its VM 105 in pve-a is gone");
        assert_true(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_OTHER, true, msg, sizeof msg));
        assert_string_equal(msg, "its VM 105 in pve-a is another's now");
        assert_true(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_OURS, false, msg, sizeof msg));
        assert_string_equal(msg, "its Node node-a is gone");
        st->node_name[0] = '\0'; /* no Node recorded: none to lose */
        assert_false(launchstep_gc_claim(st, false, LAUNCHSTEP_GC_VM_UNKNOWN, false, msg, sizeof msg));
        free(st);
}

static void test_holds_room(void **state) {
        (void)state;
        const char *t1 = "2026-07-01T12:00:00Z", *t2 = "2026-07-01T12:00:01Z";
        assert_true(launchstep_holds_room(NODECLAIM_STEP_RESERVED, t2, "b", t1, "a"));
        assert_true(launchstep_holds_room(NODECLAIM_STEP_VMID_ALLOCATED, t2, "b", t1, "a"));
        assert_true(launchstep_holds_room(NODECLAIM_STEP_CLONING, t2, "b", t1, "a"));
        assert_false(launchstep_holds_room(NODECLAIM_STEP_LAUNCHED, t1, "a", t2, "b")); /* its VM counts itself */
        assert_false(launchstep_holds_room(NODECLAIM_STEP_FAILED, t1, "a", t2, "b"));
        assert_true(launchstep_holds_room(NODECLAIM_STEP_NONE, t1, "b", t2, "a"));  /* older */
        assert_false(launchstep_holds_room(NODECLAIM_STEP_NONE, t2, "a", t1, "b")); /* younger */
        assert_true(launchstep_holds_room(NODECLAIM_STEP_NONE, t1, "a", t1, "b"));  /* as old: by name */
        assert_false(launchstep_holds_room(NODECLAIM_STEP_NONE, t1, "b", t1, "a"));
}

static void test_reserved_records(void **state) {
        (void)state;
        struct nodeclaim_status *st = empty_status();
        json_t *res = test_json_parse("{\"id\": \"r-1\", \"cpus\": \"4-5\", \"numa\": [{\"node\": 1, \"guest_cpus\":"
                                      " \"0-1\", \"memory_bytes\": 4294967296}]}");
        assert_int_equal(launchstep_reserved_by_agent(st, res), 0);
        launchstep_vmid_picked(st, "r1", 105, NOW);
        json_t *ch = changes(st);
        assert_json_text(ch, "{\"reservationMode\": \"agent\", \"reservationID\": \"r-1\", \"placement\": {\"numa\":"
                             " [{\"hostNode\": 1, \"guestCPUs\": \"0-1\", \"memoryMiB\": 4096}], \"cpus\": \"4-5\"},"
                             " \"vmid\": 105, \"providerID\": \"proxmox://r1/105\", \"cloneStartedAt\":"
                             " \"2026-07-01T12:00:00.000Z\", \"conditions\": [{\"type\": \"Launched\", \"status\":"
                             " \"Unknown\", \"reason\": \"Launching\", \"message\": \"reserved on the host agent\","
                             " \"lastTransitionTime\": \"2026-07-01T12:00:00Z\"}]}");
        json_decref(ch);
        launchstep_vmid_picked(st, "r1", 106, NOW + 5000); /* a second VMID keeps the first time */
        assert_int_equal(st->clone_started_ms, NOW);
        assert_string_equal(st->provider_id, "proxmox://r1/106");
        launchstep_vmid_dropped(st);
        assert_int_equal(st->vmid, 0);
        assert_string_equal(st->provider_id, "");
        assert_int_equal(launchstep_reserved_by_pve(st), 0);
        assert_int_equal(st->reservation, NODECLAIM_RESERVATION_PVE);
        assert_string_equal(st->reservation_id, "");
        assert_string_equal(nodeclaim_condition(st, "Launched")->message,
                            "reserved by Proxmox accounting (no host agent)");
        json_t *odd = test_json_parse("{\"id\": \"r-2\", \"numa\": [{\"node\": 0, \"guest_cpus\": \"0\","
                                      " \"memory_bytes\": 1000}]}");
        assert_int_equal(launchstep_reserved_by_agent(st, odd), -EINVAL);
        json_t *anon = test_json_parse("{\"numa\": []}");
        assert_int_equal(launchstep_reserved_by_agent(st, anon), -EINVAL);
        json_decref(anon);
        json_decref(odd);
        json_decref(res);
        free(st);
}

static void test_step_records(void **state) {
        (void)state;
        struct nodeclaim_status *st = empty_status();
        st->attempts = 3;
        snprintf(st->last_error, sizeof st->last_error, "old");
        launchstep_record(st, NODECLAIM_STEP_LAUNCHED);
        assert_int_equal(st->launch_step, NODECLAIM_STEP_LAUNCHED);
        assert_int_equal(st->attempts, 0);
        assert_string_equal(st->last_error, "");
        launchstep_attempt_failed(st, 2, "no room");
        assert_int_equal(launchstep_launched(st), 0);
        json_t *ch = changes(st);
        assert_json_text(ch, "{\"launchStep\": \"Launched\", \"attempts\": 2, \"lastError\": \"no room\","
                             " \"conditions\": [{\"type\": \"Launched\", \"status\": \"True\", \"reason\": \"Launched\","
                             " \"message\": \"VM started and pinned\", \"lastTransitionTime\": \"2026-07-01T12:00:00Z\"},"
                             " {\"type\": \"Registered\", \"status\": \"Unknown\", \"reason\": \"AwaitingNode\","
                             " \"message\": \"waiting for the Node to register\", \"lastTransitionTime\":"
                             " \"2026-07-01T12:00:00Z\"}]}");
        json_decref(ch);
        assert_int_equal(launchstep_registered(st, "node-a"), 0);
        assert_string_equal(st->node_name, "node-a");
        assert_true(nodeclaim_condition_true(st, "Registered"));
        assert_string_equal(nodeclaim_condition(st, "Initialized")->reason, "AwaitingReady");
        snprintf(st->token_id, sizeof st->token_id, "abc123");
        snprintf(st->iso_volume, sizeof st->iso_volume, "local:iso/x.iso");
        assert_int_equal(launchstep_initialized(st, NULL), 0);
        assert_string_equal(st->token_id, "");
        assert_string_equal(st->iso_volume, "");
        assert_true(nodeclaim_condition_true(st, "Initialized"));
        free(st);
        st = empty_status();
        assert_int_equal(launchstep_initialized(st, "node-b"), 0); /* registered and initialized in one record */
        assert_string_equal(st->node_name, "node-b");
        assert_true(nodeclaim_condition_true(st, "Registered"));
        assert_string_equal(st->conditions[0].type, "Registered");
        assert_string_equal(st->conditions[1].type, "Initialized");
        free(st);
}

static void test_failure(void **state) {
        (void)state;
        struct nodeclaim_status *st = empty_status();
        struct launchstep_failure f = launchstep_failure(st, NULL);
        assert_string_equal(f.reason, "LaunchFailed");
        assert_string_equal(f.message, "");
        struct launchstep_result why = launchstep_fail("CloneTimeout", "too slow");
        f = launchstep_failure(st, &why);
        assert_string_equal(f.reason, "CloneTimeout");
        assert_string_equal(f.message, "too slow");
        assert_int_equal(launchstep_failed(st, f.reason, f.message), 0);
        assert_int_equal(st->launch_step, NODECLAIM_STEP_FAILED);
        assert_string_equal(st->failure_reason, "CloneTimeout");
        assert_string_equal(st->last_error, "too slow");
        assert_string_equal(nodeclaim_condition(st, "Launched")->status, "False");
        assert_string_equal(nodeclaim_condition(st, "Launched")->reason, "CloneTimeout");
        /* a failure recorded before and not finished: its reason and message come from the status */
        f = launchstep_failure(st, NULL);
        assert_string_equal(f.reason, "CloneTimeout");
        assert_string_equal(f.message, "too slow");
        struct launchstep_result err = launchstep_error(-EIO, "disk gone");
        f = launchstep_failure(st, &err);
        assert_string_equal(f.reason, "CloneTimeout");
        assert_string_equal(f.message, "disk gone");
        free(st);
        /* once launched, the failure is the Registered condition's */
        st = empty_status();
        assert_int_equal(launchstep_launched(st), 0);
        assert_int_equal(launchstep_failed(st, "RegistrationTimeout", "no Node"), 0);
        assert_string_equal(nodeclaim_condition(st, "Registered")->status, "False");
        assert_true(nodeclaim_condition_true(st, "Launched"));
        free(st);
}

static void test_node_disrupted(void **state) {
        (void)state;
        json_t *t = test_json_parse("[{\"key\": \"dedicated\", \"effect\": \"NoSchedule\"}]");
        assert_false(launchstep_node_disrupted(t));
        assert_false(launchstep_node_disrupted(NULL));
        json_array_append_new(t, test_json_parse("{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoExecute\"}"));
        assert_false(launchstep_node_disrupted(t)); /* another effect */
        json_array_append_new(t, test_json_parse("{\"key\": \"karpenter.sh/disrupted\", \"effect\": \"NoSchedule\"}"));
        assert_true(launchstep_node_disrupted(t)); /* Karpenter's counts as ours */
        json_decref(t);
        t = test_json_parse("[{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoSchedule\"}]");
        assert_true(launchstep_node_disrupted(t));
        json_decref(t);
}

static void test_node_taint_untaint(void **state) {
        (void)state;
        json_t *node = test_json_parse("{\"metadata\": {\"name\": \"n\"}}");
        assert_int_equal(launchstep_node_untaint(node), 1); /* no spec, no taints: nothing to take off */
        assert_int_equal(launchstep_node_taint(node), 0);
        assert_true(launchstep_node_disrupted(json_object_get(json_object_get(node, "spec"), "taints")));
        assert_int_equal(launchstep_node_taint(node), 1); /* once */
        json_t *taints = json_object_get(json_object_get(node, "spec"), "taints");
        json_array_insert_new(taints, 0, test_json_parse("{\"key\": \"dedicated\", \"effect\": \"NoSchedule\"}"));
        json_array_append_new(taints, test_json_parse("{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoExecute\"}"));
        assert_int_equal(launchstep_node_untaint(node), 0);
        assert_false(launchstep_node_disrupted(taints));
        assert_int_equal(json_array_size(taints), 2); /* the others stay, another effect too */
        assert_string_equal(json_string_value(json_object_get(json_array_get(taints, 0), "key")), "dedicated");
        assert_int_equal(launchstep_node_untaint(node), 1);
        json_decref(node);
        node = test_json_parse("{\"spec\": {\"taints\": [{\"key\": \"karpenter.sh/disrupted\", \"effect\": \"NoSchedule\"}]}}");
        assert_int_equal(launchstep_node_taint(node), 1); /* Karpenter's counts as ours */
        assert_int_equal(launchstep_node_untaint(node), 1); /* but is not ours to take off */
        json_decref(node);
}

static bool registration_taint(const char *text) {
        json_t *t = test_json_parse(text);
        bool r = launchstep_registration_taint(t);
        json_decref(t);
        return r;
}

/* Registration takes off ours and Karpenter's unregistered taint (a pool copied from Karpenter may list it as a
 * startup taint; issue 37, 2), nothing else. */
static void test_registration_taints(void **state) {
        (void)state;
        assert_true(registration_taint("{\"key\": \"pvescale.io/unregistered\", \"value\": \"true\", "
                                       "\"effect\": \"NoExecute\"}"));
        assert_true(registration_taint("{\"key\": \"karpenter.sh/unregistered\", \"effect\": \"NoExecute\"}"));
        assert_false(registration_taint("{\"key\": \"karpenter.sh/unregistered\", \"effect\": \"NoSchedule\"}"));
        assert_false(registration_taint("{\"key\": \"node.cilium.io/agent-not-ready\", \"effect\": \"NoExecute\"}"));
        assert_false(registration_taint("{\"effect\": \"NoExecute\"}"));
}

static enum launchstep_drain drain_of(const char *pod_json) {
        json_t *pod = test_json_parse(pod_json);
        enum launchstep_drain d = launchstep_pod_drain(pod, 1700000000000);
        json_decref(pod);
        return d;
}

static bool protected_at(const char *pod_json, const char *now) {
        int64_t now_ms;
        assert_int_equal(rfc3339_parse(now, &now_ms), 0);
        json_t *pod = test_json_parse(pod_json);
        bool p = launchstep_pod_do_not_disrupt(pod, now_ms);
        json_decref(pod);
        return p;
}

/* do-not-disrupt on a pod as Karpenter reads it: "true", or a duration after the pod's start time (its creation
 * when it has not started; neither known: protected) at which the protection ends; anything else protects
 * nothing. */
static void test_do_not_disrupt_with_a_duration(void **state) {
        (void)state;
        const char *started = "{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"4h\"}, "
                              "\"creationTimestamp\": \"2026-07-01T08:00:00Z\"}, "
                              "\"status\": {\"startTime\": \"2026-07-01T10:00:00Z\"}}";
        assert_true(protected_at(started, "2026-07-01T13:59:59Z"));
        assert_false(protected_at(started, "2026-07-01T14:00:00Z"));
        const char *created = "{\"metadata\": {\"annotations\": {\"pvescale.io/do-not-disrupt\": \"1h30m\"}, "
                              "\"creationTimestamp\": \"2026-07-01T08:00:00Z\"}}";
        assert_true(protected_at(created, "2026-07-01T09:29:00Z"));
        assert_false(protected_at(created, "2026-07-01T09:31:00Z"));
        const char *unknown = "{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"5m\"}}}";
        assert_true(protected_at(unknown, "2030-01-01T00:00:00Z"));
        assert_true(protected_at("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"true\"}}}",
                                 "2030-01-01T00:00:00Z"));
        assert_false(protected_at("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": "
                                  "\"forever\"}}}", "2026-07-01T00:00:00Z"));
        assert_false(protected_at("{\"metadata\": {\"name\": \"web\"}}", "2026-07-01T00:00:00Z"));
        /* the drain holds such a pod while the duration runs, and evicts it after */
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"10m\"}}, "
                                  "\"status\": {\"startTime\": \"2023-11-14T22:05:00Z\"}}"), LAUNCHSTEP_DRAIN_HOLD);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"10m\"}}, "
                                  "\"status\": {\"startTime\": \"2023-11-14T22:03:19Z\"}}"), LAUNCHSTEP_DRAIN_EVICT);
}

static const char *invalid_of(const char *pod_json, const char **key) {
        static char buf[64];
        json_t *pod = test_json_parse(pod_json);
        const char *v = launchstep_pod_do_not_disrupt_invalid(pod, key);
        snprintf(buf, sizeof buf, "%s", v ? v : "(none)");
        json_decref(pod);
        return buf;
}

/* The values Karpenter ignores with an InvalidDoNotDisruptAnnotation Event: not "true", not a positive duration. */
static void test_do_not_disrupt_invalid(void **state) {
        (void)state;
        const char *key = NULL;
        assert_string_equal(invalid_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": "
                                       "\"forever\"}}}", &key), "forever");
        assert_string_equal(key, "karpenter.sh/do-not-disrupt");
        assert_string_equal(invalid_of("{\"metadata\": {\"annotations\": {\"pvescale.io/do-not-disrupt\": "
                                       "\"0s\"}}}", &key), "0s");
        assert_string_equal(key, "pvescale.io/do-not-disrupt");
        assert_string_equal(invalid_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": "
                                       "\"true\", \"pvescale.io/do-not-disrupt\": \"4h\"}}}", &key), "(none)");
        assert_string_equal(invalid_of("{\"metadata\": {\"name\": \"web\"}}", &key), "(none)");
}

static void test_pod_drain(void **state) {
        (void)state;
        assert_int_equal(drain_of("{\"metadata\": {\"name\": \"web\"}, \"status\": {\"phase\": \"Running\"}}"),
                         LAUNCHSTEP_DRAIN_EVICT);
        assert_int_equal(drain_of("{\"metadata\": {\"ownerReferences\": [{\"kind\": \"ReplicaSet\", \"controller\": true}]}}"),
                         LAUNCHSTEP_DRAIN_EVICT);
        assert_int_equal(drain_of("{\"metadata\": {\"ownerReferences\": [{\"kind\": \"DaemonSet\", \"controller\": true}]}}"),
                         LAUNCHSTEP_DRAIN_STAY);
        /* a DaemonSet that owns without controlling does not keep the pod */
        assert_int_equal(drain_of("{\"metadata\": {\"ownerReferences\": [{\"kind\": \"DaemonSet\"}]}}"),
                         LAUNCHSTEP_DRAIN_EVICT);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"kubernetes.io/config.mirror\": \"abc\"}}}"),
                         LAUNCHSTEP_DRAIN_STAY);
        /* do-not-disrupt: never evicted, but it holds the drain (Karpenter's IsEvictable, IsDrainable); being
         * deleted or finished, it is like any other (issue 37, 7) */
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"true\"}}}"),
                         LAUNCHSTEP_DRAIN_HOLD);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"pvescale.io/do-not-disrupt\": \"true\"}}}"),
                         LAUNCHSTEP_DRAIN_HOLD);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"pvescale.io/do-not-disrupt\": \"false\"}}}"),
                         LAUNCHSTEP_DRAIN_EVICT);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"true\"}, "
                                  "\"deletionTimestamp\": \"2026-07-01T12:00:00Z\"}}"), LAUNCHSTEP_DRAIN_GOING);
        assert_int_equal(drain_of("{\"metadata\": {\"annotations\": {\"karpenter.sh/do-not-disrupt\": \"true\"}}, "
                                  "\"status\": {\"phase\": \"Succeeded\"}}"), LAUNCHSTEP_DRAIN_STAY);
        assert_int_equal(drain_of("{\"status\": {\"phase\": \"Succeeded\"}}"), LAUNCHSTEP_DRAIN_STAY);
        assert_int_equal(drain_of("{\"status\": {\"phase\": \"Failed\"}}"), LAUNCHSTEP_DRAIN_STAY);
        /* now is 2023-11-14T22:13:20Z: a minute past its deletionTimestamp it is stuck terminating and holds nothing */
        assert_int_equal(drain_of("{\"metadata\": {\"deletionTimestamp\": \"2023-11-14T22:12:20Z\"}}"),
                         LAUNCHSTEP_DRAIN_GOING);
        assert_int_equal(drain_of("{\"metadata\": {\"deletionTimestamp\": \"2023-11-14T22:12:19Z\"}}"),
                         LAUNCHSTEP_DRAIN_STAY);
        assert_int_equal(drain_of("{\"metadata\": {\"deletionTimestamp\": \"2026-07-01T12:00:00Z\"}}"),
                         LAUNCHSTEP_DRAIN_GOING);
        /* tolerations of pvescale.io/disrupted:NoSchedule */
        static const char *const tolerating[] = {
                "{\"key\": \"pvescale.io/disrupted\", \"operator\": \"Exists\"}",
                "{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoSchedule\"}",
                "{\"key\": \"pvescale.io/disrupted\", \"operator\": \"Equal\", \"value\": \"\"}",
                "{\"operator\": \"Exists\"}",
                "{\"operator\": \"Exists\", \"effect\": \"NoSchedule\"}",
        };
        static const char *const not_tolerating[] = {
                "{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoExecute\"}",
                "{\"key\": \"pvescale.io/disrupted\", \"operator\": \"Equal\", \"value\": \"x\"}",
                "{\"key\": \"other\", \"operator\": \"Exists\"}",
                "{\"operator\": \"Exists\", \"effect\": \"NoExecute\"}",
                "{\"key\": \"karpenter.sh/disrupted\", \"operator\": \"Exists\"}",
        };
        char pod[512];
        for (size_t i = 0; i < sizeof tolerating / sizeof tolerating[0]; i++) {
                snprintf(pod, sizeof pod, "{\"spec\": {\"tolerations\": [%s]}}", tolerating[i]);
                assert_int_equal(drain_of(pod), LAUNCHSTEP_DRAIN_STAY);
        }
        for (size_t i = 0; i < sizeof not_tolerating / sizeof not_tolerating[0]; i++) {
                snprintf(pod, sizeof pod, "{\"spec\": {\"tolerations\": [%s]}}", not_tolerating[i]);
                assert_int_equal(drain_of(pod), LAUNCHSTEP_DRAIN_EVICT);
        }
}

static void test_grace_period(void **state) {
        (void)state;
        char err[256] = "";
        int64_t ms = 0;
        json_t *claim = test_json_parse("{\"spec\": {}}");
        json_t *pool = test_json_parse("{\"spec\": {\"template\": {\"spec\": {\"terminationGracePeriod\": \"1m30s\"}}}}");
        assert_int_equal(launchstep_grace_period(claim, NULL, &ms, err, sizeof err), 0);
        assert_int_equal(ms, -1); /* none: wait forever */
        assert_int_equal(launchstep_grace_period(claim, pool, &ms, err, sizeof err), 0);
        assert_int_equal(ms, 90000);
        json_object_set_new(json_object_get(claim, "spec"), "terminationGracePeriod", json_string("10s"));
        assert_int_equal(launchstep_grace_period(claim, pool, &ms, err, sizeof err), 0);
        assert_int_equal(ms, 10000); /* the claim's own comes first */
        json_object_set_new(json_object_get(claim, "spec"), "terminationGracePeriod", json_string("soon"));
        assert_int_equal(launchstep_grace_period(claim, pool, &ms, err, sizeof err), -EINVAL);
        assert_string_equal(err, "spec.terminationGracePeriod: \"soon\" is no duration");
        json_decref(claim);
        json_decref(pool);
        /* over once the period has passed since the termination began; never without one, or without a start */
        assert_false(launchstep_grace_over(NOW, 10000, NOW + 9999));
        assert_true(launchstep_grace_over(NOW, 10000, NOW + 10000));
        assert_true(launchstep_grace_over(NOW, 0, NOW));
        assert_false(launchstep_grace_over(NOW, -1, NOW + 365LL * 86400000));
        assert_false(launchstep_grace_over(0, 10000, NOW));
}

/* The termination timestamp annotation (node repair's) ends the grace period when it comes; a bad one is ignored. */
static void test_termination_due(void **state) {
        (void)state;
        json_t *claim = test_json_parse("{\"metadata\": {\"name\": \"c\"}}");
        assert_false(launchstep_termination_due(claim, NOW));
        json_t *ann = json_object();
        json_object_set_new(json_object_get(claim, "metadata"), "annotations", ann);
        json_object_set_new(ann, LAUNCHSTEP_ANNOTATION_TERMINATION_TIMESTAMP, json_string("2026-07-01T12:00:00Z"));
        assert_false(launchstep_termination_due(claim, NOW - 1));
        assert_true(launchstep_termination_due(claim, NOW));
        json_object_set_new(ann, LAUNCHSTEP_ANNOTATION_TERMINATION_TIMESTAMP, json_string("now"));
        assert_false(launchstep_termination_due(claim, NOW));
        json_decref(claim);
}

static void test_drain_requeue(void **state) {
        (void)state;
        assert_int_equal(launchstep_drain_requeue(NOW, NOW), LAUNCHSTEP_DRAIN_MIN_MS);
        assert_int_equal(launchstep_drain_requeue(0, NOW), LAUNCHSTEP_DRAIN_MIN_MS);
        assert_int_equal(launchstep_drain_requeue(NOW, NOW + 30000), 3000);
        assert_int_equal(launchstep_drain_requeue(NOW, NOW + 3600000), LAUNCHSTEP_DRAIN_MAX_MS);
}

static void test_term_records(void **state) {
        (void)state;
        struct nodeclaim_status *st = empty_status();
        assert_int_equal(launchstep_term_record(st, NODECLAIM_TERM_TAINTED, NOW), 0);
        assert_int_equal(st->term_step, NODECLAIM_TERM_TAINTED);
        assert_int_equal(st->term_started_ms, NOW);
        assert_string_equal(nodeclaim_condition(st, "Drained")->status, "False");
        /* a restart that records Tainted again keeps when the termination began */
        assert_int_equal(launchstep_term_record(st, NODECLAIM_TERM_TAINTED, NOW + 5000), 0);
        assert_int_equal(st->term_started_ms, NOW);
        assert_int_equal(launchstep_term_record(st, NODECLAIM_TERM_DRAINED, NOW + 6000), 0);
        assert_true(nodeclaim_condition_true(st, "Drained"));
        assert_int_equal(launchstep_term_record(st, NODECLAIM_TERM_NODE_DELETED, NOW + 7000), 0);
        assert_true(nodeclaim_condition_true(st, "InstanceTerminating"));
        assert_int_equal(launchstep_term_record(st, NODECLAIM_TERM_INSTANCE_TERMINATED, NOW + 8000), 0);
        json_t *out = changes(st);
        assert_string_equal(json_string_value(json_object_get(out, "terminationStep")), "InstanceTerminated");
        assert_string_equal(json_string_value(json_object_get(out, "terminationStartedAt")), "2026-07-01T12:00:00.000Z");
        json_decref(out);
        free(st);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_results),         cmocka_unit_test(test_todo),
                cmocka_unit_test(test_same_launch),     cmocka_unit_test(test_retry), cmocka_unit_test(test_refused), cmocka_unit_test(test_iso_unrecorded),
                cmocka_unit_test(test_clone_wait),      cmocka_unit_test(test_clone_end_and_owner),
                cmocka_unit_test(test_cdrom_volume),    cmocka_unit_test(test_bind_check),
                cmocka_unit_test(test_registration_wait), cmocka_unit_test(test_node),
                cmocka_unit_test(test_teardown_vm),     cmocka_unit_test(test_holds_room),
                cmocka_unit_test(test_reserved_records), cmocka_unit_test(test_step_records),
                cmocka_unit_test(test_failure),         cmocka_unit_test(test_node_disrupted), cmocka_unit_test(test_node_taint_untaint),
                cmocka_unit_test(test_pod_drain), cmocka_unit_test(test_do_not_disrupt_with_a_duration),
                cmocka_unit_test(test_do_not_disrupt_invalid),       cmocka_unit_test(test_registration_taints),
                cmocka_unit_test(test_grace_period),
                cmocka_unit_test(test_termination_due),
                cmocka_unit_test(test_drain_requeue),   cmocka_unit_test(test_term_records),
                cmocka_unit_test(test_gc_claim),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
