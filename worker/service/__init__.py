"""The service behind `compactd serve`, with no HTTP in it.

- store.py: persistence (SQLite; schema.py holds the SQL, records.py the record types, the
  errors and the one JobStatus enum);
- history.py: search and read back a session's raw history;
- scheduler.py: the two lanes in front of the model (queues, cancellation, preemption);
- metrics.py: the Prometheus registry;
- intake.py: a request body as a Session;
- service.py: CompactdService, the only object the HTTP routes call.

Import from the modules themselves; this package re-exports nothing, so that importing the
store does not load the pipeline.
"""
