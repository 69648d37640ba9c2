"""The demo, ingested once per session (``demo_kb``), checked to have ingested cleanly."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def demo(demo_kb):
    services, reports = demo_kb
    for report in reports:
        assert report.status == "succeeded", report.summary()
    return services
