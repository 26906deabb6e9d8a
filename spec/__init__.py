"""What the hardware (``hdl``), the reference (``golden``) and the host must agree on.

Pure Python: this package imports nothing of the project, nor torch or Amaranth
(tests/test_layering.py checks it). One concept a module:

* ``spec.meta``   the Meta wire format: its enums, field table, ``MetaParams``, ``MetaFields``
* ``spec.link``   the reliable link's frame: EtherType, offsets, drop causes, MAC addresses
* ``spec.nic``    NIC configuration, error causes and their precedence, the register map
"""
