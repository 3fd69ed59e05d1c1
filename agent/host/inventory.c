/* inventory: the VMs on this host: every <vmid>.conf of the config dir, which of them run, and JSON. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "inventory.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "pve_conf.h"

#define MIB (UINT64_C(1) << 20)
/* pmxcfs refuses files above 1 MiB, so anything larger is not a real config. */

/* ---- running VMs ---- */

static int read_pid_file(const char *path, int *ret_pid) {
        char *text = NULL;
        int r = fileio_read(path, 64, &text, NULL);
        if (r < 0)
                return r == -EFBIG ? -EINVAL : r;
        char *end = NULL;
        errno = 0;
        long pid = strtol(text, &end, 10);
        bool ok = errno == 0 && end != text && (*end == '\0' || *end == '\n') && text[0] != '-' && text[0] != ' ';
        free(text);
        if (!ok || pid <= 0 || pid > INT32_MAX)
                return -EINVAL;
        *ret_pid = (int)pid;
        return 0;
}

/* argv[0] of QEMU on Proxmox is /usr/bin/kvm; other setups run qemu-system-<arch>. */
static bool is_qemu_argv0(const char *argv0) {
        const char *base = strrchr(argv0, '/');
        base = base ? base + 1 : argv0;
        return strcmp(base, "kvm") == 0 || strncmp(base, "qemu-system", 11) == 0;
}

static bool same_path(const char *a, const char *b) {
        if (strcmp(a, b) == 0)
                return true;
        char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
        bool same = ra && rb && strcmp(ra, rb) == 0;
        free(ra);
        free(rb);
        return same;
}

static bool is_option(const char *arg, const char *name) {
        if (arg[0] == '-' && arg[1] == '-')
                arg++; /* QEMU accepts -opt and --opt alike */
        return arg[0] == '-' && strcmp(arg + 1, name) == 0;
}

/* cmdline is argv joined by NULs. True for "-id <vmid>" or "-pidfile <pid_path>". */
static bool cmdline_names_vm(const char *cmdline, size_t len, int vmid, const char *pid_path) {
        char id[16];
        snprintf(id, sizeof(id), "%d", vmid);
        const char *end = cmdline + len;
        for (const char *a = cmdline; a < end; a += strlen(a) + 1) {
                const char *next = a + strlen(a) + 1;
                if (next >= end)
                        break;
                if (is_option(a, "id") && strcmp(next, id) == 0)
                        return true;
                if (is_option(a, "pidfile") && same_path(next, pid_path))
                        return true;
        }
        return false;
}

/* Guards against stale pid files the way qemu-server does: the pid must be a live QEMU of this VM. */
static int check_qemu_process(int pid, int vmid, const char *pid_path) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        char *cmdline = NULL;
        size_t len = 0;
        int r = fileio_read(path, 1 << 20, &cmdline, &len);
        if (r < 0)
                return r == -ENOMEM ? r : -ESRCH;
        /* A zombie has an empty cmdline, so it fails the argv[0] test. */
        bool ok = len > 0 && is_qemu_argv0(cmdline) && cmdline_names_vm(cmdline, len, vmid, pid_path);
        free(cmdline);
        return ok ? 0 : -ESRCH;
}

int inventory_running_pid(const char *run_dir, int vmid) {
        char *pid_path = NULL;
        if (asprintf(&pid_path, "%s/%d.pid", run_dir, vmid) < 0)
                return -ENOMEM;
        int pid = 0;
        int r = read_pid_file(pid_path, &pid);
        if (r == 0)
                r = check_qemu_process(pid, vmid, pid_path);
        free(pid_path);
        return r < 0 ? r : pid;
}

/* ---- loading a directory ---- */

static int load_one(const char *config_dir, int vmid, struct vm **ret_vm) {
        char *text = NULL;
        int r = pve_conf_read(config_dir, vmid, &text);
        if (r == -ENOMEM)
                return r;
        if (r == 0) {
                r = inventory_parse_config(vmid, text, ret_vm);
                free(text);
                return r;
        }
        /* Keep the VM, with defaults and a whole-file error, so the API shows why it is off. */
        struct vm *vm = NULL;
        int err = -r;
        r = inventory_parse_config(vmid, "", &vm);
        if (r == 0)
                r = vm_add_error(vm, 0, "cannot read the config file: %s", strerror(err));
        if (r < 0) {
                vm_free(vm);
                return r;
        }
        *ret_vm = vm;
        return 0;
}

static void mark_running(struct vm *vm, const char *run_dir) {
        int pid = run_dir ? inventory_running_pid(run_dir, vm->vmid) : -ENOENT;
        vm->running = pid > 0;
        vm->pid = pid > 0 ? pid : 0;
}

static int inventory_append(struct inventory *inv, struct vm *vm) {
        struct vm **vms = realloc(inv->vms, (inv->n_vms + 1) * sizeof(*vms));
        if (!vms)
                return -ENOMEM;
        inv->vms = vms;
        inv->vms[inv->n_vms++] = vm;
        return 0;
}

static int read_entries(DIR *dir, const char *config_dir, const char *run_dir, struct inventory *inv) {
        struct dirent *de;
        while ((de = readdir(dir))) {
                int vmid = pve_conf_name_vmid(de->d_name);
                if (vmid < 0)
                        continue;
                struct vm *vm = NULL;
                int r = load_one(config_dir, vmid, &vm);
                if (r < 0)
                        return r;
                mark_running(vm, run_dir);
                r = inventory_append(inv, vm);
                if (r < 0) {
                        vm_free(vm);
                        return r;
                }
        }
        return 0;
}

static int vm_cmp(const void *a, const void *b) {
        const struct vm *x = *(const struct vm *const *)a, *y = *(const struct vm *const *)b;
        return (x->vmid > y->vmid) - (x->vmid < y->vmid);
}

int inventory_load(const char *config_dir, const char *run_dir, struct inventory **ret_inventory) {
        struct inventory *inv = calloc(1, sizeof(*inv));
        if (!inv)
                return -ENOMEM;
        DIR *dir = opendir(config_dir);
        if (!dir && errno != ENOENT) {
                int r = -errno;
                free(inv);
                return r;
        }
        int r = dir ? read_entries(dir, config_dir, run_dir, inv) : 0;
        if (dir)
                closedir(dir);
        if (r < 0) {
                inventory_free(inv);
                return r;
        }
        if (inv->n_vms > 0)
                qsort(inv->vms, inv->n_vms, sizeof(*inv->vms), vm_cmp);
        *ret_inventory = inv;
        return 0;
}

int inventory_load_vm(const char *config_dir, const char *run_dir, int vmid, struct vm **ret_vm) {
        char *path = NULL;
        if (asprintf(&path, "%s/%d.conf", config_dir, vmid) < 0)
                return -ENOMEM;
        int r = access(path, F_OK) < 0 ? -errno : 0;
        free(path);
        if (r < 0)
                return r;
        struct vm *vm = NULL;
        r = load_one(config_dir, vmid, &vm);
        if (r < 0)
                return r;
        mark_running(vm, run_dir);
        *ret_vm = vm;
        return 0;
}

int inventory_add(struct inventory *inv, struct vm *vm) {
        if (inventory_find(inv, vm->vmid))
                return -EEXIST;
        int r = inventory_append(inv, vm);
        if (r == 0)
                qsort(inv->vms, inv->n_vms, sizeof(*inv->vms), vm_cmp);
        return r;
}

void inventory_free(struct inventory *inv) {
        if (!inv)
                return;
        for (size_t i = 0; i < inv->n_vms; i++)
                vm_free(inv->vms[i]);
        free(inv->vms);
        container_list_done(&inv->containers);
        free(inv);
}

int inventory_load_containers(struct inventory *inv, const char *lxc_dir, const char *cgroup_dir) {
        struct container_list l;
        int r = container_list_load(lxc_dir, cgroup_dir, &l);
        if (r < 0)
                return r;
        container_list_done(&inv->containers);
        inv->containers = l;
        return 0;
}

const struct vm *inventory_find(const struct inventory *inv, int vmid) {
        if (!inv)
                return NULL;
        for (size_t i = 0; i < inv->n_vms; i++)
                if (inv->vms[i]->vmid == vmid)
                        return inv->vms[i];
        return NULL;
}

/* ---- JSON ---- */

/* Add to obj, taking the reference; a NULL value (ENOMEM) poisons the result. */
static int put(json_t *obj, const char *key, json_t *value) {
        return value ? json_object_set_new(obj, key, value) : -1;
}

static json_t *cpuset_or_null(const struct cpuset *s) {
        if (!s)
                return json_null();
        char *list = cpuset_format(s);
        json_t *v = list ? json_string(list) : NULL;
        free(list);
        return v;
}

static json_t *string_or_null(const char *s) {
        return s && *s ? json_string(s) : json_null();
}

static json_t *numa_node_json(unsigned idx, const struct vm_numa *n) {
        json_t *o = json_object();
        int r = o ? 0 : -1;
        r |= put(o, "index", json_integer(idx));
        r |= put(o, "cpus", cpuset_or_null(n->guest_cpus));
        r |= put(o, "hostnodes", cpuset_or_null(n->hostnodes));
        r |= put(o, "memory_bytes", json_integer((json_int_t)(n->memory_mib * MIB)));
        r |= put(o, "policy", string_or_null(n->policy));
        if (r != 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *numa_nodes_json(const struct vm *vm) {
        json_t *a = json_array();
        for (unsigned i = 0; a && i < INVENTORY_MAX_NUMA; i++) {
                if (!vm->numa_nodes[i].present)
                        continue;
                if (json_array_append_new(a, numa_node_json(i, &vm->numa_nodes[i])) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

/* pve-tag-list: tags separated by ';', ',' or spaces. */
static json_t *tags_json(const char *tags) {
        json_t *a = json_array();
        for (const char *p = tags; a && p && *p;) {
                p += strspn(p, ";, ");
                size_t n = strcspn(p, ";, ");
                if (n > 0 && json_array_append_new(a, json_stringn(p, n)) < 0) {
                        json_decref(a);
                        return NULL;
                }
                p += n;
        }
        return a;
}

static json_t *errors_json(const struct vm *vm) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < vm->n_errors; i++) {
                json_t *e = json_pack("{s:I, s:s}", "line", (json_int_t)vm->errors[i].line, "reason",
                                      vm->errors[i].reason);
                if (json_array_append_new(a, e) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

static int put_resources(json_t *o, const struct vm *vm) {
        int r = 0;
        r |= put(o, "vcpus", json_integer(vm_vcpu_count(vm)));
        r |= put(o, "cores", json_integer(vm->cores));
        r |= put(o, "sockets", json_integer(vm->sockets));
        r |= put(o, "memory_bytes", json_integer((json_int_t)(vm->memory_mib * MIB)));
        r |= put(o, "balloon_bytes", json_integer((json_int_t)(vm->balloon_mib * MIB)));
        r |= put(o, "affinity", cpuset_or_null(vm->affinity));
        r |= put(o, "numa", json_boolean(vm->numa));
        r |= put(o, "numa_nodes", numa_nodes_json(vm));
        r |= put(o, "hugepages", string_or_null(vm->hugepages));
        return r;
}

json_t *vm_to_json(const struct vm *vm) {
        json_t *o = json_object();
        if (!o)
                return NULL;
        int r = put(o, "vmid", json_integer(vm->vmid));
        r |= put(o, "name", string_or_null(vm->name));
        r |= put_resources(o, vm);
        r |= put(o, "tags", tags_json(vm->tags));
        r |= put(o, "template", json_boolean(vm->template_vm));
        r |= put(o, "running", json_boolean(vm->running));
        r |= put(o, "pid", vm->running ? json_integer(vm->pid) : json_null());
        r |= put(o, "errors", errors_json(vm));
        if (r != 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

json_t *inventory_to_json(const struct inventory *inv) {
        json_t *vms = json_array();
        for (size_t i = 0; vms && inv && i < inv->n_vms; i++) {
                if (json_array_append_new(vms, vm_to_json(inv->vms[i])) < 0) {
                        json_decref(vms);
                        return NULL;
                }
        }
        return vms;
}

/* ---- comparing ---- */

static bool same_str(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_set(const struct cpuset *a, const struct cpuset *b) {
        return a == b || (a && b && cpuset_equal(a, b));
}

static bool same_numa_node(const struct vm_numa *a, const struct vm_numa *b) {
        return a->present == b->present && same_set(a->guest_cpus, b->guest_cpus) &&
               same_set(a->hostnodes, b->hostnodes) && a->memory_mib == b->memory_mib &&
               strcmp(a->policy, b->policy) == 0;
}

static bool same_errors(const struct vm *a, const struct vm *b) {
        if (a->n_errors != b->n_errors)
                return false;
        for (size_t i = 0; i < a->n_errors; i++)
                if (a->errors[i].line != b->errors[i].line || !same_str(a->errors[i].reason, b->errors[i].reason))
                        return false;
        return true;
}

bool vm_equal(const struct vm *a, const struct vm *b) {
        if (a->vmid != b->vmid || a->cores != b->cores || a->sockets != b->sockets || a->vcpus != b->vcpus ||
            a->memory_mib != b->memory_mib || a->balloon_mib != b->balloon_mib || a->numa != b->numa ||
            a->numa_valid != b->numa_valid || a->template_vm != b->template_vm || a->running != b->running ||
            a->pid != b->pid || a->n_hostpci != b->n_hostpci ||
            memcmp(a->hostpci, b->hostpci, sizeof a->hostpci) != 0)
                return false;
        if (!same_str(a->name, b->name) || !same_str(a->tags, b->tags) || strcmp(a->hugepages, b->hugepages) != 0 ||
            !same_set(a->affinity, b->affinity) || !same_errors(a, b))
                return false;
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++)
                if (!same_numa_node(&a->numa_nodes[i], &b->numa_nodes[i]))
                        return false;
        return true;
}

bool inventory_equal(const struct inventory *a, const struct inventory *b) {
        if (!a || !b)
                return a == b;
        if (a->n_vms != b->n_vms || !container_list_equal(&a->containers, &b->containers))
                return false;
        for (size_t i = 0; i < a->n_vms; i++)
                if (!vm_equal(a->vms[i], b->vms[i]))
                        return false;
        return true;
}
