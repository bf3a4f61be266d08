"""A job after its enqueue: its record and result, its status, and cancelling it."""
