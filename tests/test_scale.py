"""The scale benchmark (`bench/scale.py`) in its smoke size: 5k objects on S3, 3k on lakeFS.

Its checks: the iterator's order and classes equal a serial listing's, listing requests stay
within `N/1000 + prefixes`, and a second construction from the same lakeFS commit (another
process, the same listing cache folder) makes no listing request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_scale_smoke_lists_in_parallel_and_reads_lakefs_commits_from_disk(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--smoke", "--out", str(tmp_path),
         "--data", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "scale-latest.json").read_text())
    checks = report["checks"]
    assert checks and all(checks.values()), checks
    assert any("order equals a serial listing" in name for name in checks)
    assert any("makes no listing call" in name for name in checks)
    by_name = {r["scenario"]: r for r in report["results"]}
    directory, baseline = by_name["directory"], by_name["paginator (baseline)"]
    assert directory["samples"] == baseline["samples"] == 5000
    assert directory["requests"]["LIST"] <= 5000 / 1000 + 10 + 2
    assert by_name["subsets"]["validation_requests"].get("LIST", 0) == 0
    warm = by_name["lakefs warm (cache)"]
    assert warm["requests"].get("LIST", 0) == 0 and warm["samples"] == 3000
    assert by_name["lakefs cold"]["requests"]["LIST"] <= 3000 / 1000 + 10 + 2
    assert (tmp_path / "scale-latest.md").read_text().startswith("| objects |")
