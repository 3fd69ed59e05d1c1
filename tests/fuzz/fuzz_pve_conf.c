/* fuzz_pve_conf: the Proxmox qemu-server .conf parser the agent reads every VM with (inventory_parse_config). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "fuzz.h"
#include "inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        char *text = fuzz_text(data, size);
        struct vm *vm = NULL;
        if (inventory_parse_config(100, text, &vm) == 0) {
                (void)vm_vcpu_count(vm);
                json_decref(vm_to_json(vm)); /* what GET /v1/vms shows of it */
        }
        vm_free(vm);
        free(text);
        return 0;
}
