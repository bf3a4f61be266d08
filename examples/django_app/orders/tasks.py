"""The orders app's tasks. A task gets ids, not model instances: the row is read when the job
runs, so it sees what was committed, not what the request had in memory."""

from shop.jobs import app

from .models import Order


@app.task(max_retries=3)
def send_receipt(order_id: int) -> None:
    """Pretends to mail the receipt, and marks the order."""
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
