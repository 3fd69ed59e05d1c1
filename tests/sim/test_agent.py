#!/usr/bin/env python3
# Interop test: a real pvescale-agent (PVESCALE_AGENT=path) reads a simulated host like a Proxmox host.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import read  # noqa: E402

AGENT = os.environ.get("PVESCALE_AGENT")


@unittest.skipUnless(AGENT and os.access(AGENT, os.X_OK), "PVESCALE_AGENT not set")
class AgentInteropTest(unittest.TestCase):
    def agent(self, cmd, host, name):
        args = [AGENT, cmd, "--node-name", name, "--pve-config-dir", host["pve_config_dir"],
                "--pve-run-dir", host["pve_run_dir"], "--corosync-conf", host["corosync_conf"]]
        args += ["--fsroot", host["fsroot"]] if "fsroot" in host else ["--topology-xml", host["topology_xml"]]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return json.loads(r.stdout)

    def test_agent_sees_sim_host(self):
        sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,r2/pve2=eas-tioga")
        try:
            sim.clone(101, "agent-vm")
            sim.pve("PUT", "/nodes/pve1/qemu/101/config", {"cores": 4, "memory": "4096", "numa": 1,
                                                           "numa0": "cpus=0-3,hostnodes=1,memory=4096,policy=bind"})
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data)
            host = sim.ep["hosts"]["pve1"]
            pid = int(read(os.path.join(host["pve_run_dir"], "101.pid")))
            vms = {v["vmid"]: v for v in self.agent("vms", host, "pve1")["vms"]}
            self.assertEqual((vms[101]["running"], vms[101]["pid"], vms[101]["vcpus"]), (True, pid, 4))
            self.assertEqual(vms[101]["numa_nodes"][0]["hostnodes"], "1")
            self.assertTrue(vms[9000]["template"])
            cap = self.agent("capacity", host, "pve1")
            self.assertEqual((cap["region"], cap["cpus_total"]), ("r1", 32))
            cap2 = self.agent("capacity", sim.ep["hosts"]["pve2"], "pve2")
            self.assertEqual((cap2["region"], cap2["cpus_total"]), ("r2", 128))
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
