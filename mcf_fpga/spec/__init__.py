"""What the hardware (``hdl``), the reference (``golden``) and the host must agree on.

Pure Python: this package imports nothing of the project, nor torch or Amaranth
(tests/test_layering.py checks it). One concept a module:

* ``spec.meta``         the Meta wire format: its enums, field table, ``MetaParams``, ``MetaFields``
* ``spec.link``         the reliable link's frame: EtherType, offsets, drop causes, MAC addresses
* ``spec.nic``          NIC configuration, error causes and their precedence, the register map
* ``spec.topology``     port numbering, topologies, route-table entries and tables
* ``spec.kvpool``       KV-pool opcodes, directory states, response statuses, events
* ``spec.kvregion``     the KV region in DDR: slot and row addresses, the row format
* ``spec.kvinstall``    the KV install packet's header
* ``spec.rx_placer``    the RX placer's packet key, landing size and parameter limits
* ``spec.dma``          DMA status codes, engine parameters, descriptor check, burst split
* ``spec.loader``       stream-loader destinations, the memory image of a load, its check
* ``spec.token_picker`` token-picker modes, error causes and limits
* ``spec.instr``        the engine's instruction word: fields, widths, packing
* ``spec.cmdstream``    the command stream's records: kinds, header word, fields, error causes
* ``spec.numerics``     number formats: fraction bits, widths, lookup tables
* ``spec.regmap``       registers, their fields and windows, a slave's register map (the
                        hardware's register files and every generated description read it)
"""
