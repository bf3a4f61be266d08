import json
from functools import partial

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .tasks import send_receipt


@csrf_exempt  # an API endpoint of the example; a real one authenticates its callers
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Store an order and send its receipt as a job once the order is committed: a request
    that fails after the row was written rolls back, and enqueues nothing."""
    data = json.loads(request.body)
    try:
        with transaction.atomic():
            order = Order.objects.create(email=data["email"])
            # Not send_receipt.delay(order.pk) here: a worker could run the job before the
            # commit (and find no order), or the transaction could still roll back.
            transaction.on_commit(partial(send_receipt.delay, order.pk))
            if data.get("coupon") == "EXPIRED":
                raise ValueError("this coupon has expired")
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"order": order.pk}, status=201)


@require_GET
def order(request: HttpRequest, pk: int) -> JsonResponse:
    found = Order.objects.filter(pk=pk).values("email", "receipt_sent").first()
    if found is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse(found)
