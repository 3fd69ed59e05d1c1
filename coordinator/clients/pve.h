/* pve: a Proxmox VE API client (API token auth, {"data": ...} envelope, errors, UPID tasks, launcher calls). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Threads: a pve_client owns one http_client and is not thread-safe; give each thread its own. */

struct pve_options {
        const char *url;          /* https://host:8006/api2/json */
        const char *token_id;     /* user@realm!tokenid */
        const char *token_secret; /* the UUID */
        const char *ca_file;      /* NULL = system CAs */
        bool insecure;
        long timeout_ms;          /* per request; 0 = 30 s */
        long connect_timeout_ms;  /* 0 = 10 s */
        struct http_pool *pool;   /* connections shared with the pool's other clients; NULL = the client's own */
};

/* ---- parameters (pure) ---- */

struct pve_param {
        char *key, *value;
};

/* Ordered parameters. Adding is sticky on failure: the first error is kept in .error and later adds do
 * nothing, so builders can add everything and check once. */
struct pve_params {
        struct pve_param *items;
        size_t n, cap;
        int error;
};

#define PVE_PARAMS_INIT { 0 }

void pve_params_done(struct pve_params *p);
/* Add key=value. -EPERM for keys a token may never set (affinity, hookscript, args: root@pam only, and
 * the coordinator leaves pinning to the agents), -EINVAL for an empty key, -ENOMEM. */
int pve_params_add(struct pve_params *p, const char *key, const char *value);
int pve_params_addf(struct pve_params *p, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int pve_params_add_int(struct pve_params *p, const char *key, long long value);
/* Booleans are sent as 1/0, as PVE expects. */
int pve_params_add_bool(struct pve_params *p, const char *key, bool value);
/* application/x-www-form-urlencoded text ("a=1&b=x%20y"; "" when empty). malloc'd; NULL on ENOMEM. */
char *pve_params_encode(const struct pve_params *p);

/* ---- requests (pure builders) ---- */

/* One API call: method, the schema's path template (for errors and schema checks), the concrete path below
 * /api2/json with path parameters escaped, and its parameters (query string for GET/DELETE, form body for
 * POST/PUT). An upload carries a file instead. Free with pve_request_done. */
struct pve_request {
        const char *method;   /* static */
        const char *endpoint; /* static, e.g. "/nodes/{node}/qemu/{vmid}/clone" */
        char *path;
        struct pve_params params;
        const void *upload_data; /* borrowed */
        size_t upload_len;
        const char *upload_name; /* borrowed */
};

void pve_request_done(struct pve_request *r);

struct pve_clone {
        uint32_t newid;          /* required */
        const char *name;        /* DNS name of the new VM */
        const char *target;      /* node; NULL = the template's node */
        const char *pool;        /* add the VM to this pool */
        const char *storage;     /* target storage of a full clone */
        const char *format;      /* raw, qcow2 or vmdk (full clone) */
        const char *description;
        bool full;               /* full clone; false = PVE's default (linked for templates) */
};

struct pve_firewall_rule {
        const char *type;   /* in, out or group */
        const char *action; /* ACCEPT, DROP, REJECT, or the security group's name for type group */
        const char *iface;  /* net0, ... (NULL = all) */
        bool enable;        /* rules are created disabled unless enable is sent */
        const char *comment, *source, *dest, *proto, *dport, *macro;
};

/* Each builder fills *ret (also on failure, so pve_request_done is always safe) and returns 0, -EINVAL for a
 * missing required argument, -EPERM for a forbidden parameter, or -ENOMEM. */
int pve_req_cluster_status(struct pve_request *ret);
/* type: NULL, "vm", "node", "storage" or "pool". */
int pve_req_cluster_resources(struct pve_request *ret, const char *type);
/* vmid 0 = "give me a free id"; else "is this id free?". */
int pve_req_nextid(struct pve_request *ret, uint32_t vmid);
int pve_req_nodes(struct pve_request *ret);
int pve_req_node_status(struct pve_request *ret, const char *node);
/* The answer of GET /nodes/{node}/status, the fields the coordinator reads (borrowed; NULL when missing). */
struct pve_node_status {
        const json_t *cpus;         /* cpuinfo.cpus */
        const json_t *memory_total; /* memory.total, bytes */
};
void pve_node_status_decode(const json_t *status, struct pve_node_status *ret);
int pve_req_vm_list(struct pve_request *ret, const char *node);
int pve_req_vm_clone(struct pve_request *ret, const char *node, uint32_t vmid, const struct pve_clone *o);
int pve_req_vm_config_get(struct pve_request *ret, const char *node, uint32_t vmid);
/* async: POST (returns a UPID); else PUT (synchronous, returns null). config is copied. */
int pve_req_vm_config_set(struct pve_request *ret, const char *node, uint32_t vmid, bool async,
                          const struct pve_params *config);
/* size: "+8G" or "40G". */
int pve_req_vm_resize(struct pve_request *ret, const char *node, uint32_t vmid, const char *disk, const char *size);
/* action: start, stop, shutdown, reboot (POST) or current (GET). */
int pve_req_vm_status(struct pve_request *ret, const char *node, uint32_t vmid, const char *action);
int pve_req_vm_delete(struct pve_request *ret, const char *node, uint32_t vmid, bool purge,
                      bool destroy_unreferenced_disks);
int pve_req_task_status(struct pve_request *ret, const char *upid);
/* content: NULL or "iso", "images", ... */
/* A download-url (Proxmox downloads the file itself; with checksum and checksum_algorithm it verifies it). */
struct pve_download {
        const char *url, *content, *filename;          /* required; content iso, vztmpl or import */
        const char *checksum, *checksum_algorithm;     /* both or neither */
};
int pve_req_node_storages(struct pve_request *ret, const char *node);
int pve_req_storage_download_url(struct pve_request *ret, const char *node, const char *storage,
                                 const struct pve_download *o);
/* POST /nodes/{node}/qemu: a new VM with the given config (its disks may be <storage>:0,import-from=<volume>). */
int pve_req_vm_create(struct pve_request *ret, const char *node, uint32_t vmid, const struct pve_params *config);
/* POST /nodes/{node}/qemu/{vmid}/template: convert a stopped VM to a template. */
int pve_req_vm_template(struct pve_request *ret, const char *node, uint32_t vmid);
int pve_req_storage_content(struct pve_request *ret, const char *node, const char *storage, const char *content);
/* delay_s 1-30: PVE waits that long for the task and answers null when it ended well in time (0: no delay). */
int pve_req_storage_content_delete(struct pve_request *ret, const char *node, const char *storage, const char *volume,
                                   unsigned delay_s);
/* multipart upload of data as filename (content "iso", "vztmpl" or "import"); data is borrowed. */
int pve_req_storage_upload(struct pve_request *ret, const char *node, const char *storage, const char *content,
                           const char *filename, const void *data, size_t len);
int pve_req_vm_firewall_options_set(struct pve_request *ret, const char *node, uint32_t vmid,
                                    const struct pve_params *options);
int pve_req_vm_firewall_rules(struct pve_request *ret, const char *node, uint32_t vmid);
int pve_req_vm_firewall_rule_add(struct pve_request *ret, const char *node, uint32_t vmid,
                                 const struct pve_firewall_rule *rule);
int pve_req_pools(struct pve_request *ret);
/* GET /cluster/mapping/pci: the PCI resource mappings the user may see (Mapping.Use, .Audit or .Modify). */
int pve_req_pci_mappings(struct pve_request *ret);
/* PUT /pools (PVE 8.1+): vmid joins poolid, moved out of any other pool (allow-move), or leaves it (remove). */
int pve_req_pool_vm(struct pve_request *ret, const char *poolid, uint32_t vmid, bool remove);

/* ---- UPIDs and results (pure) ---- */

struct pve_upid {
        char node[64];
        uint32_t pid;
        uint64_t pstart; /* 8 or 9 hex digits */
        uint64_t starttime;
        char type[32];
        char id[64];    /* may be empty */
        char user[128]; /* user@realm or user@realm!token */
};

/* Parse "UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:". 0 or -EINVAL. */
int pve_upid_parse(const char *s, struct pve_upid *ret);
/* True for a task exit status that means success: "OK" or "WARNINGS: n". */
bool pve_task_exit_ok(const char *exitstatus);
/* Map an HTTP status (and PVE's message) to a negative errno: 400 -EINVAL, 401 -EACCES, 403 -EPERM,
 * 404 -ENOENT, 500 "already exists" -EEXIST, 500 "does not exist" -ENOENT, other 500 -EIO, 501 -EOPNOTSUPP,
 * 595/596 -EHOSTDOWN, other -EIO. 0 for 2xx. */
int pve_errno_from_status(long status, const char *message);
/* A node entry of a /cluster/status result; the strings are borrowed from it (ip may be NULL). */
struct pve_cluster_node {
        const char *name, *ip;
        bool online;
};
/* Entry i of a /cluster/status result when it is a node (type "node" with a name): true and *ret; false for
 * other entries (the cluster itself) and past the end. Pure. */
bool pve_cluster_node_at(const json_t *cluster_status, size_t i, struct pve_cluster_node *ret);
/* The IP of node in a /cluster/status result (borrowed), or NULL. */
const char *pve_cluster_node_ip(const json_t *cluster_status, const char *node);
/* Find a template VM in a /nodes/{n}/qemu list: name matches when given, and every tag in tags (NULL-
 * terminated; may be NULL) is among the VM's tags. Lowest vmid wins. 0, or -ENOENT. */
int pve_find_template(const json_t *vm_list, const char *name, const char *const *tags, uint32_t *ret_vmid);
/* pve_find_template by a ProxmoxNodeClass's instanceTemplateRef ({name, tags}; the first 10 tags count). */
int pve_find_template_ref(const json_t *vm_list, const json_t *ref, uint32_t *ret_vmid);

/* PCI resource mappings (GET /cluster/mapping/pci). Pure. */
#define PVE_PCI_PATH_MAX 64
/* "0000:41:00.0" for the len bytes "41:00.0" or "0000:41:00.0" (Proxmox's short form has no domain), into buf. */
void pve_pci_full_path(const char *path, size_t len, char *buf, size_t size);
/* The value of key in a property string "k=v,k2=v2" into buf (a leading value without '=' is key dflt_key, as in
 * hostpciN's "41:00.0,pcie=1"); false when absent. */
bool pve_prop_get(const char *s, const char *key, const char *dflt_key, char *buf, size_t size);
/* The full addresses of mapping id's paths on node, in the order qemu-server tries them at a VM's start (its
 * entries for the node, each entry's ';'-separated paths). New array, empty when the mapping has no entry there;
 * NULL on ENOMEM. */
json_t *pve_mapping_paths(const json_t *mappings, const char *id, const char *node);

/* ---- the client ---- */

struct pve_client;

int pve_client_new(const struct pve_options *o, struct pve_client **ret_client);
void pve_client_free(struct pve_client *c);
/* Stop waits and transfers while *flag is true (see http_client_set_cancel). */
void pve_client_set_cancel(struct pve_client *c, const atomic_bool *flag);

/* Why the last call failed, one line: "POST /nodes/{node}/qemu/{vmid}/config: HTTP 400 Parameter
 * verification failed. (numa0: invalid format ...)". "" after a success. */
const char *pve_client_error(const struct pve_client *c);

/* Send a request. Returns 0 with the "data" member in *ret_data when ret_data is not NULL (a new reference;
 * JSON null when PVE returned null), or a negative errno (pve_errno_from_status, or the transport errors of
 * http_client_request). Never sends a body with GET or DELETE. */
int pve_send(struct pve_client *c, const struct pve_request *r, json_t **ret_data);

/* Task status: running, and once stopped its exit status. */
struct pve_task_status {
        bool running;
        char exitstatus[256];
};

int pve_task_status(struct pve_client *c, const char *upid, struct pve_task_status *ret);

struct pve_wait {
        long poll_ms;    /* longest interval between polls (they double from first_ms); 0 = 1 s */
        long timeout_ms; /* 0 = 10 min */
        long first_ms;   /* the first poll, this long after the call; 0 = 10 ms */
};

/* Poll a task until it stops. 0 when it ended OK or with warnings; -EIO (or -EEXIST when the error says
 * "already exists") with "task <type> failed: <exit status>" in pve_client_error; -ETIMEDOUT; -ECANCELED;
 * or a polling error (up to 3 transient failures in a row are tolerated). */
int pve_task_wait(struct pve_client *c, const char *upid, const struct pve_wait *w);

/* ---- calls the launcher uses (builder + pve_send) ---- */

int pve_cluster_status(struct pve_client *c, json_t **ret);
int pve_cluster_resources(struct pve_client *c, const char *type, json_t **ret);
/* A free VMID. PVE answers with a JSON string (although the schema says integer); both are accepted. */
int pve_nextid(struct pve_client *c, uint32_t *ret_vmid);
/* 0 when vmid is free, -EEXIST when it is taken. */
int pve_nextid_check(struct pve_client *c, uint32_t vmid);
int pve_nodes(struct pve_client *c, json_t **ret);
int pve_node_status(struct pve_client *c, const char *node, json_t **ret);
int pve_vm_list(struct pve_client *c, const char *node, json_t **ret);
/* Returns the task's UPID (malloc'd) in *ret_upid. */
int pve_vm_clone(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_clone *o, char **ret_upid);
int pve_vm_config_get(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret);
/* PUT: synchronous. */
int pve_vm_config_put(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_params *config);
int pve_vm_resize(struct pve_client *c, const char *node, uint32_t vmid, const char *disk, const char *size,
                  char **ret_upid);
/* action: start, stop, shutdown, reboot. */
int pve_vm_action(struct pve_client *c, const char *node, uint32_t vmid, const char *action, char **ret_upid);
int pve_vm_status_current(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret);
/* From the current status: whether the VM is running (false on an error, which is returned). */
int pve_vm_running(struct pve_client *c, const char *node, uint32_t vmid, bool *ret_running);
int pve_vm_delete(struct pve_client *c, const char *node, uint32_t vmid, bool purge, bool destroy_unreferenced_disks,
                  char **ret_upid);
int pve_storage_upload(struct pve_client *c, const char *node, const char *storage, const char *content,
                       const char *filename, const void *data, size_t len, char **ret_upid);
/* The storages of a node (GET /nodes/{node}/storage: storage, type, content, active, ...). */
int pve_node_storages(struct pve_client *c, const char *node, json_t **ret);
/* download-url, create, template: the task's UPID in *ret_upid (the caller frees it). */
int pve_storage_download_url(struct pve_client *c, const char *node, const char *storage,
                             const struct pve_download *o, char **ret_upid);
int pve_vm_create(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_params *config,
                  char **ret_upid);
int pve_vm_template(struct pve_client *c, const char *node, uint32_t vmid, char **ret_upid);
int pve_storage_content(struct pve_client *c, const char *node, const char *storage, const char *content,
                        json_t **ret);
/* *ret_upid is NULL when PVE finished at once, or within delay_s seconds (data null); else the task to wait for,
 * which may have failed. */
int pve_storage_content_delete(struct pve_client *c, const char *node, const char *storage, const char *volume,
                               unsigned delay_s, char **ret_upid);
int pve_vm_firewall_options_set(struct pve_client *c, const char *node, uint32_t vmid,
                                const struct pve_params *options);
int pve_vm_firewall_rules(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret);
int pve_vm_firewall_rule_add(struct pve_client *c, const char *node, uint32_t vmid,
                             const struct pve_firewall_rule *rule);
int pve_pools(struct pve_client *c, json_t **ret);
int pve_pci_mappings(struct pve_client *c, json_t **ret);
int pve_pool_vm(struct pve_client *c, const char *poolid, uint32_t vmid, bool remove);
