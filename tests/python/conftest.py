"""Shared fixtures: where the pagoda binary and ../shared are."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pagoda_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("PAGODA_BIN", ROOT / "build" / "pagoda"))
    if not path.exists():
        pytest.fail(f"pagoda binary not found at {path}: build first (scripts/setup)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))
    if not path.is_dir():
        pytest.skip("*** ../shared is absent: SKIPPING tests on real data ***")
    return path
