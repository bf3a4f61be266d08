"""What the App (:mod:`jsworker._app`, the composition root) is made of: its options and its
tasks' options, the view lower modules have of it, its start and stop hooks, its streams and
consumers as specs (``layout``), its connections and the sync bridge, the provisioning step and
each role's permissions, middleware, its serializer, a job's state and status, and the status
of its queues."""
