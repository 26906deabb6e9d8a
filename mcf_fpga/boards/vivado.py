"""Vivado Tcl for the KR260: project, PS block design with the node, build, hand-off files.

:func:`build_tcl` writes one script, run as ``vivado -mode batch -source build.tcl``
from the build directory. It

1. creates a project for ``xck26-sfvc784-2LV-c`` with board part
   ``xilinx.com:kr260_som:part0:1.1`` and the KR260 carrier connections;
2. creates block design ``mcf_ps``: ``zynq_ultra_ps_e`` with the SOM board
   preset, then M_AXI_HPM0_FPD (32-bit) → SmartConnect → the node's ``s_axi``
   at 0xA000_0000; each ``m_axi_hp<k>`` → SmartConnect → S_AXI_HP<k>_FPD
   (128-bit, ``PSU__USE__S_AXI_GP<k+2>``, clock ``saxihp<k>_fpd_aclk``) and each
   ``m_axi_hpc<i>`` → SmartConnect → S_AXI_HPC<i>_FPD (128-bit, ``PSU__USE__S_AXI_GP<i>``,
   clock ``saxihpc<i>_fpd_aclk``), all clocked by pl_clk0, each with the PS's DDR segments
   (``SAXIGP<n>/HP<k>_DDR_LOW|HIGH``, ``SAXIGP<i>/HPC<i>_DDR_LOW|HIGH``) assigned in its
   address space. The HPC ports are used non-coherently: the node's weight lanes read with
   the ARCACHE/ARPROT they drive on HP2 (normal non-cacheable), so the CCI snoops nothing and
   the host flushes what it wrote, as for HP2; no AxCACHE/AxPROT/AxUSER change, no CCI setup;
   pl_clk0 (100 MHz) + proc_sys_reset as the node clock/reset;
   ``irq`` → pl_ps_irq0; pl_clk1 = 125 MHz for the RGMII TX MACs; TTC0 wave
   outputs on EMIO with bit 2 → ``fan_en_b`` (the route Xilinx's KR260
   platforms use, so Linux fancontrol keeps working); EMIO GPIO 0..3 to the
   PHYs' MDC/MDIO (bit-banged from Linux); the node's other ports
   become block-design ports (:func:`boards.board_top.bd_ports`);
3. (if the node has link 2) creates ``xxv_eth_sfp``: 10G/25G Ethernet
   Subsystem, 10GBASE-R MAC+PCS/PMA on GTH X1Y12 (quad X1Y3), 156.25 MHz refclk;
4. synthesises, implements and writes ``<app>.bit`` and ``<app>.bit.bin``
   (``-bin_file``), ``<app>.xsa`` and ``<app>.hwh`` (for PYNQ's Overlay).
"""
from .board_top import bd_ports, BD_NAME, TOP_NAME, MDIO_GPIO_BITS
from .kr260 import PART, BOARD_PART, BOARD_CONNECTIONS
from .top import TopPorts, HP_PORTS, HPC_PORTS

__all__ = ["build_tcl", "cdc_tcl", "AXIL_BASE", "PL_CLK0_MHZ", "PL_CLK1_MHZ"]

AXIL_BASE = 0xA000_0000
PL_CLK0_MHZ = 100
PL_CLK1_MHZ = 125


def _hp_gp(k):
    """S_AXI_HP<k>_FPD is S_AXI_GP<k+2> in the PS configuration names."""
    return k + 2


def _hpc_gp(i):
    """S_AXI_HPC<i>_FPD is S_AXI_GP<i> in the PS configuration names."""
    return i


def _slave_ports(ports: TopPorts):
    """(node interface, PS port name, S_AXI_GP number) of every PS slave port the top masters:
    HP0..3 (GP2..5), then HPC0/1 (GP0/1). Port name ``P`` gives the PS interface
    ``S_AXI_<P>_FPD``, its clock pin ``saxi<p>_fpd_aclk``, its DDR segments
    ``SAXIGP<n>/<P>_DDR_LOW|HIGH`` and the SmartConnect ``<p>_ic``."""
    return ([(f"m_axi_hp{k}", f"HP{k}", _hp_gp(k)) for k in ports.hp_masters]
            + [(f"m_axi_hpc{i}", f"HPC{i}", _hpc_gp(i)) for i in ports.hpc_masters])


def cdc_tcl():
    """Timing exceptions Amaranth marks on its CDC cells (as in Amaranth's own Vivado flow)."""
    return """# Timing exceptions for Amaranth CDC primitives (FFSynchronizer, AsyncFIFO, ResetSynchronizer).
foreach cell [get_cells -quiet -hier -filter {amaranth.vivado.false_path == "TRUE"}] {
    set_false_path -to $cell
}
foreach pin [get_pins -quiet -of [get_cells -quiet -hier -filter {amaranth.vivado.false_path_pre == "TRUE"}] \\
                 -filter {REF_PIN_NAME == PRE}] {
    set_false_path -to $pin
}
foreach cell [get_cells -quiet -hier -filter {amaranth.vivado.max_delay != ""}] {
    set clock [get_clocks -quiet -of_objects [all_fanin -flat -startpoints_only [get_pins $cell/D]]]
    if {[llength $clock] != 0} {
        set_max_delay -datapath_only -from $clock -to [get_cells $cell] [get_property amaranth.vivado.max_delay $cell]
    }
}
set_property BITSTREAM.GENERAL.COMPRESS TRUE [current_design]
"""


def build_tcl(ports: TopPorts, *, app: str, sources, constraints, jobs: int = 2) -> str:
    """The Vivado batch script (see module docstring).

    ``sources``: Verilog file names (node first), ``constraints``: XDC/Tcl
    constraint file names, all relative to the build directory.
    """
    node = ports.module
    ps_cfg = {
        "PSU__USE__M_AXI_GP0": 1, "PSU__MAXIGP0__DATA_WIDTH": 32,
        "PSU__USE__M_AXI_GP1": 0, "PSU__USE__M_AXI_GP2": 0,
        "PSU__USE__IRQ0": 1,
        "PSU__FPGA_PL0_ENABLE": 1, "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ": PL_CLK0_MHZ,
        "PSU__FPGA_PL1_ENABLE": 1, "PSU__CRL_APB__PL1_REF_CTRL__FREQMHZ": PL_CLK1_MHZ,
        "PSU__TTC0__PERIPHERAL__ENABLE": 1, "PSU__TTC0__WAVEOUT__ENABLE": 1,
        "PSU__TTC0__WAVEOUT__IO": "EMIO",
        "PSU__GPIO_EMIO__PERIPHERAL__ENABLE": 1, "PSU__GPIO_EMIO__PERIPHERAL__IO": MDIO_GPIO_BITS,
    }
    used = {gp for _, _, gp in _slave_ports(ports)}
    for gp in [_hpc_gp(i) for i in range(HPC_PORTS)] + [_hp_gp(k) for k in range(HP_PORTS)]:
        ps_cfg[f"PSU__USE__S_AXI_GP{gp}"] = int(gp in used)
        if gp in used:
            ps_cfg[f"PSU__SAXIGP{gp}__DATA_WIDTH"] = ports.hp_data_width
    cfg = " \\\n    ".join(f"CONFIG.{k} {{{v}}}" for k, v in ps_cfg.items())

    busifs = ["s_axi"] + [bus for bus, _, _ in _slave_ports(ports)]
    busifs += [f"{d}_axis_link{k}" for k in ports.links for d in ("m", "s")]
    t = []
    a = t.append
    a(f"""# Generated by `mcf build --board kr260`. Run from this directory:
#   vivado -mode batch -source build.tcl
set here [file dirname [file normalize [info script]]]
cd $here
set app {app}
create_project -force mcf_kr260 ./vivado -part {PART}
set_property board_part {BOARD_PART} [current_project]
set_property board_connections {{{BOARD_CONNECTIONS}}} [current_project]
set_property target_language Verilog [current_project]
""")
    for src in sources:
        a(f"add_files -norecurse {{{src}}}")
    for c in constraints:
        a(f"add_files -fileset constrs_1 -norecurse {{{c}}}")
        if c.endswith(".tcl"):
            a(f"set_property USED_IN_SYNTHESIS false [get_files {{{c}}}]")
    a(f"""update_compile_order -fileset sources_1

# ---- block design: PS + node ----
create_bd_design {BD_NAME}
create_bd_cell -type ip -vlnv xilinx.com:ip:zynq_ultra_ps_e ps
apply_bd_automation -rule xilinx.com:bd_rule:zynq_ultra_ps_e -config {{apply_board_preset "1"}} [get_bd_cells ps]
set_property -dict [list \\
    {cfg} \\
] [get_bd_cells ps]

create_bd_cell -type module -reference {node} node
set_property CONFIG.POLARITY ACTIVE_HIGH [get_bd_pins node/rst]
set_property CONFIG.ASSOCIATED_BUSIF {{{':'.join(busifs)}}} [get_bd_pins node/clk]
set_property CONFIG.ASSOCIATED_RESET {{rst}} [get_bd_pins node/clk]

create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst_pl0
connect_bd_net [get_bd_pins ps/pl_resetn0] [get_bd_pins rst_pl0/ext_reset_in]
set clk0 [get_bd_pins ps/pl_clk0]
connect_bd_net $clk0 [get_bd_pins node/clk] [get_bd_pins rst_pl0/slowest_sync_clk] \\
    [get_bd_pins ps/maxihpm0_fpd_aclk]
connect_bd_net [get_bd_pins rst_pl0/peripheral_reset] [get_bd_pins node/rst]

# control: M_AXI_HPM0_FPD -> SmartConnect -> node/s_axi at {AXIL_BASE:#x}
create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect axil_ic
set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_MI {{1}}] [get_bd_cells axil_ic]
connect_bd_net $clk0 [get_bd_pins axil_ic/aclk]
connect_bd_net [get_bd_pins rst_pl0/interconnect_aresetn] [get_bd_pins axil_ic/aresetn]
connect_bd_intf_net [get_bd_intf_pins ps/M_AXI_HPM0_FPD] [get_bd_intf_pins axil_ic/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins axil_ic/M00_AXI] [get_bd_intf_pins node/s_axi]
""")
    for bus, name, gp in _slave_ports(ports):
        ic, clk = f"{name.lower()}_ic", f"saxi{name.lower()}_fpd_aclk"
        a(f"""# data: node/{bus} -> SmartConnect -> S_AXI_{name}_FPD (S_AXI_GP{gp}, {ports.hp_data_width}-bit)
create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect {ic}
set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_MI {{1}}] [get_bd_cells {ic}]
connect_bd_net $clk0 [get_bd_pins {ic}/aclk] [get_bd_pins ps/{clk}]
connect_bd_net [get_bd_pins rst_pl0/interconnect_aresetn] [get_bd_pins {ic}/aresetn]
connect_bd_intf_net [get_bd_intf_pins node/{bus}] [get_bd_intf_pins {ic}/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins {ic}/M00_AXI] [get_bd_intf_pins ps/S_AXI_{name}_FPD]
""")
    a("""# interrupt: node/irq -> pl_ps_irq0[0] (GIC SPI 89)
connect_bd_net [get_bd_pins node/irq] [get_bd_pins ps/pl_ps_irq0]

# fan: TTC0 wave 2 on EMIO -> fan_en_b (Linux fancontrol drives it as a PWM)
create_bd_cell -type ip -vlnv xilinx.com:ip:xlslice fan_slice
set_property -dict [list CONFIG.DIN_WIDTH {3} CONFIG.DIN_FROM {2} CONFIG.DIN_TO {2}] [get_bd_cells fan_slice]
connect_bd_net [get_bd_pins ps/emio_ttc0_wave_o] [get_bd_pins fan_slice/Din]
""")
    a("# ---- block-design ports, wired to the board top (boards.board_top.bd_ports) ----")
    for name, d, w in bd_ports(ports):
        rng = f" -from {w - 1} -to 0" if w > 1 else ""
        typ = " -type clk" if name.startswith("pl_clk") else (" -type rst" if name == "pl_reset" else "")
        a(f"create_bd_port -dir {d}{typ}{rng} {name}")
        src = {"pl_clk0": "ps/pl_clk0", "pl_clk1": "ps/pl_clk1", "pl_reset": "rst_pl0/peripheral_reset",
               "fan_en_b": "fan_slice/Dout", "mdio_gpio_o": "ps/emio_gpio_o",
               "mdio_gpio_t": "ps/emio_gpio_t", "mdio_gpio_i": "ps/emio_gpio_i"}.get(name, f"node/{name}")
        a(f"connect_bd_net [get_bd_ports {name}] [get_bd_pins {src}]")
    a(f"set_property CONFIG.FREQ_HZ {PL_CLK0_MHZ * 1_000_000} [get_bd_ports pl_clk0]")
    a(f"set_property CONFIG.FREQ_HZ {PL_CLK1_MHZ * 1_000_000} [get_bd_ports pl_clk1]")
    ddr_segs = "".join(f"assign_bd_address [get_bd_addr_segs {{ps/SAXIGP{gp}/{name}_DDR_LOW "
                       f"ps/SAXIGP{gp}/{name}_DDR_HIGH}}]\n" for _, name, gp in _slave_ports(ports))
    a(f"""
# ---- addresses ----
assign_bd_address -target_address_space /ps/Data [get_bd_addr_segs node/s_axi/reg0] \\
    -offset {AXIL_BASE:#010x} -range {2 ** ports.axil_addr_width}
{ddr_segs}assign_bd_address
validate_bd_design
save_bd_design
make_wrapper -files [get_files {BD_NAME}.bd] -top
add_files -norecurse [glob ./vivado/mcf_kr260.gen/sources_1/bd/{BD_NAME}/hdl/{BD_NAME}_wrapper.v]
generate_target all [get_files {BD_NAME}.bd]
""")
    if 2 in ports.links:
        a("""# ---- SFP+: 10G/25G Ethernet Subsystem, 10GBASE-R, GTH quad X1Y3 lane X1Y12 ----
create_ip -name xxv_ethernet -vendor xilinx.com -library ip -module_name xxv_eth_sfp
set_property -dict [list CONFIG.LINE_RATE {10} CONFIG.NUM_OF_CORES {1} CONFIG.BASE_R_KR {BASE-R} \\
    CONFIG.CORE {Ethernet MAC+PCS/PMA 64-bit} CONFIG.INCLUDE_AXI4_INTERFACE {0} \\
    CONFIG.GT_REF_CLK_FREQ {156.25} CONFIG.GT_DRP_CLK {100} \\
    CONFIG.GT_GROUP_SELECT {Quad_X1Y3} CONFIG.LANE1_GT_LOC {X1Y12}] [get_ips xxv_eth_sfp]
generate_target all [get_ips xxv_eth_sfp]
""")
    a(f"""set_property top {TOP_NAME} [current_fileset]
update_compile_order -fileset sources_1

# ---- build ----
set_property STEPS.WRITE_BITSTREAM.ARGS.BIN_FILE true [get_runs impl_1]
launch_runs impl_1 -to_step write_bitstream -jobs {jobs}
wait_on_run impl_1
if {{[get_property PROGRESS [get_runs impl_1]] != "100%"}} {{
    error "mcf: implementation failed, see ./vivado/mcf_kr260.runs/impl_1/runme.log"
}}
set run_dir [get_property DIRECTORY [get_runs impl_1]]
file copy -force $run_dir/{TOP_NAME}.bit ./$app.bit
file copy -force $run_dir/{TOP_NAME}.bin ./$app.bit.bin
open_run impl_1
report_utilization -file ./utilisation_vivado.rpt
report_timing_summary -file ./timing_vivado.rpt
write_hw_platform -fixed -include_bit -force -file ./$app.xsa
file copy -force [lindex [glob ./vivado/mcf_kr260.gen/sources_1/bd/{BD_NAME}/hw_handoff/{BD_NAME}.hwh] 0] ./$app.hwh
puts "mcf: wrote $app.bit $app.bit.bin $app.xsa $app.hwh"
""")
    return "\n".join(t)
