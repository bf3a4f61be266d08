"""App ``doc``, spread over two partitions, for ``jsworker doctor``."""

from jsworker import App

app = App("doc", partitions=2)


@app.task
async def work(n: int) -> int:
    return n
