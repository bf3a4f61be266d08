"""One module per figure family; each exposes ``run(ctx) -> list[Measurement]``."""
