"""spec.regmap: definitions are checked (one ValueError naming the register or window and the
limit), flattened in address order, and survive the JSON round trip the build uses."""
import pytest

from mcf_fpga.spec.regmap import Access, Field, Register, RegisterMap, Window, from_json_dict, to_json_dict


def _map():
    a = Window("a", 0x000, 8, [Register("ctrl", 0x4, fields=(Field("go", 0), Field("mode", 4, 3, "m"))),
                               Register("id", 0x0, Access.RO, reset=0x12, width=8)], doc="first")
    b = Window("b", 0x100, 4, [Register("pop", 0x8, Access.WO, width=1, doc="write 1")])
    return RegisterMap("blk", 12, [a, b], doc="a block")


def test_flat_lists_every_register_by_address_with_window_names():
    flat = _map().flat()
    assert [(f.name, f.address) for f in flat] == [("a_id", 0x0), ("a_ctrl", 0x4), ("b_pop", 0x108)]
    assert flat[1].register.bit_fields()[1].mask == 0x70
    assert flat[0].register.bit_fields() == (Field("value", 0, 8, ""),) and flat[0].register.mask == 0xFF


def test_json_round_trip_is_equal():
    m = _map()
    assert from_json_dict(to_json_dict(m)) == m
    with pytest.raises(ValueError, match="missing or mistyped"):
        from_json_dict({"name": "x"})


@pytest.mark.parametrize("make, message", [
    (lambda: Register("r", 2), "offset must be a non-negative multiple of 4"),
    (lambda: Register("r", 0, width=33), "width must be in 1..32"),
    (lambda: Register("r", 0, width=4, reset=16), "reset 0x10 does not fit its width of 4 bits"),
    (lambda: Register("r", 0, width=8, fields=(Field("f", 6, 3),)), "field f bits \\[6, 9\\) outside"),
    (lambda: Register("r", 0, fields=(Field("f", 0, 4), Field("g", 3))), "field g overlaps"),
    (lambda: Window("w", 0x10, 8), "base 0x10 must be a non-negative multiple of its size 0x100"),
    (lambda: Window("w", 0, 4, [Register("r", 0x10)]), "register r offset 0x10 outside its 0x10 bytes"),
    (lambda: Window("w", 0, 8, [Register("r", 0), Register("s", 0)]), "share offset 0x0"),
    (lambda: RegisterMap("m", 8, [Window("a", 0, 8), Window("b", 0, 4)]), "windows a and b overlap"),
    (lambda: RegisterMap("m", 8, [Window("a", 0x100, 8)]), "window a \\[0x100, 0x200\\) exceeds its 0x100 bytes"),
    (lambda: RegisterMap("m", 12, [Window("a", 0, 4, [Register("b_c", 0)]),
                                   Window("a_b", 0x10, 4, [Register("c", 0)])]), "flat register names repeat: a_b_c"),
])
def test_bad_definitions_name_the_field_and_limit(make, message):
    with pytest.raises(ValueError, match=message):
        make()
