"""Answer units may be embedded in bfloat16 where the CPU has it; documents and questions never
are, since their vectors meet the index's."""

from __future__ import annotations

import numpy as np
import pytest

from citewise.errors import ConfigError
from citewise.index.dense import DenseEncoder, unit_precision

UNITS = [
    "Run `kubectl -n redis get pods` and check that the primary is Ready.",
    "If the replica lags more than 30 seconds, fail over with `redis-cli failover`.",
    "Page the database on-call engineer through the DBA escalation policy.",
    "Rotate the vault keys from the security console, then restart the workers.",
    "Grow the volume by 20% and watch the disk usage alert clear within ten minutes.",
]


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu vme avx2 avx512f avx512_bf16 avx512_vnni", "bfloat16"),
    ("fpu vme avx2 amx_bf16 amx_tile", "bfloat16"),
    ("fpu vme avx2 avx512f avx512_vnni", "float32"),
])
def test_auto_takes_bfloat16_only_where_the_cpu_has_it(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert unit_precision("auto", cpuinfo) == expected
    assert unit_precision("float32", cpuinfo) == "float32"
    assert unit_precision("bfloat16", cpuinfo) == "bfloat16"


def test_no_cpuinfo_means_float32(tmp_path):
    assert unit_precision("auto", tmp_path / "absent") == "float32"


def test_an_unknown_precision_is_refused_with_the_choices():
    with pytest.raises(ConfigError) as refused:
        unit_precision("fp8")
    assert "fp8" in refused.value.message and "bfloat16" in (refused.value.hint or "")


def test_units_in_bfloat16_stay_close_and_nothing_else_changes(dense):
    half = DenseEncoder(units="bfloat16")
    full = DenseEncoder(units="float32")
    half.warm_up()  # torch loaded: several units at once go to the model, not to numpy
    assert half.units == "bfloat16" and full.units == "float32"

    a = half.embed_documents(UNITS, use_cache=False)
    b = full.embed_documents(UNITS, use_cache=False)
    assert a.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.999, cosines
    assert np.abs(a - b).max() > 1e-4, "the units did not go through the bfloat16 copy"
    # The question's best unit is the same either way.
    q = np.array(full.embed_query("how do I fail over redis when the replica lags?"))
    assert int(np.argmax(a @ q)) == int(np.argmax(b @ q)) == 1

    # Questions and documents: float32, bit for bit.
    question = "what does the disk usage alert mean?"
    assert half.embed_query(question) == full.embed_query(question)
    np.testing.assert_array_equal(half.embed_documents(UNITS), full.embed_documents(UNITS))
