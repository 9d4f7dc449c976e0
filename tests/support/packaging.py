"""Building the project's wheel in tests as the image's build step does, with nothing fetched."""

from __future__ import annotations

import os


def offline_pip_env() -> dict[str, str]:
    """This process's environment for pip with no index and no build isolation: the build backend is the dev
    extra's setuptools. (pip reads PIP_NO_BUILD_ISOLATION=0 as --no-build-isolation: its "no-" options invert.)"""
    return {**os.environ, "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1"}
