"""A FastAPI app whose order endpoints run under a lock per order, awaited on the event loop.

``LOCKKIT_URL=redis://127.0.0.1:6379/0 uvicorn sample_projects.fastapi_orders.app:app``; the
default store is ``file://`` under the system temp dir. A second request for an order that is
being paid is answered 409 with ``Retry-After`` at once (``timeout=0``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException

from lockkit_core import Lock, LockKit

kit = LockKit(os.environ.get("LOCKKIT_URL", "file://"), namespace="orders", ttl=30)
app = FastAPI()


async def order_lock(order_id: int) -> AsyncIterator[Lock]:
    """A dependency that yields the held lock of ``order_id``, or answers 409 when busy."""
    lock = kit.lock(f"order:{order_id}", timeout=0)
    if not await lock.aacquire():
        raise HTTPException(
            status_code=409,
            detail=f"order {order_id} is being changed by another request",
            headers={"Retry-After": "1"},
        )
    try:
        yield lock
    finally:
        await lock.arelease()


@app.post("/orders/{order_id}/pay")
async def pay(
    order_id: int, lock: Annotated[Lock, Depends(order_lock)], delay: float = 0.0
) -> dict[str, object]:
    await asyncio.sleep(delay)  # stands for the payment provider's round trip
    return {"order": order_id, "paid": True, "fence": lock.token}


@app.get("/health")
async def health() -> dict[str, bool]:
    return {"ok": True}
