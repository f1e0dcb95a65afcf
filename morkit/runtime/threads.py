"""BLAS threads held to one around small matrix work, where a second thread costs more than it saves."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _controller() -> Any:
    """The BLAS thread controller, found once when first needed (after numpy has loaded its BLAS)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context manager limiting BLAS to one thread (process-wide while it holds; about 13 µs to enter)."""
    return _controller().limit(limits=1, user_api="blas")
