"""Running and watching many worker processes: the supervisor of one machine's fleet, and the
registry that shows every worker of an app from anywhere in the cluster."""
