"""A top packaged as a Vivado IP, and its register map for firmware writers.

* ``verilog_ports``   the ports of a module of a Verilog text (header order, direction, width)
* ``interfaces``      the top's AXI4 / AXI4-Lite / AXI4-Stream / clock / reset / interrupt
                      interfaces, checked against the Verilog's ports
* ``component_xml``   the IP-XACT ``component.xml`` (IEEE 1685-2009, as Vivado's ``ipx::`` writes)
* ``wrapper``         a Verilog wrapper with ``X_INTERFACE_INFO``/``X_INTERFACE_PARAMETER``
* ``regmap_header``   the register map as a C header
* ``regmap_markdown`` the register map as a Markdown page
* ``package_ip``      the IP directory: all of the above (``mcf verilog BLOCK --ip DIR``)

Register maps are ``spec.regmap.RegisterMap``s from a top's ``register_map()`` (e.g.
``hdl.node.Node.register_map``), built from the definitions the hardware decodes.
"""
