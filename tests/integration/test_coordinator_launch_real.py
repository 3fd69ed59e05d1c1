#!/usr/bin/env python3
# test_coordinator_launch's main test on a real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler v1.26 from ../shared/k8s): pending pods become NodeClaims, pinned VMs and Nodes that join through
# kubeadm's bootstrap-token TLS bootstrap (the simulated kubelets), and the real scheduler runs the pods on them.
# The test body is test_coordinator_launch.py's, unchanged.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
import test_coordinator_launch as launch  # noqa: E402


class LaunchRealTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", kube="real")
        self.co = None

    test_pending_pods_end_up_running_on_launched_nodes = \
        launch.LaunchTest.test_pending_pods_end_up_running_on_launched_nodes
    check_scale_metrics = launch.LaunchTest.check_scale_metrics


if __name__ == "__main__":
    unittest.main()
