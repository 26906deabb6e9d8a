"""Checks shared by the simulated-board tests whose nodes install received KV through their NIC
(test_board_kv_install.py, test_board_fetch.py)."""
from mcf_fpga.host.program_ops import Recv


def kv_recvs(prog):
    """KV receive ops per node of ``prog``: each is one unit the node's NIC must install."""
    return [sum(isinstance(op, Recv) and op.what == "kv" for op in ops) for ops in prog.ops]


def check_nic_installs(r, prog, cl):
    """Every KV unit a node received was installed by its NIC: one commit per receive op, each
    replayed from the board's event registers (run_rtl checks the counts agree), and each board's
    event queue stayed on and dropped nothing."""
    recvs = kv_recvs(prog)
    assert [c["committed"] for c in r.kv_installs] == recvs and sum(recvs) > 0
    for i in range(prog.nodes):
        assert cl.window(i).read(0x8000 + 0x2B0) == 0       # KV_EV_DISCARDED
        assert cl.window(i).read(0x8000 + 0x298) == 1       # KV_EV_CTRL
