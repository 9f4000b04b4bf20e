"""outputs.tables.write_csv writes what pandas' to_csv(index=False) writes, byte for byte: numbers
of every kind it formats itself, text that needs quoting, missing values, and the cases it hands
to pandas (other types, line breaks in text, one column, no rows)."""

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.outputs.tables import write_csv

FLOATS = [0.1, 1e16, 1e-5, 1.2345678901234568e17, 5e-324, 1.0, -0.0, 2.5e-7, 1e22, np.nan, np.inf, -np.inf, 123.456, -7.0]


def _frames():
    n = len(FLOATS)
    rng = np.random.default_rng(21)
    yield pd.DataFrame({"x_ms": FLOATS, "i": np.arange(n) - 5, "b": np.arange(n) % 3 == 0})
    yield pd.DataFrame({"f32": np.array(FLOATS, dtype=np.float32), "u8": np.arange(n, dtype=np.uint8),
                        "i8": np.arange(n, dtype=np.int8)})
    yield pd.DataFrame({"r": rng.normal(size=500) * 10.0 ** rng.integers(-8, 18, 500), "k": rng.integers(-10**12, 10**12, 500)})
    names = ["plain", "a, b", 'say "hi"', "", None, "x,\"y\"", "ünï ©", " lead", np.nan, "tab\there", "semi;colon", "end,"]
    for dtype in (object, "string", pd.StringDtype("pyarrow"), pd.StringDtype("python")):
        yield pd.DataFrame({"name, with comma": pd.Series(names, dtype=dtype), 'q"uote': np.arange(len(names), dtype=float)})
    yield pd.DataFrame({"node": [None, None], "v": [1.5, 2.5]})
    yield pd.DataFrame({f"c{i}": rng.normal(size=30_000) for i in range(7)})  # chunks of 14,285 rows
    # handed to pandas
    yield pd.DataFrame({"mixed": ["a", 1, 2.5], "v": [1, 2, 3]})
    yield pd.DataFrame({"text": ["line\nbreak", "cr\rhere", "ok"], "v": [1, 2, 3]})
    yield pd.DataFrame({"only": ["", "a", None]})
    yield pd.DataFrame({"a": pd.Series([], dtype=float), "b": pd.Series([], dtype=object)})
    yield pd.DataFrame()
    yield pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64"), "c": pd.Categorical(["x", "y", "x"])})
    yield pd.DataFrame({"t": pd.to_datetime(["2024-01-01", None, "2025-06-30"]), "v": [1.0, 2.0, 3.0]})


FAST = 9
"""The first FAST frames of _frames are written without pandas."""


@pytest.mark.parametrize("i", range(len(list(_frames()))))
def test_write_csv_is_pandas_to_csv(tmp_path, monkeypatch, i):
    df = list(_frames())[i]
    df.to_csv(tmp_path / "pandas.csv", index=False)
    if i < FAST:
        monkeypatch.setattr(pd.DataFrame, "to_csv", lambda *a, **k: pytest.fail("handed to pandas"))
    write_csv(df, tmp_path / "ours.csv")
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
