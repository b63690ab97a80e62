#!/usr/bin/env python3
"""Moved to tests/support/bench/catalog.py (`python -m tests.support.bench.catalog`); this keeps the command lines of
earlier notes, runbooks and checks working, with the same arguments."""
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests.support
runpy.run_module("tests.support.bench.catalog", run_name="__main__", alter_sys=True)
