/* Tests for agent/inventory: qemu-server config parsing, malformed lines, sections, running detection. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "inventory.h"
#include "testutil.h"

#define MIB (UINT64_C(1) << 20)

static struct vm *parse(const char *text) {
        struct vm *vm = NULL;
        assert_int_equal(inventory_parse_config(105, text, &vm), 0);
        assert_non_null(vm);
        return vm;
}

static void assert_cpuset(const struct cpuset *s, const char *want) {
        assert_non_null(s);
        char *got = cpuset_format(s);
        assert_string_equal(got, want);
        free(got);
}

/* The error on `line` exists and its reason contains `needle`. */
static void assert_error(const struct vm *vm, unsigned line, const char *needle) {
        for (size_t i = 0; i < vm->n_errors; i++) {
                if (vm->errors[i].line == line && strstr(vm->errors[i].reason, needle))
                        return;
        }
        for (size_t i = 0; i < vm->n_errors; i++)
                print_message("error %zu: line %u: %s\n", i, vm->errors[i].line, vm->errors[i].reason);
        fail_msg("no error on line %u containing '%s'", line, needle);
}

static void test_full_config(void **state) {
        (void)state;
        struct vm *vm = parse("#web server\n"
                              "#second description line: with colon\n"
                              "agent: 1\n"
                              "affinity: 4-7,0\n"
                              "balloon: 2048\n"
                              "boot: order=scsi0\n"
                              "cores: 4\n"
                              "hugepages: 1024\n"
                              "memory: 8192\n"
                              "name: web-1\n"
                              "net0: virtio=AA:BB:CC:DD:EE:FF,bridge=vmbr0\n"
                              "numa: 1\n"
                              "numa0: cpus=0-1,hostnodes=0,memory=4096,policy=bind\n"
                              "numa1: cpus=2;3,hostnodes=1;2-3,memory=4096,policy=preferred\n"
                              "sockets: 2\n"
                              "tags: pool-a;pvescale\n"
                              "vcpus: 6\n"
                              "\n");
        assert_int_equal(vm->n_errors, 0);
        assert_string_equal(vm->name, "web-1");
        assert_int_equal(vm->cores, 4);
        assert_int_equal(vm->sockets, 2);
        assert_int_equal(vm->vcpus, 6);
        assert_int_equal(vm_vcpu_count(vm), 6);
        assert_int_equal(vm->memory_mib, 8192);
        assert_int_equal(vm->balloon_mib, 2048);
        assert_cpuset(vm->affinity, "0,4-7");
        assert_true(vm->numa);
        assert_true(vm->numa_valid);
        assert_true(vm->numa_nodes[0].present);
        assert_cpuset(vm->numa_nodes[0].guest_cpus, "0-1");
        assert_cpuset(vm->numa_nodes[0].hostnodes, "0");
        assert_int_equal(vm->numa_nodes[0].memory_mib, 4096);
        assert_string_equal(vm->numa_nodes[0].policy, "bind");
        assert_cpuset(vm->numa_nodes[1].guest_cpus, "2-3");
        assert_cpuset(vm->numa_nodes[1].hostnodes, "1-3");
        assert_string_equal(vm->numa_nodes[1].policy, "preferred");
        assert_false(vm->numa_nodes[2].present);
        assert_string_equal(vm->hugepages, "1024");
        assert_string_equal(vm->tags, "pool-a;pvescale");
        assert_false(vm->template_vm);
        vm_free(vm);
}

static void test_defaults(void **state) {
        (void)state;
        struct vm *vm = parse("name: tiny\n");
        assert_int_equal(vm->n_errors, 0);
        assert_int_equal(vm->cores, 1);
        assert_int_equal(vm->sockets, 1);
        assert_int_equal(vm_vcpu_count(vm), 1);
        assert_int_equal(vm->memory_mib, 512);
        assert_null(vm->affinity);
        assert_false(vm->numa);
        assert_null(vm->tags);
        assert_string_equal(vm->hugepages, "");
        vm_free(vm);
        vm = parse("");
        assert_int_equal(vm->n_errors, 0);
        assert_null(vm->name);
        vm_free(vm);
}

static void test_memory_current_form(void **state) {
        (void)state;
        struct vm *vm = parse("memory: current=16384\n");
        assert_int_equal(vm->n_errors, 0);
        assert_int_equal(vm->memory_mib, 16384);
        vm_free(vm);
        vm = parse("memory: 4096\r\n");
        assert_int_equal(vm->n_errors, 0);
        assert_int_equal(vm->memory_mib, 4096);
        vm_free(vm);
        vm = parse("memory: current=abc\nmemory: max=4096\nmemory: 8\nmemory: current=\n");
        assert_int_equal(vm->n_errors, 4);
        assert_error(vm, 1, "memory:");
        assert_error(vm, 2, "unknown key 'max'");
        assert_error(vm, 3, "memory:");
        assert_error(vm, 4, "memory:");
        assert_int_equal(vm->memory_mib, 512);
        vm_free(vm);
}

static void test_sections_ignored(void **state) {
        (void)state;
        struct vm *vm = parse("cores: 2\n"
                              "memory: 2048\n"
                              "parent: snap1\n"
                              "\n"
                              "[PENDING]\n"
                              "affinity: 0-3\n"
                              "cores: 8\n"
                              "delete: balloon\n"
                              "\n"
                              "[special:cloudinit]\n"
                              "memory: 99999\n"
                              "\n"
                              "[snap1]\n"
                              "cores: 16\n"
                              "memory: current=65536\n"
                              "snaptime: 1700000000\n"
                              "this line is garbage\n");
        assert_int_equal(vm->n_errors, 0);
        assert_int_equal(vm->cores, 2);
        assert_int_equal(vm->memory_mib, 2048);
        assert_null(vm->affinity);
        vm_free(vm);
        /* A snapshot section directly after the main section, no PENDING. */
        vm = parse("cores: 3\n[snap-2]\ncores: 5\n");
        assert_int_equal(vm->cores, 3);
        vm_free(vm);
}

static void test_malformed_values(void **state) {
        (void)state;
        struct vm *vm = parse("#desc\n"                                    /* 1 */
                              "cores: abc\n"                               /* 2 */
                              "sockets: 0\n"                               /* 3 */
                              "affinity: 3-1\n"                            /* 4 */
                              "memory: 4096\n"                             /* 5 */
                              "numa0: cpus=0-1,foo=1,memory=2048\n"        /* 6 */
                              "numa1: hostnodes=0,memory=2048\n"           /* 7 */
                              "numa2: cpus=0,hostnodes=x,memory=2048\n"    /* 8 */
                              "numa3: cpus=0,memory=2048,policy=random\n"  /* 9 */
                              "this is not a key value line\n"             /* 10 */
                              "balloon: -5\n"                              /* 11 */
                              "hugepages: 3\n"                             /* 12 */
                              "numa: maybe\n"                              /* 13 */
                              "affinity: 0,a\n"                            /* 14 */
                              "name: ok\n"                                 /* 15 */
                              "cores: 99999999999999999999999\n");         /* 16 */
        assert_int_equal(vm->n_errors, 13);
        assert_error(vm, 2, "cores:");
        assert_error(vm, 3, "sockets:");
        assert_error(vm, 4, "affinity:");
        assert_error(vm, 6, "unknown key 'foo'");
        assert_error(vm, 7, "cpus");
        assert_error(vm, 8, "hostnodes");
        assert_error(vm, 9, "policy");
        assert_error(vm, 10, "cannot parse line");
        assert_error(vm, 11, "balloon:");
        assert_error(vm, 12, "hugepages:");
        assert_error(vm, 13, "numa:");
        assert_error(vm, 14, "affinity:");
        assert_error(vm, 16, "cores:");
        /* What parsed still counts; bad values keep the defaults. */
        assert_int_equal(vm->memory_mib, 4096);
        assert_string_equal(vm->name, "ok");
        assert_int_equal(vm->cores, 1);
        assert_int_equal(vm->sockets, 1);
        assert_null(vm->affinity);
        for (int i = 0; i < 4; i++)
                assert_false(vm->numa_nodes[i].present);
        vm_free(vm);
}

static void test_vcpus_above_maximum(void **state) {
        (void)state;
        struct vm *vm = parse("cores: 2\nsockets: 2\nvcpus: 6\n");
        assert_int_equal(vm->n_errors, 1);
        assert_error(vm, 3, "vcpus");
        assert_int_equal(vm_vcpu_count(vm), 4);
        vm_free(vm);
}

/* hostpciN: host= or the bare value, ";"-separated ids; mapping= names no address; junk is an error. */
static void test_hostpci_addresses(void **state) {
        (void)state;
        struct vm *vm = parse("hostpci0: 0000:01:00.0,pcie=1\n"
                              "hostpci1: host=02:00.1;03:00,x-vga=1\n"
                              "hostpci2: mapping=gpu0\n"
                              "hostpci12: 0000:AF:00\n"
                              "hostpci3: /dev/evil\n");
        assert_int_equal(vm->n_hostpci, 4);
        assert_string_equal(vm->hostpci[0], "0000:01:00.0");
        assert_string_equal(vm->hostpci[1], "02:00.1");
        assert_string_equal(vm->hostpci[2], "03:00");
        assert_string_equal(vm->hostpci[3], "0000:AF:00");
        assert_int_equal(vm->n_errors, 1);
        assert_error(vm, 5, "hostpci3");
        struct vm *same = parse("hostpci0: 0000:01:00.0,pcie=1\n");
        struct vm *other = parse("hostpci0: 0000:01:00.1,pcie=1\n");
        assert_false(vm_equal(same, other)); /* a changed device is a changed VM: its IRQs are steered again */
        vm_free(same);
        vm_free(other);
        vm_free(vm);
}

static void test_numa_consistency(void **state) {
        (void)state;
        /* Memories do not add up: Proxmox refuses to start it (the Go provider's defect 1). */
        struct vm *vm = parse("memory: 8192\nnuma: 1\n"
                              "numa0: cpus=0-1,hostnodes=0,memory=8192,policy=bind\n"
                              "numa1: cpus=2-3,hostnodes=1,memory=8192,policy=bind\n");
        assert_false(vm->numa_valid);
        assert_error(vm, 3, "add up");
        vm_free(vm);
        vm = parse("memory: 4096\nnuma: 1\nnuma0: cpus=0-1,hostnodes=0,memory=4096\n");
        assert_false(vm->numa_valid);
        assert_error(vm, 3, "without policy");
        vm_free(vm);
        vm = parse("memory: 4096\nnuma: 1\nnuma0: cpus=0-1,hostnodes=0,policy=bind\n");
        assert_false(vm->numa_valid);
        assert_error(vm, 3, "no memory");
        vm_free(vm);
        /* numa: 0 disables numaN entries; no error, no binding. */
        vm = parse("memory: 4096\nnuma: 0\nnuma0: cpus=0-1,hostnodes=0,memory=1024,policy=bind\n");
        assert_int_equal(vm->n_errors, 0);
        assert_false(vm->numa_valid);
        vm_free(vm);
}

static void test_template_and_booleans(void **state) {
        (void)state;
        struct vm *vm = parse("template: 1\nnuma: yes\n");
        assert_int_equal(vm->n_errors, 0);
        assert_true(vm->template_vm);
        assert_true(vm->numa);
        vm_free(vm);
}

static void test_vm_json(void **state) {
        (void)state;
        struct vm *vm = parse("name: db\ncores: 2\nmemory: current=1024\nballoon: 512\naffinity: 2-3\n"
                              "numa: 1\nnuma0: cpus=0;1,hostnodes=1,memory=1024,policy=bind\n"
                              "tags: a;b c,d\ncores: x\n");
        json_t *j = vm_to_json(vm);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "vmid")), 105);
        assert_string_equal(json_string_value(json_object_get(j, "name")), "db");
        assert_int_equal(json_integer_value(json_object_get(j, "vcpus")), 2);
        assert_int_equal(json_integer_value(json_object_get(j, "memory_bytes")), 1024 * MIB);
        assert_int_equal(json_integer_value(json_object_get(j, "balloon_bytes")), 512 * MIB);
        assert_string_equal(json_string_value(json_object_get(j, "affinity")), "2-3");
        json_t *n0 = json_array_get(json_object_get(j, "numa_nodes"), 0);
        assert_string_equal(json_string_value(json_object_get(n0, "cpus")), "0-1");
        assert_string_equal(json_string_value(json_object_get(n0, "hostnodes")), "1");
        assert_string_equal(json_string_value(json_object_get(n0, "policy")), "bind");
        json_t *tags = json_object_get(j, "tags");
        assert_int_equal(json_array_size(tags), 4);
        assert_string_equal(json_string_value(json_array_get(tags, 3)), "d");
        assert_true(json_is_null(json_object_get(j, "hugepages")));
        assert_true(json_is_null(json_object_get(j, "pid")));
        assert_false(json_is_true(json_object_get(j, "running")));
        json_t *err = json_array_get(json_object_get(j, "errors"), 0);
        assert_int_equal(json_integer_value(json_object_get(err, "line")), 9);
        assert_non_null(strstr(json_string_value(json_object_get(err, "reason")), "cores"));
        json_decref(j);
        vm_free(vm);
}

/* ---- running detection with real processes ---- */

static char dir[64];

static int setup(void **state) {
        (void)state;
        snprintf(dir, sizeof dir, "/tmp/pvescale-inventory-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        return test_rmtree(dir);
}

static void write_file(const char *name, const char *text) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void write_pid(const char *name, pid_t pid) {
        char text[32];
        snprintf(text, sizeof text, "%d\n", (int)pid);
        write_file(name, text);
}

/* Start bash under argv0 with extra argv; it blocks reading stdin until killed. Returns once exec is done
 * (a close-on-exec pipe reaches EOF), so /proc/<pid>/cmdline already shows the new argv. */
static pid_t spawn_as(const char *argv0, const char *a1, const char *a2) {
        int sync[2], hold[2];
        assert_int_equal(pipe2(sync, O_CLOEXEC), 0);
        assert_int_equal(pipe(hold), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                dup2(hold[0], STDIN_FILENO);
                char *argv[] = { (char *)argv0, "-c", "read -r line", "fake", (char *)a1, (char *)a2, NULL };
                execv("/bin/bash", argv);
                _exit(127);
        }
        close(sync[1]);
        close(hold[0]);
        char c;
        assert_int_equal(read(sync[0], &c, 1), 0);
        close(sync[0]);
        return pid; /* hold[1] stays open in this process so the child keeps waiting */
}

static void reap(pid_t pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

static pid_t dead_pid(bool reaped) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(0);
        if (reaped) {
                waitpid(pid, NULL, 0);
                return pid;
        }
        /* Wait until it is a zombie without reaping it. */
        siginfo_t info;
        assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
        return pid;
}

/* Every field the agent's accounting reads makes two parses differ; the same text parses equal. */
static void test_vm_equal(void **state) {
        (void)state;
        const char *base = "cores: 4\nmemory: 8192\nname: a\nnuma: 1\n"
                           "numa0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\n";
        const char *changed[] = {
                "cores: 2\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\n",
                "cores: 4\nmemory: 4096\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: b\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=0,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=preferred\naffinity: 4-7\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-8\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\ntags: x;y\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x\n",
                "cores: 4\nmemory: 8192\nname: a\nnuma: 1\nnuma0: cpus=0-3,hostnodes=1,memory=8192,policy=bind\naffinity: 4-7\ntags: x;y\ncores: z\n",
        };
        struct vm *a = parse(base), *b = parse(base);
        assert_true(vm_equal(a, b));
        b->running = true;
        b->pid = 42;
        assert_false(vm_equal(a, b));
        for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
                struct vm *c = parse(changed[i]);
                assert_false(vm_equal(a, c));
                vm_free(c);
        }
        struct inventory one = { .n_vms = 1, .vms = &a }, other = { .n_vms = 1, .vms = &b }, none = { 0 };
        assert_true(inventory_equal(&one, &one));
        assert_false(inventory_equal(&one, &other));
        assert_false(inventory_equal(&one, &none));
        assert_false(inventory_equal(&one, NULL));
        assert_true(inventory_equal(NULL, NULL));
        vm_free(a);
        vm_free(b);
}

static void test_running_with_id(void **state) {
        (void)state;
        pid_t kvm = spawn_as("/usr/bin/kvm", "-id", "105");
        write_pid("105.pid", kvm);
        assert_int_equal(inventory_running_pid(dir, 105), kvm);
        /* The same process is not VM 106's QEMU even if 106.pid names it. */
        write_pid("106.pid", kvm);
        assert_int_equal(inventory_running_pid(dir, 106), -ESRCH);
        reap(kvm);
        /* Now stale: the pid file stays but the process is gone. */
        assert_int_equal(inventory_running_pid(dir, 105), -ESRCH);
}

static void test_running_with_pidfile(void **state) {
        (void)state;
        char pidfile[128];
        snprintf(pidfile, sizeof pidfile, "%s/107.pid", dir);
        pid_t qemu = spawn_as("qemu-system-x86_64", "-pidfile", pidfile);
        write_pid("107.pid", qemu);
        assert_int_equal(inventory_running_pid(dir, 107), qemu);
        /* The run dir spelled differently still names the same file. */
        char other[128];
        snprintf(other, sizeof other, "%s/./", dir);
        assert_int_equal(inventory_running_pid(other, 107), qemu);
        reap(qemu);
}

static void test_not_running(void **state) {
        (void)state;
        assert_int_equal(inventory_running_pid(dir, 200), -ENOENT);
        pid_t other = spawn_as("/usr/bin/sleepy", "-id", "201");
        write_pid("201.pid", other);
        assert_int_equal(inventory_running_pid(dir, 201), -ESRCH);
        reap(other);
        write_pid("202.pid", dead_pid(true));
        assert_int_equal(inventory_running_pid(dir, 202), -ESRCH);
        pid_t zombie = dead_pid(false);
        write_pid("203.pid", zombie);
        assert_int_equal(inventory_running_pid(dir, 203), -ESRCH);
        waitpid(zombie, NULL, 0);
        write_file("204.pid", "not a pid\n");
        assert_int_equal(inventory_running_pid(dir, 204), -EINVAL);
        write_file("205.pid", "0\n");
        assert_int_equal(inventory_running_pid(dir, 205), -EINVAL);
}

static void test_load_directory(void **state) {
        (void)state;
        char conf[128], run[128];
        snprintf(conf, sizeof conf, "%s/qemu-server", dir);
        snprintf(run, sizeof run, "%s", dir);
        assert_int_equal(mkdir(conf, 0755), 0);
        write_file("qemu-server/300.conf", "name: b\ncores: 2\nmemory: 2048\n");
        write_file("qemu-server/101.conf", "name: a\ncores: 1\nmemory: 1024\n");
        write_file("qemu-server/102.conf", "name: broken\ncores: lots\nmemory: 1024\naffinity: 9-\n");
        write_file("qemu-server/README", "not a VM\n");
        write_file("qemu-server/103.conf.bak", "name: backup\n");
        write_file("qemu-server/0104.conf", "name: leading zero\n");
        write_file("qemu-server/x105.conf", "name: prefix\n");
        char unreadable[160];
        snprintf(unreadable, sizeof unreadable, "%s/104.conf", conf);
        assert_int_equal(mkdir(unreadable, 0755), 0); /* a directory: reading it fails (we run as root) */
        pid_t kvm = spawn_as("/usr/bin/kvm", "-id", "300");
        write_pid("300.pid", kvm);

        struct inventory *inv = NULL;
        assert_int_equal(inventory_load(conf, run, &inv), 0);
        assert_int_equal(inv->n_vms, 4);
        assert_int_equal(inv->vms[0]->vmid, 101);
        assert_int_equal(inv->vms[1]->vmid, 102);
        assert_int_equal(inv->vms[2]->vmid, 104);
        assert_int_equal(inv->vms[3]->vmid, 300);
        assert_false(inv->vms[0]->running);
        assert_true(inv->vms[3]->running);
        assert_int_equal(inv->vms[3]->pid, kvm);
        assert_int_equal(inv->vms[1]->memory_mib, 1024);
        assert_int_equal(inv->vms[1]->n_errors, 2);
        assert_error(inv->vms[1], 2, "cores");
        assert_error(inv->vms[1], 4, "affinity");
        assert_int_equal(inv->vms[2]->n_errors, 1);
        assert_error(inv->vms[2], 0, "cannot read");
        assert_ptr_equal(inventory_find(inv, 300), inv->vms[3]);
        assert_null(inventory_find(inv, 999));

        json_t *vms = inventory_to_json(inv);
        assert_int_equal(json_array_size(vms), 4);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(vms, 3), "pid")), kvm);
        assert_true(json_is_true(json_object_get(json_array_get(vms, 3), "running")));
        json_decref(vms);

        /* One VM read alone, as inventory_load reads it, and added in vmid order; none when it has no config. */
        write_file("qemu-server/200.conf", "name: c\ncores: 3\nmemory: 512\n");
        struct vm *one = NULL;
        assert_int_equal(inventory_load_vm(conf, run, 999, &one), -ENOENT);
        assert_null(one);
        assert_int_equal(inventory_load_vm(conf, run, 300, &one), 0);
        assert_true(one->running);
        assert_int_equal(inventory_add(inv, one), -EEXIST); /* known already: not taken */
        vm_free(one);
        assert_int_equal(inventory_load_vm(conf, run, 200, &one), 0);
        assert_false(one->running);
        assert_int_equal(one->cores, 3);
        assert_int_equal(inventory_add(inv, one), 0);
        assert_int_equal(inv->n_vms, 5);
        assert_int_equal(inv->vms[3]->vmid, 200);
        assert_int_equal(inv->vms[4]->vmid, 300);
        assert_ptr_equal(inventory_find(inv, 200), one);
        struct inventory *again = NULL;
        assert_int_equal(inventory_load(conf, run, &again), 0);
        assert_true(inventory_equal(inv, again)); /* the same as a whole read */
        inventory_free(again);
        inventory_free(inv);
        reap(kvm);
}

static void test_load_missing_directory(void **state) {
        (void)state;
        struct inventory *inv = NULL;
        assert_int_equal(inventory_load("/nonexistent/pvescale/qemu-server", "/nonexistent", &inv), 0);
        assert_int_equal(inv->n_vms, 0);
        json_t *j = inventory_to_json(inv);
        assert_true(json_is_array(j));
        assert_int_equal(json_array_size(j), 0);
        json_decref(j);
        inventory_free(inv);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_full_config),
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_memory_current_form),
                cmocka_unit_test(test_sections_ignored),
                cmocka_unit_test(test_malformed_values),
                cmocka_unit_test(test_vcpus_above_maximum),
                cmocka_unit_test(test_hostpci_addresses),
                cmocka_unit_test(test_numa_consistency),
                cmocka_unit_test(test_template_and_booleans),
                cmocka_unit_test(test_vm_json),
                cmocka_unit_test(test_vm_equal),
                cmocka_unit_test_setup_teardown(test_running_with_id, setup, teardown),
                cmocka_unit_test_setup_teardown(test_running_with_pidfile, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_running, setup, teardown),
                cmocka_unit_test_setup_teardown(test_load_directory, setup, teardown),
                cmocka_unit_test(test_load_missing_directory),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
