"""The worker runtime: pulling jobs, running them under limits, and settling them."""
