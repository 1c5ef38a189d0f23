"""The HTTP API of `compactd serve` (FastAPI + uvicorn), over worker/service/.

- app.py: create_app (the wiring) and the uvicorn config;
- routes.py: the routes, on APIRouters, the service reached through Depends;
- schemas.py: the request and response models;
- errors.py: the one exception -> status table and the error envelope;
- guards.py: body limit, API key, header deadline, loopback bind check.

Import from the modules; this package re-exports nothing, so the CLI pays for FastAPI only
when it serves.
"""
