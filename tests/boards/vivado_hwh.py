"""A stand-in for the ``<app>.hwh`` Vivado writes for the KR260 block design (tests only): the
elements PYNQ's hwh parser reads — the PS ``MODULE`` (``zynq_ultra_ps_e``, its PL clock
parameters, a ``MEMRANGE`` mapping ``node/s_axi``), the node cell as a module reference, the
interrupt net ``node/irq`` -> ``ps/pl_ps_irq0`` and ``EXTERNALPORTS``. It stands for Vivado's
output the way a few stand-in bytes stand for the bitstream: nothing here is packaged as real."""


def vivado_like_hwh(base=0xA000_0000, size=0x10000, cell="node", module="mcf_node") -> str:
    clocks = "".join(
        f'        <PARAMETER NAME="PSU__FPGA_PL{i}_ENABLE" VALUE="{int(i < 2)}"/>\n'
        f'        <PARAMETER NAME="PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR0" VALUE="{15 if i == 0 else 12}"/>\n'
        f'        <PARAMETER NAME="PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR1" VALUE="1"/>\n' for i in range(4))
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="no" ?>
<EDKSYSTEM EDWVERSION="1.2" TIMESTAMP="Thu Jan  1 00:00:00 2026" VIVADOVERSION="2022.2">
  <SYSTEMINFO ARCH="zynquplus" DEVICE="xck26" NAME="mcf_ps" PACKAGE="sfvc784" SPEEDGRADE="-2LV"/>
  <EXTERNALPORTS>
    <PORT DIR="O" NAME="pl_clk0" SIGIS="clk" SIGNAME="ps_pl_clk0"/>
  </EXTERNALPORTS>
  <MODULES>
    <MODULE COREREVISION="1" FULLNAME="/{cell}" HWVERSION="1.0" INSTANCE="{cell}" IPTYPE="PERIPHERAL"
            IS_ENABLE="1" MODCLASS="PERIPHERAL" MODTYPE="{module}" VLNV="xilinx.com:module_ref:{module}:1.0">
      <PARAMETERS>
        <PARAMETER NAME="Component_Name" VALUE="mcf_ps_{cell}_0"/>
      </PARAMETERS>
      <PORTS>
        <PORT DIR="I" NAME="clk" SIGIS="clk" SIGNAME="ps_pl_clk0"/>
        <PORT DIR="O" NAME="irq" SIGIS="INTERRUPT" SENSITIVITY="LEVEL_HIGH" SIGNAME="{cell}_irq"/>
      </PORTS>
    </MODULE>
    <MODULE COREREVISION="1" FULLNAME="/ps" HWVERSION="3.4" INSTANCE="ps" IPTYPE="PERIPHERAL"
            IS_ENABLE="1" MODCLASS="PROCESSOR" MODTYPE="zynq_ultra_ps_e" VLNV="xilinx.com:ip:zynq_ultra_ps_e:3.4">
      <PARAMETERS>
{clocks}      </PARAMETERS>
      <PORTS>
        <PORT DIR="O" NAME="pl_clk0" SIGIS="clk" SIGNAME="ps_pl_clk0"/>
        <PORT DIR="I" LEFT="0" NAME="pl_ps_irq0" RIGHT="0" SENSITIVITY="LEVEL_HIGH" SIGIS="INTERRUPT" SIGNAME="{cell}_irq"/>
      </PORTS>
      <MEMORYMAP>
        <MEMRANGE ADDRESSBLOCK="reg0" BASENAME="C_BASEADDR" BASEVALUE="0x{base:08X}" HIGHNAME="C_HIGHADDR"
                  HIGHVALUE="0x{base + size - 1:08X}" INSTANCE="{cell}" IS_DATA="TRUE" IS_INSTRUCTION="TRUE"
                  MASTERBUSINTERFACE="M_AXI_HPM0_FPD" MEMTYPE="REGISTER" SLAVEBUSINTERFACE="s_axi"/>
      </MEMORYMAP>
    </MODULE>
  </MODULES>
</EDKSYSTEM>
"""
