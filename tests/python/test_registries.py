"""Meta-tests: every row of ckc's registries (`ckc list --json`) is covered where the project promises it is.

    a family      has a parity case against transformers (hf_cases.CASES), a tiny config under models/, and a GGUF
                  architecture or a stated exemption
    an op         the exporter makes is mapped from an ATen op in python/ckc/export.py (and every op the exporter
                  names exists); the others say what makes them (the LLM front end, a pass)
    a pass        has an IR-text test (graph in, expected graph out: check_pass in tests/unit) or a stated exemption

A new row that forgets one of these fails here, naming what is missing.
"""
import os
import re

from conftest import ROOT, registry
from hf_cases import CASES

# families that have no GGUF architecture, and why (none today)
NO_GGUF = {}
# passes tested otherwise than by an IR-text case, and where
NO_IR_TEXT = {"fold_layers": "a pass over the whole Program: tests/unit/test_graph_frontend.cpp folds exported layers"}


def test_every_family_has_a_parity_case_a_tiny_config_and_a_gguf_row():
    families = [f["model_type"] for f in registry()["families"]]
    assert len(families) >= 8
    tested = {c["model_type"] for c in CASES.values()}
    for f in registry()["families"]:
        name = f["model_type"]
        assert name in tested, f"family {name} has no case in tests/python/hf_cases.py (parity with transformers)"
        assert os.path.exists(os.path.join(ROOT, "models", f"tiny-{name}", "config.json")), \
            f"family {name} has no models/tiny-{name}/config.json"
        assert f["gguf"] or name in NO_GGUF, f"family {name} has no GGUF architecture (gguf_arch.cpp) nor an exemption"


def exporter_ops():
    """The IR op names python/ckc/export.py writes (string literals of op names)."""
    with open(os.path.join(ROOT, "python", "ckc", "export.py"), encoding="utf-8") as f:
        text = f.read()
    names = {op["name"] for op in registry()["ops"]}
    return {w for w in re.findall(r'"([A-Z][A-Z0-9_]+)"', text) if w in names}


def test_every_exporter_op_is_mapped_from_aten_and_every_other_says_what_makes_it():
    ops = registry()["ops"]
    mapped = exporter_ops()
    for op in ops:
        if op["made_by"] == "exporter":
            assert op["name"] in mapped, (f"op {op['name']} is made by the exporter (ir/ops.cpp) but no ATen op maps "
                                          "to it in python/ckc/export.py: map one, or mark the row .llm() / .by_pass()")
        else:
            assert op["made_by"] in ("llm", "pass"), op
    # the tables' rows are exported ops: a new unary / binary op or reduction needs its ATen name
    for op in ops:
        if op["kind"] in ("unary", "binary", "reduce"):
            assert op["made_by"] == "exporter" and op["name"] in mapped, op["name"]


def test_every_pass_has_an_ir_text_test():
    text = ""
    unit = os.path.join(ROOT, "tests", "unit")
    for f in os.listdir(unit):
        if f.endswith(".cpp"):
            with open(os.path.join(unit, f), encoding="utf-8") as fh:
                text += fh.read()
    tested = set(re.findall(r'check_pass\("([a-z_]+)"', text))
    for p in registry()["passes"]:
        name = p["name"]
        assert name in tested or name in NO_IR_TEXT, f"pass {name} has no IR-text test (check_pass in tests/unit)"
