"""The Meta header, two ways: golden.header's integer shifts and hdl.meta's Amaranth layout,
both built from spec.meta.FIELDS, agree bit for bit."""
import pytest
from hypothesis import given, strategies as st

from mcf_fpga.spec.meta import MetaParams, MetaFields, MetaOp, Stage, Collective, ReduceOp, DEFAULT_PARAMS
from mcf_fpga.hdl.meta import meta_layout
from mcf_fpga.golden.header import pack_int, unpack_int, pack_header, unpack_header


@st.composite
def params_and_meta(draw, known_op=True):
    p = MetaParams(node_bits=draw(st.integers(4, 16)), route_bits=draw(st.integers(1, 16)),
                   layer_bits=draw(st.integers(1, 16)), block_bits=draw(st.integers(20, 32)),
                   length_bits=draw(st.integers(8, 24)))
    u = lambda bits: draw(st.integers(0, (1 << bits) - 1))
    m = MetaFields(op=draw(st.sampled_from(list(MetaOp))) if known_op else u(4),
                   stage=draw(st.sampled_from(list(Stage))), src=u(p.node_bits), dst=u(p.node_bits),
                   kv_id=(u(p.layer_bits), u(p.block_bits)), route_id=u(p.route_bits),
                   collective=draw(st.sampled_from(list(Collective))),
                   reduce_op=draw(st.sampled_from(list(ReduceOp))), length=u(p.length_bits))
    return p, m


@given(params_and_meta())
def test_golden_pack_matches_hdl_layout(pm):
    """hdl's pack (the layout's const) and golden's pack give the same bits, and golden unpacks
    hdl's bits to the same fields."""
    p, m = pm
    view = meta_layout(p).const(m.as_dict())
    assert view.as_value().value == pack_int(m, p)
    assert unpack_int(view.as_value().value, p) == m
    assert view.kv_id.layer == m.kv_id[0] and view.kv_id.block == m.kv_id[1]
    assert view.src == m.src and view.length == m.length


def test_hdl_layout_follows_spec_fields():
    """The layout's enumerated fields have the spec's members and widths."""
    from mcf_fpga.spec.meta import FIELD_ENUMS, FIELDS
    layout = meta_layout(DEFAULT_PARAMS)
    for name, width in FIELDS:
        if name in FIELD_ENUMS:
            shape = layout[name].shape
            assert shape.as_shape().width == width
            assert {m.name: m.value for m in shape} == {m.name: m.value for m in FIELD_ENUMS[name]}


@given(params_and_meta(known_op=False))
def test_header_roundtrip(pm):
    p, m = pm
    h = pack_header(m, p)
    assert len(h) == p.header_bytes and p.header_bytes % 8 == 0
    assert unpack_header(h, p) == m
    assert unpack_int(pack_int(m, p), p) == m


def test_defaults_meet_minimums():
    p = DEFAULT_PARAMS
    assert p.max_nodes >= 16 and (1 << p.block_bits) >= 2 ** 20
    assert p.header_bytes == 16 and meta_layout(p).size == p.header_bits
    assert p.header_beats(64) == 2 and p.header_beats(128) == 1 and p.header_beats(256) == 1


@pytest.mark.parametrize("field,value,msg", [
    ("src", 256, "Meta.src must be an integer in 0..255"),
    ("length", 1 << 16, "Meta.length must be an integer in 0..65535"),
    ("kv_id", (0, 1 << 24), "Meta.kv_id.block"),
    ("op", 16, "Meta.op"),
])
def test_out_of_range_names_field(field, value, msg):
    with pytest.raises(ValueError, match=msg.replace(".", r"\.")):
        pack_header(MetaFields().replace(**{field: value}))


def test_bad_params_name_field():
    with pytest.raises(ValueError, match="node_bits"):
        MetaParams(node_bits=3)
    with pytest.raises(ValueError, match="block_bits"):
        MetaParams(block_bits=19)
    with pytest.raises(ValueError, match="exactly 16 bytes"):
        unpack_header(b"\0" * 15)
