"""The payment-SMS task: one SMS per order, however often the confirmation is enqueued.

``SMS_REDIS`` (a redis URL without a database) is the broker (db 1), result backend (db 2)
and lock store (db 3); ``SMS_LOG`` is the file the fake SMS gateway appends to.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from celery import Celery

from lockkit_celery import locked_task

REDIS = os.environ.get("SMS_REDIS", "redis://127.0.0.1:6379")
SMS_LOG = Path(os.environ.get("SMS_LOG", "sms.log"))
#: Short, so that the slow order shows the broker handing a running task out again.
VISIBILITY_TIMEOUT = 3

#: ``SMS_EMBEDDED`` (a directory): no server at all, a filesystem broker, results and locks
#: in files under it (one host only).
EMBEDDED = os.environ.get("SMS_EMBEDDED")

if EMBEDDED:
    app = Celery("celery_sms", broker="filesystem://", backend=f"file://{EMBEDDED}/results")
    app.conf.broker_transport_options = {
        "data_folder_in": f"{EMBEDDED}/queue",
        "data_folder_out": f"{EMBEDDED}/queue",
        "processed_folder": f"{EMBEDDED}/processed",
        # The exchange tables: kombu's default is "control" under the current directory.
        "control_folder": f"{EMBEDDED}/control",
        "store_processed": False,
    }
    app.conf.lockkit_url = f"file://{EMBEDDED}/locks"
else:
    app = Celery("celery_sms", broker=f"{REDIS}/1", backend=f"{REDIS}/2")
    app.conf.lockkit_url = f"{REDIS}/3"
    app.conf.broker_transport_options = {
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": 0.5,
    }
app.conf.update(
    lockkit_namespace="shop",
    # SMS_UNLOCKED=1 (``--without-locks``) shows the same story without lockkit.
    lockkit_enabled=os.environ.get("SMS_UNLOCKED") != "1",
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def _first_time(name: str) -> bool:
    """True the first time ``name`` is asked for, in any process (a file created with O_EXCL)."""
    try:
        os.close(os.open(SMS_LOG.parent / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def gateway_send(phone: str, text: str, idempotency_key: str) -> None:
    """The fake SMS provider: one line per message sent, appended atomically (O_APPEND).

    A real provider would also drop a second message with the same ``idempotency_key``:
    that covers the one gap ``once`` leaves (a crash after the send, before the marker).
    """
    line = f"{phone}\t{text}\t{idempotency_key}\n".encode()
    fd = os.open(SMS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@locked_task(
    app=app,
    name="send_payment_sms",
    unique_on=["order_id"],
    once=24 * 3600,
    ttl=4,
    acks_late=True,
    reject_on_worker_lost=True,
)
def send_payment_sms(order_id: int, phone: str, slow: float = 0.0, crash: bool = False) -> str:
    """Tell the customer their payment for ``order_id`` arrived."""
    if crash and _first_time(f"crashed-{order_id}"):
        os.kill(os.getpid(), signal.SIGKILL)  # the pool child dies before sending
    time.sleep(slow)
    gateway_send(phone, f"Payment received for order {order_id}", f"payment-sms-{order_id}")
    return f"sent to {phone}"
