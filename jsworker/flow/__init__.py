"""Flow control: limits on how fast and how many jobs start, kept on the server so that they
hold across every worker process and machine."""
