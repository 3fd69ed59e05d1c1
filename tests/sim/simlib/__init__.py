# The pvescale simulator package (see tests/sim/README.md).
# SPDX-License-Identifier: Apache-2.0
